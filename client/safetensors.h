/* safetensors.h — read and write the safetensors tensor file format (internal to
 * libtensord; the public API is td_safetensors_* in tensord.h).
 *
 * Why this module: programs save and load weights and optimizer state in a format other tools read
 * (Hugging Face safetensors), and the reader is a parser of untrusted files, so it is kept
 * small, self-contained (jansson + libc only) and strict.
 *
 * Format (https://github.com/huggingface/safetensors, "Format" section of its README):
 *   bytes 0..7    N, unsigned 64-bit little-endian: length of the JSON header
 *   bytes 8..8+N  UTF-8 JSON object; each key except "__metadata__" names a tensor:
 *                   {"dtype": "F32", "shape": [784, 256], "data_offsets": [BEGIN, END]}
 *                 offsets are relative to the first byte after the header; "__metadata__",
 *                 if present, maps strings to strings. The header may end with spaces.
 *   bytes 8+N..   tensor data, little-endian, row-major; the tensors cover this region
 *                 exactly (no overlaps, no holes).
 *
 * The reader rejects, with a message naming the file and the problem: a file shorter than
 * 8 bytes, a header length beyond the file or above TD__ST_MAX_HEADER, invalid JSON
 * (and duplicate keys), entries that are not objects or lack dtype/shape/data_offsets, an
 * unknown dtype, a rank above TD__ST_MAX_RANK, negative or non-integer dims, offsets
 * out of range, overlapping, leaving holes, or not matching dtype size * element count.
 *
 * Thread-safety: every function is safe to call from any thread on distinct arguments.
 */
#ifndef TD_CLIENT_SAFETENSORS_H
#define TD_CLIENT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define TD__ST_MAX_RANK 8
/* Failure returns: -1 the data is invalid (a rejection above), TD__ST_EIO the file could
 * not be opened, read, written or renamed, TD__ST_ENOMEM out of memory. */
#define TD__ST_EIO (-2)
#define TD__ST_ENOMEM (-3)
/* Largest accepted JSON header (same ceiling as the reference implementation). */
#define TD__ST_MAX_HEADER (100u * 1024u * 1024u)

/* One tensor to write. All pointers are borrowed for the call. */
typedef struct td__st_entry {
    const char *name;     /* not "__metadata__"; unique within one file */
    int rank;             /* 0..TD__ST_MAX_RANK */
    const int64_t *shape; /* rank dims, each >= 0 */
    const char *dtype;    /* a safetensors dtype name: "F32", "BF16", "I64", ... */
    const void *data;     /* product(shape) elements of dtype in host byte order */
} td__st_entry;

/* One tensor read from a file. */
typedef struct td__st_tensor {
    char *name;       /* owned by the enclosing td__st_file */
    char dtype[8];    /* as in the file: "F32", "I64", "BF16", ... */
    size_t elem_size; /* bytes per element of dtype */
    int rank;
    int64_t shape[TD__ST_MAX_RANK];
    int64_t nelem;
    void *data; /* nbytes bytes, converted to host byte order; owned by the file */
    size_t nbytes;
} td__st_tensor;

/* The contents of one file, in header order. */
typedef struct td__st_file {
    size_t n_tensors;
    td__st_tensor *tensors;
    size_t n_metadata;
    char **metadata_keys; /* n_metadata strings each */
    char **metadata_values;
} td__st_file;

/* Write `n` tensors and `n_meta` metadata pairs (keys[i] -> values[i]; both may be NULL
 * when n_meta is 0) to `path`. The file is written beside `path` under a temporary name
 * and renamed into place, so a failed write never leaves a partial file at `path`.
 * Returns 0, or a negative failure (above) with a message ("PATH: ...") in err (errlen
 * bytes, NUL-terminated). */
int td__st_write(const char *path, size_t n, const td__st_entry *tensors, size_t n_meta,
                          const char *const *keys, const char *const *values, char *err,
                          size_t errlen);

/* Read and validate the whole file at `path` into *out (caller's storage; release with
 * td__st_file_fini). Returns 0, or -1 with a message in err; on failure *out is
 * left zeroed and owns nothing. */
int td__st_read(const char *path, td__st_file *out, char *err, size_t errlen);

/* Free everything a successful td__st_read put in *f and zero it. NULL is a no-op. */
void td__st_file_fini(td__st_file *f);

/* The tensor called `name`, or NULL. The result is borrowed from `f`. */
const td__st_tensor *td__st_find(const td__st_file *f, const char *name);

/* The metadata value for `key`, or NULL. Borrowed from `f`. */
const char *td__st_metadata(const td__st_file *f, const char *key);

/* Element size of a safetensors dtype name ("F32" -> 4), or 0 if the name is unknown. */
size_t td__st_dtype_size(const char *dtype);

#endif
