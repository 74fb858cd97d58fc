/* gpu_elementwise.cu — unary, binary, comparison, WHERE and CAST kernels of the CUDA
 * backend.
 *
 * One grid-stride kernel template per family, instantiated per (op, element type): unary
 * and cast map a contiguous input onto a contiguous output; binary, comparison and WHERE
 * walk the collapsed broadcast iterator (td__gpu_iter), which turns same-shape operands
 * into one flat run and a broadcast scalar into a stride-0 run, so the common cases pay no
 * index arithmetic beyond a multiply. Index math is 32-bit when the iterator says every
 * offset fits (64-bit division costs several times more on the GPU).
 *
 * Semantics are the CPU backend's (see gpu_ops.cuh): integer ops wrap and never trap,
 * maximum/minimum propagate NaN, RELU keeps NaN, bool compares raw bytes.
 */
#include "backends/gpu/gpu_ops.cuh"
#include <type_traits>

namespace {

/* ---- float math by type ---- */
TD_DEV float f_pow(float a, float b) { return powf(a, b); }
TD_DEV double f_pow(double a, double b) { return pow(a, b); }
TD_DEV float f_abs(float x) { return fabsf(x); }
TD_DEV double f_abs(double x) { return fabs(x); }
TD_DEV float rowk_fmod(float a, float b) { return fmodf(a, b); }
TD_DEV double rowk_fmod(double a, double b) { return fmod(a, b); }
TD_DEV float rowk_copysign(float a, float b) { return copysignf(a, b); }
TD_DEV double rowk_copysign(double a, double b) { return copysign(a, b); }
TD_DEV float f_atan2(float a, float b) { return atan2f(a, b); }
TD_DEV double f_atan2(double a, double b) { return atan2(a, b); }
TD_DEV float f_hypot(float a, float b) { return hypotf(a, b); }
TD_DEV double f_hypot(double a, double b) { return hypot(a, b); }

/* Unsigned twin used for wraparound arithmetic. */
template <typename T> struct uns;
template <> struct uns<int32_t> { typedef uint32_t type; };
template <> struct uns<int64_t> { typedef uint64_t type; };
template <> struct uns<uint8_t> { typedef uint32_t type; };
template <> struct uns<int8_t> { typedef uint32_t type; };
template <> struct uns<int16_t> { typedef uint32_t type; };

/* A unary op's attributes as the element functions read them: op->fattrs converted on the
 * host to float and to double (as the CPU converts them), and iattrs[0] (0 when absent). */
struct uparams {
    float f[TD_OP_MAX_FATTRS];
    double d[TD_OP_MAX_FATTRS];
    int64_t mode;
    template <typename T> TD_DEV T get(int i) const
    {
        if constexpr (std::is_same<T, float>::value) return f[i];
        else return d[i];
    }
};

inline uparams uparams_of(const td__op *op)
{
    uparams u;
    for (int i = 0; i < TD_OP_MAX_FATTRS; i++) {
        u.f[i] = (float)op->fattrs[i];
        u.d[i] = op->fattrs[i];
    }
    u.mode = op->n_iattrs > 0 ? op->iattrs[0] : 0;
    return u;
}

/* The element functions of the op table's float unary ops (TD_UNARY_FLOAT_KERNELS in
 * engine/optable.h), evaluated with the names below: inside namespace rowk an unqualified
 * exp(x) finds rowk::exp, the CUDA/HIP math function of x's type, as <tgmath.h> does on the
 * CPU. */
namespace rowk {
/* name(x): ::namef for float, ::name for double (templates: unused ones cost nothing) */
#define TD__ROWK_MATH(name)                                                                \
    template <typename T> TD_DEV T name(T x)                                               \
    {                                                                                      \
        if constexpr (std::is_same<T, float>::value) return ::name##f(x);                 \
        else return ::name(x);                                                             \
    }
TD__ROWK_MATH(exp)
TD__ROWK_MATH(expm1)
TD__ROWK_MATH(log)
TD__ROWK_MATH(log1p)
TD__ROWK_MATH(log2)
TD__ROWK_MATH(log10)
TD__ROWK_MATH(sqrt)
TD__ROWK_MATH(sin)
TD__ROWK_MATH(cos)
TD__ROWK_MATH(tan)
TD__ROWK_MATH(asin)
TD__ROWK_MATH(acos)
TD__ROWK_MATH(atan)
TD__ROWK_MATH(sinh)
TD__ROWK_MATH(cosh)
TD__ROWK_MATH(tanh)
TD__ROWK_MATH(asinh)
TD__ROWK_MATH(acosh)
TD__ROWK_MATH(atanh)
TD__ROWK_MATH(erf)
TD__ROWK_MATH(erfc)
TD__ROWK_MATH(floor)
TD__ROWK_MATH(ceil)
TD__ROWK_MATH(rint)
TD__ROWK_MATH(trunc)
TD__ROWK_MATH(fabs)
#undef TD__ROWK_MATH

template <int OP> struct fn; /* fn<TD_OP_X>::eval<T>(x, u): X's element function */
#define TD__GPU_ROW_FN(NAME, EXPR)                                                         \
    template <> struct fn<TD_OP_##NAME> {                                                  \
        template <typename T> static TD_DEV T eval(T x, const uparams &u)                  \
        {                                                                                  \
            const T p0 = u.get<T>(0), p1 = u.get<T>(1), p2 = u.get<T>(2);                  \
            const int64_t mode = u.mode;                                                   \
            (void)p0, (void)p1, (void)p2, (void)mode;                                      \
            return (T)(EXPR);                                                              \
        }                                                                                  \
    };
TD_UNARY_FLOAT_KERNELS(TD__GPU_ROW_FN)
#undef TD__GPU_ROW_FN

/* Whether OP's element function comes from the table. */
__host__ __device__ constexpr bool in_table(int op)
{
#define TD__GPU_ROW_IS(NAME, EXPR) op == TD_OP_##NAME ||
    return TD_UNARY_FLOAT_KERNELS(TD__GPU_ROW_IS) false;
#undef TD__GPU_ROW_IS
}
} // namespace rowk

/* SIGN and CLAMP of floats (the CPU's SIGN_FLOAT and CLAMP_EXPR): +0 for +-0, NaN kept. */
template <typename T> TD_DEV T sign_float(T x)
{
    return x > (T)0 ? (T)1 : x < (T)0 ? (T)-1 : x == (T)0 ? (T)0 : x;
}
template <typename T> TD_DEV T clamp_to(T x, T lo, T hi) { return x < lo ? lo : x > hi ? hi : x; }

template <int OP, typename T> TD_DEV T unary_op(T x, const uparams &u)
{
    if constexpr (std::is_same<T, td_bool>::value) {
        T r; /* BITWISE_NOT is the only unary op on bool */
        r.v = (uint8_t)(x.v == 0);
        return r;
    } else if constexpr (td_is_half<T>::value) {
        /* NEG, ABS, RELU by the bits (as the CPU: exact, NaN kept); the rest in f32, rounded
         * once */
        const unsigned inf = std::is_same<T, td_f16>::value ? 0x7c00u : 0x7f80u;
        T r = x;
        if constexpr (OP == TD_OP_NEG) r.bits = (uint16_t)(x.bits ^ 0x8000u);
        else if constexpr (OP == TD_OP_ABS) r.bits = (uint16_t)(x.bits & 0x7fffu);
        else if constexpr (OP == TD_OP_RELU) {
            if ((x.bits & 0x8000u) && (x.bits & 0x7fffu) != 0 && (x.bits & 0x7fffu) <= inf)
                r.bits = 0;
        } else if constexpr (OP == TD_OP_SIGN) return T::of(sign_float(x.f()));
        else if constexpr (OP == TD_OP_CLAMP) return T::of(clamp_to(x.f(), u.f[0], u.f[1]));
        else return T::of(rowk::fn<OP>::template eval<float>(x.f(), u));
        return r;
    } else if constexpr (std::is_floating_point<T>::value) {
        if constexpr (rowk::in_table(OP)) return rowk::fn<OP>::template eval<T>(x, u);
        else if constexpr (OP == TD_OP_NEG) return -x;
        else if constexpr (OP == TD_OP_ABS) return f_abs(x);
        else if constexpr (OP == TD_OP_SIGN) return sign_float(x);
        else if constexpr (OP == TD_OP_CLAMP) return clamp_to(x, u.get<T>(0), u.get<T>(1));
        else return x < (T)0 ? (T)0 : x; /* RELU */
    } else {
        typedef typename uns<T>::type U;
        if constexpr (OP == TD_OP_NEG) return (T)((U)0 - (U)x);
        else if constexpr (OP == TD_OP_SIGN) {
            if constexpr (std::is_signed<T>::value) return (T)((x > 0) - (x < 0));
            else return (T)(x > 0);
        }
        else if constexpr (OP == TD_OP_CLAMP)
            return clamp_to(x, td_cast_to<T>::from(u.d[0]), td_cast_to<T>::from(u.d[1]));
        else if constexpr (OP == TD_OP_BITWISE_NOT) return (T)~x;
        else if constexpr (!std::is_signed<T>::value) return x; /* u8 ABS and RELU */
        else if constexpr (OP == TD_OP_ABS) return x < 0 ? (T)((U)0 - (U)x) : x;
        else return x < 0 ? (T)0 : x; /* RELU */
    }
}

/* Python-style floor division and remainder on floats (the CPU's FLOAT_DIVMOD: numpy's
 * npy_divmod), and the integer rules of the CPU's INT_EXT. */
template <typename T> TD_DEV T floordiv_float(T a, T b)
{
    if (b == (T)0) return a / b;
    T mod = rowk_fmod(a, b), div = (a - mod) / b;
    if (mod != (T)0 && ((b < (T)0) != (mod < (T)0))) div -= (T)1;
    if (div == (T)0) return rowk_copysign((T)0, a / b);
    T fl = rowk::floor(div);
    if (div - fl > (T)0.5) fl += (T)1;
    return fl;
}
template <typename T> TD_DEV T remainder_float(T a, T b)
{
    T mod = rowk_fmod(a, b);
    if (b == (T)0) return mod;
    if (mod == (T)0) return rowk_copysign((T)0, b);
    return (b < (T)0) != (mod < (T)0) ? mod + b : mod;
}
TD_DEV uint64_t ipow_u64(uint64_t base, uint64_t e)
{
    uint64_t r = 1;
    while (e != 0) {
        if (e & 1u) r *= base;
        base *= base;
        e >>= 1;
    }
    return r;
}
template <typename T> TD_DEV T int_fmod(T a, T b)
{
    if (b == 0) return a;
    if constexpr (std::is_signed<T>::value)
        if (b == (T)-1) return 0;
    return (T)(a % b);
}
template <typename T> TD_DEV T int_remainder(T a, T b)
{
    T r = int_fmod(a, b);
    if constexpr (std::is_signed<T>::value)
        if (b != 0 && r != 0 && ((r < 0) != (b < 0))) return (T)(r + b);
    return r;
}
template <typename T> TD_DEV T int_floordiv(T a, T b)
{
    typedef typename uns<T>::type U;
    if (b == 0) return 0;
    if constexpr (std::is_signed<T>::value) {
        const T tmin = (T)((U)1 << (8 * sizeof(T) - 1));
        if (a == tmin && b == (T)-1) return a;
        T q = (T)(a / b), r = (T)(a % b);
        return r != 0 && ((r < 0) != (b < 0)) ? (T)(q - 1) : q;
    } else {
        return (T)(a / b);
    }
}
template <typename T> TD_DEV T int_pow(T a, T b)
{
    if constexpr (std::is_signed<T>::value)
        if (b < 0) return a == 1 ? (T)1 : a == (T)-1 ? (T)((b & 1) ? -1 : 1) : (T)0;
    return (T)ipow_u64((uint64_t)(int64_t)a, (uint64_t)(int64_t)b);
}
template <typename T> TD_DEV T int_shl(T a, T b)
{
    constexpr int bits = 8 * sizeof(T);
    if constexpr (std::is_signed<T>::value)
        if (b < 0) return 0;
    if (b >= bits) return 0;
    typedef typename std::make_unsigned<T>::type UT;
    return (T)(UT)((UT)a << b);
}
template <typename T> TD_DEV T int_shr(T a, T b)
{
    constexpr int bits = 8 * sizeof(T);
    typedef typename std::make_unsigned<T>::type UT;
    if constexpr (std::is_signed<T>::value) {
        if (b < 0 || b >= bits) return a < 0 ? (T)-1 : (T)0;
        return a < 0 ? (T) ~(T)((UT)~(UT)a >> b) : (T)((UT)a >> b);
    } else {
        return b >= bits ? (T)0 : (T)(a >> b);
    }
}

template <int OP, typename T> TD_DEV T binary_op(T a, T b)
{
    if constexpr (std::is_same<T, td_bool>::value) {
        T r; /* BITWISE_AND/OR/XOR on bool: logical, 0/1 out */
        const bool x = a.v != 0, y = b.v != 0;
        if constexpr (OP == TD_OP_BITWISE_AND) r.v = x && y;
        else if constexpr (OP == TD_OP_BITWISE_OR) r.v = x || y;
        else r.v = x != y;
        return r;
    } else if constexpr (std::is_same<T, td_bf16>::value &&
                         (OP == TD_OP_ADD || OP == TD_OP_SUB || OP == TD_OP_MUL ||
                          OP == TD_OP_DIV)) {
        return T::of(binary_op<OP, float>(a.f_arith(), b.f_arith())); /* same bits, fewer ops */
    } else if constexpr (td_is_half<T>::value) {
        if constexpr (OP == TD_OP_COPYSIGN) { /* by the bits, as the CPU */
            T r;
            r.bits = (uint16_t)((a.bits & 0x7fffu) | (b.bits & 0x8000u));
            return r;
        }
        return T::of(binary_op<OP, float>(a.f(), b.f())); /* in f32, rounded once */
    } else if constexpr (std::is_floating_point<T>::value) {
        if constexpr (OP == TD_OP_ADD) return a + b;
        else if constexpr (OP == TD_OP_SUB) return a - b;
        else if constexpr (OP == TD_OP_MUL) return a * b;
        else if constexpr (OP == TD_OP_DIV) return a / b;
        else if constexpr (OP == TD_OP_POW) return f_pow(a, b);
        else if constexpr (OP == TD_OP_ATAN2) return f_atan2(a, b);
        else if constexpr (OP == TD_OP_HYPOT) return f_hypot(a, b);
        else if constexpr (OP == TD_OP_COPYSIGN) return rowk_copysign(a, b);
        else if constexpr (OP == TD_OP_FMOD) return rowk_fmod(a, b);
        else if constexpr (OP == TD_OP_REMAINDER) return remainder_float(a, b);
        else if constexpr (OP == TD_OP_FLOOR_DIVIDE) return floordiv_float(a, b);
        else if constexpr (OP == TD_OP_MAXIMUM) return (a > b || a != a) ? a : b;
        else return (a < b || a != a) ? a : b; /* MINIMUM */
    } else {
        typedef typename uns<T>::type U;
        if constexpr (OP == TD_OP_FMOD) return int_fmod(a, b);
        else if constexpr (OP == TD_OP_REMAINDER) return int_remainder(a, b);
        else if constexpr (OP == TD_OP_FLOOR_DIVIDE) return int_floordiv(a, b);
        else if constexpr (OP == TD_OP_POW) return int_pow(a, b);
        else if constexpr (OP == TD_OP_BITWISE_AND) return (T)(a & b);
        else if constexpr (OP == TD_OP_BITWISE_OR) return (T)(a | b);
        else if constexpr (OP == TD_OP_BITWISE_XOR) return (T)(a ^ b);
        else if constexpr (OP == TD_OP_SHIFT_LEFT) return int_shl(a, b);
        else if constexpr (OP == TD_OP_SHIFT_RIGHT) return int_shr(a, b);
        else if constexpr (OP == TD_OP_ADD) return (T)((U)a + (U)b);
        else if constexpr (OP == TD_OP_SUB) return (T)((U)a - (U)b);
        else if constexpr (OP == TD_OP_MUL) return (T)((U)a * (U)b);
        else if constexpr (OP == TD_OP_DIV) {
            if (b == 0) return 0;
            if constexpr (std::is_signed<T>::value) {
                const T tmin = (T)((U)1 << (8 * sizeof(T) - 1));
                if (a == tmin && b == (T)-1) return a;
            }
            return (T)(a / b);
        } else if constexpr (OP == TD_OP_MAXIMUM) return a > b ? a : b;
        else return a < b ? a : b; /* MINIMUM (POW is float only) */
    }
}

template <int OP, typename T> TD_DEV uint8_t compare_op(T a, T b)
{
    if constexpr (td_is_half<T>::value) return compare_op<OP, float>(a.f(), b.f());
    else if constexpr (OP == TD_OP_LOGICAL_AND) return a != (T)0 && b != (T)0;
    else if constexpr (OP == TD_OP_LOGICAL_OR) return a != (T)0 || b != (T)0;
    else if constexpr (OP == TD_OP_LOGICAL_XOR) return (a != (T)0) != (b != (T)0);
    else if constexpr (OP == TD_OP_EQ) return a == b;
    else if constexpr (OP == TD_OP_NE) return a != b;
    else if constexpr (OP == TD_OP_LT) return a < b;
    else if constexpr (OP == TD_OP_LE) return a <= b;
    else if constexpr (OP == TD_OP_GT) return a > b;
    else return a >= b;
}

/* ---- kernels ---- */

template <int OP, typename T>
__global__ void k_unary(const T *in, T *out, int64_t n, const uparams u)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = unary_op<OP, T>(in[i], u);
}

/* 16-byte vectors of N elements for the contiguous fast paths. */
template <typename T, int N> struct alignas(sizeof(T) * N) vec {
    T v[N];
};

template <int OP, typename T>
__global__ void k_unary_vec(const T *in, T *out, int64_t n, const uparams u)
{
    constexpr int N = 16 / sizeof(T);
    typedef vec<T, N> V;
    const int64_t nv = n / N, tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (int64_t i = tid; i < nv; i += (int64_t)gridDim.x * blockDim.x) {
        V x = ((const V *)in)[i], y;
#pragma unroll
        for (int j = 0; j < N; j++) y.v[j] = unary_op<OP, T>(x.v[j], u);
        ((V *)out)[i] = y;
    }
    const int64_t t = nv * N + tid;
    if (t < n) out[t] = unary_op<OP, T>(in[t], u);
}

/* Same-shape operands (or a stride-0 scalar: sa / sb), all contiguous and 16-byte aligned:
 * N elements per thread step through vector loads and stores. */
template <int OP, bool CMP, typename T, typename O>
__global__ void k_binary_vec(const T *a, const T *b, O *out, int64_t n, bool sa, bool sb)
{
    constexpr int N = 16 / sizeof(T);
    typedef vec<T, N> VT;
    typedef vec<O, N> VO;
    const T a0 = sa ? a[0] : T(), b0 = sb ? b[0] : T();
    const int64_t nv = n / N, tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (int64_t i = tid; i < nv; i += (int64_t)gridDim.x * blockDim.x) {
        VT va, vb;
        VO vo;
        if (!sa) va = ((const VT *)a)[i];
        if (!sb) vb = ((const VT *)b)[i];
#pragma unroll
        for (int j = 0; j < N; j++) {
            const T x = sa ? a0 : va.v[j], y = sb ? b0 : vb.v[j];
            if constexpr (CMP) vo.v[j] = compare_op<OP, T>(x, y);
            else vo.v[j] = binary_op<OP, T>(x, y);
        }
        ((VO *)out)[i] = vo;
    }
    const int64_t t = nv * N + tid;
    if (t < n) {
        const T x = sa ? a0 : a[t], y = sb ? b0 : b[t];
        if constexpr (CMP) out[t] = compare_op<OP, T>(x, y);
        else out[t] = binary_op<OP, T>(x, y);
    }
}

inline bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Binary ops (CMP false) and comparisons (CMP true) over the broadcast walk. */
template <typename I, int OP, bool CMP, typename T, typename O>
__global__ void k_binary(td__gpu_iter it, const T *a, const T *b, O *out, I n)
{
    for (I i = (I)(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += (I)(gridDim.x * blockDim.x)) {
        I off[2];
        td_iter_offsets<I, 2>(it, i, off);
        if constexpr (CMP) {
            out[i] = compare_op<OP, T>(a[off[0]], b[off[1]]);
        } else {
            out[i] = binary_op<OP, T>(a[off[0]], b[off[1]]);
        }
    }
}

template <typename I, typename T>
__global__ void k_where(td__gpu_iter it, const uint8_t *c, const T *a, const T *b, T *out, I n)
{
    for (I i = (I)(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += (I)(gridDim.x * blockDim.x)) {
        I off[3];
        td_iter_offsets<I, 3>(it, i, off);
        out[i] = c[off[0]] ? a[off[1]] : b[off[2]];
    }
}

/* Source loads for cast: bool bytes are read as 0/1. */
template <typename S> TD_DEV S cast_load(const typename td_store<S>::type *p, int64_t i)
{
    return p[i];
}
template <> TD_DEV td_bool cast_load<td_bool>(const uint8_t *p, int64_t i)
{
    td_bool b;
    b.v = p[i] != 0;
    return b;
}

/* bool behaves as the integer 0/1 when converted; f16/bf16 as their (exact) f32 value. */
template <typename D, typename S> TD_DEV typename td_store<D>::type cast_one(S x)
{
    if constexpr (td_is_half<S>::value) {
        return cast_one<D, float>(x.f());
    } else if constexpr (std::is_same<S, td_bool>::value) {
        return cast_one<D, uint8_t>(x.v);
    } else if constexpr (std::is_same<D, td_bool>::value) {
        return (uint8_t)(x != 0);
    } else {
        return td_cast_to<D>::from(x);
    }
}

template <typename S, typename D>
__global__ void k_cast(const typename td_store<S>::type *in, typename td_store<D>::type *out,
                       int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = cast_one<D, S>(cast_load<S>(in, i));
}

/* ---- launchers ---- */

template <int OP, typename T>
td_status launch_unary(const td__gpu_exec *x, const td__view *in, const td__view *out,
                       const uparams &u)
{
    int64_t n = td__gpu_nelem(&out->desc);
    if (n == 0) return TD_OK;
    if (aligned16(in->data) && aligned16(out->data)) {
        int64_t units = n / (16 / (int64_t)sizeof(T)) + 1;
        k_unary_vec<OP, T><<<td__gpu_blocks(units, TD_GPU_THREADS), TD_GPU_THREADS, 0,
                             x->st->s>>>((const T *)in->data, (T *)out->data, n, u);
    } else {
        k_unary<OP, T><<<td__gpu_blocks(n, TD_GPU_THREADS), TD_GPU_THREADS, 0, x->st->s>>>(
            (const T *)in->data, (T *)out->data, n, u);
    }
    return td__gpu_launched(x, "unary kernel");
}

template <int OP, bool CMP, typename T>
td_status launch_binary(const td__gpu_exec *x, const td__gpu_iter &it, const td__view *in,
                        const td__view *out, int64_t n)
{
    typedef typename std::conditional<CMP, uint8_t, T>::type O;
    const void *a = in[0].data, *b = in[1].data;
    if (it.rank == 1 && it.strides[0][0] <= 1 && it.strides[1][0] <= 1 && n > 1) {
        const bool sa = it.strides[0][0] == 0, sb = it.strides[1][0] == 0;
        const size_t out_align = sizeof(O) * (16 / sizeof(T));
        if ((sa || aligned16(a)) && (sb || aligned16(b)) &&
            ((uintptr_t)out->data % out_align) == 0) {
            int64_t units = n / (16 / (int64_t)sizeof(T)) + 1;
            k_binary_vec<OP, CMP, T, O><<<td__gpu_blocks(units, TD_GPU_THREADS),
                                          TD_GPU_THREADS, 0, x->st->s>>>(
                (const T *)a, (const T *)b, (O *)out->data, n, sa, sb);
            return td__gpu_launched(x, "binary kernel");
        }
    }
    unsigned blocks = td__gpu_blocks(n, TD_GPU_THREADS);
    if (it.small) {
        k_binary<int32_t, OP, CMP, T, O><<<blocks, TD_GPU_THREADS, 0, x->st->s>>>(
            it, (const T *)in[0].data, (const T *)in[1].data, (O *)out->data, (int32_t)n);
    } else {
        k_binary<int64_t, OP, CMP, T, O><<<blocks, TD_GPU_THREADS, 0, x->st->s>>>(
            it, (const T *)in[0].data, (const T *)in[1].data, (O *)out->data, n);
    }
    return td__gpu_launched(x, "binary kernel");
}

/* Calls f.template operator()<T>() with T the element type of a numeric dtype. */
template <typename F> td_status by_numeric(uint32_t dt, F f)
{
    switch (dt) {
    case TD_F32: return f.template operator()<float>();
    case TD_F64: return f.template operator()<double>();
    case TD_I32: return f.template operator()<int32_t>();
    case TD_I64: return f.template operator()<int64_t>();
    case TD_U8: return f.template operator()<uint8_t>();
    case TD_F16: return f.template operator()<td_f16>();
    case TD_BF16: return f.template operator()<td_bf16>();
    case TD_I8: return f.template operator()<int8_t>();
    case TD_I16: return f.template operator()<int16_t>();
    }
    return TD_EINTERNAL;
}

template <typename F> td_status by_float(uint32_t dt, F f)
{
    switch (dt) {
    case TD_F32: return f.template operator()<float>();
    case TD_F64: return f.template operator()<double>();
    case TD_F16: return f.template operator()<td_f16>();
    case TD_BF16: return f.template operator()<td_bf16>();
    }
    return TD_EINTERNAL;
}

template <int OP> struct unary_launch {
    const td__gpu_exec *x;
    const td__view *in, *out;
    uparams u;
    template <typename T> td_status operator()() const
    {
        return launch_unary<OP, T>(x, in, out, u);
    }
};

template <int OP, bool CMP> struct binary_launch {
    const td__gpu_exec *x;
    const td__gpu_iter *it;
    const td__view *in, *out;
    int64_t n;
    template <typename T> td_status operator()() const
    {
        return launch_binary<OP, CMP, T>(x, *it, in, out, n);
    }
};

/* Integer dtypes, and bool as td_bool when WITH_BOOL. */
template <bool WITH_BOOL, typename F> td_status by_int(uint32_t dt, F f)
{
    switch (dt) {
    case TD_I32: return f.template operator()<int32_t>();
    case TD_I64: return f.template operator()<int64_t>();
    case TD_U8: return f.template operator()<uint8_t>();
    case TD_I8: return f.template operator()<int8_t>();
    case TD_I16: return f.template operator()<int16_t>();
    case TD_BOOL:
        if constexpr (WITH_BOOL) return f.template operator()<td_bool>();
        break;
    }
    return TD_EINTERNAL;
}

template <int OP> td_status unary_numeric(const td__gpu_exec *x, const td__op *op,
                                          const td__view *in, const td__view *out)
{
    return by_numeric(in->desc.dtype, unary_launch<OP>{x, in, out, uparams_of(op)});
}

template <int OP> td_status unary_float(const td__gpu_exec *x, const td__op *op,
                                        const td__view *in, const td__view *out)
{
    return by_float(in->desc.dtype, unary_launch<OP>{x, in, out, uparams_of(op)});
}

template <int OP> td_status binary_numeric(const td__gpu_exec *x, const td__gpu_iter *it,
                                           const td__view *in, const td__view *out, int64_t n)
{
    return by_numeric(in[0].desc.dtype, binary_launch<OP, false>{x, it, in, out, n});
}

template <int OP, bool WITH_BOOL>
td_status binary_int(const td__gpu_exec *x, const td__gpu_iter *it, const td__view *in,
                     const td__view *out, int64_t n)
{
    return by_int<WITH_BOOL>(in[0].desc.dtype, binary_launch<OP, false>{x, it, in, out, n});
}

template <int OP> td_status binary_float(const td__gpu_exec *x, const td__gpu_iter *it,
                                         const td__view *in, const td__view *out, int64_t n)
{
    return by_float(in[0].desc.dtype, binary_launch<OP, false>{x, it, in, out, n});
}

template <int OP> td_status compare_any(const td__gpu_exec *x, const td__gpu_iter *it,
                                        const td__view *in, const td__view *out, int64_t n)
{
    binary_launch<OP, true> f{x, it, in, out, n};
    if (in[0].desc.dtype == TD_BOOL) return f.template operator()<uint8_t>();
    return by_numeric(in[0].desc.dtype, f);
}

void bcast_iter(td__gpu_iter *it, const td__view *in, int n_in, const td__view *out)
{
    int64_t st[TD_GPU_ITER_MAX_IN][TD_MAX_RANK];
    for (int k = 0; k < n_in; k++) td__desc_bcast_strides(&in[k].desc, &out->desc, st[k]);
    td__gpu_iter_init(it, &out->desc, n_in, (const int64_t(*)[TD_MAX_RANK])st);
}

/* WHERE moves values as bytes of their size: T is an unsigned integer of that size. */
template <typename T>
void launch_where(const td__gpu_exec *x, const td__gpu_iter &it, const td__view *in,
                  const td__view *out, int64_t n)
{
    unsigned blocks = td__gpu_blocks(n, TD_GPU_THREADS);
    const uint8_t *c = (const uint8_t *)in[0].data;
    const T *a = (const T *)in[1].data, *b = (const T *)in[2].data;
    if (it.small)
        k_where<int32_t, T><<<blocks, TD_GPU_THREADS, 0, x->st->s>>>(it, c, a, b, (T *)out->data,
                                                                      (int32_t)n);
    else
        k_where<int64_t, T><<<blocks, TD_GPU_THREADS, 0, x->st->s>>>(it, c, a, b, (T *)out->data,
                                                                      n);
}

template <typename S> struct cast_to {
    const td__gpu_exec *x;
    const void *in;
    void *out;
    int64_t n;
    template <typename D> td_status go() const
    {
        k_cast<S, D><<<td__gpu_blocks(n, TD_GPU_THREADS), TD_GPU_THREADS, 0, x->st->s>>>(
            (const typename td_store<S>::type *)in, (typename td_store<D>::type *)out, n);
        return td__gpu_launched(x, "cast kernel");
    }
    td_status operator()(uint32_t to) const
    {
        switch (to) {
        case TD_F32: return go<float>();
        case TD_F64: return go<double>();
        case TD_I32: return go<int32_t>();
        case TD_I64: return go<int64_t>();
        case TD_U8: return go<uint8_t>();
        case TD_BOOL: return go<td_bool>();
        case TD_F16: return go<td_f16>();
        case TD_BF16: return go<td_bf16>();
        case TD_I8: return go<int8_t>();
        case TD_I16: return go<int16_t>();
        }
        return TD_EINTERNAL;
    }
};

} // namespace

extern "C" td_status td__gpu_exec_unary(const td__gpu_exec *x, const td__op *op,
                                         const td__view *in, const td__view *out)
{
    td_status s = TD_EINTERNAL;
    switch (op->opcode) {
    case TD_OP_NEG: s = unary_numeric<TD_OP_NEG>(x, op, in, out); break;
    case TD_OP_ABS: s = unary_numeric<TD_OP_ABS>(x, op, in, out); break;
    case TD_OP_RELU: s = unary_numeric<TD_OP_RELU>(x, op, in, out); break;
    case TD_OP_SIGN: s = unary_numeric<TD_OP_SIGN>(x, op, in, out); break;
    case TD_OP_CLAMP: s = unary_numeric<TD_OP_CLAMP>(x, op, in, out); break;
    case TD_OP_BITWISE_NOT:
        s = by_int<true>(in->desc.dtype,
                         unary_launch<TD_OP_BITWISE_NOT>{x, in, out, uparams_of(op)});
        break;
#define TD__GPU_ROW_CASE(NAME, EXPR)                                                       \
    case TD_OP_##NAME: s = unary_float<TD_OP_##NAME>(x, op, in, out); break;
        TD_UNARY_FLOAT_KERNELS(TD__GPU_ROW_CASE)
#undef TD__GPU_ROW_CASE
    }
    if (s == TD_EINTERNAL)
        return td__gpu_fail(x, s, TD_GPU_KIND ": no unary kernel for opcode %u dtype %u", op->opcode,
                             in[0].desc.dtype);
    return s;
}

extern "C" td_status td__gpu_exec_binary(const td__gpu_exec *x, const td__op *op,
                                          const td__view *in, const td__view *out)
{
    int64_t n = td__gpu_nelem(&out->desc);
    if (n == 0) return TD_OK;
    td__gpu_iter it;
    bcast_iter(&it, in, 2, out);
    td_status s = TD_EINTERNAL;
    switch (op->opcode) {
    case TD_OP_ADD: s = binary_numeric<TD_OP_ADD>(x, &it, in, out, n); break;
    case TD_OP_SUB: s = binary_numeric<TD_OP_SUB>(x, &it, in, out, n); break;
    case TD_OP_MUL: s = binary_numeric<TD_OP_MUL>(x, &it, in, out, n); break;
    case TD_OP_DIV: s = binary_numeric<TD_OP_DIV>(x, &it, in, out, n); break;
    case TD_OP_MAXIMUM: s = binary_numeric<TD_OP_MAXIMUM>(x, &it, in, out, n); break;
    case TD_OP_MINIMUM: s = binary_numeric<TD_OP_MINIMUM>(x, &it, in, out, n); break;
    case TD_OP_POW: s = binary_numeric<TD_OP_POW>(x, &it, in, out, n); break;
    case TD_OP_ATAN2: s = binary_float<TD_OP_ATAN2>(x, &it, in, out, n); break;
    case TD_OP_HYPOT: s = binary_float<TD_OP_HYPOT>(x, &it, in, out, n); break;
    case TD_OP_COPYSIGN: s = binary_float<TD_OP_COPYSIGN>(x, &it, in, out, n); break;
    case TD_OP_FMOD: s = binary_numeric<TD_OP_FMOD>(x, &it, in, out, n); break;
    case TD_OP_REMAINDER: s = binary_numeric<TD_OP_REMAINDER>(x, &it, in, out, n); break;
    case TD_OP_FLOOR_DIVIDE: s = binary_numeric<TD_OP_FLOOR_DIVIDE>(x, &it, in, out, n); break;
    case TD_OP_BITWISE_AND: s = binary_int<TD_OP_BITWISE_AND, true>(x, &it, in, out, n); break;
    case TD_OP_BITWISE_OR: s = binary_int<TD_OP_BITWISE_OR, true>(x, &it, in, out, n); break;
    case TD_OP_BITWISE_XOR: s = binary_int<TD_OP_BITWISE_XOR, true>(x, &it, in, out, n); break;
    case TD_OP_SHIFT_LEFT: s = binary_int<TD_OP_SHIFT_LEFT, false>(x, &it, in, out, n); break;
    case TD_OP_SHIFT_RIGHT: s = binary_int<TD_OP_SHIFT_RIGHT, false>(x, &it, in, out, n); break;
    case TD_OP_LOGICAL_AND: s = compare_any<TD_OP_LOGICAL_AND>(x, &it, in, out, n); break;
    case TD_OP_LOGICAL_OR: s = compare_any<TD_OP_LOGICAL_OR>(x, &it, in, out, n); break;
    case TD_OP_LOGICAL_XOR: s = compare_any<TD_OP_LOGICAL_XOR>(x, &it, in, out, n); break;
    case TD_OP_EQ: s = compare_any<TD_OP_EQ>(x, &it, in, out, n); break;
    case TD_OP_NE: s = compare_any<TD_OP_NE>(x, &it, in, out, n); break;
    case TD_OP_LT: s = compare_any<TD_OP_LT>(x, &it, in, out, n); break;
    case TD_OP_LE: s = compare_any<TD_OP_LE>(x, &it, in, out, n); break;
    case TD_OP_GT: s = compare_any<TD_OP_GT>(x, &it, in, out, n); break;
    case TD_OP_GE: s = compare_any<TD_OP_GE>(x, &it, in, out, n); break;
    }
    if (s == TD_EINTERNAL)
        return td__gpu_fail(x, s, TD_GPU_KIND ": no binary kernel for opcode %u dtype %u", op->opcode,
                             in[0].desc.dtype);
    return s;
}

extern "C" td_status td__gpu_exec_where(const td__gpu_exec *x, const td__view *in,
                                         const td__view *out)
{
    int64_t n = td__gpu_nelem(&out->desc);
    if (n == 0) return TD_OK;
    td__gpu_iter it;
    bcast_iter(&it, in, 3, out);
    switch (td__gpu_dtype_size(out->desc.dtype)) {
    case 1: launch_where<uint8_t>(x, it, in, out, n); break;
    case 2: launch_where<uint16_t>(x, it, in, out, n); break;
    case 4: launch_where<uint32_t>(x, it, in, out, n); break;
    case 8: launch_where<uint64_t>(x, it, in, out, n); break;
    default:
        return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": where on dtype %u", out->desc.dtype);
    }
    return td__gpu_launched(x, "where kernel");
}

extern "C" td_status td__gpu_exec_cast(const td__gpu_exec *x, const td__view *in,
                                        const td__view *out)
{
    uint32_t from = in[0].desc.dtype, to = out->desc.dtype;
    int64_t n = td__gpu_nelem(&out->desc);
    if (n == 0) return TD_OK;
    if (from == to && from != TD_BOOL) {
        size_t nbytes = (size_t)n * td__gpu_dtype_size(from);
        return td__gpu_check(x, gpuMemcpyAsync(out->data, in[0].data, nbytes,
                                                gpuMemcpyDeviceToDevice, x->st->s),
                              "cast copy");
    }
    td_status s = TD_EINTERNAL;
    switch (from) {
    case TD_F32: s = cast_to<float>{x, in[0].data, out->data, n}(to); break;
    case TD_F64: s = cast_to<double>{x, in[0].data, out->data, n}(to); break;
    case TD_I32: s = cast_to<int32_t>{x, in[0].data, out->data, n}(to); break;
    case TD_I64: s = cast_to<int64_t>{x, in[0].data, out->data, n}(to); break;
    case TD_U8: s = cast_to<uint8_t>{x, in[0].data, out->data, n}(to); break;
    case TD_BOOL: s = cast_to<td_bool>{x, in[0].data, out->data, n}(to); break;
    case TD_F16: s = cast_to<td_f16>{x, in[0].data, out->data, n}(to); break;
    case TD_BF16: s = cast_to<td_bf16>{x, in[0].data, out->data, n}(to); break;
    case TD_I8: s = cast_to<int8_t>{x, in[0].data, out->data, n}(to); break;
    case TD_I16: s = cast_to<int16_t>{x, in[0].data, out->data, n}(to); break;
    }
    if (s == TD_EINTERNAL)
        return td__gpu_fail(x, s, TD_GPU_KIND ": cast from dtype %u to %u", from, to);
    return s;
}
