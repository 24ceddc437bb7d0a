// bench_attention.cu — the three attention paths of train_gpt.cu at the benchmark's shapes, on the GPU:
// cuDNN's SDPA (cudnn_att.cpp, set up as the trainer does: attention_path_select, with its support check and
// self-check), our fused kernels (flash_attention.cuh; fused: tiles by cp.async, fused_sync: by plain loads,
// the same bits) and the cuBLAS GEMMs + softmax (attention.cuh), each launched through attention_path.cuh's
// attention_forward_path / _backward_path. For each shape it checks that cuDNN and cuBLAS give the fused
// path's y and dqkv (rel-L2 over every element, at the real T, beyond the unit tests' small T) and times
// forward and backward (median of 10 after 3 warm-ups, CUDA events). Causal attention FLOPs are counted as 4
// * B * NH * T * T * hs / 2 forward and 2.5x that backward (the work a fused kernel must do; the cuBLAS path
// computes the full T x T and is charged the same, so the TFLOP/s compare like with like; grouped-query heads
// do the same FLOPs as NH full heads). One `RESULT {json}` line per shape and path as soon as the shape is
// done (gpu_window.sh's micro_attention reads them beside bench_sdpa.py's, also from a run its timeout cut
// short), and at the end a table of them all. Not a test: it asserts nothing (make test does); a path that
// cannot run a shape says why and is left out.
//
// usage: build/bench_attention [B T C NH NKV]...
//   default: the 1.3B (C 2048, 16 heads), 5B (C 4096, 32 heads) and Llama-3 8B (C 4096, 32 query heads, 8
//   key/value heads) shapes at T 1024 (the trainer's benchmark runs), then 2048, then 4096; B = 8192 / T (a
//   micro-batch of 8K tokens)
//   env: LLMC_NO_CUDNN=1 leaves cuDNN out (as attention_path_select), LLMC_CUDNN_LIB the library to load
#define TESTING
#include "train_gpt.cu"
#include "gpu_timing.h"  // median_ms
#include <algorithm>
#include <string>
#include <vector>

// uniform in [-scale, scale): a counter-based draw per element, so the fill runs on every core
static std::vector<uint16_t> random_bf16(int64_t n, float scale, uint64_t seed) {
    std::vector<uint16_t> v((size_t)n);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float u = (float)(splitmix64(seed * 0x9E3779B97F4A7C15ull + (uint64_t)i) >> 40) / 16777216.0f;
        v[(size_t)i] = float_to_bf16(scale * (2.0f * u - 1.0f));
    }
    return v;
}
static std::vector<float> download_bf16(const bf16* d, int64_t n) {
    std::vector<uint16_t> raw((size_t)n);
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(raw.data(), d, (size_t)n * 2, cudaMemcpyDeviceToHost));
    std::vector<float> out((size_t)n);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) out[(size_t)i] = bf16_to_float(raw[(size_t)i]);
    return out;
}
static double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
    double num = 0, den = 0;
    const int64_t n = (int64_t)a.size();
#pragma omp parallel for reduction(+ : num, den) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const double d = (double)a[(size_t)i] - ref[(size_t)i];
        num += d * d;
        den += (double)ref[(size_t)i] * ref[(size_t)i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

struct Row {
    std::string shape, path;
    int B, T, C, NH, NKV;
    double fwd, bwd, fwd_tf, bwd_tf, ey, edqkv;  // ms, TFLOP/s, rel-L2 against the fused path (-1: none)
};
static std::vector<Row> rows;

static void bench_shape(int B, int T, int C, int NH, int NKV) {
    const int hs = C / NH, QD = C;
    const int64_t N = (int64_t)B * T, att = (int64_t)B * NH * T * T, ld = (int64_t)(NH + 2 * NKV) * hs;
    char shape[64];
    snprintf(shape, sizeof shape, "C%d NH%d KV%d T%d", C, NH, NKV, T);
    printf("B=%d T=%d C=%d NH=%d NKV=%d (hs %d)\n", B, T, C, NH, NKV, hs);
    if (C % NH || NKV < 1 || NH % NKV) {
        printf("  C %% NH or NH %% NKV is not 0: skipped\n");
        return;
    }
    // the paths that run here: cuDNN as the trainer sets it up (its version, support for this shape, the
    // self-check against our kernel), fused where the head size is built, cuBLAS always
    attention_path_select(ATTN_CUDNN, B, T, NH, NKV, hs, false);
    const bool cudnn = cudnn_attention_ready, fused = flash_attention_usable(hs);
    printf("  cuDNN: %s\n", cudnn_attention_note);
    if (!fused) printf("  fused: head size %d not built: cuDNN and cuBLAS compared with cuBLAS\n", hs);
    const int ref_path = fused ? ATTN_FUSED : ATTN_CUBLAS;
    struct Variant {
        int path;
        bool async;  // the fused kernels' tiles by cp.async (fused) or plain loads (fused_sync)
        const char* name;
    };
    std::vector<Variant> paths;
    if (cudnn) paths.push_back({ATTN_CUDNN, true, "cudnn"});
    if (fused)
        paths.push_back({ATTN_FUSED, true, "fused"}), paths.push_back({ATTN_FUSED, false, "fused_sync"});
    paths.push_back({ATTN_CUBLAS, true, "cublas"});

    bf16 *qkv, *y, *dy, *dqkv, *scores, *dscores;
    float *lse, *dsum;
    cudaCheck(cudaMalloc(&qkv, (size_t)(N * ld) * 2));
    cudaCheck(cudaMalloc(&y, (size_t)(N * QD) * 2));
    cudaCheck(cudaMalloc(&dy, (size_t)(N * QD) * 2));
    cudaCheck(cudaMalloc(&dqkv, (size_t)(N * ld) * 2));
    cudaCheck(cudaMalloc(&scores, (size_t)att * 2));
    cudaCheck(cudaMalloc(&dscores, (size_t)att * 2));
    cudaCheck(cudaMalloc(&lse, (size_t)N * NH * 4));
    cudaCheck(cudaMalloc(&dsum, (size_t)N * NH * 4));
    // q, k uniform in [-1, 1]: scores q.k / sqrt(hs) of std ~1/3, a softmax neither flat nor one-hot
    auto h_qkv = random_bf16(N * ld, 1.0f, 1), h_dy = random_bf16(N * QD, 1.0f, 2);
    cudaCheck(cudaMemcpy(qkv, h_qkv.data(), h_qkv.size() * 2, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dy, h_dy.data(), h_dy.size() * 2, cudaMemcpyHostToDevice));
    // a pageable cudaMemcpy may return before its data lands, and the non-blocking stream below does not wait
    // for the legacy stream it runs on: wait here, before the first kernel reads qkv or dy
    cudaCheck(cudaDeviceSynchronize());
    cudaStream_t s;
    cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cublas_use_stream(s);
    auto forward = [&](int p) {
        attention_forward_path(p, y, lse, scores, qkv, B, T, NH, NKV, hs, NULL, NULL, s);
    };
    auto backward = [&](int p) {
        attention_backward_path(p, dqkv, dsum, dscores, dy, y, scores, qkv, lse, B, T, NH, NKV, hs, NULL,
                                NULL, s);
    };

    // agreement at this shape: every path's y and dqkv against the reference path's (y rewritten by each
    // path's forward before its backward reads it)
    const bool async_default = flash_attention_async;
    flash_attention_async = true;  // the reference: fused by cp.async
    forward(ref_path);
    backward(ref_path);
    const std::vector<float> y_ref = download_bf16(y, N * QD), dqkv_ref = download_bf16(dqkv, N * ld);
    const double fwd_flop = 4.0 * B * NH * (double)T * T * hs / 2, bwd_flop = 2.5 * fwd_flop;
    for (const Variant& v : paths) {
        const int p = v.path;
        flash_attention_async = v.async;
        double ey = -1, edqkv = -1;
        if (p != ref_path || !v.async) {
            cudaCheck(
                cudaMemsetAsync(dqkv, 0xFF, (size_t)(N * ld) * 2, s));  // NaN: an unwritten gradient shows
            forward(p);
            backward(p);
            ey = rel_l2(download_bf16(y, N * QD), y_ref);
            edqkv = rel_l2(download_bf16(dqkv, N * ld), dqkv_ref);
            printf("  %s vs %s: y rel-L2 %.2e, dqkv rel-L2 %.2e\n", v.name, attention_path_name(ref_path), ey,
                   edqkv);
        }
        forward(p);  // the backward below reads this path's y and statistics
        const double f = median_ms([&] { forward(p); }, s);
        const double b = median_ms([&] { backward(p); }, s);
        if (p == ATTN_FUSED) {  // where the fused backward's time goes: its three kernels apart
            double part[3];
            for (int i = 0; i < 3; i++)
                part[i] = median_ms(
                    [&] {
                        flash_attention_backward(dqkv, dsum, dy, y, qkv, lse, B, T, C, NH, s, NKV, NULL,
                                                 1 << i);
                    },
                    s);
            printf("  %-10s backward's kernels: dsum %.3f ms, dq %.3f ms, dk/dv %.3f ms\n", v.name, part[0],
                   part[1], part[2]);
            printf(
                "RESULT {\"bench\": \"attention_parts\", \"path\": \"%s\", \"B\": %d, \"T\": %d, \"C\": %d, "
                "\"NH\": %d, \"NKV\": %d, \"dsum_ms\": %.4f, \"dq_ms\": %.4f, \"dkdv_ms\": %.4f}\n",
                v.name, B, T, C, NH, NKV, part[0], part[1], part[2]);
        }
        const char* name = v.name;
        printf("  %-10s forward %8.3f ms (%6.1f TFLOP/s)  backward %8.3f ms (%6.1f TFLOP/s)\n", name, f,
               fwd_flop / f / 1e9, b, bwd_flop / b / 1e9);
        rows.push_back(
            {shape, name, B, T, C, NH, NKV, f, b, fwd_flop / f / 1e9, bwd_flop / b / 1e9, ey, edqkv});
    }
    flash_attention_async = async_default;
    for (size_t i = rows.size() - paths.size(); i < rows.size(); i++) {
        const Row& r = rows[i];
        char e1[16] = "null", e2[16] = "null";
        if (r.ey >= 0) snprintf(e1, sizeof e1, "%.3e", r.ey), snprintf(e2, sizeof e2, "%.3e", r.edqkv);
        printf(
            "RESULT {\"bench\": \"attention\", \"path\": \"%s\", \"B\": %d, \"T\": %d, \"C\": %d, \"NH\": "
            "%d, "
            "\"NKV\": %d, \"fwd_ms\": %.4f, \"bwd_ms\": %.4f, \"fwd_TFLOPs\": %.2f, \"bwd_TFLOPs\": %.2f, "
            "\"y_rel_l2\": %s, \"dqkv_rel_l2\": %s}\n",
            r.path.c_str(), r.B, r.T, r.C, r.NH, r.NKV, r.fwd, r.bwd, r.fwd_tf, r.bwd_tf, e1, e2);
    }
    fflush(stdout);
    cudaCheck(cudaStreamDestroy(s));
    cublas_stream = NULL;  // the next shape binds its own stream
    cudnn_att_free_own_workspace();
    for (void* p : {(void*)qkv, (void*)y, (void*)dy, (void*)dqkv, (void*)scores, (void*)dscores, (void*)lse,
                    (void*)dsum})
        cudaCheck(cudaFree(p));
}

int main(int argc, char** argv) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        fprintf(stderr, "error: no CUDA device\n");
        return 1;
    }
    if ((argc - 1) % 5 != 0) {
        fprintf(stderr, "usage: %s [B T C NH NKV]...\n", argv[0]);
        return 1;
    }
    cublasCheck(cublasCreate(&cublas_handle));
    cudaCheck(cudaMalloc(&cublas_workspace, kCublasWorkspaceBytes));
    if (argc == 1) {
        const int models[3][3] = {{2048, 16, 16}, {4096, 32, 32}, {4096, 32, 8}};  // 1.3B, 5B, Llama-3 8B
        for (int T : {1024, 2048, 4096})
            for (const auto& m : models) bench_shape(8192 / T, T, m[0], m[1], m[2]);
    }
    for (int i = 1; i + 4 < argc; i += 5)
        bench_shape(atoi(argv[i]), atoi(argv[i + 1]), atoi(argv[i + 2]), atoi(argv[i + 3]),
                    atoi(argv[i + 4]));

    printf("\n| shape | B | path | fwd ms | fwd TFLOP/s | bwd ms | bwd TFLOP/s | y rel-L2 | dqkv rel-L2 |\n");
    printf("|---|---:|---|---:|---:|---:|---:|---:|---:|\n");
    for (const Row& r : rows) {
        char ey[16] = "ref", ed[16] = "ref";
        if (r.ey >= 0) snprintf(ey, sizeof ey, "%.2e", r.ey), snprintf(ed, sizeof ed, "%.2e", r.edqkv);
        printf("| %s | %d | %s | %.3f | %.1f | %.3f | %.1f | %s | %s |\n", r.shape.c_str(), r.B,
               r.path.c_str(), r.fwd, r.fwd_tf, r.bwd, r.bwd_tf, ey, ed);
    }
    return 0;
}
