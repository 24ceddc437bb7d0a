// llama_hf.h — Hugging Face Llama and Qwen2 checkpoints into llama_cpu.h's model, and back.
// Refuses in one line what llama_cpu.h does not compute.
// Not here: safetensors and JSON readers (hf.h), tokenizers.

// nn.Linear stores (out, in) like our layout: copied, never transposed.
#pragma once
#include <string>
#include <vector>
#include "hf.h"  // defines: hf_open, HfCheckpoint, StTensor, st_read_f32, Json, json_parse, read_whole_file
#include "llama_cpu.h"  // defines: LlamaConfig, LlamaLayout, llama_layout, LlamaCPU, llama_cpu_build

// ----------------------------------------------------------------------------
// config.json

// config.json's keys that only mixture-of-experts models set (Mixtral, Qwen2-MoE, DeepSeek).
static const char* const llama_hf_moe_keys[] = {"num_experts",
                                                "num_local_experts",
                                                "n_routed_experts",
                                                "num_experts_per_tok",
                                                "moe_intermediate_size",
                                                "n_shared_experts",
                                                "shared_expert_intermediate_size"};

// config.json as hf_open read it: the top values and theirs (rope_scaling's).
static inline int llama_hf_config(const HfCheckpoint* ck, LlamaConfig* cfg, char* err, size_t errlen) {
    const std::string where = ck->dir + "/config.json";
    const Json& c = ck->config;
    char why[300];
    std::string refuse;                                              // the reason, when set
    auto set = [&](const Json* o, const char* key) -> const Json* {  // o's key, NULL when absent or null
        const Json* v = o->get(key);
        return v && v->type != Json::NUL ? v : NULL;
    };
    auto number = [&](const Json* o, const char* key, double dflt, double* out) {
        const Json* v = set(o, key);
        if (v && v->type != Json::NUM) return false;
        *out = v ? v->num : dflt;
        return true;
    };
    auto whole = [&](const char* key, int64_t dflt, int* out) {  // a positive int below 1e8
        const Json* v = set(&c, key);
        const int64_t i = v ? (v->type == Json::NUM && v->is_int ? v->i : -1) : dflt;
        if (i < 1 || i > 100000000) return false;
        *out = (int)i;
        return true;
    };
    auto flag = [&](const char* key) {
        const Json* v = set(&c, key);
        return v && v->type == Json::BOOL && v->b;
    };
    const Json* mt = set(&c, "model_type");
    const std::string model_type = mt && mt->type == Json::STR ? mt->str : "(none)";
    const bool qwen2 = model_type == "qwen2";
    const char* arch_ok = qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
    const Json* arch = set(&c, "architectures");
    memset(cfg, 0, sizeof *cfg);
    if (!mt) refuse = "config.json has no model_type (transformers needs it: llama or qwen2 here)";
    else if (model_type != "llama" && !qwen2)
        refuse = "model_type '" + model_type + "': only llama and qwen2 checkpoints can be read";
    const char* non_bool =
        hf_config_non_bool(c, {"tie_word_embeddings", "use_sliding_window", "attention_bias", "mlp_bias"});
    if (refuse.empty() && non_bool)
        refuse = std::string(non_bool) + " is not true or false (JSON's own, unquoted)";
    if (refuse.empty() && arch) {
        if (arch->type != Json::ARR || arch->items.size() != 1 || arch->items[0].type != Json::STR ||
            arch->items[0].str != arch_ok)
            refuse = std::string("architectures is not [\"") + arch_ok + "\"] (" +
                     (arch->type == Json::ARR && !arch->items.empty() && arch->items[0].type == Json::STR
                          ? arch->items[0].str
                          : std::string("another value")) +
                     "): only the causal LM with its lm_head can be read";
    }
    for (const char* key : llama_hf_moe_keys) {
        const Json* v = set(&c, key);
        if (refuse.empty() && v && !(v->type == Json::NUM && v->num == 0))
            refuse = std::string(key) + " is set: mixture-of-experts models are not computed here";
    }
    const Json* act = set(&c, "hidden_act");
    // transformers' ACT2FN: "swish" is SiLU too
    if (refuse.empty() && act && !(act->type == Json::STR && (act->str == "silu" || act->str == "swish")))
        refuse = "hidden_act is not silu: this model's MLP is SwiGLU (silu(gate) * up)";
    if (refuse.empty() && flag("use_sliding_window"))
        refuse = "use_sliding_window is true: only full causal attention is computed here";
    if (refuse.empty() && flag("attention_bias"))
        refuse = "attention_bias is true: Llama's then biases o_proj too, which this model has no place for";
    if (refuse.empty() && flag("mlp_bias")) refuse = "mlp_bias is true: this model's MLP has no biases";
    double prf = 1.0, eps = 1e-6, theta = 10000.0;
    if (refuse.empty() && (!number(&c, "partial_rotary_factor", 1.0, &prf) || prf != 1.0))
        refuse = "partial_rotary_factor is not 1: RoPE here rotates every channel of a head";
    if (refuse.empty() && (!number(&c, "rms_norm_eps", 1e-6, &eps) || !(eps > 0)))
        refuse = "rms_norm_eps is not a positive number";
    if (refuse.empty() && (!number(&c, "rope_theta", 10000.0, &theta) || !(theta > 0)))
        refuse = "rope_theta is not a positive number";
    const Json* rs = set(&c, "rope_scaling");
    if (refuse.empty() && rs) {
        const Json* type = set(rs, "rope_type");
        if (!type) type = set(rs, "type");
        const std::string t = rs->type != Json::OBJ             ? "(not an object)"
                              : type && type->type == Json::STR ? type->str
                                                                : "(none)";
        double f = 0, lo = 0, hi = 0, orig = 0;
        if (t == "llama3") {
            if (!set(rs, "factor") || !set(rs, "low_freq_factor") || !set(rs, "high_freq_factor") ||
                !set(rs, "original_max_position_embeddings") || !number(rs, "factor", 0, &f) ||
                !number(rs, "low_freq_factor", 0, &lo) || !number(rs, "high_freq_factor", 0, &hi) ||
                !number(rs, "original_max_position_embeddings", 0, &orig) || orig != floor(orig) ||
                orig < 1 || orig > 1e8)
                refuse =
                    "rope_scaling llama3 needs numbers factor, low_freq_factor, high_freq_factor and a whole "
                    "original_max_position_embeddings";
            cfg->rope_llama3 = 1;
            cfg->rope_factor = (float)f;
            cfg->rope_low_freq_factor = (float)lo;
            cfg->rope_high_freq_factor = (float)hi;
            cfg->rope_original_max_pos = (int)orig;
        } else if (t != "default")
            refuse = "rope_scaling type '" + t + "': only llama3 (or none) is computed here";
    }
    if (!refuse.empty()) {
        snprintf(err, errlen, "%.400s: %.300s", where.c_str(), refuse.c_str());
        return 0;
    }
    if (!whole("num_hidden_layers", 0, &cfg->num_layers) || !whole("hidden_size", 0, &cfg->hidden_size) ||
        !whole("num_attention_heads", 0, &cfg->num_heads) ||
        !whole("intermediate_size", 0, &cfg->intermediate_size) ||
        !whole("vocab_size", 0, &cfg->vocab_size) ||
        !whole("max_position_embeddings", 0, &cfg->max_seq_len) ||
        !whole("num_key_value_heads", cfg->num_heads, &cfg->num_kv_heads) ||
        !whole("head_dim", cfg->hidden_size / cfg->num_heads, &cfg->head_dim)) {
        snprintf(
            err, errlen,
            "%.400s: needs whole numbers in [1, 1e8]: num_hidden_layers, hidden_size, num_attention_heads, "
            "intermediate_size, vocab_size, max_position_embeddings (num_key_value_heads, head_dim)",
            where.c_str());
        return 0;
    }
    if (qwen2) cfg->head_dim = cfg->hidden_size / cfg->num_heads;  // Qwen2's attention ignores head_dim
    cfg->rms_norm_eps = (float)eps;
    cfg->rope_theta = (float)theta;                      // llama_config_check refuses one past float's range
    cfg->qkv_bias = qwen2;                               // Qwen2's q, k, v projections always have biases
    cfg->tied_embeddings = flag("tie_word_embeddings");  // transformers' default for both: false
    if (!llama_config_check(cfg, why, sizeof why)) {
        snprintf(err, errlen, "%.400s: %.200s", where.c_str(), why);
        return 0;
    }
    return 1;
}

// 1: path's Llama config. 0: refused (err). 2: not Llama.
static inline int llama_hf_read_config(const char* path, LlamaConfig* cfg, char* err, size_t errlen) {
    HfCheckpoint ck;
    char ignored[1024];
    if (!hf_is_checkpoint(path) || !hf_open(path, &ck, ignored, sizeof ignored)) return 2;
    const Json* mt = ck.config.get("model_type");
    if (!mt || mt->type != Json::STR || (mt->str != "llama" && mt->str != "qwen2")) return 2;
    return llama_hf_config(&ck, cfg, err, errlen);
}

// ----------------------------------------------------------------------------
// The tensors

// A tensor's transformers name and place in our layout (cols 0: vector).
struct LlamaHfPlace {
    std::string name;
    int64_t rows, cols;
    int64_t offset;  // in the flat parameter array
};

static const char* const llama_hf_layer_names[NUM_LLAMA_LAYER_TENSORS] = {
    "input_layernorm.weight",  "self_attn.q_proj.weight", "self_attn.k_proj.weight",
    "self_attn.v_proj.weight", "self_attn.q_proj.bias",   "self_attn.k_proj.bias",
    "self_attn.v_proj.bias",   "self_attn.o_proj.weight", "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",    "mlp.up_proj.weight",      "mlp.down_proj.weight"};
static const char* const llama_hf_embed_names[NUM_LLAMA_EMBED_TENSORS] = {
    "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"};

// The model's tensors in layout order, minus a tied lm_head and absent biases.
static inline std::vector<LlamaHfPlace> llama_hf_places(const LlamaConfig* cfg) {
    const LlamaLayout p = llama_layout(cfg);
    std::vector<LlamaHfPlace> places;
    for (int l = 0; l < cfg->num_layers; l++)
        for (int k = 0; k < NUM_LLAMA_LAYER_TENSORS; k++)
            if (p.layer_size[k])
                places.push_back({"model.layers." + std::to_string(l) + "." + llama_hf_layer_names[k],
                                  p.layer_rows[k], p.layer_cols[k], l * p.layer_stride + p.layer_offset[k]});
    for (int k = 0; k < NUM_LLAMA_EMBED_TENSORS; k++)
        if (p.embed_size[k])
            places.push_back({llama_hf_embed_names[k], p.embed_rows[k], p.embed_cols[k],
                              p.embed_base + p.embed_offset[k]});
    return places;
}

// Ours and the checkpoint's tensors match (tied and RoPE's inv_freq aside).
static inline int llama_hf_check_tensors(const HfCheckpoint* ck, const LlamaConfig* cfg, char* err,
                                         size_t errlen) {
    std::vector<int> used(ck->tensors.size(), 0);
    for (const LlamaHfPlace& pl : llama_hf_places(cfg)) {
        const auto it = ck->by_name.find(pl.name);
        if (it == ck->by_name.end()) {
            snprintf(err, errlen, "%.400s: tensor '%.100s' is missing", ck->dir.c_str(), pl.name.c_str());
            return 0;
        }
        const StTensor& t = ck->tensors[it->second];
        const bool shape_ok = pl.cols ? t.shape.size() == 2 && t.shape[0] == pl.rows && t.shape[1] == pl.cols
                                      : t.shape.size() == 1 && t.shape[0] == pl.rows;
        if (!shape_ok) {
            std::string got;
            for (int64_t d : t.shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
            const std::string want =
                std::to_string(pl.rows) + (pl.cols ? ", " + std::to_string(pl.cols) : "");
            snprintf(err, errlen, "%.400s: tensor '%.100s' has shape (%.80s), config.json implies (%.80s)",
                     ck->files[t.file].c_str(), t.name.c_str(), got.c_str(), want.c_str());
            return 0;
        }
        used[it->second] = 1;
    }
    for (size_t k = 0; k < ck->tensors.size(); k++) {
        const std::string& n = ck->tensors[k].name;
        if (used[k] || ends_with(n, ".rotary_emb.inv_freq")) continue;
        if (n == "lm_head.weight" && cfg->tied_embeddings) continue;  // checked against embed on load
        snprintf(err, errlen, "%.400s: tensor '%.100s' is not part of this model's config.json",
                 ck->files[ck->tensors[k].file].c_str(), n.c_str());
        return 0;
    }
    return 1;
}

// Loads the tensors placed in [lo, hi) of the flat array; params holds element lo.
// A saved tied lm_head must equal the embedding (checked in its window). 0 with err.
static inline int llama_hf_read_window(const HfCheckpoint* ck, const LlamaConfig* cfg, float* params,
                                       int64_t lo, int64_t hi, char* err, size_t errlen) {
    std::vector<uint16_t> half;
    params -= lo;  // indexed by place from here
    for (const LlamaHfPlace& pl : llama_hf_places(cfg)) {
        if (pl.offset < lo || pl.offset >= hi) continue;
        const StTensor& t = ck->tensors[ck->by_name.at(pl.name)];
        float* dst = params + pl.offset;
        if (!st_read_f32(ck, t, dst, half, err, errlen)) return 0;
        const int64_t bad = first_non_finite(dst, pl.rows * (pl.cols ? pl.cols : 1));
        if (bad >= 0) {
            snprintf(err, errlen, "%.400s: tensor '%.100s' holds %g at element %lld",
                     ck->files[t.file].c_str(), t.name.c_str(), (double)dst[bad], (long long)bad);
            return 0;
        }
    }
    const LlamaLayout p = llama_layout(cfg);
    const int64_t embed = p.embed_base + p.embed_offset[LL_EMBED];
    const auto tied_head = ck->by_name.find("lm_head.weight");
    if (!cfg->tied_embeddings || tied_head == ck->by_name.end() || embed < lo || embed >= hi) return 1;
    std::vector<float> lm_head((size_t)p.embed_size[LL_EMBED]);  // the saved tied head, to compare
    if (!st_read_f32(ck, ck->tensors[tied_head->second], lm_head.data(), half, err, errlen)) return 0;
    if (memcmp(lm_head.data(), params + embed, lm_head.size() * sizeof(float)) != 0) {
        snprintf(err, errlen,
                 "%.400s: tie_word_embeddings is true but lm_head.weight differs from "
                 "model.embed_tokens.weight",
                 ck->dir.c_str());
        return 0;
    }
    return 1;
}

// Builds and loads a checkpoint's model; 0 with model->error, model freed.
static inline int llama_hf_load(const char* path, LlamaCPU* model) {
    char err[1024];
    HfCheckpoint ck;
    LlamaConfig cfg;
    memset(model, 0, sizeof *model);  // freeable whatever fails
    int ok = hf_open(path, &ck, err, sizeof err) && llama_hf_config(&ck, &cfg, err, sizeof err) &&
             llama_hf_check_tensors(&ck, &cfg, err, sizeof err);
    if (ok && !llama_cpu_build(model, &cfg)) {
        snprintf(err, sizeof err, "%.1000s", model->error);
        ok = 0;
    }
    if (ok) ok = llama_hf_read_window(&ck, &cfg, model->params, 0, INT64_MAX, err, sizeof err);
    if (!ok) {
        llama_cpu_free(model);
        snprintf(model->error, sizeof model->error, "%s", err);
    }
    return ok;
}

// Window [lo, hi) of a checkpoint, llama_model.h's order, into params (element lo).
// cfg: the config read before; a change since is refused. -sd loads a layer at a time.
static inline int llama_hf_load_window(const char* path, const LlamaConfig* cfg, float* params, int64_t lo,
                                       int64_t hi, char* err, size_t errlen) {
    HfCheckpoint ck;
    LlamaConfig now;
    if (!hf_open(path, &ck, err, errlen) || !llama_hf_config(&ck, &now, err, errlen) ||
        !llama_hf_check_tensors(&ck, cfg, err, errlen))
        return 0;
    if (memcmp(&now, cfg, sizeof now) != 0) {
        snprintf(err, errlen, "%.400s: its config changed while the trainer read it", path);
        return 0;
    }
    return llama_hf_read_window(&ck, cfg, params, lo, hi, err, errlen);
}

// ----------------------------------------------------------------------------
// Writing a checkpoint (export_hf)

// Our tensors as hf_write_places writes them: full names, (out, in), not transposed.
static inline std::vector<HfTensorPlace> llama_hf_write_places(const LlamaConfig* cfg) {
    std::vector<HfTensorPlace> out;
    for (const LlamaHfPlace& pl : llama_hf_places(cfg)) {
        const int64_t count = pl.rows * (pl.cols ? pl.cols : 1);
        out.push_back({pl.name, pl.rows, pl.cols, pl.offset, count, 0});
    }
    return out;
}

// config.json, generation_config.json; Qwen2ForCausalLM when q/k/v have biases. Refused: what JSON or
// transformers cannot hold (a non-finite number; Qwen2's head size apart from C / NH: 4.46's Qwen2 has
// no head_dim, and Llama's attention_bias would bias o_proj too).
static inline int llama_hf_write_config(const std::string& dir, const LlamaConfig* c, int bf16, char* err,
                                        size_t errlen, const HfSpecialIds* ids = NULL) {
    const int qwen2 = c->qkv_bias;
    char why[200];
    if (!llama_config_check(c, why, sizeof why)) {  // rope_theta inf would be written as "inf": not JSON
        snprintf(err, errlen, "cannot export: %.190s", why);
        return 0;
    }
    if (qwen2 && c->head_dim * c->num_heads != c->hidden_size) {
        snprintf(err, errlen,
                 "cannot export: q/k/v biases with head size %d, not hidden_size / num_attention_heads "
                 "(%d / %d): transformers' Qwen2 has no head_dim, and its Llama biases o_proj too",
                 c->head_dim, c->hidden_size, c->num_heads);
        return 0;
    }
    char rope[400] = "null";
    if (c->rope_llama3)
        snprintf(rope, sizeof rope,
                 "{\"rope_type\": \"llama3\", \"factor\": %.9g, \"low_freq_factor\": %.9g, "
                 "\"high_freq_factor\": %.9g, \"original_max_position_embeddings\": %d}",
                 c->rope_factor, c->rope_low_freq_factor, c->rope_high_freq_factor, c->rope_original_max_pos);
    char head_dim[64] = "";
    if (!qwen2) snprintf(head_dim, sizeof head_dim, "  \"head_dim\": %d,\n", c->head_dim);
    const HfSpecialIds none;
    if (!ids) ids = &none;
    const std::string id_lines = hf_config_id_lines(*ids);
    char b[2048];
    snprintf(b, sizeof b,
             "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n  \"hidden_act\": \"silu\",\n"
             "  \"num_hidden_layers\": %d,\n  \"hidden_size\": %d,\n  \"num_attention_heads\": %d,\n"
             "  \"num_key_value_heads\": %d,\n%s  \"intermediate_size\": %d,\n  \"vocab_size\": %d,\n"
             "  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %.9g,\n  \"rope_theta\": %.9g,\n"
             "  \"rope_scaling\": %s,\n  \"tie_word_embeddings\": %s,\n  \"attention_dropout\": 0.0,\n"
             "%s%.600s  \"use_cache\": true,\n  \"torch_dtype\": \"%s\"\n}\n",
             qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM", qwen2 ? "qwen2" : "llama", c->num_layers,
             c->hidden_size, c->num_heads, c->num_kv_heads, head_dim, c->intermediate_size, c->vocab_size,
             c->max_seq_len, c->rms_norm_eps, c->rope_theta, rope, c->tied_embeddings ? "true" : "false",
             qwen2 ? "  \"use_sliding_window\": false,\n"
                   : "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n",
             id_lines.c_str(), bf16 ? "bfloat16" : "float32");
    std::string g;
    if (!hf_generation_config_text(*ids, &g)) {
        snprintf(err, errlen, "the source's generation_config.json holds a number JSON cannot write");
        return 0;
    }
    return write_small_file(dir, "config.json", b, err, errlen) &&
           write_small_file(dir, "generation_config.json", g, err, errlen);
}
