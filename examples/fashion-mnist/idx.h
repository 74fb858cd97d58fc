/* idx.h — load a labelled image set stored as a pair of IDX files (the MNIST format).
 *
 * IDX (Y. LeCun, "THE MNIST DATABASE of handwritten digits", file format section): a
 * big-endian header of 4 magic bytes {0, 0, type, ndims} followed by ndims big-endian u32
 * dims, then the data. Fashion-MNIST uses type 0x08 (unsigned byte) with
 *   images: magic 0x00000803, dims {count, 28, 28}, then count*28*28 pixels
 *   labels: magic 0x00000801, dims {count}, then count labels in 0..9
 * Files may be gzip-compressed (read through zlib, which also reads plain files).
 *
 * Thread-safety: any thread, distinct arguments.
 */
#ifndef FM_IDX_H
#define FM_IDX_H

#include <stddef.h>
#include <stdint.h>

#define FM_IMAGE_ROWS 28
#define FM_IMAGE_COLS 28
#define FM_IMAGE_PIXELS (FM_IMAGE_ROWS * FM_IMAGE_COLS)
#define FM_CLASSES 10

/* Images and labels of one split. */
typedef struct fm_dataset {
    int64_t n;       /* number of images (== labels) */
    uint8_t *pixels; /* n * FM_IMAGE_PIXELS bytes, row-major, 0..255; owned */
    uint8_t *labels; /* n bytes, each < FM_CLASSES; owned */
} fm_dataset;

/* Load `dir`/`images` and `dir`/`labels`. Each name is tried as given (".gz") and, if that
 * file does not exist, without its ".gz" suffix. Validates magic numbers, 28x28 dims, equal
 * counts, labels < 10 and the exact (decompressed) file size. Keeps only the first `limit`
 * items when limit > 0 and smaller than the count.
 * Returns 0, or -1 with a message naming the file and the problem in err (NUL-terminated);
 * a missing file's message says how to install the data set. On failure *out is zeroed. */
int fm_dataset_load(fm_dataset *out, const char *dir, const char *images, const char *labels,
                    int64_t limit, char *err, size_t errlen);

/* Free the buffers of a loaded set and zero it. NULL is a no-op. */
void fm_dataset_fini(fm_dataset *d);

#endif
