// bench_layer.cu — where one transformer layer's time goes, on the GPU: every stage of layer_forward and
// layer_backward (train_gpt.cu) timed alone with CUDA events (median of 10 after 3 warm-ups), with its
// TFLOP/s (GEMMs, attention) or GB/s (the memory-bound kernels: bytes each must move at least), then the real
// layer_forward / layer_backward whole. The stages below restate those two functions' calls in order; the
// "whole" rows time the functions themselves, so a stage list that drifted from them shows as a sum that
// does not match; layer_backward alone is what a layer with kept activations (-K) costs in the backward pass.
// Default shapes: one micro-batch (B 8, T 1024) of the 1.3B and 5B benchmark models, then bench_paths: the
// memory-bound kernels' two paths at 1.3B's and Llama 3 8B's widths. Last lines: one `RESULT {json}` per
// shape. Not a test: it checks no numerics (make test does).
//
// usage: build/bench_layer [-F 0|1] [-G 0|1] [B T C NH]...   (-F: fused attention, -G: cuBLASLt epilogues)
#define TESTING
#include "train_gpt.cu"
#include "gpu_timing.h"  // median_ms
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

struct Stage {
    std::string name;
    double ms;
    double flop;
    double bytes;
};

static void bench_shape(int B, int T, int C, int NH) {
    GPTConfig cfg;
    cfg.num_layers = 1;
    cfg.channels = C;
    cfg.num_heads = NH;
    cfg.max_seq_len = T;
    cfg.vocab_size = 50257;
    cfg.padded_vocab_size = (int)round_up64(cfg.vocab_size, 128);
    TrainArgs args;
    train_args_defaults(&args);
    GPT g;
    gpt_build(&g, &cfg, B, T, 1, 2, 0, 0, &args);
    LayerActs* a = &g.acts;
    const cudaStream_t s = g.stream.compute;
    const ParamLayout* p = &g.layout;
    const int64_t N = (int64_t)B * T, hs = C / NH;
    // weights ~ U(-0.02, 0.02) (LayerNorm gains 1), input and output gradient ~ U(-1, 1): realistic
    // magnitudes
    std::vector<uint16_t> host((size_t)std::max<int64_t>(p->layer_stride, N * C));
    uint64_t rng = 12345;
    for (int64_t i = 0; i < p->layer_stride; i++)
        host[(size_t)i] = float_to_bf16(0.04f * random_f32(&rng) - 0.02f);
    for (int t : {LN1W, LN2W})
        for (int64_t i = 0; i < p->layer_size[t]; i++)
            host[(size_t)(p->layer_offset[t] + i)] = float_to_bf16(1.0f);
    bf16 *w, *x, *out, *dres;
    cudaCheck(cudaMalloc(&w, (size_t)p->layer_stride * 2));
    cudaCheck(cudaMemcpy(w, host.data(), (size_t)p->layer_stride * 2, cudaMemcpyHostToDevice));
    for (int64_t i = 0; i < N * C; i++) host[(size_t)i] = float_to_bf16(2.0f * random_f32(&rng) - 1.0f);
    cudaCheck(cudaMalloc(&x, (size_t)(N * C) * 2));
    cudaCheck(cudaMalloc(&out, (size_t)(N * C) * 2));
    cudaCheck(cudaMalloc(&dres, (size_t)(N * C) * 2));
    cudaCheck(cudaMemcpy(x, host.data(), (size_t)(N * C) * 2, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dres, host.data(), (size_t)(N * C) * 2, cudaMemcpyHostToDevice));
    // a pageable cudaMemcpy may return before its data lands, and the non-blocking stream s does not wait for
    // the legacy stream it runs on: wait here, before the first kernel on s reads w, x or dres
    cudaCheck(cudaDeviceSynchronize());
    float* grads = g.layer_grads;
    auto W = [&](int t) { return (const bf16*)w + p->layer_offset[t]; };
    auto G = [&](int t) { return grads + p->layer_offset[t]; };
    layer_forward(&g, w, x, out, a, NULL, s);  // fills the workspace the backward stages read
    cudaCheck(cudaStreamSynchronize(s));

    const double gemm = 2.0 * N * C;  // x OC: one GEMM's FLOPs per output column
    const double attn_fwd = 4.0 * B * NH * (double)T * T * hs / 2,
                 act = 2.0 * N * C;  // causal; bytes of (N, C) bf16
    std::vector<Stage> st;
    auto stage = [&](const char* name, double flop, double bytes, std::function<void()> fn) {
        st.push_back({name, median_ms(fn, s), flop, bytes});
    };
    stage("fwd ln1", 0, 2 * act,
          [&] { layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, W(LN1W), W(LN1B), N, C, s); });
    stage("fwd qkv (+bias)", gemm * 3 * C, 0,
          [&] { matmul_forward_bias(a->qkv, a->ln1, W(QKVW), W(QKVB), NULL, N, C, 3 * C, s); });
    stage(g.flash ? "fwd attention (fused)" : "fwd attention (cuBLAS)", attn_fwd, 0, [&] {
        if (g.flash) flash_attention_forward(a->atty, a->att_lse, a->qkv, B, T, C, NH, s);
        else attention_forward(a->atty, a->att, a->qkv, B, T, C, NH, s);
    });
    stage("fwd attproj (+bias+res)", gemm * C, 0,
          [&] { matmul_forward_bias(a->residual2, a->atty, W(ATTPROJW), W(ATTPROJB), x, N, C, C, s); });
    stage("fwd ln2", 0, 2 * act, [&] {
        layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->residual2, W(LN2W), W(LN2B), N, C, s);
    });
    stage("fwd fc (+bias+gelu)", gemm * 4 * C, 0,
          [&] { matmul_forward_bias_gelu(a->fch, a->fch_gelu, a->ln2, W(FCW), W(FCB), N, C, 4 * C, s); });
    stage("fwd fcproj (+bias+res)", gemm * C * 4, 0, [&] {
        matmul_forward_bias(out, a->fch_gelu, W(FCPROJW), W(FCPROJB), a->residual2, N, 4 * C, C, s);
    });
    const size_t n_forward = st.size();
    stage("bwd fcproj dW", gemm * 4 * C, 0,
          [&] { matmul_backward_weight(G(FCPROJW), dres, a->fch_gelu, N, 4 * C, C, s); });
    stage("bwd fcproj db", 0, act, [&] { bias_backward(G(FCPROJB), dres, N, C, s); });
    stage("bwd fcproj dX (+gelu')", gemm * 4 * C, 0,
          [&] { matmul_backward_input_gelu(a->dfch, dres, W(FCPROJW), a->fch, N, 4 * C, C, s); });
    stage("bwd fc dW", gemm * 4 * C, 0,
          [&] { matmul_backward_weight(G(FCW), a->dfch, a->ln2, N, C, 4 * C, s); });
    stage("bwd fc db", 0, 4 * act, [&] { bias_backward(G(FCB), a->dfch, N, 4 * C, s); });
    stage("bwd fc dX", gemm * 4 * C, 0,
          [&] { matmul_backward_input(a->dln, a->dfch, W(FCW), N, C, 4 * C, s); });
    stage("bwd ln2", 0, 5 * act, [&] {
        layernorm_backward(dres, G(LN2W), G(LN2B), a->dln, a->residual2, W(LN2W), a->ln2_mean, a->ln2_rstd, N,
                           C, s);
    });
    stage("bwd attproj dW", gemm * C, 0,
          [&] { matmul_backward_weight(G(ATTPROJW), dres, a->atty, N, C, C, s); });
    stage("bwd attproj db", 0, act, [&] { bias_backward(G(ATTPROJB), dres, N, C, s); });
    stage("bwd attproj dX", gemm * C, 0,
          [&] { matmul_backward_input(a->dln, dres, W(ATTPROJW), N, C, C, s); });
    stage(g.flash ? "bwd attention (fused)" : "bwd attention (cuBLAS)", 2.5 * attn_fwd, 0, [&] {
        if (g.flash)
            flash_attention_backward(a->dqkv, a->att_dsum, a->dln, a->atty, a->qkv, a->att_lse, B, T, C, NH,
                                     s);
        else attention_backward(a->dqkv, a->datt, a->dln, a->att, a->qkv, B, T, C, NH, s);
    });
    stage("bwd qkv dW", gemm * 3 * C, 0,
          [&] { matmul_backward_weight(G(QKVW), a->dqkv, a->ln1, N, C, 3 * C, s); });
    stage("bwd qkv db", 0, 3 * act, [&] { bias_backward(G(QKVB), a->dqkv, N, 3 * C, s); });
    stage("bwd qkv dX", gemm * 3 * C, 0,
          [&] { matmul_backward_input(a->dln, a->dqkv, W(QKVW), N, C, 3 * C, s); });
    stage("bwd ln1", 0, 5 * act, [&] {
        layernorm_backward(dres, G(LN1W), G(LN1B), a->dln, x, W(LN1W), a->ln1_mean, a->ln1_rstd, N, C, s);
    });
    const double whole_fwd = median_ms([&] { layer_forward(&g, w, x, out, a, NULL, s); }, s);
    const double whole_bwd = median_ms(
        [&] {
            layer_forward(&g, w, x, NULL, a, NULL, s);
            layer_backward(&g, w, grads, x, dres, a, NULL, s);
        },
        s);
    const double kept_bwd =
        median_ms([&] { layer_backward(&g, w, grads, x, dres, a, NULL, s); }, s);  // -K: no recompute

    printf("B=%d T=%d C=%d NH=%d: attention %s, GEMM epilogues %s\n", B, T, C, NH,
           g.flash ? "fused" : "cuBLAS", cublaslt_fusion ? "cuBLASLt" : "separate kernels");
    double sum_fwd = 0, sum_bwd = 0, flop_fwd = 0, flop_bwd = 0;
    for (size_t i = 0; i < st.size(); i++) {
        const Stage& x_ = st[i];
        (i < n_forward ? sum_fwd : sum_bwd) += x_.ms;
        (i < n_forward ? flop_fwd : flop_bwd) += x_.flop;
        if (x_.flop > 0)
            printf("  %-26s %8.3f ms  %7.1f TFLOP/s\n", x_.name.c_str(), x_.ms, x_.flop / x_.ms / 1e9);
        else
            printf("  %-26s %8.3f ms  %7.0f GB/s (at least %.0f MB)\n", x_.name.c_str(), x_.ms,
                   x_.bytes / x_.ms / 1e6, x_.bytes / 1e6);
    }
    printf("  %-26s %8.3f ms  (stages sum %.3f)  %6.1f TFLOP/s\n", "layer_forward, whole", whole_fwd, sum_fwd,
           flop_fwd / whole_fwd / 1e9);
    printf("  %-26s %8.3f ms  (stages sum %.3f + forward)  %6.1f TFLOP/s with the recompute\n",
           "recompute + layer_backward", whole_bwd, sum_bwd, (flop_fwd + flop_bwd) / whole_bwd / 1e9);
    printf("  %-26s %8.3f ms  (a layer with kept activations, -K: %.0f%% of the above)  %6.1f TFLOP/s\n",
           "layer_backward alone", kept_bwd, 100 * kept_bwd / whole_bwd, flop_bwd / kept_bwd / 1e9);
    printf(
        "RESULT {\"bench\": \"layer\", \"B\": %d, \"T\": %d, \"C\": %d, \"NH\": %d, \"flash\": %d, "
        "\"epilogues\": %d, "
        "\"fwd_ms\": %.4f, \"recompute_bwd_ms\": %.4f, \"bwd_ms\": %.4f, \"fwd_TFLOPs\": %.2f, "
        "\"recompute_bwd_TFLOPs\": %.2f, \"bwd_TFLOPs\": %.2f}\n",
        B, T, C, NH, (int)g.flash, cublaslt_fusion, whole_fwd, whole_bwd, kept_bwd,
        flop_fwd / whole_fwd / 1e9, (flop_fwd + flop_bwd) / whole_bwd / 1e9, flop_bwd / kept_bwd / 1e9);
    for (void* ptr : {(void*)w, (void*)x, (void*)out, (void*)dres}) cudaCheck(cudaFree(ptr));
    gpt_free(&g);
}

// The memory-bound kernels whose launchers choose between two paths (issue 40 item 5: "each change measured
// before and after; keep what pays"): the launcher's path (one fused kernel, or Pack8s) against the other
// (the two kernels, or element-wise), on the same data. GB/s counts the bytes each must move at least.
static void bench_paths(int64_t N, int C, int NH, int NKV, int hd) {
    const int64_t qkv_w = (int64_t)(NH + 2 * NKV) * hd, big = std::max<int64_t>(N * 4 * C, N * qkv_w);
    std::vector<uint16_t> host((size_t)big);
    uint64_t rng = 777;
    for (uint16_t& h : host) h = float_to_bf16(2.0f * random_f32(&rng) - 1.0f);
    std::vector<float> ones((size_t)std::max<int64_t>(N, 4 * C), 1.0f);
    bf16 *x, *dy, *dx, *w;
    float *mean, *rstd, *dw, *db, *inv_freq;
    for (bf16** b : {&x, &dy, &dx}) {
        cudaCheck(cudaMalloc(b, (size_t)big * 2));
        cudaCheck(cudaMemcpy(*b, host.data(), (size_t)big * 2, cudaMemcpyHostToDevice));
    }
    cudaCheck(cudaMalloc(&w, (size_t)C * 2));
    cudaCheck(cudaMemcpy(w, host.data(), (size_t)C * 2, cudaMemcpyHostToDevice));
    for (float** f : {&mean, &rstd, &dw, &db}) {
        cudaCheck(cudaMalloc(f, ones.size() * sizeof(float)));
        cudaCheck(cudaMemcpy(*f, ones.data(), ones.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
    cudaCheck(cudaMalloc(&inv_freq, (size_t)hd / 2 * sizeof(float)));
    cudaCheck(cudaMemcpy(inv_freq, ones.data(), (size_t)hd / 2 * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaDeviceSynchronize());
    cudaStream_t s;
    cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int T = 2048;
    // the other path as before the fused kernel: a warp a row (N / 8 blocks of 8 warps), then the column sums
    const unsigned grid8 = (unsigned)ceil_div64(N, 8);
    const dim3 grid_cols((unsigned)ceil_div64(C, WARP), row_tiles_grid(N));
    struct Row {
        const char* name;
        double ms, other_ms, bytes;
        const char* key;  // RESULT's "<key>_x": the other path's time over the launcher's
    };
    const double act = 2.0 * N * C;
    std::vector<Row> r;
    r.push_back({"layernorm backward",
                 median_ms([&] { layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, N, C, s); }, s),
                 median_ms(
                     [&] {
                         layernorm_backward_kernel8<<<grid8, 256, 0, s>>>(dx, dw, db, dy, x, w, mean, rstd, N,
                                                                          C, false);
                         layernorm_backward_params_kernel<<<grid_cols, dim3(WARP, 8), 0, s>>>(
                             dw, db, dy, x, mean, rstd, N, C);
                     },
                     s),
                 4 * act, "layernorm_bwd"});
    r.push_back({"rmsnorm backward", median_ms([&] { rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C, s); }, s),
                 median_ms(
                     [&] {
                         rmsnorm_backward_kernel8<<<grid8, 256, 0, s>>>(dx, dw, dy, x, w, rstd, N, C, false);
                         rmsnorm_backward_weight_kernel<<<grid_cols, dim3(WARP, 8), 0, s>>>(dw, dy, x, rstd,
                                                                                            N, C);
                     },
                     s),
                 4 * act, "rmsnorm_bwd"});
    r.push_back({"rope forward", median_ms([&] { rope_forward(x, inv_freq, N, T, NH, NKV, hd, s); }, s),
                 median_ms(
                     [&] {
                         rope_rotate_kernel<<<grid_for(N * (hd / 2), 256), 256, 0, s>>>(x, inv_freq, N, T, NH,
                                                                                        NKV, hd, 1.0f, NULL);
                     },
                     s),
                 4.0 * N * (NH + NKV) * hd, "rope_fwd"});
    for (int oc : {C, 4 * C}) {  // the attention and MLP projections' biases; the MLP's 4C
        const dim3 grid_bias((unsigned)ceil_div64(oc, WARP), row_tiles_grid(N));
        r.push_back(
            {oc == C ? "bias backward (C)" : "bias backward (4C)",
             median_ms([&] { bias_backward(db, dy, N, oc, s); }, s),
             median_ms([&] { bias_backward_kernel<<<grid_bias, dim3(WARP, 8), 0, s>>>(db, dy, N, oc); }, s),
             (double)N * oc * 2, oc == C ? "bias_c_bwd" : "bias_bwd"});
    }
    // the fused norm backward's grid (NORM_BLOCKS caps it): more blocks, more rows in flight; fewer, fewer
    // global atomics (one a column a block)
    int best_grid = 0;
    double best_ms = 1e30;
    std::string grids;
    for (unsigned gb : {132u, 264u, 528u, 1056u, 2112u}) {
        const double ms = median_ms(
            [&] { rmsnorm_backward_kernel8<<<gb, 256, 0, s>>>(dx, dw, dy, x, w, rstd, N, C, true); }, s);
        char one[48];
        snprintf(one, sizeof one, " %u: %.3f ms", gb, ms);
        grids += one;
        if (ms < best_ms) best_ms = ms, best_grid = (int)gb;
    }
    cudaCheckLaunch();
    printf("N=%lld C=%d NH=%d NKV=%d hd=%d: each launcher's path against the other\n", (long long)N, C, NH,
           NKV, hd);
    std::string result = "RESULT {\"bench\": \"paths\", \"C\": " + std::to_string(C);
    for (const Row& x_ : r) {
        printf("  %-20s %8.3f ms %6.0f GB/s   other path %8.3f ms %6.0f GB/s   x%.2f\n", x_.name, x_.ms,
               x_.bytes / x_.ms / 1e6, x_.other_ms, x_.bytes / x_.other_ms / 1e6, x_.other_ms / x_.ms);
        char ratio[32];
        snprintf(ratio, sizeof ratio, "%.2f", x_.other_ms / x_.ms);
        result += ", \"" + std::string(x_.key) + "_x\": " + ratio;
    }
    printf("  fused rmsnorm backward by grid (NORM_BLOCKS %d):%s\n", NORM_BLOCKS, grids.c_str());
    printf("%s, \"norm_best_grid\": %d}\n", result.c_str(), best_grid);
    for (void* ptr : {(void*)x, (void*)dy, (void*)dx, (void*)w, (void*)mean, (void*)rstd, (void*)dw,
                      (void*)db, (void*)inv_freq})
        cudaCheck(cudaFree(ptr));
    cudaCheck(cudaStreamDestroy(s));
}

int main(int argc, char** argv) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        fprintf(stderr, "error: no CUDA device\n");
        return 1;
    }
    int i = 1;
    for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
        if (strcmp(argv[i], "-F") == 0) flash_attention_flag = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "-G") == 0) cublaslt_fusion = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [-F 0|1] [-G 0|1] [B T C NH]...\n", argv[0]);
            return 1;
        }
    }
    if ((argc - i) % 4 != 0) {
        fprintf(stderr, "usage: %s [-F 0|1] [-G 0|1] [B T C NH]...\n", argv[0]);
        return 1;
    }
    if (i == argc) {
        bench_shape(8, 1024, 2048, 16);            // 1.3B: one micro-batch of the benchmark
        bench_shape(8, 1024, 4096, 32);            // 5B
        bench_paths(8 * 1024, 2048, 16, 16, 128);  // 1.3B's width (GPT-2: no RoPE, but the same moves)
        bench_paths(8 * 1024, 4096, 32, 8, 128);   // Llama 3 8B's
    }
    for (; i + 3 < argc; i += 4)
        bench_shape(atoi(argv[i]), atoi(argv[i + 1]), atoi(argv[i + 2]), atoi(argv[i + 3]));
    return 0;
}
