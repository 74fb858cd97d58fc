/* status.c — names and messages of td_status, generated from the one X-macro table in
 * tensord.h so they cannot drift from the enum. */
#include "tensord.h"

const char *td_status_name(td_status s)
{
    switch (s) {
#define TD__STATUS_NAME(name, value, grpc, msg)                                            \
    case name:                                                                             \
        return #name;
        TD_STATUS_MAP(TD__STATUS_NAME)
#undef TD__STATUS_NAME
    }
    return "unknown status";
}

const char *td_status_message(td_status s)
{
    switch (s) {
#define TD__STATUS_MSG(name, value, grpc, msg)                                             \
    case name:                                                                             \
        return msg;
        TD_STATUS_MAP(TD__STATUS_MSG)
#undef TD__STATUS_MSG
    }
    return "unknown status";
}
