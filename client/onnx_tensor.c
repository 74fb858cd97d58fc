/* onnx_tensor.c — ONNX TensorProto to host memory: initializers, Constant nodes, and the
 * public td_onnx_tensor_decode for test data (.pb files).
 *
 * Every count in a TensorProto comes from an untrusted file: dims are checked with the
 * engine's one descriptor constructor (td__desc_check: rank, sign, overflow-safe size)
 * before anything is allocated, and the data present (raw bytes or a typed field) must hold
 * exactly the element count. The ONNX layout of the typed fields follows onnx.proto's
 * comments (int32_data carries every type of 32 bits or fewer, float16 and bfloat16 as
 * their bit patterns; raw_data is little-endian).
 */
#include "client/onnx_int.h"
#include "common/alloc.h"
#include <stdio.h>
#include <string.h>

static void *pb_alloc(void *data, size_t size)
{
    (void)data;
    return td__malloc(size != 0 ? size : 1);
}
static void pb_free(void *data, void *p)
{
    (void)data;
    td__free(p);
}
ProtobufCAllocator td__onnx_allocator = {pb_alloc, pb_free, NULL};

bool td__onnx_dtype(int32_t t, td_dtype *out)
{
    switch (t) {
    case 1: *out = TD_F32; return true;
    case 2: *out = TD_U8; return true;
    case 3: *out = TD_I8; return true;
    case 5: *out = TD_I16; return true;
    case 6: *out = TD_I32; return true;
    case 7: *out = TD_I64; return true;
    case 9: *out = TD_BOOL; return true;
    case 10: *out = TD_F16; return true;
    case 11: *out = TD_F64; return true;
    case 16: *out = TD_BF16; return true;
    default: return false;
    }
}

const char *td__onnx_dtype_name(int32_t t)
{
    static const char *const names[] = {
        "UNDEFINED", "FLOAT",  "UINT8",     "INT8",       "UINT16",  "INT16",
        "INT32",     "INT64",  "STRING",    "BOOL",       "FLOAT16", "DOUBLE",
        "UINT32",    "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16"};
    if (t >= 0 && (size_t)t < sizeof names / sizeof names[0]) return names[t];
    return "an unknown data type";
}

void td__onnx_host_fini(td__onnx_host *h)
{
    if (h == NULL) return;
    td__free(h->data);
    h->data = NULL;
    h->nbytes = 0;
}

/* Store element i of a typed field into dst as dtype dt. */
static void put_i32(void *dst, td_dtype dt, size_t i, int32_t v)
{
    switch (dt) {
    case TD_I32: ((int32_t *)dst)[i] = v; break;
    case TD_I16: ((int16_t *)dst)[i] = (int16_t)v; break;
    case TD_I8: ((int8_t *)dst)[i] = (int8_t)v; break;
    case TD_U8: ((uint8_t *)dst)[i] = (uint8_t)v; break;
    case TD_BOOL: ((uint8_t *)dst)[i] = v != 0; break;
    case TD_F16:
    case TD_BF16: ((uint16_t *)dst)[i] = (uint16_t)v; break;
    default: break;
    }
}

td_status td__onnx_host_decode(const Onnx__TensorProto *tp, const char *what, td__onnx_host *out,
                               char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    td_dtype dt;
    int32_t ot = tp->has_data_type ? tp->data_type : 0;
    if (!td__onnx_dtype(ot, &dt)) {
        snprintf(err, errlen, "%s has data type %s (%d), which tensord does not support", what,
                 td__onnx_dtype_name(ot), (int)ot);
        return ot == 0 ? TD_EINVAL : TD_EUNSUPPORTED;
    }
    if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
        snprintf(err, errlen, "%s keeps its data in an external file, which is not supported",
                 what);
        return TD_EUNSUPPORTED;
    }
    if (tp->segment != NULL) {
        snprintf(err, errlen, "%s is a segment of a larger tensor, which is not supported", what);
        return TD_EUNSUPPORTED;
    }
    if (tp->n_dims > TD_MAX_RANK) {
        snprintf(err, errlen, "%s has rank %zu, more than tensord's %d", what, tp->n_dims,
                 TD_MAX_RANK);
        return TD_EINVAL;
    }
    td__desc d = {.dtype = (uint32_t)dt, .rank = (uint32_t)tp->n_dims};
    for (size_t i = 0; i < tp->n_dims; i++) d.dims[i] = tp->dims[i];
    char why[256];
    if (td__desc_check(&d, why, sizeof why) != TD_OK) {
        snprintf(err, errlen, "%s: dims %s", what, why);
        return TD_EINVAL;
    }
    size_t nelem = (size_t)td__desc_nelem(&d), nbytes = td__desc_nbytes(&d);
    size_t esize = td_dtype_size(dt);
    size_t have;
    const char *field;
    if (tp->has_raw_data) {
        have = tp->raw_data.len;
        field = "raw_data bytes";
        if (have != nbytes) {
            snprintf(err, errlen, "%s: dims %s need %zu bytes of %s, raw_data has %zu", what,
                     (td__desc_str(&d, why, sizeof why), why), nbytes, td_dtype_name(dt), have);
            return TD_EINVAL;
        }
    } else {
        switch (dt) {
        case TD_F32: have = tp->n_float_data; field = "float_data"; break;
        case TD_F64: have = tp->n_double_data; field = "double_data"; break;
        case TD_I64: have = tp->n_int64_data; field = "int64_data"; break;
        default: have = tp->n_int32_data; field = "int32_data"; break;
        }
        if (have != nelem) {
            td__desc_str(&d, why, sizeof why);
            snprintf(err, errlen, "%s: dims %s have %zu elements, %s has %zu", what, why, nelem,
                     field, have);
            return TD_EINVAL;
        }
    }
    void *data = NULL;
    if (nbytes > 0 && (data = td__malloc(nbytes)) == NULL) {
        snprintf(err, errlen, "%s: out of memory for %zu bytes", what, nbytes);
        return TD_ENOMEM;
    }
    if (nbytes == 0) {
        /* no elements: nothing to copy (the fields may be NULL) */
    } else if (tp->has_raw_data) {
        memcpy(data, tp->raw_data.data, nbytes);
        if (dt == TD_BOOL)
            for (size_t i = 0; i < nelem; i++) ((uint8_t *)data)[i] = ((uint8_t *)data)[i] != 0;
    } else if (dt == TD_F32) {
        memcpy(data, tp->float_data, nelem * esize);
    } else if (dt == TD_F64) {
        memcpy(data, tp->double_data, nelem * esize);
    } else if (dt == TD_I64) {
        memcpy(data, tp->int64_data, nelem * esize);
    } else {
        for (size_t i = 0; i < nelem; i++) put_i32(data, dt, i, tp->int32_data[i]);
    }
    out->desc = d;
    out->data = data;
    out->nbytes = nbytes;
    return TD_OK;
}

td_status td_onnx_tensor_decode(const void *buf, size_t nbytes, td_onnx_tensor *out)
{
    char err[512];
    if (out == NULL || (buf == NULL && nbytes > 0)) {
        td__ctx_set_error(NULL, TD_EINVAL, "td_onnx_tensor_decode: buf or out is NULL");
        return TD_EINVAL;
    }
    Onnx__TensorProto *tp = onnx__tensor_proto__unpack(&td__onnx_allocator, nbytes, buf);
    if (tp == NULL) {
        td__ctx_set_error(NULL, TD_EINVAL,
                          "td_onnx_tensor_decode: not a valid TensorProto (truncated or "
                          "malformed protobuf, or out of memory)");
        return TD_EINVAL;
    }
    char what[300];
    snprintf(what, sizeof what, "tensor '%.256s'", tp->name ? tp->name : "");
    td__onnx_host h;
    td_status st = td__onnx_host_decode(tp, what, &h, err, sizeof err);
    if (st == TD_OK) {
        memset(out, 0, sizeof *out);
        snprintf(out->name, sizeof out->name, "%s", tp->name ? tp->name : "");
        out->dtype = (td_dtype)h.desc.dtype;
        out->rank = (int)h.desc.rank;
        for (uint32_t i = 0; i < h.desc.rank; i++) out->dims[i] = h.desc.dims[i];
        out->data = h.data;
        out->nbytes = h.nbytes;
    } else {
        char msg[600];
        snprintf(msg, sizeof msg, "td_onnx_tensor_decode: %s", err);
        td__ctx_set_error(NULL, st, msg);
    }
    onnx__tensor_proto__free_unpacked(tp, &td__onnx_allocator);
    return st;
}

void td_onnx_tensor_fini(td_onnx_tensor *t)
{
    if (t == NULL) return;
    td__free(t->data);
    t->data = NULL;
    t->nbytes = 0;
}
