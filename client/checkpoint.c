/* checkpoint.c — libtensord's safetensors API (td_safetensors_*, include/tensord.h): tensors
 * of any device saved to and loaded from safetensors files.
 *
 * Why a thin layer: the strict parser and writer live in client/safetensors.c (no tensord
 * types, so its tests feed it hostile files directly); this file maps dtypes, reads tensors
 * back to the host for a save and uploads them for a load, and words the errors the way
 * the rest of the API does (td_last_error, naming the file and the tensor).
 * Thread-safety: see tensord.h.
 */
#include "client/capture.h"
#include "client/safetensors.h"
#include "common/alloc.h"
#include "tensord.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct td_safetensors {
    td__st_file file;
    char *path;
};

static const char *const st_names[TD_DTYPE_COUNT] = {
    [TD_F32] = "F32", [TD_F64] = "F64", [TD_I32] = "I32",  [TD_I64] = "I64", [TD_U8] = "U8",
    [TD_BOOL] = "BOOL", [TD_F16] = "F16", [TD_BF16] = "BF16", [TD_I8] = "I8", [TD_I16] = "I16",
};

/* The safetensors name of dt, or NULL. */
static const char *st_dtype(td_dtype dt)
{
    return (unsigned)dt < TD_DTYPE_COUNT ? st_names[dt] : NULL;
}

static bool td_dtype_of(const char *name, td_dtype *out)
{
    for (int i = 0; i < TD_DTYPE_COUNT; i++)
        if (st_names[i] != NULL && strcmp(st_names[i], name) == 0) {
            *out = (td_dtype)i;
            return true;
        }
    return false;
}

static td_status fail(td_context *ctx, td_status st, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    td__ctx_set_error(ctx, st, msg);
    return st;
}

/* The status of a failure return of client/safetensors.c. */
static td_status st_status(int rc)
{
    return rc == TD__ST_EIO ? TD_EIO : rc == TD__ST_ENOMEM ? TD_ENOMEM : TD_EINVAL;
}

td_status td_safetensors_save(const char *path, int n, const char *const *names,
                              td_tensor *const *tensors, int n_meta, const char *const *keys,
                              const char *const *values)
{
    if (path == NULL || n < 0 || (n > 0 && (names == NULL || tensors == NULL)) || n_meta < 0 ||
        (n_meta > 0 && (keys == NULL || values == NULL)))
        return fail(NULL, TD_EINVAL, "td_safetensors_save: %s",
                    path == NULL ? "path is NULL" : "n, names, tensors or metadata are invalid");
    td_context *ctx = n > 0 && tensors[0] != NULL ? td__tensor_ctx(tensors[0]) : NULL;
    td__st_entry *e = td__calloc(n > 0 ? (size_t)n : 1, sizeof *e);
    void **host = td__calloc(n > 0 ? (size_t)n : 1, sizeof *host);
    td_status st = TD_OK;
    if (e == NULL || host == NULL) {
        st = fail(ctx, TD_ENOMEM, "td_safetensors_save: %s: out of memory", path);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        td_tensor *t = tensors[i];
        if (t == NULL || names[i] == NULL) {
            st = fail(ctx, TD_EINVAL, "td_safetensors_save: %s: tensor %d or its name is NULL",
                      path, i);
            goto done;
        }
        const size_t nbytes = td_nbytes(t);
        host[i] = td__malloc(nbytes ? nbytes : 1);
        if (host[i] == NULL) {
            st = fail(ctx, TD_ENOMEM, "td_safetensors_save: %s: out of memory for %s (%zu bytes)",
                      path, names[i], nbytes);
            goto done;
        }
        if (nbytes > 0 && (st = td_read(t, host[i], nbytes)) != TD_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", td_last_error(td__tensor_ctx(t)));
            st = fail(td__tensor_ctx(t), st, "td_safetensors_save: %s: reading %s: %s", path,
                      names[i], why);
            goto done;
        }
        e[i] = (td__st_entry){.name = names[i], .dtype = st_dtype(td_tensor_dtype(t)),
                              .rank = td_rank(t), .shape = td_dims(t), .data = host[i]};
    }
    char err[512];
    const int rc = td__st_write(path, (size_t)n, e, (size_t)n_meta, keys, values, err, sizeof err);
    if (rc != 0) st = fail(ctx, st_status(rc), "td_safetensors_save: %s", err);
done:
    for (int i = 0; host != NULL && i < n; i++) td__free(host[i]);
    td__free(host);
    td__free(e);
    return st;
}

td_status td_safetensors_open(const char *path, td_safetensors **out)
{
    if (path == NULL || out == NULL)
        return fail(NULL, TD_EINVAL, "td_safetensors_open: path or out is NULL");
    td_safetensors *f = td__calloc(1, sizeof *f);
    char *p = f != NULL ? td__malloc(strlen(path) + 1) : NULL;
    if (p == NULL) {
        td__free(f);
        return fail(NULL, TD_ENOMEM, "td_safetensors_open: %s: out of memory", path);
    }
    memcpy(p, path, strlen(path) + 1);
    char err[512];
    const int rc = td__st_read(path, &f->file, err, sizeof err);
    if (rc != 0) {
        td__free(p);
        td__free(f);
        return fail(NULL, st_status(rc), "td_safetensors_open: %s", err);
    }
    f->path = p;
    *out = f;
    return TD_OK;
}

void td_safetensors_close(td_safetensors *f)
{
    if (f == NULL) return;
    td__st_file_fini(&f->file);
    td__free(f->path);
    td__free(f);
}

int td_safetensors_count(const td_safetensors *f)
{
    return f != NULL ? (int)f->file.n_tensors : 0;
}

const char *td_safetensors_name(const td_safetensors *f, int i)
{
    if (f == NULL || i < 0 || (size_t)i >= f->file.n_tensors) return NULL;
    return f->file.tensors[i].name;
}

const char *td_safetensors_metadata(const td_safetensors *f, const char *key)
{
    return f != NULL && key != NULL ? td__st_metadata(&f->file, key) : NULL;
}

static void shape_str(char *buf, size_t len, int rank, const int64_t *dims)
{
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < rank && used < len; d++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld", d ? ", " : "",
                                 (long long)dims[d]);
    if (used < len) snprintf(buf + used, len - used, "]");
}

td_status td_safetensors_get(const td_safetensors *f, td_context *ctx, const char *name,
                             td_dtype dt, int rank, const int64_t *dims, td_tensor **out)
{
    if (f == NULL || ctx == NULL || name == NULL || out == NULL || rank > TD_MAX_RANK ||
        (rank > 0 && dims == NULL))
        return fail(ctx, TD_EINVAL, "td_safetensors_get: NULL argument or rank %d", rank);
    const td__st_tensor *t = td__st_find(&f->file, name);
    if (t == NULL)
        return fail(ctx, TD_ENOTFOUND, "%s: %s: missing from the file", f->path, name);
    td_dtype have;
    if (!td_dtype_of(t->dtype, &have))
        return fail(ctx, TD_EUNSUPPORTED, "%s: %s: dtype %s has no tensord dtype", f->path,
                    name, t->dtype);
    if (have != dt)
        return fail(ctx, TD_EINVAL, "%s: %s: dtype %s in file, model needs %s", f->path, name,
                    t->dtype, st_dtype(dt) != NULL ? st_dtype(dt) : "?");
    if (rank >= 0 && (t->rank != rank ||
                      memcmp(t->shape, dims, (size_t)rank * sizeof(int64_t)) != 0)) {
        char a[160], b[160];
        shape_str(a, sizeof a, t->rank, t->shape);
        shape_str(b, sizeof b, rank, dims);
        return fail(ctx, TD_EINVAL, "%s: %s: shape %s in file, model needs %s", f->path, name,
                    a, b);
    }
    td_tensor *r = td_from_host(ctx, have, t->rank, t->shape, t->data);
    if (r == NULL) return td_last_status(ctx);
    *out = r;
    return TD_OK;
}
