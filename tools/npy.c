/* npy.c — .npy reader and writer for tensorctl run (format: numpy/lib/format.py, "NEP 1"):
 * magic "\x93NUMPY", major and minor version bytes, a little-endian header length (uint16
 * in 1.0, uint32 in 2.0 and 3.0), then a Python dict literal with 'descr', 'fortran_order'
 * and 'shape', padded with spaces and a newline so the data starts 64-byte aligned.
 * The header is parsed strictly for what we accept, and every size is checked for
 * overflow before allocating.
 */
#include "tools/npy.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *descr;
    td_dtype dt;
} descrs[] = {
    {"<f4", TD_F32}, {"<f8", TD_F64}, {"<f2", TD_F16}, {"<i4", TD_I32}, {"<i8", TD_I64},
    {"<i2", TD_I16}, {"|i1", TD_I8},  {"|u1", TD_U8},  {"|b1", TD_BOOL},
};

const char *td_npy_descr(td_dtype dt)
{
    for (size_t i = 0; i < sizeof descrs / sizeof descrs[0]; i++)
        if (descrs[i].dt == dt) return descrs[i].descr;
    return NULL;
}

#define FAIL(...)                                                                          \
    do {                                                                                   \
        snprintf(err, errlen, __VA_ARGS__);                                                \
        goto fail;                                                                         \
    } while (0)

/* The value after 'key': in header h, or NULL. */
static const char *find_key(const char *h, const char *key)
{
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(h, pat);
    if (p == NULL) return NULL;
    p += strlen(pat);
    while (*p == ' ') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

int td_npy_read(const char *path, td_npy *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    char *hdr = NULL;
    void *data = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "%s: cannot open", path);
        return -1;
    }
    unsigned char pre[12];
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0)
        FAIL("%s: not a .npy file (no \\x93NUMPY magic)", path);
    unsigned major = pre[6], minor = pre[7];
    uint32_t hlen;
    if (major == 1 && minor == 0) {
        hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
    } else if ((major == 2 || major == 3) && minor == 0) {
        if (fread(pre + 10, 1, 2, f) != 2) FAIL("%s: truncated header", path);
        hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8 | (uint32_t)pre[10] << 16 |
               (uint32_t)pre[11] << 24;
    } else {
        FAIL("%s: .npy format version %u.%u is not supported (1.0, 2.0 and 3.0 are)", path,
             major, minor);
    }
    if (hlen > (1u << 24)) FAIL("%s: header of %u bytes is too large", path, hlen);
    hdr = malloc(hlen + 1);
    if (hdr == NULL || fread(hdr, 1, hlen, f) != hlen) FAIL("%s: truncated header", path);
    hdr[hlen] = '\0';
    if (memchr(hdr, '\0', hlen) != NULL) FAIL("%s: header contains a NUL byte", path);
    const char *d = find_key(hdr, "descr");
    if (d == NULL || (*d != '\'' && *d != '"')) FAIL("%s: header has no 'descr' string", path);
    char descr[16] = "";
    size_t dl = strcspn(d + 1, "'\"");
    if (dl >= sizeof descr) FAIL("%s: descr '%.20s...' is not supported", path, d + 1);
    memcpy(descr, d + 1, dl);
    descr[dl] = '\0';
    if (strcmp(descr, "<u1") == 0 || strcmp(descr, "=u1") == 0) strcpy(descr, "|u1");
    if (strcmp(descr, "<i1") == 0 || strcmp(descr, "=i1") == 0) strcpy(descr, "|i1");
    if (strcmp(descr, "<b1") == 0 || strcmp(descr, "=b1") == 0) strcpy(descr, "|b1");
    int found = -1;
    for (size_t i = 0; i < sizeof descrs / sizeof descrs[0]; i++)
        if (strcmp(descrs[i].descr, descr) == 0) found = (int)i;
    if (found < 0) {
        if (descr[0] == '>')
            FAIL("%s: big-endian dtype '%s' is not supported; save the array little-endian "
                 "(numpy: a.astype(a.dtype.newbyteorder('<')))", path, descr);
        FAIL("%s: dtype '%s' is not supported (want one of <f4 <f8 <f2 <i8 <i4 <i2 |i1 |u1 "
             "|b1)", path, descr);
    }
    const char *fo = find_key(hdr, "fortran_order");
    if (fo == NULL) FAIL("%s: header has no 'fortran_order'", path);
    if (strncmp(fo, "True", 4) == 0)
        FAIL("%s: Fortran-order arrays are not supported; save it in C order "
             "(numpy: np.ascontiguousarray(a))", path);
    if (strncmp(fo, "False", 5) != 0) FAIL("%s: bad 'fortran_order' value", path);
    const char *sh = find_key(hdr, "shape");
    if (sh == NULL || *sh != '(') FAIL("%s: header has no 'shape' tuple", path);
    sh++;
    int rank = 0;
    uint64_t nelem = 1;
    for (;;) {
        while (*sh == ' ') sh++;
        if (*sh == ')') break;
        char *end;
        long long v = strtoll(sh, &end, 10);
        if (end == sh || v < 0) FAIL("%s: bad 'shape' entry", path);
        if (rank >= TD_MAX_RANK) FAIL("%s: rank above %d is not supported", path, TD_MAX_RANK);
        out->dims[rank++] = v;
        if (__builtin_mul_overflow(nelem, (uint64_t)v, &nelem))
            FAIL("%s: shape overflows", path);
        sh = end;
        while (*sh == ' ') sh++;
        if (*sh == ',') sh++;
        else if (*sh != ')') FAIL("%s: bad 'shape' tuple", path);
    }
    out->dtype = descrs[found].dt;
    out->rank = rank;
    uint64_t nb;
    if (__builtin_mul_overflow(nelem, (uint64_t)td_dtype_size(out->dtype), &nb) ||
        nb > ((uint64_t)1 << 40))
        FAIL("%s: array of %llu elements is too large", path, (unsigned long long)nelem);
    data = malloc(nb ? (size_t)nb : 1);
    if (data == NULL) FAIL("%s: out of memory for %llu bytes", path, (unsigned long long)nb);
    if (fread(data, 1, (size_t)nb, f) != nb)
        FAIL("%s: data is shorter than the shape says (%llu bytes)", path, (unsigned long long)nb);
    if (fgetc(f) != EOF) FAIL("%s: data is longer than the shape says (%llu bytes)", path,
                              (unsigned long long)nb);
    if (out->dtype == TD_BOOL)
        for (uint64_t i = 0; i < nb; i++)
            if (((unsigned char *)data)[i] > 1) FAIL("%s: bool element %llu is not 0 or 1", path,
                                                     (unsigned long long)i);
    fclose(f);
    free(hdr);
    out->data = data;
    out->nbytes = (size_t)nb;
    return 0;
fail:
    fclose(f);
    free(hdr);
    free(data);
    return -1;
}

int td_npy_write(const char *path, td_dtype dt, int rank, const int64_t *dims, const void *data,
                 size_t nbytes, char *err, size_t errlen)
{
    const char *descr = td_npy_descr(dt);
    if (descr == NULL) {
        snprintf(err, errlen, "%s: numpy has no dtype for %s", path, td_dtype_name(dt));
        return -1;
    }
    char shape[TD_MAX_RANK * 24 + 8];
    int p = 0;
    for (int i = 0; i < rank; i++)
        p += snprintf(shape + p, sizeof shape - (size_t)p, "%lld%s", (long long)dims[i],
                      rank == 1 ? "," : i + 1 < rank ? ", " : "");
    char hdr[512];
    int hl = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                      descr, shape);
    /* pad so that 10 + header length is a multiple of 64, ending in '\n' */
    size_t total = ((size_t)10 + (size_t)hl + 1 + 63) / 64 * 64;
    size_t padded = total - 10;
    while ((size_t)hl < padded - 1) hdr[hl++] = ' ';
    hdr[hl++] = '\n';
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        return -1;
    }
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 0xff),
                             (unsigned char)(hl >> 8)};
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, (size_t)hl, f) == (size_t)hl &&
             (nbytes == 0 || fwrite(data, 1, nbytes, f) == nbytes);
    if (fclose(f) != 0) ok = 0;
    if (!ok) {
        snprintf(err, errlen, "%s: write failed", path);
        return -1;
    }
    return 0;
}
