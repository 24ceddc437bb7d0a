// hf_tokenizer.h — a Hugging Face tokenizer.json as a decoder: byte-level BPE ids to bytes.
// Not here: encoding (dev/data/hf_tokenize.py); other tokenizer models are refused.

// Byte-level BPE writes each byte as one character (GPT-2's bytes_to_unicode).
#pragma once
#include <string>
#include "hf.h"         // defines: Json, json_parse, JsonKeep, read_whole_file
#include "tokenizer.h"  // defines: Tokenizer, tokenizer_free

// The byte code point cp encodes in byte-level BPE, or -1.
static inline int byte_level_byte(uint32_t cp) {
    auto direct = [](uint32_t b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; };
    if (cp < 256) return direct(cp) ? (int)cp : -1;
    uint32_t n = 256;  // the indirect bytes, in order, are U+0100, U+0101, ...
    for (uint32_t b = 0; b < 256; b++)
        if (!direct(b) && n++ == cp) return (int)b;
    return -1;
}

// A byte-level token string (UTF-8) to bytes; 0 if not one.
static inline int byte_level_decode(const std::string& s, std::string* out) {
    out->clear();
    for (size_t i = 0; i < s.size();) {
        const unsigned char c = (unsigned char)s[i];
        const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 0;
        if (n == 0 || i + n > s.size()) return 0;
        uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1f : c & 0x0f;
        for (int k = 1; k < n; k++) cp = cp << 6 | ((unsigned char)s[i + k] & 0x3f);
        const int b = byte_level_byte(cp);
        if (b < 0) return 0;
        out->push_back((char)b);
        i += n;
    }
    return 1;
}

// tokenizer.json's parts a decoder needs: model.type and model.vocab, added_tokens, the decoder's type.
static inline bool hf_tokenizer_keeps(int level, const char* key) {
    if (level == 1)
        return key && (!strcmp(key, "model") || !strcmp(key, "added_tokens") || !strcmp(key, "decoder"));
    if (level == 2) return !key || !strcmp(key, "type") || !strcmp(key, "vocab") || !strcmp(key, "decoders");
    return true;  // vocab entries, an added token's id and content, a decoder's type
}

// Loads tokenizer.json into t: 1, or 0 with err, t empty.
static inline int tokenizer_init_hf(Tokenizer* t, const char* path, char* err, size_t errlen) {
    memset(t, 0, sizeof *t);
    t->eot_token = -1;
    std::string text;
    Json j;
    char why[400];
    JsonKeep keep;
    keep.keep = hf_tokenizer_keeps;
    keep.max_kept = (size_t)1 << 21;
    if (!read_whole_file(path, (int64_t)1 << 30, &text, err, errlen)) return 0;
    if (!json_parse(text.data(), text.size(), &j, why, sizeof why, keep) || j.type != Json::OBJ) {
        snprintf(err, errlen, "%.400s: %.300s", path, j.type == Json::OBJ ? why : "not a JSON object");
        return 0;
    }
    const Json* model = j.get("model");
    const Json* type = model ? model->get("type") : NULL;
    const Json* vocab = model ? model->get("vocab") : NULL;
    const Json* dec = j.get("decoder");
    const Json* dtype = dec ? dec->get("type") : NULL;
    bool byte_level = dtype && dtype->type == Json::STR && dtype->str == "ByteLevel";
    const Json* decs = dec ? dec->get("decoders") : NULL;  // a Sequence holding a ByteLevel
    for (size_t k = 0; decs && decs->type == Json::ARR && k < decs->items.size(); k++) {
        const Json* ty = decs->items[k].get("type");
        byte_level |= ty && ty->type == Json::STR && ty->str == "ByteLevel";
    }
    if (!type || type->type != Json::STR || type->str != "BPE" || !vocab || vocab->type != Json::OBJ ||
        !byte_level) {
        snprintf(err, errlen,
                 "%.400s: not a byte-level BPE tokenizer (model %s, decoder %s): samples print as ids", path,
                 type && type->type == Json::STR ? type->str.c_str() : "?",
                 dtype && dtype->type == Json::STR ? dtype->str.c_str() : "?");
        return 0;
    }
    // every id, the vocabulary's and the added tokens'
    std::vector<std::pair<int64_t, std::string>> pieces;
    const char* bad = NULL;
    std::string bytes;
    for (const auto& m : vocab->members) {
        if (m.second.type != Json::NUM || !m.second.is_int || m.second.i < 0 || m.second.i >= (1 << 24))
            bad = "a vocabulary id is not a whole number in [0, 2^24)";
        else if (!byte_level_decode(m.first, &bytes)) bad = "a vocabulary entry is not byte-level";
        if (bad) break;
        pieces.push_back({m.second.i, bytes});
    }
    const Json* added = j.get("added_tokens");
    for (size_t k = 0; !bad && added && added->type == Json::ARR && k < added->items.size(); k++) {
        const Json* id = added->items[k].get("id");
        const Json* content = added->items[k].get("content");
        if (!id || id->type != Json::NUM || !id->is_int || id->i < 0 || id->i >= (1 << 24) || !content ||
            content->type != Json::STR)
            bad = "an added token lacks a whole id in [0, 2^24) or its content";
        else pieces.push_back({id->i, content->str});  // special tokens print as written
    }
    if (bad || pieces.empty()) {
        snprintf(err, errlen, "%.400s: %s", path, bad ? bad : "an empty vocabulary");
        return 0;
    }
    int64_t n = 0;
    for (const auto& p : pieces) n = p.first + 1 > n ? p.first + 1 : n;
    t->vocab_size = (uint32_t)n;
    t->token_table = (char**)calloc((size_t)n, sizeof(char*));
    for (int64_t i = 0; i < n; i++) t->token_table[i] = (char*)calloc(1, 1);  // an id no entry names: ""
    for (const auto& p : pieces) {
        free(t->token_table[p.first]);
        t->token_table[p.first] = (char*)malloc(p.second.size() + 1);
        memcpy(t->token_table[p.first], p.second.c_str(), p.second.size() + 1);  // a NUL byte ends it early
    }
    for (const char* start : {"<|endoftext|>", "<|begin_of_text|>"})
        for (const auto& p : pieces)
            if (p.second == start) t->eot_token = (int)p.first;
    t->init_ok = 1;
    return 1;
}
