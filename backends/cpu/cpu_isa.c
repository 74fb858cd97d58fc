/* cpu_isa.c — which instruction-set copy of a kernel family runs: the best this CPU has, or
 * the one a test forced. Families (half conversions, reductions, attention rows) compile
 * their loops three times (generic, AVX2, AVX-512) and index a table by td__cpu_isa_pick. */
#include "backends/cpu/cpu_internal.h"
#include <string.h>

static const char *const isa_names[TD_CPU_ISA_COUNT] = {"generic", "avx2", "avx512"};

static bool runs(int isa)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    switch (isa) {
    case TD_CPU_ISA_GENERIC: return true;
    case TD_CPU_ISA_AVX2: return __builtin_cpu_supports("avx2");
    case TD_CPU_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
    default: return false;
    }
#else
    return isa == TD_CPU_ISA_GENERIC;
#endif
}

int td__cpu_isa_pick(td__cpu_isa_choice *c)
{
    const int f = atomic_load_explicit(&c->forced, memory_order_relaxed);
    if (f > 0) return f - 1;
    for (int isa = TD_CPU_ISA_COUNT - 1; isa > 0; isa--)
        if (runs(isa)) return isa;
    return TD_CPU_ISA_GENERIC;
}

bool td__cpu_isa_force(td__cpu_isa_choice *c, const char *name)
{
    if (name == NULL) {
        atomic_store(&c->forced, 0);
        return true;
    }
    for (int isa = 0; isa < TD_CPU_ISA_COUNT; isa++)
        if (strcmp(name, isa_names[isa]) == 0 && runs(isa)) {
            atomic_store(&c->forced, isa + 1);
            return true;
        }
    return false;
}

const char *td__cpu_isa_name(int isa)
{
    return isa >= 0 && isa < TD_CPU_ISA_COUNT ? isa_names[isa] : "?";
}
