// CPU stand-in for CUB's DeviceRadixSort::SortPairs (tests/gpu/emu): the emulated device's
// memory is host memory, so the pairs are sorted in place of a kernel sequence, stably by
// the unsigned key (an LSD radix sort over all bits is a stable sort by key).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>
#include "cuda_runtime_api.h"

namespace cub {
namespace td_emu {
template <typename K, typename V>
inline void sort_pairs(const K *kin, K *kout, const V *vin, V *vout, int lo, int hi)
{
    std::vector<int> idx((size_t)(hi - lo));
    std::iota(idx.begin(), idx.end(), lo);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return kin[a] < kin[b]; });
    for (int i = lo; i < hi; i++) {
        kout[i] = kin[idx[(size_t)(i - lo)]];
        vout[i] = vin[idx[(size_t)(i - lo)]];
    }
}
} // namespace td_emu

struct DeviceRadixSort {
    template <typename K, typename V>
    static cudaError_t SortPairs(void *tmp, size_t &bytes, const K *kin, K *kout, const V *vin,
                                 V *vout, int n, int begin_bit, int end_bit, cudaStream_t s)
    {
        (void)begin_bit, (void)end_bit, (void)s;
        if (tmp == NULL) {
            bytes = 1;
            return cudaSuccess;
        }
        td_emu::sort_pairs(kin, kout, vin, vout, 0, n);
        return cudaSuccess;
    }
};
} // namespace cub
