// tokenizer.h — GPT-2 token decoder for printing samples, from llm.c's gpt2_tokenizer.bin.
// Not here: encoding (dev/data/gpt2_bpe.h).
#pragma once
#include <ctype.h>
#include <sys/stat.h>  // defines: stat, S_ISREG
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKENIZER_MAGIC 20240328

typedef struct {
    uint32_t vocab_size;
    char** token_table;  // vocab_size NUL-terminated byte strings
    int init_ok;
    int eot_token;  // <|endoftext|>, 50256 for GPT-2
} Tokenizer;

static inline void tokenizer_free(Tokenizer* t) {
    if (t->token_table) {
        for (uint32_t i = 0; i < t->vocab_size; i++) free(t->token_table[i]);
        free(t->token_table);
    }
    t->token_table = NULL;
    t->vocab_size = 0;
    t->init_ok = 0;
}

// 1 on success; else 0, *t empty (safe to free), err says why.
static inline int tokenizer_init(Tokenizer* t, const char* path, char* err, size_t errlen) {
    memset(t, 0, sizeof *t);
    t->eot_token = -1;
    char dummy[8];
    if (!err) {
        err = dummy;
        errlen = sizeof dummy;
    }
    struct stat st;  // a FIFO would block the open
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "tokenizer file %s is not a regular file", path);
        return 0;
    }
    FILE* f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open tokenizer file %s", path);
        return 0;
    }
    uint32_t header[256];
    const char* why = NULL;
    if (fread(header, sizeof(uint32_t), 256, f) != 256) why = "truncated header";
    else if (header[0] != TOKENIZER_MAGIC) why = "bad magic (not an llm.c tokenizer file)";
    else if (header[1] != 1 && header[1] != 2) why = "unsupported version (want 1 or 2)";
    else if (header[2] == 0 || header[2] > (1u << 24)) why = "implausible vocab size";
    else if (header[1] == 2 && header[3] >= header[2]) why = "eot token outside the vocabulary";
    if (!why) {
        t->vocab_size = header[2];
        t->eot_token = header[1] == 2 ? (int)header[3] : 50256;  // version 1 predates the field
        t->token_table = (char**)calloc(t->vocab_size, sizeof(char*));
        for (uint32_t i = 0; i < t->vocab_size && !why; i++) {
            unsigned char len;
            if (fread(&len, 1, 1, f) != 1) {
                why = "truncated token table";
                break;
            }
            t->token_table[i] = (char*)malloc((size_t)len + 1);
            if (fread(t->token_table[i], 1, len, f) != len) why = "truncated token table";
            t->token_table[i][len] = '\0';
        }
        if (!why && fgetc(f) != EOF) why = "trailing bytes after the token table";
    }
    fclose(f);
    if (why) {
        snprintf(err, errlen, "tokenizer file %s: %s", path, why);
        tokenizer_free(t);
        t->eot_token = -1;
        return 0;
    }
    t->init_ok = 1;
    return 1;
}

// Token id's bytes, NUL-terminated (token 0x00 reads ""); NULL if not loaded or out of range.
static inline const char* tokenizer_decode(const Tokenizer* t, uint32_t id) {
    if (!t || !t->init_ok || id >= t->vocab_size) return NULL;
    return t->token_table[id];
}

// Prints a token, skipping a lone ASCII control byte (as llm.c's safe_printf).
static inline void print_token(const Tokenizer* t, uint32_t id) {
    const char* piece = tokenizer_decode(t, id);
    if (!piece || piece[0] == '\0') return;
    unsigned char c = (unsigned char)piece[0];
    if (piece[1] == '\0' && c < 0x80 && !(isprint(c) || isspace(c))) return;
    fputs(piece, stdout);
}
