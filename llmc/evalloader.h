// llmc/evalloader.h — multiple-choice evaluation (HellaSwag, -h): llm.c's eval files, read whole and checked,
// cut into batches of 4 rows an example, and scored from the per-token losses of a forward pass.
// An example is a context and 4 completions; row c of its 4 holds the context then completion c. The
// completion's tokens are the row's targets (every other target is -1: no loss there); the completion whose
// mean loss is lowest is the model's answer (the first on a tie), as llm.c's evalloader_stat_losses.
// The file: 256 int32 header slots {magic, version, examples, longest example's bytes}, then each example as
// a run of ids: <delimiter> <bytes of the example> <index> <label> <completions (4)> <n> <context: n ids>,
// then <n> <completion: n ids> four times. GPT-2's (llm.c's dev/data/hellaswag.py): magic 20240522,
// version 1, uint16 ids, delimiter 65535. Vocabularies past 65535 ids (Llama 3, Qwen2.5): this project's
// uint32 variant, magic 20240802, version 7, delimiter 2^32 - 1. dev/data/hellaswag.py makes either.
// Not here: the forward passes (the trainers), the data download (the user's: docs/usage.md).
#pragma once
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <algorithm>
#include <string>
#include <vector>

#define EVAL_MAGIC_U16   20240522
#define EVAL_VERSION_U16 1
#define EVAL_MAGIC_U32   20240802
#define EVAL_VERSION_U32 7
#define EVAL_CHOICES     4                   // completions an example: rows of a batch it takes
#define EVAL_MAX_BYTES   ((int64_t)1 << 30)  // HellaSwag's validation set is ~2 MB: larger is not an eval file

struct EvalExample {
    int label;                                  // the right completion, 0..3
    std::vector<int> context;                   // at least one id
    std::vector<int> completion[EVAL_CHOICES];  // at least one id each
};
struct EvalSet {
    std::string path;
    std::vector<EvalExample> examples;
    int longest;    // the most ids a row needs: context + its longest completion
    int max_id;     // the largest id in the file
    int width;      // bytes an id: 2 (llm.c's GPT-2 files) or 4
    uint64_t hash;  // FNV-1a of the file's bytes (several nodes compare it)
};

// Reads and checks the whole file (HellaSwag's validation set: 10,042 examples, ~2 MB). 0 with a one-line
// err naming the file and the first fault.
static inline int evalset_read(const char* path, EvalSet* set, char* err, size_t errlen) {
    set->path = path;
    set->examples.clear();
    set->longest = 0;
    set->max_id = 0;
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "cannot open the eval file %.600s: %s", path, strerror(errno));
        return 0;
    }
    if (!S_ISREG(st.st_mode) || (int64_t)st.st_size > EVAL_MAX_BYTES) {
        snprintf(err, errlen, "eval file %.600s: %s", path,
                 S_ISREG(st.st_mode) ? "larger than 1 GiB: not an eval file" : "not a regular file");
        return 0;
    }
    FILE* f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open the eval file %.600s: %s", path, strerror(errno));
        return 0;
    }
    std::vector<unsigned char> bytes((size_t)st.st_size);
    const size_t got = bytes.empty() ? 0 : fread(bytes.data(), 1, bytes.size(), f);
    const bool read_error = ferror(f) != 0 || got != bytes.size();
    fclose(f);
    if (read_error) {
        snprintf(err, errlen, "cannot read the eval file %.600s (it changed while read?)", path);
        return 0;
    }
    set->hash = 1469598103934665603ull;
    for (unsigned char b : bytes) set->hash = (set->hash ^ b) * 1099511628211ull;
    int32_t header[256];
    if (bytes.size() < sizeof header) {
        snprintf(err, errlen, "eval file %.600s: %zu bytes, shorter than its 1024-byte header", path,
                 bytes.size());
        return 0;
    }
    memcpy(header, bytes.data(), sizeof header);
    int width = 0;
    if (header[0] == EVAL_MAGIC_U16 && header[1] == EVAL_VERSION_U16) width = 2;
    if (header[0] == EVAL_MAGIC_U32 && header[1] == EVAL_VERSION_U32) width = 4;
    if (!width) {
        snprintf(err, errlen,
                 "eval file %.600s: magic %d version %d, not an eval file (%d/%d: uint16 ids, %d/%d: uint32; "
                 "dev/data/hellaswag.py makes them)",
                 path, header[0], header[1], EVAL_MAGIC_U16, EVAL_VERSION_U16, EVAL_MAGIC_U32,
                 EVAL_VERSION_U32);
        return 0;
    }
    set->width = width;
    const int64_t count = header[2];
    const uint32_t delimiter = width == 2 ? 0xFFFFu : 0xFFFFFFFFu;
    const int64_t words = (int64_t)(bytes.size() - sizeof header) / width;
    if ((int64_t)(bytes.size() - sizeof header) % width != 0 || count < 1) {
        snprintf(err, errlen, "eval file %.600s: %lld examples in %zu bytes: truncated or not an eval file",
                 path, (long long)count, bytes.size());
        return 0;
    }
    const unsigned char* body = bytes.data() + sizeof header;
    auto word = [&](int64_t i) -> uint32_t {
        if (width == 2) {
            uint16_t v;
            memcpy(&v, body + i * 2, 2);
            return v;
        }
        uint32_t v;
        memcpy(&v, body + i * 4, 4);
        return v;
    };
    int64_t at = 0;
    for (int64_t e = 0; e < count; e++) {
        EvalExample ex;
        auto fail = [&](const char* what) {
            snprintf(err, errlen, "eval file %.600s: example %lld of %lld: %s", path, (long long)e,
                     (long long)count, what);
            return 0;
        };
        if (at + 6 > words) return fail("the file ends inside it (truncated)");
        const int64_t start = at;
        if (word(at) != delimiter) return fail("no example delimiter where it should start");
        const int64_t ex_words = word(at + 1) / (uint32_t)width;
        if (word(at + 1) % (uint32_t)width != 0 || ex_words < 6 || start + ex_words > words)
            return fail("its byte count is not whole ids, or runs past the file's end");
        if ((int64_t)word(at + 2) != e) return fail("its index is not its place in the file");
        ex.label = (int)word(at + 3);
        if (word(at + 3) >= EVAL_CHOICES) return fail("its label is not 0..3");
        if (word(at + 4) != EVAL_CHOICES) return fail("it does not have 4 completions");
        at += 5;
        for (int part = 0; part <= EVAL_CHOICES; part++) {  // the context, then the completions
            if (at >= start + ex_words) return fail("its parts run past its byte count");
            const int64_t n = word(at++);
            if (n < 1 || at + n > start + ex_words)
                return fail("a part is empty or runs past its byte count");
            std::vector<int>& ids = part == 0 ? ex.context : ex.completion[part - 1];
            for (int64_t i = 0; i < n; i++) {
                const uint32_t id = word(at + i);
                if (id == delimiter || id > 0x7FFFFFFFu) return fail("an id is the delimiter or past 2^31");
                ids.push_back((int)id);
                if ((int)id > set->max_id) set->max_id = (int)id;
            }
            at += n;
        }
        if (at != start + ex_words) return fail("its byte count is not the size of its parts");
        for (int c = 0; c < EVAL_CHOICES; c++) {
            const int row = (int)(ex.context.size() + ex.completion[c].size());
            if (row > set->longest) set->longest = row;
        }
        set->examples.push_back(std::move(ex));
    }
    if (at != words) {
        snprintf(err, errlen,
                 "eval file %.600s: %lld bytes after its %lld examples (the header's count is wrong)", path,
                 (long long)((words - at) * width), (long long)count);
        return 0;
    }
    return 1;
}

// The model can score the set: every row fits T, every id is below V, a batch holds an example (B >= 4).
static inline int evalset_check_fit(const EvalSet* set, int B, int T, int V, char* err, size_t errlen) {
    if (B < EVAL_CHOICES) {
        snprintf(err, errlen, "-h: an example takes 4 rows of a batch: -b %d is too small (-b 4 or more)", B);
        return 0;
    }
    if (set->longest > T) {
        snprintf(err, errlen, "-h: eval file %.600s has rows of %d tokens, longer than -t %d",
                 set->path.c_str(), set->longest, T);
        return 0;
    }
    if (set->width == 2 && V > 65536) {  // hellaswag.py writes uint32 ids for such a tokenizer
        snprintf(
            err, errlen,
            "-h: eval file %.600s holds uint16 ids, made with a tokenizer of at most 65535 ids, and the "
            "model's "
            "vocabulary is %d: make it with the model's tokenizer (dev/data/hellaswag.py --tokenizer DIR)",
            set->path.c_str(), V);
        return 0;
    }
    if (set->max_id >= V) {
        snprintf(err, errlen,
                 "-h: eval file %.600s holds id %d, past the model's vocabulary of %d (made with another "
                 "tokenizer?)",
                 set->path.c_str(), set->max_id, V);
        return 0;
    }
    return 1;
}

// Batch of examples [first, first + B / 4): rows of B x T inputs and targets (-1: no loss there), labels[i]
// of example first + i. Rows past the set's end: inputs 0, no targets. Returns the examples it holds.
static inline int evalset_batch(const EvalSet* set, int64_t first, int B, int T, int* inputs, int* targets,
                                int* labels) {
    const int64_t fit = B / EVAL_CHOICES, n = std::min<int64_t>(fit, (int64_t)set->examples.size() - first);
    std::fill(inputs, inputs + (int64_t)B * T, 0);
    std::fill(targets, targets + (int64_t)B * T, -1);
    for (int64_t i = 0; i < n; i++) {
        const EvalExample& ex = set->examples[(size_t)(first + i)];
        labels[i] = ex.label;
        const int64_t ctx = (int64_t)ex.context.size();
        for (int c = 0; c < EVAL_CHOICES; c++) {
            int* in = inputs + (i * EVAL_CHOICES + c) * T;
            int* tg = targets + (i * EVAL_CHOICES + c) * T;
            std::copy(ex.context.begin(), ex.context.end(), in);
            const std::vector<int>& comp = ex.completion[c];
            for (size_t k = 0; k < comp.size(); k++) {
                in[ctx + (int64_t)k] = comp[k];
                tg[ctx + (int64_t)k - 1] = comp[k];  // the token before predicts it
            }
        }
    }
    return (int)std::max<int64_t>(n, 0);
}

// How many of a batch's n examples the model answers right: losses (B x T) per token, from a forward pass
// over evalset_batch's rows; a completion's score is its targets' mean loss.
static inline int evalset_correct(const float* losses, const int* targets, const int* labels, int n, int T) {
    int correct = 0;
    for (int i = 0; i < n; i++) {
        int best = 0;
        double best_loss = 0.0;
        for (int c = 0; c < EVAL_CHOICES; c++) {
            const int64_t row = (int64_t)(i * EVAL_CHOICES + c) * T;
            double sum = 0.0;
            int count = 0;
            for (int t = 0; t < T; t++)
                if (targets[row + t] >= 0) sum += losses[row + t], count++;
            const double mean = count ? sum / count : 0.0;
            if (c == 0 || mean < best_loss) best = c, best_loss = mean;
        }
        correct += best == labels[i];
    }
    return correct;
}
