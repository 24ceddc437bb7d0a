// hf.h — Hugging Face GPT-2 checkpoints in and out: safetensors and config.json.
// Not here: PyTorch pickles (.bin), other architectures, tokenizer files.

// Conv1D stores (in, out), we (out, in): four matrices transpose both ways.
// lm_head is tied to wte.
#pragma once
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>
#include "bf16.h"   // defines: float_to_bf16, bf16_to_float
#include "json.h"   // defines: Json, json_parse, read_whole_file
#include "model.h"  // defines: GPTConfig, ParamLayout, gpt_layout, gpt_config_make, fopen_regular

// ----------------------------------------------------------------------------
// safetensors: u64 LE header length N, N bytes of JSON {"<name>": {"dtype": "F32", "shape": [..],
// "data_offsets": [begin, end]}, ...} (offsets from the data's start), then the data.

enum StDtype { ST_F32, ST_F16, ST_BF16, ST_OTHER };

struct StTensor {
    std::string name;
    StDtype dtype;
    std::string dtype_name;
    std::vector<int64_t> shape;
    int64_t offset, bytes;  // absolute in the file
    int file;               // index into HfCheckpoint::files
};

struct HfCheckpoint {
    std::string dir;                 // where config.json (and the shards) are
    std::vector<std::string> files;  // the .safetensors files
    std::vector<StTensor> tensors;
    std::unordered_map<std::string, size_t> by_name;  // tensor name -> index in tensors
    Json config;
};

static inline int st_dtype_size(const std::string& d) {
    if (d == "F64" || d == "I64" || d == "U64") return 8;
    if (d == "F32" || d == "I32" || d == "U32") return 4;
    if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
    if (d == "BOOL" || d == "U8" || d == "I8" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
    return 0;
}

// A safetensors header keeps its tensors' dtype, shape and data_offsets only.
static inline bool st_header_keeps(int level, const char* key) {
    if (level == 1) return key && strcmp(key, "__metadata__") != 0;
    if (level == 2)
        return key && (!strcmp(key, "dtype") || !strcmp(key, "shape") || !strcmp(key, "data_offsets"));
    return level == 3 && !key;
}

// One file's header into ck->tensors, checked: well-formed, in the file, shape-sized, no overlaps.
static inline int st_read_header(const char* path, int file, HfCheckpoint* ck, char* err, size_t errlen) {
    struct stat st;
    FILE* f = fopen_regular(path, "", &st, err, errlen);
    if (!f) return 0;
    unsigned char len8[8] = {0};
    uint64_t n = 0;
    const bool got = fread(len8, 1, 8, f) == 8;
    for (int k = 7; k >= 0; k--) n = n << 8 | len8[k];
    const int64_t size = (int64_t)st.st_size;
    if (!got) {
        fclose(f);
        snprintf(err, errlen,
                 "%.400s: not a safetensors file (%lld bytes, too short for the header's length)", path,
                 (long long)size);
        return 0;
    }
    if (n < 2 || n > (100u << 20) || (int64_t)n > size - 8) {
        fclose(f);
        snprintf(err, errlen, "%.400s: not a safetensors file (header length %llu, file %lld bytes)", path,
                 (unsigned long long)n, (long long)size);
        return 0;
    }
    std::string text((size_t)n, '\0');
    const bool read_ok = fread(&text[0], 1, (size_t)n, f) == (size_t)n;
    fclose(f);
    Json h;
    char why[300];
    if (!read_ok) {
        snprintf(err, errlen, "%.400s: short read", path);
        return 0;
    }
    JsonKeep keep;
    keep.keep = st_header_keeps;
    keep.max_items = 16;       // a shape of up to 16 dimensions
    keep.max_kept = 1u << 21;  // ~300k tensors' entries; real shards hold a few thousand
    if (!json_parse(text.data(), text.size(), &h, why, sizeof why, keep) || h.type != Json::OBJ) {
        snprintf(err, errlen, "%.400s: bad safetensors header: %.200s", path,
                 h.type == Json::OBJ ? why : "not a JSON object");
        return 0;
    }
    const int64_t data_start = 8 + (int64_t)n, data_size = size - data_start;
    std::vector<std::pair<int64_t, int64_t>> spans;
    for (const auto& m : h.members) {
        if (m.first == "__metadata__") continue;
        const Json& e = m.second;
        const Json *dt = e.get("dtype"), *shape = e.get("shape"), *offs = e.get("data_offsets");
        const char* bad = NULL;
        StTensor t;
        t.name = m.first;
        t.file = file;
        if (e.type != Json::OBJ || !dt || dt->type != Json::STR || !shape || shape->type != Json::ARR ||
            !offs || offs->type != Json::ARR || offs->items.size() != 2)
            bad = "needs dtype, shape and data_offsets [begin, end]";
        const int esize = bad ? 0 : st_dtype_size(dt->str);
        if (!bad && !esize) bad = "unknown dtype";
        int64_t count = 1;
        for (size_t k = 0; !bad && k < shape->items.size(); k++) {
            const Json& d = shape->items[k];
            if (d.type != Json::NUM || !d.is_int || d.i < 0 || d.i > ((int64_t)1 << 40)) bad = "bad shape";
            else if (d.i && count > (((int64_t)1 << 50) / d.i)) bad = "shape too large";
            else {
                count *= d.i;
                t.shape.push_back(d.i);
            }
        }
        if (!bad) {
            const Json &b = offs->items[0], &x = offs->items[1];
            if (b.type != Json::NUM || x.type != Json::NUM || !b.is_int || !x.is_int || b.i < 0 ||
                x.i < b.i || x.i > data_size)
                bad = "data_offsets outside the file";
            else if (x.i - b.i != count * esize) bad = "data_offsets do not match its shape and dtype";
            else {
                t.offset = data_start + b.i;
                t.bytes = x.i - b.i;
            }
        }
        if (bad) {
            snprintf(err, errlen, "%.400s: tensor '%.100s': %s", path, m.first.c_str(), bad);
            return 0;
        }
        t.dtype_name = dt->str;
        t.dtype = dt->str == "F32"    ? ST_F32
                  : dt->str == "F16"  ? ST_F16
                  : dt->str == "BF16" ? ST_BF16
                                      : ST_OTHER;
        if (t.bytes) spans.push_back({t.offset, t.offset + t.bytes});
        ck->tensors.push_back(std::move(t));
    }
    std::sort(spans.begin(), spans.end());
    for (size_t k = 1; k < spans.size(); k++)
        if (spans[k].first < spans[k - 1].second) {
            snprintf(err, errlen, "%.400s: two tensors share bytes at offset %lld", path,
                     (long long)spans[k].first);
            return 0;
        }
    return 1;
}

static inline bool ends_with(const std::string& s, const char* tail) {
    const size_t n = strlen(tail);
    return s.size() >= n && s.compare(s.size() - n, n, tail) == 0;
}
static inline bool is_dir(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}
static inline bool file_exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

// A directory, .safetensors file or index .json; not an llm.c model file.
static inline int hf_is_checkpoint(const char* path) {
    const std::string s(path);
    return is_dir(path) || ends_with(s, ".safetensors") || ends_with(s, ".json");
}

// The tokenizer.json of a Hugging Face checkpoint given as -e: in the directory, or beside its .safetensors
// file or index .json. "" where there is none (an llm.c model file, a run's checkpoint, a spec).
static inline std::string hf_tokenizer_json_of(const char* model) {
    if (!model || !hf_is_checkpoint(model)) return "";
    const std::string s(model),
        dir = is_dir(model)
                  ? s
                  : (s.rfind('/') == std::string::npos ? std::string(".") : s.substr(0, s.rfind('/')));
    const std::string json = dir + "/tokenizer.json";
    return file_exists(json) && !is_dir(json.c_str()) ? json : "";
}

// config.json's size limit: real ones are a few kB (id2label maps included).
#define HF_CONFIG_MAX_BYTES (4 << 20)

// config.json (path) into *c: its top object's values and theirs (rope_scaling's, a list of eos ids).
static inline int hf_config_read(const std::string& path, Json* c, char* err, size_t errlen) {
    std::string text;
    char why[300];
    if (!read_whole_file(path.c_str(), HF_CONFIG_MAX_BYTES, &text, err, errlen)) return 0;
    JsonKeep top;  // deeper values are checked as JSON, then dropped
    top.keep = [](int level, const char* key) { return level == 2 || (level == 1 && key); };
    top.max_kept = 1 << 16;  // a real config.json has a few hundred values
    if (!json_parse(text.data(), text.size(), c, why, sizeof why, top) || c->type != Json::OBJ) {
        snprintf(err, errlen, "%.400s: %.200s", path.c_str(),
                 c->type == Json::OBJ ? why : "not a JSON object");
        *c = Json();
        return 0;
    }
    return 1;
}

// Reads config.json and every safetensors header.
static inline int hf_open(const char* path, HfCheckpoint* ck, char* err, size_t errlen) {
    std::string p(path), index;
    *ck = HfCheckpoint();
    if (is_dir(path)) {
        ck->dir = p;
        // transformers' order: the single file first, an index beside it (a stale one) is not read
        if (file_exists(p + "/model.safetensors")) ck->files.push_back(p + "/model.safetensors");
        else if (file_exists(p + "/model.safetensors.index.json"))
            index = p + "/model.safetensors.index.json";
        else {
            snprintf(
                err, errlen, "%.400s holds no model.safetensors%s", path,
                file_exists(p + "/pytorch_model.bin")
                    ? " (only PyTorch's pytorch_model.bin: save it with "
                      "save_pretrained(dir, safe_serialization=True))"
                    : " or model.safetensors.index.json (a Hugging Face model), and no complete checkpoint "
                      "of a run (-o DIR)");
            return 0;
        }
    } else {
        const size_t slash = p.rfind('/');
        ck->dir = slash == std::string::npos ? "." : p.substr(0, slash);
        if (ends_with(p, ".json")) index = p;
        else ck->files.push_back(p);
    }
    char why[600];
    std::string text;
    if (!index.empty()) {  // {"metadata": {...}, "weight_map": {"<tensor>": "<shard file>", ...}}
        Json idx;
        if (!read_whole_file(index.c_str(), 64 << 20, &text, err, errlen)) return 0;
        const Json* map = NULL;
        JsonKeep keep;  // the weight_map's names and files, nothing else
        keep.keep = [](int level, const char* key) {
            return key && (level == 2 || (level == 1 && !strcmp(key, "weight_map")));
        };
        keep.max_kept = 1u << 18;  // tensors named by the index (Llama-3.1-405B has about 1,100)
        const bool parsed = json_parse(text.data(), text.size(), &idx, why, sizeof why, keep);
        if (!parsed || !(map = idx.get("weight_map")) || map->type != Json::OBJ) {
            snprintf(err, errlen, "%.400s: not a shard index (%.200s)", index.c_str(),
                     !parsed ? why
                     : map   ? "its weight_map is not an object"
                             : "no weight_map object");
            return 0;
        }
        std::unordered_set<std::string> seen;
        for (const auto& m : map->members) {
            const std::string& f = m.second.str;
            if (m.second.type != Json::STR || f.empty() || f.find('/') != std::string::npos || f == "." ||
                f == "..") {
                snprintf(err, errlen,
                         "%.400s: tensor '%.100s' maps to '%.100s', not a file name beside the index",
                         index.c_str(), m.first.c_str(), f.c_str());
                return 0;
            }
            const std::string full = ck->dir + "/" + f;
            if (seen.insert(full).second) ck->files.push_back(full);
        }
        if (ck->files.empty()) {
            snprintf(err, errlen, "%.400s: the weight_map is empty", index.c_str());
            return 0;
        }
    }
    for (size_t k = 0; k < ck->files.size(); k++)
        if (!st_read_header(ck->files[k].c_str(), (int)k, ck, err, errlen)) return 0;
    for (size_t b = 0; b < ck->tensors.size(); b++) {  // shards must not repeat a name
        const auto in = ck->by_name.emplace(ck->tensors[b].name, b);
        if (!in.second) {
            const StTensor &ta = ck->tensors[in.first->second], &tb = ck->tensors[b];
            snprintf(err, errlen, "tensor '%.100s' is in %.300s and %.300s", ta.name.c_str(),
                     ck->files[ta.file].c_str(), ck->files[tb.file].c_str());
            return 0;
        }
    }
    const std::string cfg_path = ck->dir + "/config.json";
    if (!file_exists(cfg_path)) {
        snprintf(err, errlen, "%.400s: no config.json beside the weights (transformers saves one with them)",
                 path);
        return 0;
    }
    return hf_config_read(cfg_path, &ck->config, err, errlen);
}

// The first of keys set to neither true, false nor null ("false" is a string, and Python reads it as true).
static inline const char* hf_config_non_bool(const Json& c, std::initializer_list<const char*> keys) {
    for (const char* k : keys) {
        const Json* v = c.get(k);
        if (v && v->type != Json::BOOL && v->type != Json::NUL) return k;
    }
    return NULL;
}

// config.json -> GPTConfig; refuses what we don't compute (erf GELU, untied lm_head, ...).
static inline int hf_config_to_gpt(const HfCheckpoint* ck, GPTConfig* cfg, char* err, size_t errlen) {
    const Json& c = ck->config;
    const std::string where = ck->dir + "/config.json";
    auto str_is = [&](const char* key, const char* dflt,
                      std::initializer_list<const char*> ok) -> const char* {
        const Json* v = c.get(key);
        if (v && v->type == Json::NUL) v = NULL;
        const std::string s = v ? (v->type == Json::STR ? v->str : std::string("(not a string)")) : dflt;
        for (const char* o : ok)
            if (s == o) return NULL;
        static thread_local char bad[160];
        snprintf(bad, sizeof bad, "%s '%.60s'", key, s.c_str());
        return bad;
    };
    auto flag_is = [&](const char* key, bool dflt, bool want) {
        const Json* v = c.get(key);
        return (v && v->type == Json::BOOL ? v->b : dflt) == want;
    };
    const char* too_large = NULL;  // the first size over the limit int_of takes
    auto int_of = [&](const char* key, int64_t* out) {
        const Json* v = c.get(key);
        if (v && v->type == Json::NUM && v->is_int && v->i > 100000000 && !too_large) too_large = key;
        if (!v || v->type != Json::NUM || !v->is_int || v->i < 1 || v->i > 100000000) return false;
        *out = v->i;
        return true;
    };
    const Json* mt = c.get("model_type");
    if (!mt || mt->type == Json::NUL) {
        snprintf(err, errlen,
                 "%.400s: config.json has no model_type (transformers needs it to pick the architecture: "
                 "gpt2, llama or qwen2)",
                 where.c_str());
        return 0;
    }
    const char* bad = str_is("model_type", "gpt2", {"gpt2"});
    if (bad) {
        snprintf(err, errlen,
                 "%.400s: %s: only GPT-2 checkpoints can be read here (train_gpt_cpu reads llama and qwen2)",
                 where.c_str(), bad);
        return 0;
    }
    bad = str_is("activation_function", "gelu_new", {"gelu_new", "gelu_pytorch_tanh", "gelu_fast"});
    if (bad) {
        snprintf(err, errlen, "%.400s: %s: this model computes GELU's tanh approximation (gelu_new)",
                 where.c_str(), bad);
        return 0;
    }
    int64_t L, NH, C, V, T;
    if (!int_of("n_layer", &L) || !int_of("n_head", &NH) || !int_of("n_embd", &C) ||
        !int_of("vocab_size", &V) || !(int_of("n_positions", &T) || int_of("n_ctx", &T))) {
        if (too_large) {
            snprintf(err, errlen, "%.400s: %s %lld is too large (at most 100000000)", where.c_str(),
                     too_large, (long long)c.get(too_large)->i);
            return 0;
        }
        snprintf(err, errlen,
                 "%.400s: needs positive whole n_layer, n_head, n_embd, vocab_size and n_positions",
                 where.c_str());
        return 0;
    }
    const char* refuse = NULL;
    const char* flag = hf_config_non_bool(c, {"tie_word_embeddings", "scale_attn_weights",
                                              "scale_attn_by_inverse_layer_idx", "add_cross_attention"});
    if (flag) {
        snprintf(err, errlen, "%.400s: %s is not true or false (JSON's own, unquoted)", where.c_str(), flag);
        return 0;
    }
    const Json* inner = c.get("n_inner");
    const Json* eps = c.get("layer_norm_epsilon");
    if (inner && inner->type != Json::NUL &&
        !(inner->type == Json::NUM && inner->is_int && inner->i == 4 * C))
        refuse = "n_inner is not 4 * n_embd (this model's MLP width)";
    else if (eps && (eps->type != Json::NUM || fabs(eps->num - 1e-5) > 1e-12))
        refuse = "layer_norm_epsilon is not 1e-5 (this model's)";
    else if (!flag_is("tie_word_embeddings", true, true))
        refuse =
            "tie_word_embeddings is false: this model's output layer is wte (tied), an untied lm_head has no "
            "place";
    else if (!flag_is("scale_attn_weights", true, true)) refuse = "scale_attn_weights is false";
    else if (!flag_is("scale_attn_by_inverse_layer_idx", false, false))
        refuse = "scale_attn_by_inverse_layer_idx is true";
    else if (!flag_is("add_cross_attention", false, false)) refuse = "add_cross_attention is true";
    if (refuse) {
        snprintf(err, errlen, "%.400s: %s", where.c_str(), refuse);
        return 0;
    }
    char why[256];
    if (!gpt_config_make(cfg, L, C, NH, T, V, why, sizeof why)) {
        snprintf(err, errlen, "%.400s: %.200s", where.c_str(), why);
        return 0;
    }
    return 1;
}

// ----------------------------------------------------------------------------
// The tensor names and shapes of GPT2LMHeadModel against our layout.

struct HfLayerName {
    const char* suffix;
    int t;
    int transposed;
};
static const HfLayerName hf_layer_names[NUM_LAYER_TENSORS] = {{"ln_1.weight", LN1W, 0},
                                                              {"ln_1.bias", LN1B, 0},
                                                              {"attn.c_attn.weight", QKVW, 1},
                                                              {"attn.c_attn.bias", QKVB, 0},
                                                              {"attn.c_proj.weight", ATTPROJW, 1},
                                                              {"attn.c_proj.bias", ATTPROJB, 0},
                                                              {"ln_2.weight", LN2W, 0},
                                                              {"ln_2.bias", LN2B, 0},
                                                              {"mlp.c_fc.weight", FCW, 1},
                                                              {"mlp.c_fc.bias", FCB, 0},
                                                              {"mlp.c_proj.weight", FCPROJW, 1},
                                                              {"mlp.c_proj.bias", FCPROJB, 0}};
static const char* const hf_embed_names[NUM_EMBED_TENSORS] = {"wte.weight", "wpe.weight", "ln_f.weight",
                                                              "ln_f.bias"};

// A tensor as transformers stores it (rows x cols, cols 0: vector) and its place in ours.
struct HfTensorPlace {
    std::string name;  // without the "transformer." prefix
    int64_t rows, cols, dst, count;
    int transposed;
};

static inline std::vector<HfTensorPlace> hf_tensor_places(const GPTConfig* c) {
    const ParamLayout p = gpt_layout(c);
    const int64_t C = c->channels;
    std::vector<HfTensorPlace> out;
    out.push_back(
        {hf_embed_names[WTE], c->vocab_size, C, p.embed_offset[WTE], (int64_t)c->vocab_size * C, 0});
    out.push_back({hf_embed_names[WPE], c->max_seq_len, C, p.embed_offset[WPE], p.embed_size[WPE], 0});
    for (int l = 0; l < c->num_layers; l++)
        for (int k = 0; k < NUM_LAYER_TENSORS; k++) {
            const HfLayerName& n = hf_layer_names[k];
            const int64_t size = p.layer_size[n.t];
            // stored (in, out); in = C, except 4C for the MLP's down projection
            const int64_t in = n.t == FCPROJW ? 4 * C : C;
            out.push_back({"h." + std::to_string(l) + "." + n.suffix, n.transposed ? in : size,
                           n.transposed ? size / in : 0, gpt_layer_offset(&p, l) + p.layer_offset[n.t], size,
                           n.transposed});
        }
    out.push_back({hf_embed_names[LNFW], C, 0, p.embed_offset[LNFW], C, 0});
    out.push_back({hf_embed_names[LNFB], C, 0, p.embed_offset[LNFB], C, 0});
    return out;
}

static inline float f16_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0) {  // zero or subnormal: m * 2^-24, exact in float
        const float f = (float)m * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    const uint32_t bits = sign | (e == 31 ? 0x7F800000u | (m << 13) : ((e + 112) << 23) | (m << 13));
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

// dst (cols, rows) = src (rows, cols) transposed, in tiles that stay in cache.
static inline void transpose_f32(const float* src, float* dst, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
    for (int64_t r0 = 0; r0 < rows; r0 += 64)
        for (int64_t c0 = 0; c0 < cols; c0 += 64)
            for (int64_t r = r0; r < std::min(rows, r0 + 64); r++)
                for (int64_t c = c0; c < std::min(cols, c0 + 64); c++) dst[c * rows + r] = src[r * cols + c];
}

// Reads tensor t's values as fp32 into out (t's element count).
static inline int st_read_f32(const HfCheckpoint* ck, const StTensor& t, float* out,
                              std::vector<uint16_t>& half, char* err, size_t errlen) {
    const char* path = ck->files[t.file].c_str();
    if (t.dtype == ST_OTHER) {
        snprintf(err, errlen, "%.400s: tensor '%.100s' is %.20s (F32, F16 or BF16 can be read)", path,
                 t.name.c_str(), t.dtype_name.c_str());
        return 0;
    }
    const int fd = open(path, O_RDONLY);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %.400s: %.60s", path, strerror(errno));
        return 0;
    }
    const int64_t n = t.bytes / (t.dtype == ST_F32 ? 4 : 2);
    unsigned char* dst = (unsigned char*)out;
    if (t.dtype != ST_F32) {
        half.resize((size_t)n);
        dst = (unsigned char*)half.data();
    }
    int64_t done = 0;
    while (done < t.bytes) {
        const ssize_t got =
            pread(fd, dst + done, (size_t)std::min<int64_t>(t.bytes - done, 1 << 30), t.offset + done);
        if (got <= 0) break;
        done += got;
    }
    close(fd);
    if (done != t.bytes) {
        snprintf(err, errlen, "%.400s: short read of tensor '%.100s'", path, t.name.c_str());
        return 0;
    }
    if (t.dtype == ST_BF16)
        for (int64_t i = 0; i < n; i++) out[i] = bf16_to_float(half[(size_t)i]);
    else if (t.dtype == ST_F16)
        for (int64_t i = 0; i < n; i++) out[i] = f16_to_float(half[(size_t)i]);
    return 1;
}

// name or transformer.name, whichever comes first in the files
static inline const StTensor* hf_find(const HfCheckpoint* ck, const std::string& name) {
    const auto a = ck->by_name.find(name), b = ck->by_name.find("transformer." + name);
    const size_t end = ck->tensors.size();
    const size_t k =
        std::min(a == ck->by_name.end() ? end : a->second, b == ck->by_name.end() ? end : b->second);
    return k < end ? &ck->tensors[k] : NULL;
}

// Every tensor is GPT-2's, config-shaped, and none of ours is missing.
static inline int hf_check_tensors(const HfCheckpoint* ck, const GPTConfig* cfg, char* err, size_t errlen) {
    const std::vector<HfTensorPlace> places = hf_tensor_places(cfg);
    std::vector<int> used(ck->tensors.size(), 0);
    for (const auto& pl : places) {
        const StTensor* t = hf_find(ck, pl.name);
        if (!t) {
            snprintf(err, errlen, "%.400s: tensor '%.100s' is missing", ck->dir.c_str(), pl.name.c_str());
            return 0;
        }
        const bool shape_ok = pl.cols
                                  ? t->shape.size() == 2 && t->shape[0] == pl.rows && t->shape[1] == pl.cols
                                  : t->shape.size() == 1 && t->shape[0] == pl.rows;
        if (!shape_ok) {
            std::string got;
            for (int64_t d : t->shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
            snprintf(err, errlen, "%.400s: tensor '%.100s' has shape (%.80s), config.json implies (%lld%s%s)",
                     ck->files[t->file].c_str(), t->name.c_str(), got.c_str(), (long long)pl.rows,
                     pl.cols ? ", " : "", pl.cols ? std::to_string(pl.cols).c_str() : "");
            return 0;
        }
        used[(size_t)(t - ck->tensors.data())] = 1;
    }
    for (size_t k = 0; k < ck->tensors.size(); k++) {
        if (used[k]) continue;
        std::string n = ck->tensors[k].name;
        if (n.compare(0, 12, "transformer.") == 0) n = n.substr(12);
        // causal-mask buffers of old versions; lm_head is checked against wte when loading
        if (n.compare(0, 2, "h.") == 0 && (ends_with(n, ".attn.bias") || ends_with(n, ".attn.masked_bias")))
            continue;
        if (n == "lm_head.weight") continue;
        snprintf(err, errlen, "%.400s: tensor '%.100s' is not part of a GPT-2 model with this config.json",
                 ck->files[ck->tensors[k].file].c_str(), ck->tensors[k].name.c_str());
        return 0;
    }
    return 1;
}

// gpt_read_header for a Hugging Face checkpoint.
static inline int hf_read_config(const char* path, GPTConfig* cfg, char* err, size_t errlen) {
    HfCheckpoint ck;
    return hf_open(path, &ck, err, errlen) && hf_config_to_gpt(&ck, cfg, err, errlen) &&
           hf_check_tensors(&ck, cfg, err, errlen);
}

// One tensor into our layout at dst, widened, transposed; a saved lm_head must equal wte.
static inline int hf_read_place(const HfCheckpoint* ck, const GPTConfig* cfg, const HfTensorPlace& pl,
                                float* dst, std::vector<float>* tmp, std::vector<uint16_t>* half, char* err,
                                size_t errlen) {
    const StTensor* t = hf_find(ck, pl.name);
    if (pl.transposed) {
        tmp->resize((size_t)pl.count);
        if (!st_read_f32(ck, *t, tmp->data(), *half, err, errlen)) return 0;
        transpose_f32(tmp->data(), dst, pl.rows, pl.cols);
    } else if (!st_read_f32(ck, *t, dst, *half, err, errlen)) return 0;
    const int64_t bad = first_non_finite(dst, pl.count);
    if (bad >= 0) {
        snprintf(err, errlen, "%.400s: %s holds %s", ck->files[t->file].c_str(), pl.name.c_str(),
                 isnan(dst[bad]) ? "a NaN" : "an infinity");
        return 0;
    }
    if (pl.dst != gpt_layout(cfg).embed_offset[WTE]) return 1;
    const StTensor* head = hf_find(ck, "lm_head.weight");
    if (!head) return 1;
    const int64_t real = (int64_t)cfg->vocab_size * cfg->channels;
    if (head->shape.size() != 2 || head->shape[0] != cfg->vocab_size || head->shape[1] != cfg->channels) {
        snprintf(err, errlen, "%.400s: lm_head.weight does not have wte's shape",
                 ck->files[head->file].c_str());
        return 0;
    }
    tmp->resize((size_t)real);
    if (!st_read_f32(ck, *head, tmp->data(), *half, err, errlen)) return 0;
    if (memcmp(tmp->data(), dst, sizeof(float) * (size_t)real) != 0) {
        snprintf(err, errlen,
                 "%.400s: lm_head.weight differs from wte: an untied output layer, which this model "
                 "does not have (its output layer is wte)",
                 ck->files[head->file].c_str());
        return 0;
    }
    return 1;
}

// gpt_load_params for a Hugging Face checkpoint.
static inline int hf_load_params(const char* path, const GPTConfig* cfg, float* params, char* err,
                                 size_t errlen, int64_t lo, int64_t hi) {
    HfCheckpoint ck;
    GPTConfig c2;
    if (!hf_open(path, &ck, err, errlen) || !hf_config_to_gpt(&ck, &c2, err, errlen)) return 0;
    if (memcmp(&c2, cfg, sizeof c2) != 0) {
        snprintf(err, errlen, "%.400s changed while loading", path);
        return 0;
    }
    if (!hf_check_tensors(&ck, cfg, err, errlen)) return 0;
    const ParamLayout p = gpt_layout(cfg);
    int64_t total = 0, done = 0;
    for (const auto& t : ck.tensors) total += t.bytes;
    std::vector<float> tmp;
    std::vector<uint16_t> half;
    int quarter = 0;
    params -= lo;  // a window [lo, hi): params points at element lo (gpt_load_params)
    for (const auto& pl : hf_tensor_places(cfg)) {
        if (pl.dst < lo || pl.dst >= hi) continue;
        if (!hf_read_place(&ck, cfg, pl, params + pl.dst, &tmp, &half, err, errlen)) return 0;
        done += hf_find(&ck, pl.name)->bytes;
        read_progress("loading", path, done, total, &quarter);
    }
    const int64_t real = (int64_t)cfg->vocab_size * cfg->channels;
    if (lo > p.embed_offset[WTE] || hi <= p.embed_offset[WTE]) return 1;  // the window holds no wte
    memset(params + p.embed_offset[WTE] + real, 0, sizeof(float) * (size_t)(p.embed_size[WTE] - real));
    return 1;
}

// ----------------------------------------------------------------------------
// Writing, as save_pretrained: fp32 or bf16, sharded, no lm_head (re-tied on load).

struct HfShardPlan {
    std::vector<std::vector<int>> shards;  // indices into the places
    int64_t total_bytes = 0;
};

static inline HfShardPlan hf_plan_shards(const std::vector<HfTensorPlace>& places, int esize,
                                         int64_t max_shard_bytes) {
    HfShardPlan plan;
    int64_t in_shard = 0;
    for (size_t k = 0; k < places.size(); k++) {
        const int64_t b = places[k].count * esize;
        if (plan.shards.empty() || (in_shard > 0 && in_shard + b > max_shard_bytes)) {
            plan.shards.emplace_back();
            in_shard = 0;
        }
        plan.shards.back().push_back((int)k);
        in_shard += b;
        plan.total_bytes += b;
    }
    return plan;
}

static inline std::string hf_shard_name(size_t k, size_t n) {
    if (n == 1) return "model.safetensors";
    char b[64];
    snprintf(b, sizeof b, "model-%05zu-of-%05zu.safetensors", k + 1, n);
    return b;
}

// A small file (config, index), atomically.
static inline int write_small_file(const std::string& dir, const char* name, const std::string& text,
                                   char* err, size_t errlen) {
    const std::string path = dir + "/" + name, tmp = path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "wb");
    if (!f) {
        snprintf(err, errlen, "cannot create %.400s: %.60s", tmp.c_str(), strerror(errno));
        return 0;
    }
    int why;
    if (!finish_atomic_write(f, fwrite(text.data(), 1, text.size(), f) == text.size(), tmp.c_str(),
                             path.c_str(), &why)) {
        snprintf(err, errlen, "failed writing %.400s: %.80s", path.c_str(),
                 why ? strerror(why) : "short write");
        return 0;
    }
    return 1;
}

// Writes `places` into dir's safetensors, sharded past max_shard_bytes; 0 with err.
template <typename ReadTensor>
static inline int hf_write_places(const std::string& dir, const std::vector<HfTensorPlace>& places,
                                  const std::string& prefix, int bf16, int64_t max_shard_bytes,
                                  ReadTensor read, char* err, size_t errlen) {
    const int esize = bf16 ? 2 : 4;
    const HfShardPlan plan = hf_plan_shards(places, esize, max_shard_bytes);
    std::vector<float> ours, theirs;
    std::vector<uint16_t> half;
    std::string index =
        "{\n  \"metadata\": {\"total_size\": " + std::to_string(plan.total_bytes) + "},\n  \"weight_map\": {";
    int64_t done = 0;
    int quarter = 0;
    for (size_t s = 0; s < plan.shards.size(); s++) {
        const std::string name = hf_shard_name(s, plan.shards.size()), path = dir + "/" + name,
                          tmp = path + ".tmp";
        std::string h = "{\"__metadata__\":{\"format\":\"pt\"}";
        int64_t off = 0;
        for (int k : plan.shards[s]) {
            const HfTensorPlace& pl = places[(size_t)k];
            const int64_t b = pl.count * esize;
            h += ",\"" + prefix + pl.name + "\":{\"dtype\":\"" + (bf16 ? "BF16" : "F32") + "\",\"shape\":[" +
                 std::to_string(pl.rows) + (pl.cols ? "," + std::to_string(pl.cols) : "") +
                 "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + b) + "]}";
            off += b;
            index += std::string(index.back() == '{' ? "\n" : ",\n") + "    \"" + prefix + pl.name +
                     "\": \"" + name + "\"";
        }
        h += "}";
        while (h.size() % 8) h += ' ';  // data 8-byte aligned, as safetensors pads
        FILE* f = fopen(tmp.c_str(), "wb");
        if (!f) {
            snprintf(err, errlen, "cannot create %.400s: %.60s", tmp.c_str(), strerror(errno));
            return 0;
        }
        unsigned char len8[8];
        for (int k = 0; k < 8; k++) len8[k] = (unsigned char)((uint64_t)h.size() >> (8 * k));
        errno = 0;
        int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(h.data(), 1, h.size(), f) == h.size();
        for (size_t j = 0; j < plan.shards[s].size() && ok; j++) {
            const HfTensorPlace& pl = places[(size_t)plan.shards[s][j]];
            ours.resize((size_t)pl.count);
            if (!read((size_t)plan.shards[s][j], ours.data())) {
                fclose(f);
                remove(tmp.c_str());
                return 0;
            }
            const float* out = ours.data();
            if (pl.transposed) {  // ours (out, in) -> stored (in, out) = (rows, cols)
                theirs.resize((size_t)pl.count);
                transpose_f32(ours.data(), theirs.data(), pl.cols, pl.rows);
                out = theirs.data();
            }
            if (bf16) {
                half.resize((size_t)pl.count);
                uint16_t* h = half.data();
#pragma omp parallel for schedule(static)
                for (int64_t i = 0; i < pl.count; i++) h[i] = float_to_bf16(out[i]);
                ok = (int64_t)fwrite(half.data(), 2, (size_t)pl.count, f) == pl.count;
            } else ok = (int64_t)fwrite(out, 4, (size_t)pl.count, f) == pl.count;
            done += pl.count * esize;
            read_progress("writing", dir.c_str(), done, plan.total_bytes, &quarter);
        }
        int why;
        if (!finish_atomic_write(f, ok, tmp.c_str(), path.c_str(), &why)) {
            snprintf(err, errlen, "failed writing %.400s: %.80s", path.c_str(),
                     why ? strerror(why) : "short write");
            return 0;
        }
    }
    index += "\n  }\n}\n";
    return plan.shards.size() == 1 ||
           write_small_file(dir, "model.safetensors.index.json", index, err, errlen);
}

// GPT-2's tensors (hf_tensor_places, under "transformer.").
template <typename ReadTensor>
static inline int hf_write_safetensors(const std::string& dir, const GPTConfig* cfg, int bf16,
                                       int64_t max_shard_bytes, ReadTensor read, char* err, size_t errlen) {
    return hf_write_places(dir, hf_tensor_places(cfg), "transformer.", bf16, max_shard_bytes, read, err,
                           errlen);
}

// The ids generation starts with and stops at, as official chat models list them (Llama 3 Instruct:
// eos_token_id [128001, 128008, 128009]; Qwen2.5 Instruct: [151645, 151643]). Empty: none known.
struct HfSpecialIds {
    int bos = -1;
    std::vector<int> eos;      // config.json's
    std::vector<int> gen_eos;  // generation_config.json's: the end-of-turn among them
    Json generation;           // the source's generation_config.json (OBJ), merged into ours
};

// 128009 or [128001, 128009]
static inline std::string hf_ids_text(const std::vector<int>& ids) {
    if (ids.size() == 1) return std::to_string(ids[0]);
    std::string s = "[";
    for (size_t k = 0; k < ids.size(); k++) s += (k ? ", " : "") + std::to_string(ids[k]);
    return s + "]";
}

// config.json's lines for the ids; null where unknown (LlamaConfig would default to 1 and 2).
static inline std::string hf_config_id_lines(const HfSpecialIds& ids) {
    return "  \"bos_token_id\": " + (ids.bos >= 0 ? std::to_string(ids.bos) : std::string("null")) +
           ",\n  \"eos_token_id\": " + (ids.eos.empty() ? std::string("null") : hf_ids_text(ids.eos)) + ",\n";
}

// generation_config.json: the source's, its bos and eos ids set to ours; else do_sample false and the ids.
static inline int hf_generation_config_text(const HfSpecialIds& ids, std::string* out) {
    Json g = ids.generation.type == Json::OBJ ? ids.generation : Json();
    if (g.type != Json::OBJ) {
        g.type = Json::OBJ;
        g.members.emplace_back("do_sample", Json());
        g.members.back().second.type = Json::BOOL;
    }
    auto set = [&](const char* key, const std::vector<int>& v) {
        Json j;
        j.type = v.size() == 1 ? Json::NUM : Json::ARR;
        for (int id : v) {
            Json n;
            n.type = Json::NUM;
            n.is_int = true;
            n.i = id;
            n.num = id;
            if (v.size() == 1) j = n;
            else j.items.push_back(n);
        }
        for (auto& m : g.members)
            if (m.first == key) {
                m.second = j;
                return;
            }
        g.members.emplace_back(key, j);
    };
    if (ids.bos >= 0) set("bos_token_id", {ids.bos});
    if (!ids.gen_eos.empty()) set("eos_token_id", ids.gen_eos);
    out->clear();
    if (!json_write(g, out)) return 0;
    *out += "\n";
    return 1;
}

// config.json and generation_config.json for cfg (dropout 0, as trained here); ids NULL: <|endoftext|>.
static inline int hf_write_config(const std::string& dir, const GPTConfig* c, int bf16, char* err,
                                  size_t errlen, const HfSpecialIds* ids = NULL) {
    HfSpecialIds eot;  // GPT-2's <|endoftext|> (or the last id of a smaller vocabulary) when none are given
    eot.bos = c->vocab_size > 50256 ? 50256 : c->vocab_size - 1;
    eot.eos = eot.gen_eos = {eot.bos};
    if (!ids || (ids->bos < 0 && ids->gen_eos.empty())) ids = &eot;
    const std::string id_lines = hf_config_id_lines(*ids);
    char b[2048];
    snprintf(
        b, sizeof b,
        "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
        "  \"activation_function\": \"gelu_new\",\n  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_embd\": %d,\n"
        "  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"vocab_size\": %d,\n  \"n_inner\": null,\n"
        "  \"layer_norm_epsilon\": 1e-05,\n  \"initializer_range\": 0.02,\n  \"attn_pdrop\": 0.0,\n"
        "  \"embd_pdrop\": 0.0,\n  \"resid_pdrop\": 0.0,\n  \"scale_attn_weights\": true,\n"
        "  \"scale_attn_by_inverse_layer_idx\": false,\n  \"reorder_and_upcast_attn\": false,\n"
        "  \"tie_word_embeddings\": true,\n  \"use_cache\": true,\n%.600s"
        "  \"torch_dtype\": \"%s\"\n}\n",
        c->num_layers, c->num_heads, c->channels, c->max_seq_len, c->max_seq_len, c->vocab_size,
        id_lines.c_str(), bf16 ? "bfloat16" : "float32");
    std::string g;
    if (!hf_generation_config_text(*ids, &g)) {
        snprintf(err, errlen, "the source's generation_config.json holds a number JSON cannot write");
        return 0;
    }
    return write_small_file(dir, "config.json", b, err, errlen) &&
           write_small_file(dir, "generation_config.json", g, err, errlen);
}
