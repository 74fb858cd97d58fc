/* device.h — the registry of devices this process can run on.
 * At first use, every compiled-in backend is asked for its device count and each device is
 * opened once; names are "<kind>:<index>", with "cpu" as the CPU device's name (and "cpu:0"
 * accepted as an alias). Thread-safety: td__devices_init is idempotent and thread-safe;
 * lookups after it are read-only. */
#ifndef TD_ENGINE_DEVICE_H
#define TD_ENGINE_DEVICE_H

#include "backends/backend.h"

td_status td__devices_init(char *err, size_t errlen);
int td__device_count(void);
td__device *td__device_at(int i);
/* Find by name ("cpu", "cpu:0", "cuda:1"); NULL if absent. NULL or "" gives device 0. */
td__device *td__device_find(const char *name);
#endif
