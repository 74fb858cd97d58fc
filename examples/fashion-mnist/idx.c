/* idx.c — IDX image/label loader for the Fashion-MNIST example (format: idx.h).
 *
 * The header is read first and the exact payload size derived from it, so the loader
 * allocates once and can tell "too short" from "trailing bytes" from "corrupt gzip"; a
 * hostile header cannot make it grow a buffer without bound.
 */
#include "idx.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
/* Ceiling on the item count a header may claim (60,000 in the real files). */
#define IDX_MAX_ITEMS (1LL << 24)

static const char install_hint[] =
    "install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist) "
    "or pass --data DIR";

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Resolve dir/name, falling back to the name without ".gz" when only that exists.
 * Returns a malloc'd path, or NULL with the message in err. */
static char *resolve(const char *dir, const char *name, char *err, size_t errlen)
{
    size_t len = strlen(dir) + 1 + strlen(name) + 1;
    char *path = malloc(len);
    if (path == NULL) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(path, len, "%s/%s", dir, name);
    if (access(path, F_OK) == 0) return path;
    int saved = errno;
    size_t plen = strlen(path);
    if (plen > 3 && strcmp(path + plen - 3, ".gz") == 0) {
        path[plen - 3] = '\0';
        if (access(path, F_OK) == 0) return path;
        path[plen - 3] = '.';
    }
    set_err(err, errlen, "cannot open %s: %s; %s", path, strerror(saved), install_hint);
    free(path);
    return NULL;
}

/* Read exactly n bytes. Returns 0, or -1 with a message naming what went wrong. */
static int read_exact(gzFile gz, const char *path, void *buf, size_t n, size_t already,
                      const char *what, char *err, size_t errlen)
{
    unsigned char *p = buf;
    size_t got = 0;
    while (got < n) {
        size_t want = n - got;
        if (want > (1u << 30)) want = 1u << 30;
        int r = gzread(gz, p + got, (unsigned)want);
        if (r < 0) {
            int zerr;
            const char *msg = gzerror(gz, &zerr);
            set_err(err, errlen, "%s: corrupt file (%s) while reading %s", path,
                    zerr == Z_ERRNO ? strerror(errno) : msg, what);
            return -1;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    if (got < n) {
        int zerr;
        gzerror(gz, &zerr);
        if (zerr == Z_BUF_ERROR)
            set_err(err, errlen,
                    "%s: gzip data ends early (truncated file?) after %zu bytes, while "
                    "reading %s (%zu bytes expected in all)",
                    path, already + got, what, already + n);
        else
            set_err(err, errlen,
                    "%s: file is too short: ends after %zu bytes, while reading "
                    "%s (%zu bytes expected in all)",
                    path, already + got, what, already + n);
        return -1;
    }
    return 0;
}

static uint32_t be32(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

/* Load one IDX file with the given magic; dims must be {count, rows, cols} for images or
 * {count} for labels. On success *data owns count * item_bytes bytes. */
static int load_idx(const char *path, uint32_t magic, int64_t *count, uint8_t **data, char *err,
                    size_t errlen)
{
    int rc = -1;
    uint8_t *buf = NULL;
    errno = 0;
    gzFile gz = gzopen(path, "rb");
    if (gz == NULL) {
        set_err(err, errlen, "cannot open %s: %s; %s", path,
                errno ? strerror(errno) : "out of memory", install_hint);
        return -1;
    }
    bool images = magic == IDX_MAGIC_IMAGES;
    size_t hdr_len = images ? 16 : 8;
    unsigned char hdr[16];
    if (read_exact(gz, path, hdr, hdr_len, 0, "the IDX header", err, errlen) != 0) goto done;
    uint32_t got_magic = be32(hdr);
    if (got_magic != magic) {
        set_err(err, errlen,
                "%s: bad magic number 0x%08x, expected 0x%08x (IDX unsigned-byte %s); is this "
                "the right file?",
                path, got_magic, magic, images ? "images, 3 dims" : "labels, 1 dim");
        goto done;
    }
    int64_t n = be32(hdr + 4);
    if (n > IDX_MAX_ITEMS) {
        set_err(err, errlen, "%s: header claims %lld items, more than the limit of %lld", path,
                (long long)n, (long long)IDX_MAX_ITEMS);
        goto done;
    }
    size_t item = 1;
    if (images) {
        uint32_t rows = be32(hdr + 8), cols = be32(hdr + 12);
        if (rows != FM_IMAGE_ROWS || cols != FM_IMAGE_COLS) {
            set_err(err, errlen, "%s: images are %ux%u, expected %dx%d", path, rows, cols,
                    FM_IMAGE_ROWS, FM_IMAGE_COLS);
            goto done;
        }
        item = FM_IMAGE_PIXELS;
    }
    size_t payload = (size_t)n * item;
    buf = malloc(payload ? payload : 1);
    if (buf == NULL) {
        set_err(err, errlen, "%s: out of memory for %lld items", path, (long long)n);
        goto done;
    }
    char what[96];
    snprintf(what, sizeof what, "%lld %s", (long long)n, images ? "images of 28x28" : "labels");
    if (read_exact(gz, path, buf, payload, hdr_len, what, err, errlen) != 0) goto done;
    unsigned char extra;
    int r = gzread(gz, &extra, 1);
    if (r > 0) {
        set_err(err, errlen,
                "%s: file is longer than its header says (%zu-byte header + %s = %zu bytes)", path,
                hdr_len, what, hdr_len + payload);
        goto done;
    }
    int zerr = Z_OK;
    if (r < 0) gzerror(gz, &zerr);
    int close_rc = gzclose_r(gz);
    gz = NULL;
    if (r < 0 || close_rc != Z_OK) {
        set_err(err, errlen, "%s: gzip stream is %s", path,
                (r < 0 && zerr != Z_BUF_ERROR) || close_rc == Z_DATA_ERROR
                    ? "corrupt (checksum or data error)"
                    : "truncated (no gzip trailer)");
        goto done;
    }
    *count = n;
    *data = buf;
    buf = NULL;
    rc = 0;
done:
    if (gz != NULL) gzclose_r(gz);
    free(buf);
    return rc;
}

int fm_dataset_load(fm_dataset *out, const char *dir, const char *images, const char *labels,
                    int64_t limit, char *err, size_t errlen)
{
    int rc = -1;
    char *ipath = NULL, *lpath = NULL;
    fm_dataset d = {0};
    int64_t n_labels = 0;

    memset(out, 0, sizeof *out);
    ipath = resolve(dir, images, err, errlen);
    if (ipath == NULL) goto done;
    lpath = resolve(dir, labels, err, errlen);
    if (lpath == NULL) goto done;
    if (load_idx(ipath, IDX_MAGIC_IMAGES, &d.n, &d.pixels, err, errlen) != 0) goto done;
    if (load_idx(lpath, IDX_MAGIC_LABELS, &n_labels, &d.labels, err, errlen) != 0) goto done;
    if (n_labels != d.n) {
        set_err(err, errlen, "%s has %lld labels but %s has %lld images", lpath,
                (long long)n_labels, ipath, (long long)d.n);
        goto done;
    }
    for (int64_t i = 0; i < d.n; i++) {
        if (d.labels[i] >= FM_CLASSES) {
            set_err(err, errlen, "%s: label %u at index %lld is not in 0..%d", lpath, d.labels[i],
                    (long long)i, FM_CLASSES - 1);
            goto done;
        }
    }
    if (limit > 0 && limit < d.n) d.n = limit;
    *out = d;
    memset(&d, 0, sizeof d);
    rc = 0;
done:
    fm_dataset_fini(&d);
    free(ipath);
    free(lpath);
    return rc;
}

void fm_dataset_fini(fm_dataset *d)
{
    if (d == NULL) return;
    free(d->pixels);
    free(d->labels);
    memset(d, 0, sizeof *d);
}
