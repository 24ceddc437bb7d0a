// json.h — a small JSON reader (RFC 8259), its writer (json_write), and read_whole_file.
// Not here: what the keys mean (hf.h).
#pragma once
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

struct Json {
    enum Type { NUL, BOOL, NUM, STR, ARR, OBJ } type = NUL;
    bool b = false;
    double num = 0;
    bool is_int = false;  // no fraction or exponent, fits int64: exact in i
    int64_t i = 0;
    std::string str;
    std::vector<Json> items;                            // ARR
    std::vector<std::pair<std::string, Json>> members;  // OBJ, in file order
    // linear: callers look up a few keys in small objects (a file's big objects are walked, not searched)
    const Json* get(const char* key) const {
        for (const auto& m : members)
            if (m.first == key) return &m.second;
        return NULL;
    }
};

// What a parse keeps: keep(level, key) for each member (key NULL: an array item).
// The rest is checked as JSON, then dropped.
struct JsonKeep {
    bool (*keep)(int level, const char* key) = NULL;  // NULL: keep everything
    size_t max_items = SIZE_MAX;
    // values kept in all (~150 bytes each): a cap on memory
    size_t max_kept = SIZE_MAX;
};

// A key's 64-bit hash: sorting these finds duplicate keys.
static inline uint64_t json_key_hash(const std::string& s) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    h ^= h >> 33;  // then part of MurmurHash3's finaliser (fmix64)
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

struct JsonReader {
    const char* p;
    const char* end;
    int depth = 0;
    JsonKeep opt;
    size_t kept = 0;      // values kept so far (opt.max_kept)
    std::string scratch;  // a dropped string
    char err[200] = "";
    bool fail(const char* what) {
        if (!err[0]) snprintf(err, sizeof err, "%s", what);
        return false;
    }
    void space() {
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    }
    bool literal(const char* word) {
        const size_t n = strlen(word);
        if ((size_t)(end - p) < n || memcmp(p, word, n) != 0) return fail("bad literal");
        p += n;
        return true;
    }
    static void put_utf8(std::string& s, uint32_t c) {
        if (c < 0x80) s += (char)c;
        else if (c < 0x800) {
            s += (char)(0xC0 | (c >> 6));
            s += (char)(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            s += (char)(0xE0 | (c >> 12));
            s += (char)(0x80 | ((c >> 6) & 0x3F));
            s += (char)(0x80 | (c & 0x3F));
        } else {
            s += (char)(0xF0 | (c >> 18));
            s += (char)(0x80 | ((c >> 12) & 0x3F));
            s += (char)(0x80 | ((c >> 6) & 0x3F));
            s += (char)(0x80 | (c & 0x3F));
        }
    }
    bool hex4(uint32_t* c) {
        if (end - p < 4) return fail("short \\u escape");
        *c = 0;
        for (int k = 0; k < 4; k++, p++) {
            const char h = *p;
            const int d = h >= '0' && h <= '9'   ? h - '0'
                          : h >= 'a' && h <= 'f' ? h - 'a' + 10
                          : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                                 : -1;
            if (d < 0) return fail("bad \\u escape");
            *c = *c * 16 + (uint32_t)d;
        }
        return true;
    }
    bool string(std::string& s) {
        if (p >= end || *p != '"') return fail("expected a string");
        p++;
        while (p < end && *p != '"') {
            const unsigned char ch = (unsigned char)*p++;
            if (ch < 0x20) return fail("control character in a string");
            if (ch != '\\') {
                s += (char)ch;
                continue;
            }
            if (p >= end) return fail("unterminated string");
            const char e = *p++;
            switch (e) {
                case '"': s += '"'; break;
                case '\\': s += '\\'; break;
                case '/': s += '/'; break;
                case 'b': s += '\b'; break;
                case 'f': s += '\f'; break;
                case 'n': s += '\n'; break;
                case 'r': s += '\r'; break;
                case 't': s += '\t'; break;
                case 'u': {
                    uint32_t c;
                    if (!hex4(&c)) return false;
                    if (c >= 0xD800 && c < 0xDC00) {  // a surrogate pair
                        uint32_t lo;
                        if (end - p < 2 || p[0] != '\\' || p[1] != 'u') return fail("lone surrogate");
                        p += 2;
                        if (!hex4(&lo)) return false;
                        if (lo < 0xDC00 || lo >= 0xE000) return fail("lone surrogate");
                        c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
                    } else if (c >= 0xDC00 && c < 0xE000) return fail("lone surrogate");
                    put_utf8(s, c);
                    break;
                }
                default: return fail("bad escape in a string");
            }
        }
        if (p >= end) return fail("unterminated string");
        p++;
        return true;
    }
    bool number(Json& v) {
        const char* s = p;
        if (p < end && *p == '-') p++;
        if (p >= end || *p < '0' || *p > '9') return fail("bad number");
        if (*p == '0') p++;
        else
            while (p < end && *p >= '0' && *p <= '9') p++;
        bool integral = true;
        if (p < end && *p == '.') {
            integral = false;
            p++;
            if (p >= end || *p < '0' || *p > '9') return fail("bad number");
            while (p < end && *p >= '0' && *p <= '9') p++;
        }
        if (p < end && (*p == 'e' || *p == 'E')) {
            integral = false;
            p++;
            if (p < end && (*p == '+' || *p == '-')) p++;
            if (p >= end || *p < '0' || *p > '9') return fail("bad number");
            while (p < end && *p >= '0' && *p <= '9') p++;
        }
        const std::string text(s, (size_t)(p - s));
        v.type = Json::NUM;
        v.num = strtod(text.c_str(), NULL);
        if (!isfinite(v.num)) return fail("a number beyond a double's range");  // 1e999: Python reads inf
        if (integral && text.size() <= 19) {  // 19 digits (or '-' and 18) always fit int64
            v.is_int = true;
            v.i = strtoll(text.c_str(), NULL, 10);
        }
        return true;
    }
    // The next value into *v; v NULL: checked, nothing kept.
    bool value(Json* v) {
        space();
        if (p >= end) return fail("unexpected end");
        if (++depth > 64) return fail("nested too deeply");
        Json drop;  // the type of a dropped value (nothing else is written to it)
        Json& out = v ? *v : drop;
        bool ok = true;
        const char c = *p;
        if (c == '{') {
            out.type = Json::OBJ;
            std::vector<uint64_t> hashes;  // of every key of a kept object, kept member or not
            std::string key;
            p++;
            space();
            if (p < end && *p == '}') p++;
            else
                for (;;) {
                    key.clear();
                    space();
                    if (!string(key)) {
                        ok = false;
                        break;
                    }
                    space();
                    if (p >= end || *p != ':') {
                        ok = fail("expected ':'");
                        break;
                    }
                    p++;
                    const bool keep = v && (!opt.keep || opt.keep(depth, key.c_str()));
                    if (v) hashes.push_back(json_key_hash(key));
                    if (keep && ++kept > opt.max_kept) {
                        snprintf(err, sizeof err, "more than %zu values", opt.max_kept);
                        ok = false;
                        break;
                    }
                    if (keep) {
                        v->members.emplace_back(key, Json());
                        ok = value(&v->members.back().second);
                    } else ok = value(NULL);
                    if (!ok) break;
                    space();
                    if (p < end && *p == ',') {
                        p++;
                        continue;
                    }
                    if (p < end && *p == '}') {
                        p++;
                        break;
                    }
                    ok = fail("expected ',' or '}'");
                    break;
                }
            std::sort(hashes.begin(), hashes.end());  // duplicates: n log n, not a search per key
            if (ok && std::adjacent_find(hashes.begin(), hashes.end()) != hashes.end())
                ok = fail("duplicate key");
        } else if (c == '[') {
            out.type = Json::ARR;
            p++;
            space();
            if (p < end && *p == ']') p++;
            else
                for (;;) {
                    const bool keep = v && (!opt.keep || opt.keep(depth, NULL));
                    if (keep && v->items.size() == opt.max_items) {
                        snprintf(err, sizeof err, "an array of more than %zu values", opt.max_items);
                        ok = false;
                        break;
                    }
                    if (keep && ++kept > opt.max_kept) {
                        snprintf(err, sizeof err, "more than %zu values", opt.max_kept);
                        ok = false;
                        break;
                    }
                    if (keep) v->items.emplace_back();
                    if (!value(keep ? &v->items.back() : NULL)) {
                        ok = false;
                        break;
                    }
                    space();
                    if (p < end && *p == ',') {
                        p++;
                        continue;
                    }
                    if (p < end && *p == ']') {
                        p++;
                        break;
                    }
                    ok = fail("expected ',' or ']'");
                    break;
                }
        } else if (c == '"') {
            out.type = Json::STR;
            scratch.clear();
            ok = string(v ? v->str : scratch);
        } else if (c == 't') {
            out.type = Json::BOOL;
            out.b = true;
            ok = literal("true");
        } else if (c == 'f') {
            out.type = Json::BOOL;
            ok = literal("false");
        } else if (c == 'n') {
            ok = literal("null");
        } else ok = number(out);
        depth--;
        return ok;
    }
};

// Parses text[0..len) as one JSON value. Returns 0 with the reason in err.
static inline int json_parse(const char* text, size_t len, Json* out, char* err, size_t errlen,
                             JsonKeep keep = JsonKeep()) {
    JsonReader r;
    r.opt = keep;
    r.p = text;
    r.end = text + len;
    *out = Json();
    bool ok = r.value(out);
    if (ok) {
        r.space();
        if (r.p != r.end) ok = r.fail("text after the value");
    }
    if (!ok) snprintf(err, errlen, "%s at byte %lld", r.err, (long long)(r.p - text));
    return ok;
}

// v as JSON text; 0 if it holds a number that JSON cannot write (inf, NaN).
static inline int json_write(const Json& v, std::string* out) {
    char b[40];
    switch (v.type) {
        case Json::NUL: *out += "null"; return 1;
        case Json::BOOL: *out += v.b ? "true" : "false"; return 1;
        case Json::NUM:
            if (!isfinite(v.num)) return 0;
            if (v.is_int) snprintf(b, sizeof b, "%lld", (long long)v.i);
            else  // the shortest that reads back: 0.7, not 0.69999999999999996
                for (int digits = 15; digits <= 17; digits++) {
                    snprintf(b, sizeof b, "%.*g", digits, v.num);
                    if (strtod(b, NULL) == v.num) break;
                }
            *out += b;
            return 1;
        case Json::STR:
            *out += '"';
            for (unsigned char c : v.str) {
                if (c == '"' || c == '\\') *out += '\\', *out += (char)c;
                else if (c < 0x20) snprintf(b, sizeof b, "\\u%04x", c), *out += b;
                else *out += (char)c;
            }
            *out += '"';
            return 1;
        case Json::ARR:
            *out += '[';
            for (size_t k = 0; k < v.items.size(); k++) {
                if (k) *out += ", ";
                if (!json_write(v.items[k], out)) return 0;
            }
            *out += ']';
            return 1;
        case Json::OBJ:
            *out += "{";
            for (size_t k = 0; k < v.members.size(); k++) {
                *out += k ? ",\n  " : "\n  ";
                Json key;
                key.type = Json::STR;
                key.str = v.members[k].first;
                if (!json_write(key, out) || (*out += ": ", !json_write(v.members[k].second, out))) return 0;
            }
            *out += v.members.empty() ? "}" : "\n}";
            return 1;
    }
    return 0;
}

static inline int read_whole_file(const char* path, int64_t max_bytes, std::string* out, char* err,
                                  size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "cannot open %.400s: %.60s", path, strerror(errno));
        return 0;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%.400s is not a regular file", path);
        return 0;
    }
    if ((int64_t)st.st_size > max_bytes) {
        snprintf(err, errlen, "%.400s: %lld bytes, more than the %lld this file may have", path,
                 (long long)st.st_size, (long long)max_bytes);
        return 0;
    }
    FILE* f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open %.400s: %.60s", path, strerror(errno));
        return 0;
    }
    out->resize((size_t)st.st_size);
    const bool ok = st.st_size == 0 || fread(&(*out)[0], 1, (size_t)st.st_size, f) == (size_t)st.st_size;
    fclose(f);
    if (!ok) snprintf(err, errlen, "%.400s: short read", path);
    return ok;
}
