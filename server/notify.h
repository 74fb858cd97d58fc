/* notify.h — systemd service notifications (sd_notify): readiness, stopping, watchdog.
 *
 * Built without libsystemd (TD_HAVE_SYSTEMD undefined) every function is a no-op and the
 * watchdog reports "off". Under systemd with Type=notify, READY=1 tells systemd that the
 * port is bound and clients may connect; WatchdogSec= makes systemd restart a server that
 * stops pinging. Thread-safety: call from the loop thread.
 */
#ifndef TD_SERVER_NOTIFY_H
#define TD_SERVER_NOTIFY_H

#include <stdint.h>

void td__notify_ready(const char *status);
void td__notify_stopping(void);
/* Start pinging the watchdog at half its interval when systemd asked for one
 * (WATCHDOG_USEC); logs the interval. Needs the loop (server/loop.h) to be open. */
void td__notify_watchdog_start(void);
#endif
