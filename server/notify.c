/* notify.c — sd_notify wrappers (see notify.h). The watchdog ping runs on the libuv loop,
 * so a wedged loop thread (the thread that owns shutdown and signals) stops the pings and
 * systemd restarts the service. */
#include "server/notify.h"
#include "common/log.h"
#include "server/loop.h"

#ifdef TD_HAVE_SYSTEMD
#include <stdio.h>
#include <systemd/sd-daemon.h>

void td__notify_ready(const char *status)
{
    char msg[512];
    snprintf(msg, sizeof msg, "READY=1\nSTATUS=%s", status ? status : "ready");
    sd_notify(0, msg);
}

void td__notify_stopping(void) { sd_notify(0, "STOPPING=1\nSTATUS=shutting down"); }

static void watchdog_ping(void *arg)
{
    (void)arg;
    sd_notify(0, "WATCHDOG=1");
}

void td__notify_watchdog_start(void)
{
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return;
    uint64_t period_ms = usec / 2000;
    if (period_ms == 0) period_ms = 1;
    if (td__loop_timer_start(0, period_ms, watchdog_ping, NULL, NULL) != TD_OK) {
        td__log(TD_LOG_WARN, "cannot start the watchdog timer; systemd may restart us");
        return;
    }
    td__log(TD_LOG_INFO, "systemd watchdog: pinging every %llu ms",
            (unsigned long long)period_ms);
}
#else
void td__notify_ready(const char *status) { (void)status; }
void td__notify_stopping(void) {}
void td__notify_watchdog_start(void) {}
#endif
