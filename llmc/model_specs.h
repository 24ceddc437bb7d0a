// model_specs.h — -e specs (d12, L4:C128:NH4, 7b, ...) as GPTConfigs.
// Not here: model files (model.h).
#pragma once
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include "model.h"

typedef struct {
    const char* name;
    int L, C, NH;
} ModelPreset;
static const ModelPreset model_presets[] = {
    {"124m", 12, 768, 12},  {"350m", 24, 1024, 16}, {"774m", 36, 1280, 20}, {"1558m", 48, 1600, 25},
    {"1.3b", 24, 2048, 16}, {"2.7b", 32, 2560, 32}, {"5b", 24, 4096, 32},   {"7b", 32, 4096, 32},
    {"13b", 40, 5120, 40},  {"30b", 48, 7168, 56},  {"70b", 86, 8192, 64},  {"100b", 100, 9216, 72},
    {"175b", 96, 12288, 96}};

// "<key><digits>" ("NH12") into *v; 1 on a match.
static inline int spec_key_value(const char* tok, size_t len, const char* key, int64_t* v) {
    size_t k = strlen(key);
    if (len <= k || strncmp(tok, key, k) != 0) return 0;
    int64_t x = 0;
    for (size_t i = k; i < len; i++) {
        if (tok[i] < '0' || tok[i] > '9') return 0;
        x = x * 10 + (tok[i] - '0');
        if (x > 100000000) return 0;
    }
    *v = x;
    return 1;
}

// Levenshtein distance, case-insensitive, of two short names (0 if either is too long).
static inline int spec_edit_distance(const char* a, const char* b) {
    const size_t n = strlen(a), m = strlen(b);
    if (n > 63 || m > 63) return 1 << 20;
    int row[64];
    for (size_t j = 0; j <= m; j++) row[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            const int up = row[j],
                      same = tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]);
            const int best = diag + !same < up + 1 ? diag + !same : up + 1;
            row[j] = best < row[j - 1] + 1 ? best : row[j - 1] + 1;
            diag = up;
        }
    }
    return row[m];
}

// A spec key given twice ("L2:...:L3"): 1 with err. seen: a bit per key.
static inline int spec_key_repeated(const char* spec, const char* key, int bit, unsigned* seen, char* err,
                                    size_t errlen) {
    if (!(*seen & (1u << bit))) {
        *seen |= 1u << bit;
        return 0;
    }
    snprintf(err, errlen, "model spec '%.200s': %s is given twice", spec, key);
    return 1;
}

// BASE[:T<n>][:V<n>], BASE = dN, a preset or L<n>:C<n>:NH<n>.
// Returns 1, 2 (a path) or 0 (invalid, err set).
static inline int parse_model_spec(const char* spec, GPTConfig* cfg, char* err, size_t errlen) {
    if (!spec || !*spec || strchr(spec, '/') || strchr(spec, '\\')) return 2;
    const size_t n = strlen(spec);
    if (n >= 4 && strcmp(spec + n - 4, ".bin") == 0) return 2;
    int64_t L = -1, C = -1, NH = -1, T = 1024, V = 50257, x;
    const char* tok = spec;
    size_t len = strcspn(tok, ":");
    // first token: spec or path?
    int is_shape = spec_key_value(tok, len, "L", &x);
    if (is_shape) L = x;
    else if (len > 1 && (tok[0] == 'd' || tok[0] == 'D') && spec_key_value(tok + 1, len - 1, "", &x)) {
        const ModelPreset* gpt2 = NULL;  // d12 d24 d36 d48: GPT-2's sizes, presets 0-3
        for (int i = 0; i < 4; i++)
            if (model_presets[i].L == x) gpt2 = &model_presets[i];
        L = x;
        C = gpt2 ? gpt2->C : 64 * x;
        NH = gpt2 ? gpt2->NH : x;
    } else {
        for (size_t i = 0; i < sizeof model_presets / sizeof model_presets[0]; i++) {
            const ModelPreset* p = &model_presets[i];
            if (strlen(p->name) == len && strncasecmp(p->name, tok, len) == 0) {
                L = p->L;
                C = p->C;
                NH = p->NH;
            }
        }
        if (L < 0) {
            // "Lx:C128": a typo unless the file exists
            struct stat st;
            if (strchr(spec, ':') && stat(spec, &st) != 0) {
                snprintf(err, errlen,
                         "model spec '%s': bad part '%.*s' (want dN, a preset such as 124m, or "
                         "L<n>:C<n>:NH<n>), and no model file has that name",
                         spec, (int)len, tok);
                return 0;
            }
            return 2;
        }
    }
    // the remaining ":KEYvalue" tokens, each key once
    static const char* const keys[] = {"NH", "C", "L", "T", "V"};  // no key prefixes another
    int64_t* const values[] = {&NH, &C, &L, &T, &V};
    unsigned seen = is_shape ? 1u << 2 : 0;  // L<n> first
    while (tok[len] == ':') {
        tok += len + 1;
        len = strcspn(tok, ":");
        int k = 0;
        while (k < 5 && !spec_key_value(tok, len, keys[k], &x)) k++;
        if (k == 5) {
            snprintf(err, errlen, "model spec '%s': bad part '%.*s' (want L<n> C<n> NH<n> T<n> V<n>)", spec,
                     (int)len, tok);
            return 0;
        }
        if (spec_key_repeated(spec, keys[k], k, &seen, err, errlen)) return 0;
        *values[k] = x;
    }
    if (L < 0 || C < 0 || NH < 0) {
        snprintf(err, errlen, "model spec '%s': a shape needs L<n>:C<n>:NH<n>", spec);
        return 0;
    }
    if (L > 100000 || C > 1000000 || NH > 100000 || T > 10000000 || V > 10000000) {
        snprintf(err, errlen, "model spec '%s': dimensions too large", spec);
        return 0;
    }
    char why[256];
    if (!gpt_config_make(cfg, L, C, NH, T, V, why, sizeof why)) {
        snprintf(err, errlen, "model spec '%.64s': %.160s", spec, why);
        return 0;
    }
    return 1;
}

// -e NAME, both spec and path: warn once.
static inline void warn_if_spec_shadows_path(const char* spec, int kind) {
    struct stat sb;
    if (kind == 1 && stat(spec, &sb) == 0)
        fprintf(stderr,
                "warning: -e %s is read as a model spec, not as the %s %s here: write ./%s for that\n", spec,
                S_ISDIR(sb.st_mode) ? "directory" : "file", spec, spec);
}
