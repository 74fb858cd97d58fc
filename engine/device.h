/* device.h — the registry of devices this process can run on.
 * At first use, every compiled-in backend and every loadable backend module is asked for
 * its device count and each device is opened once; names are "<kind>:<index>", with "cpu"
 * as the CPU device's name (and "cpu:0" accepted as an alias), GPUs "cuda:0", "cuda:1", ...
 *
 * Backend modules are shared objects named tensord-backend-<kind>.so that export
 *     uint32_t td_backend_abi(void);            the TD_BACKEND_ABI_VERSION they were built for
 *     const td__backend *td_backend_entry(void);
 * (TD_BACKEND_MODULE in backends/backend.h defines both). A module whose ABI differs from
 * this engine's, or that exports no td_backend_abi, is refused with a warning naming both
 * versions, before any of its code but td_backend_abi runs. They are looked for, first
 * module of a kind winning, in:
 *  1. the directories of $TENSORD_BACKEND_DIR (colon-separated) when it is set — then
 *     nowhere else (set it empty to load no modules);
 *  2. otherwise, when the executable or libtensord.so lies in a tensord build tree (an
 *     ancestor directory, up to 5 levels up, holding meson-private/ and
 *     engine/libtd_engine.a), that tree's backends/<kind>/ directories — this covers
 *     build/server/tensord, build/tools/tensorctl, build/examples/... and
 *     build/tests/.../test programs;
 *  3. otherwise the install directory TD_BACKEND_DIR (<prefix>/<libdir>/tensord).
 * A module that fails to load (e.g. libcudart missing) gives one info log line; a backend
 * with no devices (no driver) gives "backend <kind>: no devices (<the runtime's reason>)" at
 * info level.
 * Thread-safety: td__devices_init is idempotent and thread-safe; lookups after it are
 * read-only. */
#ifndef TD_ENGINE_DEVICE_H
#define TD_ENGINE_DEVICE_H

#include "backends/backend.h"

td_status td__devices_init(char *err, size_t errlen);
/* dlopen the module at `path` and check it: its ABI (td_backend_abi() must return
 * TD_BACKEND_ABI_VERSION), its td_backend_entry, the required entries of its table. On
 * TD_OK *out is its table and *handle the dlopen handle (the caller dlcloses it when it
 * does not keep the backend). Does not register the backend. Returns TD_OK; TD_ENOTFOUND
 * (cannot be opened, e.g. its runtime library is missing, or no td_backend_entry);
 * TD_EUNSUPPORTED (built for another ABI: "backend module <path> refused: built for
 * backend ABI <n>, this engine has ABI <m> ..."); TD_EINVAL (incomplete table); the
 * message is in err. Thread-safety: any thread (dlopen's rules). */
td_status td__backend_module_open(const char *path, const td__backend **out, void **handle,
                                  char *err, size_t errlen);
/* Whether a backend of this kind ("cpu", "cuda", "hip") is loaded — compiled in, or a
 * module that loaded — whether or not it has devices. Call after td__devices_init. */
bool td__backend_loaded(const char *kind);
int td__device_count(void);
td__device *td__device_at(int i);
/* Find by name ("cpu", "cpu:0", "cuda:1"); NULL if absent. NULL or "" gives device 0. */
td__device *td__device_find(const char *name);
#endif
