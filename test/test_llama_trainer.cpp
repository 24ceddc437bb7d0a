// test_llama_trainer.cpp — the Llama family in the trainers: train_gpt_cpu trains a Llama or Qwen2 spec,
// checkpoints and resumes it with the same losses, starts from a Hugging Face checkpoint whose first
// validation loss is the one transformers computes, and refuses a mixed resume; train_gpt (emulated) trains
// the family (-R, -K, -Y), resumes train_gpt_cpu's checkpoint and writes one train_gpt_cpu resumes, and plans
// the presets (-P 1). Needs Python with torch and transformers for the Hugging Face part (skipped
// without). Scratch under /tmp.
#include <math.h>
#include <sstream>
#include "cli_test_common.h"
#include "llmc/hf_tokenizer.h"  // defines: tokenizer_init_hf

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
    EXPECT_TRUE(CleanError(d, {"does not match the checkpoint", "(-e's num_kv_heads 1 against 2)"})) << d.err;
    // the GPU trainer (emulated) resumes the CPU trainer's checkpoint of step 3: steps 4..6 within bf16's
    // numerics of the CPU's (test_gpu_llama's 2e-2 relative on a loss)
    if (have_binary(kEmu)) {  // the run above saved step 6 as it ended: step 3's is the newest once more
        EXPECT_TRUE(has(b.out, "saved checkpoint step 6")) << b.out;
        ASSERT_EQ(unlink((out + "/DONE_00000006").c_str()), 0);
        const Result e = run_bin(kEmu, Args{"-b", "4", "-t", "32", "-i", kTrain, "-j", kVal, "-x", "6",
                                            "-v", "0", "-g", "0",  "-n", "0",    "-o", out,  "-y", "1"});
        ASSERT_EQ(e.code, 0) << e.cmd << "\n" << e.err << e.out;
        EXPECT_TRUE(has(e.out, "resumed from")) << e.out;
        const auto gpu = step_losses(e.out);
        ASSERT_EQ(gpu.size(), 3u) << e.out;
        for (int s = 4; s <= 6; s++) {
            const double got = atof(gpu.at(s).c_str()), want = atof(first.at(s).c_str());
            EXPECT_LE(fabs(got - want), 2e-2 * want)
                << "step " << s << ": train_gpt " << got << ", cpu " << want;
        }
        const Result f = run_bin(kEmu, base_args() + Args{"-x", "6", "-o", out, "-y", "1"});
        EXPECT_TRUE(CleanError(f, {"is a GPT-2, the checkpoint in", "a Llama-family model"})) << f.err;
    }
}

// train_gpt (emulated) trains a Llama spec with a GPU-resident and a kept layer and the timeline, checkpoints
// it, and train_gpt_cpu resumes that checkpoint: its steps 4..6 within bf16's numerics of the GPU run's own
// (2e-2 relative, test_gpu_llama's bound on a loss). A Qwen2 preset shape trains too (biases, tied).
TEST_F(CliTest, GpuTrainsTheLlamaFamilyAndTheCpuTrainerResumesIt) {
    if (!have_binary(kEmu)) GTEST_SKIP() << kEmu << " not built";
    const std::string out = dir + "/gpu";
    const Result a = run_bin(kEmu, kLlama + Args{"-x", "6", "-v", "3", "-m", "1", "-g", "4", "-n", "3", "-R",
                                                 "1", "-K", "1", "-Y", "1", "-o", out});
    ASSERT_EQ(a.code, 0) << a.cmd << "\n" << a.err << a.out;
    for (const char* s : {"spec, Llama init", "KV 2 / hd 8 / I 64", "untied lm_head", "1 of 2", "val loss",
                          "generating:", "saved checkpoint step 3", "TIMELINE"})
        EXPECT_TRUE(has(a.out, s)) << s << " not in:\n" << a.out;
    const auto gpu = step_losses(a.out);
    ASSERT_EQ(gpu.size(), 6u) << a.out;
    EXPECT_LT(atof(gpu.at(6).c_str()), atof(gpu.at(1).c_str())) << "the loss falls over 6 steps";
    ASSERT_EQ(unlink((out + "/DONE_00000006").c_str()), 0);
    const Result b =
        run_bin(kCpu, kLlama + Args{"-x", "6", "-v", "0", "-g", "0", "-n", "0", "-o", out, "-y", "1"});
    ASSERT_EQ(b.code, 0) << b.cmd << "\n" << b.err << b.out;
    const auto cpu = step_losses(b.out);
    ASSERT_EQ(cpu.size(), 3u) << b.out;
    for (int s = 4; s <= 6; s++) {
        const double got = atof(cpu.at(s).c_str()), want = atof(gpu.at(s).c_str());
        EXPECT_LE(fabs(got - want), 2e-2 * want)
            << "step " << s << ": train_gpt_cpu " << got << ", gpu " << want;
    }
    Args wider = kLlama;  // a resume naming another Llama shape is one error line
    wider[1] = "llama:L2:C32:NH4:KV1:I64:V50257:T32";
    EXPECT_TRUE(CleanError(run_bin(kEmu, wider + Args{"-x", "6", "-o", out, "-y", "1"}),
                           {"does not match the checkpoint", "(-e's num_kv_heads 1 against 2)"}));
    const Result q =
        run_bin(kEmu, Args{"-e", "qwen2.5-0.5b:L1:C32:NH4:KV2:I48:T32:V50257", "-b", "2", "-t", "16", "-i",
                           kTrain, "-j", kVal, "-x", "3", "-v", "0", "-g", "0", "-l", "1e-2"});
    ASSERT_EQ(q.code, 0) << q.cmd << "\n" << q.err << q.out;
    EXPECT_TRUE(has(q.out, "q/k/v biases / tied lm_head")) << q.out;
    EXPECT_EQ(step_losses(q.out).size(), 3u) << q.out;
}

// -P 1 prints the presets' plans without a GPU, with the SSD tier too; shapes the kernels refuse are one
// line.
TEST_F(CliTest, GpuPlansTheLlamaPresetsAndRefusesWhatItCannot) {
    if (!have_binary(kEmu)) GTEST_SKIP() << kEmu << " not built";
    for (const char* preset : {"llama3-8b", "qwen2.5-7b", "llama3-70b"}) {
        const Result p =
            run_bin(kEmu, Args{"-e", preset, "-b", "1", "-t", "2048", "-P", "1", "-M", "2000", "-V", "79"});
        ASSERT_EQ(p.code, 0) << p.cmd << "\n" << p.err << p.out;
        EXPECT_TRUE(has(p.out, "memory plan: Llama family")) << p.out;
        EXPECT_TRUE(has(p.out, "GPU ")) << p.out;
    }
    const Result p = run_bin(kEmu, Args{"-e", "llama3-8b", "-b", "1", "-t", "2048", "-P", "1"});
    EXPECT_TRUE(has(p.out, "L32 C4096 NH32 KV8 hd128 I14336 V128256, 8.030 B parameters")) << p.out;
    // the SSD tier's plan for the largest preset: the streamed layers' state and bf16 weights on disk
    const Result sd = run_bin(
        kEmu, Args{"-e", "llama3-405b", "-b", "1", "-t", "4096", "-P", "1", "-sd", dir + "/ssd", "-sw", "1"});
    ASSERT_TRUE(plan_printed(sd.code, sd.out)) << sd.cmd << "\n" << sd.err << sd.out;
    EXPECT_TRUE(has(sd.out, "memory plan: Llama family")) << sd.out;
    EXPECT_TRUE(has(sd.out, "AdamW m and v and bf16 weights")) << sd.out;
    EXPECT_TRUE(CleanError(run_bin(kEmu, Args{"-e", "llama:L1:C36:NH2:I64:T32", "-b", "1", "-t", "32", "-i",
                                              kTrain, "-j", kVal, "-x", "1"}),
                           {"multiples of 8", "C36"}));
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
// log V 10.8). train_gpt's (emulated, bf16) is within 2e-2 of it.
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
        // train_gpt (emulated) reads the same checkpoint: bf16 weights and activations, the logits' roundings
        // (2^-9 relative) move this mean loss by far less than test_gpu_llama's 2e-2 bound on a loss
        if (!have_binary(kEmu)) continue;
        const Result g = run_bin(kEmu, Args{"-e", model, "-b", "4", "-t", "32", "-i", kTrain, "-j", kVal,
                                            "-x", "1", "-v", "1", "-m", "1", "-g", "0"});
        ASSERT_EQ(g.code, 0) << g.cmd << "\n" << g.err << g.out;
        EXPECT_TRUE(has(g.out, "Hugging Face checkpoint")) << g.out;
        const size_t gat = g.out.find("val loss ");
        ASSERT_NE(gat, std::string::npos) << g.out;
        const double gpu = atof(g.out.c_str() + gat + 9);
        EXPECT_LE(fabs(gpu - want), 2e-2 * want)
            << name << ": train_gpt " << gpu << ", transformers " << want;
        printf("  %-12s val loss: train_gpt (emulated) %.7f, transformers %.7f, rel diff %.1e (bound 2e-2)\n",
               name, gpu, want, fabs(gpu - want) / want);
        // -sd reads the checkpoint a window at a time (the prefix, then layer 1): the same weights, same loss
        setenv("SSD_PROBE_SECONDS", "0", 1);  // the disk probe: one 64 MiB pass
        setenv("SSD_PROBE_MIB", "64", 1);
        const std::string store = dir + "/" + name + "/store";
        const Result sd =
            run_bin(kEmu, Args{"-e", model, "-b", "4",  "-t", "32", "-i", kTrain, "-j", kVal,  "-x",
                               "1",  "-v",  "1",  "-m", "1",  "-g", "0",  "-R",   "1",  "-sd", store});
        unsetenv("SSD_PROBE_SECONDS");
        unsetenv("SSD_PROBE_MIB");
        ASSERT_EQ(sd.code, 0) << sd.cmd << "\n" << sd.err << sd.out;
        const size_t sat = sd.out.find("val loss ");
        ASSERT_NE(sat, std::string::npos) << sd.out;
        EXPECT_EQ(sd.out.substr(sat, 20), g.out.substr(gat, 20)) << name << ": -sd, and without";
    }
}

// export_hf writes what train_gpt_cpu trained as a checkpoint transformers loads: a run started from a
// Hugging Face Llama, trained 2 steps, exported from its run directory, has transformers' loss equal to the
// run's last validation loss (fp32 both ways: 1e-5 relative, as above). A Qwen2 input re-exported in bf16
// loads as Qwen2ForCausalLM with the loss of its weights rounded to bf16: within 2e-2 of the fp32 loss (each
// weight moves by at most 2^-9 relative; measured below). -t copies tokenizer files.
TEST_F(CliTest, ExportHfWritesTheLlamaFamilyForTransformers) {
    const std::string py = hf_python();
    if (system((py + " -c 'import torch, transformers, safetensors, numpy' > /dev/null 2>&1").c_str()) != 0)
        GTEST_SKIP() << py << " lacks torch, transformers or safetensors: .ci/run installs them in .venv-hf";
    ASSERT_TRUE(have_binary("./export_hf")) << "make builds export_hf before the tests";
    ASSERT_EQ(
        system((py + " test/llama_trainer_check.py " + dir + " " + kVal + " 4 32 > /dev/null 2>&1").c_str()),
        0);
    auto hf_loss = [&](const std::string& model, std::string* cls) {
        const std::string cmd = py + " test/llama_trainer_check.py loss " + model + " " + kVal + " 4 32 2>&1";
        FILE* p = popen(cmd.c_str(), "r");
        char line[512] = "";
        std::string all;
        while (p && fgets(line, sizeof line, p)) all += line;
        if (p) pclose(p);
        char name[128] = "";
        double loss = -1;
        if (sscanf(all.c_str(), "%127s %lf", name, &loss) != 2) ADD_FAILURE() << cmd << "\n" << all;
        *cls = name;
        return loss;
    };
    const std::string run = dir + "/run", out = dir + "/exported";
    const Result r = run_bin(kCpu, Args{"-e", dir + "/llama_gqa2/model",
                                        "-b", "4",
                                        "-t", "32",
                                        "-i", kTrain,
                                        "-j", kVal,
                                        "-x", "2",
                                        "-v", "2",
                                        "-m", "1",
                                        "-g", "0",
                                        "-n", "2",
                                        "-o", run});
    ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.err << r.out;
    const size_t at = r.out.rfind("val loss ");
    ASSERT_NE(at, std::string::npos) << r.out;
    const double trained = atof(r.out.c_str() + at + 9);
    const std::string tok = dir + "/tok";
    ASSERT_EQ(system(("mkdir -p " + tok + " && cp dev/data/gpt2/encoder.json " + tok + "/vocab.json && cp " +
                      "dev/data/gpt2/vocab.bpe " + tok + "/merges.txt")
                         .c_str()),
              0);
    const Result e = run_bin("./export_hf", Args{"-i", run, "-o", out, "-t", tok});
    ASSERT_EQ(e.code, 0) << e.cmd << "\n" << e.err << e.out;
    EXPECT_TRUE(has(e.out, "LlamaForCausalLM L2 C64 NH4 NKV2 I96")) << e.out;
    EXPECT_TRUE(has(e.out, "tokenizer files from")) << e.out;
    EXPECT_EQ(access((out + "/merges.txt").c_str(), F_OK), 0);
    std::string cls;
    const double loss = hf_loss(out, &cls);
    EXPECT_EQ(cls, "LlamaForCausalLM");
    EXPECT_LE(fabs(loss - trained), 1e-5 * trained)
        << "transformers " << loss << ", train_gpt_cpu " << trained;
    printf("  exported after 2 steps: transformers %.7f, train_gpt_cpu %.7f\n", loss, trained);

    const std::string qwen = dir + "/qwen2_tied/model", qout = dir + "/qwen_bf16";
    const double fp32 = atof(slurp(dir + "/qwen2_tied/val_loss.txt").c_str());
    const Result q = run_bin("./export_hf", Args{"-i", qwen, "-o", qout, "-d", "bf16"});
    ASSERT_EQ(q.code, 0) << q.cmd << "\n" << q.err << q.out;
    EXPECT_TRUE(has(q.out, "Qwen2ForCausalLM")) << q.out;
    EXPECT_TRUE(has(q.out, "no tokenizer files")) << q.out;
    const double bf16 = hf_loss(qout, &cls);
    EXPECT_EQ(cls, "Qwen2ForCausalLM");
    EXPECT_LE(fabs(bf16 - fp32), 2e-2 * fp32) << "bf16 " << bf16 << ", fp32 " << fp32;
    printf("  qwen2 re-exported in bf16: loss %.6f, fp32 %.6f, rel diff %.1e (bound 2e-2)\n", bf16, fp32,
           fabs(bf16 - fp32) / fp32);
    const Result t = run_bin("./export_hf", Args{"-i", qwen, "-o", dir + "/none", "-t", dir});
    EXPECT_TRUE(CleanError(t, {"holds no tokenizer file"})) << t.err;
}

// Samples of the family print text through the checkpoint's tokenizer.json (byte-level BPE): GPT-2's
// tokenizer.json, built offline from the shipped files, decodes every id to the bytes gpt2_tokenizer.bin has.
// Other tokenizers are refused with the reason, and the samples print as ids.
TEST_F(CliTest, SamplesDecodeThroughTheCheckpointsTokenizerJson) {
    Tokenizer t;
    char err[1024] = "";
    const std::string unigram = dir + "/unigram.json", spiece = dir + "/spiece.json";
    FILE* f = fopen(unigram.c_str(), "w");
    fputs(
        "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", -1.0]]}, \"decoder\": {\"type\": "
        "\"Metaspace\"}}",
        f);
    fclose(f);
    EXPECT_FALSE(tokenizer_init_hf(&t, unigram.c_str(), err, sizeof err));
    EXPECT_TRUE(has(err, "not a byte-level BPE tokenizer (model Unigram, decoder Metaspace)")) << err;
    f = fopen(spiece.c_str(), "w");  // a BPE whose entries are SentencePiece's, not byte-level
    fputs(
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"\\u2581the\": 0}}, \"decoder\": {\"type\": "
        "\"Sequence\", "
        "\"decoders\": [{\"type\": \"ByteLevel\"}]}}",
        f);
    fclose(f);
    EXPECT_FALSE(tokenizer_init_hf(&t, spiece.c_str(), err, sizeof err));
    EXPECT_TRUE(has(err, "a vocabulary entry is not byte-level")) << err;

    const std::string py = hf_python();
    if (system((py + " -c 'import tokenizers, torch, transformers' > /dev/null 2>&1").c_str()) != 0)
        GTEST_SKIP() << py << " lacks tokenizers, torch or transformers: .ci/run installs them in .venv-hf";
    ASSERT_EQ(system((py + " test/make_test_tokenizers.py " + dir + "/tok > /dev/null 2>&1").c_str()), 0);
    Tokenizer gpt2;
    ASSERT_TRUE(tokenizer_init(&gpt2, "gpt2_tokenizer.bin", err, sizeof err)) << err;
    ASSERT_TRUE(tokenizer_init_hf(&t, (dir + "/tok/gpt2/tokenizer.json").c_str(), err, sizeof err)) << err;
    ASSERT_EQ(t.vocab_size, gpt2.vocab_size);
    EXPECT_EQ(t.eot_token, 50256);
    int differ = 0;
    for (uint32_t i = 0; i < t.vocab_size; i++)
        differ += strcmp(tokenizer_decode(&t, i), tokenizer_decode(&gpt2, i)) != 0;
    EXPECT_EQ(differ, 0) << "ids whose bytes differ from gpt2_tokenizer.bin's";
    tokenizer_free(&t);
    tokenizer_free(&gpt2);

    // the trainer: a Llama checkpoint with that tokenizer.json samples text, one without it ids
    ASSERT_EQ(
        system((py + " test/llama_trainer_check.py " + dir + " " + kVal + " 4 32 > /dev/null 2>&1").c_str()),
        0);
    const std::string with = dir + "/llama_gqa2/model";
    ASSERT_EQ(system(("cp " + dir + "/tok/gpt2/tokenizer.json " + with + "/").c_str()), 0);
    const Args run = {"-b", "4", "-t", "32", "-i", kTrain, "-j", kVal,
                      "-x", "1", "-v", "0",  "-g", "12",   "-e"};
    const Result a = run_bin(kCpu, run + Args{with});
    ASSERT_EQ(a.code, 0) << a.cmd << "\n" << a.err << a.out;
    const std::regex ids("generating:\n---\n([0-9]+ )+\n---");
    EXPECT_FALSE(std::regex_search(a.out, ids)) << "text, not ids:\n" << a.out;
    EXPECT_TRUE(error_lines(a.err).empty() && !has(a.err, "warning")) << a.err;
    const Result b =
        run_bin(kCpu, run + Args{"llama:L1:C32:NH4:KV2:I48:T32:V50300"});  // not GPT-2's vocabulary
    ASSERT_EQ(b.code, 0) << b.cmd << "\n" << b.err << b.out;
    EXPECT_TRUE(std::regex_search(b.out, ids)) << "ids:\n" << b.out;
    if (!have_binary(kEmu)) return;  // train_gpt (emulated) decodes the same way
    const Result c = run_bin(kEmu, run + Args{with});
    ASSERT_EQ(c.code, 0) << c.cmd << "\n" << c.err << c.out;
    EXPECT_TRUE(has(c.out, "generating:")) << c.out;
    EXPECT_FALSE(std::regex_search(c.out, ids)) << "train_gpt: text, not ids:\n" << c.out;
    EXPECT_TRUE(error_lines(c.err).empty() && !has(c.err, "warning")) << c.err;
    const Result d = run_bin(kEmu, run + Args{"llama:L1:C32:NH4:KV2:I48:T32:V50300"});
    ASSERT_EQ(d.code, 0) << d.cmd << "\n" << d.err << d.out;
    EXPECT_TRUE(std::regex_search(d.out, ids)) << "train_gpt: ids:\n" << d.out;
}

// -E 1: the vocabulary tensors in host RAM, the head in chunks (VOCAB_CHUNK_ROWS 4096: 50257 rows in 13,
// the last short). train_gpt trains as with them on the GPU (losses within 2.5e-4 relative, test_gpu_llama's
// bound), resumes its own checkpoint bit for bit, plans the chunk buffers, and GPT-2 refuses -E 1.
// The default -E -1 moves them only when the GPU cannot hold them.
TEST_F(CliTest, GpuTrainsWithTheVocabularyOnTheHost) {
    if (!have_binary(kEmu)) GTEST_SKIP() << kEmu << " not built";
    const std::string out = dir + "/vocab";
    const Args run =
        kLlama + Args{"-b", "2", "-t", "16", "-x", "4", "-v", "0", "-g", "0"};  // small: emulated
    setenv("VOCAB_CHUNK_ROWS", "4096", 1);
    const Result gpu = run_bin(kEmu, run);
    const Result host = run_bin(kEmu, run + Args{"-E", "1", "-n", "2", "-o", out});
    ASSERT_EQ(gpu.code, 0) << gpu.cmd << "\n" << gpu.err << gpu.out;
    ASSERT_EQ(host.code, 0) << host.cmd << "\n" << host.err << host.out;
    const auto a = step_losses(gpu.out), b = step_losses(host.out);
    ASSERT_EQ(a.size(), 4u) << gpu.out;
    ASSERT_EQ(b.size(), 4u) << host.out;
    for (int s = 1; s <= 4; s++) {
        const double got = atof(b.at(s).c_str()), want = atof(a.at(s).c_str());
        EXPECT_LE(fabs(got - want), 2.5e-4 * want) << "step " << s << ": -E 1 " << got << ", -E 0 " << want;
    }
    ASSERT_EQ(unlink((out + "/DONE_00000004").c_str()), 0);
    const Result resumed = run_bin(kEmu, run + Args{"-E", "1", "-n", "2", "-o", out, "-y", "1"});
    unsetenv("VOCAB_CHUNK_ROWS");
    ASSERT_EQ(resumed.code, 0) << resumed.cmd << "\n" << resumed.err << resumed.out;
    const auto c = step_losses(resumed.out);
    ASSERT_EQ(c.size(), 2u) << resumed.out;
    for (int s = 3; s <= 4; s++) EXPECT_EQ(c.at(s), b.at(s)) << "step " << s << " after the resume";
    // -E -1 (the default) moves them only when the GPU's budget cannot hold them: here -V 1.3 leaves the
    // plan 51 MiB after the reserve and the margin, the embeddings and head with their AdamW state take 58
    const Result fit = run_bin(kEmu, kLlama + Args{"-x", "1", "-v", "0", "-g", "0", "-V", "1.3"});
    ASSERT_EQ(fit.code, 0) << fit.cmd << "\n" << fit.err << fit.out;
    EXPECT_TRUE(has(fit.out, "vocabulary tensors: in host RAM (-E -1")) << fit.out;
    EXPECT_FALSE(has(gpu.out, "vocabulary tensors: in host RAM")) << gpu.out;  // the default, with room
    const Result p = run_bin(kEmu, Args{"-e", "llama3-405b", "-b", "1", "-t", "4096", "-P", "1", "-E", "1"});
    ASSERT_TRUE(plan_printed(p.code, p.out)) << p.cmd << "\n" << p.err << p.out;
    EXPECT_TRUE(has(p.out, "vocabulary chunk buffers (-E 1)")) << p.out;
    EXPECT_TRUE(CleanError(
        run_bin(kEmu, Args{"-e", "d12", "-b", "1", "-t", "32", "-i", kTrain, "-j", kVal, "-E", "1"}),
        {"-E 1", "GPT-2"}));
}

// Issue 31's headline: -P 1 plans llama3-405b at 4,096 tokens per micro-batch within one 80 GB GPU (-V 79,
// an H100's usable memory) with -sd -sw 1 and at most 128 GiB of host RAM, llama3-70b within 64 GiB.
// -E -1 (the default) puts 405B's vocabulary tensors in host RAM by itself (70B's fit the GPU); the disk's
// bytes and traffic per step are printed.
TEST_F(CliTest, GpuPlansLlama405bOnOneGpuWithTheSsdTier) {
    if (!have_binary(kEmu)) GTEST_SKIP() << kEmu << " not built";
    const struct {
        const char* preset;
        double host_max_gib;
        bool vocab_on_host;  // -E -1's choice: 405B's 70 GiB of vocabulary tensors do not fit beside the rest
    } cases[] = {{"llama3-405b", 128, true}, {"llama3-70b", 64, false}};
    for (const auto& k : cases) {
        const Result p = run_bin(kEmu, Args{"-e", k.preset, "-b", "1", "-t", "4096", "-P", "1", "-sd",
                                            dir + "/ssd", "-sw", "1", "-V", "79"});
        ASSERT_TRUE(plan_printed(p.code, p.out)) << p.cmd << "\n" << p.err << p.out;  // this disk's space
        double host = -1, gpu = -1, disk = -1, read = -1, written = -1;
        std::istringstream lines(p.out);
        for (std::string l; std::getline(lines, l);) {
            sscanf(l.c_str(), "host %lf GiB:", &host);
            sscanf(l.c_str(), "GPU %lf GiB:", &gpu);
            if (sscanf(l.c_str(), "disk %lf GiB in", &disk) == 1) {
                const size_t at = l.find("per step ");
                ASSERT_NE(at, std::string::npos) << l;
                EXPECT_EQ(sscanf(l.c_str() + at, "per step %lf GiB read, %lf GiB written", &read, &written),
                          2)
                    << l;
            }
        }
        printf(
            "%s at 4096 tokens, -sd -sw 1 -V 79: host %.2f GiB, GPU %.2f GiB, disk %.2f GiB, per step %.2f "
            "GiB "
            "read, %.2f GiB written\n",
            k.preset, host, gpu, disk, read, written);
        EXPECT_GT(host, 0) << p.out;
        EXPECT_LE(host, k.host_max_gib) << p.out;
        EXPECT_GT(gpu, 0) << p.out;
        EXPECT_TRUE(
            std::regex_search(p.out, std::regex("\nGPU memory +[0-9.]+ GiB +79.00 GiB given by -V +fits\n")))
            << p.out;
        EXPECT_EQ(has(p.out, "vocabulary chunk buffers (-E 1)"), k.vocab_on_host) << p.out;
        EXPECT_GT(disk, 0) << p.out;
        EXPECT_GT(read, 0) << p.out;
        EXPECT_GT(written, 0) << p.out;
    }
}

// Issue 41: -P 1 advises. Llama 3 70B at 4,096 tokens needs 1047 GiB of host RAM in RAM; with -M 128 it does
// not fit, and the advice is the SSD tier with the bf16 weights on the drive: -sd DIR -sw 1 at 42.56 GiB
// (-sd alone keeps 140 GiB of pinned bf16 weights). Exit 2: the given flags do not fit, the advice does.
TEST_F(CliTest, GpuPlanAdvisesTheSsdTierWhereHostRamIsShort) {
    if (!have_binary(kEmu)) GTEST_SKIP() << kEmu << " not built";
    const Result p =
        run_bin(kEmu, Args{"-e", "llama3-70b", "-b", "1", "-t", "4096", "-P", "1", "-M", "128", "-V", "79"});
    EXPECT_EQ(p.code, 2) << p.cmd << "\n" << p.err << p.out;
    EXPECT_TRUE(std::regex_search(
        p.out, std::regex("\nhost RAM +1047.42 GiB +128.00 GiB given by -M +does NOT fit\n")))
        << p.out;
    EXPECT_TRUE(has(p.out, "advice: it does not fit host RAM; these do, the shortest step first:\n"))
        << p.out;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(
        p.out, m,
        std::regex("\n  -sd DIR -sw 1 +GPU ([0-9.]+) GiB, host ([0-9.]+) GiB, disk ([0-9.]+) GiB; step >= ")))
        << p.out;
    EXPECT_EQ(m[2].str(), "42.56") << p.out;
    EXPECT_LE(atof(m[1].str().c_str()), 79.0) << p.out;
    EXPECT_FALSE(has(p.out, "\n  -sd DIR  ")) << "-sd alone does not fit 128 GiB\n" << p.out;
}

// Issue 41: the table bounds a step. Llama 3 405B with -sd -sw 1 moves 6.4 TB from the disk and 6.4 TB to it
// a step (7.2 TB read before the round handed its bf16 output to the forward pass in pinned memory): at -sr
// 7,5 (GB/s) that takes longer than its compute, its PCIe copies or its CPU AdamW.
TEST_F(CliTest, GpuPlanBoundsTheStepOfLlama405bOnTheSsdTier) {
    if (!have_binary(kEmu)) GTEST_SKIP() << kEmu << " not built";
    const Result p = run_bin(kEmu, Args{"-e", "llama3-405b", "-b", "1", "-t", "4096", "-P", "1", "-sd",
                                        dir + "/ssd", "-sw", "1", "-V", "79", "-M", "128", "-sr", "7,5"});
    ASSERT_TRUE(plan_printed(p.code, p.out)) << p.cmd << "\n" << p.err << p.out;  // this disk's space
    std::smatch m;
    ASSERT_TRUE(std::regex_search(
        p.out, m,
        std::regex(
            "\ndisk r \\+ w +([0-9.]+) \\+ ([0-9.]+) GB +7.00 / 5.00 GB/s, given by -sr +([0-9.]+) s\n")))
        << p.out;
    const double read = atof(m[1].str().c_str()), written = atof(m[2].str().c_str());
    const double disk_s = atof(m[3].str().c_str());
    EXPECT_NEAR(disk_s, read / 7 + written / 5, 0.01 * disk_s) << p.out;
    EXPECT_NEAR(read, 6426.4, 1.0) << p.out;
    for (const char* row : {"\ncompute ", "\nPCIe up ", "\nPCIe down ", "\nCPU AdamW "}) {
        const size_t at = p.out.find(row);
        ASSERT_NE(at, std::string::npos) << row << "\n" << p.out;
        const std::string line = p.out.substr(at + 1, p.out.find('\n', at + 1) - at - 1);
        EXPECT_TRUE(has(line, "assumed")) << line;
        ASSERT_TRUE(std::regex_search(line, m, std::regex(" ([0-9.]+) s$"))) << line;
        EXPECT_LT(atof(m[1].str().c_str()), disk_s) << line;
    }
    ASSERT_TRUE(std::regex_search(
        p.out, m, std::regex("\nstep >= ([0-9.]+) s \\(bound by the disk\\), <= ([0-9.]+) tokens/s\n")))
        << p.out;
    EXPECT_EQ(atof(m[1].str().c_str()), disk_s) << p.out;
    EXPECT_NEAR(atof(m[2].str().c_str()), 4096 / disk_s, 0.01) << p.out;
}
