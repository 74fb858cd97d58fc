/* cublas_v2.h (emulation) — the types and functions the CUDA backend's cuda_blas.c uses;
 * libcublas.so.13 is built from cublas_emu.c (a naive column-major GEMM). */
#ifndef TD_EMU_CUBLAS_V2_H
#define TD_EMU_CUBLAS_V2_H
#include "cuda_runtime_api.h"
#ifdef __cplusplus
extern "C" {
#endif
#define CUBLAS_VER_MAJOR 13
typedef struct td_emu_blas *cublasHandle_t;
typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1,
               CUBLAS_STATUS_ALLOC_FAILED = 3, CUBLAS_STATUS_INVALID_VALUE = 7 } cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType;
typedef enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
               CUBLAS_COMPUTE_64F = 70 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
cublasStatus_t cublasCreate_v2(cublasHandle_t *h);
cublasStatus_t cublasDestroy_v2(cublasHandle_t h);
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta,
    cublasOperation_t tb, int m, int n, int k, const void *alpha, const void *A,
    cudaDataType at, int lda, long long sa, const void *B, cudaDataType bt, int ldb,
    long long sb, const void *beta, void *C, cudaDataType ct, int ldc, long long sc,
    int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo);
const char *cublasGetStatusString(cublasStatus_t s);
#ifdef __cplusplus
}
#endif
#endif
