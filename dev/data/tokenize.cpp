// tokenize.cpp — build/tokenize: turns a UTF-8 text file into llm.c-format token shards with the
// GPT-2 BPE of gpt2_bpe.h, and optionally writes the decode table (gpt2_tokenizer.bin) that
// tokenizer.h reads. It does not download anything, shuffle, or parse "<|endoftext|>" in the text.
//
// Documents: the text is cut right AFTER every "\n\n" (the blank line stays with the document it
// ends), and every document is preceded by <|endoftext|> (50256) — llm.c's tinyshakespeare
// convention, where each speech of the play is one document. Each document is encoded on its own,
// so no BPE piece spans two documents.
// Split: the FIRST --val-tokens tokens form <prefix>_val.bin, the rest <prefix>_train.bin.
// Shard format: 256 int32 header {20240520, 1, token count, 0...}, then uint16 token ids.
// Tokenizer format: 256 int32 header {20240328, 2, vocab size, eot id, 0...}, then per id 0..V-1 one
// uint8 length and that many raw bytes. Both little-endian, as written by the host (x86/ARM).
#include <errno.h>  // defines: errno, ERANGE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <chrono>
#include <string>
#include <vector>
#include "dev/data/gpt2_bpe.h"

static const char* kUsage =
    "usage: build/tokenize --input TEXT --out-prefix DIR/name [--val-tokens 32768] "
    "[--encoder dev/data/gpt2/encoder.json] [--vocab dev/data/gpt2/vocab.bpe] [--tokenizer-out "
    "gpt2_tokenizer.bin]";

static void die(const char* fmt, const char* a = "", const char* b = "") {
    fprintf(stderr, "error: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    exit(1);
}

static void write_or_die(FILE* f, const void* p, size_t n, const char* path) {
    if (n && fwrite(p, 1, n, f) != n) die("cannot write %s", path);
}

static void write_shard(const std::string& path, const uint16_t* tok, size_t n) {
    FILE* f = fopen(path.c_str(), "wb");
    if (!f) die("cannot open %s for writing", path.c_str());
    int32_t header[256] = {20240520, 1, (int32_t)n};
    write_or_die(f, header, sizeof header, path.c_str());
    write_or_die(f, tok, n * sizeof(uint16_t), path.c_str());
    if (fclose(f) != 0) die("cannot write %s", path.c_str());
}

static void write_tokenizer(const GPT2BPE* t, const char* path) {
    FILE* f = fopen(path, "wb");
    if (!f) die("cannot open %s for writing", path);
    int32_t header[256] = {20240328, 2, (int32_t)t->decoder.size(), t->eot_token};
    write_or_die(f, header, sizeof header, path);
    for (const std::string& s : t->decoder) {
        if (s.empty() || s.size() > 255)
            die("a token of %s does not fit the uint8 length of the tokenizer file", path);
        uint8_t len = (uint8_t)s.size();
        write_or_die(f, &len, 1, path);
        write_or_die(f, s.data(), s.size(), path);
    }
    if (fclose(f) != 0) die("cannot write %s", path);
}

int main(int argc, char** argv) {
    const char *input = NULL, *prefix = NULL, *tok_out = NULL;
    const char *encoder = "dev/data/gpt2/encoder.json", *vocab = "dev/data/gpt2/vocab.bpe";
    long val_tokens = 32768;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("%s\n", kUsage);
            return 0;
        }
        if (i + 1 >= argc) die("flag %s needs a value (%s)", argv[i], kUsage);
        const char *flag = argv[i], *v = argv[++i];
        if (!strcmp(flag, "--input")) input = v;
        else if (!strcmp(flag, "--out-prefix")) prefix = v;
        else if (!strcmp(flag, "--encoder")) encoder = v;
        else if (!strcmp(flag, "--vocab")) vocab = v;
        else if (!strcmp(flag, "--tokenizer-out")) tok_out = v;
        else if (!strcmp(flag, "--val-tokens")) {
            char* end;
            errno = 0;  // ERANGE: a count past LONG_MAX is refused, not clamped
            val_tokens = strtol(v, &end, 10);
            if (*end || end == v || val_tokens < 1 || errno == ERANGE)
                die("--val-tokens wants a count >= 1 that fits 64 bits (the trainers refuse an empty val "
                    "shard), got '%s'",
                    v);
        } else die("unknown flag %s (%s)", flag, kUsage);
    }
    if (!input || !prefix) die("--input and --out-prefix are required (%s)", kUsage);

    GPT2BPE bpe;
    std::string err, text;
    if (!gpt2_bpe_load(&bpe, encoder, vocab, &err)) die("%s", err.c_str());
    if (bpe.eot_token < 0) die("the vocabulary %s has no <|endoftext|> token", encoder);
    if (bpe.decoder.size() > 65536) die("the vocabulary %s does not fit uint16 token ids", encoder);
    if (!gpt2_read_file(input, &text)) die("cannot read %s", input);

    auto t0 = std::chrono::steady_clock::now();
    std::vector<uint16_t> tokens;
    GPT2BPECache cache;  // shared by all documents: they repeat the same words
    size_t ndocs = 0;
    for (size_t start = 0; start < text.size(); ndocs++) {
        size_t cut = text.find("\n\n", start);
        size_t end = cut == std::string::npos ? text.size() : cut + 2;
        tokens.push_back((uint16_t)bpe.eot_token);
        for (int id : gpt2_bpe_encode(&bpe, text.substr(start, end - start), &cache))
            tokens.push_back((uint16_t)id);
        start = end;
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if ((size_t)val_tokens >= tokens.size())
        die("%s has too few tokens for --val-tokens %s and a non-empty train split", input,
            std::to_string(val_tokens).c_str());

    write_shard(std::string(prefix) + "_val.bin", tokens.data(), (size_t)val_tokens);
    write_shard(std::string(prefix) + "_train.bin", tokens.data() + val_tokens,
                tokens.size() - (size_t)val_tokens);
    printf("%s: %zu bytes, %zu documents, %zu tokens (incl. one <|endoftext|> per document) in %.2f s\n",
           input, text.size(), ndocs, tokens.size(), secs);
    printf("wrote %s_val.bin (%ld tokens) and %s_train.bin (%zu tokens)\n", prefix, val_tokens, prefix,
           tokens.size() - (size_t)val_tokens);
    if (tok_out) {
        write_tokenizer(&bpe, tok_out);
        printf("wrote %s (vocab %zu, eot %d)\n", tok_out, bpe.decoder.size(), bpe.eot_token);
    }
    return 0;
}
