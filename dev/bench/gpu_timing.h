// gpu_timing.h — the one timing rule of the GPU micro-benchmarks (bench_attention.cu, bench_layer.cu): run a
// piece of GPU work 13 times on a stream, CUDA events around each, and take the median of the last 10 (the
// first 3 warm up caches, cuBLAS heuristics and clocks). Host-side only; it checks nothing.
#pragma once
#include <algorithm>
#include <vector>
#include "llmc/cuda_common.h"

template <typename F>
static double median_ms(F fn, cudaStream_t s) {
    cudaEvent_t a, b;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    std::vector<float> ms;
    for (int i = 0; i < 13; i++) {
        cudaCheck(cudaEventRecord(a, s));
        fn();
        cudaCheck(cudaEventRecord(b, s));
        cudaCheck(cudaEventSynchronize(b));
        float t = 0;
        cudaCheck(cudaEventElapsedTime(&t, a, b));
        if (i >= 3) ms.push_back(t);
    }
    cudaCheck(cudaEventDestroy(a));
    cudaCheck(cudaEventDestroy(b));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}
