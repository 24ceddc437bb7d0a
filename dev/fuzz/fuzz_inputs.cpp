// fuzz_inputs.cpp — libFuzzer harness for everything a user hands the trainers: llm.c model files, token
// shards and a saved data-loader position, optimizer state headers, tokenizer files, command-line flags,
// model specs, and the data-prep BPE encoder's input text. Each input is run through the real parsers (host
// code, built with clang's ASan + UBSan), which must answer with a one-line error or with something usable;
// what is accepted is then used and checked, so a parser that accepts garbage fails as surely as
// one that crashes:
//   model      gpt_read_header accepts => gpt_load_params loads it, and save + reload gives the same bits
//   shard      dataloader_init accepts (GPT-2, Llama 3 or chat shard) => every batch reads (a chat row may
//              instead be refused for its flags, naming the row), targets are inputs shifted by one (chat: -1
//              or the next input of the same conversation, pos restarting at each start flag), a saved
//              position restores the same next batch elsewhere, and any position set_state accepts (one field
//              of a real one changed by a small delta or overwritten with fuzz bytes) reads a batch
//   state      state_file_check accepts => the header's step / update count / schedule are in range
//   tokenizer  tokenizer_init accepts => every id decodes to a NUL-terminated string
//   args       parse_train_argv accepts => train_args_check agrees and -d splits into whole micro-batches
//   spec       parse_model_spec accepts => gpt_config_check agrees and the parameter count is positive
//   bpe        any byte string encodes to ids < 50257 that decode to the same bytes (gpt2_bpe.h's promise)
//   hf         a Hugging Face checkpoint directory: byte 0 even, the rest is its model.safetensors (beside a
//              valid config.json); odd, the rest is its config.json (beside a valid model.safetensors).
//              gpt_read_header accepts => gpt_load_params loads it, and hf.h's export + reload gives the same
//              config and bits
//   marker     a checkpoint's DONE marker (its text, or a correct one over a state file with fuzz bytes
//              patched in): checkpoint_verify accepts => the marker is empty (an older build's) or the files
//              are the ones it names, byte for byte
//   json       hf.h's JSON reader on the input, then on the input repeated into a ~1 MB array and object:
//              run.sh's time and memory limits on this target keep the reader linear and its memory a
//              small multiple of the input
//   manifest   the SSD store's manifest (byte 0 even: the rest is the manifest; odd: the valid one with the
//              rest patched in) beside a valid 2-layer store checkpointed at steps 1 and 2: ssd_store_open
//              accepts => it opened step 1 or 2, and every layer reads back as that step wrote it
//   llama      the Llama family, by byte 0 mod 3: 0 a model file (llama_read_header accepts => it loads, and
//              save + reload gives the same config and bits); 1 a config.json (llama_hf_config accepts =>
//              llama_hf_write_config's file reads back as the same config); 2 a spec (parse_llama_spec
//              accepts => llama_config_check agrees, the parameter count is positive)
// Not here: train_gpt's own GPU flags (-S -R -K -V ...: test_cli runs those) and the
// checkpoint directory scan.
//
// usage (repo root; see dev/fuzz/run.sh, or `make fuzz`):
//   FUZZ_TARGET=shard build/fuzz/fuzz_inputs build/fuzz/corpus/shard -max_total_time=60
//   FUZZ_SEEDS=dir build/fuzz/fuzz_inputs     writes a few valid inputs per target to dir/<target>/, exits
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <string>
#include <vector>
#include "llmc/checkpoint.h"
#include "dataloader.h"
#include "dev/data/gpt2_bpe.h"
#include "llmc/model_file.h"
#include "llmc/tokenizer.h"
#include "llmc/args.h"
#include "llmc/model_specs.h"
#include "llmc/utils.h"
#include "llmc/hf.h"
#include "llmc/llama_hf.h"
#include "llmc/llama_model.h"
#include "llmc/ssd.h"

enum {
    T_MODEL,
    T_SHARD,
    T_STATE,
    T_TOKENIZER,
    T_ARGS,
    T_SPEC,
    T_BPE,
    T_MARKER,
    T_HF,
    T_JSON,
    T_MANIFEST,
    T_LLAMA,
    NUM_TARGETS
};
static const char* const target_names[NUM_TARGETS] = {"model", "shard", "state",    "tokenizer",
                                                      "args",  "spec",  "bpe",      "marker",
                                                      "hf",    "json",  "manifest", "llama"};
static int target = -1;
static char dir[256];  // this process's scratch directory for the files the parsers read
static GPT2BPE bpe;

// A fuzz-found contradiction: print it and abort, so libFuzzer saves the input as a crash.
#define REQUIRE(cond, ...)                                              \
    do {                                                                \
        if (!(cond)) {                                                  \
            fprintf(stderr, "fuzz_inputs: %s: ", target_names[target]); \
            fprintf(stderr, __VA_ARGS__);                               \
            fprintf(stderr, "\n");                                      \
            abort();                                                    \
        }                                                               \
    } while (0)

static void write_file(const char* path, const void* p, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        abort();
    }
}
static std::string scratch(const char* name) { return std::string(dir) + "/" + name; }

// ---- model files ----
static void fuzz_model(const uint8_t* data, size_t n) {
    const std::string path = scratch("model.bin"), copy = scratch("copy.bin");
    write_file(path.c_str(), data, n);
    GPTConfig cfg;
    char err[4400];
    if (!gpt_read_header(path.c_str(), &cfg, err, sizeof err)) return;
    const int64_t total = gpt_layout(&cfg).total;
    std::vector<float> params((size_t)total), again((size_t)total);
    REQUIRE(gpt_load_params(path.c_str(), &cfg, params.data(), err, sizeof err),
            "header accepted, load refused: %s", err);
    REQUIRE(gpt_save_params(copy.c_str(), &cfg, params.data(), err, sizeof err), "save failed: %s", err);
    GPTConfig cfg2;
    REQUIRE(gpt_read_header(copy.c_str(), &cfg2, err, sizeof err), "own file refused: %s", err);
    REQUIRE(memcmp(&cfg, &cfg2, sizeof cfg) == 0, "config changed by save + reload");
    REQUIRE(gpt_load_params(copy.c_str(), &cfg2, again.data(), err, sizeof err), "own file not loaded: %s",
            err);
    REQUIRE(memcmp(params.data(), again.data(), sizeof(float) * (size_t)total) == 0,
            "weights changed by save + reload");
}

// ---- Hugging Face checkpoints ----
static const GPTConfig kHfCfg = {8, 64, 128, 1, 1, 32};  // maxT V Vp L NH C: the smallest legal GPT-2
// A valid checkpoint of kHfCfg: its model.safetensors and config.json (written by hf.h's exporter).
static void hf_valid(std::string* st, std::string* config) {
    std::vector<float> p((size_t)gpt_layout(&kHfCfg).total);
    gpt_init_params(&kHfCfg, p.data(), 1);
    const std::string d = scratch("hf_valid");
    mkdir(d.c_str(), 0755);
    const std::vector<HfTensorPlace> places = hf_tensor_places(&kHfCfg);
    char err[4400];
    auto read = [&](size_t k, float* dst) {
        memcpy(dst, p.data() + places[k].dst, 4 * (size_t)places[k].count);
        return 1;
    };
    REQUIRE(hf_write_safetensors(d, &kHfCfg, 0, INT64_MAX, read, err, sizeof err) &&
                hf_write_config(d, &kHfCfg, 0, err, sizeof err),
            "cannot write the valid checkpoint: %s", err);
    REQUIRE(read_whole_file((d + "/model.safetensors").c_str(), 1 << 30, st, err, sizeof err) &&
                read_whole_file((d + "/config.json").c_str(), 1 << 20, config, err, sizeof err),
            "%s", err);
}
static void fuzz_hf(const uint8_t* data, size_t n) {
    if (n < 1) return;
    static std::string st, config;
    if (st.empty()) hf_valid(&st, &config);
    const std::string d = scratch("hf"), copy = scratch("hf_copy");
    mkdir(d.c_str(), 0755);
    const bool fuzz_config = data[0] & 1;
    write_file((d + "/model.safetensors").c_str(), fuzz_config ? (const uint8_t*)st.data() : data + 1,
               fuzz_config ? st.size() : n - 1);
    write_file((d + "/config.json").c_str(), fuzz_config ? data + 1 : (const uint8_t*)config.data(),
               fuzz_config ? n - 1 : config.size());
    GPTConfig cfg;
    char err[4400];
    if (!gpt_read_header(d.c_str(), &cfg, err, sizeof err)) return;
    const int64_t total = gpt_layout(&cfg).total;
    if (total > ((int64_t)1 << 26))
        return;  // a config.json may name a large model whose tensors are not there
    std::vector<float> params((size_t)total), again((size_t)total);
    if (!gpt_load_params(d.c_str(), &cfg, params.data(), err, sizeof err)) {
        // the reads a header check cannot do: a dtype that is not F32/F16/BF16, an lm_head that
        // differs from wte
        REQUIRE(strstr(err, "can be read") || strstr(err, "lm_head"), "header accepted, load refused: %s",
                err);
        return;
    }
    for (const char* f :
         {"model.safetensors", "config.json", "generation_config.json", "model.safetensors.index.json"})
        unlink((copy + "/" + f).c_str());
    mkdir(copy.c_str(), 0755);
    const std::vector<HfTensorPlace> places = hf_tensor_places(&cfg);
    auto read = [&](size_t k, float* dst) {
        memcpy(dst, params.data() + places[k].dst, 4 * (size_t)places[k].count);
        return 1;
    };
    REQUIRE(hf_write_safetensors(copy, &cfg, 0, INT64_MAX, read, err, sizeof err) &&
                hf_write_config(copy, &cfg, 0, err, sizeof err),
            "export failed: %s", err);
    GPTConfig cfg2;
    REQUIRE(gpt_read_header(copy.c_str(), &cfg2, err, sizeof err), "own export refused: %s", err);
    REQUIRE(memcmp(&cfg, &cfg2, sizeof cfg) == 0, "config changed by export + reload");
    REQUIRE(gpt_load_params(copy.c_str(), &cfg2, again.data(), err, sizeof err), "own export not loaded: %s",
            err);
    REQUIRE(memcmp(params.data(), again.data(), sizeof(float) * (size_t)total) == 0,
            "weights changed by export + reload");
}

// ---- token shards and the data-loader position ----
// Input: B-1, T-1, flags (bit 0 shuffle, bit 1 a second shard: the same bytes again, bit 2 T from a chat
// header's slot when it is 1..64), batches to read, the index of the state field to overwrite, how (odd: add
// the next byte as a signed delta, so off-by-one values are near; even: the 8 bytes after it), then the file.
static const size_t kShardParams = 15;
// The next batch: read and consistent, or (chat only) refused for a malformed row. 0 if refused.
static int shard_batch(DataLoader* dl) {
    if (!dataloader_next_batch(dl)) {
        REQUIRE(dl->kind == DL_CHAT && strstr(dl->err, ": row "), "batch of an accepted shard: %s", dl->err);
        return 0;
    }
    const int64_t BT = (int64_t)dl->B * dl->T;
    int64_t count = 0;
    for (int64_t i = 0; i < BT; i++) {
        const int j = (int)(i % dl->T);
        if (dl->kind != DL_CHAT) {
            REQUIRE(i + 1 == BT || dl->targets[i] == dl->inputs[i + 1], "targets are not the inputs shifted");
            REQUIRE(dl->pos[i] == j, "pretraining pos %d at %d", dl->pos[i], j);
            count++;
            continue;
        }
        REQUIRE(dl->pos[i] == ((dl->flags[i] & CHAT_START) ? 0 : dl->pos[i - 1] + 1), "pos %d at %d",
                dl->pos[i], j);
        REQUIRE(j > 0 || dl->pos[i] == 0, "a row starts at pos %d", dl->pos[i]);
        if (dl->targets[i] == -1) continue;
        count++;
        REQUIRE(j + 1 < dl->T && dl->targets[i] == dl->inputs[i + 1] && dl->pos[i + 1] == dl->pos[i] + 1,
                "a target that is not the next token of the conversation (row token %d)", j);
    }
    REQUIRE(count == dl->batch_targets, "batch_targets %lld, counted %lld", (long long)dl->batch_targets,
            (long long)count);
    return 1;
}
static void fuzz_shard(const uint8_t* data, size_t n) {
    if (n < kShardParams) return;
    int B = 1 + data[0] % 4, T = 1 + data[1] % 32;
    const int shuffle = data[2] & 1, two = (data[2] >> 1) & 1;
    const int reads = data[3] % 24, field = data[4] % (int)(sizeof(DataLoaderState) / 8), add = data[5] & 1;
    const int64_t delta = (int8_t)data[6];
    uint64_t value;
    memcpy(&value, data + 7, 8);
    int32_t h[4] = {0};
    memcpy(h, data + kShardParams, std::min(sizeof h, n - kShardParams));
    if ((data[2] & 4) && h[0] == DATALOADER_CHAT_MAGIC && h[CHAT_H_T] >= 1 && h[CHAT_H_T] <= 64)
        T = h[CHAT_H_T];
    const std::string a = scratch("shard_a.bin"), b = scratch("shard_b.bin"),
                      pattern = scratch("shard_*.bin");
    write_file(a.c_str(), data + kShardParams, n - kShardParams);
    if (two) write_file(b.c_str(), data + kShardParams, n - kShardParams);
    else unlink(b.c_str());
    DataLoader dl, other;
    char err[1024];
    if (!dataloader_init(&dl, pattern.c_str(), B, T, shuffle, 1234, err, sizeof err)) {
        REQUIRE(err[0] && !strchr(err, '\n'), "a refusal without a one-line reason");
        dataloader_free(&dl);
        return;
    }
    REQUIRE(dl.num_batches >= 1, "accepted with no batch");
    const int64_t BT = (int64_t)B * T;
    for (int r = 0; r < reads; r++) shard_batch(&dl);
    // a saved position restores the same next batch in another loader
    DataLoaderState s = dataloader_get_state(&dl);
    REQUIRE(dataloader_init(&other, pattern.c_str(), B, T, 0, 99, err, sizeof err),
            "second loader refused: %s", err);
    REQUIRE(dataloader_set_state(&other, &s, err, sizeof err), "own state refused: %s", err);
    const int ok1 = shard_batch(&dl), ok2 = shard_batch(&other);
    REQUIRE(ok1 == ok2, "a restored loader reads another batch (one refused)");
    REQUIRE(!ok1 || memcmp(dl.inputs, other.inputs, sizeof(int) * (size_t)BT) == 0,
            "restored loader reads another batch");
    // a corrupted position is refused, or reads a real batch
    s = dataloader_get_state(&dl);
    uint64_t old;
    memcpy(&old, (char*)&s + 8 * field, 8);
    if (add) value = old + (uint64_t)delta;
    memcpy((char*)&s + 8 * field, &value, 8);
    if (dataloader_set_state(&other, &s, err, sizeof err)) shard_batch(&other);
    dataloader_free(&dl);
    dataloader_free(&other);
}

// ---- optimizer state files ----
// The parameter count the file is checked against: what its size implies, so the size check can pass.
static void fuzz_state(const uint8_t* data, size_t n) {
    const std::string path = scratch("state.bin");
    write_file(path.c_str(), data, n);
    int64_t version = 0;  // version 3 / 103: the run tail at the end
    if (n >= 16) memcpy(&version, data + 8, 8);
    const int64_t rest =
        (int64_t)n - ST_HEADER_FIELDS * 8 - (int64_t)sizeof(DataLoaderState) - state_run_tail_bytes(version);
    const int64_t total = rest > 0 ? rest / 8 : 1;
    int64_t header[ST_HEADER_FIELDS];
    char err[4400];
    if (!state_file_check(path.c_str(), total, header, err, sizeof err)) return;
    RunTail tail;
    if (state_file_run_tail(path.c_str(), header, &tail, err, sizeof err)) {
        OutlierWindow w[2];
        run_tail_windows(&tail, &w[0], &w[1]);  // a window that outlier_z may take
        for (int i = 0; i < 2; i++)
            REQUIRE(w[i].count >= 0 && w[i].count <= OUTLIER_WINDOW && w[i].next >= 0 &&
                        w[i].next < OUTLIER_WINDOW,
                    "bad window accepted");
    }
    REQUIRE(header[ST_STEP] >= 1 && header[ST_ADAM_T] >= 0 && header[ST_ADAM_T] <= header[ST_STEP],
            "bad step accepted");
    REQUIRE(header[ST_LR_SCHEDULE] >= 0 && header[ST_LR_SCHEDULE] < LR_SCHEDULES, "bad schedule accepted");
    REQUIRE(header[ST_PARAMS] == total, "wrong parameter count accepted");
}

// ---- checkpoint markers ----
// A checkpoint of step 1 in the scratch directory (a small model file, a 4 KiB state file: verify reads only
// bytes), restored before each input. Input byte 0 even: the rest is the marker's text. Odd: a correct
// marker, and the rest patched into the state file (byte 1: offset / 16).
static std::string marker_model, marker_state;
static std::string marker_state_bytes(void) {
    std::string s(4096, '\0');
    for (size_t i = 0; i < s.size(); i++) s[i] = (char)(i * 131 % 251);
    return s;
}
static void marker_setup(void) {
    GPTConfig cfg = {4, 3, 128, 1, 1, 32};
    std::vector<float> params((size_t)gpt_layout(&cfg).total);
    gpt_init_params(&cfg, params.data(), 7);
    char err[4400];
    if (!gpt_save_params(scratch("model_00000001.bin").c_str(), &cfg, params.data(), err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        exit(2);
    }
    FILE* f = fopen(scratch("model_00000001.bin").c_str(), "rb");
    marker_model.resize(1024 + 4 * params.size());
    if (!f || fread(&marker_model[0], 1, marker_model.size(), f) != marker_model.size()) exit(2);
    fclose(f);
    marker_state = marker_state_bytes();
}
static void fuzz_marker(const uint8_t* data, size_t n) {
    const std::string model = scratch("model_00000001.bin"), state = scratch("state_00000001.bin");
    write_file(model.c_str(), marker_model.data(), marker_model.size());
    std::string st = marker_state;
    char err[4400];
    const bool patch = n > 0 && (data[0] & 1);
    if (patch) {
        FileSum sums[2] = {
            {(int64_t)marker_model.size(), crc32c_update(0, marker_model.data(), marker_model.size())},
            {(int64_t)st.size(), crc32c_update(0, st.data(), st.size())}};
        REQUIRE(checkpoint_write_done(dir, 1, sums, err, sizeof err), "%s", err);
        const size_t off = n > 1 ? (size_t)data[1] * 16 : 0;
        for (size_t i = 2; i < n && off + i - 2 < st.size(); i++) st[off + i - 2] = (char)data[i];
    } else {
        write_file(scratch("DONE_00000001").c_str(), n > 0 ? data + 1 : data, n > 0 ? n - 1 : 0);
    }
    write_file(state.c_str(), st.data(), st.size());
    int verified = -1;
    if (!checkpoint_verify(dir, 1, &verified, err, sizeof err)) return;
    if (!patch && n <= 1) {
        REQUIRE(verified == 0, "an empty marker counted as verified");
        return;
    }
    REQUIRE(verified == 1, "a non-empty marker accepted unverified");
    REQUIRE(st == marker_state || !patch, "a damaged state file passed its checksum");
}

// ---- tokenizer files ----
static void fuzz_tokenizer(const uint8_t* data, size_t n) {
    const std::string path = scratch("tokenizer.bin");
    write_file(path.c_str(), data, n);
    Tokenizer t;
    char err[1024];
    if (tokenizer_init(&t, path.c_str(), err, sizeof err)) {
        REQUIRE(t.eot_token >= 0, "no eot token");
        size_t bytes = 0;
        for (uint32_t id = 0; id < t.vocab_size; id++) {
            const char* piece = tokenizer_decode(&t, id);
            REQUIRE(piece != NULL, "id %u of %u does not decode", id, t.vocab_size);
            bytes += strlen(piece);
        }
        REQUIRE(bytes <= n, "decoded more bytes than the file holds");
        REQUIRE(tokenizer_decode(&t, t.vocab_size) == NULL, "an id past the vocabulary decodes");
    }
    tokenizer_free(&t);
}

// ---- flags and model specs ----
// Input: NUL-separated argv[1..].
static void fuzz_args(const uint8_t* data, size_t n) {
    std::string text((const char*)data, n);
    std::vector<char*> argv = {(char*)"train_gpt_cpu"};
    for (size_t i = 0; i <= text.size() && argv.size() < 64;) {
        argv.push_back(&text[i]);
        i += strlen(&text[i]) + 1;
    }
    TrainArgs a;
    train_args_defaults(&a);
    char err[4400];
    const int r = parse_train_argv((int)argv.size(), argv.data(), &a, err, sizeof err);
    REQUIRE(r == 0 || r == 1 || r == 2, "parse returned %d", r);
    if (r == 0)
        REQUIRE(err[0] != '\0', "refused without a reason");  // (die() prints it on one line, escaped)
    if (r != 1) return;
    REQUIRE(train_args_check(&a, err, sizeof err), "accepted, then refused: %s", err);
    REQUIRE(a.B >= 1 && a.T >= 1, "B=%d T=%d accepted", a.B, a.T);
    const int micro = grad_accum_steps(&a);
    REQUIRE(micro >= 1 && (a.total_batch_tokens == 0 || (int64_t)micro * a.B * a.T == a.total_batch_tokens),
            "-d %lld is not %d micro-batches of %d x %d", (long long)a.total_batch_tokens, micro, a.B, a.T);
}
static void fuzz_spec(const uint8_t* data, size_t n) {
    const std::string spec((const char*)data, strnlen((const char*)data, n));
    GPTConfig cfg;
    char err[1024] = "";
    const int r = parse_model_spec(spec.c_str(), &cfg, err, sizeof err);
    REQUIRE(r == 0 || r == 1 || r == 2, "parse returned %d", r);
    if (r == 0) REQUIRE(err[0] != '\0', "refused without a reason");
    if (r != 1) return;
    REQUIRE(gpt_config_check(&cfg, err, sizeof err), "spec accepted, config refused: %s", err);
    const ParamLayout p = gpt_layout(&cfg);
    REQUIRE(p.total > 0 && gpt_num_real_params(&cfg, &p) > 0, "parameter count %lld", (long long)p.total);
}

// ---- the Llama family ----
static void fuzz_llama(const uint8_t* data, size_t n) {
    if (n < 1) return;
    char err[4400] = "";
    LlamaConfig cfg, again;
    if (data[0] % 3 == 0) {  // a model file
        const std::string path = scratch("llama.bin"), copy = scratch("llama_copy.bin");
        write_file(path.c_str(), data + 1, n - 1);
        if (!llama_read_header(path.c_str(), &cfg, err, sizeof err)) return;
        const int64_t total = llama_layout(&cfg).total;  // the file holds them all: at most n / 4
        std::vector<float> params((size_t)total), back((size_t)total);
        if (!llama_load_params(path.c_str(), &cfg, params.data(), err, sizeof err)) {
            REQUIRE(strstr(err, "NaN") || strstr(err, "infinite"), "header accepted, load refused: %s", err);
            return;
        }
        REQUIRE(llama_save_params(copy.c_str(), &cfg, params.data(), err, sizeof err), "save failed: %s",
                err);
        REQUIRE(llama_read_header(copy.c_str(), &again, err, sizeof err), "own file refused: %s", err);
        REQUIRE(memcmp(&cfg, &again, sizeof cfg) == 0, "config changed by save + reload");
        REQUIRE(llama_load_params(copy.c_str(), &again, back.data(), err, sizeof err),
                "own file not loaded: %s", err);
        REQUIRE(memcmp(params.data(), back.data(), 4 * (size_t)total) == 0,
                "weights changed by save + reload");
    } else if (data[0] % 3 == 1) {  // a config.json
        const std::string d = scratch("llama_hf"), d2 = scratch("llama_hf_copy");
        mkdir(d.c_str(), 0755);
        mkdir(d2.c_str(), 0755);
        write_file((d + "/config.json").c_str(), data + 1, n - 1);
        HfCheckpoint ck;
        ck.dir = d;
        if (!hf_config_read(d + "/config.json", &ck.config, err, sizeof err) ||
            !llama_hf_config(&ck, &cfg, err, sizeof err))
            return;
        REQUIRE(llama_config_check(&cfg, err, sizeof err), "config accepted, check refused: %s", err);
        REQUIRE(llama_hf_write_config(d2, &cfg, 0, err, sizeof err), "config not written: %s", err);
        ck.dir = d2;
        REQUIRE(hf_config_read(d2 + "/config.json", &ck.config, err, sizeof err) &&
                    llama_hf_config(&ck, &again, err, sizeof err),
                "own config.json refused: %s", err);
        REQUIRE(memcmp(&cfg, &again, sizeof cfg) == 0, "config changed by write + read");
    } else {  // a spec
        const std::string spec((const char*)data + 1, strnlen((const char*)data + 1, n - 1));
        const int r = parse_llama_spec(spec.c_str(), &cfg, err, sizeof err);
        REQUIRE(r == 0 || r == 1 || r == 2, "parse returned %d", r);
        if (r == 0) REQUIRE(err[0] != '\0', "refused without a reason");
        if (r != 1) return;
        REQUIRE(llama_config_check(&cfg, err, sizeof err), "spec accepted, config refused: %s", err);
        REQUIRE(llama_layout(&cfg).total > 0, "parameter count %lld", (long long)llama_layout(&cfg).total);
    }
}

// ---- the data-prep encoder ----
static void fuzz_bpe(const uint8_t* data, size_t n) {
    const std::string text((const char*)data, n);
    const std::vector<int> ids = gpt2_bpe_encode(&bpe, text);
    for (int id : ids) REQUIRE(id >= 0 && id < 50257, "id %d", id);
    REQUIRE(gpt2_bpe_decode(&bpe, ids) == text, "decode(encode(text)) != text (%zu bytes, %zu ids)", n,
            ids.size());
    REQUIRE(ids.size() <= n, "%zu ids for %zu bytes", ids.size(), n);
}

// ---- seeds: valid inputs written by the project's own writers, so the fuzzer starts past the headers ----
// ---- JSON: the reader's worst cases ----
static bool keep_top(int level, const char* key) { return level <= 1 && key; }
static void fuzz_json(const uint8_t* data, size_t n) {
    char err[300];
    const char* t = (const char*)data;
    Json v, v2;
    const int ok = json_parse(t, n, &v, err, sizeof err);
    JsonKeep keep;
    keep.keep = keep_top;
    keep.max_items = 16;
    json_parse(t, n, &v2, err, sizeof err, keep);
    if (!ok || n == 0 || n > 4096) return;
    // the value repeated into an array and into an object of distinct keys, about 1 MB each
    const size_t reps = ((size_t)1 << 20) / (n + 12) + 1;
    std::string arr = "[", obj = "{";
    for (size_t i = 0; i < reps; i++) {
        if (i) arr += ',', obj += ',';
        arr.append(t, n);
        obj += "\"k" + std::to_string(i) + "\":";
        obj.append(t, n);
    }
    arr += ']';
    obj += '}';
    Json a, o;
    if (json_parse(arr.data(), arr.size(), &a, err, sizeof err))  // it may be too deep now
        REQUIRE(a.type == Json::ARR && a.items.size() == reps, "an array of %zu values read as %zu", reps,
                a.items.size());
    if (json_parse(obj.data(), obj.size(), &o, err, sizeof err))
        REQUIRE(o.type == Json::OBJ && o.members.size() == reps, "an object of %zu keys read as %zu", reps,
                o.members.size());
}

// ---- the SSD store's manifest ----
static const int kStoreLayers = 2;
static const int64_t kStoreElems = 4096;
static std::string valid_manifest;
static SsdStoreConfig store_cfg() {
    SsdStoreConfig c;
    memset(&c, 0, sizeof c);
    c.num_layers = kStoreLayers;
    c.layer_elems = kStoreElems;
    c.ring = 3;
    c.io.quiet = 1;
    return c;
}
static float store_value(int step, int layer, int64_t i) {
    return (float)step + 0.5f * layer + 1e-4f * (float)i;
}
// A store in dir/store checkpointed at steps 1 and 2 (each step's values written whole, no round).
static void manifest_setup(void) {
    const std::string d = scratch("store");
    const SsdStoreConfig c = store_cfg();
    char err[2048];
    SsdStore* st = ssd_store_create(d.c_str(), &c, err, sizeof err);
    REQUIRE(st, "%s", err);
    std::vector<float> p((size_t)kStoreElems);
    for (int step = 1; step <= 2; step++) {
        for (int l = 0; l < kStoreLayers; l++) {
            for (int64_t i = 0; i < kStoreElems; i++) p[(size_t)i] = store_value(step, l, i);
            REQUIRE(ssd_store_write_layer(st, l, p.data(), NULL, NULL, err, sizeof err) == 0, "%s", err);
        }
        REQUIRE(ssd_store_checkpoint(st, step, err, sizeof err) == 0, "%s", err);
    }
    ssd_store_close(st);
    std::string text;
    REQUIRE(read_whole_file((d + "/ssd_manifest").c_str(), 1 << 16, &text, err, sizeof err), "%s", err);
    valid_manifest = text;
}
static void fuzz_manifest(const uint8_t* data, size_t n) {
    if (n < 1) return;
    const std::string d = scratch("store"), path = d + "/ssd_manifest";
    std::string text((const char*)data + 1, n - 1);
    if (data[0] & 1) {  // the valid manifest, the fuzz bytes patched in at an offset (its first two bytes)
        const size_t at = n >= 3 ? ((size_t)data[1] | (size_t)data[2] << 8) % (valid_manifest.size() + 1) : 0;
        std::string m = valid_manifest;
        const std::string patch = n > 3 ? text.substr(2) : "";
        m.replace(at, std::min(patch.size(), m.size() - at), patch);
        text = m;
    }
    write_file(path.c_str(), text.data(), text.size());
    const SsdStoreConfig c = store_cfg();
    char err[4096];
    SsdStore* st = ssd_store_open(d.c_str(), &c, -1, err, sizeof err);
    if (st) {
        int64_t steps[2];
        ssd_store_steps(st, steps);
        const int64_t step = std::max(steps[0], steps[1]);
        REQUIRE(step == 1 || step == 2, "opened a store at step %lld", (long long)step);
        std::vector<float> p((size_t)kStoreElems);
        for (int l = 0; l < kStoreLayers; l++) {
            REQUIRE(ssd_store_read_layer(st, l, p.data(), NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
            for (int64_t i = 0; i < kStoreElems; i++)
                REQUIRE(p[(size_t)i] == store_value((int)step, l, i), "layer %d of step %lld reads wrong", l,
                        (long long)step);
        }
        ssd_store_close(st);
    } else {
        REQUIRE(err[0] && !strchr(err, '\n'), "a refusal without a one-line reason");
    }
    write_file(path.c_str(), valid_manifest.data(), valid_manifest.size());
}

static void put(const std::string& d, const char* name, const void* p, size_t n) {
    mkdir(d.c_str(), 0755);
    write_file((d + "/" + name).c_str(), p, n);
}
static void write_seeds(const char* root) {
    mkdir(root, 0755);
    const std::string r(root);
    char err[4400];
    // model: the smallest legal shape, fp32 (our writer) and the same as bf16 (llm.c's version 5)
    GPTConfig cfg = {4, 3, 128, 1, 1, 32};
    std::vector<float> params((size_t)gpt_layout(&cfg).total);
    gpt_init_params(&cfg, params.data(), 7);
    mkdir((r + "/model").c_str(), 0755);
    uint32_t model_crc = 0;  // the marker seed's (the scratch checkpoint's model file is this one)
    if (!gpt_save_params((r + "/model/fp32.bin").c_str(), &cfg, params.data(), err, sizeof err, &model_crc)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    std::vector<uint8_t> bf16(1024 + 2 * params.size());
    int header[256] = {MODEL_MAGIC, MODEL_VERSION_BF16, 4, 3, 1, 1, 32, 128};
    memcpy(bf16.data(), header, 1024);
    for (size_t i = 0; i < params.size(); i++) {  // tensor order differs, but any bits are weights
        uint32_t u;
        memcpy(&u, &params[i], 4);
        const uint16_t h = (uint16_t)(u >> 16);
        memcpy(&bf16[1024 + 2 * i], &h, 2);
    }
    put(r + "/model", "bf16.bin", bf16.data(), bf16.size());
    // shard: B=2, T=4 over 40 tokens, and the shuffled two-shard variant
    std::vector<uint8_t> shard(kShardParams + 1024 + 80, 0);
    const uint8_t params_plain[kShardParams] = {1, 3, 0, 5, 2, 1, 2, 0,
                                                0, 0, 0, 0, 0, 0, 0};  // batch index + 2
    memcpy(shard.data(), params_plain, kShardParams);
    const int shard_header[3] = {DATALOADER_MAGIC, DATALOADER_VERSION, 40};
    memcpy(shard.data() + kShardParams, shard_header, sizeof shard_header);
    for (int i = 0; i < 40; i++) {
        const uint16_t t = (uint16_t)(i * 997 % 50257);
        memcpy(&shard[kShardParams + 1024 + 2 * i], &t, 2);
    }
    put(r + "/shard", "plain", shard.data(), shard.size());
    shard[2] = 3;  // shuffled, two shards; shard index + 1
    shard[4] = 1;
    shard[6] = 1;
    put(r + "/shard", "shuffled_two", shard.data(), shard.size());
    // Llama 3: the same 40 ids as uint32, version 7
    std::vector<uint8_t> wide(kShardParams + 1024 + 160, 0);
    memcpy(wide.data(), params_plain, kShardParams);
    const int wide_header[3] = {DATALOADER_MAGIC_U32, DATALOADER_VERSION_U32, 40};
    memcpy(wide.data() + kShardParams, wide_header, sizeof wide_header);
    for (int i = 0; i < 40; i++) {
        const uint32_t t = (uint32_t)(i * 99991 % 128256);
        memcpy(&wide[kShardParams + 1024 + 4 * i], &t, 4);
    }
    put(r + "/shard", "llama3", wide.data(), wide.size());
    // chat: 5 rows of T=4 (B=2), two conversations and a pad in each row; bit 2: T from the header
    const uint8_t row_flags[4] = {CHAT_START, CHAT_TARGET, CHAT_START, CHAT_PAD | CHAT_START};
    std::vector<uint8_t> chat(kShardParams + 1024 + 5 * 4 * 3, 0);
    memcpy(chat.data(), params_plain, kShardParams);
    chat[2] = 4 | 1;  // shuffled rows
    int32_t ch[14] = {
        DATALOADER_CHAT_MAGIC, DATALOADER_CHAT_VERSION, 2, 4, 5, 50257, 10, 10, 5, 0, 5, 0, 0, 0};
    memcpy(chat.data() + kShardParams, ch, sizeof ch);
    for (int i = 0; i < 20; i++) {
        const uint16_t t = (uint16_t)(i * 997 % 50257);
        memcpy(&chat[kShardParams + 1024 + 2 * i], &t, 2);
        chat[kShardParams + 1024 + 40 + i] = row_flags[i % 4];
    }
    put(r + "/shard", "chat", chat.data(), chat.size());
    // state: a header the check accepts for 4 parameters
    std::vector<uint8_t> state(ST_HEADER_FIELDS * 8 + sizeof(DataLoaderState) + 4 * 8 + sizeof(RunTail), 0);
    int64_t sh[ST_HEADER_FIELDS] = {0};
    sh[ST_MAGIC] = STATE_MAGIC;
    sh[ST_VERSION] = STATE_VERSION;
    sh[ST_STEP] = 3;
    sh[ST_PARAMS] = 4;
    sh[ST_DATA_STATE_BYTES] = sizeof(DataLoaderState);
    sh[ST_ADAM_T] = 3;
    memcpy(state.data(), sh, sizeof sh);
    TrainArgs defaults;
    train_args_defaults(&defaults);
    const RunTail run = run_tail_of(&defaults, NULL, NULL);
    memcpy(state.data() + state.size() - sizeof run, &run, sizeof run);
    put(r + "/state", "ok", state.data(), state.size());
    // tokenizer: the shipped one is large; a 3-token version 2 file
    std::vector<uint8_t> tok(1024, 0);
    const uint32_t th[4] = {TOKENIZER_MAGIC, 2, 3, 2};
    memcpy(tok.data(), th, sizeof th);
    const char* pieces[3] = {"a", " bc", "<|endoftext|>"};
    for (const char* p : pieces) {
        tok.push_back((uint8_t)strlen(p));
        tok.insert(tok.end(), p, p + strlen(p));
    }
    put(r + "/tokenizer", "three", tok.data(), tok.size());
    // args, spec, bpe
    const char args[] =
        "-b\0"
        "8\0"
        "-t\0"
        "64\0"
        "-d\0"
        "1024\0"
        "-k\0"
        "wsd\0"
        "-o\0"
        "out\0"
        "-n\0"
        "5\0"
        "-nk\0"
        "2\0"
        "-gc\0"
        "0.5";
    put(r + "/args", "some", args, sizeof args - 1);
    const char* specs[] = {"d12", "L2:C64:NH2:T32", "5b:T2048:V65536", "124M"};
    for (int i = 0; i < 4; i++) put(r + "/spec", std::to_string(i).c_str(), specs[i], strlen(specs[i]));
    const char text[] =
        "First Citizen:\nBefore we proceed any further, hear me speak.\n\n  It's 2026 \xc3\xa9t\xc3\xa9 "
        "\xff\xfe!";
    put(r + "/bpe", "text", text, sizeof text - 1);
    // marker: a correct one for the scratch checkpoint (byte 0 even: the marker's text follows)
    const std::string st = marker_state_bytes();
    char marker[256];
    const int len =
        snprintf(marker, sizeof marker,
                 "\x02" DONE_HEADER "model_00000001.bin %d %08x\nstate_00000001.bin 4096 %08x\n",
                 1024 + 4 * (int)gpt_layout(&cfg).total, model_crc, crc32c_update(0, st.data(), st.size()));
    put(r + "/marker", "text", marker, (size_t)len);
    put(r + "/marker", "patch", "\x01\x10\xff", 3);
    // hf: the valid checkpoint's safetensors file (byte 0 even) and config.json (odd)
    std::string hst, hcfg;
    hf_valid(&hst, &hcfg);
    put(r + "/hf", "safetensors", (std::string(1, '\0') + hst).data(), hst.size() + 1);
    put(r + "/hf", "config", ("\x01" + hcfg).data(), hcfg.size() + 1);
    // json: a few shapes the readers meet (a header entry, an index, nesting)
    const char* js[] = {"{\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}",
                        "{\"weight_map\":{\"h.0\":\"model-1.safetensors\"}}", "[[1,2.5e3,-4],{\"x\":null}]",
                        "\"\\u00e9t\\u00e9\""};
    for (size_t i = 0; i < sizeof js / sizeof js[0]; i++)
        put(r + "/json", std::to_string(i).c_str(), js[i], strlen(js[i]));
    // manifest: the valid one (even), and a patch of it (odd: offset 0, the bytes "ssd_store 3")
    manifest_setup();
    put(r + "/manifest", "valid", (std::string(1, '\0') + valid_manifest).data(), valid_manifest.size() + 1);
    put(r + "/manifest", "patch", "\x01\x00\x00ssd_store 3", 14);
    // llama: a model file (0), a config.json (1), specs (2)
    LlamaConfig lc;
    char lerr[600];
    parse_llama_spec("qwen2:L1:C16:NH2:KV1:I24:V40:T8:TIE1", &lc, lerr, sizeof lerr);
    std::vector<float> lp((size_t)llama_layout(&lc).total);
    llama_init_params(&lc, lp.data(), 1);
    const std::string lpath = scratch("seed_llama.bin"), ldir = scratch("seed_llama_hf");
    mkdir(ldir.c_str(), 0755);
    llama_save_params(lpath.c_str(), &lc, lp.data(), lerr, sizeof lerr);
    std::string lbytes, ltext;
    read_whole_file(lpath.c_str(), 1 << 20, &lbytes, lerr, sizeof lerr);
    lbytes.insert(lbytes.begin(), '\0');
    put(r + "/llama", "model", lbytes.data(), lbytes.size());
    parse_llama_spec("llama3-8b:L1:C64:NH4:KV2:I96:V50:T16", &lc, lerr, sizeof lerr);
    llama_hf_write_config(ldir, &lc, 0, lerr, sizeof lerr);
    read_whole_file((ldir + "/config.json").c_str(), 1 << 20, &ltext, lerr, sizeof lerr);
    put(r + "/llama", "config", ("\x01" + ltext).data(), ltext.size() + 1);
    const char* lspecs[] = {"\x02llama3-405b", "\x02llama:L2:C64:NH4:KV2:I128:TIE1",
                            "\x02qwen2.5-7b:L1:HD64"};
    for (int i = 0; i < 3; i++)
        put(r + "/llama", ("spec" + std::to_string(i)).c_str(), lspecs[i], strlen(lspecs[i]));
}

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
    snprintf(dir, sizeof dir, "/tmp/fuzz_inputs.XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(2);
    }
    if (const char* seeds = getenv("FUZZ_SEEDS")) {
        write_seeds(seeds);
        exit(0);
    }
    const char* name = getenv("FUZZ_TARGET");
    for (int i = 0; name && i < NUM_TARGETS; i++)
        if (strcmp(name, target_names[i]) == 0) target = i;
    if (target < 0) {
        fprintf(stderr,
                "fuzz_inputs: set FUZZ_TARGET to one of: model shard state tokenizer args spec bpe marker hf "
                "json manifest llama\n");
        exit(2);
    }
    if (target == T_MARKER) marker_setup();
    if (target == T_MANIFEST) manifest_setup();
    if (target == T_BPE) {
        std::string err;
        if (!gpt2_bpe_load(&bpe, "dev/data/gpt2/encoder.json", "dev/data/gpt2/vocab.bpe", &err)) {
            fprintf(stderr, "fuzz_inputs: %s (run from the repo root)\n", err.c_str());
            exit(2);
        }
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t n) {
    switch (target) {
        case T_MODEL: fuzz_model(data, n); break;
        case T_SHARD: fuzz_shard(data, n); break;
        case T_STATE: fuzz_state(data, n); break;
        case T_TOKENIZER: fuzz_tokenizer(data, n); break;
        case T_ARGS: fuzz_args(data, n); break;
        case T_SPEC: fuzz_spec(data, n); break;
        case T_BPE: fuzz_bpe(data, n); break;
        case T_MARKER: fuzz_marker(data, n); break;
        case T_HF: fuzz_hf(data, n); break;
        case T_JSON: fuzz_json(data, n); break;
        case T_MANIFEST: fuzz_manifest(data, n); break;
        case T_LLAMA: fuzz_llama(data, n); break;
    }
    return 0;
}
