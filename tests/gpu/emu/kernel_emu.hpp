/* kernel_emu.hpp — CUDA C++ kernel syntax on the CPU, for tests/gpu/emu/run.sh. Force-
 * included into the backend's .cu files after preprocess.py has rewritten each
 * `kernel<<<grid, block, shmem, stream>>>(args)` into td_emu_launch_s(sync, "kernel", lambda, ...).
 *
 * A launch runs every block in turn. Kernels without __syncthreads run their threads as
 * plain calls; kernels that synchronise (preprocess.py finds them; td_emu_syncs names those it
 * cannot see, whose barrier is in a header) run each block's threads as
 * ucontext fibers that switch at every barrier, so shared memory (`static` here, one copy
 * per kernel instantiation) behaves as a block's shared memory does. Warp shuffles
 * (__shfl_xor_sync, __shfl_down_sync, __shfl_up_sync) run as one such round each; see td_emu_shfl. */
#ifndef TD_EMU_KERNEL_HPP
#define TD_EMU_KERNEL_HPP
#include "cuda_runtime_api.h"
#include <cmath>
#include <math.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <ucontext.h>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __CUDACC__ 1
/* The backend's sources leave out what this emulation cannot run (mma.sync, ldmatrix,
 * cp.async: gpu_attention.cu's tensor-core kernel, whose ops then take the lowering). */
#define TD_GPU_EMU 1

/* Arithmetic intrinsics that forbid contraction into FMA on the GPU: plain IEEE operations
 * here (the default x86-64 target has no FMA to contract into). */
inline float __fmul_rn(float a, float b) { return a * b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline double __dadd_rn(double a, double b) { return a + b; }

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct td_emu_uint3 {
    unsigned x, y, z;
};
inline td_emu_uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

struct td_emu_fibers {
    ucontext_t sched;
    std::vector<ucontext_t> ctx;
    std::vector<std::vector<char>> stacks;
    std::vector<char> done;
    std::vector<td_emu_uint3> tid;
    int cur = -1;
    const std::function<void()> *body = nullptr;
    std::vector<char> at;           /* what a thread last yielded at: 1 barrier, 2 shuffle */
    std::vector<uint64_t> nshfl;    /* shuffles a thread has made */
    std::vector<uint64_t> slot[2];  /* shuffle values, by the parity of nshfl */
};
inline td_emu_fibers td_emu_fb;
inline const char *td_emu_kernel = "";

inline void __syncthreads()
{
    if (td_emu_fb.cur < 0) {
        fprintf(stderr, "emu: __syncthreads in kernel %s, not run as fibers\n", td_emu_kernel);
        abort();
    }
    int me = td_emu_fb.cur;
    td_emu_fb.at[(size_t)me] = 1;
    swapcontext(&td_emu_fb.ctx[(size_t)me], &td_emu_fb.sched);
}

/* Warp shuffles (full mask, width a power of two <= 32, values of at most 8 bytes). The
 * thread publishes its value, yields for one scheduler round, in which every other thread of
 * the block runs to its own next yield, and then reads its source lane's value. That is a
 * warp's exchange exactly when every thread of the block is at the same shuffle in that
 * round — block-uniform shuffles, as the kernels here use them; the scheduler checks it after
 * each round and aborts otherwise. Two slots a thread, by the parity of its shuffle count:
 * no thread can be two shuffles ahead of another one that has yet to read. A source lane
 * past a width segment's end gives the thread its own value (CUDA's rule); one outside the
 * block (a partial warp) is undefined on the GPU and aborts here. */
template <typename T> inline T td_emu_shfl(T v, int src_lane, int width, const char *what)
{
    static_assert(sizeof(T) <= 8, "emu: shuffle of a value wider than 8 bytes");
    if (td_emu_fb.cur < 0) {
        fprintf(stderr, "emu: %s in kernel %s, not run as fibers\n", what, td_emu_kernel);
        abort();
    }
    const size_t me = (size_t)td_emu_fb.cur;
    const int lane = (int)(me % 32);
    const int par = (int)(td_emu_fb.nshfl[me] & 1);
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    td_emu_fb.slot[par][me] = bits;
    td_emu_fb.nshfl[me]++;
    td_emu_fb.at[me] = 2;
    swapcontext(&td_emu_fb.ctx[me], &td_emu_fb.sched);
    if (width < 1 || width > 32 || (width & (width - 1)) != 0) {
        fprintf(stderr, "emu: %s in kernel %s: width %d\n", what, td_emu_kernel, width);
        abort();
    }
    if (src_lane < 0 || src_lane >= 32 || src_lane / width > lane / width) return v;
    const size_t src = me - (size_t)lane + (size_t)src_lane;
    if (src >= td_emu_fb.done.size()) {
        fprintf(stderr, "emu: %s in kernel %s reads a lane outside the block\n", what,
                td_emu_kernel);
        abort();
    }
    T r;
    memcpy(&r, &td_emu_fb.slot[par][src], sizeof r);
    return r;
}
template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32)
{
    if (mask != 0xffffffffu) {
        fprintf(stderr, "emu: __shfl_xor_sync with a partial mask\n");
        abort();
    }
    return td_emu_shfl(v, (int)(td_emu_fb.cur % 32) ^ m, width, "__shfl_xor_sync");
}
template <typename T> inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32)
{
    if (mask != 0xffffffffu) {
        fprintf(stderr, "emu: __shfl_down_sync with a partial mask\n");
        abort();
    }
    const int lane = td_emu_fb.cur % 32;
    /* past the segment's end: own value */
    const int src = (lane % width) + (int)d >= width ? lane : lane + (int)d;
    return td_emu_shfl(v, src, width, "__shfl_down_sync");
}

template <typename T> inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32)
{
    if (mask != 0xffffffffu) {
        fprintf(stderr, "emu: __shfl_up_sync with a partial mask\n");
        abort();
    }
    const int lane = td_emu_fb.cur % 32;
    /* below the segment's start: own value */
    const int src = (lane % width) < (int)d ? lane : lane - (int)d;
    return td_emu_shfl(v, src, width, "__shfl_up_sync");
}

/* After a scheduler round: a round in which any thread shuffled must find every thread of
 * the block alive and at the same shuffle (see td_emu_shfl). */
inline void td_emu_check_round(size_t nt)
{
    bool shfl = false;
    for (size_t i = 0; i < nt; i++) shfl = shfl || (!td_emu_fb.done[i] && td_emu_fb.at[i] == 2);
    if (!shfl) return;
    for (size_t i = 0; i < nt; i++)
        if (td_emu_fb.done[i] || td_emu_fb.at[i] != 2 || td_emu_fb.nshfl[i] != td_emu_fb.nshfl[0]) {
            fprintf(stderr, "emu: kernel %s: a shuffle that not every thread of the block is at "
                            "(the emulator runs block-uniform shuffles only)\n", td_emu_kernel);
            abort();
        }
}

inline void td_emu_trampoline()
{
    (*td_emu_fb.body)();
    td_emu_fb.done[(size_t)td_emu_fb.cur] = 1;
}

inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v)
{
    unsigned long long old = *p;
    if (v < old) *p = v;
    return old;
}

/* Blocks run one at a time, in order, so a fence has nothing to order and an atomic needs
 * no lock. */
inline unsigned atomicAdd(unsigned *p, unsigned v)
{
    unsigned old = *p;
    *p = old + v;
    return old;
}

inline void __threadfence() {}
/* Blocks run in order, so a flag a kernel polls is already set: the pause never runs. */
inline void __nanosleep(unsigned) {}

inline bool td_emu_syncs(const char *name)
{
    return strncmp(name, "k_reduce", 8) == 0 || strstr(name, "k_transpose") != nullptr ||
           strstr(name, "k_matmul_int") != nullptr ||
           strstr(name, "k_gemm") != nullptr || strstr(name, "k_softmax") != nullptr ||
           strncmp(name, "k_stats", 7) == 0 || strncmp(name, "k_arg", 5) == 0 ||
           strncmp(name, "k_tile_", 7) == 0;
}

template <typename S = int>
inline void td_emu_launch_s(bool sync, const char *name, const std::function<void()> &body,
                            dim3 grid, dim3 block, size_t shmem = 0, S stream = 0)
{
    (void)shmem;
    (void)stream;
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x * block.y * block.z == 0 ||
        block.x * block.y * block.z > 1024 || grid.y > 65535 || grid.z > 65535) {
        fprintf(stderr, "emu: %s: invalid launch configuration\n", name);
        td_emu_set_error(cudaErrorInvalidValue);
        return;
    }
    gridDim = grid;
    blockDim = block;
    const bool fibers = sync || td_emu_syncs(name);
    td_emu_kernel = name;
    const size_t nt = (size_t)block.x * block.y * block.z;
    if (fibers) {
        td_emu_fb.ctx.resize(nt);
        td_emu_fb.stacks.resize(nt);
        td_emu_fb.done.assign(nt, 0);
        td_emu_fb.tid.resize(nt);
        td_emu_fb.at.assign(nt, 0);
        td_emu_fb.nshfl.assign(nt, 0);
        td_emu_fb.slot[0].assign(nt, 0);
        td_emu_fb.slot[1].assign(nt, 0);
        td_emu_fb.body = &body;
    }
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                blockIdx = {bx, by, bz};
                if (!fibers) {
                    for (unsigned tz = 0; tz < block.z; tz++)
                        for (unsigned ty = 0; ty < block.y; ty++)
                            for (unsigned tx = 0; tx < block.x; tx++) {
                                threadIdx = {tx, ty, tz};
                                body();
                            }
                    continue;
                }
                size_t t = 0;
                for (unsigned tz = 0; tz < block.z; tz++)
                    for (unsigned ty = 0; ty < block.y; ty++)
                        for (unsigned tx = 0; tx < block.x; tx++, t++) {
                            td_emu_fb.tid[t] = {tx, ty, tz};
                            td_emu_fb.done[t] = 0;
                            td_emu_fb.at[t] = 0;
                            td_emu_fb.nshfl[t] = 0;
                            td_emu_fb.stacks[t].resize(256 * 1024);
                            getcontext(&td_emu_fb.ctx[t]);
                            td_emu_fb.ctx[t].uc_stack.ss_sp = td_emu_fb.stacks[t].data();
                            td_emu_fb.ctx[t].uc_stack.ss_size = td_emu_fb.stacks[t].size();
                            td_emu_fb.ctx[t].uc_link = &td_emu_fb.sched;
                            makecontext(&td_emu_fb.ctx[t], td_emu_trampoline, 0);
                        }
                for (;;) {
                    size_t alive = 0;
                    for (size_t i = 0; i < nt; i++) {
                        if (td_emu_fb.done[i]) continue;
                        alive++;
                        td_emu_fb.cur = (int)i;
                        td_emu_fb.at[i] = 0;
                        threadIdx = td_emu_fb.tid[i];
                        swapcontext(&td_emu_fb.sched, &td_emu_fb.ctx[i]);
                    }
                    if (alive == 0) break;
                    td_emu_check_round(nt);
                }
                td_emu_fb.cur = -1;
            }
}
#endif
