// export_hf.cpp — writes a model as a Hugging Face directory:
//   ./export_hf -i log/model_00000300.bin -o gpt2_hf
// Not here: the format mapping (hf.h).

// Input: model file, run directory (newest checkpoint) or HF checkpoint.
// Output: safetensors, configs with bos/eos ids (hf_special_ids), tokenizer (-t DIR's, else GPT-2's).
// Memory: the largest tensor; input is read tensor by tensor.

// Staged in <dir>.tmp-<pid>, renamed to <dir> when complete; a killed export's staging directory is
// removed by the next export to <dir> (its marker file says it is ours).
#include <ctype.h>  // defines: isdigit
#include <limits.h>
#include <signal.h>  // defines: signal, SIGINT, SIGTERM
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>  // defines: statvfs
#include <dirent.h>
#include <algorithm>
#include <string>
#include <vector>
#include "llmc/checkpoint.h"  // defines: pick_checkpoint, latest_checkpoint
#include "llmc/hf.h"  // defines: hf_write_safetensors, hf_write_places, hf_write_config, hf_tensor_places
#include "llmc/hf_tokenizer.h"  // defines: hf_special_ids, HfSpecialIds
#include "llmc/llama_hf.h"      // defines: llama_hf_read_config, llama_hf_write_places, llama_hf_write_config
#include "llmc/model_file.h"    // defines: gpt_read_header, gpt_layout, host_available_bytes
#include "llmc/run_dir.h"       // defines: make_dirs, fsync_dir
#include "llmc/utils.h"         // defines: die, SizeText

// The tokenizer files -t's folder may hold (each copied when there), and the GPT-2 ones a GPT-2 export
// writes from the shipped data without -t.
static const std::vector<const char*> kTokenizerFiles = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
    "merges.txt",     "tokenizer.model"};
static const std::vector<const char*> kGpt2TokenizerFiles = {"encoder.json", "vocab.bpe"};

// Both files are there and hold other bytes (two tokenizers).
static bool files_differ(const std::string& a, const std::string& b) {
    if (!file_exists(a) || !file_exists(b)) return false;
    std::string x, y;
    char err[600];
    return !read_whole_file(a.c_str(), (int64_t)1 << 30, &x, err, sizeof err) ||
           !read_whole_file(b.c_str(), (int64_t)1 << 30, &y, err, sizeof err) || x != y;
}

static void usage(FILE* f) {
    fprintf(f,
            "usage: ./export_hf -i <model> -o <dir> [-d fp32|bf16] [-s <max shard size>] [-t <dir>]\n"
            "  -i  a model file (GPT-2: llm.c's, fp32 or bf16; Llama, Qwen2: train_gpt_cpu's), a run\n"
            "      directory (its newest complete checkpoint) or a Hugging Face checkpoint of either family\n"
            "  -o  the directory to write (new or empty)\n"
            "  -d  dtype of the weights written (default fp32)\n"
            "  -s  largest shard, e.g. 5GB (the default, as transformers), 500MB, 2000000000; larger\n"
            "      models are written in shards with model.safetensors.index.json\n"
            "  -t  copy the tokenizer files from this directory (e.g. the checkpoint a run started from);\n"
            "      default: GPT-2's for a GPT-2, none for the Llama family. Its generation_config.json is\n"
            "      carried over, and the bos and eos ids come from its configs and tokenizer (the chat\n"
            "      template's end of turn among the eos ids)\n");
}

// "5GB", "500MB", "64KB", "123" -> bytes (decimal, as max_shard_size); -1 if bad.
static int64_t parse_size(const char* s) {
    char* end;
    errno = 0;
    const double x = strtod(s, &end);
    if (end == s || errno || !(x >= 1)) return -1;
    double unit = 1;
    if (!strcasecmp(end, "KB")) unit = 1e3;
    else if (!strcasecmp(end, "MB")) unit = 1e6;
    else if (!strcasecmp(end, "GB")) unit = 1e9;
    else if (!strcasecmp(end, "TB")) unit = 1e12;
    else if (*end) return -1;
    return x * unit > 1e15 ? -1 : (int64_t)(x * unit);
}

// File offset of our tensor at `dst`: the file is tensor-major.
static int64_t llmc_file_offset(const GPTConfig* c, int64_t dst, int esize) {
    const ParamLayout p = gpt_layout(c);
    const int layer = dst < p.embed_count ? 0 : (int)((dst - p.embed_count) / p.layer_stride);
    for (int k = 0; k < 16; k++) {
        const int is_layer = llmc_file_order[k][0], t = llmc_file_order[k][1];
        const int64_t at = is_layer ? gpt_layer_offset(&p, layer) + p.layer_offset[t] : p.embed_offset[t];
        if (at == dst && (is_layer == 1) == (dst >= p.embed_count))
            return llmc_tensor_offset(c, &p, k, layer, esize);
    }
    return -1;
}

// Copies src to dir/name; 0 with err on failure.
static int copy_file(const std::string& src, const std::string& dir, const char* name, char* err,
                     size_t errlen) {
    std::string text;
    return read_whole_file(src.c_str(), 64 << 20, &text, err, errlen) &&
           write_small_file(dir, name, text, err, errlen);
}

// The staging directory, while ours to remove (error, SIGINT, SIGTERM).
static char g_staging[4200];

// Removes g_staging and its files, from signal handlers too (opendir: a risk).
static void remove_staging(void) {
    if (!g_staging[0]) return;
    if (DIR* d = opendir(g_staging)) {
        char path[4500];
        while (struct dirent* e = readdir(d)) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(path, sizeof path, "%s/%s", g_staging, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(g_staging);
    g_staging[0] = 0;
}

// die(), once the staging directory exists: it goes first
#define fail(...)         \
    do {                  \
        remove_staging(); \
        die(__VA_ARGS__); \
    } while (0)
static void on_stop_signal(int sig) {
    remove_staging();
    signal(sig, SIG_DFL);
    raise(sig);
}

// In each staging directory while it is one: the mark of ours that a later export may remove.
static const char kStagingMarker[] = "EXPORT_HF_STAGING";

// Removes <dest>.tmp-<pid> directories holding our marker whose export is gone (killed); says so.
static void remove_stale_staging(const std::string& dest) {
    const size_t slash = dest.rfind('/');
    const std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : dest.substr(0, slash);
    const std::string prefix = (slash == std::string::npos ? dest : dest.substr(slash + 1)) + ".tmp-";
    DIR* d = opendir(parent.c_str());
    if (!d) return;
    std::vector<std::string> stale;
    while (struct dirent* e = readdir(d)) {
        const char* n = e->d_name;
        if (strncmp(n, prefix.c_str(), prefix.size()) != 0) continue;
        char* end = NULL;
        const long pid = strtol(n + prefix.size(), &end, 10);
        const std::string path = parent + "/" + n;
        if (!isdigit((unsigned char)n[prefix.size()]) || *end || pid <= 0 ||
            !file_exists(path + "/" + kStagingMarker))
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;  // its export may still run
        stale.push_back(path);
    }
    closedir(d);
    for (const std::string& path : stale) {
        DIR* s = opendir(path.c_str());
        while (struct dirent* e = s ? readdir(s) : NULL)
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlink((path + "/" + e->d_name).c_str());
        if (s) closedir(s);
        if (rmdir(path.c_str()) == 0)
            printf("removed %s: the staging directory of an export that did not finish\n", path.c_str());
        else
            fprintf(stderr, "warning: cannot remove %s, a stale staging directory: %s\n", path.c_str(),
                    strerror(errno));
    }
}

// This executable's directory (the repo root), for dev/data/gpt2.
static std::string exe_dir(void) {
    char buf[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return ".";
    buf[n] = 0;
    char* slash = strrchr(buf, '/');
    if (slash) *slash = 0;
    return buf;
}

int main(int argc, char** argv) {
    const char *in = NULL, *out = NULL, *tokenizer_dir = NULL;
    int bf16 = 0;
    int64_t max_shard = 5000000000LL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) die("flag %s needs a value (run ./export_hf -h for the flags)", argv[i]);
        const char *f = argv[i], *v = argv[++i];
        if (!strcmp(f, "-i")) in = v;
        else if (!strcmp(f, "-o")) out = v;
        else if (!strcmp(f, "-t")) tokenizer_dir = v;
        else if (!strcmp(f, "-d")) {
            if (strcmp(v, "fp32") && strcmp(v, "bf16")) die("-d %s: want fp32 or bf16", v);
            bf16 = !strcmp(v, "bf16");
        } else if (!strcmp(f, "-s")) {
            if ((max_shard = parse_size(v)) < 0)
                die("-s %s: want a size such as 5GB, 500MB or 2000000000", v);
        } else die("unknown flag %s (run ./export_hf -h for the flags)", f);
    }
    if (!in || !out) die("-i <model> and -o <dir> are both needed (run ./export_hf -h for the flags)");
    char err[4352];

    // the input
    std::string model = in;
    GPTConfig cfg;
    LlamaConfig llama;  // num_layers 0: a GPT-2
    memset(&llama, 0, sizeof llama);
    char found[300];  // a run directory (train_gpt -o) without a DONE_<step> marker: no checkpoint
    if (is_dir(in) && latest_checkpoint(in) < 0 && !file_exists(std::string(in) + "/config.json") &&
        (dir_run_files(in, found, sizeof found) > 0 || file_exists(std::string(in) + "/LOCK"))) {
        if (dir_latest_step(in, "model_", ".bin", INT64_MAX) >= 0)
            die("%s has no complete checkpoint: no DONE_<step> marker vouches for its files (%s; a save that "
                "did not finish). -i %s/model_<step>.bin exports such a file as it is",
                in, found, in);
        die("%s has no checkpoint: the run stopped before its first save (it holds %s). A run with -o saves "
            "when it ends and every -n N steps: remove %s (or choose another -o), train again, then "
            "export_hf "
            "-i on that folder",
            in, found[0] ? found : "only its LOCK", in);
    }
    if (is_dir(in) && latest_checkpoint(in) >= 0) {
        char mp[4200], sp[4200];
        int64_t header[ST_HEADER_FIELDS];
        const int64_t step = pick_checkpoint(in, mp, sp, sizeof mp, &cfg, header, &llama);
        if (step < 0) die("%s: no complete checkpoint", in);
        model = mp;
        printf("run directory %s: the checkpoint of step %lld (%s)\n", in, (long long)step, mp);
    }
    const bool from_file = !hf_is_checkpoint(model.c_str());
    if (from_file && llama_is_model_file(model.c_str())) {
        if (!llama_read_header(model.c_str(), &llama, err, sizeof err)) die("%s", err);
    } else if (!from_file) {
        const int hf = llama_hf_read_config(model.c_str(), &llama, err, sizeof err);
        if (hf == 0) die("%s", err);
        if (hf == 2) memset(&llama, 0, sizeof llama);
    }
    const bool is_llama = llama.num_layers > 0;
    if (!is_llama && !gpt_read_header(model.c_str(), &cfg, err, sizeof err)) die("%s", err);

    // -t against the run's shards: a chat run keeps their tokenizer (data_tokenizer.bin, checkpoint.h); -t
    // must be that tokenizer, or the export pairs the weights with ids they were not trained on. -i a run's
    // directory, or one of its model files.
    const std::string run_dir = is_dir(in) ? std::string(in) : parent_dir(in);
    const std::string data_tok = run_dir + "/data_tokenizer.bin";
    const std::string tok_json = tokenizer_dir ? std::string(tokenizer_dir) + "/tokenizer.json" : "";
    if (tokenizer_dir && file_exists(data_tok) && file_exists(tok_json)) {
        const int V = is_llama ? llama.vocab_size : cfg.vocab_size;
        Tokenizer t;
        if (!tokenizer_init_hf(&t, tok_json.c_str(), err, sizeof err)) die("-t %s: %s", tokenizer_dir, err);
        DataLoader run_data;  // the run's shards, as far as their tokenizer goes
        memset(&run_data, 0, sizeof run_data);
        FILE* d = fopen(data_tok.c_str(), "rb");
        const bool ok =
            d && fread(run_data.tokenizer, 1, sizeof run_data.tokenizer, d) == sizeof run_data.tokenizer;
        if (d) fclose(d);
        if (!ok) die("cannot read %s", data_tok.c_str());
        run_data.kind = DL_CHAT;
        run_data.vocab = run_data.tokenizer[CHAT_H_VOCAB];
        run_data.pattern = (char*)data_tok.c_str();
        const int fits = dataloader_check_model(&run_data, V, in, t.token_table, t.vocab_size,
                                                tok_json.c_str(), err, sizeof err);
        tokenizer_free(&t);
        if (!fits)
            die("-t %s is not the tokenizer of the shards the run in %s trained on: %s", tokenizer_dir,
                run_dir.c_str(), err);
    }

    // -t's ids against the model's embedding rows: one past them fails in transformers (an IndexError)
    if (tokenizer_dir) {
        const int64_t n = hf_tokenizer_id_count(tokenizer_dir, err, sizeof err);
        const int V = is_llama ? llama.vocab_size : cfg.vocab_size;
        if (n < 0) die("-t %s: %s", tokenizer_dir, err);
        if (n > V)
            die("-t %s: its tokenizer has %lld ids, the model %d embedding rows: ids from %d on would index "
                "past "
                "them; -t the tokenizer the model was trained with",
                tokenizer_dir, (long long)n, V, V);
    }

    // the output: new or empty, so no stale files
    if (DIR* d = opendir(out)) {
        int entries = 0;
        while (struct dirent* e = readdir(d)) entries += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
        closedir(d);
        if (entries) die("-o %s exists and is not empty: choose a new directory", out);
    } else if (file_exists(out)) die("-o %s exists and is not a directory", out);
    std::string dest = out;  // without trailing slashes: the staging directory is its sibling
    while (dest.size() > 1 && dest.back() == '/') dest.pop_back();

    // check memory for the largest tensor first
    const std::vector<HfTensorPlace> places =
        is_llama ? llama_hf_write_places(&llama) : hf_tensor_places(&cfg);
    int64_t largest = 0;
    for (const HfTensorPlace& pl : places) largest = std::max(largest, pl.count);
    const int64_t need = largest * (4 + 4 + 2) + ((int64_t)64 << 20);  // it, its transpose or lm_head, bf16
    const int64_t avail = host_available_bytes();
    if (avail >= 0 && need > avail)
        die("%s: its largest tensor needs %s of host memory to convert, %s is available", model.c_str(),
            SizeText((double)need).s, SizeText((double)avail).s);
    HfCheckpoint ck;  // a Hugging Face input
    FILE* f = NULL;
    int esize = 4;
    if (from_file) {
        f = fopen(model.c_str(), "rb");
        int header[256];
        if (!f || fread(header, 4, 256, f) != 256) die("cannot read %s", model.c_str());
        esize = !is_llama && header[1] == MODEL_VERSION_BF16 ? 2 : 4;
    } else if (!hf_open(model.c_str(), &ck, err, sizeof err) ||
               !(is_llama ? llama_hf_check_tensors(&ck, &llama, err, sizeof err)
                          : hf_check_tensors(&ck, &cfg, err, sizeof err))) {
        die("%s", err);
    }

    // the ids generation starts with and stops at: the input's and -t's configs, else their tokenizer. An
    // input whose tokenizer.json is not -t's: -t's alone (the input's ids name other tokens in -t's
    // tokenizer)
    std::vector<std::string> id_dirs;
    if (!from_file && !(tokenizer_dir && files_differ(ck.dir + "/tokenizer.json",
                                                      std::string(tokenizer_dir) + "/tokenizer.json")))
        id_dirs.push_back(ck.dir);
    if (tokenizer_dir) id_dirs.push_back(tokenizer_dir);
    HfSpecialIds ids;
    std::string ids_from;
    if (!hf_special_ids(id_dirs, is_llama ? llama.vocab_size : cfg.vocab_size, &ids, &ids_from, err,
                        sizeof err))
        die("%s", err);
    if (!is_llama && ids.bos < 0 && ids.gen_eos.empty()) {  // GPT-2's <|endoftext|>, as hf_write_config's
        ids.bos = cfg.vocab_size > 50256 ? 50256 : cfg.vocab_size - 1;
        ids.eos = ids.gen_eos = {ids.bos};
        ids_from = "GPT-2's <|endoftext|>";
    }

    // staging directory, after the input loads; its parents stay
    const size_t slash = dest.rfind('/');
    const std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : dest.substr(0, slash);
    if (slash != std::string::npos && slash > 0 && !make_dirs(parent.c_str(), err, sizeof err))
        die("%s", err);
    const HfShardPlan plan = hf_plan_shards(places, bf16 ? 2 : 4, max_shard);
    remove_stale_staging(dest);
    // the weights, the tokenizer files it copies (-t's, else GPT-2's) and 1 MiB for the configs (it asked a
    // fixed 64 MB more: a 0.8 MB model "needed 64.77 MiB")
    int64_t disk_need = plan.total_bytes + ((int64_t)1 << 20);
    const std::string tok_from = tokenizer_dir                          ? std::string(tokenizer_dir)
                                 : !is_llama && cfg.vocab_size >= 50257 ? exe_dir() + "/dev/data/gpt2"
                                                                        : "";  // none copied
    for (const char* name : tokenizer_dir ? kTokenizerFiles : kGpt2TokenizerFiles) {
        struct stat st;
        if (!tok_from.empty() && stat((tok_from + "/" + name).c_str(), &st) == 0 && S_ISREG(st.st_mode))
            disk_need += st.st_size;
    }
    struct statvfs fs;
    if (statvfs(parent.c_str(), &fs) == 0 && (int64_t)fs.f_bavail * (int64_t)fs.f_frsize < disk_need)
        die("-o %s: the export needs %s on disk, %s is free there", out, SizeText((double)disk_need).s,
            SizeText((double)fs.f_bavail * (double)fs.f_frsize).s);
    const std::string staging = dest + ".tmp-" + std::to_string((long long)getpid());
    if (staging.size() >= sizeof g_staging) die("-o %s: path too long", out);
    if (mkdir(staging.c_str(), 0755) != 0) die("cannot create %s: %s", staging.c_str(), strerror(errno));
    snprintf(g_staging, sizeof g_staging, "%s", staging.c_str());
    signal(SIGINT, on_stop_signal);
    signal(SIGTERM, on_stop_signal);
    if (!write_small_file(staging, kStagingMarker, std::to_string((long long)getpid()) + "\n", err,
                          sizeof err))
        fail("%s", err);
    std::vector<uint16_t> half;
    std::vector<float> tmp;
    auto read_tensor = [&](size_t k, float* dst) {
        const HfTensorPlace& pl = places[k];
        if (is_llama && !from_file) {  // a tensor of theirs, in our orientation already
            const StTensor& t = ck.tensors[ck.by_name.at(pl.name)];
            return st_read_f32(&ck, t, dst, half, err, sizeof err);
        }
        if (!from_file) return hf_read_place(&ck, &cfg, pl, dst, &tmp, &half, err, sizeof err);
        // Llama file: our layout after the header. llm.c file: tensor-major.
        const int64_t off = is_llama ? 256 * 4 + 4 * pl.dst : llmc_file_offset(&cfg, pl.dst, esize);
        void* buf = dst;
        if (esize == 2) {
            half.resize((size_t)pl.count);
            buf = half.data();
        }
        if (off < 0 || fseeko(f, off, SEEK_SET) != 0 ||
            (int64_t)fread(buf, (size_t)esize, (size_t)pl.count, f) != pl.count) {
            snprintf(err, sizeof err, "%s: short read of %s", model.c_str(), pl.name.c_str());
            return 0;
        }
        if (esize == 2)
            for (int64_t i = 0; i < pl.count; i++) dst[i] = bf16_to_float(half[(size_t)i]);
        return 1;
    };
    // a NaN or infinity refused, as the trainers refuse to load them (a run that diverged): not exported
    auto read = [&](size_t k, float* dst) {
        if (!read_tensor(k, dst)) return 0;
        const int64_t bad = first_non_finite(dst, places[k].count);
        if (bad < 0) return 1;
        snprintf(err, sizeof err, "%s: %s holds %s at element %lld: not exported (a run that diverged?)",
                 model.c_str(), places[k].name.c_str(), isnan(dst[bad]) ? "a NaN" : "an infinity",
                 (long long)bad);
        return 0;
    };
    const int written = is_llama
                            ? hf_write_places(staging, places, "", bf16, max_shard, read, err, sizeof err) &&
                                  llama_hf_write_config(staging, &llama, bf16, err, sizeof err, &ids)
                            : hf_write_safetensors(staging, &cfg, bf16, max_shard, read, err, sizeof err) &&
                                  hf_write_config(staging, &cfg, bf16, err, sizeof err, &ids);
    if (!written) fail("%s", err);
    if (f) fclose(f);

    // tokenizer: -t's files, else GPT-2's (the shipped data's) for GPT-2
    const std::string tok = exe_dir() + "/dev/data/gpt2";
    const char* tokenizer_note = "GPT-2 tokenizer files";
    std::string copied;
    if (tokenizer_dir) {
        for (const char* name : kTokenizerFiles) {
            const std::string src = std::string(tokenizer_dir) + "/" + name;
            if (!file_exists(src)) continue;
            if (!copy_file(src, staging, name, err, sizeof err)) fail("%s", err);
            copied += copied.empty() ? name : std::string(", ") + name;
        }
        if (copied.empty())
            fail("-t %s holds no tokenizer file (tokenizer.json, vocab.json + merges.txt, tokenizer.model)",
                 tokenizer_dir);
        copied = "tokenizer files from " + std::string(tokenizer_dir) + " (" + copied + ")";
        tokenizer_note = copied.c_str();
    } else if (is_llama) tokenizer_note = "no tokenizer files (-t DIR copies them)";
    else if (cfg.vocab_size < 50257)
        tokenizer_note = "no tokenizer files (V < 50257, the GPT-2 tokenizer's ids would not fit)";
    else if (!file_exists(tok + "/encoder.json") || !file_exists(tok + "/vocab.bpe")) {
        fprintf(stderr, "warning: %s/encoder.json or vocab.bpe not found: no tokenizer files written\n",
                tok.c_str());
        tokenizer_note = "no tokenizer files";
    } else {
        const std::string special =
            "{\n  \"bos_token\": \"<|endoftext|>\",\n  \"eos_token\": \"<|endoftext|>\",\n"
            "  \"unk_token\": \"<|endoftext|>\"\n}\n";
        const std::string config =
            "{\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n  \"model_max_length\": " +
            std::to_string(cfg.max_seq_len) +
            ",\n  \"add_prefix_space\": false,\n"
            "  \"bos_token\": \"<|endoftext|>\",\n  \"eos_token\": \"<|endoftext|>\",\n"
            "  \"unk_token\": \"<|endoftext|>\"\n}\n";
        if (!copy_file(tok + "/encoder.json", staging, "vocab.json", err, sizeof err) ||
            !copy_file(tok + "/vocab.bpe", staging, "merges.txt", err, sizeof err) ||
            !write_small_file(staging, "special_tokens_map.json", special, err, sizeof err) ||
            !write_small_file(staging, "tokenizer_config.json", config, err, sizeof err))
            fail("%s", err);
    }
    // complete: into place (rename replaces an empty directory), durably
    if (unlink((staging + "/" + kStagingMarker).c_str()) != 0)
        fail("cannot remove %s/%s: %s", staging.c_str(), kStagingMarker, strerror(errno));
    if (!fsync_dir(staging.c_str(), err, sizeof err)) fail("%s", err);
    if (rename(staging.c_str(), dest.c_str()) != 0)
        fail("cannot rename %s to %s: %s", staging.c_str(), dest.c_str(), strerror(errno));
    g_staging[0] = 0;
    if (!fsync_dir(slash == std::string::npos ? "."
                   : slash == 0               ? "/"
                                              : dest.substr(0, slash).c_str(),
                   err, sizeof err))
        fail("%s", err);
    char shape[160];
    if (is_llama)
        snprintf(shape, sizeof shape, "%s L%d C%d NH%d NKV%d I%d maxT%d V%d",
                 llama.qkv_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM", llama.num_layers,
                 llama.hidden_size, llama.num_heads, llama.num_kv_heads, llama.intermediate_size,
                 llama.max_seq_len, llama.vocab_size);
    else
        snprintf(shape, sizeof shape, "GPT2LMHeadModel L%d C%d NH%d maxT%d V%d", cfg.num_layers, cfg.channels,
                 cfg.num_heads, cfg.max_seq_len, cfg.vocab_size);
    printf("wrote %s: %s, %zu tensors, %s, %.1f MB in %zu file%s; %s\n", out, shape, places.size(),
           bf16 ? "bf16" : "fp32", plan.total_bytes / 1e6, plan.shards.size(),
           plan.shards.size() > 1 ? "s" : "", tokenizer_note);
    if (!ids.gen_eos.empty())
        printf("generation stops at eos_token_id %s (from %s)\n", hf_ids_text(ids.gen_eos).c_str(),
               ids_from.c_str());
    else printf("no eos_token_id known: generation runs to max_new_tokens (-t DIR gives the tokenizer's)\n");
    return 0;
}
