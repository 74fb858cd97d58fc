/* dtype.h — the element types as data: one row per dtype (wire value, name, byte size,
 * kind), read by the engine, the client, the server and the loadable backend modules.
 *
 * Why a header of static inline functions over an X-macro: backend modules may not call
 * engine symbols (backends/backend.h), and the GPU modules compile this header as CUDA/HIP
 * C++ too, so the table must be plain data that every translation unit expands itself.
 * The public enum td_dtype (include/tensord.h) fixes the wire values; this table is the one
 * place that says how large each type is and whether it is a float, an integer or bool,
 * and every rule that depends on that ("float dtypes only", "i32 or i64 indices") asks the
 * class functions below. Adding a dtype is its enum value in tensord.h and one row here.
 *
 * Thread-safety: pure functions, any thread. C and C++ (no designated initializers).
 */
#ifndef TD_ENGINE_DTYPE_H
#define TD_ENGINE_DTYPE_H

#include "tensord.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Kind flags of a dtype. */
#define TD_DTF_FLOAT 0x1u  /* IEEE binary floating point */
#define TD_DTF_INT 0x2u    /* integer (signed or not) */
#define TD_DTF_SIGNED 0x4u /* two's-complement signed integer */
#define TD_DTF_INDEX 0x8u  /* accepted as a gather/index_select index */
#define TD_DTF_BOOL 0x10u  /* one byte, 0 is false, anything else true */
#define TD_DTF_HALF 0x20u  /* a 16-bit float stored as uint16_t bits (engine/convert.h),
                            * computed in f32 and rounded once to the dtype */

/* X(NAME, "name", size in bytes, flags), in wire-value order (TD_<NAME> of tensord.h). */
#define TD_DTYPE_TABLE(X)                                                                  \
    X(F32, "f32", 4, TD_DTF_FLOAT)                                                         \
    X(F64, "f64", 8, TD_DTF_FLOAT)                                                         \
    X(I32, "i32", 4, TD_DTF_INT | TD_DTF_SIGNED | TD_DTF_INDEX)                            \
    X(I64, "i64", 8, TD_DTF_INT | TD_DTF_SIGNED | TD_DTF_INDEX)                            \
    X(U8, "u8", 1, TD_DTF_INT)                                                             \
    X(BOOL, "bool", 1, TD_DTF_BOOL)                                                        \
    X(F16, "f16", 2, TD_DTF_FLOAT | TD_DTF_HALF)                                           \
    X(BF16, "bf16", 2, TD_DTF_FLOAT | TD_DTF_HALF)                                         \
    X(I8, "i8", 1, TD_DTF_INT | TD_DTF_SIGNED)                                             \
    X(I16, "i16", 2, TD_DTF_INT | TD_DTF_SIGNED)

/* Whether dt is a dtype of the table (a wire value may be anything). */
static inline bool td__dtype_valid(uint32_t dt) { return dt < TD_DTYPE_COUNT; }

/* Element size in bytes; 0 for an unknown dtype. */
static inline size_t td__dtype_size(uint32_t dt)
{
    switch (dt) {
#define TD__DTYPE_SIZE(name, str, size, flags)                                             \
    case TD_##name:                                                                        \
        return size;
        TD_DTYPE_TABLE(TD__DTYPE_SIZE)
#undef TD__DTYPE_SIZE
    }
    return 0;
}

/* Kind flags (TD_DTF_*); 0 for an unknown dtype. */
static inline unsigned td__dtype_flags(uint32_t dt)
{
    switch (dt) {
#define TD__DTYPE_FLAGS(name, str, size, flags)                                            \
    case TD_##name:                                                                        \
        return flags;
        TD_DTYPE_TABLE(TD__DTYPE_FLAGS)
#undef TD__DTYPE_FLAGS
    }
    return 0;
}

/* Short name ("f32"); "?" for an unknown dtype. */
static inline const char *td__dtype_str(uint32_t dt)
{
    switch (dt) {
#define TD__DTYPE_STR(name, str, size, flags)                                              \
    case TD_##name:                                                                        \
        return str;
        TD_DTYPE_TABLE(TD__DTYPE_STR)
#undef TD__DTYPE_STR
    }
    return "?";
}

static inline bool td__dtype_is_float(uint32_t dt) { return (td__dtype_flags(dt) & TD_DTF_FLOAT) != 0; }
static inline bool td__dtype_is_int(uint32_t dt) { return (td__dtype_flags(dt) & TD_DTF_INT) != 0; }
/* f16 or bf16: 16-bit floats whose arithmetic is done in f32 (engine/convert.h). */
static inline bool td__dtype_is_half(uint32_t dt) { return (td__dtype_flags(dt) & TD_DTF_HALF) != 0; }

/* Dtype classes: the sets an op row accepts for an input or a dtype attribute. */
enum td__dtype_class {
    TD_DTC_NONE = 0, /* the dtype attribute is not used / no input here */
    TD_DTC_ANY,      /* every dtype */
    TD_DTC_NUMERIC,  /* every dtype but bool */
    TD_DTC_FLOAT,    /* float dtypes */
    TD_DTC_INDEX,    /* index dtypes (i32, i64) */
    TD_DTC_BOOL,     /* bool only */
    TD_DTC_INT,      /* integer dtypes (i8 i16 i32 i64 u8) */
    TD_DTC_INTBOOL,  /* integer dtypes and bool (bitwise ops) */
};

/* Whether dtype dt belongs to class cls (false for an unknown dtype). */
static inline bool td__dtype_in(uint32_t dt, unsigned cls)
{
    unsigned f = td__dtype_flags(dt);
    if (f == 0) return false;
    switch (cls) {
    case TD_DTC_ANY: return true;
    case TD_DTC_NUMERIC: return (f & TD_DTF_BOOL) == 0;
    case TD_DTC_FLOAT: return (f & TD_DTF_FLOAT) != 0;
    case TD_DTC_INDEX: return (f & TD_DTF_INDEX) != 0;
    case TD_DTC_BOOL: return (f & TD_DTF_BOOL) != 0;
    case TD_DTC_INT: return (f & TD_DTF_INT) != 0;
    case TD_DTC_INTBOOL: return (f & (TD_DTF_INT | TD_DTF_BOOL)) != 0;
    }
    return false;
}

/* How a class reads in messages and docs ("a float dtype"). */
static inline const char *td__dtype_class_str(unsigned cls)
{
    switch (cls) {
    case TD_DTC_ANY: return "any dtype";
    case TD_DTC_NUMERIC: return "a numeric dtype";
    case TD_DTC_FLOAT: return "a float dtype";
    case TD_DTC_INDEX: return "i32 or i64";
    case TD_DTC_BOOL: return "bool";
    case TD_DTC_INT: return "an integer dtype";
    case TD_DTC_INTBOOL: return "an integer or bool dtype";
    }
    return "no dtype";
}
#endif
