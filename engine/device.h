/* device.h — the registry of devices this process can run on.
 * At first use, every compiled-in backend and every loadable backend module is asked for
 * its device count and each device is opened once; names are "<kind>:<index>", with "cpu"
 * as the CPU device's name (and "cpu:0" accepted as an alias), GPUs "cuda:0", "cuda:1", ...
 *
 * Backend modules are shared objects named tensord-backend-<kind>.so that export
 *     const td__backend *td_backend_entry(void);
 * built from the same tree as the binary that loads them (the table layout is not
 * versioned). They are looked for, first module of a kind winning, in:
 *  1. the directories of $TENSORD_BACKEND_DIR (colon-separated) when it is set — then
 *     nowhere else (set it empty to load no modules);
 *  2. otherwise, when the executable or libtensord.so lies in a tensord build tree (an
 *     ancestor directory, up to 5 levels up, holding meson-private/ and
 *     engine/libtd_engine.a), that tree's backends/<kind>/ directories — this covers
 *     build/server/tensord, build/tools/tensorctl, build/examples/... and
 *     build/tests/.../test programs;
 *  3. otherwise the install directory TD_BACKEND_DIR (<prefix>/<libdir>/tensord).
 * A module that fails to load (e.g. libcudart missing) gives one info log line; a backend
 * with no devices (no driver) gives "backend <kind>: no devices" at info level.
 * Thread-safety: td__devices_init is idempotent and thread-safe; lookups after it are
 * read-only. */
#ifndef TD_ENGINE_DEVICE_H
#define TD_ENGINE_DEVICE_H

#include "backends/backend.h"

td_status td__devices_init(char *err, size_t errlen);
/* Whether a backend of this kind ("cpu", "cuda", "hip") is loaded — compiled in, or a
 * module that loaded — whether or not it has devices. Call after td__devices_init. */
bool td__backend_loaded(const char *kind);
int td__device_count(void);
td__device *td__device_at(int i);
/* Find by name ("cpu", "cpu:0", "cuda:1"); NULL if absent. NULL or "" gives device 0. */
td__device *td__device_find(const char *name);
#endif
