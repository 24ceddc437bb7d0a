// llama_model.h — the Llama family (Llama 2/3, Qwen2) as data: config, layer-major layout,
// presets, specs, init, model files (256 int32 of header, then fp32 in llama_layout's order).
// Not here: the math (llama_cpu.h), Hugging Face checkpoints (llama_hf.h), the GPU.

// Header, int32 slots (floats as their bits):
//   0 magic 20241126, 1 version 1, 2 L, 3 C, 4 NH, 5 NKV, 6 hd, 7 I, 8 V, 9 maxT,
//   10 rms eps, 11 rope theta, 12 rope_llama3, 13 factor, 14 low, 15 high, 16 original maxT,
//   17 qkv_bias, 18 tied_embeddings; the rest 0.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>     // defines: stat, S_ISREG
#include <algorithm>      // defines: std::max, std::min
#include "crc32c.h"       // defines: crc32c_update
#include "model.h"        // defines: fill_normal, fill_const, read_model_header, finish_atomic_write,
                          // first_non_finite
#include "model_specs.h"  // defines: spec_key_value

#define LLAMA_MODEL_MAGIC   20241126
#define LLAMA_MODEL_VERSION 1

// ----------------------------------------------------------------------------
// Config and parameter layout

typedef struct {
    int num_layers;         // L
    int hidden_size;        // C
    int num_heads;          // NH, query heads
    int num_kv_heads;       // NKV, divides NH
    int head_dim;           // hd, even: RoPE rotates channel i with channel i + hd/2
    int intermediate_size;  // I, the MLP width
    int vocab_size;         // V
    int max_seq_len;        // max_position_embeddings: the longest T
    float rms_norm_eps;
    float rope_theta;  // RoPE base: 10000 (Llama 2), 500000 (Llama 3), 1e6 (Qwen2)
    int rope_llama3;   // 1: Llama 3.1 frequency scaling (four fields below); 0: plain
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos;  // original_max_position_embeddings
    int qkv_bias;               // 1: q, k, v projections have biases (Qwen2)
    int tied_embeddings;        // 1: lm_head is the embedding matrix
} LlamaConfig;

// One layer's tensors in block order. Absent biases: size 0.
enum LlamaLayerTensor {
    LL_ATTN_NORM,
    LL_WQ,
    LL_WK,
    LL_WV,
    LL_BQ,
    LL_BK,
    LL_BV,
    LL_WO,
    LL_MLP_NORM,
    LL_W_GATE,
    LL_W_UP,
    LL_W_DOWN,
    NUM_LLAMA_LAYER_TENSORS
};
static const char* const llama_layer_tensor_names[NUM_LLAMA_LAYER_TENSORS] = {
    "attn_norm", "wq", "wk", "wv", "bq", "bk", "bv", "wo", "mlp_norm", "w_gate", "w_up", "w_down"};
// Weight decay on matrices only, not on norms or biases.
static const int llama_layer_tensor_is_matrix[NUM_LLAMA_LAYER_TENSORS] = {0, 1, 1, 1, 0, 0, 0, 1, 0, 1, 1, 1};

// After the layers. lm_head has size 0 when tied.
enum LlamaEmbedTensor { LL_EMBED, LL_FINAL_NORM, LL_LM_HEAD, NUM_LLAMA_EMBED_TENSORS };
static const char* const llama_embed_tensor_names[NUM_LLAMA_EMBED_TENSORS] = {"embed", "final_norm",
                                                                              "lm_head"};
static const int llama_embed_tensor_is_matrix[NUM_LLAMA_EMBED_TENSORS] = {1, 0, 1};

// Layer l at l * layer_stride, then the embedding block at embed_base.
// Shapes (out, in) as nn.Linear; cols 0: a vector.
typedef struct {
    int64_t layer_rows[NUM_LLAMA_LAYER_TENSORS], layer_cols[NUM_LLAMA_LAYER_TENSORS];
    int64_t layer_size[NUM_LLAMA_LAYER_TENSORS];    // elements (0: absent)
    int64_t layer_offset[NUM_LLAMA_LAYER_TENSORS];  // inside a layer block
    int64_t layer_stride;                           // elements of one layer block
    int64_t embed_rows[NUM_LLAMA_EMBED_TENSORS], embed_cols[NUM_LLAMA_EMBED_TENSORS];
    int64_t embed_size[NUM_LLAMA_EMBED_TENSORS];
    int64_t embed_offset[NUM_LLAMA_EMBED_TENSORS];  // inside the embedding block
    int64_t embed_base;                             // L * layer_stride
    int64_t total;
} LlamaLayout;

// What the loops rely on; 0 with err if bad.
static inline int llama_config_check(const LlamaConfig* c, char* err, size_t errlen) {
    const char* bad = NULL;
    if (c->num_layers < 1 || c->hidden_size < 1 || c->num_heads < 1 || c->num_kv_heads < 1 ||
        c->head_dim < 1 || c->intermediate_size < 1 || c->vocab_size < 1 || c->max_seq_len < 1)
        bad = "every size must be positive";
    else if (c->num_heads % c->num_kv_heads) bad = "the key/value heads must divide the query heads";
    else if (c->head_dim % 2) bad = "the head size must be even (RoPE rotates pairs)";
    else if (!(c->rms_norm_eps > 0.0f) || !(c->rope_theta > 0.0f) || !isfinite(c->rms_norm_eps) ||
             !isfinite(c->rope_theta))
        bad = "rms_norm_eps and rope_theta must be finite and > 0";
    else if (c->rope_llama3 && !(isfinite(c->rope_factor) && isfinite(c->rope_low_freq_factor) &&
                                 isfinite(c->rope_high_freq_factor)))
        bad = "llama3 rope scaling's factors must be finite";
    else if (c->rope_llama3 &&
             !(c->rope_factor >= 1.0f && c->rope_high_freq_factor > c->rope_low_freq_factor &&
               c->rope_low_freq_factor > 0.0f && c->rope_original_max_pos >= 1))
        bad = "llama3 rope scaling needs factor >= 1, 0 < low_freq_factor < high_freq_factor, original >= 1";
    if (bad) snprintf(err, errlen, "bad Llama config: %s", bad);
    return bad == NULL;
}

// The fields where a and b differ, "name a against b" each, into out; false: none.
static inline bool llama_config_diff(const LlamaConfig* a, const LlamaConfig* b, char* out, size_t n) {
    const struct {
        const char* name;
        double a, b;
    } f[] = {{"num_layers", (double)a->num_layers, (double)b->num_layers},
             {"hidden_size", (double)a->hidden_size, (double)b->hidden_size},
             {"num_heads", (double)a->num_heads, (double)b->num_heads},
             {"num_kv_heads", (double)a->num_kv_heads, (double)b->num_kv_heads},
             {"head_dim", (double)a->head_dim, (double)b->head_dim},
             {"intermediate_size", (double)a->intermediate_size, (double)b->intermediate_size},
             {"vocab_size", (double)a->vocab_size, (double)b->vocab_size},
             {"max_position_embeddings", (double)a->max_seq_len, (double)b->max_seq_len},
             {"rms_norm_eps", a->rms_norm_eps, b->rms_norm_eps},
             {"rope_theta", a->rope_theta, b->rope_theta},
             {"rope_llama3", (double)a->rope_llama3, (double)b->rope_llama3},
             {"rope_factor", a->rope_factor, b->rope_factor},
             {"rope_low_freq_factor", a->rope_low_freq_factor, b->rope_low_freq_factor},
             {"rope_high_freq_factor", a->rope_high_freq_factor, b->rope_high_freq_factor},
             {"rope_original_max_pos", (double)a->rope_original_max_pos, (double)b->rope_original_max_pos},
             {"qkv_bias", (double)a->qkv_bias, (double)b->qkv_bias},
             {"tied_embeddings", (double)a->tied_embeddings, (double)b->tied_embeddings}};
    size_t used = 0;
    out[0] = 0;
    for (const auto& x : f)
        if (x.a != x.b && used < n)
            used += (size_t)snprintf(out + used, n - used, "%s%s %.9g against %.9g", used ? ", " : "", x.name,
                                     x.a, x.b);
    return used > 0;
}

static inline LlamaLayout llama_layout(const LlamaConfig* c) {
    LlamaLayout p;
    memset(&p, 0, sizeof p);
    const int64_t C = c->hidden_size, QD = (int64_t)c->num_heads * c->head_dim;
    const int64_t KVD = (int64_t)c->num_kv_heads * c->head_dim, I = c->intermediate_size;
    const int64_t bias = c->qkv_bias ? 1 : 0;
    const int64_t shapes[NUM_LLAMA_LAYER_TENSORS][2] = {
        {C, 0},          {QD, C}, {KVD, C}, {KVD, C}, {QD * bias, 0}, {KVD * bias, 0},
        {KVD * bias, 0}, {C, QD}, {C, 0},   {I, C},   {I, C},         {C, I}};
    for (int k = 0; k < NUM_LLAMA_LAYER_TENSORS; k++) {
        p.layer_rows[k] = shapes[k][0];
        p.layer_cols[k] = shapes[k][1];
        p.layer_size[k] = shapes[k][0] * (shapes[k][1] ? shapes[k][1] : 1);
        p.layer_offset[k] = p.layer_stride;
        p.layer_stride += p.layer_size[k];
    }
    const int64_t V = c->vocab_size;
    const int64_t eshapes[NUM_LLAMA_EMBED_TENSORS][2] = {{V, C}, {C, 0}, {c->tied_embeddings ? 0 : V, C}};
    p.embed_base = c->num_layers * p.layer_stride;
    int64_t o = 0;
    for (int k = 0; k < NUM_LLAMA_EMBED_TENSORS; k++) {
        p.embed_rows[k] = eshapes[k][0];
        p.embed_cols[k] = eshapes[k][1];
        p.embed_size[k] = eshapes[k][0] * (eshapes[k][1] ? eshapes[k][1] : 1);
        p.embed_offset[k] = o;
        o += p.embed_size[k];
    }
    p.total = p.embed_base + o;
    return p;
}

// Named pointers into params or grads; absent: NULL.
typedef struct {
    float *attn_norm, *wq, *wk, *wv, *bq, *bk, *bv, *wo, *mlp_norm, *w_gate, *w_up, *w_down;
} LlamaLayerTensors;
typedef struct {
    float *embed, *final_norm, *lm_head;  // lm_head: the embedding when tied
} LlamaEmbedTensors;

static inline LlamaLayerTensors llama_layer_tensors(const LlamaLayout* p, float* base, int l) {
    float* b = base + (int64_t)l * p->layer_stride;
    float* t[NUM_LLAMA_LAYER_TENSORS];
    for (int k = 0; k < NUM_LLAMA_LAYER_TENSORS; k++) t[k] = p->layer_size[k] ? b + p->layer_offset[k] : NULL;
    LlamaLayerTensors w = {t[LL_ATTN_NORM], t[LL_WQ], t[LL_WK],       t[LL_WV],     t[LL_BQ],   t[LL_BK],
                           t[LL_BV],        t[LL_WO], t[LL_MLP_NORM], t[LL_W_GATE], t[LL_W_UP], t[LL_W_DOWN]};
    return w;
}
static inline LlamaEmbedTensors llama_embed_tensors(const LlamaLayout* p, float* base) {
    float* b = base + p->embed_base;
    LlamaEmbedTensors e = {b + p->embed_offset[LL_EMBED], b + p->embed_offset[LL_FINAL_NORM],
                           p->embed_size[LL_LM_HEAD] ? b + p->embed_offset[LL_LM_HEAD] : b};
    return e;
}

// ----------------------------------------------------------------------------
// Presets: the published shapes

typedef struct {
    const char* name;
    LlamaConfig c;
} LlamaPreset;

// Llama 3.1 RoPE: theta 5e5, llama3 scaling (factor 8, low 1, high 4, original 8192).
#define LLAMA31_ROPE 131072, 1e-5f, 500000.0f, 1, 8.0f, 1.0f, 4.0f, 8192
// Qwen2.5: theta 1e6, plain RoPE, eps 1e-6, q/k/v biases.
#define QWEN25_ROPE 32768, 1e-6f, 1000000.0f, 0, 0.0f, 0.0f, 0.0f, 0
static const LlamaPreset llama_presets[] = {
    // name               L    C      NH   NKV hd   I      V       maxT, eps, rope...      bias tied
    {"llama3.2-1b",
     {16, 2048, 32, 8, 64, 8192, 128256, 131072, 1e-5f, 500000.0f, 1, 32.0f, 1.0f, 4.0f, 8192, 0, 1}},
    {"llama3-8b", {32, 4096, 32, 8, 128, 14336, 128256, LLAMA31_ROPE, 0, 0}},
    {"llama3-70b", {80, 8192, 64, 8, 128, 28672, 128256, LLAMA31_ROPE, 0, 0}},
    {"llama3-405b", {126, 16384, 128, 8, 128, 53248, 128256, LLAMA31_ROPE, 0, 0}},
    {"qwen2.5-0.5b", {24, 896, 14, 2, 64, 4864, 151936, QWEN25_ROPE, 1, 1}},
    {"qwen2.5-7b", {28, 3584, 28, 4, 128, 18944, 152064, QWEN25_ROPE, 1, 0}},
    {"qwen2.5-72b", {80, 8192, 64, 8, 128, 29568, 152064, QWEN25_ROPE, 1, 0}},
};
#undef LLAMA31_ROPE
#undef QWEN25_ROPE

// ----------------------------------------------------------------------------
// Specs: a preset or a family, then :KEY<n> overrides

// Matches "<key><digits>" and range-checks it; 1 on a match.
static inline int llama_spec_int(const char* tok, size_t len, const char* key, int* out) {
    int64_t x;
    if (!spec_key_value(tok, len, key, &x)) return 0;
    *out = (int)x;
    return 1;
}

// -e NAME (no ':') that is no file, no directory, no preset of either family: 1 with err, which lists the
// presets and the nearest name ("did you mean llama3-70b?"). Names ending in .bin stay model files; a
// spec with ':' parts is parse_model_spec's to judge.
static inline int unknown_model_name(const char* spec, char* err, size_t errlen) {
    struct stat st;
    const size_t n = strlen(spec);
    if (strchr(spec, '/') || strchr(spec, ':') || (n >= 4 && strcmp(spec + n - 4, ".bin") == 0) ||
        stat(spec, &st) == 0)
        return 0;
    int64_t x;
    if (spec_key_value(spec, n, "L", &x) ||
        (n > 1 && (spec[0] == 'd' || spec[0] == 'D') && spec_key_value(spec + 1, n - 1, "", &x)))
        return 0;  // a GPT-2 shape: parse_model_spec says what is wrong with it
    char base[64];
    snprintf(base, sizeof base, "%.63s", spec);
    const char* best = NULL;
    int best_d = 1 << 20;
    char list[600] = "";
    for (const ModelPreset& p : model_presets) {
        if (!strcasecmp(p.name, base)) return 0;  // a GPT-2 preset
        const int d = spec_edit_distance(base, p.name);
        if (d < best_d) best_d = d, best = p.name;
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? " " : "", p.name);
    }
    for (const LlamaPreset& p : llama_presets) {
        const int d = spec_edit_distance(base, p.name);
        if (d < best_d) best_d = d, best = p.name;
        snprintf(list + strlen(list), sizeof list - strlen(list), " %s", p.name);
    }
    char depth[24];  // d12x: the GPT-2 depth spec it starts with
    if ((spec[0] == 'd' || spec[0] == 'D') && spec[1] >= '0' && spec[1] <= '9') {
        size_t k = 1;
        while (k < n && k < 6 && spec[k] >= '0' && spec[k] <= '9') k++;
        snprintf(depth, sizeof depth, "d%.*s", (int)(k - 1), spec + 1);
        best = depth, best_d = 0;
    }
    char hint[96] = "";
    if (best && best_d <= 3) snprintf(hint, sizeof hint, "did you mean %s? ", best);
    snprintf(err, errlen,
             "-e %.200s: no such file or directory, and not a model preset: %sthe presets are %s (or a "
             "spec: dN, L<n>:C<n>:NH<n>, llama:... / qwen2:...; see -h)",
             spec, hint, list);
    return 1;
}

// BASE[:KEYn]...: a preset (llama3-8b), or a family (llama, qwen2) plus L, C, NH, I.
// Keys: L C NH KV=NKV HD=hd I V T=maxT, TIE BIAS (0/1).
// 1: a Llama spec. 2: not one (GPT-2 or a path). 0: invalid, err says why.
static inline int parse_llama_spec(const char* spec, LlamaConfig* cfg, char* err, size_t errlen) {
    if (!spec || !*spec || strchr(spec, '/')) return 2;
    const char* tok = spec;
    size_t len = strcspn(tok, ":");
    LlamaConfig c;
    memset(&c, 0, sizeof c);
    int found = 0;
    for (const LlamaPreset& p : llama_presets)
        if (strlen(p.name) == len && strncasecmp(p.name, tok, len) == 0) {
            c = p.c;
            found = 1;
        }
    const int family = !found && ((len == 5 && !strncasecmp(tok, "llama", 5)) ||
                                  (len == 5 && !strncasecmp(tok, "qwen2", 5)));
    if (!found && !family) return unknown_model_name(spec, err, errlen) ? 0 : 2;
    if (family) {  // the family's defaults; the shape must be given
        const int qwen = tok[0] == 'q' || tok[0] == 'Q';
        c = {0, 0, 0, 0, 0,    0, qwen ? 151936 : 128256, 2048, qwen ? 1e-6f : 1e-5f, qwen ? 1e6f : 5e5f, 0,
             0, 0, 0, 0, qwen, 0};
    }
    int kv = -1, hd = -1;
    // TIE before T: T is a prefix of TIE. Each key once.
    const struct {
        const char* key;
        int* value;
    } keys[] = {
        {"NH", &c.num_heads},  {"KV", &kv},          {"HD", &hd},           {"TIE", &c.tied_embeddings},
        {"BIAS", &c.qkv_bias}, {"L", &c.num_layers}, {"C", &c.hidden_size}, {"I", &c.intermediate_size},
        {"V", &c.vocab_size},  {"T", &c.max_seq_len}};
    unsigned seen = 0;
    while (tok[len] == ':') {
        tok += len + 1;
        len = strcspn(tok, ":");
        int k = 0;
        while (k < 10 && !llama_spec_int(tok, len, keys[k].key, keys[k].value)) k++;
        if (k == 10) {
            snprintf(err, errlen,
                     "model spec '%.200s': bad part '%.*s' (want L C NH KV HD I V T TIE BIAS, "
                     "each with a number)",
                     spec, (int)len, tok);
            return 0;
        }
        if (spec_key_repeated(spec, keys[k].key, k, &seen, err, errlen)) return 0;
    }
    if (family && (c.num_layers < 1 || c.hidden_size < 1 || c.num_heads < 1 || c.intermediate_size < 1)) {
        struct stat st;  // `-e llama` meant a folder of that name: a spec's name comes first
        const bool here = stat(spec, &st) == 0;
        snprintf(err, errlen, "model spec '%.200s': a %.*s shape needs L<n>:C<n>:NH<n>:I<n>%s%.200s%s", spec,
                 (int)strcspn(spec, ":"), spec, here ? " (for the folder of that name here, give ./" : "",
                 here ? spec : "", here ? ")" : "");
        return 0;
    }
    if (c.num_heads < 1) {
        snprintf(err, errlen, "model spec '%.200s': NH must be positive", spec);
        return 0;
    }
    if (kv >= 0) c.num_kv_heads = kv;
    else if (family) c.num_kv_heads = c.num_heads;
    if (hd >= 0) c.head_dim = hd;
    else if (family || c.head_dim * c.num_heads != c.hidden_size) {
        if (c.hidden_size % c.num_heads) {  // the head size is C / NH unless HD says otherwise
            snprintf(err, errlen,
                     "model spec '%.200s': C (%d) is not divisible by the head count (%d): change C or NH, "
                     "or give the head size (HD<n>)",
                     spec, c.hidden_size, c.num_heads);
            return 0;
        }
        c.head_dim = c.hidden_size / c.num_heads;
    }
    if ((unsigned)c.tied_embeddings > 1 || (unsigned)c.qkv_bias > 1) {
        snprintf(err, errlen, "model spec '%.200s': TIE and BIAS are 0 or 1", spec);
        return 0;
    }
    if (c.num_layers > 100000 || c.hidden_size > 1000000 || c.intermediate_size > 10000000 ||
        c.vocab_size > 10000000 || c.max_seq_len > 10000000) {
        snprintf(err, errlen, "model spec '%.200s': dimensions too large", spec);
        return 0;
    }
    char why[300];
    if (!llama_config_check(&c, why, sizeof why)) {
        snprintf(err, errlen, "model spec '%.200s': %.250s", spec, why);
        return 0;
    }
    *cfg = c;
    return 1;
}

// Parameters, as the model cards count them.
static inline int64_t llama_num_params(const LlamaConfig* c) { return llama_layout(c).total; }

// ----------------------------------------------------------------------------
// Init: matrices N(0, 0.02) as transformers, norms 1, biases 0

// Layer l alone: its RNG streams depend only on l.
static inline void llama_init_layer(const LlamaConfig* c, int l, float* layer, uint64_t seed) {
    const LlamaLayout p = llama_layout(c);
    for (int k = 0; k < NUM_LLAMA_LAYER_TENSORS; k++) {
        float* x = layer + p.layer_offset[k];
        const int64_t n = p.layer_size[k];
        const uint64_t stream = 100 + (uint64_t)l * NUM_LLAMA_LAYER_TENSORS + k;
        if (k == LL_ATTN_NORM || k == LL_MLP_NORM) fill_const(x, n, 1.0f);
        else if (!llama_layer_tensor_is_matrix[k]) fill_const(x, n, 0.0f);
        else fill_normal(x, n, 0.02f, seed, stream);
    }
}

// The embedding block (embed, final_norm, lm_head: total - embed_base floats).
// The embedding block's elements [lo, hi) into out[0, hi - lo): the same values as the whole block's (each
// element is a function of its index), so a node can make its part without the rest.
static inline void llama_init_embeddings_window(const LlamaConfig* c, float* out, int64_t lo, int64_t hi,
                                                uint64_t seed) {
    const LlamaLayout p = llama_layout(c);
    const struct {
        int t;
        uint64_t stream;  // 0: ones (the final norm)
    } tensors[] = {{LL_EMBED, 1}, {LL_FINAL_NORM, 0}, {LL_LM_HEAD, 2}};
    for (const auto& x : tensors) {
        const int64_t o = p.embed_offset[x.t], a = std::max(lo, o), b = std::min(hi, o + p.embed_size[x.t]);
        if (b <= a) continue;
        if (x.stream) fill_normal(out + (a - lo), b - a, 0.02f, seed, x.stream, a - o);
        else fill_const(out + (a - lo), b - a, 1.0f);
    }
}
static inline void llama_init_embeddings(const LlamaConfig* c, float* e, uint64_t seed) {
    const LlamaLayout p = llama_layout(c);
    llama_init_embeddings_window(c, e, 0, p.total - p.embed_base, seed);
}

static inline void llama_init_params(const LlamaConfig* c, float* params, uint64_t seed) {
    const LlamaLayout p = llama_layout(c);
    for (int l = 0; l < c->num_layers; l++)
        llama_init_layer(c, l, params + (int64_t)l * p.layer_stride, seed);
    llama_init_embeddings(c, params + p.embed_base, seed);
}

// ----------------------------------------------------------------------------
// Model files

static inline int32_t llama_float_bits(float x) {
    int32_t b;
    memcpy(&b, &x, 4);
    return b;
}
static inline float llama_bits_float(int32_t b) {
    float x;
    memcpy(&x, &b, 4);
    return x;
}

static inline void llama_header(const LlamaConfig* c, int32_t h[256]) {
    memset(h, 0, 256 * sizeof(int32_t));
    const int32_t v[19] = {LLAMA_MODEL_MAGIC,
                           LLAMA_MODEL_VERSION,
                           c->num_layers,
                           c->hidden_size,
                           c->num_heads,
                           c->num_kv_heads,
                           c->head_dim,
                           c->intermediate_size,
                           c->vocab_size,
                           c->max_seq_len,
                           llama_float_bits(c->rms_norm_eps),
                           llama_float_bits(c->rope_theta),
                           c->rope_llama3,
                           llama_float_bits(c->rope_factor),
                           llama_float_bits(c->rope_low_freq_factor),
                           llama_float_bits(c->rope_high_freq_factor),
                           c->rope_original_max_pos,
                           c->qkv_bias,
                           c->tied_embeddings};
    memcpy(h, v, sizeof v);
}

// 1 if path has the Llama model magic, else 0.
static inline int llama_is_model_file(const char* path) {
    struct stat st;  // a FIFO would block the open: regular files only (the loader says what else it is)
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    FILE* f = fopen(path, "rb");
    int32_t magic = 0;
    const int ok = f && fread(&magic, 4, 1, f) == 1 && magic == LLAMA_MODEL_MAGIC;
    if (f) fclose(f);
    return ok;
}

// A model file's config, header checked against size; 0 with err.
static inline int llama_read_header(const char* path, LlamaConfig* c, char* err, size_t errlen) {
    int32_t h[256];
    int got;
    int64_t bytes;
    if (!read_model_header(path, h, &got, &bytes, err, errlen)) return 0;
    if (!got || h[0] != LLAMA_MODEL_MAGIC) {
        snprintf(err, errlen, "model file %.400s: not a Llama-family model file (magic %d, want %d)", path,
                 got ? h[0] : -1, LLAMA_MODEL_MAGIC);
        return 0;
    }
    if (h[1] != LLAMA_MODEL_VERSION) {
        snprintf(err, errlen, "model file %.400s: unsupported version %d (want %d)", path, h[1],
                 LLAMA_MODEL_VERSION);
        return 0;
    }
    LlamaConfig x = {h[2],
                     h[3],
                     h[4],
                     h[5],
                     h[6],
                     h[7],
                     h[8],
                     h[9],
                     llama_bits_float(h[10]),
                     llama_bits_float(h[11]),
                     h[12],
                     llama_bits_float(h[13]),
                     llama_bits_float(h[14]),
                     llama_bits_float(h[15]),
                     h[16],
                     h[17],
                     h[18]};
    char why[300];
    const int bad_flag =
        (unsigned)x.qkv_bias > 1 || (unsigned)x.tied_embeddings > 1 || (unsigned)x.rope_llama3 > 1;
    if (bad_flag || !llama_config_check(&x, why, sizeof why)) {
        snprintf(err, errlen, "model file %.300s: %.150s", path, bad_flag ? "a flag is not 0 or 1" : why);
        return 0;
    }
    const int64_t want = (int64_t)sizeof h + 4 * llama_layout(&x).total;
    if (bytes != want) {
        snprintf(err, errlen,
                 "model file %.400s: %lld bytes, its header says %lld (truncated or not this "
                 "format)",
                 path, (long long)bytes, (long long)want);
        return 0;
    }
    *c = x;
    return 1;
}

// Reads the parameters (c from the header); 0 with err.
// Window [lo, hi) in file order: only those floats, params[0] is element lo.
static inline int llama_load_params(const char* path, const LlamaConfig* c, float* params, char* err,
                                    size_t errlen, int64_t lo = 0, int64_t hi = INT64_MAX) {
    FILE* f = fopen(path, "rb");
    const int64_t total = llama_layout(c).total, n = (hi < total ? hi : total) - lo;
    int ok = f && fseeko(f, (off_t)(256 * 4 + lo * 4), SEEK_SET) == 0;
    for (int64_t i = 0; ok && i < n; i += (int64_t)1 << 24) {
        const int64_t k = n - i < ((int64_t)1 << 24) ? n - i : (int64_t)1 << 24;
        ok = (int64_t)fread(params + i, sizeof(float), (size_t)k, f) == k;
    }
    if (f) fclose(f);
    if (!ok) {
        snprintf(err, errlen, "model file %.400s: short read", path);
        return 0;
    }
    const int64_t bad = first_non_finite(params, n);
    if (bad >= 0) {
        snprintf(err, errlen, "model file %.400s: parameter %lld is %s", path, (long long)(lo + bad),
                 isnan(params[bad]) ? "NaN" : "infinite");
        return 0;
    }
    return 1;
}

// Atomic save (tmp, fsync, rename); crc (optional) gets the CRC-32C.
static inline int llama_save_params(const char* path, const LlamaConfig* c, const float* params, char* err,
                                    size_t errlen, uint32_t* crc = NULL) {
    char tmp[4200];
    FILE* f = model_tmp_open(path, tmp, sizeof tmp, err, errlen);
    if (!f) return 0;
    int32_t h[256];
    llama_header(c, h);
    uint32_t sum = 0;
    int ok = write_crc(f, h, sizeof h, &sum);
    const int64_t n = llama_layout(c).total;
    for (int64_t i = 0; ok && i < n; i += (int64_t)1 << 24) {
        const int64_t k = n - i < ((int64_t)1 << 24) ? n - i : (int64_t)1 << 24;
        ok = write_crc(f, params + i, k * 4, &sum);
    }
    if (crc) *crc = sum;
    return model_tmp_finish(f, ok, tmp, path, err, errlen);
}
