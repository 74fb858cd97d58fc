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
 *
 * Which devices: the CPU backend has one device, "cpu", or N of them ("cpu:0" .. "cpu:N-1",
 * each with its own threads and byte count) when TENSORD_CPU_DEVICES=N (tensord
 * --cpu-devices). TENSORD_DEVICES=LIST (tensord --devices), a comma-separated list of
 * entries as td__device_list_match takes them, opens only the devices it names; an entry
 * that names no device of the host fails td__devices_init with TD_EINVAL ("device list entry
 * 'cuda:3' names no device of this host (it has: ...)"). Devices keep their names whatever
 * the filter hides.
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
/* Find by name ("cpu", "cpu:0", "cuda:1"; "cpu" is cpu:0 whatever the CPU device count);
 * NULL if absent. NULL or "" gives td__device_default(). */
td__device *td__device_find(const char *name);
/* The default device: the first accelerator (td__device_is_accelerator) in registry order
 * (cuda, then hip, then vulkan devices, each in index order), else the first device (the
 * CPU). NULL before init or without devices. */
td__device *td__device_default(void);
/* Whether `d` is an accelerator: any device not of the CPU backend, except a software
 * Vulkan implementation (Mesa's lavapipe, whose device is named "llvmpipe"). */
bool td__device_is_accelerator(const td__device *d);
/* Whether a device-list entry (TENSORD_DEVICES, a tenant's devices= in the tokens file)
 * names `d`: a kind alone ("cpu", "cuda") names every device of that kind, anything else
 * names a device as td__device_find takes it ("cpu:1", "cuda:0"). */
bool td__device_list_match(const td__device *d, const char *entry);
/* Whether a session's device string asks the server to place it: "auto" (the accelerators
 * when there is one, else the CPU devices: a software Vulkan device is taken only when
 * named), or a GPU kind without an index: "cuda", "hip", "vulkan" (any device of that
 * kind). "cpu" is not a placement: it names cpu:0. */
bool td__device_is_placement(const char *name);
/* Whether `d` is a candidate for placement request `request` (td__device_is_placement). */
bool td__device_place_candidate(const td__device *d, const char *request);
#endif
