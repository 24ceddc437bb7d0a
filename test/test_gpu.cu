// test_gpu.cu — checks the streaming GPU trainer (train_gpt.cu) against the fp32 CPU reference (gpt2_cpu.h):
// logits, loss and every gradient tensor on the same init and batch; 10 AdamW steps' losses; independence of
// the number of weight slots, of GPU-resident layers (-R), of kept activations (-K) and of the
// gradient-accumulation split; a checkpoint round trip; GPU memory that grows with depth only by the
// layer-input checkpoints (measured, and on paper for the 175B preset); H2D copies that overlap compute; the
// timeline's idle-time split and its -R / -K advice.
// Every test that needs a GPU skips (GTEST_SKIP) when no CUDA device is present (the two that only compute,
// the 175B plan and the timeline advice, run anyway). make test also builds this suite with the
// kernels emulated on the CPU (build/emu_test_gpu, test/fake_cuda): there everything but the two tests that
// measure time or are too large to emulate runs in CI, the real GPU's numerics, speed and concurrency aside.
//
// Tolerances, and why: the GPU computes in bf16 (8-bit mantissa, relative rounding 2^-9 = 0.2%) with fp32
// accumulation, on bf16 copies of the fp32 weights; the CPU reference is fp32 throughout. Errors of a few
// roundings per operation compound over a handful of operations per layer, so we compare whole tensors by
// relative L2 error, ||gpu - cpu|| / ||cpu||:
//   logits 2e-2, every gradient tensor 5e-2 (gradients pass through twice as many bf16 roundings),
//   loss and gradient norm 2e-2 relative, 10-step losses within 2e-2 relative of the CPU trainer's.
// Runs of the GPU trainer that must agree with each other (slot count, accumulation split, resume, resident
// layers) do the same bf16 math, up to the order of fp32 sums: the backward pass's atomics add in any order,
// and cuBLAS may pick another algorithm (another summation order) for buffers at other addresses. Such a
// difference is ~1e-6 relative, but it flips the bf16 rounding of some elements and, from step 2 on, AdamW's
// first steps amplify it (expect_same_training, gpu_test_common.h). So no comparison of two GPU runs is bit
// for bit on a GPU: bit for bit only under #ifdef FAKE_CUDA_DEVICE, where the emulation adds every sum in one
// fixed order.
// Every bound is printed with what was measured ("[margin] ..." lines, gpu_test_common.h `within`).
#include "gpu_test_common.h"
#include <vector>

namespace {

// A GPU trainer with the GPT-2 init of `seed`; `resident` of its layers GPU-resident (-R), the last `kept`
// keeping their activations (-K).
void build_gpu(GPT* g, const GPTConfig& c, int B, int T, int max_micro, int slots, const TrainArgs& a,
               uint64_t seed, int resident = 0, int kept = 0) {
    gpt_build(g, &c, B, T, max_micro, slots, resident, kept, &a);
    gpt_init_params(&c, g->master, seed);
    gpt_weights_ready(g);
}

void build_cpu(GPT2CPU* m, const GPTConfig& c, int B, int T, uint64_t seed) {
    ASSERT_TRUE(gpt2_cpu_build(m, &c)) << m->error;
    gpt_init_params(&c, m->params, seed);
    ASSERT_TRUE(gpt2_cpu_layout_activations(m, B, T)) << m->error;
}

// ----------------------------------------------------------------------------

TEST(GpuTrainer, LogitsAndLossMatchCpuReference) {
    REQUIRE_GPU();
    const GPTConfig c = tiny_config(3, 128, 4, 64, 500);
    const int B = 4, T = 64;
    const TrainArgs a = test_args(1.0f);
    auto in = random_tokens((int64_t)B * T, c.vocab_size, 1),
         tg = random_tokens((int64_t)B * T, c.vocab_size, 2);
    GPT2CPU cpu;
    build_cpu(&cpu, c, B, T, 42);
    ASSERT_TRUE(gpt2_cpu_forward(&cpu, in.data(), tg.data(), B, T)) << cpu.error;
    GPT g;
    build_gpu(&g, c, B, T, 1, 2, a, 42);
    gpt_forward_eval(&g, in.data(), NULL);  // logits only, left in the workspace
    std::vector<float> logits = gpu_logits(&g, c.padded_vocab_size);
    const float loss = gpt_forward_eval(&g, in.data(), tg.data());
    // compare the real vocabulary columns (padded ones are 0 logits on both sides by construction)
    const int Vp = c.padded_vocab_size;
    std::vector<float> ref((size_t)B * T * Vp);
    memcpy(ref.data(), cpu.acts.logits, ref.size() * 4);
    const double err = rel_l2(logits.data(), ref.data(), (int64_t)ref.size());
    printf("logits rel-L2 %.3e, loss gpu %.6f cpu %.6f\n", err, loss, cpu.mean_loss);
    // bf16 weights and activations (2^-9 per rounding), a few roundings per layer over 3 layers and the
    // lm_head; the GPU's fp32 summation order and fast-math exp/log add ~1e-6: 2e-2 (measured in
    // the emulation: ~5e-3)
    EXPECT_TRUE(within("logits rel-L2", err, 2e-2));
    EXPECT_TRUE(within("loss, relative", rel_diff(loss, cpu.mean_loss), 2e-2));
    gpt_free(&g);
    gpt2_cpu_free(&cpu);
}

// The CPU reference takes the whole batch at once; the GPU trainer takes it whole or as n_micro micro-batches
// (B / n_micro rows each, accumulated: the backward pass recomputes every micro-batch's activations but the
// last one's in the last layer, which the forward pass left in the workspace). chat: packed conversations
// (make_chat_batch); the loss is then the mean over the step's targets, on both sides.
static void gradients_match_cpu_reference(int n_micro, bool chat = false) {
    const GPTConfig c = tiny_config(3, 128, 4, 64, 500);
    const int B = 4, T = 64;
    const TrainArgs a = test_args(1.0f);
    auto in = random_tokens((int64_t)B * T, c.vocab_size, 3),
         tg = random_tokens((int64_t)B * T, c.vocab_size, 4);
    std::vector<int> pos;
    if (chat) make_chat_batch(B, T, &pos, &tg);
    const int* p_pos = chat ? pos.data() : NULL;
    GPT2CPU cpu;
    build_cpu(&cpu, c, B, T, 7);
    gpt2_cpu_zero_grad(&cpu);
    ASSERT_TRUE(gpt2_cpu_forward(&cpu, in.data(), tg.data(), B, T, p_pos)) << cpu.error;
    ASSERT_TRUE(gpt2_cpu_backward(&cpu, chat ? 1.0f / (float)cpu.num_targets : 0.0f)) << cpu.error;
    GPT g;
    build_gpu(&g, c, B / n_micro, T, n_micro, 2, a, 7);
    if (flash_attention_flag == ATTN_CUDNN) { EXPECT_EQ(g.attn_path, ATTN_CUDNN); }
    const StepResult step = gpt_step(&g, in.data(), tg.data(), n_micro, 0.0f, p_pos);
    // chat rows on cuDNN: every micro-batch ran its ragged graphs (none fell back to our kernel)
    EXPECT_EQ(g.attn_ragged[1], 0) << "micro-batches that fell back from cuDNN";
    const float loss = step.loss;
    if (chat) { EXPECT_EQ(step.targets, cpu.num_targets); }
    std::vector<float> grads = gpu_grads(&g);
    // bounds: the loss as in LogitsAndLossMatchCpuReference; every gradient tensor passes through about twice
    // as many bf16 roundings (and the layers' arrive rounded to bf16), plus fp32 atomics in any order: 5e-2
    const std::string mb = std::to_string(n_micro) + " micro-batches" + (chat ? " of chat data, " : ", ") +
                           attention_path_name(g.attn_path) + ": ";
    EXPECT_TRUE(within(mb + "loss, relative", rel_diff(loss, cpu.mean_loss), 2e-2));
    const ParamLayout* p = &g.layout;
    // the padded vocabulary rows of wte take no part in the model: their gradient is exactly zero
    int64_t padded_nonzero = 0;  // exact: sums of exact zeros, in any order
    for (int64_t i = (int64_t)c.vocab_size * c.channels; i < (int64_t)c.padded_vocab_size * c.channels; i++)
        padded_nonzero += grads[(size_t)(p->embed_offset[WTE] + i)] != 0.0f;
    EXPECT_EQ(padded_nonzero, 0);
    for (int t = 0; t < NUM_EMBED_TENSORS; t++) {
        const int64_t o = p->embed_offset[t];
        const double err = rel_l2(grads.data() + o, cpu.grads + o, p->embed_size[t]);
        EXPECT_TRUE(within(mb + "grad " + embed_tensor_names[t] + " rel-L2", err, 5e-2));
    }
    for (int l = 0; l < c.num_layers; l++) {
        for (int t = 0; t < NUM_LAYER_TENSORS; t++) {
            const int64_t o = gpt_layer_offset(p, l) + p->layer_offset[t];
            const double err = rel_l2(grads.data() + o, cpu.grads + o, p->layer_size[t]);
            EXPECT_TRUE(within(mb + "grad L" + std::to_string(l) + " " + layer_tensor_names[t] + " rel-L2",
                               err, 5e-2));
        }
    }
    const double cpu_norm = sqrt(sumsq_f32(cpu.grads, p->total));
    EXPECT_TRUE(within(mb + "gradient norm, relative", rel_diff(g.last_norm, cpu_norm), 2e-2));
    gpt_free(&g);
    gpt2_cpu_free(&cpu);
}

TEST(GpuTrainer, EveryGradientTensorMatchesCpuReference) {
    REQUIRE_GPU();
    gradients_match_cpu_reference(1);
}
TEST(GpuTrainer, AccumulatedGradientsMatchCpuReference) {
    REQUIRE_GPU();
    gradients_match_cpu_reference(2);
    gradients_match_cpu_reference(4);
}
// Chat data: positions restart per conversation (wpe, both attention masks), -1 targets add nothing, and
// micro-batches weigh by their target counts. Both attention paths (the emulator's time: one split each).
TEST(GpuTrainer, ChatDataGradientsMatchCpuReference) {
    REQUIRE_GPU();
    flash_attention_flag = 1;
    gradients_match_cpu_reference(4, true);  // the fused path, 4 micro-batches of one row each
    flash_attention_flag = 0;
    gradients_match_cpu_reference(1, true);  // the cuBLAS path, one micro-batch of 4 rows
    flash_attention_flag = -1;
}

// 10 steps of the same batches through both trainers: same schedule, clip and AdamW (schedulers.h, adamw.h).
TEST(GpuTrainer, TenStepsTrackCpuTrainer) {
    REQUIRE_GPU();
    const GPTConfig c = tiny_config(2, 128, 4, 64, 500);
    const int B = 4, T = 64, steps = 10;
    const TrainArgs a = test_args(1.0f);
    GPT2CPU cpu;
    build_cpu(&cpu, c, B, T, 11);
    float* m = (float*)calloc((size_t)cpu.layout.total, 4);
    float* v = (float*)calloc((size_t)cpu.layout.total, 4);
    GPT g;
    build_gpu(&g, c, B, T, 1, 2, a, 11);
    std::vector<float> cpu_losses, gpu_losses;
    for (int s = 0; s < steps; s++) {
        // a small corpus of 2 batches, alternating: the loss must fall as the model memorizes it
        auto in = random_tokens((int64_t)B * T, c.vocab_size, 100 + s % 2),
             tg = random_tokens((int64_t)B * T, c.vocab_size, 200 + s % 2);
        gpt2_cpu_zero_grad(&cpu);
        ASSERT_TRUE(gpt2_cpu_forward(&cpu, in.data(), tg.data(), B, T));
        ASSERT_TRUE(gpt2_cpu_backward(&cpu));
        cpu_losses.push_back(cpu.mean_loss);
        adamw_step_model_f32grad(&c, &cpu.layout, cpu.params, cpu.grads, m, v, 1, 1e-3f, &a, s + 1);
        gpu_losses.push_back(gpt_step(&g, in.data(), tg.data(), 1, 1e-3f).loss);
        printf("step %2d loss cpu %.5f gpu %.5f\n", s + 1, cpu_losses.back(), gpu_losses.back());
    }
    // each step's loss as in LogitsAndLossMatchCpuReference (2e-2); the two trainers' weights drift apart by
    // the bf16 numerics over the steps, which the memorizing model's falling loss keeps small
    double worst = 0.0;
    int worst_step = 0;
    for (int s = 0; s < steps; s++) {
        const double d = rel_diff(gpu_losses[s], cpu_losses[s]);
        if (!(d <= worst)) {
            worst = d;
            worst_step = s + 1;
        }
    }
    EXPECT_TRUE(within("10 steps' losses, worst relative difference", worst, 2e-2))
        << "at step " << worst_step;
    EXPECT_LT(gpu_losses[steps - 1], gpu_losses[0] - 0.5f);  // it learns
    gpt_free(&g);
    gpt2_cpu_free(&cpu);
    free(m);
    free(v);
}

// Runs `steps` steps on fixed batches and returns the losses and norms.
std::vector<double> run_gpu(const GPTConfig& c, int B, int T, int n_micro, int slots, int steps,
                            uint64_t seed, int resident = 0, int kept = 0) {
    const TrainArgs a = test_args(1.0f);
    GPT g;
    build_gpu(&g, c, B, T, n_micro, slots, a, seed, resident, kept);
    EXPECT_EQ(gpt_memory_plan(&c, B, T, n_micro, slots, resident, kept).gpu_bytes, g.gpu_bytes)
        << "the fit check must plan exactly what is allocated";
    std::vector<double> out = train_steps(&g, c.vocab_size, n_micro, steps);
    gpt_free(&g);
    return out;
}

TEST(GpuTrainer, ResultsIndependentOfSlotCount) {
    REQUIRE_GPU();
    const GPTConfig c = tiny_config(5, 128, 4, 64, 500);
    auto two = run_gpu(c, 4, 64, 1, 2, 4, 5);
    for (int slots : {3, 8}) {  // 8: more slots than layers, the whole model in them
        auto other = run_gpu(c, 4, 64, 1, slots, 4, 5);
        expect_same_training(other, two, runs_are_bit_exact(), std::to_string(slots) + " slots vs 2");
    }
}

// Every hand-over between the streams and the CPU AdamW thread, in the real trainer: under the CPU emulation
// every copy, memset, kernel launch and cuBLAS call is an operation on its stream in test/fake_cuda's model
// of CUDA's ordering (vector clocks: a stream's work is ordered after what its events waited for, the host
// after what it synchronized with), and so are the CPU AdamW's reads of the pinned gradients and writes of
// the pinned bf16 copy. Two accesses to the same buffer, one of them a write, that nothing orders are a race:
// a missing event wait that a fast GPU might forgive on one run and not on the next. Buffers are tracked at
// the granularity the trainer hands them over (a weight slot, a staging buffer, a layer's pinned weights or
// gradients, a layer's checkpoint per micro-batch). Cases: pure streaming with 2 slots; a resident and a kept
// layer with 3 slots; a wider model (C 512) with few tokens, whose CPU AdamW takes long enough that the next
// forward pass really waits for it. Each: 3 steps of 2 micro-batches with a validation pass between steps
// (which runs while the CPU AdamW updates the layers the next pass will copy), then a checkpoint, sampling,
// reloading the weights and one more step. The model checks the interleaving the run took: a hand-over that
// is wrong only when the CPU AdamW lags behind shows where it does (the C 512 case). The real build skips it:
// it checks the emulation's model of the order, which make test runs (build/emu_test_gpu); compute-sanitizer
// (gpu_window.sh) checks memory accesses and shared-memory hazards on the GPU, not the order across streams.

TEST(GpuTrainer, StreamsOrderEveryHandOver) {
    REQUIRE_GPU();
#ifndef FAKE_CUDA_DEVICE
    GTEST_SKIP()
        << "checks the CPU emulation's model of the order across streams: build/emu_test_gpu runs it";
#else
    const TrainArgs a = test_args(1.0f);
    const int n_micro = 2;
    struct {
        int C, B, T, slots, resident, kept;
    } cases[] = {{64, 2, 32, 2, 0, 0}, {64, 2, 32, 3, 1, 1}, {512, 1, 16, 2, 0, 0}};
    for (auto k : cases) {
        const GPTConfig c = tiny_config(4, k.C, k.C / 64, 32, 300);
        const int B = k.B, T = k.T;
        GPT g;
        build_gpu(&g, c, B, T, n_micro, k.slots, a, 21, k.resident, k.kept);
        gpt_track_buffers(&g);  // llmc/race_check.cuh
        auto in = random_tokens((int64_t)n_micro * B * T, c.vocab_size, 22),
             tg = random_tokens((int64_t)n_micro * B * T, c.vocab_size, 23);
        char dir[] = "/tmp/test_gpu_racesXXXXXX";
        ASSERT_TRUE(mkdtemp(dir));
        for (int step = 0; step < 3; step++) {
            const float loss = gpt_step(&g, in.data(), tg.data(), n_micro, 1e-3f).loss;
            EXPECT_TRUE(isfinite(loss));
            if (step == 1) { EXPECT_TRUE(isfinite(gpt_forward_eval(&g, in.data(), tg.data()))); }
        }
        // what the CLI does between steps besides validation: a checkpoint (gathering the GPU-resident
        // state), sampling (a forward pass and one position's logits), and loading weights (as a resume does)
        DataLoaderState ds;
        memset(&ds, 0, sizeof ds);
        save_checkpoint(&g, dir, &ds);
        gpt_forward_eval(&g, in.data(), NULL);
        std::vector<float> logits((size_t)c.padded_vocab_size);
        gpt_copy_logits(&g, 0, T - 1, logits.data());
        gpt_weights_ready(&g);
        EXPECT_TRUE(isfinite(gpt_step(&g, in.data(), tg.data(), n_micro, 1e-3f).loss));
        optimizer_wait_all(&g);
        const auto& races = fake_cuda_races();
        EXPECT_TRUE(races.empty()) << "C " << k.C << ", " << k.slots << " slots, -R " << k.resident << " -K "
                                   << k.kept << ": " << races.size()
                                   << " races, the first: " << (races.empty() ? "" : races[0]);
        fake_cuda_untrack_all();  // before the buffers are freed (and their addresses reused)
        gpt_free(&g);
        remove_dir(dir);
    }
#endif
}

// cuDNN's SDPA, where this machine has it (else skipped, saying why; always in the emulation): one step's
// gradients against the CPU reference with the fused path's bounds (dense, and chat data as ragged sequences,
// 4 micro-batches of one row: buckets of 2 and 4 sequences), and 4 whole steps against the fused kernel
// within FusedAndCublasAttentionTrainAlike's 5e-3 (cuDNN keeps the scores in fp32 as the fused kernel does,
// and rounds P to bf16 as it does: a wrong stride, head or offset moves the loss by O(1)). run_gpu also
// checks that the plan, with cuDNN's workspace and metadata, is what gpt_build allocates.
TEST(GpuTrainer, CudnnAttentionMatchesCpuReferenceAndTrainsLikeFused) {
    REQUIRE_GPU();
    const GPTConfig c = tiny_config(3, 128, 4, 64, 500);  // hs 32
    attention_path_select(ATTN_CUDNN, 4, 64, 4, 4, 32, true);
    if (!cudnn_attention_ready) GTEST_SKIP() << "cuDNN: " << cudnn_attention_note;
    printf("%s\n", cudnn_attention_note);
    const int saved = flash_attention_flag;
    flash_attention_flag = ATTN_CUDNN;
    gradients_match_cpu_reference(1);
    gradients_match_cpu_reference(4, true);
    auto cudnn = run_gpu(c, 4, 64, 1, 2, 4, 5);
    // -R 1 -K 2, 2 micro-batches: cuDNN's statistics kept from the forward for the kept layers' backward,
    // the others' recomputed, a resident layer's too (issue 40 item 1: "must work with recompute and -K")
    auto cudnn_rk = run_gpu(c, 4, 64, 2, 2, 4, 5, 1, 2);
    flash_attention_flag = ATTN_FUSED;
    auto fused = run_gpu(c, 4, 64, 1, 2, 4, 5);
    auto fused_rk = run_gpu(c, 4, 64, 2, 2, 4, 5, 1, 2);
    flash_attention_flag = saved;
    cudnn_attention_ready = false;  // the other tests plan without it
    for (size_t i = 0; i < fused.size(); i++) {
        printf("%s step %zu: cudnn %.6f fused %.6f; -R 1 -K 2: cudnn %.6f fused %.6f\n",
               i % 2 ? "norm" : "loss", i / 2 + 1, cudnn[i], fused[i], cudnn_rk[i], fused_rk[i]);
        EXPECT_NEAR(cudnn[i], fused[i], 5e-3 * fabs(fused[i])) << "value " << i;
        EXPECT_NEAR(cudnn_rk[i], fused_rk[i], 5e-3 * fabs(fused_rk[i])) << "-R 1 -K 2, value " << i;
    }
}

// The fused attention kernels (the default where the head size allows) and the cuBLAS + softmax path train
// the same model: each is checked per tensor against the CPU reference in test_kernels; here whole steps
// (loss and gradient norm, 4 steps) agree to 5e-3 relative (emulated: <= 1.3e-3; a wrong mask or index moves
// the loss by O(1)). The paths round differently (the cuBLAS path rounds the scores to bf16 before the
// softmax, the fused one keeps them in fp32), so not bit for bit.
TEST(GpuTrainer, FusedAndCublasAttentionTrainAlike) {
    REQUIRE_GPU();
    const GPTConfig c = tiny_config(3, 128, 4, 64, 500);  // hs 32
    const int saved = flash_attention_flag;
    flash_attention_flag = 1;
    auto fused = run_gpu(c, 4, 64, 1, 2, 4, 5);
    flash_attention_flag = 0;
    auto cublas = run_gpu(c, 4, 64, 1, 2, 4, 5);
    flash_attention_flag = saved;
    // Bound from the GPU's numerics: the two paths differ by design in where they round to bf16 (2^-9), which
    // the emulation reproduces (it runs the same kernels; its exp and its GEMM sums differ from the GPU's by
    // ~1e-6, far below a bf16 rounding); a GPU adds its atomics' order, whose effect on a run
    // (expect_same_training:
    // <= 2.7e-5 on losses, 8.2e-4 on norms) stays within the bound. Emulated worst 1.3e-3: 5e-3 leaves ~4x.
    double worst = 0.0;
    for (size_t i = 0; i < fused.size(); i++) {
        printf("%s step %zu: fused %.6f cublas %.6f\n", i % 2 ? "norm" : "loss", i / 2 + 1, fused[i],
               cublas[i]);
        EXPECT_NEAR(fused[i], cublas[i], 5e-3 * fabs(cublas[i])) << "value " << i;
        worst = fmax(worst, rel_diff(fused[i], cublas[i]));
    }
    print_margin("fused vs cuBLAS attention, worst loss / norm, relative", worst, 5e-3);
}

// The first R layers kept on the GPU (their AdamW on the GPU, no copies) train the same model. Not bit for
// bit even in the emulation: a resident layer's AdamW reads its fp32 gradient, a streamed layer's the
// bf16-rounded copy (<= 2^-9 relative per element), which from step 2 on is one more way for two
// runs to differ.
TEST(GpuTrainer, ResultsIndependentOfResidentLayers) {
    REQUIRE_GPU();
    const GPTConfig c = tiny_config(5, 128, 4, 64, 500);
    auto streamed = run_gpu(c, 4, 64, 1, 2, 4, 5, 0);
    for (int resident : {2, 5}) {  // 5: every layer resident, nothing streamed
        auto other = run_gpu(c, 4, 64, 1, 2, 4, 5, resident);
        expect_same_training(other, streamed, false, std::to_string(resident) + " resident layers vs 0");
    }
}

// The last K layers keeping their costly forward activations (-K) instead of recomputing them: the backward
// pass reads the values the same kernels computed from the same inputs, and redoes the LayerNorms and the
// GELU with the forward's kernels, so with the GEMMs' passes as separate kernels (-G 0) the run is the same.
// Two micro-batches (each keeps its own activations); K = L; and R = K = 2 of 3 layers: one recomputed
// resident layer, one kept resident layer, one kept streamed layer. With -G 0 the two runs compute the same
// sums: expect_same_training, bit for bit where the emulation adds in a fixed order. With the cuBLASLt
// epilogues (-G 1, the default) the forward's GELU comes from cuBLASLt, the kept layers' redone one
// from our kernel:
// two paths that need not round alike, already at step 1, so the bound of the other cross-path tests here,
// 5e-3 relative on every loss and norm (seen in the emulation over 3 steps: < 1e-3 built at -O3, 1.3e-3 at
// -O1). (Mutations this catches: a kept layer reading a GELU output that was not redone moves the gradient
// norms by 1.5-9%; all micro-batches sharing one kept block, by 0.5-4%.)
TEST(GpuTrainer, KeptActivationsTrainLikeRecompute) {
    REQUIRE_GPU();
    const GPTConfig c = tiny_config(3, 128, 4, 64, 500);
    const int saved = cublaslt_fusion;
    for (int fusion : {0, 1}) {
#ifdef FAKE_CUDA_DEVICE
        if (fusion && getenv("FAKE_ATOMIC_JITTER"))
            continue;  // -G 1 is bounded, not exact: jitter adds nothing
#endif
        cublaslt_fusion = fusion;
        auto recomputed = run_gpu(c, 4, 32, 2, 2, 3, 13);
        struct {
            int resident, kept;
        } cases[] = {{0, 3}, {2, 2}};
        for (auto k : cases) {
            auto kept = run_gpu(c, 4, 32, 2, 2, 3, 13, k.resident, k.kept);
            std::vector<double> reference =
                k.resident ? run_gpu(c, 4, 32, 2, 2, 3, 13, k.resident) : recomputed;
            const std::string what = std::to_string(k.kept) + " kept, " + std::to_string(k.resident) +
                                     " resident, -G " + std::to_string(fusion);
            if (!fusion) {
                expect_same_training(kept, reference, runs_are_bit_exact(), what);
                continue;
            }
            // the bound of the cross-path tests (FusedAndCublasAttentionTrainAlike): two GELU paths that
            // round differently, plus on a GPU the atomics' order; emulated < 1e-3 at -O3, 1.3e-3 at -O1
            double worst = 0.0;
            for (size_t i = 0; i < reference.size(); i++) {
                EXPECT_NEAR(kept[i], reference[i], 5e-3 * fabs(reference[i])) << what << ", value " << i;
                worst = fmax(worst, rel_diff(kept[i], reference[i]));
            }
            print_margin(what + ": kept vs recomputed through cuBLASLt's GELU, worst loss / norm, relative",
                         worst, 5e-3);
        }
    }
    cublaslt_fusion = saved;
}

// A cuBLASLt that finds no fused algorithm, or whose cublasLtMatmul refuses the one it found (NOT_SUPPORTED;
// FAKE_CUBLASLT_REFUSE in the emulation), must not stop the run: each fused GEMM falls back to cuBLAS and the
// kernels.cuh pass, and the run is the one -G 0 takes (bit for bit in the emulation).
TEST(GpuTrainer, RefusedCublasLtFallsBackToUnfused) {
    REQUIRE_GPU();
#ifndef FAKE_CUDA_DEVICE
    GTEST_SKIP() << "the refusal is the emulation's (FAKE_CUBLASLT_REFUSE)";
#endif
    const GPTConfig c = tiny_config(2, 128, 4, 64, 500);
    const int saved = cublaslt_fusion;
    cublaslt_fusion = 0;
    const std::vector<double> unfused = run_gpu(c, 4, 64, 2, 2, 2, 17);
    cublaslt_fusion = 1;
    for (const char* what : {"heuristic", "matmul"}) {
        setenv("FAKE_CUBLASLT_REFUSE", what, 1);
        const int64_t before = cublaslt_fallbacks;
        const std::vector<double> refused = run_gpu(c, 4, 64, 2, 2, 2, 17);
        unsetenv("FAKE_CUBLASLT_REFUSE");
        EXPECT_GT(cublaslt_fallbacks, before) << what << ": no GEMM fell back";
        expect_same_training(refused, unfused, runs_are_bit_exact(),
                             std::string("cuBLASLt refusing: ") + what);
    }
    cublaslt_fusion = saved;
}

// Validation walks the layers once per max_micro batches (gpt_forward_eval_batches, as validation_loss calls
// it): each layer's weights arrive once and serve every batch of the walk. Each batch's loss is the one a
// one-batch pass gives (bit for bit in the emulation: the same kernels on the same values), and the stream
// moves each layer once per walk (a copy, or a reuse of the slot it is still in), not once per batch.
TEST(GpuTrainer, EvaluationWalksTheLayersOncePerChunkOfBatches) {
    REQUIRE_GPU();
    const GPTConfig c = tiny_config(3, 128, 4, 64, 500);
    const int B = 2, T = 64, chunk = 3, batches = 5;
    const int64_t N = (int64_t)B * T;
    GPT g;
    build_gpu(&g, c, B, T, chunk, 2, test_args(1.0f), 42);
    auto in = random_tokens(batches * N, c.vocab_size, 5), tg = random_tokens(batches * N, c.vocab_size, 6);
    auto moves = [&] { return g.stream.layer_copies + g.stream.layer_reuses; };
    std::vector<float> one(batches), walked(batches);
    int64_t before = moves();
    for (int b = 0; b < batches; b++) one[b] = gpt_forward_eval(&g, in.data() + b * N, tg.data() + b * N);
    EXPECT_EQ(moves() - before, batches * c.num_layers) << "one batch per walk";
    before = moves();
    for (int b = 0; b < batches; b += chunk)
        gpt_forward_eval_batches(&g, in.data() + b * N, tg.data() + b * N, std::min(chunk, batches - b),
                                 walked.data() + b);
    EXPECT_EQ(moves() - before, 2 * c.num_layers) << "5 batches in walks of 3: 2 walks";
    for (int b = 0; b < batches; b++) {
        if (runs_are_bit_exact()) EXPECT_EQ(walked[b], one[b]) << "batch " << b;
        else EXPECT_NEAR(walked[b], one[b], 1e-5 * fabs(one[b])) << "batch " << b;  // fp32 summation order
    }
    gpt_free(&g);
}

// Forward only: the same bf16 weights whether read from a slot or from the resident prefix, the same kernels.
// In the emulation (one fixed summation order) the logits must be bit-identical. On a GPU cuBLAS promises
// that only for the same call on the same buffers: the weights sit at other addresses (at C = 128 with the
// same 256-byte alignment, so cuBLAS has little reason to pick other algorithms, but may), and an algorithm
// with another fp32 summation order (~1e-6 relative) flips the bf16 rounding of a few elements per tensor
// (2^-8 each); through 3 layers and the lm_head that is well under 1e-3 rel-L2 of the logits, where weights
// read from a wrong place move them by O(1): 5e-3.
TEST(GpuTrainer, ResidentLayersGiveIdenticalLogits) {
    REQUIRE_GPU();
    const GPTConfig c = tiny_config(3, 128, 4, 64, 500);
    const int B = 4, T = 64;
    const TrainArgs a = test_args(1.0f);
    auto in = random_tokens((int64_t)B * T, c.vocab_size, 1);
    std::vector<float> logits[2];
    const int resident[2] = {0, 2};
    for (int i = 0; i < 2; i++) {
        GPT g;
        build_gpu(&g, c, B, T, 1, 2, a, 42, resident[i]);
        gpt_forward_eval(&g, in.data(), NULL);
        logits[i] = gpu_logits(&g, c.padded_vocab_size);
        gpt_free(&g);
    }
#ifdef FAKE_CUDA_DEVICE
    EXPECT_EQ(memcmp(logits[0].data(), logits[1].data(), logits[0].size() * 4), 0);
#else
    int64_t differ = 0;
    for (size_t i = 0; i < logits[0].size(); i++) differ += logits[0][i] != logits[1][i];
    printf("logits that differ between -R 0 and -R 2: %lld of %zu\n", (long long)differ, logits[0].size());
    EXPECT_TRUE(within("logits -R 2 vs -R 0 rel-L2",
                       rel_l2(logits[1].data(), logits[0].data(), (int64_t)logits[0].size()), 5e-3));
#endif
}

// Micro-batch accumulation into a resident layer's gradient (its own place in resident_grads, not the
// streamed layers' buffer): one micro-batch of 8 vs two of 4, both with 2 of 3 layers resident.
TEST(GpuTrainer, ResidentLayersAccumulateMicroBatches) {
    REQUIRE_GPU();
    const GPTConfig c = tiny_config(3, 128, 4, 64, 500);
    auto one = run_gpu(c, 8, 64, 1, 2, 3, 9, 2);
    auto two = run_gpu(c, 4, 64, 2, 2, 3, 9, 2);
    expect_same_training(two, one, false, "2 micro-batches vs 1, 2 resident");
}

// -sl: a step whose loss is an outlier updates nothing. Its window is filled with losses far below a fresh
// model's (~ln V), so the first step is skipped. Then, with the bound off, the same batch gives the same loss
// (the weights in the slots, the GPU-resident prefix and the host copy are untouched), AdamW's t is 1, and
// the weights are those of a fresh trainer after its first step. Bit for bit in the emulation. On a GPU the
// losses (same weights, same batch) may differ only by the order of fp32 sums, where the weights sit in other
// slots or another trainer's buffers (cuBLAS's algorithm may differ with the addresses): 1e-5 relative, the
// bound of expect_same_training's step 1; the weights all but 1 in 10^4 within 1e-6 (the backward pass's
// atomics add in any order, and at t = 1 AdamW moves each weight by lr times the sign of its gradient, which
// may flip where the gradient is within rounding of 0). Streamed and GPU-resident layers (-R 1).
TEST(GpuTrainer, OutlierStepUpdatesNothing) {
    REQUIRE_GPU();
    const GPTConfig c = tiny_config(3, 128, 4, 64, 500);
    const int B = 4, T = 64;
    auto in = random_tokens((int64_t)B * T, c.vocab_size, 5),
         tg = random_tokens((int64_t)B * T, c.vocab_size, 6);
    for (int resident : {0, 1}) {
        TrainArgs a = test_args(1.0f);
        a.skip_loss_z = 3.0f;
        GPT g, fresh;
        build_gpu(&g, c, B, T, 1, 2, a, 42, resident);
        const int64_t n = g.layout.total;
        const std::vector<float> master0(g.master, g.master + n);
        for (int i = 0; i < OUTLIER_WINDOW; i++) outlier_z(&g.loss_window, i % 2 ? 1.0 : 1.1);
        const float skipped_loss = gpt_step(&g, in.data(), tg.data(), 1, 1e-3f).loss;
        EXPECT_EQ(std::string(g.skipped).rfind("loss z-score ", 0), 0u)
            << "R " << resident << ": " << g.skipped;
        EXPECT_EQ(g.step, 1);
        EXPECT_EQ(g.adam_t, 0);
        optimizer_wait_all(&g);
        gpt_resident_state_to_host(&g);
        EXPECT_EQ(memcmp(g.master, master0.data(), (size_t)n * 4), 0) << "R " << resident;
        int64_t moved = 0;
        for (int64_t i = 0; i < n; i++) moved += g.adam_m[i] != 0.0f || g.adam_v[i] != 0.0f;
        EXPECT_EQ(moved, 0) << "R " << resident << ": AdamW moments changed by a skipped step";

        g.args.skip_loss_z = 0.0f;
        const float loss = gpt_step(&g, in.data(), tg.data(), 1, 1e-3f).loss;
#ifdef FAKE_CUDA_DEVICE
        EXPECT_EQ(loss, skipped_loss)
            << "R " << resident << ": the skipped step changed the weights the GPU reads";
#else
        EXPECT_TRUE(
            within("R " + std::to_string(resident) + ": loss after the skipped step vs its own, relative",
                   rel_diff(loss, skipped_loss), 1e-5))
            << "the skipped step changed the weights the GPU reads";
#endif
        EXPECT_STREQ(g.skipped, "");
        EXPECT_EQ(g.step, 2);
        EXPECT_EQ(g.adam_t, 1);
        optimizer_wait_all(&g);
        gpt_resident_state_to_host(&g);
        const std::vector<float> master(g.master, g.master + n), adam_v(g.adam_v, g.adam_v + n);
        gpt_free(&g);  // one GPT at a time (the cuBLAS handles are per process)

        a.skip_loss_z = 0.0f;
        build_gpu(&fresh, c, B, T, 1, 2, a, 42, resident);
        const float fresh_loss = gpt_step(&fresh, in.data(), tg.data(), 1, 1e-3f).loss;
#ifdef FAKE_CUDA_DEVICE
        EXPECT_EQ(fresh_loss, loss);
#else
        EXPECT_TRUE(within("R " + std::to_string(resident) + ": a fresh trainer's first loss vs it, relative",
                           rel_diff(fresh_loss, loss), 1e-5));
#endif
        optimizer_wait_all(&fresh);
        gpt_resident_state_to_host(&fresh);
#ifdef FAKE_CUDA_DEVICE
        EXPECT_EQ(memcmp(master.data(), fresh.master, (size_t)n * 4), 0) << "R " << resident;
        EXPECT_EQ(memcmp(adam_v.data(), fresh.adam_v, (size_t)n * 4), 0) << "R " << resident;
#else
        int64_t differ = 0;
        for (int64_t i = 0; i < n; i++) differ += fabsf(master[(size_t)i] - fresh.master[i]) > 1e-6f;
        print_margin(
            "R " + std::to_string(resident) + ": weights more than 1e-6 off a fresh trainer's (count)",
            (double)differ, (double)(n / 10000));
        EXPECT_LE(differ, n / 10000) << "R " << resident << ": weights that moved differently (of " << n
                                     << ")";
        // v = (1 - beta2) g^2 after one step: the gradients' fp32 atomics order, through
        // bf16 activations: 1e-3
        EXPECT_TRUE(within("R " + std::to_string(resident) + ": AdamW v vs a fresh trainer's rel-L2",
                           rel_l2(adam_v.data(), fresh.adam_v, n), 1e-3));
#endif
        gpt_free(&fresh);
    }
}

// resident_adamw against the CPU trainer's block updates (adamw.h: decay on matrices only) on the
// same fp32 state and gradients: the GPU AdamW repeats cpu_adam's arithmetic, so bit for bit, on a GPU too:
// its kernel uses only IEEE-rounded intrinsics (__fmaf_rn, __fsqrt_rn, __fdiv_rn, untouched by
// --use_fast_math), flushes subnormals as cpu_adam does, and has no atomics and no
// cuBLAS (test_kernels: AdamwGpuMatchesCpuAdam).
TEST(GpuTrainer, ResidentAdamwMatchesCpuBlockUpdatesBitForBit) {
    REQUIRE_GPU();
    const GPTConfig c = tiny_config(2, 128, 4, 64, 500);
    const TrainArgs a = test_args(1.0f);
    GPT g;
    build_gpu(&g, c, 4, 64, 1, 2, a, 3, 1);  // embeddings + layer 0 on the GPU
    const ParamLayout* p = &g.layout;
    const int64_t n = g.resident_count;
    std::vector<float> params(g.master, g.master + n), grads((size_t)n), m((size_t)n), v((size_t)n);
    uint64_t rng = 99;
    for (int64_t i = 0; i < n; i++) {
        grads[(size_t)i] = (random_f32(&rng) - 0.5f) * 0.1f;
        m[(size_t)i] = (random_f32(&rng) - 0.5f) * 1e-3f;
        v[(size_t)i] = random_f32(&rng) * 1e-5f;
    }
    memcpy(g.adam_m, m.data(), (size_t)n * 4);
    memcpy(g.adam_v, v.data(), (size_t)n * 4);
    gpt_weights_ready(&g);  // uploads the prefix: master, m, v and the bf16 weights
    cudaCheck(cudaMemcpy(g.resident_grads, grads.data(), (size_t)n * 4, cudaMemcpyHostToDevice));
    cudaCheck(
        cudaDeviceSynchronize());  // a pageable copy may return before it lands; compute does not wait for it
    AdamWArgs args = {3e-4f, ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS, a.weight_decay, 0.8f, 5};
    resident_adamw(&g, args, g.stream.compute);  // t 5: as optimizer_submit would have taken
    cudaCheck(cudaStreamSynchronize(g.stream.compute));
    adamw_embed_f32grad(p, params.data(), grads.data(), m.data(), v.data(), NULL, &args);
    const int64_t o = gpt_layer_offset(p, 0);
    adamw_layer_f32grad(p, params.data() + o, grads.data() + o, m.data() + o, v.data() + o, NULL, &args);
    gpt_resident_state_to_host(&g);
    EXPECT_EQ(memcmp(g.master, params.data(), (size_t)n * 4), 0) << "weights";
    EXPECT_EQ(memcmp(g.adam_m, m.data(), (size_t)n * 4), 0) << "m";
    EXPECT_EQ(memcmp(g.adam_v, v.data(), (size_t)n * 4), 0) << "v";
    gpt_free(&g);
}

TEST(GpuTrainer, ResultsIndependentOfAccumulationSplit) {
    REQUIRE_GPU();
    const GPTConfig c = tiny_config(3, 128, 4, 64, 500);
    // the same 8 x 64 tokens per step as one micro-batch of 8, two of 4, four of 2
    auto one = run_gpu(c, 8, 64, 1, 2, 3, 9);
    for (int split : {2, 4}) {
        auto other = run_gpu(c, 8 / split, 64, split, 2, 3, 9);
        expect_same_training(other, one, false, std::to_string(split) + " micro-batches vs 1");
    }
}

// save_checkpoint + a fresh trainer loading it (model file + AdamW state) continues exactly, also when the
// two keep different layers GPU-resident (the files hold the whole state either way).
void checkpoint_resume(int resident_saving, int resident_resuming) {
    const GPTConfig c = tiny_config(2, 128, 4, 64, 500);
    const int B = 4, T = 64;
    const TrainArgs a = test_args(1.0f);
    char dir[] = "/tmp/test_gpu_ckptXXXXXX";
    ASSERT_TRUE(mkdtemp(dir));
    auto in = random_tokens((int64_t)B * T, c.vocab_size, 77),
         tg = random_tokens((int64_t)B * T, c.vocab_size, 78);
    GPT g;
    build_gpu(&g, c, B, T, 1, 2, a, 21, resident_saving);
    for (int s = 0; s < 3; s++) gpt_step(&g, in.data(), tg.data(), 1, 1e-3f);
    DataLoaderState ds;
    memset(&ds, 0, sizeof ds);
    ds.batch_index = 12345;
    save_checkpoint(&g, dir, &ds);
    EXPECT_EQ(latest_checkpoint(dir), 3);
    // two more steps: the first loss depends only on the weights, the second also on the AdamW moments
    const float next1 = gpt_step(&g, in.data(), tg.data(), 1, 1e-3f).loss;
    const float next2 = gpt_step(&g, in.data(), tg.data(), 1, 1e-3f).loss;
    gpt_free(&g);

    char path[512], err[4352];
    snprintf(path, sizeof path, "%s/model_%08d.bin", dir, 3);
    GPTConfig loaded;
    ASSERT_TRUE(gpt_read_header(path, &loaded, err, sizeof err)) << err;
    GPT r;
    gpt_build(&r, &loaded, B, T, 1, 3, resident_resuming, 0, &a);
    ASSERT_TRUE(gpt_load_params(path, &loaded, r.master, err, sizeof err)) << err;
    gpt_weights_ready(&r);
    DataLoaderState rs;
    snprintf(path, sizeof path, "%s/state_%08d.bin", dir, 3);
    load_state(&r, path, &rs);
    EXPECT_EQ(r.step, 3);
    EXPECT_EQ(rs.batch_index, 12345);
    const float resumed1 = gpt_step(&r, in.data(), tg.data(), 1, 1e-3f).loss;
    const float resumed2 = gpt_step(&r, in.data(), tg.data(), 1, 1e-3f).loss;
    printf("resident %d -> %d: losses after the checkpoint %.6f %.6f, resumed %.6f %.6f\n", resident_saving,
           resident_resuming, next1, next2, resumed1, resumed2);
    // the same weights and batch (resumed1) and then the same AdamW state (resumed2), computed by another
    // trainer's buffers: on a GPU the order of fp32 sums may differ (atomics, cuBLAS's algorithm for other
    // addresses), ~1e-4 at step 1 and ~2.5e-4 after an update (expect_same_training's bounds): 1e-3. Exact
    // in the emulation.
    const std::string rr =
        "resident " + std::to_string(resident_saving) + " -> " + std::to_string(resident_resuming) + ": ";
    EXPECT_TRUE(within(rr + "first loss after resuming, relative", rel_diff(resumed1, next1), 1e-3));
    // a lost m or v (e.g. the GPU-resident prefix's not saved or not loaded) moves this one by ~1e-2
    EXPECT_TRUE(within(rr + "second loss after resuming, relative", rel_diff(resumed2, next2), 1e-3));
    gpt_free(&r);
    remove_dir(dir);
}
TEST(GpuTrainer, CheckpointResumeContinuesTheRun) {
    REQUIRE_GPU();
    checkpoint_resume(0, 0);
    checkpoint_resume(1, 2);  // saved with layer 0 on the GPU, resumed with both layers there
}

// The point of the design, on paper: the largest preset (175B: L96 C12288) at B=8, T=1024, 8K tokens per step
// plans under 78 GiB of GPU memory (an H100's 80 GB less the driver's share), whichever attention path the
// plan assumes (no GPU: the cuBLAS path, with its (T x T) scores), and halving its depth saves exactly the
// checkpoints of the layers removed. A plan only: nothing is allocated, so it runs without a GPU.
TEST(GpuTrainer, LargestPresetPlansToFitOneH100) {
    GPTConfig c;
    char err[256];
    ASSERT_EQ(parse_model_spec("175b", &c, err, sizeof err), 1) << err;
    const int B = 8, T = 1024;
    const MemoryPlan full = gpt_memory_plan(&c, B, T, 1, 2, 0, 0);
    GPTConfig half = c;
    half.num_layers /= 2;
    const MemoryPlan shallow = gpt_memory_plan(&half, B, T, 1, 2, 0, 0);
    const double GiB = 1073741824.0;
    printf("175b at B=%d T=%d: GPU plan %.2f GiB (L=%d), %.2f GiB (L=%d); host %.1f GiB\n", B, T,
           full.gpu_bytes / GiB, c.num_layers, shallow.gpu_bytes / GiB, half.num_layers,
           full.host_bytes / GiB);
    EXPECT_LT(full.gpu_bytes, (int64_t)78 << 30);
    EXPECT_EQ(full.gpu_bytes - shallow.gpu_bytes,
              (int64_t)(c.num_layers - half.num_layers) * B * T * c.channels * 2);
    // the host holds fp32 weights, AdamW m and v, the pinned bf16 weights and the layers' pinned bf16
    // gradients (the embeddings' stay on the GPU): just under 16 bytes per parameter
    const int64_t params = gpt_layout(&c).total;
    EXPECT_GT(full.host_bytes, params * 15);
    EXPECT_LT(full.host_bytes, params * 17);
}

// The MFU denominator by the device's name (cudaDeviceProp.name as the driver reports it): whole words only,
// the H100 variants before the plain H100, and 0 (MFU n/a) for a GPU not in the table. No GPU needed.
TEST(GpuTrainer, MfuPeakFollowsTheDeviceName) {
    const struct {
        const char* name;
        double tflops;
    } cases[] = {{"NVIDIA H100 80GB HBM3", 989.4},
                 {"NVIDIA H100 PCIe", 756},
                 {"NVIDIA H100 NVL", 835},
                 {"NVIDIA H200", 989.4},
                 {"NVIDIA GH200 480GB", 989.4},
                 {"NVIDIA A100-SXM4-80GB", 312},
                 {"NVIDIA A100 80GB PCIe", 312},
                 {"NVIDIA A10", 125},
                 {"NVIDIA A10G", 0},
                 {"NVIDIA L40S", 362},
                 {"NVIDIA L40", 0},
                 {"NVIDIA L4", 121},
                 {"NVIDIA GeForce RTX 4090", 165.2},
                 {"NVIDIA B200", 2250},
                 {"fake CUDA device (CPU emulation)", 0}};
    for (const auto& k : cases) {
        const char* label = "unset";
        EXPECT_NEAR(gpu_bf16_peak_flops(k.name, &label) / 1e12, k.tflops, 1e-6) << k.name;
        EXPECT_EQ(label == NULL, k.tflops == 0) << k.name;
    }
}

// The timeline's split of the idle time (forward pass: waiting for weights; backward pass: for copies) and
// the -R / -K it suggests from it, on a hand-made step (host-clock spans: no GPU needed). 4 layers, R = K =
// 0: forward layers of 10 ms that start late (the CPU AdamW, 30 ms per layer, holds them back), backward
// layers of 30 ms with a 5 ms gap. Exact arithmetic on the spans, so exact expectations (to double rounding).
TEST(GpuTrainer, TimelineSplitsIdleTimeAndSuggestsPlacement) {
    TimelineSpan spans[32] = {};
    Timeline tl = {spans, 32, 0, NULL, 0.0};
    for (int l = 0; l < 4; l++) {
        timeline_host_span(&tl, TRACK_ADAM, "adamw", l, 0.030 * l, 0.030 * (l + 1));
        timeline_host_span(&tl, TRACK_COMPUTE, "fwd", l, 0.030 * (l + 1), 0.030 * (l + 1) + 0.010);
    }
    timeline_host_span(&tl, TRACK_COMPUTE, "head", -1, 0.130, 0.140);
    for (int l = 3; l >= 0; l--) {
        const double t0 = 0.140 + 0.035 * (3 - l);
        timeline_host_span(&tl, TRACK_COMPUTE, "bwd", l, t0, t0 + 0.030);
        timeline_host_span(&tl, TRACK_D2H, "grads", l, t0 + 0.030, t0 + 0.034);
    }
    const TimelineSummary t = timeline_summarize(&tl);
    EXPECT_NEAR(t.step_s, 0.140 + 0.035 * 3 + 0.034, 1e-12);
    EXPECT_NEAR(t.fwd_busy_s, 0.040, 1e-12);
    EXPECT_NEAR(t.fwd_wait_s, 0.130 - 0.040, 1e-12);  // the forward pass ends at 130 ms having computed 40 ms
    EXPECT_NEAR(t.bwd_wait_s, 3 * 0.005, 1e-12);
    EXPECT_EQ(t.fwd_layers, 4);
    EXPECT_EQ(t.adam_layers, 4);
    const int64_t GiB = (int64_t)1 << 30;
    // 90 ms of waiting / 30 ms of AdamW per layer = 3 more resident layers (3 GiB each), then kept
    // ones (2 GiB)
    Placement p = suggest_placement(&t, 4, {0, 0}, 13 * GiB, 3 * GiB, 2 * GiB);
    EXPECT_EQ(p.resident, 3);
    EXPECT_EQ(p.kept, 2);
    p = suggest_placement(&t, 4, {0, 0}, 7 * GiB, 3 * GiB, 2 * GiB);  // memory for 2 resident layers only
    EXPECT_EQ(p.resident, 2);
    EXPECT_EQ(p.kept, 0);
    p = suggest_placement(&t, 4, {2, 3}, 100 * GiB, 3 * GiB,
                          2 * GiB);  // never more layers than the model has
    EXPECT_EQ(p.resident, 4);
    EXPECT_EQ(p.kept, 4);
    p = suggest_placement(&t, 4, {1, 1}, -GiB, 3 * GiB, 2 * GiB);  // nothing to spare: no change
    EXPECT_EQ(p.resident, 1);
    EXPECT_EQ(p.kept, 1);
}

// Bytes the device has in use right now (all processes, so compare differences only).
int64_t device_used_bytes() {
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    return (int64_t)(total_b - free_b);
}

// Depth L and 2L, same width: the trainer's GPU bytes differ by exactly L more layer-input checkpoints,
// both as the trainer counts them and as the device reports after a step.
TEST(GpuTrainer, GpuMemoryGrowsWithDepthOnlyByCheckpoints) {
    REQUIRE_GPU();
    SKIP_IN_EMULATION("C=512 models at 4K tokens per step take minutes there");
    const int B = 8, T = 256, C = 512, n_micro = 2;
    const TrainArgs a = test_args(1.0f);
    int64_t counted[2], measured[2];
    const int depths[2] = {4, 8};
    {  // warm-up, not measured: lazily loaded kernels and cuBLAS's one-time allocations stay for good
        const GPTConfig c = tiny_config(2, C, 8, T, 1000);
        GPT g;
        build_gpu(&g, c, B, T, n_micro, 2, a, 1);
        auto in = random_tokens((int64_t)n_micro * B * T, c.vocab_size, 5),
             tg = random_tokens((int64_t)n_micro * B * T, c.vocab_size, 6);
        gpt_step(&g, in.data(), tg.data(), n_micro, 1e-4f).loss;
        gpt_free(&g);
    }
    for (int i = 0; i < 2; i++) {
        const GPTConfig c = tiny_config(depths[i], C, 8, T, 1000);
        cudaCheck(cudaDeviceSynchronize());
        const int64_t before = device_used_bytes();
        GPT g;
        build_gpu(&g, c, B, T, n_micro, 2, a, 1);
        auto in = random_tokens((int64_t)n_micro * B * T, c.vocab_size, 5),
             tg = random_tokens((int64_t)n_micro * B * T, c.vocab_size, 6);
        gpt_step(&g, in.data(), tg.data(), n_micro, 1e-4f).loss;
        optimizer_wait_all(&g);
        cudaCheck(cudaDeviceSynchronize());
        measured[i] = device_used_bytes() - before;
        counted[i] = g.gpu_bytes;
        const MemoryPlan plan = gpt_memory_plan(&c, B, T, n_micro, 2, 0, 0);
        EXPECT_EQ(plan.gpu_bytes, g.gpu_bytes) << "the fit check must plan exactly what is allocated";
        gpt_free(&g);
    }
    const int64_t ckpt_delta = (int64_t)(depths[1] - depths[0]) * n_micro * B * T * C * 2;
    printf(
        "GPU bytes: L=%d counted %lld measured %lld; L=%d counted %lld measured %lld; checkpoints delta "
        "%lld\n",
        depths[0], (long long)counted[0], (long long)measured[0], depths[1], (long long)counted[1],
        (long long)measured[1], (long long)ckpt_delta);
    EXPECT_EQ(counted[1] - counted[0], ckpt_delta);
    // the device's own count: 2 MiB pages per allocation, a few allocations that differ in size: 8 MiB
    EXPECT_TRUE(within("measured GPU bytes L8 - L4 vs the checkpoints', |difference| in bytes",
                       fabs((double)(measured[1] - measured[0]) - (double)ckpt_delta), 8.0 * (1 << 20)));
}

// With the timeline on, the H2D copies of layer weights must overlap the compute stream's kernels. We look
// at the backward pass: in the forward pass a copy may also wait for the CPU AdamW of the previous step
// (by design, see gpt_step), which on this small, fast-to-compute model can leave nothing to overlap.
TEST(GpuTrainer, WeightCopiesOverlapCompute) {
    REQUIRE_GPU();
    SKIP_IN_EMULATION("it measures time (and a 100M-parameter model)");
    // T = 1024: a layer's recompute + backward (~0.8 TFLOP) takes ~3x its 25 MB copy at PCIe Gen5 speed, so a
    // copy that runs alongside it is wholly overlapped even if the link or the GEMMs are slower than expected
    const GPTConfig c = tiny_config(8, 1024, 16, 1024, 1000);
    const int B = 8, T = 1024;
    const TrainArgs a = test_args(1.0f);
    GPT g;
    build_gpu(&g, c, B, T, 1, 2, a, 3);
    Timeline tl;
    timeline_init(&tl, 8 * c.num_layers + 64);
    auto in = random_tokens((int64_t)B * T, c.vocab_size, 8),
         tg = random_tokens((int64_t)B * T, c.vocab_size, 9);
    gpt_step(&g, in.data(), tg.data(), 1, 1e-4f).loss;  // warm-up (cuBLAS heuristics, first touches)
    g.timeline = &tl;
    g.stream.timeline = &tl;
    gpt_step(&g, in.data(), tg.data(), 1, 1e-4f).loss;
    const TimelineSummary s = timeline_summarize(&tl);
    double backward_start = 1e30;
    for (int j = 0; j < tl.n; j++)
        if (tl.spans[j].track == TRACK_COMPUTE && strcmp(tl.spans[j].what, "bwd") == 0)
            backward_start = fmin(backward_start, tl.spans[j].t0);
    double overlap = 0.0, backward_h2d = 0.0;
    for (int i = 0; i < tl.n; i++) {
        if (tl.spans[i].track != TRACK_H2D || tl.spans[i].t0 < backward_start) continue;
        backward_h2d += tl.spans[i].t1 - tl.spans[i].t0;
        for (int j = 0; j < tl.n; j++) {
            if (tl.spans[j].track != TRACK_COMPUTE) continue;
            const double lo = fmax(tl.spans[i].t0, tl.spans[j].t0), hi = fmin(tl.spans[i].t1, tl.spans[j].t1);
            if (hi > lo) overlap += hi - lo;
        }
    }
    printf(
        "step %.2f ms: compute %.2f ms, h2d %.2f ms, d2h %.2f ms, adam %.2f ms; backward h2d %.2f ms, of it "
        "overlapped with compute %.2f ms\n",
        s.step_s * 1e3, s.busy_s[TRACK_COMPUTE] * 1e3, s.busy_s[TRACK_H2D] * 1e3, s.busy_s[TRACK_D2H] * 1e3,
        s.busy_s[TRACK_ADAM] * 1e3, backward_h2d * 1e3, overlap * 1e3);
    // 8 layers, 2 slots: the last 2 stay resident from the forward pass, the other 6 are copied back
    ASSERT_GT(backward_h2d, 0.0);
    // each backward copy runs while the previous layer's recompute + backward computes (longer than the copy)
    print_margin("backward H2D copy time not overlapped by compute, fraction", 1.0 - overlap / backward_h2d,
                 0.5);
    EXPECT_GT(overlap, 0.5 * backward_h2d);
    g.timeline = NULL;
    g.stream.timeline = NULL;
    optimizer_wait_all(&g);
    timeline_free(&tl);
    gpt_free(&g);
}

}  // namespace
