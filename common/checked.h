/* checked.h — overflow-checked size arithmetic. Every product of dims or byte sizes from
 * the wire or the user goes through these. Return false on overflow (result untouched). */
#ifndef TD_COMMON_CHECKED_H
#define TD_COMMON_CHECKED_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline bool td__mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

static inline bool td__add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    uint64_t r;
    if (__builtin_add_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

static inline bool td__mul_i64(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}
#endif
