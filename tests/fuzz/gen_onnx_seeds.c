/* gen_onnx_seeds.c — write the seed corpus of the onnx fuzz target: small models built with
 * tests/unit/client/onnx_model.h, valid ones and ones broken in one way each.
 *   build-X/tests/fuzz/gen-onnx-seeds tests/fuzz/corpus/onnx */
#include "../unit/client/onnx_model.h"
#include <stdio.h>

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})
#define D(...) ((const int64_t[]){__VA_ARGS__})

static const char *dir;

static void put(const char *name, const mb *b)
{
    size_t len;
    uint8_t *buf = mb_pack(b, &len);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(buf, 1, len, f) != len) {
        perror(path);
        exit(1);
    }
    fclose(f);
    free(buf);
}

static const float w[6] = {1, -2, 3, -4, 5, -6};

static void add_relu(mb *b)
{
    mb_init(b, 8, 13);
    mb_input(b, "x", 1, 2, D(2, 3));
    mb_init_f32(b, "w", 2, D(2, 3), 6, w);
    mb_add_node(b, "Add", "add1", L("x", "w"), L("s"));
    mb_add_node(b, "Relu", "relu1", L("s"), L("y"));
    mb_output(b, "y", 1, 2, D(2, 3));
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    mb b;
    add_relu(&b);
    put("add_relu", &b);
    add_relu(&b);
    b.nodes[0].in[1] = (char *)"y";
    put("cycle", &b);
    add_relu(&b);
    b.init[0].n_float_data = 5;
    put("init_mismatch", &b);
    mb_init(&b, 7, 11);
    mb_input(&b, "x", 1, 2, D(2, 3));
    mb_attr_int(mb_add_node(&b, "Softmax", "sm", L("x"), L("y")), "axis", 1);
    mb_output(&b, "y", 1, 2, D(2, 3));
    put("softmax_opset11", &b);
    mb_init(&b, 8, 13);
    mb_input(&b, "a", 1, 2, D(2, 3));
    mb_init_f32(&b, "b", 2, D(2, 3), 6, w);
    mb_node *g = mb_add_node(&b, "Gemm", "gemm", L("a", "b"), L("y"));
    mb_attr_int(g, "transB", 1);
    mb_output(&b, "y", 1, 2, D(2, 2));
    put("gemm_transb", &b);
    mb_init(&b, 8, 13);
    mb_input(&b, "x", 1, 1, D(6));
    mb_input(&b, "shape", 7, 1, D(2));
    mb_add_node(&b, "Reshape", "r", L("x", "shape"), L("y"));
    mb_output(&b, "y", 1, 2, D(-1, -1));
    put("reshape_input_shape", &b);
    mb_init(&b, 8, 13);
    mb_input(&b, "x", 1, 2, D(-1, 3));
    mb_add_node(&b, "Shape", "sh", L("x"), L("s"));
    mb_add_node(&b, "ConstantOfShape", "c", L("s"), L("y"));
    mb_output(&b, "y", 1, 2, D(-1, 3));
    put("shape_constantofshape", &b);
    return 0;
}
