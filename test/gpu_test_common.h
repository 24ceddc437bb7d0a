// gpu_test_common.h — what the GPU suites (test_gpu.cu, test_gpu_llama.cu, test_kernels.cu,
// test_llama_kernels.cu; gqa_reference.h) share. Top: the trainer compiled in, the no-GPU skip, the kernel
// suites' random inputs and device buffers, exact and bit differences, relative errors,
// `within`'s printed margins. Bottom: the trainer suites' helpers: batches, the GPU's logits
// and gradients, run comparisons. No tests here; tolerances only in expect_same_training, which both trainer
// suites use.
#pragma once
#define TESTING
#include "train_gpt.cu"  // from -I. (or the emulated build's copy, see the Makefile)
#include "llmc/gpt2_cpu.h"
#include <gtest/gtest.h>
#include <string>
#include <vector>
#include "test_layouts.h"  // defines: columns (the kernel suites), packed_positions

static inline bool have_gpu() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
// First line of every GPU test: CI machines have no GPU, and a skipped test says why.
#define REQUIRE_GPU() \
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device: GPU suite skipped"
// The same suites also run with the kernels emulated on the CPU (build/emu_test_*, test/fake_cuda): a test
// that measures time, or is too large to emulate in make test's time, says so and skips there.
#ifdef FAKE_CUDA_DEVICE
#define SKIP_IN_EMULATION(why) GTEST_SKIP() << "CPU emulation: " << why
// The *Cudnn* tests run on the emulation's cuDNN stand-in (test/fake_cuda/fake_cudnn.h): the trainer's side
// of the cuDNN path is checked here; cuDNN's own numbers on a GPU (the window's cudnn_* checks).
static const int fake_cudnn_on_for_tests = setenv("LLMC_FAKE_CUDNN", "1", 0);
#else
#define SKIP_IN_EMULATION(why)
#endif

// Kernel suites' inputs and buffers (test_kernels.cu, test_llama_kernels.cu).
// x[0..n) uniform in [lo, hi), rounded to bf16 so the bf16 GPU copy and the fp32 CPU copy are equal.
inline void fill_bf16(float* x, int64_t n, float lo, float hi, uint64_t seed) {
    uint64_t s = splitmix64(seed) | 1;  // xorshift needs a non-zero state
    for (int64_t i = 0; i < n; i++) x[i] = bf16_to_float(float_to_bf16(lo + (hi - lo) * random_f32(&s)));
}
inline std::vector<float> rand_bf16(int64_t n, float lo, float hi, uint64_t seed) {
    std::vector<float> v((size_t)n);
    fill_bf16(v.data(), n, lo, hi, seed);
    return v;
}
inline std::vector<int> rand_tokens(int64_t n, int V, uint64_t seed) {
    std::vector<int> t((size_t)n);
    uint64_t s = splitmix64(seed) | 1;
    for (auto& x : t) x = (int)(random_u64(&s) % (uint64_t)V);
    return t;
}

// Host -> device, then a device sync: our kernels run on non-blocking streams, which do not wait for the
// legacy stream cudaMemcpy uses.
inline void upload(bf16* d, const std::vector<float>& h) {
    std::vector<uint16_t> raw(h.size());
    for (size_t i = 0; i < h.size(); i++) raw[i] = float_to_bf16(h[i]);
    cudaCheck(cudaMemcpy(d, raw.data(), raw.size() * 2, cudaMemcpyHostToDevice));
    cudaCheck(cudaDeviceSynchronize());
}
template <typename X>
inline void upload(X* d, const std::vector<X>& h) {
    cudaCheck(cudaMemcpy(d, h.data(), h.size() * sizeof(X), cudaMemcpyHostToDevice));
    cudaCheck(cudaDeviceSynchronize());
}
// Device -> host, after everything queued on any stream has finished.
inline std::vector<float> download(const bf16* d, int64_t n) {
    std::vector<uint16_t> raw((size_t)n);
    cudaCheck(cudaDeviceSynchronize());
    if (n == 0) return {};  // e.g. the attention scores' workspace, empty with the fused attention
    cudaCheck(cudaMemcpy(raw.data(), d, (size_t)n * 2, cudaMemcpyDeviceToHost));
    std::vector<float> out((size_t)n);
    for (int64_t i = 0; i < n; i++) out[(size_t)i] = bf16_to_float(raw[(size_t)i]);
    return out;
}
template <typename X>
inline std::vector<X> download(const X* d, int64_t n) {
    std::vector<X> out((size_t)n);
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(out.data(), d, (size_t)n * sizeof(X), cudaMemcpyDeviceToHost));
    return out;
}

// Elements whose bits differ (+0 vs -0 too): for results that must be bit-identical.
inline int64_t count_bit_diff(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return -1;
    int64_t n = 0;
    for (size_t i = 0; i < a.size(); i++) n += memcmp(&a[i], &b[i], 4) != 0;
    return n;
}
// Elements that differ (for the results that must be exact).
inline int64_t count_diff(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return -1;
    int64_t n = 0;
    for (size_t i = 0; i < a.size(); i++) n += !(a[i] == b[i]);
    return n;
}

// The device buffers of one test, zero-filled, freed when it ends (also when an ASSERT returns early).
struct DeviceMem {
    std::vector<void*> ptrs;
    ~DeviceMem() {
        for (void* p : ptrs) cudaCheck(cudaFree(p));
    }
    template <typename X>
    X* zeros(int64_t n) {
        void* p = nullptr;
        cudaCheck(cudaMalloc(&p, (size_t)n * sizeof(X)));
        cudaCheck(cudaMemset(p, 0, (size_t)n * sizeof(X)));
        cudaCheck(cudaDeviceSynchronize());
        ptrs.push_back(p);
        return (X*)p;
    }
    bf16* bf16s(const std::vector<float>& h) {
        bf16* d = zeros<bf16>((int64_t)h.size());
        upload(d, h);
        return d;
    }
    template <typename X>
    X* copy(const std::vector<X>& h) {
        X* d = zeros<X>((int64_t)h.size());
        upload(d, h);
        return d;
    }
};

static inline GPTConfig tiny_config(int L, int C, int NH, int maxT, int V) {
    GPTConfig c;
    c.num_layers = L;
    c.channels = C;
    c.num_heads = NH;
    c.max_seq_len = maxT;
    c.vocab_size = V;
    c.padded_vocab_size = (int)round_up64(V, 128);
    return c;
}

// ||got - ref|| / ||ref|| in double (the absolute norm when ref is all zeros).
static inline double rel_l2(const float* got, const float* ref, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double d = (double)got[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

// One comparison against its bound: prints `[margin] Suite.Test | what | measured | bound | % of bound` (one
// line, for the device log: the first run on a GPU shows how tight each bound is; dev/bench/gpu_window.sh
// names the tightest) and passes when measured < bound (NaN fails). Use as EXPECT_TRUE(within("logits
// rel-L2", err, 2e-2)).
static inline void print_margin(const std::string& what, double measured, double bound) {
    const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
    printf("[margin] %s.%s | %s | %.3e | bound %.1e | %.1f%% of bound\n", t ? t->test_suite_name() : "?",
           t ? t->name() : "?", what.c_str(), measured, bound, 100.0 * measured / bound);
}
static inline ::testing::AssertionResult within(const std::string& what, double measured, double bound) {
    print_margin(what, measured, bound);
    if (measured < bound) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what << ": " << measured << " is not below its bound " << bound;
}
// |got - ref| / |ref| (|got - ref| where ref is 0)
static inline double rel_diff(double got, double ref) {
    return ref != 0 ? fabs(got - ref) / fabs(ref) : fabs(got - ref);
}

// ----------------------------------------------------------------------------
// the trainer suites' helpers (test_gpu.cu, test_gpu_llama.cu)

// weight decay 0.1, gradient clip `clip`, the rest as train_gpt's defaults
static inline TrainArgs test_args(float clip = 1.0f) {
    TrainArgs a;
    train_args_defaults(&a);
    a.weight_decay = 0.1f;
    a.grad_clip = clip;
    return a;
}

static inline std::vector<int> random_tokens(int64_t n, int V, uint64_t seed) {
    std::vector<int> t((size_t)n);
    uint64_t s = seed;
    for (auto& x : t) x = (int)(random_u64(&s) % (uint64_t)V);
    return t;
}

// Chat data as the loader gives it (dataloader.h): each row packs conversations of random lengths; pos
// restarts at 0 at each one, and only some tokens are targets (the rest -1). Row 0 holds far fewer targets
// than the others, so a trainer that weighed micro-batches equally, not by their targets, would fail.
static inline void make_chat_batch(int B, int T, std::vector<int>* pos, std::vector<int>* tg) {
    uint64_t s = 99;
    pos->assign((size_t)B * T, 0);
    for (int b = 0; b < B; b++) {
        int* p = pos->data() + (size_t)b * T;
        for (int t = 0, left = 0; t < T; t++, left--) {
            if (left == 0) left = 5 + (int)(random_u64(&s) % 27);  // a conversation of 5..31 tokens starts
            else p[t] = p[t - 1] + 1;
        }
        // a target predicts the next token of the same conversation: row 0 1 in 9, the others 1 in 2
        for (int t = 0; t < T; t++)
            if (t + 1 == T || p[t + 1] == 0 || random_u64(&s) % (b ? 2 : 9) != 0)
                (*tg)[(size_t)b * T + t] = -1;
    }
}

// Host copy of the bf16 logits the last gpt_forward_eval left in the workspace: (B*T, V).
static inline std::vector<float> gpu_logits(GPT* g, int V) {
    const int64_t n = (int64_t)g->B * g->T * V;
    std::vector<uint16_t> raw((size_t)n);
    cudaCheck(cudaMemcpy(raw.data(), g->acts.logits, (size_t)n * 2, cudaMemcpyDeviceToHost));
    std::vector<float> out((size_t)n);
    for (int64_t i = 0; i < n; i++) out[(size_t)i] = bf16_to_float(raw[(size_t)i]);
    return out;
}

// The gradients of the last gpt_step as its optimizers saw them, in the trainer's flat layout (fp32): the
// embeddings' fp32 gradients on the GPU, the layers' bf16 gradients the host received.
static inline std::vector<float> gpu_grads(GPT* g) {
    optimizer_wait_all(g);  // the optimizer waited for every copy, so all layer gradients are on the host
    cudaCheck(cudaStreamSynchronize(g->stream.compute));
    const ParamLayout* p = &g->layout;
    std::vector<float> out((size_t)p->total);
    if (g->resident_layers != 0)
        ADD_FAILURE() << "gpu_grads reads the layers' gradients from the host: streamed layers only";
    if (g->vocab) memcpy(out.data(), g->vocab->grads, (size_t)p->embed_count * 4);  // -E 1: on the host
    else
        cudaCheck(
            cudaMemcpy(out.data(), g->resident_grads, (size_t)p->embed_count * 4, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < (int64_t)g->config.num_layers * p->layer_stride; i++)
        out[(size_t)(p->embed_count + i)] = bf16_to_float(g->stream.grads_host_bf16[i]);
    return out;
}

// `steps` steps on fresh fixed batches (seeds 300 + s, 400 + s): each step's loss, then its gradient norm.
static inline std::vector<double> train_steps(GPT* g, int V, int n_micro, int steps) {
    const int64_t n = (int64_t)n_micro * g->B * g->T;
    std::vector<double> out;
    for (int s = 0; s < steps; s++) {
        auto in = random_tokens(n, V, 300 + s), tg = random_tokens(n, V, 400 + s);
        out.push_back(gpt_step(g, in.data(), tg.data(), n_micro, 1e-3f).loss);
        out.push_back(g->last_norm);
    }
    return out;
}

// Whether the emulation adds every sum in one fixed order (atomics included): then two paths that compute the
// same sums give the same bits. Not on a GPU, nor under FAKE_ATOMIC_JITTER (make test runs the run
// comparisons with it too, as a stand-in for a GPU's atomics).
static inline bool runs_are_bit_exact() {
#ifdef FAKE_CUDA_DEVICE
    return !(getenv("FAKE_ATOMIC_JITTER") && atoi(getenv("FAKE_ATOMIC_JITTER")) > 0);
#else
    return false;
#endif
}

// Two runs (loss and norm per step) of what must be the same training, taken by two paths. `exact`:
// bit for bit. Else step 1, the same weights on the same batch, may differ only by the order of fp32 sums
// (atomics, another GEMM kernel) and what that order does to the bf16 roundings downstream: on the H100
// (2026-11-26) cuBLAS picks other kernels for a micro-batch half or a quarter as tall, a reordered fp32 sum
// rounds some bf16 activation or gradient one ulp (2^-8) the other way, and step 1's gradient norm moved
// by 3.2e-5 (the loss, a forward pass on the same rows, by less): bound 1e-4. From step 2 on, two runs that
// differ at all diverge as any two runs of a training do: AdamW's first steps move each weight by about lr *
// sign(gradient), so a gradient within rounding of 0 moves a weight by lr in one run and not in the other.
// Measured in the emulation over test_gpu.cu's comparisons, with FAKE_ATOMIC_JITTER=4 and =50 (4% or 50% of
// the atomic sums one ulp off) and without: step 1 within 1.7e-9, later losses within 2.7e-5 (resident vs
// streamed layers, whose runs differ by design), later norms within 8.2e-4; on the H100 later losses within
// 1.9e-5 and norms 1.9e-4. Bounds 1e-4, 2.5e-4, 5e-3. (A recompute skipped at the wrong micro-batch moves
// step 1 by 2.5e-3: caught, 25x the bound, where a flat 1e-3 on every value was not.) Prints the worst of
// each, for the device log.
static inline void expect_same_training(const std::vector<double>& got, const std::vector<double>& ref,
                                        bool exact, const std::string& what) {
    ASSERT_EQ(got.size(), ref.size()) << what;
    double worst[3] = {0, 0, 0};  // step 1 (loss and norm), later losses, later norms
    for (size_t i = 0; i < ref.size(); i++) {
        const int kind = i < 2 ? 0 : i % 2 == 0 ? 1 : 2;
        const double tol = exact ? 0.0 : kind == 0 ? 1e-4 : kind == 1 ? 2.5e-4 : 5e-3;
        const double rel = fabs(got[i] - ref[i]) / fabs(ref[i]);
        worst[kind] = fmax(worst[kind], rel);
        EXPECT_LE(fabs(got[i] - ref[i]), tol * fabs(ref[i]))
            << what << ": step " << i / 2 + 1 << (i % 2 ? " norm" : " loss");
    }
    printf("  %-40s step 1 within %.1e, later losses %.1e, later norms %.1e (relative)%s\n", what.c_str(),
           worst[0], worst[1], worst[2], exact ? ", bit for bit required" : "");
    if (!exact) {
        print_margin(what + ": step 1 loss and norm, relative", worst[0], 1e-4);
        print_margin(what + ": later losses, relative", worst[1], 2.5e-4);
        print_margin(what + ": later norms, relative", worst[2], 5e-3);
    }
}

// rm -rf dir (a test's temporary checkpoint folder)
static inline void remove_dir(const char* dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    EXPECT_EQ(system(cmd), 0);
}
