/* uri.h — td_connect's reading of a session uri, for the tools that must read one the same
 * way (tensorctl info checks the devices an address names). Internal to the tree: not part
 * of include/tensord.h, and no promise to programs outside it. */
#ifndef TD_CLIENT_URI_H
#define TD_CLIENT_URI_H
#include "tensord.h"

#include <stdbool.h>

/* The device list that session uri `uri` names, into device ("" when it names none: the
 * server's default), read as td_connect reads it before it opens anything: local:DEVICE,
 * tensord://HOST:PORT[,HOST:PORT...][/DEVICE], tensords://..., dns:///NAME:PORT[/DEVICE],
 * unix:PATH[/DEVICE] (the last component when its first entry looks like a device), and
 * the list checked by the same rules (entries neither empty nor too long, at most
 * TD_TRANSPORT_MAX_DEVICES, a placement such as auto first only, no device twice). Checks
 * nothing a server decides (whether it has the devices).
 * Returns TD_OK; TD_EINVAL (td_connect would refuse the uri) or TD_ENOMEM, with
 * td_connect_error() saying exactly what td_connect would; device is touched only on TD_OK.
 * Thread-safety: any thread (the message is the calling thread's). */
td_status td__uri_device_list(const char *uri, char device[64]);
/* Whether device names a and b name one device on any server: equal, or "cpu" and "cpu:0"
 * (engine/device.c td__device_find: "cpu" is cpu:0 whatever the CPU device count). Any
 * thread. */
bool td__uri_same_device(const char *a, const char *b);
#endif
