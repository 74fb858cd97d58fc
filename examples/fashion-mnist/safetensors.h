/* safetensors.h — read and write the safetensors tensor file format.
 *
 * Why this module: the trainer saves and loads its weights in a format other tools read
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
 * 8 bytes, a header length beyond the file or above SAFETENSORS_MAX_HEADER, invalid JSON
 * (and duplicate keys), entries that are not objects or lack dtype/shape/data_offsets, an
 * unknown dtype, a rank above SAFETENSORS_MAX_RANK, negative or non-integer dims, offsets
 * out of range, overlapping, leaving holes, or not matching dtype size * element count.
 *
 * Thread-safety: every function is safe to call from any thread on distinct arguments.
 */
#ifndef FM_SAFETENSORS_H
#define FM_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define SAFETENSORS_MAX_RANK 8
/* Largest accepted JSON header (same ceiling as the reference implementation). */
#define SAFETENSORS_MAX_HEADER (100u * 1024u * 1024u)

/* One f32 tensor to write. All pointers are borrowed for the call. */
typedef struct safetensors_f32 {
    const char *name;     /* not "__metadata__"; unique within one file */
    int rank;             /* 0..SAFETENSORS_MAX_RANK */
    const int64_t *shape; /* rank dims, each >= 0 */
    const float *data;    /* product(shape) floats in host byte order */
} safetensors_f32;

/* One tensor read from a file. */
typedef struct safetensors_tensor {
    char *name;       /* owned by the enclosing safetensors_file */
    char dtype[8];    /* as in the file: "F32", "I64", "BF16", ... */
    size_t elem_size; /* bytes per element of dtype */
    int rank;
    int64_t shape[SAFETENSORS_MAX_RANK];
    int64_t nelem;
    void *data; /* nbytes bytes, converted to host byte order; owned by the file */
    size_t nbytes;
} safetensors_tensor;

/* The contents of one file, in header order. */
typedef struct safetensors_file {
    size_t n_tensors;
    safetensors_tensor *tensors;
    size_t n_metadata;
    char **metadata_keys; /* n_metadata strings each */
    char **metadata_values;
} safetensors_file;

/* Write `n` f32 tensors and `n_meta` metadata pairs (keys[i] -> values[i]; both may be NULL
 * when n_meta is 0) to `path`. The file is written beside `path` under a temporary name
 * and renamed into place, so a failed write never leaves a partial file at `path`.
 * Returns 0, or -1 with a message ("PATH: ...") in err (errlen bytes, NUL-terminated). */
int safetensors_write_f32(const char *path, size_t n, const safetensors_f32 *tensors, size_t n_meta,
                          const char *const *keys, const char *const *values, char *err,
                          size_t errlen);

/* Read and validate the whole file at `path` into *out (caller's storage; release with
 * safetensors_file_fini). Returns 0, or -1 with a message in err; on failure *out is
 * left zeroed and owns nothing. */
int safetensors_read(const char *path, safetensors_file *out, char *err, size_t errlen);

/* Free everything a successful safetensors_read put in *f and zero it. NULL is a no-op. */
void safetensors_file_fini(safetensors_file *f);

/* The tensor called `name`, or NULL. The result is borrowed from `f`. */
const safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name);

/* The metadata value for `key`, or NULL. Borrowed from `f`. */
const char *safetensors_metadata(const safetensors_file *f, const char *key);

/* Element size of a safetensors dtype name ("F32" -> 4), or 0 if the name is unknown. */
size_t safetensors_dtype_size(const char *dtype);

#endif
