// hf_tokenizer.h — a Hugging Face tokenizer.json as a decoder: byte-level BPE ids to bytes; and the ids a
// chat model starts with and stops at (hf_special_ids, for export_hf).
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

// Loads tokenizer.json into t: 1, or 0 with err, t empty. Ids from max_ids on (the model's vocabulary)
// are refused before the id table is allocated.
static inline int tokenizer_init_hf(Tokenizer* t, const char* path, char* err, size_t errlen,
                                    int64_t max_ids = 1 << 24) {
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
    if (n > max_ids) {  // 2^24 ids cost 660 MB of table before the vocabulary check
        snprintf(
            err, errlen,
            "%.400s: token id %lld is past the model's vocabulary of %lld: samples are printed as token ids",
            path, (long long)(n - 1), (long long)max_ids);
        return 0;
    }
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

// ----------------------------------------------------------------------------
// The ids a chat model starts with and stops at (export_hf's config.json and generation_config.json)

// A JSON file in dir, parsed with keep; NUL when absent. 0 with err when unreadable or not an object.
static inline int hf_read_json(const std::string& dir, const char* name, int64_t max_bytes, JsonKeep keep,
                               Json* out, char* err, size_t errlen) {
    const std::string path = dir + "/" + name;
    std::string text;
    char why[300];
    *out = Json();
    if (!file_exists(path)) return 1;
    if (!read_whole_file(path.c_str(), max_bytes, &text, err, errlen)) return 0;
    if (!json_parse(text.data(), text.size(), out, why, sizeof why, keep) || out->type != Json::OBJ) {
        snprintf(err, errlen, "%.400s: %.200s", path.c_str(),
                 out->type == Json::OBJ ? why : "not a JSON object");
        *out = Json();
        return 0;
    }
    return 1;
}

// The ids a tokenizer folder names, the largest + 1 (export_hf -t: none may be past the model's embedding
// rows): tokenizer.json's vocabulary (BPE, WordPiece: an object of ids; Unigram: a list) and added tokens,
// else vocab.json's and added_tokens.json's. 0: neither file (a SentencePiece tokenizer.model alone); -1
// with err: one is there but unreadable.
static inline int64_t hf_tokenizer_id_count(const std::string& dir, char* err, size_t errlen) {
    JsonKeep keep;
    keep.keep = hf_tokenizer_keeps;
    keep.max_kept = (size_t)1 << 23;
    Json j;
    int64_t n = 0;
    auto ids_of = [&n](const Json& object) {  // {"piece": id, ...}
        for (const auto& m : object.members)
            if (m.second.type == Json::NUM && m.second.is_int && m.second.i + 1 > n) n = m.second.i + 1;
    };
    if (!hf_read_json(dir, "tokenizer.json", (int64_t)1 << 30, keep, &j, err, errlen)) return -1;
    if (j.type == Json::OBJ) {
        const Json* model = j.get("model");
        const Json* vocab = model ? model->get("vocab") : NULL;
        if (vocab && vocab->type == Json::OBJ) ids_of(*vocab);
        if (vocab && vocab->type == Json::ARR) n = (int64_t)vocab->items.size();
        const Json* added = j.get("added_tokens");
        for (size_t k = 0; added && added->type == Json::ARR && k < added->items.size(); k++) {
            const Json* id = added->items[k].get("id");
            if (id && id->type == Json::NUM && id->is_int && id->i + 1 > n) n = id->i + 1;
        }
        return n;
    }
    for (const char* name : {"vocab.json", "added_tokens.json"}) {
        if (!hf_read_json(dir, name, (int64_t)1 << 30, JsonKeep(), &j, err, errlen)) return -1;
        if (j.type == Json::OBJ) ids_of(j);
    }
    return n;
}

// A config's bos_token_id (an id) or eos_token_id (an id or a list): appended to ids; 0 if malformed.
static inline int hf_read_ids(const Json& c, const char* key, std::vector<int>* ids) {
    const Json* v = c.get(key);
    if (!v || v->type == Json::NUL) return 1;
    std::vector<const Json*> all;
    if (v->type == Json::ARR)
        for (const Json& x : v->items) all.push_back(&x);
    else all.push_back(v);
    for (const Json* x : all) {
        if (x->type != Json::NUM || !x->is_int || x->i < 0 || x->i >= (1 << 30)) return 0;
        if (std::find(ids->begin(), ids->end(), (int)x->i) == ids->end()) ids->push_back((int)x->i);
    }
    return 1;
}

// The special token a chat template writes after a message's content: each "content" in it votes for
// the added token (or eos_token) that follows it nearest, within 120 characters; -1 if none.
// Qwen2.5's: <|im_end|>; Llama 3's: <|eot_id|>; chat_shards.py's plain one: eos_token.
static inline int hf_template_end_of_turn(const std::string& tpl,
                                          const std::vector<std::pair<std::string, int>>& added, int eos) {
    std::vector<std::pair<int, int>> votes;  // (id, votes)
    int best = -1, best_votes = 0;
    for (size_t at = tpl.find("content"); at != std::string::npos; at = tpl.find("content", at + 7)) {
        size_t nearest = at + 7 + 120;
        int id = -1;
        for (const auto& a : added) {
            const size_t f = tpl.find(a.first, at + 7);
            if (!a.first.empty() && f < nearest) nearest = f, id = a.second;
        }
        const size_t f = tpl.find("eos_token", at + 7);
        if (eos >= 0 && f < nearest) id = eos;
        if (id < 0) continue;
        auto v = std::find_if(votes.begin(), votes.end(),
                              [&](const std::pair<int, int>& p) { return p.first == id; });
        if (v == votes.end()) v = votes.insert(votes.end(), {id, 0});
        if (++v->second > best_votes) best_votes = v->second, best = id;
    }
    return best;
}

// ids from dirs' files, the first dir first: generation_config.json, config.json, then the tokenizer
// (tokenizer_config.json's bos_token, eos_token and its chat template's end of turn, their ids from
// added_tokens_decoder or tokenizer.json's added_tokens), merged into the eos lists. Ids must be below
// vocab_size. *from: the files read. 0 with err.
static inline int hf_special_ids(const std::vector<std::string>& dirs, int vocab_size, HfSpecialIds* ids,
                                 std::string* from, char* err, size_t errlen) {
    *ids = HfSpecialIds();
    from->clear();
    std::vector<int> bos;
    JsonKeep all;
    for (const std::string& d : dirs) {
        Json g, c;
        if (!hf_read_json(d, "generation_config.json", 1 << 20, all, &g, err, errlen) ||
            (file_exists(d + "/config.json") && !hf_config_read(d + "/config.json", &c, err, errlen)))
            return 0;
        const size_t had = ids->gen_eos.size() + ids->eos.size() + bos.size();
        if (g.type == Json::OBJ && ids->generation.type != Json::OBJ) ids->generation = g;
        const bool ok = (g.type != Json::OBJ || (hf_read_ids(g, "eos_token_id", &ids->gen_eos) &&
                                                 hf_read_ids(g, "bos_token_id", &bos))) &&
                        (c.type != Json::OBJ ||
                         (hf_read_ids(c, "eos_token_id", &ids->eos) && hf_read_ids(c, "bos_token_id", &bos)));
        if (!ok) {
            snprintf(err, errlen, "%.400s: bos_token_id or eos_token_id is not a token id or a list of them",
                     d.c_str());
            return 0;
        }
        if (ids->gen_eos.size() + ids->eos.size() + bos.size() > had)
            *from += (from->empty() ? "" : ", ") + d;
    }
    // the tokenizer: the first dir with a tokenizer_config.json
    for (const std::string& d : dirs) {
        Json tc, tj;
        JsonKeep tck;
        tck.keep = [](int level, const char* key) {
            if (level == 1)
                return key && (!strcmp(key, "eos_token") || !strcmp(key, "bos_token") ||
                               !strcmp(key, "chat_template") || !strcmp(key, "added_tokens_decoder"));
            return level == 2 ||
                   (level == 3 && key &&
                    (!strcmp(key, "content") || !strcmp(key, "name") || !strcmp(key, "template")));
        };
        tck.max_kept = 1 << 20;
        if (!hf_read_json(d, "tokenizer_config.json", 64 << 20, tck, &tc, err, errlen)) return 0;
        if (tc.type != Json::OBJ) continue;
        JsonKeep tjk;  // tokenizer.json's added tokens' ids and contents
        tjk.keep = [](int level, const char* key) {
            return (level == 1 && key && !strcmp(key, "added_tokens")) || (level == 2 && !key) ||
                   (level == 3 && key && (!strcmp(key, "id") || !strcmp(key, "content")));
        };
        tjk.max_kept = 1 << 21;
        if (!hf_read_json(d, "tokenizer.json", (int64_t)1 << 30, tjk, &tj, err, errlen)) return 0;
        std::vector<std::pair<std::string, int>> added;  // content, id
        const Json* atd = tc.get("added_tokens_decoder");
        for (size_t k = 0; atd && atd->type == Json::OBJ && k < atd->members.size(); k++) {
            const Json* content = atd->members[k].second.get("content");
            char* end = NULL;
            const long id = strtol(atd->members[k].first.c_str(), &end, 10);
            if (content && content->type == Json::STR && end && !*end && id >= 0 && id < (1 << 30))
                added.push_back({content->str, (int)id});
        }
        const Json* at = tj.get("added_tokens");
        for (size_t k = 0; at && at->type == Json::ARR && k < at->items.size(); k++) {
            const Json *id = at->items[k].get("id"), *content = at->items[k].get("content");
            if (id && id->type == Json::NUM && id->is_int && id->i >= 0 && id->i < (1 << 30) && content &&
                content->type == Json::STR)
                added.push_back({content->str, (int)id->i});
        }
        auto id_of = [&](const char* key) {  // "eos_token": "<|im_end|>" or {"content": "<|im_end|>", ...}
            const Json* v = tc.get(key);
            if (v && v->type == Json::OBJ) v = v->get("content");
            for (const auto& a : added)
                if (v && v->type == Json::STR && a.first == v->str) return a.second;
            return -1;
        };
        const int eos = id_of("eos_token"), b = id_of("bos_token");
        const Json* tpl = tc.get("chat_template");
        std::string text = tpl && tpl->type == Json::STR ? tpl->str : "";
        for (size_t k = 0; tpl && tpl->type == Json::ARR && k < tpl->items.size(); k++) {  // named templates
            const Json *n = tpl->items[k].get("name"), *t = tpl->items[k].get("template");
            if (t && t->type == Json::STR &&
                (text.empty() || (n && n->type == Json::STR && n->str == "default")))
                text = t->str;
        }
        const int eot = text.empty() ? -1 : hf_template_end_of_turn(text, added, eos);
        for (std::vector<int>* list : {&ids->gen_eos, &ids->eos})
            for (int id : {eot, eos})
                if (id >= 0 && std::find(list->begin(), list->end(), id) == list->end()) list->push_back(id);
        if (b >= 0 && bos.empty()) bos.push_back(b);
        if (eot >= 0 || eos >= 0 || b >= 0)
            *from += (from->empty() ? "" : ", ") + d + "/tokenizer_config.json";
        break;
    }
    if (ids->gen_eos.empty()) ids->gen_eos = ids->eos;
    if (ids->eos.empty()) ids->eos = ids->gen_eos;
    if (!bos.empty()) ids->bos = bos[0];
    std::vector<int> check = ids->gen_eos;
    check.insert(check.end(), ids->eos.begin(), ids->eos.end());
    check.insert(check.end(), bos.begin(), bos.begin() + (bos.empty() ? 0 : 1));
    for (int id : check)
        if (id >= vocab_size) {
            snprintf(err, errlen, "special token id %d (from %.300s) is past the model's vocabulary of %d",
                     id, from->c_str(), vocab_size);
            return 0;
        }
    if (ids->gen_eos.size() > 16 || ids->eos.size() > 16) {
        snprintf(err, errlen, "more than 16 eos ids (from %.300s)", from->c_str());
        return 0;
    }
    return 1;
}
