// test_llama_trainer.cpp — the Llama family in the trainers: train_gpt_cpu trains a Llama or Qwen2 spec,
// checkpoints and resumes it with the same losses, starts from a Hugging Face checkpoint whose first
// validation loss is the one transformers computes, and refuses a mixed resume; train_gpt (emulated) refuses
// the family in one line. Needs Python with torch and transformers for the Hugging Face part (skipped
// without). Scratch under /tmp.
#include <math.h>
#include "cli_test_common.h"

namespace {

// The Python that has torch and transformers: $HF_PYTHON, else .venv-hf, else python3 (as test_hf).
std::string hf_python() {
    if (getenv("HF_PYTHON")) return getenv("HF_PYTHON");
    if (access(".venv-hf/bin/python", X_OK) == 0) return ".venv-hf/bin/python";
    return "python3";
}

const Args kLlama = {"-e", "llama:L2:C32:NH4:KV2:I64:V50257:T32", "-b", "4", "-t", "32", "-i", kTrain, "-j",
                     kVal};

}  // namespace

TEST_F(CliTest, CpuTrainsALlamaSpecAndResumesWithTheSameLosses) {
    const std::string out = dir + "/run";
    const Result a =
        run_bin(kCpu, kLlama + Args{"-x", "6", "-v", "3", "-m", "1", "-g", "8", "-n", "3", "-o", out});
    ASSERT_EQ(a.code, 0) << a.cmd << "\n" << a.err << a.out;
    EXPECT_TRUE(error_lines(a.err).empty()) << a.err;
    for (const char* s :
         {"spec, Llama init", "L / C / NH / NKV / hd", "2 / 32 / 4 / 2 / 8", "64 (SwiGLU) / 50257 / 32",
          "val loss", "generating:", "saved checkpoint step 3", "saved checkpoint step 6"})
        EXPECT_TRUE(has(a.out, s)) << s << " not in:\n" << a.out;
    const auto first = step_losses(a.out);
    ASSERT_EQ(first.size(), 6u) << a.out;
    EXPECT_LT(atof(first.at(6).c_str()), atof(first.at(1).c_str())) << "the loss falls over 6 steps";
    LlamaConfig saved;
    char err[600];
    ASSERT_TRUE(llama_read_header((out + "/model_00000006.bin").c_str(), &saved, err, sizeof err)) << err;
    EXPECT_EQ(saved.num_kv_heads, 2);
    EXPECT_EQ(saved.intermediate_size, 64);

    // from step 3 (step 6's marker removed), -e given and matching: steps 4..6 with the same losses
    ASSERT_EQ(unlink((out + "/DONE_00000006").c_str()), 0);
    const Result b =
        run_bin(kCpu, kLlama + Args{"-x", "6", "-v", "0", "-g", "0", "-n", "0", "-o", out, "-y", "1"});
    ASSERT_EQ(b.code, 0) << b.cmd << "\n" << b.err << b.out;
    EXPECT_TRUE(has(b.out, "resumed from")) << b.out;
    const auto resumed = step_losses(b.out);
    ASSERT_EQ(resumed.size(), 3u) << b.out;
    for (int s = 4; s <= 6; s++) EXPECT_EQ(resumed.at(s), first.at(s)) << "step " << s << " after the resume";

    // a resume naming another model, of either family, is one error line
    const Result c = run_bin(kCpu, base_args() + Args{"-x", "6", "-o", out, "-y", "1"});
    EXPECT_TRUE(CleanError(c, {"is a GPT-2, the checkpoint in", "a Llama-family model"})) << c.err;
    Args wider = kLlama;
    wider[1] = "llama:L2:C32:NH4:KV1:I64:V50257:T32";
    const Result d = run_bin(kCpu, wider + Args{"-x", "6", "-o", out, "-y", "1"});
    EXPECT_TRUE(CleanError(d, {"does not match the checkpoint", "NKV2"})) << d.err;
    // the GPU trainer computes GPT-2 only: its resume and its -e refuse the family in one line
    if (have_binary(kEmu)) {
        const Result e = run_bin(
            kEmu, Args{"-b", "4", "-t", "32", "-i", kTrain, "-j", kVal, "-x", "6", "-o", out, "-y", "1"});
        EXPECT_TRUE(CleanError(e, {"holds a Llama-family model", "train_gpt_cpu trains the Llama family"}))
            << e.err;
        const Result f = run_bin(kEmu, kLlama + Args{"-x", "1"});
        EXPECT_TRUE(CleanError(f, {"is a Llama-family model", "GPT-2 only"})) << f.err;
    }
}

TEST_F(CliTest, CpuTrainsATiedQwen2PresetShape) {
    const Result a =
        run_bin(kCpu, Args{"-e", "qwen2.5-0.5b:L1:C32:NH4:KV2:I48:T32:V50257", "-b", "2", "-t", "16", "-i",
                           kTrain, "-j", kVal, "-x", "4", "-v", "0", "-g", "0", "-l", "1e-2"});
    ASSERT_EQ(a.code, 0) << a.cmd << "\n" << a.err << a.out;
    EXPECT_TRUE(has(a.out, "q/k/v biases / tied")) << a.out;
    EXPECT_TRUE(has(a.out, "yes / yes")) << a.out;
    EXPECT_TRUE(has(a.out, "theta 1e+06")) << a.out;
    EXPECT_EQ(step_losses(a.out).size(), 4u) << a.out;
}

// A Hugging Face LlamaForCausalLM (GQA 2, llama3 RoPE scaling, untied) and a Qwen2ForCausalLM (biases, tied):
// train_gpt_cpu's validation loss before any step is transformers' loss on the same batch. Both are fp32 with
// logits within 1.2e-6 of each other (test_llama_cpu): a mean of 128 cross-entropies moves by less, 1e-5
// relative bounds it. The wide init (std 0.3) makes the loss depend on every part of the model (about 40, not
// log V 10.8).
TEST_F(CliTest, CpuStartsFromHuggingFaceLlamaAndQwen2WithTransformersLoss) {
    const std::string py = hf_python();
    if (system((py + " -c 'import torch, transformers, safetensors, numpy' > /dev/null 2>&1").c_str()) != 0)
        GTEST_SKIP() << py << " lacks torch, transformers or safetensors: .ci/run installs them in .venv-hf";
    const std::string cmd = py + " test/llama_trainer_check.py " + dir + " " + kVal + " 4 32 2>&1";
    ASSERT_EQ(system(cmd.c_str()), 0) << cmd;
    for (const char* name : {"llama_gqa2", "qwen2_tied"}) {
        const std::string model = dir + "/" + name + "/model";
        const double want = atof(slurp(dir + "/" + name + "/val_loss.txt").c_str());
        const Result r = run_bin(kCpu, Args{"-e", model, "-b", "4", "-t", "32", "-i", kTrain, "-j", kVal,
                                            "-x", "2", "-v", "2", "-m", "1", "-g", "0"});
        ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.err << r.out;
        EXPECT_TRUE(has(r.out, "Hugging Face checkpoint")) << r.out;
        const size_t at = r.out.find("val loss ");
        ASSERT_NE(at, std::string::npos) << r.out;
        const double got = atof(r.out.c_str() + at + 9);
        EXPECT_GT(want, 12.5) << "the wide init: a loss far from log V (10.8)";
        EXPECT_LE(fabs(got - want), 1e-5 * want)
            << name << ": train_gpt_cpu " << got << ", transformers " << want;
        printf("  %-12s val loss: train_gpt_cpu %.7f, transformers %.7f, rel diff %.1e (bound 1e-5)\n", name,
               got, want, fabs(got - want) / want);
    }
}
