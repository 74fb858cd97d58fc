/* safetensors.c — strict reader and writer for the safetensors format (libtensord's
 * td_safetensors_* functions are built on it; moved here from the Fashion-MNIST example).
 *
 * The reader loads the whole file (model files here are small), parses the header with
 * jansson, checks every entry against the data region, then copies each tensor into its
 * own buffer so that callers never hold pointers into a shared blob with unknown
 * alignment. Every size from the file goes through overflow-checked arithmetic before use.
 * Format reference: safetensors.h.
 */
#include "client/safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const struct {
    const char *name;
    size_t size;
} dtype_table[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
    {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8},
};

size_t td__st_dtype_size(const char *dtype)
{
    for (size_t i = 0; i < sizeof dtype_table / sizeof dtype_table[0]; i++)
        if (strcmp(dtype_table[i].name, dtype) == 0) return dtype_table[i].size;
    return 0;
}

static void set_err(char *err, size_t errlen, const char *path, const char *fmt, ...)
{
    if (err == NULL || errlen == 0) return;
    int n = snprintf(err, errlen, "%s: ", path);
    if (n < 0 || (size_t)n >= errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

static bool host_is_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* Reverse the bytes of each `elem_size`-byte element in place (big-endian hosts only). */
static void swap_elements(void *data, size_t nbytes, size_t elem_size)
{
    unsigned char *p = data;
    if (elem_size < 2) return;
    for (size_t off = 0; off + elem_size <= nbytes; off += elem_size)
        for (size_t i = 0; i < elem_size / 2; i++) {
            unsigned char t = p[off + i];
            p[off + i] = p[off + elem_size - 1 - i];
            p[off + elem_size - 1 - i] = t;
        }
}

static bool checked_nelem(int rank, const int64_t *shape, int64_t *out)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0 || __builtin_mul_overflow(n, shape[i], &n)) return false;
    }
    *out = n;
    return true;
}

/* ---- writer ---- */

static int write_le(FILE *f, const void *data, size_t nelem, size_t esize)
{
    if (nelem == 0) return 0;
    if (host_is_little_endian() || esize < 2)
        return fwrite(data, esize, nelem, f) == nelem ? 0 : -1;
    unsigned char chunk[8192];
    const unsigned char *p = data;
    const size_t per = sizeof chunk / esize;
    while (nelem > 0) {
        size_t k = nelem < per ? nelem : per;
        memcpy(chunk, p, k * esize);
        swap_elements(chunk, k * esize, esize);
        if (fwrite(chunk, esize, k, f) != k) return -1;
        p += k * esize;
        nelem -= k;
    }
    return 0;
}

/* Build the JSON header; on success *out_json is a malloc'd string (free with free()). */
static int build_header(const char *path, size_t n, const td__st_entry *tensors, size_t n_meta,
                        const char *const *keys, const char *const *values, char **out_json,
                        char *err, size_t errlen)
{
    int rc = -1;
    json_t *root = json_object();
    if (root == NULL) {
        set_err(err, errlen, path, "out of memory building the header");
        return TD__ST_ENOMEM;
    }
    if (n_meta > 0) {
        json_t *meta = json_object();
        if (meta == NULL || json_object_set_new(root, "__metadata__", meta) != 0) {
            set_err(err, errlen, path, "out of memory building the header");
            rc = TD__ST_ENOMEM;
            goto done;
        }
        for (size_t i = 0; i < n_meta; i++) {
            if (keys[i] != NULL && json_object_get(meta, keys[i]) != NULL) {
                set_err(err, errlen, path, "metadata key \"%s\" appears twice", keys[i]);
                goto done;
            }
            if (keys[i] == NULL || values[i] == NULL ||
                json_object_set_new(meta, keys[i], json_string(values[i])) != 0) {
                set_err(err, errlen, path, "metadata entry %zu is not a valid UTF-8 string pair",
                        i);
                goto done;
            }
        }
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < n; i++) {
        const td__st_entry *t = &tensors[i];
        int64_t nelem;
        if (t->name == NULL || t->name[0] == '\0' || strcmp(t->name, "__metadata__") == 0) {
            set_err(err, errlen, path, "tensor %zu has an invalid name", i);
            goto done;
        }
        if (json_object_get(root, t->name) != NULL) {
            set_err(err, errlen, path, "tensor name \"%s\" appears twice", t->name);
            goto done;
        }
        const size_t esize = t->dtype != NULL ? td__st_dtype_size(t->dtype) : 0;
        if (esize == 0) {
            set_err(err, errlen, path, "tensor \"%s\" has an unknown dtype", t->name);
            goto done;
        }
        if (t->rank < 0 || t->rank > TD__ST_MAX_RANK ||
            !checked_nelem(t->rank, t->shape, &nelem) || nelem > INT64_MAX / 8) {
            set_err(err, errlen, path, "tensor \"%s\" has an invalid shape", t->name);
            goto done;
        }
        json_t *shape = json_array();
        json_t *entry = json_object();
        json_t *offs = json_array();
        if (shape == NULL || entry == NULL || offs == NULL) {
            json_decref(shape);
            json_decref(entry);
            json_decref(offs);
            set_err(err, errlen, path, "out of memory building the header");
            rc = TD__ST_ENOMEM;
            goto done;
        }
        for (int d = 0; d < t->rank; d++)
            json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
        uint64_t end;
        if (__builtin_add_overflow(offset, (uint64_t)nelem * esize, &end)) {
            set_err(err, errlen, path, "tensor \"%s\": the file would exceed 2^64 bytes",
                    t->name);
            goto done;
        }
        json_array_append_new(offs, json_integer((json_int_t)offset));
        json_array_append_new(offs, json_integer((json_int_t)end));
        json_object_set_new(entry, "dtype", json_string(t->dtype));
        json_object_set_new(entry, "shape", shape);
        json_object_set_new(entry, "data_offsets", offs);
        if (json_object_set_new(root, t->name, entry) != 0) {
            set_err(err, errlen, path, "tensor name \"%s\" is not valid UTF-8", t->name);
            goto done;
        }
        offset = end;
    }
    *out_json = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (*out_json == NULL) {
        set_err(err, errlen, path, "out of memory serialising the header");
        rc = TD__ST_ENOMEM;
        goto done;
    }
    rc = 0;
done:
    json_decref(root);
    return rc;
}

int td__st_write(const char *path, size_t n, const td__st_entry *tensors, size_t n_meta,
                          const char *const *keys, const char *const *values, char *err,
                          size_t errlen)
{
    char *json = NULL;
    char *tmp = NULL;
    FILE *f = NULL;
    int rc = -1;

    const int hr = build_header(path, n, tensors, n_meta, keys, values, &json, err, errlen);
    if (hr != 0) return hr;
    size_t len = strlen(json);
    size_t padded = (len + 7) / 8 * 8; /* data then starts 8-byte aligned */
    size_t tmplen = strlen(path) + sizeof ".tmp";
    tmp = malloc(tmplen);
    if (tmp == NULL) {
        set_err(err, errlen, path, "out of memory");
        rc = TD__ST_ENOMEM;
        goto done;
    }
    snprintf(tmp, tmplen, "%s.tmp", path);
    f = fopen(tmp, "wb");
    if (f == NULL) {
        set_err(err, errlen, path, "cannot create %s: %s", tmp, strerror(errno));
        rc = TD__ST_EIO;
        goto done;
    }
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++)
        lenbuf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    bool ok = fwrite(lenbuf, 1, 8, f) == 8 && fwrite(json, 1, len, f) == len;
    for (size_t i = len; ok && i < padded; i++)
        ok = fputc(' ', f) != EOF;
    for (size_t i = 0; ok && i < n; i++) {
        int64_t nelem = 0;
        checked_nelem(tensors[i].rank, tensors[i].shape, &nelem);
        ok = write_le(f, tensors[i].data, (size_t)nelem, td__st_dtype_size(tensors[i].dtype)) == 0;
    }
    if (!ok || fflush(f) != 0) {
        set_err(err, errlen, path, "write failed: %s", strerror(errno));
        rc = TD__ST_EIO;
        goto done;
    }
    int close_rc = fclose(f);
    f = NULL;
    if (close_rc != 0) {
        set_err(err, errlen, path, "write failed: %s", strerror(errno));
        rc = TD__ST_EIO;
        goto done;
    }
    if (rename(tmp, path) != 0) {
        set_err(err, errlen, path, "cannot rename %s into place: %s", tmp, strerror(errno));
        rc = TD__ST_EIO;
        goto done;
    }
    rc = 0;
done:
    if (f != NULL) fclose(f);
    if (rc != 0 && tmp != NULL) remove(tmp);
    free(tmp);
    free(json);
    return rc;
}

/* ---- reader ---- */

typedef struct span {
    uint64_t begin, end;
    size_t index;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static bool json_to_u64(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

/* Parse one tensor entry `val` named `name` into *t (data not yet attached). */
static int parse_entry(const char *path, const char *name, json_t *val, uint64_t data_len,
                       td__st_tensor *t, span *sp, char *err, size_t errlen)
{
    if (!json_is_object(val)) {
        set_err(err, errlen, path, "header entry \"%s\" is not an object", name);
        return -1;
    }
    json_t *dtype = json_object_get(val, "dtype");
    json_t *shape = json_object_get(val, "shape");
    json_t *offs = json_object_get(val, "data_offsets");
    if (!json_is_string(dtype) || !json_is_array(shape) || !json_is_array(offs)) {
        set_err(err, errlen, path,
                "tensor \"%s\": needs \"dtype\" (string), \"shape\" (array) and "
                "\"data_offsets\" (array)",
                name);
        return -1;
    }
    const char *dt = json_string_value(dtype);
    size_t esize = td__st_dtype_size(dt);
    if (esize == 0 || strlen(dt) >= sizeof t->dtype) {
        set_err(err, errlen, path, "tensor \"%s\": unknown dtype \"%s\"", name, dt);
        return -1;
    }
    size_t rank = json_array_size(shape);
    if (rank > TD__ST_MAX_RANK) {
        set_err(err, errlen, path, "tensor \"%s\": rank %zu exceeds the limit of %d", name, rank,
                TD__ST_MAX_RANK);
        return -1;
    }
    for (size_t d = 0; d < rank; d++) {
        uint64_t dim;
        if (!json_to_u64(json_array_get(shape, d), &dim) || dim > (uint64_t)INT64_MAX) {
            set_err(err, errlen, path,
                    "tensor \"%s\": shape entry %zu is not a non-negative "
                    "integer",
                    name, d);
            return -1;
        }
        t->shape[d] = (int64_t)dim;
    }
    uint64_t begin, end;
    if (json_array_size(offs) != 2 || !json_to_u64(json_array_get(offs, 0), &begin) ||
        !json_to_u64(json_array_get(offs, 1), &end)) {
        set_err(err, errlen, path,
                "tensor \"%s\": data_offsets must be two non-negative "
                "integers",
                name);
        return -1;
    }
    if (begin > end || end > data_len) {
        set_err(err, errlen, path,
                "tensor \"%s\": data_offsets [%llu, %llu] out of range (data region is %llu "
                "bytes)",
                name, (unsigned long long)begin, (unsigned long long)end,
                (unsigned long long)data_len);
        return -1;
    }
    int64_t nelem;
    uint64_t nbytes;
    if (!checked_nelem((int)rank, t->shape, &nelem) ||
        __builtin_mul_overflow((uint64_t)nelem, (uint64_t)esize, &nbytes)) {
        set_err(err, errlen, path, "tensor \"%s\": shape is too large", name);
        return -1;
    }
    if (nbytes != end - begin) {
        set_err(err, errlen, path,
                "tensor \"%s\": data_offsets [%llu, %llu] hold %llu bytes, but dtype %s and "
                "its shape need %llu",
                name, (unsigned long long)begin, (unsigned long long)end,
                (unsigned long long)(end - begin), dt, (unsigned long long)nbytes);
        return -1;
    }
    t->name = strdup(name);
    if (t->name == NULL) {
        set_err(err, errlen, path, "out of memory");
        return -1;
    }
    snprintf(t->dtype, sizeof t->dtype, "%s", dt);
    t->elem_size = esize;
    t->rank = (int)rank;
    t->nelem = nelem;
    t->nbytes = (size_t)nbytes;
    sp->begin = begin;
    sp->end = end;
    return 0;
}

static int parse_metadata(const char *path, json_t *meta, td__st_file *out, char *err,
                          size_t errlen)
{
    if (!json_is_object(meta)) {
        set_err(err, errlen, path, "\"__metadata__\" is not an object");
        return -1;
    }
    size_t n = json_object_size(meta);
    out->metadata_keys = calloc(n ? n : 1, sizeof(char *));
    out->metadata_values = calloc(n ? n : 1, sizeof(char *));
    if (out->metadata_keys == NULL || out->metadata_values == NULL) {
        set_err(err, errlen, path, "out of memory");
        return -1;
    }
    const char *key;
    json_t *val;
    json_object_foreach(meta, key, val)
    {
        if (!json_is_string(val)) {
            set_err(err, errlen, path, "\"__metadata__\" value of \"%s\" is not a string", key);
            return -1;
        }
        size_t i = out->n_metadata;
        out->metadata_keys[i] = strdup(key);
        out->metadata_values[i] = strdup(json_string_value(val));
        out->n_metadata++;
        if (out->metadata_keys[i] == NULL || out->metadata_values[i] == NULL) {
            set_err(err, errlen, path, "out of memory");
            return -1;
        }
    }
    return 0;
}

/* Check that the spans tile [0, data_len) exactly. */
static int check_coverage(const char *path, const td__st_file *out, span *spans,
                          uint64_t data_len, char *err, size_t errlen)
{
    qsort(spans, out->n_tensors, sizeof *spans, span_cmp);
    uint64_t expect = 0;
    for (size_t i = 0; i < out->n_tensors; i++) {
        const span *s = &spans[i];
        if (s->begin < expect) {
            const span *p = &spans[i - 1];
            set_err(err, errlen, path,
                    "tensors \"%s\" [%llu, %llu) and \"%s\" [%llu, %llu) overlap",
                    out->tensors[p->index].name, (unsigned long long)p->begin,
                    (unsigned long long)p->end, out->tensors[s->index].name,
                    (unsigned long long)s->begin, (unsigned long long)s->end);
            return -1;
        }
        if (s->begin > expect) {
            set_err(err, errlen, path, "data bytes [%llu, %llu) belong to no tensor",
                    (unsigned long long)expect, (unsigned long long)s->begin);
            return -1;
        }
        expect = s->end;
    }
    if (expect != data_len) {
        set_err(err, errlen, path, "data region is %llu bytes but the tensors cover only %llu",
                (unsigned long long)data_len, (unsigned long long)expect);
        return -1;
    }
    return 0;
}

int td__st_read(const char *path, td__st_file *out, char *err, size_t errlen)
{
    int rc = -1;
    FILE *f = NULL;
    char *header = NULL;
    unsigned char *data = NULL;
    json_t *root = NULL;
    span *spans = NULL;
    td__st_file res = {0};

    memset(out, 0, sizeof *out);
    f = fopen(path, "rb");
    if (f == NULL) {
        set_err(err, errlen, path, "cannot open: %s", strerror(errno));
        rc = TD__ST_EIO;
        goto done;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        set_err(err, errlen, path, "not a regular file");
        rc = TD__ST_EIO;
        goto done;
    }
    uint64_t file_size = (uint64_t)st.st_size;
    if (file_size < 8) {
        set_err(err, errlen, path,
                "file is %llu bytes, shorter than the 8-byte header length field",
                (unsigned long long)file_size);
        goto done;
    }
    unsigned char lenbuf[8];
    if (fread(lenbuf, 1, 8, f) != 8) {
        set_err(err, errlen, path, "cannot read the header length");
        rc = TD__ST_EIO;
        goto done;
    }
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)lenbuf[i] << (8 * i);
    if (hlen > file_size - 8) {
        set_err(err, errlen, path,
                "header length %llu exceeds the file (%llu bytes follow the length field)",
                (unsigned long long)hlen, (unsigned long long)(file_size - 8));
        goto done;
    }
    if (hlen > TD__ST_MAX_HEADER) {
        set_err(err, errlen, path, "header length %llu exceeds the limit of %u bytes",
                (unsigned long long)hlen, TD__ST_MAX_HEADER);
        goto done;
    }
    uint64_t data_len = file_size - 8 - hlen;
    header = malloc((size_t)hlen + 1);
    data = malloc(data_len ? (size_t)data_len : 1);
    if (header == NULL || data == NULL) {
        set_err(err, errlen, path, "out of memory");
        rc = TD__ST_ENOMEM;
        goto done;
    }
    if (fread(header, 1, (size_t)hlen, f) != hlen ||
        fread(data, 1, (size_t)data_len, f) != data_len) {
        set_err(err, errlen, path, "read failed (file changed while reading?)");
        rc = TD__ST_EIO;
        goto done;
    }
    header[hlen] = '\0';

    json_error_t jerr;
    root = json_loadb(header, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        set_err(err, errlen, path, "header is not valid JSON: %s (line %d, column %d)", jerr.text,
                jerr.line, jerr.column);
        goto done;
    }
    if (!json_is_object(root)) {
        set_err(err, errlen, path, "header is not a JSON object");
        goto done;
    }
    size_t n_entries = json_object_size(root);
    res.tensors = calloc(n_entries ? n_entries : 1, sizeof *res.tensors);
    spans = calloc(n_entries ? n_entries : 1, sizeof *spans);
    if (res.tensors == NULL || spans == NULL) {
        set_err(err, errlen, path, "out of memory");
        rc = TD__ST_ENOMEM;
        goto done;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        if (strcmp(key, "__metadata__") == 0) {
            if (parse_metadata(path, val, &res, err, errlen) != 0) goto done;
            continue;
        }
        if (key[0] == '\0') { /* the writer refuses it too: no name to find it by */
            set_err(err, errlen, path, "header entry \"\" has an empty tensor name");
            goto done;
        }
        size_t i = res.n_tensors;
        if (parse_entry(path, key, val, data_len, &res.tensors[i], &spans[i], err, errlen) != 0)
            goto done;
        spans[i].index = i;
        res.n_tensors++;
    }
    if (check_coverage(path, &res, spans, data_len, err, errlen) != 0) goto done;
    bool swap = !host_is_little_endian();
    for (size_t j = 0; j < res.n_tensors; j++) {
        td__st_tensor *t = &res.tensors[spans[j].index];
        t->data = malloc(t->nbytes ? t->nbytes : 1);
        if (t->data == NULL) {
            set_err(err, errlen, path, "out of memory");
            rc = TD__ST_ENOMEM;
            goto done;
        }
        memcpy(t->data, data + spans[j].begin, t->nbytes);
        if (swap) swap_elements(t->data, t->nbytes, t->elem_size);
    }
    *out = res;
    memset(&res, 0, sizeof res);
    rc = 0;
done:
    td__st_file_fini(&res);
    json_decref(root);
    free(spans);
    free(data);
    free(header);
    if (f != NULL) fclose(f);
    return rc;
}

void td__st_file_fini(td__st_file *f)
{
    if (f == NULL) return;
    for (size_t i = 0; i < f->n_tensors; i++) {
        free(f->tensors[i].name);
        free(f->tensors[i].data);
    }
    free(f->tensors);
    for (size_t i = 0; i < f->n_metadata; i++) {
        free(f->metadata_keys[i]);
        free(f->metadata_values[i]);
    }
    free(f->metadata_keys);
    free(f->metadata_values);
    memset(f, 0, sizeof *f);
}

const td__st_tensor *td__st_find(const td__st_file *f, const char *name)
{
    for (size_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

const char *td__st_metadata(const td__st_file *f, const char *key)
{
    for (size_t i = 0; i < f->n_metadata; i++)
        if (strcmp(f->metadata_keys[i], key) == 0) return f->metadata_values[i];
    return NULL;
}
