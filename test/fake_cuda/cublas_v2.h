// test/fake_cuda/cublas_v2.h — the cuBLAS API the trainer uses, emulated on the CPU for host-only tests
// (test_matmul.cpp): cublasGemmEx / cublasGemmStridedBatchedEx compute what cuBLAS documents — column-major
// C = alpha * op(A) op(B) + beta * C per batch, bf16 or fp32 storage, double accumulation, round to nearest
// even into bf16 — and refuse what cuBLAS refuses (a size <= 0 here, a leading dimension smaller than its
// matrix's rows) with CUBLAS_STATUS_INVALID_VALUE, so a wrapper with swapped arguments fails in CI. A call is
// an operation on the handle's stream for cuda_runtime.h's ordering model (A, B read, C written); the
// workspace is accepted and ignored; nothing is timed. The computation is queued on the handle's stream and
// runs when the host synchronizes with it (cuda_runtime.h; at once in the host-only tests).
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <vector>
#include "cuda_runtime.h"
#include "cuda_bf16.h"

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
struct FakeCublas {
    cudaStream_t stream;
};
typedef FakeCublas* cublasHandle_t;

inline const char* cublasGetStatusString(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS         ? "success"
           : s == CUBLAS_STATUS_INVALID_VALUE ? "invalid value (fake cuBLAS)"
                                              : "not supported (fake cuBLAS)";
}
inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
    *h = new FakeCublas();
    (*h)->stream = NULL;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetWorkspace(cublasHandle_t, void*, size_t) { return CUBLAS_STATUS_SUCCESS; }

namespace fake_cublas {
inline double load(const void* p, cudaDataType t, int64_t i) {
    if (t == CUDA_R_32F) return ((const float*)p)[i];
    uint32_t u = (uint32_t)((const uint16_t*)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline void store(void* p, cudaDataType t, int64_t i, double v) {
    float f = (float)v;
    if (t == CUDA_R_32F) {
        ((float*)p)[i] = f;
        return;
    }
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest even (finite values only: enough for a test)
    ((uint16_t*)p)[i] = (uint16_t)(u >> 16);
}
}  // namespace fake_cublas

inline cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                                 int m, int n, int k, const void* alpha, const void* A,
                                                 cudaDataType Atype, int lda, long long strideA,
                                                 const void* B, cudaDataType Btype, int ldb,
                                                 long long strideB, const void* beta, void* C,
                                                 cudaDataType Ctype, int ldc, long long strideC, int batch,
                                                 cublasComputeType_t, cublasGemmAlgo_t) {
    if (h) {  // an operation on the handle's stream for the ordering model (cublasLtMatmul passes none)
        const FakeDeviceAccess acc[3] = {{A, false}, {B, false}, {C, true}};
        fake_cuda_device_op(h->stream, "a cuBLAS GEMM", acc, 3);
    }
    const int a_rows = ta == CUBLAS_OP_N ? m : k, b_rows = tb == CUBLAS_OP_N ? k : n;
    if (m <= 0 || n <= 0 || k <= 0 || batch <= 0 || lda < a_rows || ldb < b_rows || ldc < m)
        return CUBLAS_STATUS_INVALID_VALUE;
    const double al = *(const float*)alpha,
                 be = *(const float*)beta;  // host pointers: read at the call, as cuBLAS
    // With a handle the GEMM is queued on its stream (cuda_runtime.h runs it when the host synchronizes with
    // it); without one (cublasLtMatmul's queued work calling this) it runs now.
    auto run = [=] {
        FAKE_CUDA_DEVICE_ACCESS;
        // op(A) as m rows of k and op(B)^T as n rows of k, in float (exact for bf16): then every C element is
        // a contiguous dot product (the emulated GPU suites run thousands of these)
        std::vector<float> a((size_t)m * k), b((size_t)n * k);
        for (int bt = 0; bt < batch; bt++) {
            const int64_t oa = (int64_t)bt * strideA, ob = (int64_t)bt * strideB, oc = (int64_t)bt * strideC;
            for (int i = 0; i < m; i++)
                for (int l = 0; l < k; l++)
                    a[(size_t)i * k + l] = (float)fake_cublas::load(
                        A, Atype, oa + (ta == CUBLAS_OP_N ? i + (int64_t)l * lda : l + (int64_t)i * lda));
            for (int j = 0; j < n; j++)
                for (int l = 0; l < k; l++)
                    b[(size_t)j * k + l] = (float)fake_cublas::load(
                        B, Btype, ob + (tb == CUBLAS_OP_N ? l + (int64_t)j * ldb : j + (int64_t)l * ldb));
#pragma omp parallel for schedule(static)
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) {
                    const float* x = a.data() + (size_t)i * k;
                    const float* y = b.data() + (size_t)j * k;
                    // eight partial sums in a fixed order (products of floats are exact in double)
                    double acc8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                    int l = 0;
                    for (; l + 8 <= k; l += 8)
                        for (int q = 0; q < 8; q++) acc8[q] += (double)x[l + q] * y[l + q];
                    for (; l < k; l++) acc8[0] += (double)x[l] * y[l];
                    const double acc = ((acc8[0] + acc8[4]) + (acc8[1] + acc8[5])) +
                                       ((acc8[2] + acc8[6]) + (acc8[3] + acc8[7]));
                    const int64_t ci = oc + i + (int64_t)j * ldc;
                    fake_cublas::store(C, Ctype, ci,
                                       al * acc + (be != 0.0 ? be * fake_cublas::load(C, Ctype, ci) : 0.0));
                }
        }
    };
    if (h) fake_cuda::submit(h->stream, run);
    else run();
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                   int k, const void* alpha, const void* A, cudaDataType Atype, int lda,
                                   const void* B, cudaDataType Btype, int ldb, const void* beta, void* C,
                                   cudaDataType Ctype, int ldc, cublasComputeType_t ct,
                                   cublasGemmAlgo_t algo) {
    return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C,
                                      Ctype, ldc, 0, 1, ct, algo);
}
