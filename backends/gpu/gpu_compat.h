/* gpu_compat.h — the thin layer between the GPU backend's sources and a vendor runtime.
 *
 * Why: the kernels and the vtable are written once against `gpu*` names; this header maps
 * them to the CUDA runtime (default) or, when TD_GPU_HIP is defined, to the HIP runtime, so
 * backends/hip can compile the very same .cu/.c files with hipcc instead of keeping a second
 * copy. Kernel launch syntax (<<<grid, block, shmem, stream>>>) is the same in both
 * languages and needs no mapping. Names are macros rather than inline wrappers because they
 * alias whole families of runtime functions, types and enumerators one for one; nothing
 * else hides here.
 *
 * C files (the vtable) and CUDA C++ files both include it. Only runtime names the backend
 * uses are listed; add to both columns together.
 */
#ifndef TD_BACKENDS_GPU_COMPAT_H
#define TD_BACKENDS_GPU_COMPAT_H

#if defined(TD_GPU_HIP)
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__
#endif
#include <hip/hip_runtime_api.h>
#define TD_GPU_KIND "hip"
#define TD_GPU_COUNT_CALL "hipGetDeviceCount"
#define gpuError_t hipError_t
#define gpuSuccess hipSuccess
#define gpuErrorMemoryAllocation hipErrorOutOfMemory
#define gpuStream_t hipStream_t
#define gpuMemPool_t hipMemPool_t
#define gpuMemPoolProps hipMemPoolProps
#define gpuDeviceProp hipDeviceProp_t
#define gpuGetErrorString hipGetErrorString
#define gpuGetErrorName hipGetErrorName
#define gpuGetLastError hipGetLastError
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuSetDevice hipSetDevice
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuDriverGetVersion hipDriverGetVersion
#define gpuRuntimeGetVersion hipRuntimeGetVersion
#define gpuDeviceSynchronize hipDeviceSynchronize
#define gpuMemGetInfo hipMemGetInfo
#define gpuMemPoolCreate hipMemPoolCreate
#define gpuMemPoolDestroy hipMemPoolDestroy
#define gpuMemPoolSetAttribute hipMemPoolSetAttribute
#define gpuMemPoolGetAttribute hipMemPoolGetAttribute
#define gpuMemPoolTrimTo hipMemPoolTrimTo
#define gpuMemPoolAttrReleaseThreshold hipMemPoolAttrReleaseThreshold
#define gpuMemPoolAttrReservedMemCurrent hipMemPoolAttrReservedMemCurrent
#define gpuMemPoolAttrUsedMemCurrent hipMemPoolAttrUsedMemCurrent
#define gpuMemAllocationTypePinned hipMemAllocationTypePinned
#define gpuMemHandleTypeNone hipMemHandleTypeNone
#define gpuMemLocationTypeDevice hipMemLocationTypeDevice
#define gpuMallocFromPoolAsync hipMallocFromPoolAsync
#define gpuFreeAsync hipFreeAsync
/* hipHostMalloc has no default for flags in C */
#define gpuMallocHost(p, n) hipHostMalloc((p), (n), hipHostMallocDefault)
#define gpuFreeHost hipHostFree
#define gpuHostRegister hipHostRegister
#define gpuHostUnregister hipHostUnregister
#define gpuHostRegisterPortable hipHostRegisterPortable
#define gpuMemcpy hipMemcpy
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemcpyPeerAsync hipMemcpyPeerAsync
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuStreamCreate hipStreamCreate
#define gpuStreamCreateWithFlags hipStreamCreateWithFlags
#define gpuStreamNonBlocking hipStreamNonBlocking
#define gpuStreamWaitEvent hipStreamWaitEvent
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
/* The null stream: it waits for, and is waited for by, every blocking stream, and is
 * unordered with non-blocking ones (the sessions' streams). */
#define gpuStreamLegacy ((hipStream_t)0)
#define gpuFuncAttributes hipFuncAttributes
#define gpuFuncGetAttributes hipFuncGetAttributes
#define gpuEvent_t hipEvent_t
#define gpuEventCreateWithFlags hipEventCreateWithFlags
#define gpuEventDisableTiming hipEventDisableTiming
#define gpuEventRecord hipEventRecord
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventDestroy hipEventDestroy
#define gpuEventDefault hipEventDefault
#define gpuEventElapsedTime hipEventElapsedTime
#else
#include <cuda_runtime_api.h>
#define TD_GPU_KIND "cuda"
#define TD_GPU_COUNT_CALL "cudaGetDeviceCount"
#define gpuError_t cudaError_t
#define gpuSuccess cudaSuccess
#define gpuErrorMemoryAllocation cudaErrorMemoryAllocation
#define gpuStream_t cudaStream_t
#define gpuMemPool_t cudaMemPool_t
#define gpuMemPoolProps struct cudaMemPoolProps
#define gpuDeviceProp struct cudaDeviceProp
#define gpuGetErrorString cudaGetErrorString
#define gpuGetErrorName cudaGetErrorName
#define gpuGetLastError cudaGetLastError
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuSetDevice cudaSetDevice
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuDriverGetVersion cudaDriverGetVersion
#define gpuRuntimeGetVersion cudaRuntimeGetVersion
#define gpuDeviceSynchronize cudaDeviceSynchronize
#define gpuMemGetInfo cudaMemGetInfo
#define gpuMemPoolCreate cudaMemPoolCreate
#define gpuMemPoolDestroy cudaMemPoolDestroy
#define gpuMemPoolSetAttribute cudaMemPoolSetAttribute
#define gpuMemPoolGetAttribute cudaMemPoolGetAttribute
#define gpuMemPoolTrimTo cudaMemPoolTrimTo
#define gpuMemPoolAttrReleaseThreshold cudaMemPoolAttrReleaseThreshold
#define gpuMemPoolAttrReservedMemCurrent cudaMemPoolAttrReservedMemCurrent
#define gpuMemPoolAttrUsedMemCurrent cudaMemPoolAttrUsedMemCurrent
#define gpuMemAllocationTypePinned cudaMemAllocationTypePinned
#define gpuMemHandleTypeNone cudaMemHandleTypeNone
#define gpuMemLocationTypeDevice cudaMemLocationTypeDevice
#define gpuMallocFromPoolAsync cudaMallocFromPoolAsync
#define gpuFreeAsync cudaFreeAsync
#define gpuMallocHost cudaMallocHost
#define gpuFreeHost cudaFreeHost
#define gpuHostRegister cudaHostRegister
#define gpuHostUnregister cudaHostUnregister
#define gpuHostRegisterPortable cudaHostRegisterPortable
#define gpuMemcpy cudaMemcpy
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemcpyPeerAsync cudaMemcpyPeerAsync
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuStreamCreate cudaStreamCreate
#define gpuStreamCreateWithFlags cudaStreamCreateWithFlags
#define gpuStreamNonBlocking cudaStreamNonBlocking
#define gpuStreamWaitEvent cudaStreamWaitEvent
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuStreamLegacy cudaStreamLegacy
#define gpuFuncAttributes struct cudaFuncAttributes
#define gpuFuncGetAttributes cudaFuncGetAttributes
#define gpuEvent_t cudaEvent_t
#define gpuEventCreateWithFlags cudaEventCreateWithFlags
#define gpuEventDisableTiming cudaEventDisableTiming
#define gpuEventRecord cudaEventRecord
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventDestroy cudaEventDestroy
#define gpuEventDefault cudaEventDefault
#define gpuEventElapsedTime cudaEventElapsedTime
#endif

#endif
