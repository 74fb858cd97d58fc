// CPU stand-in for CUB's DeviceSegmentedRadixSort::SortPairs (tests/gpu/emu): each segment
// [begin[i], end[i]) sorted stably by key, as device_radix_sort.cuh does for one.
#pragma once
#include "device_radix_sort.cuh"

namespace cub {
struct DeviceSegmentedRadixSort {
    template <typename K, typename V, typename O>
    static cudaError_t SortPairs(void *tmp, size_t &bytes, const K *kin, K *kout, const V *vin,
                                 V *vout, int n, int nseg, O begin, O end, int begin_bit,
                                 int end_bit, cudaStream_t s)
    {
        (void)n, (void)begin_bit, (void)end_bit, (void)s;
        if (tmp == NULL) {
            bytes = 1;
            return cudaSuccess;
        }
        for (int i = 0; i < nseg; i++) td_emu::sort_pairs(kin, kout, vin, vout, begin[i], end[i]);
        return cudaSuccess;
    }
};
} // namespace cub
