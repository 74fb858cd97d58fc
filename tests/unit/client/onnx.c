/* ONNX loader tests (td_onnx_load_memory, td_onnx_run, td_onnx_tensor_decode) on local:cpu.
 * Models are built in C (onnx_model.h) and broken one way each; every rejection must be a
 * clear status and message and, under ASan (build-*-asan), neither crash nor leak.
 * Expected values are computed by hand next to them. The random-bytes test feeds 4 MiB (not
 * the 1 GB, which would take minutes and 1 GB of memory here): the decoder's work is
 * linear in the input and it stops at the first malformed field. */
#include "onnx_model.h"
#include "tensord.h"
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

static td_context *ctx;
static void setup(void)
{
    cr_assert_eq(td_connect("local:cpu", NULL, &ctx), TD_OK, "%s", td_connect_error());
}
static void teardown(void) { td_close(ctx); }
TestSuite(onnx, .init = setup, .fini = teardown);

#define F32 1
#define I64 7
#define L(...) ((const char *const[]){__VA_ARGS__, NULL})
#define D(...) ((const int64_t[]){__VA_ARGS__})

static const float wvals[6] = {1, -2, 3, -4, 5, -6};

/* y = Relu(x + w), x and w [2, 3]. */
static void good_model(mb *b)
{
    mb_init(b, 8, 13);
    mb_input(b, "x", F32, 2, D(2, 3));
    mb_init_f32(b, "w", 2, D(2, 3), 6, wvals);
    mb_add_node(b, "Add", "add1", L("x", "w"), L("s"));
    mb_add_node(b, "Relu", "relu1", L("s"), L("y"));
    mb_output(b, "y", F32, 2, D(2, 3));
}

static td_status load(const mb *b, td_onnx_model **m)
{
    size_t len;
    uint8_t *buf = mb_pack(b, &len);
    td_status st = td_onnx_load_memory(ctx, buf, len, m);
    free(buf);
    return st;
}

static void expect_error(const mb *b, td_status want, const char *const *needles)
{
    td_onnx_model *m = NULL;
    td_status st = load(b, &m);
    const char *msg = td_last_error(ctx);
    cr_assert_eq(st, want, "status %s, want %s: %s", td_status_name(st), td_status_name(want),
                 msg);
    cr_assert_null(m);
    for (int i = 0; needles[i] != NULL; i++)
        cr_assert(strstr(msg, needles[i]) != NULL, "message lacks '%s': %s", needles[i], msg);
}

Test(onnx, runs_a_small_model)
{
    mb b;
    good_model(&b);
    td_onnx_model *m = NULL;
    cr_assert_eq(load(&b, &m), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_onnx_n_inputs(m), 1);
    cr_assert_eq(td_onnx_n_outputs(m), 1);
    td_onnx_value v;
    cr_assert_eq(td_onnx_input(m, 0, &v), TD_OK);
    cr_assert_str_eq(v.name, "x");
    cr_assert_eq(v.dtype, TD_F32);
    cr_assert_eq(v.rank, 2);
    cr_assert_eq(v.dims[1], 3);
    cr_assert_eq(td_onnx_input(m, 1, &v), TD_EINVAL);
    /* x = [0.5, 1, -4, 4, -5, 7]: x + w = [1.5, -1, -1, 0, 0, 1] -> relu [1.5, 0, 0, 0, 0, 1] */
    float xv[6] = {0.5f, 1, -4, 4, -5, 7}, out[6], want[6] = {1.5f, 0, 0, 0, 0, 1};
    td_tensor *x = td_from_host(ctx, TD_F32, 2, D(2, 3), xv), *y = NULL;
    cr_assert_eq(td_onnx_run(m, 1, L("x"), &x, 1, &y), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read(y, out, sizeof out), TD_OK, "%s", td_last_error(ctx));
    for (int i = 0; i < 6; i++) cr_assert_eq(out[i], want[i], "element %d: %g", i, out[i]);
    td_release(y);
    /* wrong input shape: named */
    td_tensor *bad = td_full(ctx, TD_F32, 2, D(3, 2), 0);
    cr_assert_eq(td_onnx_run(m, 1, NULL, &bad, 1, &y), TD_EINVAL);
    cr_assert(strstr(td_last_error(ctx), "input 'x' needs f32[2, 3]") != NULL, "%s",
              td_last_error(ctx));
    cr_assert_eq(td_onnx_run(m, 1, L("nope"), &x, 1, &y), TD_EINVAL);
    cr_assert(strstr(td_last_error(ctx), "no tensor bound to input 'x'") != NULL);
    td_release(bad);
    td_release(x);
    td_onnx_destroy(m);
}

Test(onnx, symbolic_dims_capture_per_shape)
{
    /* y = x * x with x [N]: two runs of different lengths. */
    mb b;
    mb_init(&b, 8, 13);
    mb_input(&b, "x", F32, 1, D(-1));
    mb_add_node(&b, "Mul", "sq", L("x", "x"), L("y"));
    mb_output(&b, "y", F32, 1, D(-1));
    td_onnx_model *m = NULL;
    cr_assert_eq(load(&b, &m), TD_OK, "%s", td_last_error(ctx));
    for (int n = 1; n <= 3; n++) {
        float xv[3] = {1, -2, 3}, out[3];
        td_tensor *x = td_from_host(ctx, TD_F32, 1, D(n), xv), *y;
        cr_assert_eq(td_onnx_run(m, 1, NULL, &x, 1, &y), TD_OK, "%s", td_last_error(ctx));
        cr_assert_eq(td_dims(y)[0], n);
        cr_assert_eq(td_read(y, out, (size_t)n * 4), TD_OK);
        for (int i = 0; i < n; i++) cr_assert_eq(out[i], xv[i] * xv[i]);
        td_release(x);
        td_release(y);
    }
    td_onnx_destroy(m);
}

Test(onnx, reshape_shape_from_a_graph_input)
{
    /* Reshape(x [6], shape) with shape = [3, 2] given at run time (read on the host). */
    mb b;
    mb_init(&b, 8, 13);
    mb_input(&b, "x", F32, 1, D(6));
    mb_input(&b, "shape", I64, 1, D(2));
    mb_add_node(&b, "Reshape", "r", L("x", "shape"), L("y"));
    mb_output(&b, "y", F32, 2, D(-1, -1));
    td_onnx_model *m = NULL;
    cr_assert_eq(load(&b, &m), TD_OK, "%s", td_last_error(ctx));
    int64_t sv[2] = {3, 2};
    td_tensor *in[2] = {td_from_host(ctx, TD_F32, 1, D(6), wvals),
                        td_from_host(ctx, TD_I64, 1, D(2), sv)};
    td_tensor *y;
    cr_assert_eq(td_onnx_run(m, 2, NULL, in, 1, &y), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_rank(y), 2);
    cr_assert_eq(td_dims(y)[0], 3);
    td_release(y);
    td_release(in[0]);
    td_release(in[1]);
    td_onnx_destroy(m);
}

Test(onnx, every_truncation_is_refused)
{
    mb b;
    good_model(&b);
    size_t len;
    uint8_t *buf = mb_pack(&b, &len);
    for (size_t n = 0; n < len; n++) {
        td_onnx_model *m = NULL;
        td_status st = td_onnx_load_memory(ctx, buf, n, &m);
        cr_assert_neq(st, TD_OK, "a prefix of %zu of %zu bytes loaded", n, len);
        cr_assert_null(m);
        cr_assert(td_last_error(ctx)[0] != '\0');
    }
    td_onnx_model *m = NULL;
    td_onnx_load_memory(ctx, buf, len / 2, &m);
    cr_assert(strstr(td_last_error(ctx), "td_onnx_load") != NULL, "%s", td_last_error(ctx));
    free(buf);
}

Test(onnx, undefined_input_names_node_and_value)
{
    mb b;
    good_model(&b);
    b.nodes[1].in[0] = (char *)"nope";
    expect_error(&b, TD_EINVAL, L("onnx node 1 'relu1' (Relu)", "input 'nope' is not defined"));
}

Test(onnx, cycle_is_refused)
{
    /* s = Add(x, t); t = Relu(s): each needs the other. */
    mb b;
    good_model(&b);
    b.nodes[0].in[1] = (char *)"y";
    expect_error(&b, TD_EINVAL, L("cycle", "(Add)"));
}

Test(onnx, value_defined_twice)
{
    mb b;
    good_model(&b);
    b.nodes[1].out[0] = (char *)"s";
    expect_error(&b, TD_EINVAL, L("onnx node 1 'relu1' (Relu)", "output 's' is already defined"));
}

Test(onnx, initializer_dims_mismatch)
{
    mb b;
    good_model(&b);
    b.init[0].n_float_data = 5;
    expect_error(&b, TD_EINVAL, L("initializer 'w'", "6 elements", "float_data has 5"));
}

Test(onnx, initializer_dims_overflow)
{
    mb b;
    good_model(&b);
    b.init[0].n_dims = 3;
    b.init_dims[0][0] = INT64_MAX / 2;
    b.init_dims[0][1] = INT64_MAX / 2;
    b.init_dims[0][2] = 4;
    expect_error(&b, TD_EINVAL, L("initializer 'w'", "dims"));
    good_model(&b);
    b.init_dims[0][0] = -1;
    expect_error(&b, TD_EINVAL, L("initializer 'w'", "dims"));
    /* raw_data that disagrees with the dims */
    good_model(&b);
    static const uint8_t raw[20] = {0};
    b.init[0].n_float_data = 0;
    b.init[0].has_raw_data = 1;
    b.init[0].raw_data.len = sizeof raw;
    b.init[0].raw_data.data = (uint8_t *)raw;
    expect_error(&b, TD_EINVAL, L("initializer 'w'", "need 24 bytes", "raw_data has 20"));
}

Test(onnx, opset_and_ir_outside_range)
{
    mb b;
    good_model(&b);
    b.opset.version = TD_ONNX_OPSET_MAX + 1;
    expect_error(&b, TD_EUNSUPPORTED, L("opset 18 of domain 'ai.onnx'", "supported range 1..17"));
    good_model(&b);
    b.opset.version = 0;
    expect_error(&b, TD_EUNSUPPORTED, L("opset 0"));
    good_model(&b);
    b.m.ir_version = 99;
    expect_error(&b, TD_EUNSUPPORTED, L("IR version 99"));
    good_model(&b);
    b.m.has_ir_version = 0;
    expect_error(&b, TD_EINVAL, L("no IR version"));
}

Test(onnx, unsupported_op_names_type_domain_opset)
{
    mb b;
    good_model(&b);
    b.nodes[1].n.op_type = (char *)"TfIdfVectorizer";
    expect_error(&b, TD_EUNSUPPORTED, L("(TfIdfVectorizer)", "op TfIdfVectorizer of domain 'ai.onnx' at opset 13"));
    good_model(&b);
    b.nodes[1].n.domain = (char *)"com.microsoft";
    expect_error(&b, TD_EUNSUPPORTED, L("domain 'com.microsoft'"));
}

Test(onnx, shape_error_names_the_node)
{
    mb b;
    good_model(&b);
    b.init_dims[0][1] = 2;
    b.init[0].n_float_data = 4;
    expect_error(&b, TD_EINVAL, L("onnx node 0 'add1' (Add)"));
}

Test(onnx, declared_output_type_is_checked)
{
    mb b;
    good_model(&b);
    b.sout[0].tt.elem_type = 11; /* DOUBLE, but Relu of f32 is f32 */
    expect_error(&b, TD_EINVAL, L("onnx output 'y'", "declares f64"));
}

Test(onnx, random_bytes_are_refused)
{
    size_t n = 4u << 20;
    uint8_t *buf = malloc(n);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        buf[i] = (uint8_t)s;
    }
    for (int k = 0; k < 4; k++) {
        td_onnx_model *m = NULL;
        td_status st = td_onnx_load_memory(ctx, buf + k * 1024, n - (size_t)k * 1024, &m);
        cr_assert_neq(st, TD_OK);
        cr_assert_null(m);
    }
    td_onnx_tensor t;
    cr_assert_neq(td_onnx_tensor_decode(buf, 4096, &t), TD_OK);
    free(buf);
}

Test(onnx, empty_initializer_without_data)
{
    /* w [2, 0] with no data at all (the fields are NULL): y = x + w is [2, 0] too */
    mb b;
    mb_init(&b, 8, 13);
    mb_input(&b, "x", F32, 2, D(2, 0));
    mb_init_f32(&b, "w", 2, D(2, 0), 0, NULL);
    mb_add_node(&b, "Add", "add1", L("x", "w"), L("y"));
    mb_output(&b, "y", F32, 2, D(2, 0));
    td_onnx_model *m = NULL;
    cr_assert_eq(load(&b, &m), TD_OK, "%s", td_last_error(ctx));
    td_tensor *x = td_full(ctx, TD_F32, 2, D(2, 0), 0), *y;
    cr_assert_eq(td_onnx_run(m, 1, NULL, &x, 1, &y), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_nelem(y), 0);
    td_release(x);
    td_release(y);
    td_onnx_destroy(m);
}

Test(onnx, missing_file)
{
    td_onnx_model *m = NULL;
    cr_assert_eq(td_onnx_load(ctx, "/nonexistent/model.onnx", &m), TD_EIO);
    cr_assert(strstr(td_last_error(ctx), "/nonexistent/model.onnx") != NULL);
}

Test(onnx, tensor_decode)
{
    Onnx__TensorProto t;
    onnx__tensor_proto__init(&t);
    int64_t dims[2] = {2, 2};
    int64_t vals[4] = {1, -2, 3, 1ll << 40};
    t.name = (char *)"v";
    t.has_data_type = 1;
    t.data_type = I64;
    t.n_dims = 2;
    t.dims = dims;
    t.n_int64_data = 4;
    t.int64_data = vals;
    uint8_t buf[256];
    size_t len = onnx__tensor_proto__pack(&t, buf);
    td_onnx_tensor out;
    cr_assert_eq(td_onnx_tensor_decode(buf, len, &out), TD_OK, "%s", td_last_error(NULL));
    cr_assert_str_eq(out.name, "v");
    cr_assert_eq(out.dtype, TD_I64);
    cr_assert_eq(out.nbytes, 32);
    cr_assert_eq(((int64_t *)out.data)[3], 1ll << 40);
    td_onnx_tensor_fini(&out);
    t.n_int64_data = 3;
    len = onnx__tensor_proto__pack(&t, buf);
    cr_assert_eq(td_onnx_tensor_decode(buf, len, &out), TD_EINVAL);
    cr_assert(strstr(td_last_error(NULL), "int64_data has 3") != NULL, "%s", td_last_error(NULL));
    t.data_type = 12; /* UINT32 */
    len = onnx__tensor_proto__pack(&t, buf);
    cr_assert_eq(td_onnx_tensor_decode(buf, len, &out), TD_EUNSUPPORTED);
    cr_assert(strstr(td_last_error(NULL), "UINT32") != NULL);
}
