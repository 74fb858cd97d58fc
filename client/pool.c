/* pool.c — a session on one server of a pool: "tensord://h1:7070,h2:7070/DEVICE" (a list)
 * and "dns:///NAME:PORT/DEVICE" (every address the name resolves to).
 *
 * Choice: round robin. Each td_connect to a pool starts at the next member (one counter
 * per process), opens the session there and keeps it there for the session's life (a
 * session's tensors live on one server). A member that is down, draining (it answers
 * UNAVAILABLE "server is shutting down"), full (RESOURCE_EXHAUSTED: its session limit or
 * the tenant's quota there) or that refuses the device (INVALID_ARGUMENT: it has no such
 * device; PERMISSION_DENIED: the tenant may not use it there) is skipped with one warning
 * line naming it and why, and the next member is tried, each once. A bad token
 * (UNAUTHENTICATED) is not skipped: every member would refuse it. Why not least-loaded from
 * GetInfo: its counts are the caller's tenant's only (a tenant sees nothing of another's
 * use), so they do not measure a server's load, and asking every member first costs a
 * round trip each (and a connect timeout for a silent one) on every td_connect. The blob
 * store makes a model re-sent to another server cheap after a failover.
 *
 * DNS: the name is resolved with the system resolver (getaddrinfo: A and AAAA records,
 * /etc/hosts) at every td_connect, so a Kubernetes headless Service's pods are picked up
 * as they come and go; each address becomes a member ("ipv4:10.0.0.5:7070",
 * "ipv6:[fd00::5]:7070", gRPC's target forms), shown and reported by td_context_server
 * without the prefix ("10.0.0.5:7070", "[fd00::5]:7070"). Failures that name the caller
 * (a bad token, a malformed uri) stop at once: every member would give the same answer. */
#include "client/transport.h"
#include "common/alloc.h"
#include "common/log.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define POOL_MAX_MEMBERS 64
#define POOL_MEMBER_MAX 300

static atomic_uint g_next; /* round robin over every pool this process connects to */

/* Resolve "NAME:PORT" (NAME may be [IPv6]) into gRPC targets. Returns the count, or -1
 * with a message. */
static int resolve(const char *hostport, char (*members)[POOL_MEMBER_MAX], char *err,
                   size_t errlen)
{
    char host[256], port[16];
    const char *colon = strrchr(hostport, ':');
    size_t hl = colon != NULL ? (size_t)(colon - hostport) : 0;
    if (colon == NULL || hl == 0 || hl >= sizeof host || strlen(colon + 1) == 0 ||
        strlen(colon + 1) >= sizeof port) {
        snprintf(err, errlen, "dns pool '%s': expected NAME:PORT", hostport);
        return -1;
    }
    memcpy(host, hostport, hl);
    host[hl] = '\0';
    if (host[0] == '[' && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    snprintf(port, sizeof port, "%s", colon + 1);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "dns pool '%s': cannot resolve %s: %s", hostport, host,
                 gai_strerror(rc));
        return -1;
    }
    int n = 0;
    for (struct addrinfo *a = res; a != NULL && n < POOL_MAX_MEMBERS; a = a->ai_next) {
        char ip[INET6_ADDRSTRLEN] = "";
        char m[POOL_MEMBER_MAX];
        if (a->ai_family == AF_INET) {
            const struct sockaddr_in *sin = (const struct sockaddr_in *)a->ai_addr;
            inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof ip);
            snprintf(m, sizeof m, "ipv4:%s:%u", ip, (unsigned)ntohs(sin->sin_port));
        } else if (a->ai_family == AF_INET6) {
            const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)a->ai_addr;
            inet_ntop(AF_INET6, &sin6->sin6_addr, ip, sizeof ip);
            snprintf(m, sizeof m, "ipv6:[%s]:%u", ip, (unsigned)ntohs(sin6->sin6_port));
        } else {
            continue;
        }
        bool dup = false;
        for (int k = 0; k < n && !dup; k++) dup = strcmp(members[k], m) == 0;
        if (!dup) memcpy(members[n++], m, sizeof m);
    }
    freeaddrinfo(res);
    if (n == 0) snprintf(err, errlen, "dns pool '%s': %s has no addresses", hostport, host);
    return n > 0 ? n : -1;
}

/* Split "h1:7070,h2:7070" into members. Returns the count, or -1 with a message. */
static int split(const char *list, char (*members)[POOL_MEMBER_MAX], char *err, size_t errlen)
{
    int n = 0;
    for (const char *p = list; *p != '\0';) {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if (len == 0 || len >= POOL_MEMBER_MAX || memchr(p, ':', len) == NULL) {
            snprintf(err, errlen, "server list '%s': entry %d is not HOST:PORT", list, n + 1);
            return -1;
        }
        if (n == POOL_MAX_MEMBERS) { /* the list is long: not echoed */
            snprintf(err, errlen, "server list has more than %d servers (%zu bytes)",
                     POOL_MAX_MEMBERS, strlen(list));
            return -1;
        }
        memcpy(members[n], p, len);
        members[n][len] = '\0';
        n++;
        p += len + (comma != NULL);
        if (comma != NULL && *p == '\0') {
            snprintf(err, errlen, "server list '%s' ends with a comma", list);
            return -1;
        }
    }
    return n;
}

/* Whether another member may answer differently: a bad token (UNAUTHENTICATED) is refused
 * by all, a tenant refused the device it asked for (PERMISSION_DENIED: the member's
 * devices, or its copy of the tokens file, differ) may be granted it by another. */
static bool try_next(td_status st, bool device_denied)
{
    return st == TD_EUNAVAILABLE || st == TD_EQUOTA || st == TD_ETIMEOUT || st == TD_EINVAL ||
           st == TD_EPROTO || st == TD_EUNSUPPORTED ||
           (st == TD_EUNAUTHENTICATED && device_denied);
}

bool td__pool_is_pool(const char *target)
{
    if (strncmp(target, "unix:", 5) == 0) return false; /* a path may hold commas */
    return strncmp(target, "dns:", 4) == 0 || strchr(target, ',') != NULL;
}

td_status td__pool_open(const char *pool, const char *device, const td_options *opts,
                        td__transport **out, char *err, size_t errlen)
{
    /* as for local: contexts, a library logs warnings only unless TENSORD_LOG_LEVEL asks */
    const char *lvl = getenv("TENSORD_LOG_LEVEL");
    td__log_set_level(lvl == NULL                   ? TD_LOG_WARN
                      : strcmp(lvl, "debug") == 0 ? TD_LOG_DEBUG
                      : strcmp(lvl, "info") == 0  ? TD_LOG_INFO
                      : strcmp(lvl, "error") == 0 ? TD_LOG_ERROR
                                                  : TD_LOG_WARN);
    td__log_set_prefix("libtensord");
    char (*members)[POOL_MEMBER_MAX] = td__calloc(POOL_MAX_MEMBERS, sizeof *members);
    if (members == NULL) {
        snprintf(err, errlen, "out of memory opening a session on pool '%s'", pool);
        return TD_ENOMEM;
    }
    int n;
    if (strncmp(pool, "dns:///", 7) == 0) {
        n = resolve(pool + 7, members, err, errlen);
    } else if (strncmp(pool, "dns://", 6) == 0) { /* dns://AUTHORITY/NAME:PORT */
        const char *slash = strchr(pool + 6, '/');
        n = slash != NULL ? resolve(slash + 1, members, err, errlen) : -1;
        if (slash == NULL) snprintf(err, errlen, "dns pool '%s': expected dns:///NAME:PORT", pool);
    } else {
        n = split(pool, members, err, errlen);
    }
    if (n < 0) {
        td__free(members);
        return TD_EINVAL;
    }
    unsigned start = atomic_fetch_add(&g_next, 1u) % (unsigned)n;
    td_status st = TD_EUNAVAILABLE;
    bool denied = false;
    char last[1024] = "";
    for (int k = 0; k < n; k++) {
        const char *m = members[(start + (unsigned)k) % (unsigned)n];
        char why[1024] = "";
        st = td__remote_open_member(m, device, opts, out, &denied, why, sizeof why);
        /* HOST:PORT as README promises, not gRPC's "ipv4:"/"ipv6:" target prefix */
        const char *shown = strncmp(m, "ipv4:", 5) == 0 || strncmp(m, "ipv6:", 5) == 0 ? m + 5
                                                                                       : m;
        if (st == TD_OK) {
            snprintf((*out)->server, sizeof (*out)->server, "%s", shown);
            td__log(TD_LOG_INFO, "pool %s: session on %s (server %d of %d tried)", pool, shown,
                    k + 1, n);
            td__free(members);
            return TD_OK;
        }
        snprintf(last, sizeof last, "%s", why[0] ? why : td_status_message(st));
        if (!try_next(st, denied)) break;
        td__log(TD_LOG_WARN, "pool %s: skipping server %s (%s): %s%s", pool, shown,
                td_status_name(st), last, k + 1 < n ? "; trying the next" : "");
    }
    if (try_next(st, denied))
        snprintf(err, errlen, "no server of pool '%s' opened the session (%d tried); the last "
                 "said: %s", pool, n, last);
    else
        snprintf(err, errlen, "%s", last);
    td__free(members);
    return st;
}
