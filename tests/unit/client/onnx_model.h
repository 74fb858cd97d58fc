/* onnx_model.h — build small ONNX models in tests with the protobuf-c code generated from
 * onnx.proto (the build directory's onnx.pb-c.h), so each test states its model in C and
 * can make it wrong in exactly one way. Fixed capacities; static functions only.
 */
#ifndef TD_TESTS_ONNX_MODEL_H
#define TD_TESTS_ONNX_MODEL_H

#include "onnx.pb-c.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MB_MAX 16

typedef struct mb_shape {
    Onnx__TypeProto type;
    Onnx__TypeProto__Tensor tt;
    Onnx__TensorShapeProto shape;
    Onnx__TensorShapeProto__Dimension dims[8];
    Onnx__TensorShapeProto__Dimension *dimp[8];
} mb_shape;

typedef struct mb_node {
    Onnx__NodeProto n;
    char *in[8], *out[4];
    Onnx__AttributeProto attr[4];
    Onnx__AttributeProto *attrp[4];
} mb_node;

typedef struct mb {
    Onnx__ModelProto m;
    Onnx__GraphProto g;
    Onnx__OperatorSetIdProto opset;
    Onnx__OperatorSetIdProto *opsetp[1];
    Onnx__ValueInfoProto vin[MB_MAX], vout[MB_MAX];
    Onnx__ValueInfoProto *vinp[MB_MAX], *voutp[MB_MAX];
    mb_shape sin[MB_MAX], sout[MB_MAX];
    mb_node nodes[MB_MAX];
    Onnx__NodeProto *nodep[MB_MAX];
    Onnx__TensorProto init[MB_MAX];
    Onnx__TensorProto *initp[MB_MAX];
    int64_t init_dims[MB_MAX][8];
} mb;

static void mb_init(mb *b, int64_t ir, int64_t opset)
{
    memset(b, 0, sizeof *b);
    onnx__model_proto__init(&b->m);
    onnx__graph_proto__init(&b->g);
    onnx__operator_set_id_proto__init(&b->opset);
    b->m.has_ir_version = 1;
    b->m.ir_version = ir;
    b->opset.domain = (char *)"";
    b->opset.has_version = 1;
    b->opset.version = opset;
    b->opsetp[0] = &b->opset;
    b->m.n_opset_import = 1;
    b->m.opset_import = b->opsetp;
    b->m.graph = &b->g;
    b->g.name = (char *)"g";
    b->g.input = b->vinp;
    b->g.output = b->voutp;
    b->g.node = b->nodep;
    b->g.initializer = b->initp;
}

/* dims[i] < 0: a symbolic dim "N". */
static void mb_value(Onnx__ValueInfoProto *v, mb_shape *s, const char *name, int32_t elem,
                     int rank, const int64_t *dims)
{
    onnx__value_info_proto__init(v);
    onnx__type_proto__init(&s->type);
    onnx__type_proto__tensor__init(&s->tt);
    onnx__tensor_shape_proto__init(&s->shape);
    v->name = (char *)name;
    v->type = &s->type;
    s->type.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    s->type.tensor_type = &s->tt;
    s->tt.has_elem_type = 1;
    s->tt.elem_type = elem;
    s->tt.shape = &s->shape;
    s->shape.n_dim = (size_t)rank;
    s->shape.dim = s->dimp;
    for (int i = 0; i < rank; i++) {
        onnx__tensor_shape_proto__dimension__init(&s->dims[i]);
        if (dims[i] >= 0) {
            s->dims[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            s->dims[i].dim_value = dims[i];
        } else {
            s->dims[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            s->dims[i].dim_param = (char *)"N";
        }
        s->dimp[i] = &s->dims[i];
    }
}

static void mb_input(mb *b, const char *name, int32_t elem, int rank, const int64_t *dims)
{
    size_t k = b->g.n_input++;
    mb_value(&b->vin[k], &b->sin[k], name, elem, rank, dims);
    b->vinp[k] = &b->vin[k];
}

static void mb_output(mb *b, const char *name, int32_t elem, int rank, const int64_t *dims)
{
    size_t k = b->g.n_output++;
    mb_value(&b->vout[k], &b->sout[k], name, elem, rank, dims);
    b->voutp[k] = &b->vout[k];
}

/* A node; ins/outs are NULL-terminated lists of names. */
static mb_node *mb_add_node(mb *b, const char *op, const char *name, const char *const *ins,
                            const char *const *outs)
{
    size_t k = b->g.n_node++;
    mb_node *nd = &b->nodes[k];
    onnx__node_proto__init(&nd->n);
    nd->n.op_type = (char *)op;
    nd->n.name = (char *)name;
    while (ins[nd->n.n_input] != NULL) {
        nd->in[nd->n.n_input] = (char *)ins[nd->n.n_input];
        nd->n.n_input++;
    }
    while (outs[nd->n.n_output] != NULL) {
        nd->out[nd->n.n_output] = (char *)outs[nd->n.n_output];
        nd->n.n_output++;
    }
    nd->n.input = nd->in;
    nd->n.output = nd->out;
    nd->n.attribute = nd->attrp;
    b->nodep[k] = &nd->n;
    return nd;
}

__attribute__((unused)) static void mb_attr_int(mb_node *nd, const char *name, int64_t v)
{
    size_t k = nd->n.n_attribute++;
    Onnx__AttributeProto *a = &nd->attr[k];
    onnx__attribute_proto__init(a);
    a->name = (char *)name;
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    a->has_i = 1;
    a->i = v;
    nd->attrp[k] = a;
}

/* A float initializer with `n` values (n may disagree with dims on purpose). */
static Onnx__TensorProto *mb_init_f32(mb *b, const char *name, int rank, const int64_t *dims,
                                      size_t n, const float *vals)
{
    size_t k = b->g.n_initializer++;
    Onnx__TensorProto *t = &b->init[k];
    onnx__tensor_proto__init(t);
    t->name = (char *)name;
    t->has_data_type = 1;
    t->data_type = 1;
    t->n_dims = (size_t)rank;
    memcpy(b->init_dims[k], dims, (size_t)rank * sizeof *dims);
    t->dims = b->init_dims[k];
    t->n_float_data = n;
    t->float_data = (float *)vals;
    b->initp[k] = t;
    return t;
}

/* Serialized model (malloc'd; *len its size). */
static uint8_t *mb_pack(const mb *b, size_t *len)
{
    *len = onnx__model_proto__get_packed_size(&b->m);
    uint8_t *buf = malloc(*len ? *len : 1);
    onnx__model_proto__pack(&b->m, buf);
    return buf;
}
#endif
