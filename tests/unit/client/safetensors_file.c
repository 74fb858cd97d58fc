/* safetensors_test.c — libtensord's safetensors module (client/safetensors.c): bit-exact round trip, and every
 * rejection the reader promises (client/safetensors.h), each with a
 * message that names the file and the problem. */
#include "client/safetensors.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/st-test.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

TestSuite(safetensors, .init = make_dir, .fini = remove_dir);

static void path_of(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

/* A file with header `json` (length field = strlen(json) unless claim != 0) and `ndata`
 * data bytes of value 0x3f. */
static void write_file(const char *path, const char *json, uint64_t claim, size_t ndata)
{
    size_t hl = strlen(json);
    uint64_t n = claim ? claim : hl;
    unsigned char *buf = malloc(8 + hl + ndata);
    cr_assert_not_null(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(n >> (8 * i));
    memcpy(buf + 8, json, hl);
    memset(buf + 8 + hl, 0x3f, ndata);
    write_bytes(path, buf, 8 + hl + ndata);
    free(buf);
}

/* Reading `path` must fail (with `want`: -1 invalid data, TD__ST_EIO) with a message
 * containing the path and `needle`. */
static void expect_reject_rc(const char *path, const char *needle, int want)
{
    td__st_file f;
    char err[512] = "";
    cr_assert_eq(td__st_read(path, &f, err, sizeof err), want, "accepted %s", path);
    cr_expect_not_null(strstr(err, path), "message '%s' lacks the path", err);
    cr_expect_not_null(strstr(err, needle), "message '%s' lacks '%s'", err, needle);
    cr_expect_eq(f.n_tensors, 0);
    cr_expect_null(f.tensors);
}

static void expect_reject(const char *path, const char *needle)
{
    expect_reject_rc(path, needle, -1);
}

Test(safetensors, round_trip_is_bit_exact)
{
    char path[128];
    path_of(path, sizeof path, "rt.safetensors");
    float a[6], b[1] = {-0.0f};
    const uint32_t odd[6] = {0x7fc00001u, 0x00000001u, 0x80000000u, 0x7f800000u,
                             0x3f800000u, 0xdeadbeefu}; /* NaN payload, denormal, -0, inf */
    memcpy(a, odd, sizeof a);
    td__st_entry in[3] = {
        {.dtype = "F32", .name = "matrix", .rank = 2, .shape = (int64_t[]){2, 3}, .data = a},
        {.dtype = "F32", .name = "scalar", .rank = 0, .shape = NULL, .data = b},
        {.dtype = "F32", .name = "empty", .rank = 2, .shape = (int64_t[]){0, 5}, .data = NULL},
    };
    const char *keys[] = {"epochs", "note"}, *values[] = {"2", "caf\xc3\xa9"};
    char err[512] = "";
    cr_assert_eq(td__st_write(path, 3, in, 2, keys, values, err, sizeof err), 0, "%s",
                 err);

    td__st_file f;
    cr_assert_eq(td__st_read(path, &f, err, sizeof err), 0, "%s", err);
    cr_assert_eq(f.n_tensors, 3);
    const td__st_tensor *m = td__st_find(&f, "matrix");
    cr_assert_not_null(m);
    cr_expect_str_eq(m->dtype, "F32");
    cr_expect_eq(m->rank, 2);
    cr_expect_eq(m->shape[0], 2);
    cr_expect_eq(m->shape[1], 3);
    cr_assert_eq(m->nbytes, sizeof a);
    cr_expect_eq(memcmp(m->data, odd, sizeof a), 0);
    const td__st_tensor *s = td__st_find(&f, "scalar");
    cr_assert_not_null(s);
    cr_expect_eq(s->rank, 0);
    cr_expect_eq(s->nelem, 1);
    cr_expect_eq(memcmp(s->data, b, 4), 0);
    const td__st_tensor *e = td__st_find(&f, "empty");
    cr_assert_not_null(e);
    cr_expect_eq(e->nbytes, 0);
    cr_expect_eq(e->shape[1], 5);
    cr_expect_null(td__st_find(&f, "missing"));
    cr_expect_str_eq(td__st_metadata(&f, "epochs"), "2");
    cr_expect_str_eq(td__st_metadata(&f, "note"), "caf\xc3\xa9");
    cr_expect_null(td__st_metadata(&f, "nope"));
    td__st_file_fini(&f);
    cr_expect_eq(f.n_tensors, 0);

    /* Header length is a multiple of 8, so the data starts aligned. */
    FILE *fp = fopen(path, "rb");
    unsigned char len[8];
    cr_assert_eq(fread(len, 1, 8, fp), 8);
    fclose(fp);
    cr_expect_eq(len[0] % 8, 0);
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    cr_expect_neq(access(tmp, F_OK), 0, "temporary file left behind");
}

Test(safetensors, reads_other_dtypes_and_padding)
{
    char path[128];
    path_of(path, sizeof path, "i64.safetensors");
    write_file(path,
               "{\"__metadata__\":{\"k\":\"v\"},\"ids\":{\"dtype\":\"I64\",\"shape\":[2],"
               "\"data_offsets\":[0,16]},\"h\":{\"dtype\":\"BF16\",\"shape\":[1],"
               "\"data_offsets\":[16,18]}}     ",
               0, 18);
    td__st_file f;
    char err[512] = "";
    cr_assert_eq(td__st_read(path, &f, err, sizeof err), 0, "%s", err);
    cr_expect_eq(f.n_tensors, 2);
    cr_expect_eq(td__st_find(&f, "ids")->elem_size, 8);
    cr_expect_eq(td__st_find(&f, "h")->nbytes, 2);
    td__st_file_fini(&f);
}

Test(safetensors, rejects_missing_file)
{
    char path[128];
    path_of(path, sizeof path, "absent.safetensors");
    expect_reject_rc(path, "No such file", TD__ST_EIO);
}

Test(safetensors, rejects_file_shorter_than_length_field)
{
    char path[128];
    path_of(path, sizeof path, "short.safetensors");
    write_bytes(path, "\x10\0\0\0\0", 5);
    expect_reject(path, "shorter than the 8-byte header length");
}

Test(safetensors, rejects_header_longer_than_file)
{
    char path[128];
    path_of(path, sizeof path, "long.safetensors");
    write_file(path, "{}", 4096, 0);
    expect_reject(path, "header length 4096 exceeds the file (2 bytes");
    write_file(path, "{}", UINT64_MAX, 0);
    expect_reject(path, "exceeds the file");
}

Test(safetensors, rejects_truncated_header_json)
{
    char path[128];
    path_of(path, sizeof path, "trunc.safetensors");
    write_file(path, "{\"w\":{\"dtype\":\"F32\",\"sha", 0, 0);
    expect_reject(path, "header is not valid JSON");
}

Test(safetensors, rejects_non_object_and_duplicates)
{
    char path[128];
    path_of(path, sizeof path, "arr.safetensors");
    write_file(path, "[1,2]", 0, 0);
    expect_reject(path, "not a JSON object");
    write_file(path,
               "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
               "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
               0, 2);
    expect_reject(path, "duplicate");
}

Test(safetensors, rejects_bad_entries)
{
    char path[128];
    path_of(path, sizeof path, "bad.safetensors");
    write_file(path, "{\"a\":5}", 0, 0);
    expect_reject(path, "\"a\" is not an object");
    write_file(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 0, 4);
    expect_reject(path, "needs \"dtype\"");
    write_file(path, "{\"a\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,4]}}", 0, 4);
    expect_reject(path, "unknown dtype \"Q4\"");
    write_file(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 0, 4);
    expect_reject(path, "shape entry 0");
    write_file(path,
               "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
               "\"data_offsets\":[0,1]}}",
               0, 1);
    expect_reject(path, "rank 9");
    write_file(path, "{\"__metadata__\":{\"k\":1}}", 0, 0);
    expect_reject(path, "value of \"k\" is not a string");
}

/* td__st_write refuses an empty tensor name; the reader refuses it as well (it accepted
 * one, making a file that this library could read but not have written). */
Test(safetensors, rejects_empty_tensor_name)
{
    char path[128];
    path_of(path, sizeof path, "empty.safetensors");
    write_file(path, "{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 0, 1);
    expect_reject(path, "header entry \"\" has an empty tensor name");
    write_file(path,
               "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
               "\"\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[1,1]}}",
               0, 1);
    expect_reject(path, "empty tensor name");
}

Test(safetensors, rejects_bad_offsets)
{
    char path[128];
    path_of(path, sizeof path, "off.safetensors");
    write_file(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0, 4);
    expect_reject(path, "out of range");
    write_file(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 0, 8);
    expect_reject(path, "out of range");
    write_file(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 0, 8);
    expect_reject(path, "hold 8 bytes, but dtype F32 and its shape need 12");
    write_file(path, "{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,4]}}", 0, 4);
    expect_reject(path, "need 8");
    write_file(path,
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               0, 12);
    expect_reject(path, "overlap");
    write_file(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 0, 8);
    expect_reject(path, "belong to no tensor");
    write_file(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 0, 8);
    expect_reject(path, "cover only 4");
    write_file(path,
               "{\"a\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904,4],"
               "\"data_offsets\":[0,8]}}",
               0, 8);
    expect_reject(path, "too large");
}

Test(safetensors, writer_rejects_bad_names)
{
    char path[128], err[512] = "";
    path_of(path, sizeof path, "w.safetensors");
    float x = 1.0f;
    td__st_entry dup[2] = {{.dtype = "F32", .name = "a", .rank = 1, .shape = (int64_t[]){1}, .data = &x},
                              {.dtype = "F32", .name = "a", .rank = 1, .shape = (int64_t[]){1}, .data = &x}};
    cr_expect_eq(td__st_write(path, 2, dup, 0, NULL, NULL, err, sizeof err), -1);
    cr_expect_not_null(strstr(err, "appears twice"), "%s", err);
    td__st_entry meta = {.dtype = "F32", .name = "__metadata__", .rank = 1, .shape = (int64_t[]){1}, .data = &x};
    cr_expect_eq(td__st_write(path, 1, &meta, 0, NULL, NULL, err, sizeof err), -1);
    cr_expect_neq(access(path, F_OK), 0);
}

/* Duplicate metadata keys: JSON objects keep one value per key, so the writer kept the
 * last silently; it refuses them, naming the key, and writes nothing. */
Test(safetensors, writer_rejects_duplicate_metadata_keys)
{
    char path[128], err[512] = "";
    path_of(path, sizeof path, "m.safetensors");
    float x = 1.0f;
    td__st_entry e = {.dtype = "F32", .name = "x", .rank = 1, .shape = (int64_t[]){1}, .data = &x};
    const char *keys[3] = {"a", "k", "k"}, *values[3] = {"0", "1", "2"};
    cr_expect_eq(td__st_write(path, 1, &e, 3, keys, values, err, sizeof err), -1);
    cr_expect_not_null(strstr(err, "metadata key \"k\" appears twice"), "%s", err);
    cr_expect_neq(access(path, F_OK), 0);
    cr_expect_eq(td__st_write(path, 1, &e, 2, keys, values, err, sizeof err), 0, "%s", err);
}

Test(safetensors, dtype_sizes)
{
    cr_expect_eq(td__st_dtype_size("F32"), 4);
    cr_expect_eq(td__st_dtype_size("BF16"), 2);
    cr_expect_eq(td__st_dtype_size("I64"), 8);
    cr_expect_eq(td__st_dtype_size("BOOL"), 1);
    cr_expect_eq(td__st_dtype_size("f32"), 0);
    cr_expect_eq(td__st_dtype_size(""), 0);
}
