// gpt2_bpe.h — header-only GPT-2 byte-level BPE tokenizer (encoder and decoder), written from the
// algorithm of OpenAI's encoder.py: (1) split the text with GPT-2's pre-tokenization regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (hand-coded over UTF-8 code points; classes from the generated unicode_ranges.h), (2) map each
// piece's bytes to their single-byte tokens, (3) merge adjacent pairs greedily, lowest merge rank
// first, (4) the symbols left are the token ids (encoder.json).
// It does NOT parse special tokens in text: "<|endoftext|>" in the input is encoded as plain text;
// callers append eot_token (50256) themselves. Not a general JSON parser either: it reads the flat
// {"string": int, ...} object of encoder.json only. Bytes that are not valid UTF-8 are kept as
// one-byte "other" (punctuation-class) characters, so any byte string encodes and round-trips.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <functional>  // defines: std::greater
#include <queue>       // defines: std::priority_queue
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>
#include "unicode_ranges.h"

struct GPT2BPE {
    std::unordered_map<std::string, int> encoder;  // token string (byte-to-unicode form) -> id
    std::vector<std::string> decoder;              // id -> the raw bytes the token stands for
    // (left id, right id) packed in 64 bits -> (merge rank, id of the merged token). Working on ids
    // instead of strings is what makes the merge loop cheap: every merge result is itself a token.
    std::unordered_map<uint64_t, std::pair<int, int>> merges;
    int byte_token[256];  // id of the one-byte token of each byte value
    int eot_token = -1;   // id of "<|endoftext|>" (50256 for GPT-2), -1 if the vocabulary lacks it
};
// Per-piece memo of BPE results: text has few distinct words, so caching them is most of the speed.
typedef std::unordered_map<std::string, std::vector<int>> GPT2BPECache;

// ---- UTF-8 and character classes ----

static inline void gpt2_utf8_append(std::string* s, uint32_t cp) {
    if (cp < 0x80) {
        s->push_back((char)cp);
        return;
    }
    if (cp < 0x800) {
        s->push_back((char)(0xC0 | (cp >> 6)));
    } else {
        if (cp < 0x10000) {
            s->push_back((char)(0xE0 | (cp >> 12)));
        } else {
            s->push_back((char)(0xF0 | (cp >> 18)));
            s->push_back((char)(0x80 | ((cp >> 12) & 0x3F)));
        }
        s->push_back((char)(0x80 | ((cp >> 6) & 0x3F)));
    }
    s->push_back((char)(0x80 | (cp & 0x3F)));
}

// Decodes the code point at s[i] into *cp and returns its byte length. Anything that is not
// well-formed UTF-8 (stray continuation, truncation, overlong form, surrogate, > U+10FFFF) is taken
// as a single byte with *cp = 0xFFFFFFFF, which has class "other".
static inline int gpt2_utf8_next(const unsigned char* s, size_t n, size_t i, uint32_t* cp) {
    unsigned c = s[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    *cp = 0xFFFFFFFF;
    if (len == 0 || i + len > n) return 1;
    uint32_t v = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; k++) {
        if ((s[i + k] & 0xC0) != 0x80) return 1;
        v = (v << 6) | (s[i + k] & 0x3F);
    }
    if (v < min_cp[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 1;
    *cp = v;
    return len;
}

static inline int gpt2_char_class(uint32_t cp) {  // UCLS_L / UCLS_N / UCLS_S / UCLS_OTHER
    int lo = 0, hi = unicode_ranges_count - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < unicode_ranges[mid].lo) hi = mid - 1;
        else if (cp > unicode_ranges[mid].hi) lo = mid + 1;
        else return unicode_ranges[mid].cls;
    }
    return UCLS_OTHER;
}

// GPT-2's byte-to-unicode map: bytes that are printable and not space (! .. ~, ¡ .. ¬, ® .. ÿ) stand
// for themselves; the other 68 bytes get code points 256, 257, ... in byte order. This way every
// token string in encoder.json / vocab.bpe is printable text without spaces.
static inline void gpt2_byte_to_unicode(uint32_t table[256]) {
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        table[b] = printable ? (uint32_t)b : next++;
    }
}

// ---- pre-tokenization ----

// Splits text into the byte ranges [start, end) that GPT-2's regex (see top of file) finds.
// Ordered alternatives at each position, as a backtracking regex engine tries them:
//   contractions; optional ' ' + run of letters / of numbers / of "other"; whitespace.
static inline void gpt2_pretokenize(const std::string& text, std::vector<std::pair<size_t, size_t>>* pieces) {
    const unsigned char* s = (const unsigned char*)text.data();
    std::vector<uint32_t> cps;
    std::vector<uint8_t> cls;
    std::vector<size_t> off;  // byte offset of each code point, plus the end
    for (size_t i = 0; i < text.size();) {
        uint32_t cp;
        int len = gpt2_utf8_next(s, text.size(), i, &cp);
        cps.push_back(cp);
        cls.push_back((uint8_t)gpt2_char_class(cp));
        off.push_back(i);
        i += len;
    }
    off.push_back(text.size());
    const size_t n = cps.size();
    pieces->clear();
    for (size_t i = 0; i < n;) {
        const uint32_t c = cps[i];
        size_t j = 0;
        if (c == '\'' && i + 1 < n) {  // 's 't 'm 'd 're 've 'll (lowercase only, as in GPT-2)
            uint32_t a = cps[i + 1], b = i + 2 < n ? cps[i + 2] : 0;
            if (a == 's' || a == 't' || a == 'm' || a == 'd') j = i + 2;
            else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) j = i + 3;
        }
        if (j == 0) {
            // ' ?X+': a single ASCII space joins the run that follows it unless that is whitespace.
            size_t k = (c == ' ' && i + 1 < n && cls[i + 1] != UCLS_S) ? i + 1 : i;
            if (cls[k] != UCLS_S) {
                for (j = k; j < n && cls[j] == cls[k]; j++) {}
            } else {
                for (j = i; j < n && cls[j] == UCLS_S; j++) {}
                // '\s+(?!\S)': before a non-space the run gives back its last character, which then
                // starts the next piece (" word"); a run of one cannot, so '\s+' takes it whole.
                if (j < n && j - i > 1) j--;
            }
        }
        pieces->push_back({off[i], off[j]});
        i = j;
    }
}

// ---- loading ----

static inline bool gpt2_read_file(const char* path, std::string* out) {
    FILE* f = fopen(path, "rb");
    if (!f) return false;
    char buf[1 << 16];
    size_t r;
    out->clear();
    while ((r = fread(buf, 1, sizeof buf, f)) > 0) out->append(buf, r);
    bool ok = !ferror(f);
    fclose(f);
    return ok;
}

// Parses the JSON string starting at the opening quote s[*i]; leaves *i after the closing quote.
static inline bool gpt2_json_string(const std::string& s, size_t* i, std::string* out) {
    auto hex4 = [&](size_t p, uint32_t* v) {
        if (p + 4 > s.size()) return false;
        *v = 0;
        for (size_t k = p; k < p + 4; k++) {
            char h = s[k];
            int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
            if (d < 0) return false;
            *v = *v * 16 + (uint32_t)d;
        }
        return true;
    };
    if (*i >= s.size() || s[*i] != '"') return false;
    out->clear();
    size_t p = *i + 1;
    while (p < s.size() && s[p] != '"') {
        if (s[p] != '\\') {
            out->push_back(s[p++]);
            continue;
        }
        if (++p >= s.size()) return false;
        char e = s[p++];
        switch (e) {
            case '"':
            case '\\':
            case '/': out->push_back(e); break;
            case 'b': out->push_back('\b'); break;
            case 'f': out->push_back('\f'); break;
            case 'n': out->push_back('\n'); break;
            case 'r': out->push_back('\r'); break;
            case 't': out->push_back('\t'); break;
            case 'u': {
                uint32_t v, lo;
                if (!hex4(p, &v)) return false;
                p += 4;
                if (v >= 0xD800 && v <= 0xDBFF) {  // high surrogate: a \uDC00-\uDFFF must follow
                    if (p + 1 >= s.size() || s[p] != '\\' || s[p + 1] != 'u' || !hex4(p + 2, &lo) ||
                        lo < 0xDC00 || lo > 0xDFFF)
                        return false;
                    p += 6;
                    v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
                } else if (v >= 0xDC00 && v <= 0xDFFF) return false;
                gpt2_utf8_append(out, v);
                break;
            }
            default: return false;
        }
    }
    if (p >= s.size()) return false;
    *i = p + 1;
    return true;
}

static inline bool gpt2_bpe_fail(std::string* err, const std::string& msg) {
    if (err) *err = msg;
    return false;
}

// Loads encoder.json (token -> id) and vocab.bpe (merges, in rank order). On failure returns false
// and puts a one-line reason into *err.
static inline bool gpt2_bpe_load(GPT2BPE* t, const char* encoder_json, const char* vocab_bpe,
                                 std::string* err) {
    std::string js, bpe, key;
    if (!gpt2_read_file(encoder_json, &js))
        return gpt2_bpe_fail(err, std::string("cannot read ") + encoder_json);
    if (!gpt2_read_file(vocab_bpe, &bpe)) return gpt2_bpe_fail(err, std::string("cannot read ") + vocab_bpe);
    *t = GPT2BPE();
    const std::string where = std::string(encoder_json) + ": ";
    auto ws = [&](size_t* i) {
        while (*i < js.size() && (js[*i] == ' ' || js[*i] == '\n' || js[*i] == '\r' || js[*i] == '\t'))
            (*i)++;
    };
    size_t i = 0;
    ws(&i);
    if (i >= js.size() || js[i++] != '{') return gpt2_bpe_fail(err, where + "expected a JSON object");
    for (ws(&i); i < js.size() && js[i] != '}';) {
        if (!gpt2_json_string(js, &i, &key))
            return gpt2_bpe_fail(err, where + "bad string at byte " + std::to_string(i));
        ws(&i);
        if (i >= js.size() || js[i++] != ':')
            return gpt2_bpe_fail(err, where + "expected ':' at byte " + std::to_string(i));
        ws(&i);
        long id = 0;
        size_t d0 = i;
        while (i < js.size() && js[i] >= '0' && js[i] <= '9' && id < (1 << 24))
            id = id * 10 + (js[i++] - '0');
        if (i == d0 || id >= (1 << 24))
            return gpt2_bpe_fail(err, where + "expected a token id at byte " + std::to_string(d0));
        if (!t->encoder.emplace(key, (int)id).second)
            return gpt2_bpe_fail(err, where + "duplicate token " + key);
        ws(&i);
        if (i < js.size() && js[i] == ',') {
            i++;
            ws(&i);
        } else if (i >= js.size() || js[i] != '}')
            return gpt2_bpe_fail(err, where + "expected ',' or '}' at byte " + std::to_string(i));
    }
    if (i >= js.size()) return gpt2_bpe_fail(err, where + "unterminated object");

    // Decoder: ids must be exactly 0..N-1; each token string maps back to bytes char by char.
    uint32_t b2u[256];
    gpt2_byte_to_unicode(b2u);
    std::unordered_map<uint32_t, unsigned char> u2b;
    for (int b = 0; b < 256; b++) u2b[b2u[b]] = (unsigned char)b;
    t->decoder.assign(t->encoder.size(), std::string());
    std::vector<bool> seen(t->encoder.size(), false);
    for (const auto& kv : t->encoder) {
        if ((size_t)kv.second >= seen.size() || seen[kv.second])
            return gpt2_bpe_fail(err, where + "token ids are not 0..N-1");
        seen[kv.second] = true;
        const unsigned char* s = (const unsigned char*)kv.first.data();
        for (size_t p = 0; p < kv.first.size();) {
            uint32_t cp;
            p += gpt2_utf8_next(s, kv.first.size(), p, &cp);
            auto it = u2b.find(cp);
            if (it == u2b.end())
                return gpt2_bpe_fail(err, where + "token " + std::to_string(kv.second) +
                                              " has a character outside the byte map");
            t->decoder[kv.second].push_back((char)it->second);
        }
    }
    for (int b = 0; b < 256; b++) {
        key.clear();
        gpt2_utf8_append(&key, b2u[b]);
        auto it = t->encoder.find(key);
        if (it == t->encoder.end())
            return gpt2_bpe_fail(err, where + "missing the token of byte " + std::to_string(b));
        t->byte_token[b] = it->second;
    }
    auto eot = t->encoder.find("<|endoftext|>");
    t->eot_token = eot == t->encoder.end() ? -1 : eot->second;

    // Merges: one "left right" pair per line, rank = order; a leading "#version" line is a comment.
    int rank = 0;
    for (size_t p = 0, line = 1; p < bpe.size(); line++) {
        size_t e = bpe.find('\n', p);
        if (e == std::string::npos) e = bpe.size();
        std::string l = bpe.substr(p, e - p);
        p = e + 1;
        if (!l.empty() && l.back() == '\r') l.pop_back();
        if (l.empty() || (line == 1 && l.compare(0, 8, "#version") == 0)) continue;
        size_t sp = l.find(' ');
        const std::string where_l = std::string(vocab_bpe) + ":" + std::to_string(line) + ": ";
        if (sp == std::string::npos || l.find(' ', sp + 1) != std::string::npos)
            return gpt2_bpe_fail(err, where_l + "expected 'left right'");
        auto a = t->encoder.find(l.substr(0, sp)), b = t->encoder.find(l.substr(sp + 1));
        auto ab = t->encoder.find(l.substr(0, sp) + l.substr(sp + 1));
        if (a == t->encoder.end() || b == t->encoder.end() || ab == t->encoder.end())
            return gpt2_bpe_fail(err, where_l + "merge of unknown tokens");
        t->merges.emplace(((uint64_t)a->second << 32) | (uint32_t)b->second,
                          std::make_pair(rank++, ab->second));
    }
    return true;
}

// ---- encoding / decoding ----

// BPE of one pre-token piece: start from its bytes' tokens, then repeatedly merge every occurrence of
// the lowest-ranked adjacent pair (left to right, as encoder.py does) until no pair has a rank.
// n log n, as tiktoken and HF tokenizers do it: the symbols are a linked list, the candidate pairs a heap of
// (rank, position). One round takes every entry of the lowest rank, in position order, and merges those still
// current: the pass of encoder.py over all occurrences of that pair. (A per-round scan of the whole piece
// was quadratic: a 1 MB word took 83 s.)
static inline void gpt2_bpe_piece(const GPT2BPE* t, const unsigned char* s, size_t len,
                                  std::vector<int>* out) {
    if (len == 0) return;
    const int n = (int)len;
    std::vector<int> sym(len), prev(len), next(len);  // next -1: the last symbol; a merged-away one is -2
    for (int i = 0; i < n; i++) {
        sym[i] = t->byte_token[s[i]];
        prev[i] = i - 1;
        next[i] = i + 1 < n ? i + 1 : -1;
    }
    auto merge_of = [&](int a, int b) {  // (rank, merged id) of the pair, rank -1 if none
        auto it = t->merges.find(((uint64_t)a << 32) | (uint32_t)b);
        return it == t->merges.end() ? std::make_pair(-1, 0) : it->second;
    };
    typedef std::pair<int, int> Entry;  // (rank, position of the left symbol)
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
    auto push = [&](int i) {  // the pair starting at symbol i, if it has a rank
        if (next[i] < 0) return;
        const int r = merge_of(sym[i], sym[next[i]]).first;
        if (r >= 0) heap.push({r, i});
    };
    for (int i = 0; i + 1 < n; i++) push(i);
    std::vector<int> round;
    while (!heap.empty()) {
        const int rank = heap.top().first;
        round.clear();
        for (; !heap.empty() && heap.top().first == rank; heap.pop()) round.push_back(heap.top().second);
        for (int i : round) {  // in position order: the heap gives ties lowest position first
            const int j = next[i];
            if (j < 0) continue;  // i is last, or was merged away
            const std::pair<int, int> m = merge_of(sym[i], sym[j]);
            if (m.first != rank) continue;  // a stale entry: i or j changed since it was pushed
            sym[i] = m.second;
            next[i] = next[j];
            if (next[j] >= 0) prev[next[j]] = i;
            next[j] = -2;
            if (prev[i] >= 0) push(prev[i]);
            push(i);
        }
    }
    for (int i = 0; i >= 0; i = next[i]) out->push_back(sym[i]);
}

// Encodes text into GPT-2 token ids. `cache` (optional) memoizes pieces across calls, e.g. across the
// documents of one corpus; without it a cache local to this call is used. Thread-safe for a shared
// GPT2BPE as long as each thread passes its own cache (or none).
static inline std::vector<int> gpt2_bpe_encode(const GPT2BPE* t, const std::string& text,
                                               GPT2BPECache* cache = NULL) {
    GPT2BPECache local;
    if (!cache) cache = &local;
    std::vector<std::pair<size_t, size_t>> pieces;
    gpt2_pretokenize(text, &pieces);
    std::vector<int> ids, tmp;
    ids.reserve(text.size() / 3);
    for (const auto& p : pieces) {
        std::string piece = text.substr(p.first, p.second - p.first);
        auto it = cache->find(piece);
        if (it == cache->end()) {
            tmp.clear();
            gpt2_bpe_piece(t, (const unsigned char*)piece.data(), piece.size(), &tmp);
            it = cache->emplace(piece, tmp).first;
        }
        ids.insert(ids.end(), it->second.begin(), it->second.end());
    }
    return ids;
}

// Concatenates the byte strings of the ids; ids outside the vocabulary are skipped.
static inline std::string gpt2_bpe_decode(const GPT2BPE* t, const std::vector<int>& ids) {
    std::string out;
    for (int id : ids)
        if (id >= 0 && (size_t)id < t->decoder.size()) out += t->decoder[id];
    return out;
}
