/* td-opdoc — print the op reference (docs/ops.md) from the op table (engine/optable.h) and
 * the dtype table (engine/dtype.h), so the docs are derived from the same rows the engine
 * validates with and cannot drift from them.
 *
 * Usage: td-opdoc               write the markdown to stdout
 *        td-opdoc --check FILE  exit 0 when FILE holds exactly that text, else 1 with a
 *                               line saying how to regenerate it (the ops-doc test)
 */
#include "engine/optable.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *family_str(unsigned f)
{
    static const char *const names[] = {"?",      "create", "unary",  "binary",  "compare", "where",
                                        "cast",   "reduce", "matmul", "movement", "softmax",
                                        "scan",   "sort",   "nn",     "conv",   "pool"};
    return f < sizeof names / sizeof names[0] ? names[f] : "?";
}

static const char *class_str(unsigned c)
{
    switch (c) {
    case TD_DTC_ANY: return "any";
    case TD_DTC_NUMERIC: return "numeric";
    case TD_DTC_FLOAT: return "float";
    case TD_DTC_INDEX: return "i32/i64";
    case TD_DTC_BOOL: return "bool";
    case TD_DTC_INT: return "integer";
    case TD_DTC_INTBOOL: return "integer/bool";
    }
    return "";
}

static const char *shape_str(unsigned s)
{
    static const char *const names[] = {"same as x", "dims", "[length]", "broadcast",
                                        "reduce", "matmul", "same as x (axis non-empty)",
                                        "reshape", "expand", "permute", "slice", "concat",
                                        "index's shape", "axis -> index dims",
                                        "same as x (along an axis)", "axis -> k",
                                        "sliced with steps", "padded", "repeated",
                                        "same as x (rank >= 2)", "index's shape + [num_classes]",
                                        "same as x (mask broadcasts to it)",
                                        "same as x (scatter rules)", "same as x (index_add rules)",
                                        "index.shape[:-1] + x.shape[k:]",
                                        "same as x (parameters checked)",
                                        "window (engine/window.h)",
                                        "[batch..., L, Ev] (attention)"};
    return s < sizeof names / sizeof names[0] ? names[s] : "?";
}

static const char *acc_str(unsigned a)
{
    static const char *const names[] = {"exact", "4 ulp", "6 ulp", "8 ulp", "sum bound",
                                        "prod bound", "matmul bound", "normal bound",
                                        "softmax bound", "log_softmax bound", "16 ulp",
                                        "stat bound", "cumsum bound", "cumprod bound",
                                        "norm bound",
                                        "conv bound", "attention bound"};
    return a < sizeof names / sizeof names[0] ? names[a] : "?";
}

static void attrs_str(const td__op_row *r, char *buf, size_t len)
{
    const td__attr_schema *a = &r->attrs;
    size_t o = 0;
    buf[0] = '\0';
    switch (a->layout) {
    case TD_ATTRS_NONE: break;
    case TD_ATTRS_DIMS: o += (size_t)snprintf(buf, len, "%s (0..%d)", a->a[0].name, TD_MAX_RANK); break;
    case TD_ATTRS_RANK: o += (size_t)snprintf(buf, len, "%s (rank entries)", a->a[0].name); break;
    case TD_ATTRS_2RANK: o += (size_t)snprintf(buf, len, "%s (2 x rank)", a->a[0].name); break;
    case TD_ATTRS_3RANK: o += (size_t)snprintf(buf, len, "%s (3 x rank)", a->a[0].name); break;
    case TD_ATTRS_MODE_2RANK:
        o += (size_t)snprintf(buf, len, "%s: %s; %s (2 x rank)", a->a[0].name, a->a[0].values,
                              a->a[1].name);
        break;
    case TD_ATTRS_BOUNDS_DIMS:
        o += (size_t)snprintf(buf, len, "%s (2 + 0..%d)", a->a[0].name, TD_MAX_RANK);
        break;
    case TD_ATTRS_FIXED:
    case TD_ATTRS_UPTO:
    case TD_ATTRS_SPATIAL:
        for (unsigned i = 0; i < a->n && i < 3 && o < len; i++) {
            const td__attr_spec *sp = &a->a[i];
            const char *kind = sp->kind == TD_ATTR_NONNEG      ? ">= 0"
                               : sp->kind == TD_ATTR_AXIS      ? "axis of x"
                               : sp->kind == TD_ATTR_AXES_MASK ? "bit mask of axes of x"
                               : sp->kind == TD_ATTR_ENUM      ? sp->values
                                                               : "int";
            o += (size_t)snprintf(buf + o, len - o, "%s%s%s: %s", i ? "; " : "",
                                  a->layout == TD_ATTRS_UPTO ? "optional " : "", sp->name, kind);
        }
        if (a->layout == TD_ATTRS_SPATIAL && o < len)
            o += (size_t)snprintf(buf + o, len - o, "%sthen one list per name, each one entry per spatial dim: %s",
                                  a->n ? "; " : "",
                                  a->a[2].name);
        break;
    }
    if (r->fattrs[0] != '\0' && o < len)
        snprintf(buf + o, len - o, "%sfattrs: %s", o ? "; " : "", r->fattrs);
}

static void dtypes_str(const td__op_row *r, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    if (r->attr_dtype != TD_DTC_NONE)
        o += (size_t)snprintf(buf, len, "dtype attr: %s", class_str(r->attr_dtype));
    if (r->in_dtype != TD_DTC_NONE && o < len)
        o += (size_t)snprintf(buf + o, len - o, "%s%s", o ? "; " : "", class_str(r->in_dtype));
    if (r->rest_dtype != TD_DTC_NONE && o < len)
        o += (size_t)snprintf(buf + o, len - o, ", then %s", class_str(r->rest_dtype));
    if (r->same_dtype != TD_SAME_NONE && o < len)
        snprintf(buf + o, len - o, r->same_dtype == TD_SAME_ALL ? " (all one dtype)"
                                                                : " (a, b one dtype)");
}

static const char *out_str(unsigned o)
{
    static const char *const names[] = {"x's", "the dtype attr", "bool", "i64", "a's"};
    return o < sizeof names / sizeof names[0] ? names[o] : "?";
}

static char *render(size_t *len_out)
{
    size_t cap = 1 << 18, len = 0;
    char *s = malloc(cap);
    if (s == NULL) return NULL;
#define OUT(...)                                                                           \
    do {                                                                                   \
        int n_ = snprintf(s + len, cap - len, __VA_ARGS__);                                \
        if (n_ > 0) len += (size_t)n_ < cap - len ? (size_t)n_ : cap - len - 1;            \
    } while (0)
    OUT("# Operations\n\n");
    OUT("Generated by `build/tools/td-opdoc > docs/ops.md` from the op table "
        "(`engine/optable.h`); the `ops-doc` test fails when this file is stale. Opcodes are "
        "frozen: they travel on the wire.\n\n");
    OUT("Dtype classes: any; numeric (all but bool); float; i32/i64; integer; integer/bool. Accuracy: how closely "
        "every backend follows the CPU reference (`tests/unit/backends/conformance.c` states "
        "each bound). Ops with a lowering are composites: the engine runs them as the listed "
        "primitives on any backend without a native kernel (`TENSORD_FORCE_LOWERING=1` "
        "forces it).\n\n");
    OUT("| opcode | op | family | inputs | attributes | dtypes | output dtype | shape | "
        "lowering | accuracy | what |\n");
    OUT("|---:|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < TD_OP_COUNT; i++) {
        const td__op_row *r = &td__op_rows[i];
        char at[256], dt[160], lw[160] = "";
        attrs_str(r, at, sizeof at);
        dtypes_str(r, dt, sizeof dt);
        const td__lowering *l = td__op_lowering(r);
        size_t o = 0;
        if (l != NULL && l->n_steps == 0)
            snprintf(lw, sizeof lw, "built per op (engine/lower.c)");
        for (unsigned j = 0; l != NULL && j < l->n_steps && o < sizeof lw; j++)
            o += (size_t)snprintf(lw + o, sizeof lw - o, "%s%s", j ? ", " : "",
                                  td__op_name(l->steps[j].opcode));
        OUT("| %u | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r->opcode, r->name,
            family_str(r->family), r->min_inputs == r->max_inputs && r->min_inputs == 0
                                       ? "none" : r->inputs,
            at, dt, out_str(r->out_dtype), shape_str(r->shape), lw, acc_str(r->accuracy),
            r->summary);
    }
    OUT("\n## Client-side compositions\n\n"
        "Public functions with no row of their own, recorded by the client as ops of the "
        "table (include/tensord.h documents each):\n\n"
        "| function | recorded as |\n|---|---|\n"
        "| td_stack | a reshape per input (a new axis of length 1), then concat of at most 8 "
        "inputs each (a tree beyond 8) |\n"
        "| td_split, td_chunk | one slice_step per piece |\n"
        "| td_repeat, td_tile | reshape (leading dims of 1) when the counts outnumber the dims, "
        "then repeat |\n"
        "| td_roll without axes | reshape to 1-d, roll, reshape back |\n"
        "| td_einsum | sum, permute, reshape and batched matmul, operands folded left to right "
        "(no ellipsis, no diagonal) |\n");
    OUT("\n## Dtypes\n\n| value | dtype | bytes | kind |\n|---:|---|---:|---|\n");
#define TD__DOC_DTYPE(name, str, size, flags)                                              \
    OUT("| %u | %s | %u | %s |\n", (unsigned)TD_##name, str, (unsigned)(size),              \
        ((flags) & TD_DTF_FLOAT)    ? "float"                                              \
        : ((flags) & TD_DTF_BOOL)   ? "bool"                                               \
        : ((flags) & TD_DTF_SIGNED) ? "signed integer"                                     \
                                    : "unsigned integer");
    TD_DTYPE_TABLE(TD__DOC_DTYPE)
#undef TD__DOC_DTYPE
#undef OUT
    *len_out = len;
    return s;
}

int main(int argc, char **argv)
{
    size_t len;
    char *text = render(&len);
    if (text == NULL) return 2;
    if (argc == 3 && strcmp(argv[1], "--check") == 0) {
        FILE *f = fopen(argv[2], "rb");
        char *have = malloc(len + 2);
        size_t n = f != NULL && have != NULL ? fread(have, 1, len + 1, f) : 0;
        if (f != NULL) fclose(f);
        int ok = n == len && memcmp(have, text, len) == 0;
        if (!ok)
            fprintf(stderr, "td-opdoc: %s is stale (it is not what the op table says): run "
                            "build/tools/td-opdoc > docs/ops.md\n", argv[2]);
        free(have);
        free(text);
        return ok ? 0 : 1;
    }
    if (argc != 1) {
        fprintf(stderr, "usage: td-opdoc [--check FILE]\n");
        free(text);
        return 2;
    }
    fwrite(text, 1, len, stdout);
    free(text);
    return 0;
}
