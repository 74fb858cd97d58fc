/* dtype.c — sizes and names of the element types (public td_dtype_* functions). */
#include "tensord.h"

size_t td_dtype_size(td_dtype dt)
{
    switch (dt) {
    case TD_F32: return 4;
    case TD_F64: return 8;
    case TD_I32: return 4;
    case TD_I64: return 8;
    case TD_U8: return 1;
    case TD_BOOL: return 1;
    }
    return 0;
}

const char *td_dtype_name(td_dtype dt)
{
    switch (dt) {
    case TD_F32: return "f32";
    case TD_F64: return "f64";
    case TD_I32: return "i32";
    case TD_I64: return "i64";
    case TD_U8: return "u8";
    case TD_BOOL: return "bool";
    }
    return "?";
}
