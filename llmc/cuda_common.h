// cuda_common.h — CUDA / cuBLAS error checks, bf16, launch helpers.
// Not here: kernels (kernels.cuh), streaming (stream.cu).
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "utils.h"  // die

// GPU activations and weights; reductions accumulate in fp32.
typedef __nv_bfloat16 bf16;

// A failed CUDA call dies: where and why.
static inline void cuda_check(cudaError_t err, const char* file, int line) {
    if (err != cudaSuccess) die("CUDA: %s at %s:%d", cudaGetErrorString(err), file, line);
}
#define cudaCheck(err) (cuda_check((err), __FILE__, __LINE__))

static inline void cublas_check(cublasStatus_t status, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS)
        die("cuBLAS: %s (%d) at %s:%d", cublasGetStatusString(status), (int)status, file, line);
}
#define cublasCheck(status) (cublas_check((status), __FILE__, __LINE__))

// Test hooks, empty here: test/fake_cuda checks host accesses, hand-overs.
#ifndef FAKE_CUDA_HOST_ACCESS
#define FAKE_CUDA_HOST_ACCESS(p, bytes, write, what) ((void)0)
#define FAKE_CUDA_HOST_RELEASE(obj)                  ((void)0)
#define FAKE_CUDA_HOST_ACQUIRE(obj)                  ((void)0)
#endif

// Launches return no status: check right after.
#define cudaCheckLaunch() cudaCheck(cudaGetLastError())

static inline int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Grid-stride blocks for n, capped at 132 SMs (H100 SXM) x 16.
#ifndef GRID_FOR_CAP
#define GRID_FOR_CAP (132 * 16)
#endif
static inline unsigned grid_for(int64_t n, int block) {
    int64_t blocks = ceil_div64(n, block);
    const int64_t cap = GRID_FOR_CAP;
    return (unsigned)(blocks < cap ? (blocks > 0 ? blocks : 1) : cap);
}
