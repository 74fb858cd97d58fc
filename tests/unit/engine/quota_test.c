/* quota_test.c — engine/quota.c: charge and uncharge of every quota, the messages that
 * name tenant and quota, limits changed under use, and concurrent charging from many
 * threads never passing a limit. */
#include "engine/quota.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

static td__quota q;
static char err[256];

static void limits(uint64_t bytes, uint64_t sessions, uint64_t tensors, uint64_t tensor_bytes,
                   uint64_t batches)
{
    td__quota_limits l = {.max_bytes = bytes,
                          .max_sessions = sessions,
                          .max_tensors = tensors,
                          .max_tensor_bytes = tensor_bytes,
                          .max_queued_batches = batches};
    td__quota_set_limits(&q, &l);
}

static void setup(void) { td__quota_init(&q, "alice"); }

TestSuite(quota, .init = setup);

Test(quota, init_has_no_limits_and_zero_counts)
{
    td__quota_limits l;
    td__quota_get_limits(&q, &l);
    cr_expect_eq(l.max_bytes + l.max_sessions + l.max_tensors + l.max_tensor_bytes +
                     l.max_queued_batches,
                 0);
    cr_expect_str_eq(q.name, "alice");
    cr_expect_eq(atomic_load(&q.bytes) + atomic_load(&q.tensors) + atomic_load(&q.sessions) +
                     atomic_load(&q.queued_batches),
                 0);
    /* No limit: large charges pass. */
    cr_expect_eq(td__quota_tensor_charge(&q, UINT64_C(1) << 50, UINT64_C(1) << 50, err,
                                         sizeof err),
                 TD_OK);
    td__quota_tensor_uncharge(&q, UINT64_C(1) << 50);
    cr_expect_eq(atomic_load(&q.bytes), 0);
    cr_expect_eq(atomic_load(&q.tensors), 0);
}

Test(quota, long_name_is_truncated)
{
    char name[200];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    td__quota_init(&q, name);
    cr_expect_eq(strlen(q.name), TD_TENANT_NAME_MAX - 1);
}

Test(quota, set_and_get_limits)
{
    limits(1, 2, 3, 4, 5);
    td__quota_limits l;
    td__quota_get_limits(&q, &l);
    cr_expect_eq(l.max_bytes, 1);
    cr_expect_eq(l.max_sessions, 2);
    cr_expect_eq(l.max_tensors, 3);
    cr_expect_eq(l.max_tensor_bytes, 4);
    cr_expect_eq(l.max_queued_batches, 5);
}

Test(quota, max_bytes_exact_fit_then_refusal)
{
    limits(1000, 0, 0, 0, 0);
    cr_assert_eq(td__quota_tensor_charge(&q, 600, 600, err, sizeof err), TD_OK);
    cr_assert_eq(td__quota_tensor_charge(&q, 400, 400, err, sizeof err), TD_OK, "exact fit");
    err[0] = '\0';
    cr_expect_eq(td__quota_tensor_charge(&q, 1, 1, err, sizeof err), TD_EQUOTA);
    cr_expect(strstr(err, "tenant 'alice'") != NULL && strstr(err, "max_bytes") != NULL,
              "%s", err);
    cr_expect(strstr(err, "1000 of 1000") != NULL, "%s", err);
    /* The refusal charged nothing: neither bytes nor the tensor count. */
    cr_expect_eq(atomic_load(&q.bytes), 1000);
    cr_expect_eq(atomic_load(&q.tensors), 2);
    td__quota_tensor_uncharge(&q, 400);
    cr_expect_eq(td__quota_tensor_charge(&q, 400, 400, err, sizeof err), TD_OK, "given back");
    td__quota_tensor_uncharge(&q, 400);
    td__quota_tensor_uncharge(&q, 600);
    cr_expect_eq(atomic_load(&q.bytes), 0);
    cr_expect_eq(atomic_load(&q.tensors), 0);
}

Test(quota, alias_costs_a_tensor_but_no_bytes)
{
    limits(100, 0, 2, 0, 0);
    cr_assert_eq(td__quota_tensor_charge(&q, 100, 100, err, sizeof err), TD_OK);
    cr_expect_eq(td__quota_tensor_charge(&q, 0, 100, err, sizeof err), TD_OK, "alias");
    cr_expect_eq(td__quota_tensor_charge(&q, 0, 100, err, sizeof err), TD_EQUOTA,
                 "third tensor, even an alias");
    cr_expect(strstr(err, "max_tensors") != NULL, "%s", err);
    cr_expect_eq(atomic_load(&q.tensors), 2);
    cr_expect_eq(atomic_load(&q.bytes), 100);
}

Test(quota, max_tensor_bytes_checks_the_logical_size)
{
    limits(0, 0, 0, 64, 0);
    cr_expect_eq(td__quota_tensor_charge(&q, 64, 64, err, sizeof err), TD_OK);
    cr_expect_eq(td__quota_tensor_charge(&q, 0, 65, err, sizeof err), TD_EQUOTA,
                 "an alias of a larger tensor is still too large");
    cr_expect(strstr(err, "max_tensor_bytes quota of 64") != NULL, "%s", err);
    cr_expect_eq(atomic_load(&q.tensors), 1, "nothing charged by the refusal");
}

Test(quota, bytes_counter_never_overflows)
{
    cr_assert_eq(td__quota_tensor_charge(&q, UINT64_MAX - 10, 1, err, sizeof err), TD_OK);
    cr_expect_eq(td__quota_tensor_charge(&q, 20, 20, err, sizeof err), TD_EQUOTA,
                 "a charge that would wrap the counter is refused even without a limit");
    cr_expect_eq(atomic_load(&q.bytes), UINT64_MAX - 10);
    cr_expect_eq(atomic_load(&q.tensors), 1);
}

Test(quota, sessions_and_batches)
{
    limits(0, 2, 0, 0, 1);
    cr_expect_eq(td__quota_session_charge(&q, err, sizeof err), TD_OK);
    cr_expect_eq(td__quota_session_charge(&q, err, sizeof err), TD_OK);
    cr_expect_eq(td__quota_session_charge(&q, err, sizeof err), TD_EQUOTA);
    cr_expect(strstr(err, "tenant 'alice': max_sessions quota of 2") != NULL, "%s", err);
    td__quota_session_uncharge(&q);
    cr_expect_eq(td__quota_session_charge(&q, err, sizeof err), TD_OK);
    cr_expect_eq(atomic_load(&q.sessions), 2);

    cr_expect_eq(td__quota_batch_charge(&q, err, sizeof err), TD_OK);
    cr_expect_eq(td__quota_batch_charge(&q, err, sizeof err), TD_EQUOTA);
    cr_expect(strstr(err, "max_queued_batches quota of 1") != NULL, "%s", err);
    td__quota_batch_uncharge(&q);
    cr_expect_eq(td__quota_batch_charge(&q, err, sizeof err), TD_OK);
    td__quota_batch_uncharge(&q);
    cr_expect_eq(atomic_load(&q.queued_batches), 0);
}

Test(quota, lowering_a_limit_under_use_refuses_new_charges_only)
{
    limits(0, 0, 10, 0, 0);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(td__quota_tensor_charge(&q, 1, 1, err, sizeof err), TD_OK);
    limits(0, 0, 3, 0, 0); /* a reload lowered it below what is held */
    cr_expect_eq(td__quota_tensor_charge(&q, 1, 1, err, sizeof err), TD_EQUOTA);
    cr_expect_eq(atomic_load(&q.tensors), 5, "what is held is not touched");
    for (int i = 0; i < 3; i++) td__quota_tensor_uncharge(&q, 1);
    cr_expect_eq(td__quota_tensor_charge(&q, 1, 1, err, sizeof err), TD_OK, "2 held, limit 3");
    limits(0, 0, 0, 0, 0);
    cr_expect_eq(td__quota_tensor_charge(&q, 1, 1, err, sizeof err), TD_OK, "limit removed");
}

/* ---- concurrency ---- */

#define THREADS 8
#define ROUNDS 100000

typedef struct racer {
    pthread_barrier_t *start;
    atomic_ullong *peak_bytes, *peak_tensors, *peak_sessions, *peak_batches;
    uint64_t refused;
} racer;

static void note_peak(atomic_ullong *peak, unsigned long long v)
{
    unsigned long long cur = atomic_load(peak);
    while (v > cur && !atomic_compare_exchange_weak(peak, &cur, v)) {
    }
}

/* Each thread charges and gives back in a tight loop, holding up to 3 tensors, and checks
 * after every successful charge that the shared counters are within the limits. */
static void *race(void *arg)
{
    racer *r = arg;
    char e[256];
    uint64_t held[3];
    int n_held = 0;
    pthread_barrier_wait(r->start);
    for (int i = 0; i < ROUNDS; i++) {
        uint64_t nbytes = (uint64_t)(i % 7) * 100 + 1;
        if (n_held < 3 && td__quota_tensor_charge(&q, nbytes, nbytes, e, sizeof e) == TD_OK) {
            held[n_held++] = nbytes;
            note_peak(r->peak_bytes, atomic_load(&q.bytes));
            note_peak(r->peak_tensors, atomic_load(&q.tensors));
        } else {
            r->refused++;
        }
        if (td__quota_session_charge(&q, e, sizeof e) == TD_OK) {
            note_peak(r->peak_sessions, atomic_load(&q.sessions));
            td__quota_session_uncharge(&q);
        } else {
            r->refused++;
        }
        if (td__quota_batch_charge(&q, e, sizeof e) == TD_OK) {
            note_peak(r->peak_batches, atomic_load(&q.queued_batches));
            td__quota_batch_uncharge(&q);
        } else {
            r->refused++;
        }
        if (n_held > 0 && (i % 3 == 0 || n_held == 3))
            td__quota_tensor_uncharge(&q, held[--n_held]);
    }
    while (n_held > 0) td__quota_tensor_uncharge(&q, held[--n_held]);
    return NULL;
}

Test(quota, concurrent_charges_never_pass_a_limit, .timeout = 60)
{
    /* max_tensors below the 3 a racer tries to hold: the limit is reached even when the
     * threads happen to run one after another (a loaded one-CPU run refused nothing with 5) */
    const uint64_t max_bytes = 1500, max_tensors = 2, max_sessions = 1, max_batches = 1;
    limits(max_bytes, max_sessions, max_tensors, 0, max_batches);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    atomic_ullong pb, pt, ps, pq;
    atomic_init(&pb, 0);
    atomic_init(&pt, 0);
    atomic_init(&ps, 0);
    atomic_init(&pq, 0);
    racer r[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        r[i] = (racer){.start = &start,
                       .peak_bytes = &pb,
                       .peak_tensors = &pt,
                       .peak_sessions = &ps,
                       .peak_batches = &pq};
        cr_assert_eq(pthread_create(&th[i], NULL, race, &r[i]), 0);
    }
    uint64_t refused = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        refused += r[i].refused;
    }
    pthread_barrier_destroy(&start);
    cr_expect_leq(atomic_load(&pb), max_bytes, "peak bytes %llu", atomic_load(&pb));
    cr_expect_leq(atomic_load(&pt), max_tensors, "peak tensors %llu", atomic_load(&pt));
    cr_expect_leq(atomic_load(&ps), max_sessions, "peak sessions %llu", atomic_load(&ps));
    cr_expect_leq(atomic_load(&pq), max_batches, "peak batches %llu", atomic_load(&pq));
    cr_expect_gt(refused, 0, "the limits were reached (the test raced at all)");
    /* Everything given back: the counters return to zero exactly. */
    cr_expect_eq(atomic_load(&q.bytes), 0);
    cr_expect_eq(atomic_load(&q.tensors), 0);
    cr_expect_eq(atomic_load(&q.sessions), 0);
    cr_expect_eq(atomic_load(&q.queued_batches), 0);
}
