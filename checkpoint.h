// checkpoint.h — train_gpt's checkpoints on disk: DIR/model_STEP.bin (an llm.c model file, the fp32 master
// weights), DIR/state_STEP.bin (AdamW m and v, the step and the updates applied, the data position, the run's
// hyperparameters) and DIR/DONE_STEP, written last, after both files and their names are fsynced, so a
// checkpoint without DONE is never resumed from, even after a power loss. With -nk N only the newest N stay (and
// those at multiples of -nm): a 5B model's checkpoint is 60 GB, a 175B one's 2 TB. Here: the state file's
// format, saving, checking a file before anything large is allocated, choosing the checkpoint a resume starts
// from, and checking the resumed run's flags against it. Not here: getting the state off the GPU and back
// (train_gpt.cu's save_checkpoint / load_state), the llm.c model file format (model.h). Host code only.
#pragma once
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "dataloader.h"
#include "model.h"
#include "train_common.h"

#define STATE_MAGIC 20241122
#define STATE_VERSION 2  // 2: the run's hyperparameters in the header; version 1 files are refused

// The 16 int64 of a state file's header. Floats are stored bit-exact (their 32 bits), so a resumed run can tell
// exactly whether it uses the same values.
enum {
    ST_MAGIC, ST_VERSION, ST_STEP, ST_PARAMS, ST_DATA_STATE_BYTES,  // all that version 1 had
    ST_TOTAL_STEPS, ST_STEP_TOKENS, ST_B, ST_T, ST_LR, ST_WARMUP, ST_FINAL_LR_FRAC, ST_WEIGHT_DECAY, ST_GRAD_CLIP,
    ST_ADAM_T,  // updates applied (< ST_STEP after -sl / -sg skipped some); 0 in files written before it: = ST_STEP
    ST_LR_SCHEDULE,  // -k (LR_COSINE ...); 0 = cosine in files written before it, which is what they ran
    ST_HEADER_SLOTS = 16
};
static_assert(ST_LR_SCHEDULE < ST_HEADER_SLOTS, "the state header is full");
static int64_t float_bits(float x) { uint32_t u; memcpy(&u, &x, 4); return (int64_t)u; }
static float bits_float(int64_t b) { const uint32_t u = (uint32_t)b; float x; memcpy(&x, &u, 4); return x; }

static int write_all(FILE* f, const void* p, int64_t bytes) { return (int64_t)fwrite(p, 1, (size_t)bytes, f) == bytes; }
static int read_all(FILE* f, void* p, int64_t bytes) { return (int64_t)fread(p, 1, (size_t)bytes, f) == bytes; }

// Writes the checkpoint of `step` (adam_t updates applied) into dir: the model file, the state file (m, v, the
// data position and a's hyperparameters for a run of B x T micro-batches), then DONE; then removes what -nk / -nm
// no longer keep. Exits with one error line on any failure: the checkpoints already there stay valid.
static void checkpoint_save(const char* dir, int64_t step, int64_t adam_t, const GPTConfig* cfg, const float* master,
                            const float* m, const float* v, const TrainArgs* a, int B, int T,
                            const DataLoaderState* data_state) {
    const int64_t total = gpt_layout(cfg).total;
    char model[4200], path[4200], tmp[4300], done[4200], err[4352];  // -o is at most 4000 characters
    if (snprintf(model, sizeof model, "%s/model_%08lld.bin", dir, (long long)step) >= (int)sizeof model)
        die("checkpoint path too long in %.200s...", dir);
    snprintf(path, sizeof path, "%s/state_%08lld.bin", dir, (long long)step);  // as long as model
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    snprintf(done, sizeof done, "%s/DONE_%08lld", dir, (long long)step);
    // a DONE of this step from an earlier pass over it (a run resumed from an older checkpoint) must not vouch
    // for the files about to be rewritten: it goes first, durably
    if (unlink(done) == 0) {
        if (!fsync_dir(dir, err, sizeof err)) die("%s", err);
    } else if (errno != ENOENT) {
        die("cannot remove the old marker %s: %s", done, strerror(errno));
    }
    if (!gpt_save_params(model, cfg, master, err, sizeof err)) die("%s", err);
    FILE* f = fopen(tmp, "wb");
    if (!f) die("cannot create %s: %s", tmp, strerror(errno));
    int64_t header[ST_HEADER_SLOTS] = {0};
    header[ST_MAGIC] = STATE_MAGIC;
    header[ST_VERSION] = STATE_VERSION;
    header[ST_STEP] = step;
    header[ST_PARAMS] = total;
    header[ST_DATA_STATE_BYTES] = (int64_t)sizeof(DataLoaderState);
    header[ST_TOTAL_STEPS] = a->max_steps;  // main resolves -x -1 (one epoch) to the number of steps first
    header[ST_STEP_TOKENS] = a->total_batch_tokens ? a->total_batch_tokens : (int64_t)B * T;
    header[ST_B] = B;
    header[ST_T] = T;
    header[ST_LR] = float_bits(a->lr);
    header[ST_WARMUP] = a->warmup_steps;
    header[ST_FINAL_LR_FRAC] = float_bits(a->final_lr_frac);
    header[ST_WEIGHT_DECAY] = float_bits(a->weight_decay);
    header[ST_GRAD_CLIP] = float_bits(a->grad_clip);
    header[ST_ADAM_T] = adam_t;
    header[ST_LR_SCHEDULE] = a->lr_schedule;
    errno = 0;
    int ok = write_all(f, header, sizeof header) && write_all(f, data_state, sizeof *data_state) &&
             write_all(f, m, total * 4) && write_all(f, v, total * 4);
    int why;
    if (!finish_atomic_write(f, ok, tmp, path, &why)) die("failed writing %s: %s", path, why ? strerror(why) : "short write");
    // both files and their new names on disk before the marker that vouches for them exists
    if (!fsync_dir(dir, err, sizeof err)) die("%s", err);
    f = fopen(done, "w");
    if (!f || fflush(f) != 0 || fsync(fileno(f)) != 0 || fclose(f) != 0) die("cannot write %s", done);
    if (!fsync_dir(dir, err, sizeof err)) die("%s", err);
    printf("saved checkpoint step %lld to %s\n", (long long)step, dir);
    static const CheckpointFile files[] = {{"DONE_", ""}, {"model_", ".bin"}, {"state_", ".bin"}};
    if (!prune_checkpoints(dir, step, a->keep_checkpoints, a->major_checkpoint_every, files, 3, err, sizeof err))
        die("%s", err);
}

// Latest step with a DONE marker in dir (exactly DONE_<digits>, see checkpoint_name_step), or -1.
static int64_t latest_checkpoint(const char* dir) { return dir_latest_step(dir, "DONE_", "", INT64_MAX); }

// Checks an optimizer state file against a model of `total` parameters without reading the bulk of it (so a
// bad file is refused before any GPU or large host allocation) and reads its header. 0 with a one-line err.
static int state_file_check(const char* path, int64_t total, int64_t header[ST_HEADER_SLOTS], char* err, size_t errlen) {
    FILE* f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "cannot open optimizer state %.400s: %.60s", path, strerror(errno)); return 0; }
    memset(header, 0, ST_HEADER_SLOTS * sizeof(int64_t));
    const int got = read_all(f, header, ST_HEADER_SLOTS * sizeof(int64_t));
    const int64_t size = fseeko(f, 0, SEEK_END) == 0 ? (int64_t)ftello(f) : -1;
    fclose(f);
    const int64_t data_bytes = (int64_t)sizeof(DataLoaderState);
    if (!got || header[ST_MAGIC] != STATE_MAGIC) {
        snprintf(err, errlen, "optimizer state %.400s: bad header (not a state file, or shorter than its header)", path);
        return 0;
    }
    if (header[ST_VERSION] == 1) {
        snprintf(err, errlen, "optimizer state %.400s: version 1 (an older train_gpt's, without the run's "
                 "hyperparameters) is not supported: this build reads version %d", path, STATE_VERSION);
        return 0;
    }
    if (header[ST_VERSION] != STATE_VERSION) {
        snprintf(err, errlen, "optimizer state %.400s: bad header (version %lld, want %d)", path,
                 (long long)header[ST_VERSION], STATE_VERSION);
        return 0;
    }
    if (header[ST_DATA_STATE_BYTES] != data_bytes) {
        snprintf(err, errlen, "optimizer state %.400s: its data-loader position is %lld bytes, this build's is %lld "
                 "(written by another build of train_gpt)", path, (long long)header[ST_DATA_STATE_BYTES], (long long)data_bytes);
        return 0;
    }
    if (header[ST_PARAMS] != total) {
        snprintf(err, errlen, "optimizer state %.400s: holds %lld parameters, the model has %lld", path,
                 (long long)header[ST_PARAMS], (long long)total);
        return 0;
    }
    if (header[ST_STEP] < 1) {
        snprintf(err, errlen, "optimizer state %.400s: bad step %lld", path, (long long)header[ST_STEP]);
        return 0;
    }
    if (header[ST_ADAM_T] < 0 || header[ST_ADAM_T] > header[ST_STEP]) {
        snprintf(err, errlen, "optimizer state %.400s: bad update count %lld for step %lld", path,
                 (long long)header[ST_ADAM_T], (long long)header[ST_STEP]);
        return 0;
    }
    if (header[ST_LR_SCHEDULE] < 0 || header[ST_LR_SCHEDULE] >= LR_SCHEDULES) {
        snprintf(err, errlen, "optimizer state %.400s: bad lr schedule %lld", path, (long long)header[ST_LR_SCHEDULE]);
        return 0;
    }
    const int64_t want = ST_HEADER_SLOTS * 8 + data_bytes + total * 8;
    if (size != want) {
        snprintf(err, errlen, "optimizer state %.400s: %lld bytes, expected %lld (truncated or too long)", path,
                 (long long)size, (long long)want);
        return 0;
    }
    return 1;
}

// state_file_check for callers that cannot go on without the file: exits on a problem, else returns its step.
static int64_t check_state_file(const char* path, int64_t total) {
    int64_t header[ST_HEADER_SLOTS];
    char err[4352];
    if (!state_file_check(path, total, header, err, sizeof err)) die("%s", err);
    return header[ST_STEP];
}

// The checkpoint a resume starts from: the newest DONE_N in dir whose model file header reads and whose state
// file passes state_file_check for step N. A damaged one is skipped with a warning and the next older one tried
// (a marker can outlive its files: disk errors, hand edits). Fills the paths, cfg and the state header; -1 when
// dir holds no DONE marker. Dies when it holds some but none is valid: starting over would silently drop the
// run the user asked to resume.
static int64_t pick_checkpoint(const char* dir, char* model, char* state, size_t pathlen, GPTConfig* cfg,
                               int64_t header[ST_HEADER_SLOTS]) {
    char err[4352], newest_err[4352] = "";
    int skipped = 0;
    for (int64_t step = latest_checkpoint(dir); step >= 0; step = dir_latest_step(dir, "DONE_", "", step)) {
        snprintf(model, pathlen, "%s/model_%08lld.bin", dir, (long long)step);
        snprintf(state, pathlen, "%s/state_%08lld.bin", dir, (long long)step);
        int ok = gpt_read_header(model, cfg, err, sizeof err) &&
                 state_file_check(state, gpt_layout(cfg).total, header, err, sizeof err);
        if (ok && header[ST_STEP] != step) {
            snprintf(err, sizeof err, "optimizer state %.400s does not hold step %lld (it holds %lld)", state,
                     (long long)step, (long long)header[ST_STEP]);
            ok = 0;
        }
        if (ok) return step;
        fprintf(stderr, "warning: resume: skipping the checkpoint of step %lld: %s\n", (long long)step, err);
        if (!skipped++) snprintf(newest_err, sizeof newest_err, "%s", err);
    }
    if (skipped)
        die("resume: no valid checkpoint in %s (%d with a DONE marker, all skipped; the newest: %s)", dir, skipped, newest_err);
    return -1;
}

// A resumed run's flags against the hyperparameters its checkpoint was written with. B, T and the tokens per
// step must stay: the data position counts B*T batches, and a step's gradient is the mean over its micro-batches.
// The others may change (raising -x extends a run), with one warning each, since the run is then not the same.
static void check_resume_args(const int64_t* h, const TrainArgs* a, int total_steps, int64_t step_tokens, const char* dir) {
    if (h[ST_B] != a->B || h[ST_T] != a->T || h[ST_STEP_TOKENS] != step_tokens)
        die("resume: -b %d -t %d, %lld tokens per step (-d) differ from the checkpoint in %s (-b %lld -t %lld, %lld "
            "tokens per step): keep them to resume, or choose another -o", a->B, a->T, (long long)step_tokens, dir,
            (long long)h[ST_B], (long long)h[ST_T], (long long)h[ST_STEP_TOKENS]);
    const char* sched = "the lr schedule changes from here";
    if (h[ST_TOTAL_STEPS] != total_steps)
        fprintf(stderr, "warning: resume: -x %d differs from the checkpoint's %lld: %s\n", total_steps,
                (long long)h[ST_TOTAL_STEPS], sched);
    if (h[ST_WARMUP] != a->warmup_steps)
        fprintf(stderr, "warning: resume: -u %d differs from the checkpoint's %lld: %s\n", a->warmup_steps,
                (long long)h[ST_WARMUP], sched);
    if (h[ST_LR_SCHEDULE] != a->lr_schedule)
        fprintf(stderr, "warning: resume: -k %s differs from the checkpoint's %s: %s\n", lr_schedule_name(a->lr_schedule),
                lr_schedule_name(h[ST_LR_SCHEDULE]), sched);
    const struct { const char* flag; float now; int slot; const char* effect; } f[] = {
        {"-l", a->lr, ST_LR, sched},
        {"-q", a->final_lr_frac, ST_FINAL_LR_FRAC, sched},
        {"-c", a->weight_decay, ST_WEIGHT_DECAY, "the weight decay changes from here"},
        {"-gc", a->grad_clip, ST_GRAD_CLIP, "the gradient clip changes from here"}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (float_bits(f[i].now) != h[f[i].slot])
            fprintf(stderr, "warning: resume: %s %g differs from the checkpoint's %g: %s\n", f[i].flag, f[i].now,
                    bits_float(h[f[i].slot]), f[i].effect);
}

// Reads a state file (after state_file_check): m and v (total floats each), the data position, the step and the
// updates applied. Exits on a read failure.
static void state_file_read(const char* path, int64_t total, float* m, float* v, DataLoaderState* data_state,
                            int64_t* step, int64_t* adam_t) {
    *step = check_state_file(path, total);
    FILE* f = fopen(path, "rb");
    int64_t header[ST_HEADER_SLOTS];
    if (!f || !read_all(f, header, sizeof header) || !read_all(f, data_state, sizeof *data_state) ||
        !read_all(f, m, total * 4) || !read_all(f, v, total * 4))
        die("optimizer state %s: read failed", path);
    fclose(f);
    *adam_t = header[ST_ADAM_T] > 0 ? header[ST_ADAM_T] : *step;
}
