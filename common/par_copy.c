/* par_copy.c — see par_copy.h. */
#include "common/par_copy.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

typedef struct part {
    uint8_t *dst;
    const uint8_t *src;
    size_t n;
} part;

static void *copy_part(void *arg)
{
    part *p = arg;
    memcpy(p->dst, p->src, p->n);
    return NULL;
}

static int online_cpus(void)
{
    static atomic_int cached;
    int n = atomic_load(&cached);
    if (n == 0) {
        long v = sysconf(_SC_NPROCESSORS_ONLN);
        n = v < 1 ? 1 : v > 1024 ? 1024 : (int)v;
        atomic_store(&cached, n);
    }
    return n;
}

int td__par_memcpy(void *dst, const void *src, size_t n)
{
    int threads = online_cpus() < TD_PAR_COPY_MAX_THREADS ? online_cpus() : TD_PAR_COPY_MAX_THREADS;
    if (n < TD_PAR_COPY_MIN_BYTES || threads < 2) {
        memcpy(dst, src, n);
        return 1;
    }
    /* parts of whole pages; the last takes the rest */
    size_t per = (n / (size_t)threads) & ~(size_t)4095;
    part parts[TD_PAR_COPY_MAX_THREADS];
    pthread_t th[TD_PAR_COPY_MAX_THREADS];
    bool started[TD_PAR_COPY_MAX_THREADS] = {false};
    for (int i = 0; i < threads; i++) {
        size_t off = (size_t)i * per;
        parts[i] = (part){.dst = (uint8_t *)dst + off, .src = (const uint8_t *)src + off,
                          .n = i == threads - 1 ? n - off : per};
    }
    int copied = 1;
    for (int i = 1; i < threads; i++) {
        started[i] = pthread_create(&th[i], NULL, copy_part, &parts[i]) == 0;
        copied += started[i];
    }
    copy_part(&parts[0]);
    for (int i = 1; i < threads; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        else copy_part(&parts[i]);
    }
    return copied;
}
