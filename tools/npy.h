/* npy.h — numpy .npy files (format versions 1.0, 2.0 and 3.0, as numpy/lib/format.py
 * documents them): little-endian, C-order arrays of the dtypes tensord has.
 * Thread-safety: no shared state; any thread.
 */
#ifndef TD_TOOLS_NPY_H
#define TD_TOOLS_NPY_H

#include "tensord.h"
#include <stddef.h>
#include <stdint.h>

typedef struct td_npy {
    td_dtype dtype;
    int rank;
    int64_t dims[TD_MAX_RANK];
    void *data; /* malloc'd, nbytes */
    size_t nbytes;
} td_npy;

/* Read `path`. Returns 0, or -1 with a message in err ("FILE: big-endian '>f4' is not
 * supported; save it little-endian"). Rejects: other magic or versions, Fortran order,
 * big-endian or unknown descr, rank > 8, data shorter or longer than the shape says. */
int td_npy_read(const char *path, td_npy *out, char *err, size_t errlen);
/* Write a version 1.0 file (rank <= 8 keeps the header far below its 65535 bytes). The bytes
 * depend only on dtype, dims and data. Returns 0 or -1 with a message in err. */
int td_npy_write(const char *path, td_dtype dt, int rank, const int64_t *dims, const void *data,
                 size_t nbytes, char *err, size_t errlen);
/* numpy's name of a dtype ("<f4"); NULL if numpy has none (bf16). */
const char *td_npy_descr(td_dtype dt);
#endif
