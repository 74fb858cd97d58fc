/* Unit tests of proto/wire.c's payload copies (td__wire_span_copy_range, td__wire_span_copy):
 * a payload that lies in several gRPC slices, after a header, copied out in pieces at every
 * boundary must give the payload's bytes (the expected bytes are the test's own pattern,
 * not the code's output); ranges outside the payload are refused without a copy. */
#include "wire.h"

#include <criterion/criterion.h>
#include <grpc/byte_buffer.h>
#include <grpc/slice.h>
#include <stdint.h>
#include <string.h>

#define HEAD 7
#define PAYLOAD 1000

static uint8_t pattern(size_t i) { return (uint8_t)(i * 31u + 7u); }

/* HEAD header bytes (0xEE) then PAYLOAD pattern bytes, cut into slices of the given sizes. */
static grpc_byte_buffer *sliced(const size_t *cuts, size_t ncuts)
{
    uint8_t all[HEAD + PAYLOAD];
    memset(all, 0xEE, HEAD);
    for (size_t i = 0; i < PAYLOAD; i++) all[HEAD + i] = pattern(i);
    grpc_slice sl[16];
    size_t at = 0, n = 0;
    for (; n < ncuts && at < sizeof all; n++) {
        size_t len = cuts[n] < sizeof all - at ? cuts[n] : sizeof all - at;
        sl[n] = grpc_slice_from_copied_buffer((const char *)all + at, len);
        at += len;
    }
    if (at < sizeof all) sl[n++] = grpc_slice_from_copied_buffer((const char *)all + at, sizeof all - at);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(sl, n);
    for (size_t i = 0; i < n; i++) grpc_slice_unref(sl[i]);
    return bb;
}

Test(wire_span, pieces_across_slice_boundaries)
{
    const size_t cuts[] = {3, 5, 1, 250, 2, 400, 17};
    grpc_byte_buffer *bb = sliced(cuts, sizeof cuts / sizeof cuts[0]);
    td__wire_span span = {.present = true, .flat = NULL, .offset = HEAD, .len = PAYLOAD};
    const size_t steps[] = {1, 3, 64, 333, PAYLOAD};
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
        uint8_t out[PAYLOAD];
        memset(out, 0, sizeof out);
        /* descending offsets: pieces in any order */
        size_t npieces = (PAYLOAD + steps[k] - 1) / steps[k];
        for (size_t p = npieces; p-- > 0;) {
            size_t off = p * steps[k], len = PAYLOAD - off < steps[k] ? PAYLOAD - off : steps[k];
            cr_assert_eq(td__wire_span_copy_range(bb, &span, off, len, out + off), TD_OK);
        }
        for (size_t i = 0; i < PAYLOAD; i++)
            cr_assert_eq(out[i], pattern(i), "step %zu: byte %zu", steps[k], i);
    }
    uint8_t whole[PAYLOAD];
    cr_assert_eq(td__wire_span_copy(bb, &span, whole), TD_OK);
    for (size_t i = 0; i < PAYLOAD; i++) cr_assert_eq(whole[i], pattern(i));
    grpc_byte_buffer_destroy(bb);
}

Test(wire_span, flat_payload_and_ranges_outside)
{
    uint8_t flat[PAYLOAD];
    for (size_t i = 0; i < PAYLOAD; i++) flat[i] = pattern(i);
    td__wire_span span = {.present = true, .flat = flat, .offset = 0, .len = PAYLOAD};
    uint8_t out[16];
    cr_assert_eq(td__wire_span_copy_range(NULL, &span, 990, 10, out), TD_OK);
    for (size_t i = 0; i < 10; i++) cr_assert_eq(out[i], pattern(990 + i));
    memset(out, 0x5A, sizeof out);
    cr_expect_eq(td__wire_span_copy_range(NULL, &span, 995, 10, out), TD_ERANGE);
    cr_expect_eq(td__wire_span_copy_range(NULL, &span, PAYLOAD + 1, 0, out), TD_OK,
                 "an empty range copies nothing");
    cr_expect_eq(td__wire_span_copy_range(NULL, &span, SIZE_MAX, 2, out), TD_ERANGE,
                 "an offset + length that overflows");
    cr_expect_eq(out[0], 0x5A, "a refused range wrote nothing");
    td__wire_span none = {.present = false};
    cr_expect_eq(td__wire_span_copy_range(NULL, &none, 0, 1, out), TD_ERANGE);
    cr_expect_eq(td__wire_span_copy(NULL, &none, out), TD_OK, "no payload: nothing to copy");
}
