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

/* ---- where the payload of a ClientMessage is found when it is not the last field ----
 * (breaker round, 2026-12-06: a write whose payload field came first was copied from the
 * unpacked message after the server had freed it). The message is encoded here by hand:
 * head = ClientMessage{seq, write{tensor, offset}} packed by protobuf-c, with payload
 * fields (tag 15, wire type 2) put before and between. */

/* [0x7a, len (one varint byte), bytes of `fill`] */
static size_t payload_field(uint8_t *out, size_t n, uint8_t fill)
{
    cr_assert(n < 128);
    out[0] = (15u << 3) | 2u;
    out[1] = (uint8_t)n;
    memset(out + 2, fill, n);
    return n + 2;
}

static size_t head_bytes(uint8_t *out, size_t cap)
{
    Tensord__V1__WriteChunk w = TENSORD__V1__WRITE_CHUNK__INIT;
    w.tensor = 9;
    w.offset = 0;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.seq = 77;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_WRITE;
    cm.write = &w;
    size_t n = tensord__v1__client_message__get_packed_size(&cm);
    cr_assert(n <= cap);
    return tensord__v1__client_message__pack(&cm, out);
}

/* Decode `msg` as the server does, free the unpacked message, then check that the span
 * lies in the scratch (which the request keeps) and holds n bytes of `fill`. */
static void check_decoded(const uint8_t *msg, size_t len, size_t n, uint8_t fill)
{
    grpc_slice sl = grpc_slice_from_copied_buffer((const char *)msg, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    td__wire_scratch scratch = {0};
    ProtobufCMessage *m = NULL;
    td__wire_span span;
    char err[256] = "";
    cr_assert_eq(td__wire_decode_head(bb, &tensord__v1__client_message__descriptor, &scratch, &m,
                                      &span, err, sizeof err),
                 TD_OK, "%s", err);
    const Tensord__V1__ClientMessage *cm = (const Tensord__V1__ClientMessage *)m;
    cr_assert_eq(cm->seq, 77);
    cr_assert_eq(cm->body_case, TENSORD__V1__CLIENT_MESSAGE__BODY_WRITE);
    protobuf_c_message_free_unpacked(m, NULL); /* as td__request_decode does for a write */
    cr_assert(span.present);
    cr_assert_eq(span.len, n);
    cr_assert_not_null(span.flat);
    cr_assert(span.flat >= scratch.data && span.flat + n <= scratch.data + scratch.cap,
              "the payload must lie in the scratch, not in the freed message");
    uint8_t out[128];
    cr_assert_eq(td__wire_span_copy(bb, &span, out), TD_OK);
    for (size_t i = 0; i < n; i++) cr_assert_eq(out[i], fill, "byte %zu", i);
    td__wire_scratch_fini(&scratch);
    grpc_byte_buffer_destroy(bb);
}

Test(wire_span, payload_before_the_other_fields_stays_in_the_scratch)
{
    uint8_t msg[512];
    size_t len = payload_field(msg, 100, 0xAA);
    len += head_bytes(msg + len, sizeof msg - len);
    check_decoded(msg, len, 100, 0xAA);
}

Test(wire_span, a_repeated_payload_field_means_its_last_occurrence)
{
    /* payload A, head, payload B, then seq again: B is not last, and wins (protobuf) */
    uint8_t msg[512];
    size_t len = payload_field(msg, 50, 0x11);
    len += head_bytes(msg + len, sizeof msg - len);
    len += payload_field(msg + len, 60, 0x22);
    msg[len++] = (1u << 3) | 0u; /* seq = 77 again */
    msg[len++] = 77;
    check_decoded(msg, len, 60, 0x22);
}
