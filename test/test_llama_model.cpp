// test_llama_model.cpp — llama_model.h: presets against the published parameter counts, specs, seeded init,
// and model files (round trip, windows, train_gpt -sd's streamed save, checksums, refusals). CPU only.
#include <gtest/gtest.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>
#include <string>
#include <vector>
#include "llmc/checkpoint.h"  // defines: file_crc32c, StreamedState, llama_save_model_streamed
#include "llmc/llama_model.h"  // defines: llama_presets, parse_llama_spec, llama_init_params, llama_save_params

namespace {

std::string temp_path(const char* name) {
    char dir[] = "/tmp/test_llama_model.XXXXXX";
    EXPECT_NE(mkdtemp(dir), nullptr);
    return std::string(dir) + "/" + name;
}

LlamaConfig spec(const char* s) {
    LlamaConfig c;
    char err[600] = "";
    EXPECT_EQ(parse_llama_spec(s, &c, err, sizeof err), 1) << s << ": " << err;
    return c;
}

std::string refusal(const char* s) {
    LlamaConfig c;
    char err[600] = "";
    EXPECT_EQ(parse_llama_spec(s, &c, err, sizeof err), 0) << s;
    return err;
}

}  // namespace

// The model cards' counts (config.json shapes through transformers' num_parameters()).
TEST(LlamaModel, PresetsHaveThePublishedParameterCounts) {
    const struct {
        const char* name;
        int64_t params;
    } want[] = {{"llama3.2-1b", 1235814400LL},   {"llama3-8b", 8030261248LL},   {"llama3-70b", 70553706496LL},
                {"llama3-405b", 405853388800LL}, {"qwen2.5-0.5b", 494032768LL}, {"qwen2.5-7b", 7615616512LL},
                {"qwen2.5-72b", 72706203648LL}};
    for (const auto& w : want) {
        const LlamaConfig c = spec(w.name);
        EXPECT_EQ(llama_num_params(&c), w.params) << w.name;
    }
    const LlamaConfig l = spec("llama3-405b");
    EXPECT_EQ(l.num_kv_heads, 8);
    EXPECT_EQ(l.rope_llama3, 1);
    EXPECT_FLOAT_EQ(l.rope_factor, 8.0f);
    EXPECT_EQ(l.rope_original_max_pos, 8192);
    const LlamaConfig q = spec("QWEN2.5-72B");  // names are case-blind, as GPT-2's presets
    EXPECT_EQ(q.qkv_bias, 1);
    EXPECT_FLOAT_EQ(q.rms_norm_eps, 1e-6f);
    EXPECT_FLOAT_EQ(q.rope_theta, 1e6f);
    EXPECT_EQ(q.rope_llama3, 0);
}

TEST(LlamaModel, SpecsOverridePresetsAndDescribeFamilies) {
    LlamaConfig c = spec("llama3-8b:L2");
    EXPECT_EQ(c.num_layers, 2);
    EXPECT_EQ(c.hidden_size, 4096);
    EXPECT_EQ(c.head_dim, 128);
    c = spec("llama3-8b:C256:NH4:KV2:I512:L1");  // a narrower 8B: the head size follows C / NH
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_EQ(c.num_kv_heads, 2);
    c = spec("llama:L2:C64:NH4:KV2:I128:V300:T64");
    EXPECT_EQ(c.head_dim, 16);
    EXPECT_EQ(c.vocab_size, 300);
    EXPECT_EQ(c.max_seq_len, 64);
    EXPECT_EQ(c.qkv_bias, 0);
    EXPECT_EQ(c.tied_embeddings, 0);
    c = spec("llama:L1:C64:NH4:I96:TIE1:HD32");  // head size apart from C / NH, as Gemma-like shapes
    EXPECT_EQ(c.tied_embeddings, 1);
    EXPECT_EQ(c.head_dim, 32);
    EXPECT_EQ(c.num_kv_heads, 4);  // a family without KV: multi-head attention
    c = spec("qwen2:L1:C32:NH4:KV1:I64");
    EXPECT_EQ(c.qkv_bias, 1);
    EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
    EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);

    LlamaConfig none;
    char err[600];
    for (const char* other : {"d12", "124m", "L4:C128:NH4", "log/model.bin", "./llama3-8b"})
        EXPECT_EQ(parse_llama_spec(other, &none, err, sizeof err), 2) << other;
    EXPECT_NE(refusal("llama:L2:C64").find("needs L<n>:C<n>:NH<n>:I<n>"), std::string::npos);
    EXPECT_NE(refusal("llama3-8b:X3").find("bad part 'X3'"), std::string::npos);
    EXPECT_NE(refusal("llama3-8b:NH12:HD128").find("key/value heads must divide"), std::string::npos);
    EXPECT_NE(refusal("llama3-8b:NH12").find("C (4096) is not divisible by the head count (12)"),
              std::string::npos);
    EXPECT_NE(refusal("llama3-8b:KV2:KV4").find("KV is given twice"), std::string::npos);
    EXPECT_NE(refusal("llama:L1:C64:NH4:I96:TIE2").find("TIE and BIAS are 0 or 1"), std::string::npos);
    EXPECT_NE(refusal("llama3-8b:NH0").find("NH must be positive"), std::string::npos);
    EXPECT_NE(refusal("llama:L1:C66:NH6:I96").find("head size must be even"), std::string::npos);
    EXPECT_NE(refusal("llama3-8b:L999999").find("too large"), std::string::npos);
}

TEST(LlamaModel, InitIsSeededAndAsDocumented) {
    const LlamaConfig c = spec("qwen2:L2:C64:NH4:KV2:I128:V512");
    const LlamaLayout p = llama_layout(&c);
    std::vector<float> a(p.total), b(p.total), other(p.total);
    llama_init_params(&c, a.data(), 7);
    llama_init_params(&c, b.data(), 7);
    llama_init_params(&c, other.data(), 8);
    EXPECT_EQ(memcmp(a.data(), b.data(), a.size() * 4), 0) << "the same seed gives the same bits";
    EXPECT_NE(memcmp(a.data(), other.data(), a.size() * 4), 0);
    for (int l = 0; l < 2; l++) {
        LlamaLayerTensors w = llama_layer_tensors(&p, a.data(), l);
        for (int i = 0; i < 64; i++) EXPECT_EQ(w.attn_norm[i], 1.0f);
        for (int i = 0; i < 64; i++) EXPECT_EQ(w.bq[i], 0.0f);
        double s = 0;
        for (int64_t i = 0; i < p.layer_size[LL_W_GATE]; i++) s += (double)w.w_gate[i] * w.w_gate[i];
        // 8192 samples of N(0, 0.02): the sample std is within 3% of 0.02 with probability > 0.999
        EXPECT_NEAR(sqrt(s / p.layer_size[LL_W_GATE]), 0.02, 0.02 * 0.03);
    }
    LlamaEmbedTensors e = llama_embed_tensors(&p, a.data());
    EXPECT_EQ(e.final_norm[0], 1.0f);
    EXPECT_NE(e.lm_head, e.embed) << "untied: a head of its own";
}

TEST(LlamaModel, ModelFilesRoundTripWithTheirChecksum) {
    const LlamaConfig c = spec("llama:L2:C64:NH4:KV2:I96:V300:T128:TIE1");
    const LlamaLayout p = llama_layout(&c);
    std::vector<float> w(p.total), back(p.total);
    llama_init_params(&c, w.data(), 3);
    const std::string path = temp_path("m.bin");
    char err[600] = "";
    uint32_t crc = 0;
    ASSERT_TRUE(llama_save_params(path.c_str(), &c, w.data(), err, sizeof err, &crc)) << err;
    EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0) << "the temporary file is renamed away";
    EXPECT_TRUE(llama_is_model_file(path.c_str()));
    LlamaConfig r;
    ASSERT_TRUE(llama_read_header(path.c_str(), &r, err, sizeof err)) << err;
    EXPECT_EQ(memcmp(&r, &c, sizeof c), 0) << "every config field, floats bit for bit";
    ASSERT_TRUE(llama_load_params(path.c_str(), &r, back.data(), err, sizeof err)) << err;
    EXPECT_EQ(memcmp(w.data(), back.data(), w.size() * 4), 0);
    int64_t bytes = 0;
    uint32_t file_crc = 0;
    ASSERT_TRUE(file_crc32c(path.c_str(), &bytes, &file_crc, err, sizeof err)) << err;
    EXPECT_EQ(file_crc, crc) << "the CRC computed while writing is the file's";
    EXPECT_EQ(bytes, 1024 + 4 * p.total);
    // a window (train_gpt -sd reads a layer, the embeddings): only those floats, at the window's start
    std::vector<float> layer1(p.layer_stride, -1.0f);
    ASSERT_TRUE(llama_load_params(path.c_str(), &r, layer1.data(), err, sizeof err, p.layer_stride,
                                  2 * p.layer_stride))
        << err;
    EXPECT_EQ(memcmp(layer1.data(), w.data() + p.layer_stride, layer1.size() * 4), 0);
    std::vector<float> one(p.layer_stride);
    llama_init_layer(&c, 1, one.data(), 3);
    EXPECT_EQ(memcmp(layer1.data(), one.data(), one.size() * 4), 0) << "llama_init_layer: the same numbers";
}

// train_gpt -sd's checkpoint: the prefix [embeddings | layer 0] in RAM, layer 1 from a store; the file is
// the one llama_save_params writes of the whole model, checksum included.
TEST(LlamaModel, StreamedSaveWritesTheSameModelFile) {
    const LlamaConfig c = spec("llama:L2:C64:NH4:KV2:I96:V300:T128");
    const LlamaLayout p = llama_layout(&c);
    std::vector<float> w(p.total);
    llama_init_params(&c, w.data(), 3);
    const int64_t embed_count = p.total - p.embed_base;
    std::vector<float> prefix(w.begin() + p.embed_base, w.end());  // train_gpt's order: embeddings first
    prefix.insert(prefix.end(), w.begin(), w.begin() + p.layer_stride);
    ASSERT_EQ((int64_t)prefix.size(), embed_count + p.layer_stride);
    const std::string whole = temp_path("whole.bin"), streamed = temp_path("streamed.bin");
    char err[600] = "";
    uint32_t crc = 0, crc2 = 0;
    ASSERT_TRUE(llama_save_params(whole.c_str(), &c, w.data(), err, sizeof err, &crc)) << err;
    struct Store {
        const float* w;
        int64_t stride;
    } store = {w.data(), p.layer_stride};
    auto read_layer = [](void* ctx, int l, float* params, char*, size_t) {
        const Store* st = (const Store*)ctx;
        memcpy(params, st->w + l * st->stride, (size_t)st->stride * 4);
        return 1;
    };
    const StreamedState ss = {(int64_t)prefix.size(), 1, 1, read_layer, &store, nullptr, nullptr, 0};
    ASSERT_TRUE(llama_save_model_streamed(streamed.c_str(), &c, prefix.data(), &ss, &crc2, err, sizeof err))
        << err;
    EXPECT_EQ(crc2, crc);
    int64_t bytes = 0;
    uint32_t file_crc = 0;
    ASSERT_TRUE(file_crc32c(streamed.c_str(), &bytes, &file_crc, err, sizeof err)) << err;
    EXPECT_EQ(file_crc, crc);
    EXPECT_EQ(bytes, 1024 + 4 * p.total);
}

TEST(LlamaModel, BadModelFilesAreRefusedWithTheReason) {
    const LlamaConfig c = spec("llama:L1:C32:NH4:KV2:I64:V100:T32");
    const LlamaLayout p = llama_layout(&c);
    std::vector<float> w(p.total);
    llama_init_params(&c, w.data(), 3);
    const std::string path = temp_path("m.bin");
    char err[600] = "";
    ASSERT_TRUE(llama_save_params(path.c_str(), &c, w.data(), err, sizeof err));
    auto patch = [&](long at, const void* bytes, size_t n) {
        FILE* f = fopen(path.c_str(), "r+b");
        ASSERT_NE(f, nullptr);
        fseek(f, at, SEEK_SET);
        fwrite(bytes, 1, n, f);
        fclose(f);
    };
    LlamaConfig r;
    auto header_error = [&]() {
        err[0] = 0;
        EXPECT_FALSE(llama_read_header(path.c_str(), &r, err, sizeof err));
        return std::string(err);
    };
    int32_t v = 3;  // a KV head count that does not divide 4
    patch(5 * 4, &v, 4);
    EXPECT_NE(header_error().find("key/value heads must divide"), std::string::npos) << err;
    v = 2;
    patch(5 * 4, &v, 4);
    v = 9;
    patch(17 * 4, &v, 4);
    EXPECT_NE(header_error().find("a flag is not 0 or 1"), std::string::npos) << err;
    v = 0;
    patch(17 * 4, &v, 4);
    v = 2;
    patch(4, &v, 4);
    EXPECT_NE(header_error().find("unsupported version 2"), std::string::npos) << err;
    v = LLAMA_MODEL_VERSION;
    patch(4, &v, 4);
    v = 20240326;  // a GPT-2 llm.c file's magic
    patch(0, &v, 4);
    EXPECT_NE(header_error().find("not a Llama-family model file"), std::string::npos) << err;
    EXPECT_FALSE(llama_is_model_file(path.c_str()));
    v = LLAMA_MODEL_MAGIC;
    patch(0, &v, 4);
    const float nan = NAN;
    patch(1024 + 4 * 5, &nan, 4);
    ASSERT_TRUE(llama_read_header(path.c_str(), &r, err, sizeof err)) << err;
    std::vector<float> back(p.total);
    EXPECT_FALSE(llama_load_params(path.c_str(), &r, back.data(), err, sizeof err));
    EXPECT_NE(std::string(err).find("parameter 5 is NaN"), std::string::npos) << err;
    ASSERT_EQ(truncate(path.c_str(), 1024 + 4 * (p.total - 1)), 0);
    EXPECT_NE(header_error().find("truncated or not this format"), std::string::npos) << err;
    EXPECT_NE(llama_read_header("/nonexistent/m.bin", &r, err, sizeof err), 1);
    EXPECT_NE(std::string(err).find("cannot open model file"), std::string::npos) << err;
}
