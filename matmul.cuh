// matmul.cuh — every matrix multiply of the trainer, as cuBLAS calls: bf16 inputs, fp32 accumulation, one
// handle bound to the compute stream with a workspace the trainer allocates (so its GPU bytes are all
// counted). No kernels and no training logic. test/test_matmul.cpp runs these very wrappers on the CPU
// against an emulation of cuBLAS (test/fake_cuda), so their transposes and leading dimensions are checked
// in CI; on a GPU test_kernels.cu checks them against the real cuBLAS.
#pragma once
#include "cuda_common.h"

// Matrix multiplies: cuBLAS, bf16 inputs, fp32 accumulation. Our matrices are row-major; cuBLAS is
// column-major, so each call computes the transposed product (C^T = B^T A^T) and no data is moved.

static cublasHandle_t cublas_handle;
static cudaStream_t cublas_stream;       // the stream cublas_handle is bound to
static void* cublas_workspace;           // our own workspace, so the trainer's GPU bytes are all counted
static const size_t kCublasWorkspaceBytes = 32u << 20;

// Binds cuBLAS to stream s (once: every GEMM runs on the compute stream). cublasSetStream resets the
// workspace to cuBLAS's own pool, so ours is set again right after it.
static void cublas_use_stream(cudaStream_t s) {
    if (s == cublas_stream) return;
    cublasCheck(cublasSetStream(cublas_handle, s));
    cublasCheck(cublasSetWorkspace(cublas_handle, cublas_workspace, kCublasWorkspaceBytes));
    cublas_stream = s;
}

// out (N, OC) = inp (N, C) @ w (OC, C)^T          [bias added separately]
static void matmul_forward(bf16* out, const bf16* inp, const bf16* w, int64_t N, int C, int OC, cudaStream_t s) {
    const float one = 1.0f, zero = 0.0f;
    cublas_use_stream(s);
    cublasCheck(cublasGemmEx(cublas_handle, CUBLAS_OP_T, CUBLAS_OP_N, OC, (int)N, C, &one, w, CUDA_R_16BF, C, inp,
                             CUDA_R_16BF, C, &zero, out, CUDA_R_16BF, OC, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
// dinp (N, C) = dout (N, OC) @ w (OC, C)
static void matmul_backward_input(bf16* dinp, const bf16* dout, const bf16* w, int64_t N, int C, int OC, cudaStream_t s) {
    const float one = 1.0f, zero = 0.0f;
    cublas_use_stream(s);
    cublasCheck(cublasGemmEx(cublas_handle, CUBLAS_OP_N, CUBLAS_OP_N, C, (int)N, OC, &one, w, CUDA_R_16BF, C, dout,
                             CUDA_R_16BF, OC, &zero, dinp, CUDA_R_16BF, C, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
// dw (OC, C) += dout (N, OC)^T @ inp (N, C), accumulated in fp32 across micro-batches
static void matmul_backward_weight(float* dw, const bf16* dout, const bf16* inp, int64_t N, int C, int OC, cudaStream_t s) {
    const float one = 1.0f;
    cublas_use_stream(s);
    cublasCheck(cublasGemmEx(cublas_handle, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, (int)N, &one, inp, CUDA_R_16BF, C, dout,
                             CUDA_R_16BF, OC, &one, dw, CUDA_R_32F, C, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
// A batched GEMM, all bf16 (batch i uses A + i*strideA, B + i*strideB, C + i*strideC).
static void matmul_batched(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                           const bf16* A, int lda, int64_t strideA, const bf16* B, int ldb, int64_t strideB,
                           bf16* Cm, int ldc, int64_t strideC, int batch, cudaStream_t s) {
    const float zero = 0.0f;
    cublas_use_stream(s);
    cublasCheck(cublasGemmStridedBatchedEx(cublas_handle, ta, tb, m, n, k, &alpha, A, CUDA_R_16BF, lda, strideA, B,
                                           CUDA_R_16BF, ldb, strideB, &zero, Cm, CUDA_R_16BF, ldc, strideC, batch,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
