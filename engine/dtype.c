/* dtype.c — sizes and names of the element types (public td_dtype_* functions), read from
 * the dtype table (engine/dtype.h). */
#include "engine/dtype.h"

size_t td_dtype_size(td_dtype dt) { return td__dtype_size((uint32_t)dt); }

const char *td_dtype_name(td_dtype dt) { return td__dtype_str((uint32_t)dt); }
