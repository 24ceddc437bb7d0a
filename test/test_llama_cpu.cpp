// test_llama_cpu.cpp — the CPU reference Llama (llama_cpu.h) and its Hugging Face loader (llama_hf.h):
//   - against transformers itself: tiny random LlamaForCausalLM / Qwen2ForCausalLM checkpoints made by
//     test/llama_check.py (GQA 1, 2 and 8, head sizes 64 and 128, tied and untied, llama3 RoPE scaling,
//     Qwen2's q/k/v biases, shards, bf16 and fp16): logits, loss and every parameter's gradient, and 3 AdamW
//     steps against torch.optim.AdamW. It needs Python with torch and transformers (.venv-hf): skipped where
//     they are missing, unless HF_REQUIRED=1, where that is a failure;
//   - half-precision checkpoints widen exactly; llama3 scaling changes the frequencies the cases use;
//   - checkpoints the model cannot compute are refused with one line naming the reason (no Python needed).
// Tests run from the repo root (test/run_tests.sh does).
#include <gtest/gtest.h>
#include <ftw.h>     // defines: nftw, FTW_DEPTH, FTW_PHYS
#include <math.h>    // defines: fabs, sqrt
#include <stdlib.h>  // defines: mkdtemp, system, getenv
#include <unistd.h>  // defines: access
#include <map>       // defines: std::map
// defines: llama_hf_load, llama_hf_places, LlamaCPU, llama_cpu_forward, llama_cpu_backward, llama_cpu_adamw,
// llama_rope_inv_freq; through hf.h: st_read_header, st_read_f32, json_parse, read_whole_file
#include "llmc/llama_hf.h"
#include "hf_cases.h"  // defines: HfCases, hf_cases_run, hf_cases_remove, NEED_HF_CASES

// ----------------------------------------------------------------------------
// Scratch directories

static int rm_entry(const char* path, const struct stat*, int, struct FTW*) { return remove(path); }
static void rm_tree(const std::string& dir) { nftw(dir.c_str(), rm_entry, 16, FTW_DEPTH | FTW_PHYS); }
static std::string make_temp_dir(const char* name) {
    std::string tmpl = std::string("/tmp/") + name + "_XXXXXX";
    return mkdtemp(&tmpl[0]) ? tmpl : std::string();
}
static bool has(const std::string& text, const std::string& needle) {
    return text.find(needle) != std::string::npos;
}

// ----------------------------------------------------------------------------
// The cases transformers made: test/llama_check.py runs once per test run, into a directory removed at exit

static HfCases& transformers_cases() {
    static HfCases tc = hf_cases_run("test/llama_check.py", "test_llama_cpu");
    return tc;
}

class CleanUpCases : public ::testing::Environment {
  public:
    void TearDown() override { hf_cases_remove(transformers_cases()); }
};
static ::testing::Environment* const kCleanUp = ::testing::AddGlobalTestEnvironment(new CleanUpCases);

// One case's expected values: meta.json and expected.safetensors.
struct Expected {
    int B = 0, T = 0;
    std::vector<int> inputs, targets;
    double loss = 0;
    Json meta;
    HfCheckpoint file;  // expected.safetensors' tensors: "logits", "grad.<name>"
};

static bool read_expected(const std::string& case_dir, Expected* e, std::string* why) {
    char err[1024];
    std::string text;
    const std::string meta = case_dir + "/meta.json", st = case_dir + "/expected.safetensors";
    if (!read_whole_file(meta.c_str(), 1 << 20, &text, err, sizeof err) ||
        !json_parse(text.data(), text.size(), &e->meta, err, sizeof err) ||
        !st_read_header(st.c_str(), 0, &e->file, err, sizeof err)) {
        *why = err;
        return false;
    }
    e->file.files.push_back(st);
    for (size_t k = 0; k < e->file.tensors.size(); k++) e->file.by_name[e->file.tensors[k].name] = k;
    e->B = (int)e->meta.get("B")->i;
    e->T = (int)e->meta.get("T")->i;
    e->loss = e->meta.get("loss")->num;
    for (const Json& v : e->meta.get("inputs")->items) e->inputs.push_back((int)v.i);
    for (const Json& v : e->meta.get("targets")->items) e->targets.push_back((int)v.i);
    return true;
}

// A tensor of expected.safetensors as fp32; empty when absent.
static std::vector<float> expected_tensor(const Expected& e, const std::string& name) {
    const auto it = e.file.by_name.find(name);
    if (it == e.file.by_name.end()) return {};
    const StTensor& t = e.file.tensors[it->second];
    std::vector<float> out((size_t)(t.bytes / 4));
    std::vector<uint16_t> half;
    char err[1024];
    if (!st_read_f32(&e.file, t, out.data(), half, err, sizeof err)) return {};
    return out;
}

// ||ours - theirs||_2 / ||theirs||_2, in double.
static double rel_l2(const float* ours, const float* theirs, size_t n) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < n; i++) {
        diff += ((double)ours[i] - theirs[i]) * ((double)ours[i] - theirs[i]);
        norm += (double)theirs[i] * theirs[i];
    }
    return sqrt(diff) / sqrt(norm);
}

// ----------------------------------------------------------------------------
// Against transformers: logits, loss and every gradient of one forward and backward pass

// Measured (2-core x86, Debian's torch 1.13 CPU, transformers 4.46.3); the test prints them per case:
//   case                             logits   loss     worst gradient (relative L2)
//   llama_gqa1_hs64_tied             1.22e-6  0        1.74e-6 (layers.1 q_proj)
//   llama_gqa2_hs128_untied_shards   1.06e-6  8.14e-8  1.82e-6 (layers.1 k_proj)
//   llama_gqa8_llama3                1.06e-6  8.21e-8  1.86e-6 (layers.1 k_proj)
//   qwen2_bias                       1.20e-6  0        2.11e-6 (layers.1 q_proj)
//   llama_bf16                       5.36e-7  8.81e-8  8.12e-7 (layers.0 q_proj)
//   llama_fp16                       5.07e-7  0        8.32e-7 (layers.0 q_proj)
// The bounds leave ~50x: both sides compute in fp32 from the same weights, only the order of sums differs.
static const double kLogitsRel = 1e-4, kLossRel = 1e-5, kGradRel = 1e-4;

class LlamaVsTransformers : public ::testing::TestWithParam<const char*> {};

TEST_P(LlamaVsTransformers, LogitsLossAndGradientsMatch) {
    NEED_HF_CASES(transformers_cases());
    const std::string case_dir = transformers_cases().dir + "/" + GetParam();
    Expected e;
    std::string why;
    ASSERT_TRUE(read_expected(case_dir, &e, &why)) << why;
    LlamaCPU model;
    ASSERT_TRUE(llama_hf_load((case_dir + "/model").c_str(), &model)) << model.error;
    const LlamaConfig& c = model.config;
    ASSERT_TRUE(llama_cpu_forward(&model, e.inputs.data(), e.targets.data(), e.B, e.T)) << model.error;
    ASSERT_TRUE(llama_cpu_backward(&model)) << model.error;

    // logits: max |diff| over positions and vocabulary, against the largest |logit|
    const std::vector<float> logits = expected_tensor(e, "logits");
    const size_t n_logits = (size_t)e.B * e.T * c.vocab_size;
    ASSERT_EQ(logits.size(), n_logits);
    double max_diff = 0, max_logit = 0;
    for (size_t i = 0; i < n_logits; i++) {
        max_diff = std::max(max_diff, fabs((double)model.acts.logits[i] - logits[i]));
        max_logit = std::max(max_logit, fabs((double)logits[i]));
    }
    const double logits_rel = max_diff / max_logit;
    const double loss_rel = fabs(model.mean_loss - e.loss) / fabs(e.loss);
    EXPECT_LT(logits_rel, kLogitsRel);
    EXPECT_LT(loss_rel, kLossRel) << "ours " << model.mean_loss << ", transformers " << e.loss;

    // every parameter's gradient, by its transformers name; none of theirs left over
    double worst = 0;
    std::string worst_name;
    size_t compared = 0;
    for (const LlamaHfPlace& pl : llama_hf_places(&c)) {
        const std::vector<float> g = expected_tensor(e, "grad." + pl.name);
        const size_t n = (size_t)(pl.rows * (pl.cols ? pl.cols : 1));
        ASSERT_EQ(g.size(), n) << "grad." << pl.name;
        const double rel = rel_l2(model.grads + pl.offset, g.data(), n);
        EXPECT_LT(rel, kGradRel) << pl.name;
        if (rel > worst) worst = rel, worst_name = pl.name;
        compared++;
    }
    EXPECT_EQ(compared + 1, e.file.tensors.size()) << "gradients in expected.safetensors that we do not have";
    printf("%s: logits %.2e, loss %.2e, worst gradient %.2e (%s), %zu gradients\n", GetParam(), logits_rel,
           loss_rel, worst, worst_name.c_str(), compared);
    llama_cpu_free(&model);
}

INSTANTIATE_TEST_SUITE_P(Cases, LlamaVsTransformers,
                         ::testing::Values("llama_gqa1_hs64_tied", "llama_gqa2_hs128_untied_shards",
                                           "llama_gqa8_llama3", "qwen2_bias", "llama_bf16", "llama_fp16"));

// The configs behind those cases, as the loader reads them: what each case is meant to cover.
TEST(LlamaVsTransformersConfigs, CoverWhatTheyAreNamedFor) {
    NEED_HF_CASES(transformers_cases());
    struct Want {
        const char* name;
        int nh, nkv, hd, tied, llama3, bias;
    } wants[] = {{"llama_gqa1_hs64_tied", 4, 4, 64, 1, 0, 0},
                 {"llama_gqa2_hs128_untied_shards", 4, 2, 128, 0, 0, 0},
                 {"llama_gqa8_llama3", 8, 1, 64, 0, 1, 0},
                 {"qwen2_bias", 4, 2, 64, 1, 0, 1}};
    for (const Want& w : wants) {
        LlamaCPU m;
        const std::string dir = transformers_cases().dir + "/" + w.name + "/model";
        ASSERT_TRUE(llama_hf_load(dir.c_str(), &m)) << m.error;
        EXPECT_EQ(m.config.num_heads, w.nh) << w.name;
        EXPECT_EQ(m.config.num_kv_heads, w.nkv) << w.name;
        EXPECT_EQ(m.config.head_dim, w.hd) << w.name;
        EXPECT_EQ(m.config.tied_embeddings, w.tied) << w.name;
        EXPECT_EQ(m.config.rope_llama3, w.llama3) << w.name;
        EXPECT_EQ(m.config.qkv_bias, w.bias) << w.name;
        if (w.bias) {
            EXPECT_EQ(m.config.rope_theta, 1e6f);
            EXPECT_EQ(m.config.rms_norm_eps, 1e-6f);
        }
        llama_cpu_free(&m);
    }
    EXPECT_TRUE(access((transformers_cases().dir + "/llama_gqa2_hs128_untied_shards/model/"
                                                   "model.safetensors.index.json")
                           .c_str(),
                       F_OK) == 0);
}

// A bf16 or fp16 checkpoint loads as the fp32 values it stands for: bit for bit those of the same model
// saved as fp32 by transformers (widened/).
class HalfPrecision : public ::testing::TestWithParam<const char*> {};

TEST_P(HalfPrecision, WidensExactly) {
    NEED_HF_CASES(transformers_cases());
    const std::string case_dir = transformers_cases().dir + "/" + GetParam();
    HfCheckpoint ck;
    char err[1024];
    ASSERT_TRUE(hf_open((case_dir + "/model").c_str(), &ck, err, sizeof err)) << err;
    const StDtype want = strcmp(GetParam(), "llama_bf16") == 0 ? ST_BF16 : ST_F16;
    for (const StTensor& t : ck.tensors) EXPECT_EQ(t.dtype, want) << t.name;
    LlamaCPU half, wide;
    ASSERT_TRUE(llama_hf_load((case_dir + "/model").c_str(), &half)) << half.error;
    ASSERT_TRUE(llama_hf_load((case_dir + "/widened").c_str(), &wide)) << wide.error;
    ASSERT_EQ(half.layout.total, wide.layout.total);
    EXPECT_EQ(memcmp(half.params, wide.params, (size_t)half.layout.total * sizeof(float)), 0);
    llama_cpu_free(&half);
    llama_cpu_free(&wide);
}

INSTANTIATE_TEST_SUITE_P(Cases, HalfPrecision, ::testing::Values("llama_bf16", "llama_fp16"));

// ----------------------------------------------------------------------------
// 3 AdamW steps against torch.optim.AdamW (llm.c's groups: 2-D tensors decay), same batch every step.
// lr 1e-3, betas (0.9, 0.95), eps 1e-8, weight decay 0.1. Measured, worst of the 4 losses (before each step,
// after the last): llama_gqa8_llama3 3.54e-7, qwen2_bias 9.91e-7 relative (bound 1e-5).
// At lr 1e-2 they were 1.2e-5 and 3.1e-5: steps that large amplify the fp32 rounding of the gradients.

class LlamaAdamW : public ::testing::TestWithParam<const char*> {};

TEST_P(LlamaAdamW, ThreeStepsMatchTorch) {
    NEED_HF_CASES(transformers_cases());
    const std::string case_dir = transformers_cases().dir + "/" + GetParam();
    Expected e;
    std::string why;
    ASSERT_TRUE(read_expected(case_dir, &e, &why)) << why;
    const Json* hp = e.meta.get("adamw");
    ASSERT_TRUE(hp && hp->type == Json::OBJ);
    LlamaCPU model;
    ASSERT_TRUE(llama_hf_load((case_dir + "/model").c_str(), &model)) << model.error;
    std::vector<float> m((size_t)model.layout.total, 0.0f), v((size_t)model.layout.total, 0.0f);
    const int steps = (int)hp->get("steps")->i;
    const std::vector<Json>& theirs = hp->get("losses")->items;
    ASSERT_EQ((int)theirs.size(), steps + 1);
    double worst = 0;
    for (int s = 0; s <= steps; s++) {
        llama_cpu_zero_grad(&model);
        ASSERT_TRUE(llama_cpu_forward(&model, e.inputs.data(), e.targets.data(), e.B, e.T)) << model.error;
        const double rel = fabs(model.mean_loss - theirs[s].num) / fabs(theirs[s].num);
        EXPECT_LT(rel, kLossRel) << "loss " << s << ": ours " << model.mean_loss << ", torch "
                                 << theirs[s].num;
        worst = std::max(worst, rel);
        if (s == steps) break;
        ASSERT_TRUE(llama_cpu_backward(&model)) << model.error;
        const AdamWArgs args = {(float)hp->get("lr")->num,
                                (float)hp->get("beta1")->num,
                                (float)hp->get("beta2")->num,
                                (float)hp->get("eps")->num,
                                (float)hp->get("weight_decay")->num,
                                1.0f,
                                (int64_t)s + 1};
        llama_cpu_adamw(&model, m.data(), v.data(), &args);
    }
    EXPECT_TRUE(std::isfinite(theirs[steps].num));
    EXPECT_NE(theirs[steps].num, theirs[0].num) << "the steps changed nothing";
    printf("%s: %d AdamW steps, losses %.6f -> %.6f, worst loss %.2e relative\n", GetParam(), steps,
           theirs[0].num, theirs[steps].num, worst);
    llama_cpu_free(&model);
}

INSTANTIATE_TEST_SUITE_P(Cases, LlamaAdamW, ::testing::Values("llama_gqa8_llama3", "qwen2_bias"));

// ----------------------------------------------------------------------------
// llama3 RoPE scaling at llama_check.py's shape (hd 64, theta 1e4, original 32; its T is 48): each band of
// the rule occurs (pair 0's wavelength 2 pi is under 32 / high_freq_factor 4: kept), so the case checks them
// all.
TEST(LlamaRope, Llama3ScalingUsesEveryBand) {
    LlamaConfig c;
    memset(&c, 0, sizeof c);
    c.head_dim = 64;
    c.rope_theta = 10000.0f;
    std::vector<float> plain(32), scaled(32);
    llama_rope_inv_freq(&c, plain.data());
    c.rope_llama3 = 1;
    c.rope_factor = 8.0f;
    c.rope_low_freq_factor = 1.0f;
    c.rope_high_freq_factor = 4.0f;
    c.rope_original_max_pos = 32;
    llama_rope_inv_freq(&c, scaled.data());
    int kept = 0, divided = 0, smoothed = 0;
    for (int i = 0; i < 32; i++) {
        if (scaled[i] == plain[i]) kept++;
        else if (fabsf(scaled[i] - plain[i] / 8.0f) <= 1e-6f * plain[i]) divided++;
        else {
            smoothed++;
            EXPECT_GT(scaled[i], plain[i] / 8.0f) << i;
            EXPECT_LT(scaled[i], plain[i]) << i;
        }
    }
    EXPECT_EQ(kept, 1);
    EXPECT_EQ(smoothed, 5);
    EXPECT_EQ(divided, 26);
}

// ----------------------------------------------------------------------------
// Refusals: small checkpoints written here (config.json + one safetensors file of the right names)

// config.json as key -> raw JSON value
typedef std::map<std::string, std::string> ConfigJson;

static ConfigJson llama_config_json() {
    return {{"architectures", "[\"LlamaForCausalLM\"]"},
            {"model_type", "\"llama\""},
            {"hidden_size", "8"},
            {"intermediate_size", "16"},
            {"num_hidden_layers", "1"},
            {"num_attention_heads", "2"},
            {"num_key_value_heads", "1"},
            {"head_dim", "4"},
            {"vocab_size", "10"},
            {"max_position_embeddings", "16"},
            {"rms_norm_eps", "1e-05"},
            {"rope_theta", "10000.0"},
            {"rope_scaling", "null"},
            {"hidden_act", "\"silu\""},
            {"tie_word_embeddings", "false"}};
}
static ConfigJson qwen2_config_json() {
    ConfigJson c = llama_config_json();
    c.erase("head_dim");
    c["architectures"] = "[\"Qwen2ForCausalLM\"]";
    c["model_type"] = "\"qwen2\"";
    c["use_sliding_window"] = "false";
    c["sliding_window"] = "null";
    return c;
}

struct StEntry {
    std::string name;
    std::vector<int64_t> shape;
    float value;
};

// The tensors the loader wants for the config (llama_hf_places), every element `value`.
static std::vector<StEntry> tensors_for(const LlamaConfig& c, float value = 0.01f) {
    std::vector<StEntry> out;
    for (const LlamaHfPlace& pl : llama_hf_places(&c)) {
        std::vector<int64_t> shape = {pl.rows};
        if (pl.cols) shape.push_back(pl.cols);
        out.push_back({pl.name, shape, value});
    }
    return out;
}

static bool write_checkpoint(const std::string& dir, const ConfigJson& cfg,
                             const std::vector<StEntry>& tensors) {
    std::string json = "{";
    for (const auto& kv : cfg) json += (json.size() > 1 ? ", \"" : "\"") + kv.first + "\": " + kv.second;
    json += "}";
    FILE* f = fopen((dir + "/config.json").c_str(), "w");
    if (!f) return false;
    fputs(json.c_str(), f);
    fclose(f);
    std::string header = "{";
    int64_t offset = 0;
    std::vector<float> data;
    for (const StEntry& t : tensors) {
        int64_t n = 1;
        std::string shape;
        for (int64_t d : t.shape) n *= d, shape += (shape.empty() ? "" : ",") + std::to_string(d);
        header += (header.size() > 1 ? ", \"" : "\"") + t.name + "\": {\"dtype\": \"F32\", \"shape\": [" +
                  shape + "], \"data_offsets\": [" + std::to_string(offset) + ", " +
                  std::to_string(offset + 4 * n) + "]}";
        offset += 4 * n;
        data.insert(data.end(), (size_t)n, t.value);
    }
    header += "}";
    while (header.size() % 8) header += ' ';
    f = fopen((dir + "/model.safetensors").c_str(), "wb");
    if (!f) return false;
    unsigned char len8[8];
    for (int k = 0; k < 8; k++) len8[k] = (unsigned char)((uint64_t)header.size() >> (8 * k));
    bool ok = fwrite(len8, 1, 8, f) == 8 && fwrite(header.data(), 1, header.size(), f) == header.size() &&
              fwrite(data.data(), 4, data.size(), f) == data.size();
    return fclose(f) == 0 && ok;
}

class LlamaHfRefusal : public ::testing::Test {
  protected:
    std::string dir;
    LlamaConfig llama, qwen2;  // what llama_config_json / qwen2_config_json describe
    void SetUp() override {
        dir = make_temp_dir("test_llama_hf");
        ASSERT_FALSE(dir.empty());
        memset(&llama, 0, sizeof llama);
        llama.num_layers = 1, llama.hidden_size = 8, llama.num_heads = 2, llama.num_kv_heads = 1;
        llama.head_dim = 4, llama.intermediate_size = 16, llama.vocab_size = 10, llama.max_seq_len = 16;
        qwen2 = llama;
        qwen2.qkv_bias = 1;
    }
    void TearDown() override { rm_tree(dir); }
    // Loads dir after writing cfg and tensors; the error when it is refused, "" when it loads.
    std::string load(const ConfigJson& cfg, const std::vector<StEntry>& tensors) {
        if (!write_checkpoint(dir, cfg, tensors)) return "(could not write the checkpoint)";
        LlamaCPU m;
        if (llama_hf_load(dir.c_str(), &m)) {
            llama_cpu_free(&m);
            return "";
        }
        return m.error;
    }
    // The checkpoint is refused with one line holding every needle.
    void expect_refused(const ConfigJson& cfg, const std::vector<StEntry>& tensors,
                        std::initializer_list<const char*> needles) {
        const std::string err = load(cfg, tensors);
        ASSERT_FALSE(err.empty()) << "loaded, but should be refused";
        EXPECT_FALSE(has(err, "\n")) << err;
        for (const char* n : needles) EXPECT_TRUE(has(err, n)) << "'" << n << "' not in: " << err;
        printf("refused: %s\n", err.c_str());
    }
};

TEST_F(LlamaHfRefusal, TheBaseCheckpointsLoad) {
    EXPECT_EQ(load(llama_config_json(), tensors_for(llama)), "");
    EXPECT_EQ(load(qwen2_config_json(), tensors_for(qwen2)), "");
    ConfigJson c = llama_config_json();
    c["rope_scaling"] = "{\"rope_type\": \"default\"}";
    EXPECT_EQ(load(c, tensors_for(llama)), "");
    c["rope_scaling"] =
        "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
        "\"original_max_position_embeddings\": 8192}";
    EXPECT_EQ(load(c, tensors_for(llama)), "");
    // tied: lm_head.weight absent, or present and equal to the embedding
    c = llama_config_json();
    c["tie_word_embeddings"] = "true";
    LlamaConfig tied = llama;
    tied.tied_embeddings = 1;
    std::vector<StEntry> t = tensors_for(tied);
    EXPECT_EQ(load(c, t), "");
    t.push_back({"lm_head.weight", {10, 8}, 0.01f});
    EXPECT_EQ(load(c, t), "");
}

TEST_F(LlamaHfRefusal, OtherModelTypesAndArchitectures) {
    ConfigJson c = llama_config_json();
    c["model_type"] = "\"mistral\"";
    expect_refused(c, tensors_for(llama), {"config.json", "model_type 'mistral'", "llama and qwen2"});
    c = llama_config_json();
    c["architectures"] = "[\"LlamaModel\"]";
    expect_refused(c, tensors_for(llama), {"architectures", "LlamaModel"});
    c = qwen2_config_json();
    c["architectures"] = "[\"LlamaForCausalLM\"]";  // qwen2 weights under Llama's class: not what it says
    expect_refused(c, tensors_for(qwen2), {"architectures", "Qwen2ForCausalLM"});
}

TEST_F(LlamaHfRefusal, SlidingWindow) {
    ConfigJson c = qwen2_config_json();
    c["use_sliding_window"] = "true";
    c["sliding_window"] = "4";
    expect_refused(c, tensors_for(qwen2), {"use_sliding_window is true", "full causal attention"});
}

TEST_F(LlamaHfRefusal, RopeScalingOtherThanLlama3) {
    ConfigJson c = llama_config_json();
    c["rope_scaling"] = "{\"rope_type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 8}";
    expect_refused(c, tensors_for(llama), {"rope_scaling type 'yarn'", "only llama3"});
    c["rope_scaling"] = "{\"type\": \"linear\", \"factor\": 2.0}";
    expect_refused(c, tensors_for(llama), {"rope_scaling type 'linear'"});
    c["rope_scaling"] = "{\"rope_type\": \"llama3\", \"factor\": 8.0}";
    expect_refused(c, tensors_for(llama), {"llama3 needs", "low_freq_factor"});
}

TEST_F(LlamaHfRefusal, MixtureOfExperts) {
    ConfigJson c = llama_config_json();
    c["num_local_experts"] = "8";
    c["num_experts_per_tok"] = "2";
    expect_refused(c, tensors_for(llama), {"num_local_experts is set", "mixture-of-experts"});
    c = qwen2_config_json();
    c["num_experts"] = "4";
    expect_refused(c, tensors_for(qwen2), {"num_experts is set", "mixture-of-experts"});
}

TEST_F(LlamaHfRefusal, OtherMathInTheConfig) {
    ConfigJson c = llama_config_json();
    c["hidden_act"] = "\"gelu\"";
    expect_refused(c, tensors_for(llama), {"hidden_act is not silu"});
    c["hidden_act"] = "\"swish\"";  // transformers computes it as SiLU (it was refused: a second trial)
    EXPECT_EQ(load(c, tensors_for(llama)), "");
    c = llama_config_json();
    c["attention_bias"] = "true";
    expect_refused(c, tensors_for(llama), {"attention_bias is true", "o_proj"});
    c = llama_config_json();
    c["num_key_value_heads"] = "3";  // 2 query heads
    expect_refused(c, tensors_for(llama), {"key/value heads must divide"});
}

TEST_F(LlamaHfRefusal, MissingMisshapedOrForeignTensors) {
    std::vector<StEntry> t = tensors_for(llama);
    t.erase(std::remove_if(t.begin(), t.end(), [](const StEntry& e) { return has(e.name, "0.mlp.up_proj"); }),
            t.end());
    expect_refused(llama_config_json(), t, {"tensor 'model.layers.0.mlp.up_proj.weight' is missing"});
    t = tensors_for(llama);
    for (StEntry& e : t)
        if (e.name == "model.layers.0.self_attn.k_proj.weight") e.shape = {8, 8};
    expect_refused(llama_config_json(), t, {"k_proj.weight' has shape (8, 8), config.json implies (4, 8)"});
    t = tensors_for(llama);
    t.push_back({"model.layers.0.self_attn.o_proj.bias", {8}, 0.0f});
    expect_refused(llama_config_json(), t, {"o_proj.bias' is not part of"});
    t = tensors_for(llama);  // untied: lm_head is needed
    t.erase(std::remove_if(t.begin(), t.end(), [](const StEntry& e) { return e.name == "lm_head.weight"; }),
            t.end());
    expect_refused(llama_config_json(), t, {"tensor 'lm_head.weight' is missing"});
    expect_refused(qwen2_config_json(), tensors_for(llama), {"q_proj.bias' is missing"});
}

TEST_F(LlamaHfRefusal, TiedHeadThatDiffersOrNonFiniteWeights) {
    ConfigJson c = llama_config_json();
    c["tie_word_embeddings"] = "true";
    LlamaConfig tied = llama;
    tied.tied_embeddings = 1;
    std::vector<StEntry> t = tensors_for(tied);
    t.push_back({"lm_head.weight", {10, 8}, 0.02f});
    expect_refused(c, t, {"lm_head.weight differs from model.embed_tokens.weight"});
    t = tensors_for(llama);
    t[3].value = NAN;
    expect_refused(llama_config_json(), t, {t[3].name.c_str(), "holds nan"});
}
