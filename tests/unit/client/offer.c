/* The blob-offer policy (client/offer.c, compiled in) against a fake transport that
 * records what it is asked: which messages an upload sends, and that the SHA-256 a repeat
 * needs is taken while its fingerprint offer waits (the transport runs the policy's work
 * steps until the answer "arrives"), whatever step the answer comes at. Expected hashes
 * come from OpenSSL's SHA256, not from the code under test. */
#include "client/transport.h"
#include "common/fingerprint.h"
#include "common/sha256.h"

#include <criterion/criterion.h>
#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>

typedef struct fake {
    td__transport base;
    int answer_after;  /* steps the fingerprint answer takes to arrive (-1: after all) */
    bool fp_known;     /* the answer */
    bool sha_present;  /* blob_has's answer */
    int steps;         /* work steps run while waiting */
    int offers, offers_with_work;
    int writes, has, from_blob, candidates;
    size_t written;
    uint8_t offered[TD_SHA256_BYTES];
} fake;

static td_status f_write(td__transport *t, uint64_t id, uint64_t off, const void *src, size_t n)
{
    (void)id, (void)off, (void)src;
    fake *f = (fake *)t;
    f->writes++;
    f->written += n;
    return TD_OK;
}
static td_status f_has(td__transport *t, const uint8_t *hash, bool *present)
{
    fake *f = (fake *)t;
    f->has++;
    memcpy(f->offered, hash, TD_SHA256_BYTES);
    *present = f->sha_present;
    return TD_OK;
}
static td_status f_blob_write(td__transport *t, uint64_t id, const uint8_t *hash)
{
    (void)id;
    fake *f = (fake *)t;
    cr_expect_arr_eq(hash, f->offered, TD_SHA256_BYTES, "fills from the hash it offered");
    f->from_blob++;
    return TD_OK;
}
static td_status f_store(td__transport *t, uint64_t id, const uint8_t *hash)
{
    (void)t, (void)id, (void)hash;
    cr_assert_fail("no SHA-256 StoreBlob on a fingerprint server");
    return TD_OK;
}
static td_status f_has_fp(td__transport *t, const uint8_t *fp, bool *present,
                          const td__wait_work *work)
{
    (void)fp;
    fake *f = (fake *)t;
    f->offers++;
    if (work == NULL) {
        *present = f->fp_known;
        return TD_OK;
    }
    f->offers_with_work++;
    while (f->answer_after < 0 || f->steps < f->answer_after) {
        f->steps++;
        if (!work->step(work->arg)) break;
    }
    *present = f->fp_known;
    return TD_OK;
}
static td_status f_candidate(td__transport *t, uint64_t id, const uint8_t *fp)
{
    (void)id, (void)fp;
    ((fake *)t)->candidates++;
    return TD_OK;
}

static const td__transport_vt vt = {
    .write = f_write,
    .blob_has = f_has,
    .blob_write = f_blob_write,
    .blob_store = f_store,
    .blob_has_fingerprint = f_has_fp,
    .blob_candidate = f_candidate,
};

enum { N = (3 << 20) + 123 }; /* not a whole number of steps */
static uint8_t data[N];
static uint8_t want[SHA256_DIGEST_LENGTH];

static void setup(void)
{
    for (size_t i = 0; i < N; i++) data[i] = (uint8_t)(i * 31 + (i >> 11));
    SHA256(data, N, want);
}
TestSuite(offer, .init = setup);

static fake make(int answer_after, bool fp_known, bool sha_present)
{
    fake f = {.answer_after = answer_after, .fp_known = fp_known, .sha_present = sha_present};
    f.base.vt = &vt;
    f.base.blob_min_bytes = 1 << 20;
    f.base.blob_fingerprints = true;
    return f;
}

Test(offer, a_fresh_upload_stops_hashing_when_the_answer_comes)
{
    fake f = make(1, false, false);
    cr_assert_eq(td__offer_write(&f.base, 7, data, N, false), TD_OK);
    cr_expect_eq(f.offers_with_work, 1, "a new transport expects a repeat");
    cr_expect_eq(f.steps, 1, "hashing went on after the answer");
    cr_expect_eq(f.has, 0, "a fresh upload offers no SHA-256");
    cr_expect_eq(f.writes, 1);
    cr_expect_eq(f.written, (size_t)N);
    cr_expect_eq(f.candidates, 1);
}

Test(offer, a_repeat_hashes_all_of_it_while_the_answer_is_on_its_way)
{
    fake f = make(-1, true, true);
    cr_assert_eq(td__offer_write(&f.base, 7, data, N, false), TD_OK);
    cr_expect_gt(f.steps, 8, "the whole hash fits into the wait, in bounded steps");
    cr_expect_arr_eq(f.offered, want, TD_SHA256_BYTES);
    cr_expect_eq(f.from_blob, 1);
    cr_expect_eq(f.writes, 0, "a hit sends no bytes");
    cr_expect_eq(f.candidates, 0);
}

Test(offer, a_repeat_answered_at_any_step_offers_the_whole_hash)
{
    for (int after = 0; after < 30; after += 3) {
        fake f = make(after, true, true);
        cr_assert_eq(td__offer_write(&f.base, 7, data, N, false), TD_OK);
        cr_expect_arr_eq(f.offered, want, TD_SHA256_BYTES, "answer after %d steps", after);
        cr_expect_eq(f.from_blob, 1);
        cr_expect_eq(f.written, 0);
    }
}

Test(offer, a_collision_sends_the_bytes_and_keeps_them)
{
    fake f = make(2, true, false);
    cr_assert_eq(td__offer_write(&f.base, 7, data, N, false), TD_OK);
    cr_expect_arr_eq(f.offered, want, TD_SHA256_BYTES);
    cr_expect_eq(f.from_blob, 0);
    cr_expect_eq(f.written, (size_t)N);
    cr_expect_eq(f.candidates, 1);
}

Test(offer, small_uploads_take_the_plain_path)
{
    fake f = make(-1, true, true);
    cr_assert_eq(td__offer_write(&f.base, 7, data, (1 << 20) - 1, false), TD_OK);
    cr_expect_eq(f.steps, 0);
    cr_expect_eq(f.has, 0);
    cr_expect_eq(f.writes, 1);
}

/* The last answer predicts the next: after a fresh upload the wait is not spent hashing
 * (a fresh upload's answer waits behind the bytes before it, and the hash would be
 * dropped); after a hit it is again; a repeat after fresh ones still offers the right
 * SHA-256, taken after the answer. */
Test(offer, after_a_fresh_upload_the_next_wait_is_not_spent_hashing)
{
    fake f = make(-1, false, false);
    cr_assert_eq(td__offer_write(&f.base, 7, data, N, false), TD_OK);
    int steps = f.steps;
    cr_assert_eq(td__offer_write(&f.base, 8, data, N, false), TD_OK);
    cr_expect_eq(f.offers, 2);
    cr_expect_eq(f.offers_with_work, 1, "the second fresh upload hashed during its wait");
    cr_expect_eq(f.steps, steps);
    cr_expect_eq(f.has, 0);
    cr_expect_eq(f.written, 2 * (size_t)N);

    f.fp_known = f.sha_present = true; /* a run of repeats begins */
    cr_assert_eq(td__offer_write(&f.base, 9, data, N, false), TD_OK);
    cr_expect_eq(f.offers_with_work, 1);
    cr_expect_arr_eq(f.offered, want, TD_SHA256_BYTES, "hashed after the answer");
    cr_expect_eq(f.from_blob, 1);
    cr_assert_eq(td__offer_write(&f.base, 10, data, N, false), TD_OK);
    cr_expect_eq(f.offers_with_work, 2, "after a hit the wait is spent hashing again");
    cr_expect_gt(f.steps, steps);
    cr_expect_eq(f.from_blob, 2);
    cr_expect_eq(f.written, 2 * (size_t)N);
}

/* TD_WRITE_FRESH (td_write_ex): a large upload marked fresh goes out as plain bytes even
 * where the server knows its fingerprint and holds its blob: no offer, no hash, no
 * candidate, every byte written; the last-answer guess is left as it was. */
Test(offer, a_fresh_marked_upload_is_never_offered)
{
    fake f = make(-1, true, true);
    f.base.offer_last_fresh = true;
    cr_assert_eq(td__offer_write(&f.base, 7, data, N, true), TD_OK);
    cr_expect_eq(f.offers, 0);
    cr_expect_eq(f.has, 0);
    cr_expect_eq(f.steps, 0);
    cr_expect_eq(f.from_blob, 0);
    cr_expect_eq(f.candidates, 0);
    cr_expect_eq(f.writes, 1);
    cr_expect_eq(f.written, (size_t)N);
    cr_expect(f.base.offer_last_fresh);
    /* the same bytes unmarked are offered and filled from the store */
    cr_assert_eq(td__offer_write(&f.base, 8, data, N, false), TD_OK);
    cr_expect_eq(f.offers, 1);
    cr_expect_eq(f.from_blob, 1);
    cr_expect_eq(f.written, (size_t)N);
}
