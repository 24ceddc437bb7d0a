// train_common.h — what the CPU trainer (train_gpt_cpu.cpp) and the streaming GPU trainer (train_gpt.cu)
// share: command-line flags (llm.c's train_gpt2.cu flags where they overlap), model specs ("d12",
// "L4:C128:NH4", "7b", ...), the learning-rate schedule, the global-norm clip factor, AdamW over one
// parameter block tensor by tensor (weight decay on matrices only), the main.log logger, and sampling.
// It does no model math (gpt2_cpu.h / train_gpt.cu) and no AdamW arithmetic itself (cpu_adam.cpp).
// Host C++17 only, no intrinsics and no OpenMP, so nvcc can compile it as part of a .cu file.
#pragma once
#include <dirent.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cpu_adam.h"
#include "model.h"
#include "tokenizer.h"

// ----------------------------------------------------------------------------
// Reporting

// Prints "error: ..." and exits 1: every user-facing failure of a trainer ends here, never in a crash. One
// line whatever the message quotes: control characters (a newline in a flag or a file name) print as \xNN.
static inline void die(const char* fmt, ...) {
    char msg[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "error: ");
    for (const unsigned char* c = (const unsigned char*)msg; *c; c++) {
        if (*c < 0x20 || *c == 0x7f) fprintf(stderr, "\\x%02x", *c);
        else fputc(*c, stderr);
    }
    fprintf(stderr, "\n");
    // _exit, not exit: the GPU trainer's optimizer thread may be inside a CUDA call, and exit() would tear
    // down the CUDA runtime under it. Nothing is lost: files are written synchronously, buffers flushed here.
    fflush(NULL);
    _exit(1);
}

// One "| key | value |" line of a trainer's config table, and the rule around it.
static inline void table_row(const char* key, const char* fmt, ...) {
    char value[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof value, fmt, ap);
    va_end(ap);
    printf("| %-22s | %-56s |\n", key, value);
}
static inline void table_rule(void) {
    printf("+------------------------+----------------------------------------------------------+\n");
}

// The one rule both trainers stop by, checked after a step's backward pass and before its update, so a bad
// update is never applied and the last checkpoint stays the last good one. Diverged: a loss or gradient norm
// that is not finite; a mean loss over 10 x ln(V) (10x that of a uniform guess: the model gives the targets
// less than V^-10 on average; no run that still learns gets there, an exploding one passes it within a step
// or two while staying finite); or a norm over 1e10 (a GPU's fp32 sum of squares overflows at ~1.3e19, so past
// this the trainers could no longer agree on it). Returns 1 with why filled, else 0.
static inline int training_diverged(double loss, double norm, int V, char* why, size_t len) {
    const double loss_cap = 10.0 * log((double)V), norm_cap = 1e10;
    if (!isfinite(loss) || !isfinite(norm)) snprintf(why, len, "not finite");
    else if (loss > loss_cap) snprintf(why, len, "loss above %.1f = 10 x ln(V)", loss_cap);
    else if (norm > norm_cap) snprintf(why, len, "grad norm above %.0e", norm_cap);
    else return 0;
    return 1;
}

// The end of a diverged run: one error line with the step, its loss and norm, why (training_diverged), and the
// last checkpoint's step (saved_step; -1: none).
static inline void die_diverged(int step, double loss, double norm, const char* why, int64_t saved_step) {
    char last[96] = "";
    if (saved_step >= 0) snprintf(last, sizeof last, "; the last checkpoint in -o is of step %lld", (long long)saved_step);
    die("training diverged at step %d (loss %g, grad norm %g: %s); no update was applied%s", step, loss, norm, why, last);
}

// A duration as a person reads it: "850ms", "12.3s", "4m05s", "2h07m".
static inline void format_duration(double s, char* buf, size_t len) {
    if (s < 1.0) snprintf(buf, len, "%.0fms", s * 1e3);
    else if (s < 60.0) snprintf(buf, len, "%.1fs", s);
    else if (s < 3600.0) snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
}

// The progress at the end of a step line: time since the run's first step began, and the time to its last
// at the mean pace so far (validation and sampling included): " | 4m05s, eta 12m30s".
static inline void progress_text(double elapsed, int steps_done, int first_step, int total_steps, char* buf, size_t len) {
    char e[32], r[32];
    format_duration(elapsed, e, sizeof e);
    const int done = steps_done - first_step;
    format_duration(done > 0 ? elapsed / done * (total_steps - steps_done) : 0.0, r, sizeof r);
    snprintf(buf, len, " | %.20s, eta %.20s", e, r);
}

// Peak resident memory of this process so far (getrusage's maxrss), in bytes.
static inline int64_t peak_rss_bytes(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (int64_t)ru.ru_maxrss * 1024 : -1;
}

// ----------------------------------------------------------------------------
// Flags

#define OUTLIER_WINDOW 128  // -sl / -sg compare a step with this many steps before it

// -k: what the learning rate does after the warmup (llm.c's schedulers). The values are saved in checkpoints;
// cosine is 0 because state files written before -k had a schedule stored 0 there and ran cosine.
enum { LR_COSINE = 0, LR_LINEAR = 1, LR_CONSTANT = 2, LR_WSD = 3, LR_SCHEDULES };
static const char* const LR_SCHEDULE_NAMES[LR_SCHEDULES] = {"cosine", "linear", "constant", "wsd"};
static inline const char* lr_schedule_name(int64_t s) { return s >= 0 && s < LR_SCHEDULES ? LR_SCHEDULE_NAMES[s] : "unknown"; }

typedef struct {
    const char* train_data;      // -i  train shard pattern (glob)
    const char* val_data;        // -j  val shard pattern
    const char* model;           // -e  llm.c model file, Hugging Face checkpoint, or a spec (parse_model_spec)
    const char* output_dir;      // -o  log + checkpoint directory, NULL: none
    int B;                       // -b  micro-batch size
    int T;                       // -t  sequence length
    int64_t total_batch_tokens;  // -d  tokens per optimizer step; 0 = B*T (no accumulation)
    float lr;                    // -l  peak learning rate
    int warmup_steps;            // -u  linear warmup steps
    float final_lr_frac;         // -q  the decay ends at lr * final_lr_frac (1 = constant lr)
    int lr_schedule;             // -k  LR_COSINE, LR_LINEAR, LR_CONSTANT or LR_WSD (after the warmup)
    float weight_decay;          // -c  AdamW decoupled weight decay, 2-D matrices only
    float grad_clip;             // -gc global gradient-norm clip; 0 = off (llm.c has no flag: 1.0 always)
    int max_steps;               // -x  optimizer steps; -1 = one epoch of the train data
    int val_every;               // -v  validation every N steps (and at the end); 0 = never
    int val_max_batches;         // -m  batches per validation; 0 = the whole val set
    int sample_every;            // -s  generate a sample every N steps; 0 = only at the end
    int gen_tokens;              // -g  tokens per generated sample; 0 = no sampling; -1 = the default (sample_tokens)
    int checkpoint_every;        // -n  checkpoint every N steps (needs -o); 0 = never
    int keep_checkpoints;        // -nk keep only the newest N checkpoints (llm.c's flag); 0 = keep all
    int major_checkpoint_every;  // -nm checkpoints at multiples of N steps are kept whatever -nk says; 0 = none
    int resume;                  // -y  1 = resume from the latest checkpoint in -o
    int overfit_single_batch;    // -a  1 = every step trains on the train data's first step of tokens again
                                 //     (llm.c's debugging aid: a model that learns drives that loss toward 0)
    float skip_loss_z;           // -sl skip the update of a step whose loss is this many standard deviations
                                 //     above the mean of the last OUTLIER_WINDOW steps' (llm.c's flag); 0 = off
    float skip_grad_z;           // -sg the same for the gradient norm; 0 = off
} TrainArgs;

// llm.c's defaults (a trainer overrides what differs for it before parsing argv).
static inline void train_args_defaults(TrainArgs* a) {
    memset(a, 0, sizeof *a);
    a->train_data = "dev/data/tinyshakespeare/tiny_shakespeare_train.bin";
    a->val_data = "dev/data/tinyshakespeare/tiny_shakespeare_val.bin";
    a->model = "d12";
    a->output_dir = NULL;
    a->B = 4; a->T = 1024; a->total_batch_tokens = 0;
    a->lr = 3e-4f; a->warmup_steps = 0; a->final_lr_frac = 1.0f; a->lr_schedule = LR_COSINE;
    a->weight_decay = 0.0f; a->grad_clip = 1.0f;
    a->max_steps = -1; a->val_every = 20; a->val_max_batches = 20; a->sample_every = 0; a->gen_tokens = -1;
    a->checkpoint_every = 0; a->keep_checkpoints = 0; a->major_checkpoint_every = 0; a->resume = 0;
    a->overfit_single_batch = 0;
}

// Prints the flags with the defaults in `d` (NULL: train_args_defaults).
static inline void train_usage(FILE* f, const TrainArgs* d = NULL) {
    TrainArgs def;
    if (!d) { train_args_defaults(&def); d = &def; }
    fprintf(f,
            "flags (every flag takes a value: -X value):\n"
            "  -i <glob>   train data shards (default %s)\n"
            "  -j <glob>   val data shards (default %s)\n"
            "  -e <model>  llm.c model file (fp32 or bf16), Hugging Face GPT-2 checkpoint (a directory as\n"
            "              save_pretrained writes it, or its .safetensors / index .json), or a spec (default %s):\n"
            "              dN (d12 d24 d36 d48 are GPT-2; other N: L=N C=64N NH=N), L<n>:C<n>:NH<n>[:T<n>][:V<n>],\n"
            "              124m 350m 774m 1558m 1.3b 2.7b 5b 7b 13b 30b 70b 100b 175b (any spec may add :T<n> :V<n>)\n"
            "  -o <dir>    output dir for main.log and checkpoints (default none)\n"
            "  -b <int>    micro-batch size B (default %d)\n"
            "  -t <int>    sequence length T (default %d)\n"
            "  -d <int>    tokens per step, a multiple of B*T: gradient accumulation (default B*T)\n"
            "  -l <float>  peak learning rate (default %g)\n"
            "  -u <int>    warmup steps (default %d)\n"
            "  -q <float>  final lr fraction, where the decay ends (default %g)\n"
            "  -k <name>   lr schedule after the warmup: cosine, linear (decay to -q x lr over the run),\n"
            "              constant, wsd (constant, then 1 - sqrt decay over the last 20%% of steps) (default %s)\n"
            "  -c <float>  weight decay, matrices only (default %g)\n"
            "  -gc <float> gradient global-norm clip, 0 = off (default %g)\n"
            "  -x <int>    max steps, -1 = one epoch (default %d)\n"
            "  -v <int>    val loss every N steps, 0 = never (default %d)\n"
            "  -m <int>    val batches, 0 = all (default %d)\n"
            "  -s <int>    sample every N steps, 0 = only at the end (default %d)\n"
            "  -g <int>    generated tokens per sample, at most T - 1, 0 = none (default 64, or T - 1 if less)\n"
            "  -n <int>    checkpoint every N steps, 0 = never (default %d)\n"
            "  -nk <int>   keep only the newest N checkpoints, removing older ones once a new one is complete,\n"
            "              0 = keep all (default %d)\n"
            "  -nm <int>   checkpoints at multiples of N steps are never removed by -nk, 0 = none (default %d)\n"
            "  -y <0|1>    resume from the latest checkpoint in -o (default %d)\n"
            "  -a <0|1>    overfit one batch: every step trains on the first -d tokens again (default %d)\n"
            "  -sl <float> skip the update of a step whose loss is more than this many standard deviations\n"
            "              above the mean of the last %d steps' (a loss spike), 0 = off (default %g)\n"
            "  -sg <float> the same for the gradient norm, 0 = off (default %g)\n"
            "  -h          this help\n",
            d->train_data, d->val_data, d->model, d->B, d->T, d->lr, d->warmup_steps, d->final_lr_frac,
            lr_schedule_name(d->lr_schedule), d->weight_decay, d->grad_clip, d->max_steps, d->val_every, d->val_max_batches, d->sample_every,
            d->checkpoint_every, d->keep_checkpoints, d->major_checkpoint_every, d->resume,
            d->overfit_single_batch, OUTLIER_WINDOW, d->skip_loss_z, d->skip_grad_z);
}

// Whole-string integer / float parse with a range check; 0 and a one-line err on failure.
static inline int parse_int_in(const char* flag, const char* s, int64_t lo, int64_t hi, int64_t* out, char* err,
                               size_t errlen) {
    char* end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE) {
        snprintf(err, errlen, "flag %s: '%s' is not an integer", flag, s);
        return 0;
    }
    if (v < lo || v > hi) {
        snprintf(err, errlen, "flag %s: %lld out of range [%lld, %lld]", flag, v, (long long)lo, (long long)hi);
        return 0;
    }
    *out = v;
    return 1;
}
static inline int parse_float_in(const char* flag, const char* s, double lo, double hi, float* out, char* err,
                                 size_t errlen) {
    char* end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno == ERANGE || !isfinite(v)) {
        snprintf(err, errlen, "flag %s: '%s' is not a finite number", flag, s);
        return 0;
    }
    if (v < lo || v > hi) {
        snprintf(err, errlen, "flag %s: %.9g out of range [%.9g, %.9g]", flag, v, lo, hi);
        return 0;
    }
    *out = (float)v;
    return 1;
}

// Applies one "-X value" pair. Returns 1 if consumed, 0 on a bad value (err says why), -1 if the flag is
// not one of ours (a trainer tries its own flags first or after, then reports unknown flags itself).
static inline int parse_train_arg(TrainArgs* a, const char* flag, const char* value, char* err, size_t errlen) {
    const int64_t IMAX = 2147483647;
    int64_t i = 0;
    int ok = 1;
    if (strcmp(flag, "-nk") == 0 || strcmp(flag, "-nm") == 0) {  // llm.c's two-letter checkpoint flags
        if (!value) { snprintf(err, errlen, "flag %s needs a value", flag); return 0; }
        ok = parse_int_in(flag, value, 0, IMAX, &i, err, errlen);
        (flag[2] == 'k' ? a->keep_checkpoints : a->major_checkpoint_every) = (int)i;
        return ok;
    }
    if (strcmp(flag, "-gc") == 0) {
        if (!value) { snprintf(err, errlen, "flag %s needs a value", flag); return 0; }
        return parse_float_in(flag, value, 0.0, 1e30, &a->grad_clip, err, errlen);
    }
    if (strcmp(flag, "-sl") == 0 || strcmp(flag, "-sg") == 0) {  // llm.c's outlier thresholds (z-scores)
        if (!value) { snprintf(err, errlen, "flag %s needs a value", flag); return 0; }
        return parse_float_in(flag, value, 0.0, 1e30, flag[2] == 'l' ? &a->skip_loss_z : &a->skip_grad_z, err, errlen);
    }
    if (flag[0] != '-' || flag[1] == '\0' || flag[2] != '\0') return -1;
    if (!value) { snprintf(err, errlen, "flag %s needs a value", flag); return 0; }
    switch (flag[1]) {
        case 'i': a->train_data = value; break;
        case 'j': a->val_data = value; break;
        case 'e': a->model = value; break;
        case 'o':  // "" would pass the -n/-y check and then fail (or worse) at the first write
            if (!*value) { snprintf(err, errlen, "flag -o: the output directory must not be empty"); return 0; }
            a->output_dir = value;
            break;
        case 'b': ok = parse_int_in(flag, value, 1, 1 << 20, &i, err, errlen); a->B = (int)i; break;
        case 't': ok = parse_int_in(flag, value, 1, 1 << 20, &i, err, errlen); a->T = (int)i; break;
        case 'd': ok = parse_int_in(flag, value, 0, (int64_t)1 << 40, &i, err, errlen); a->total_batch_tokens = i; break;
        case 'l': ok = parse_float_in(flag, value, 0.0, 10.0, &a->lr, err, errlen); break;
        case 'u': ok = parse_int_in(flag, value, 0, IMAX, &i, err, errlen); a->warmup_steps = (int)i; break;
        case 'q': ok = parse_float_in(flag, value, 0.0, 1.0, &a->final_lr_frac, err, errlen); break;
        case 'c': ok = parse_float_in(flag, value, 0.0, 10.0, &a->weight_decay, err, errlen); break;
        case 'k':
            for (i = 0; i < LR_SCHEDULES && strcmp(value, LR_SCHEDULE_NAMES[i]) != 0; i++) {}
            if (i == LR_SCHEDULES) {  // an earlier train_gpt took the clip here: say where it went
                snprintf(err, errlen, "flag -k: '%.40s' is not an lr schedule (cosine, linear, constant or wsd)%s", value,
                         isdigit((unsigned char)value[0]) || value[0] == '.' || value[0] == '-' ? "; the gradient clip is -gc" : "");
                return 0;
            }
            a->lr_schedule = (int)i;
            break;
        case 'x': ok = parse_int_in(flag, value, -1, IMAX, &i, err, errlen); a->max_steps = (int)i; break;
        case 'v': ok = parse_int_in(flag, value, 0, IMAX, &i, err, errlen); a->val_every = (int)i; break;
        case 'm': ok = parse_int_in(flag, value, 0, IMAX, &i, err, errlen); a->val_max_batches = (int)i; break;
        case 's': ok = parse_int_in(flag, value, 0, IMAX, &i, err, errlen); a->sample_every = (int)i; break;
        case 'g': ok = parse_int_in(flag, value, 0, 1 << 20, &i, err, errlen); a->gen_tokens = (int)i; break;
        case 'n': ok = parse_int_in(flag, value, 0, IMAX, &i, err, errlen); a->checkpoint_every = (int)i; break;
        case 'y': ok = parse_int_in(flag, value, 0, 1, &i, err, errlen); a->resume = (int)i; break;
        case 'a': ok = parse_int_in(flag, value, 0, 1, &i, err, errlen); a->overfit_single_batch = (int)i; break;
        default: return -1;
    }
    return ok;
}

// Checks what single flags cannot: -d against B*T, -n/-y need -o. Call after all flags are parsed.
static inline int train_args_check(const TrainArgs* a, char* err, size_t errlen) {
    const int64_t bt = (int64_t)a->B * a->T;
    if (a->total_batch_tokens != 0 && a->total_batch_tokens % bt != 0) {
        snprintf(err, errlen, "-d %lld is not a multiple of B*T = %d*%d = %lld", (long long)a->total_batch_tokens, a->B,
                 a->T, (long long)bt);
        return 0;
    }
    if (a->total_batch_tokens / bt > (1 << 20)) {
        snprintf(err, errlen, "-d %lld asks for more than 2^20 micro-batches per step", (long long)a->total_batch_tokens);
        return 0;
    }
    // a sample is one sequence of T positions after <|endoftext|>: both trainers generate exactly -g tokens
    if (a->gen_tokens >= 0 && a->gen_tokens > a->T - 1) {
        snprintf(err, errlen, "-g %d: a sample is generated within one sequence of -t %d positions after "
                 "<|endoftext|>, so at most %d tokens: lower -g or raise -t", a->gen_tokens, a->T, a->T - 1);
        return 0;
    }
    if ((a->checkpoint_every > 0 || a->resume) && !a->output_dir) {
        snprintf(err, errlen, "-n and -y need an output directory (-o)");
        return 0;
    }
    if ((a->keep_checkpoints > 0 || a->major_checkpoint_every > 0) && a->checkpoint_every == 0) {
        snprintf(err, errlen, "-nk and -nm choose which checkpoints to keep: they need checkpoints (-n N and -o)");
        return 0;
    }
    // every file name under -o ("/model_00000000.bin.tmp" is the longest) must fit PATH_MAX and our 4200-byte
    // path buffers, so a long -o is refused here, not by a truncated name after hours of training
    if (a->output_dir && strlen(a->output_dir) > 4000) {
        snprintf(err, errlen, "flag -o: the output directory path is too long (%zu characters, at most 4000)",
                 strlen(a->output_dir));
        return 0;
    }
    return 1;
}

// Tokens per generated sample: -g, or by default 64 (llm.c's) or T - 1 if less.
static inline int sample_tokens(const TrainArgs* a) {
    return a->gen_tokens >= 0 ? a->gen_tokens : (a->T - 1 < 64 ? a->T - 1 : 64);
}

// Micro-batches per optimizer step (-d / (B*T)).
static inline int grad_accum_steps(const TrainArgs* a) {
    return a->total_batch_tokens == 0 ? 1 : (int)(a->total_batch_tokens / ((int64_t)a->B * a->T));
}

// What an llm.c train_gpt2.cu flag that neither trainer takes did there, and why it is not here: appended to the
// unknown-flag error, so a script written for llm.c fails with a reason instead of a bare "unknown flag".
static inline const char* llmc_flag_note(const char* flag) {
    static const struct { const char* flag; const char* note; } notes[] = {
        {"-r", "llm.c's recompute setting: here every layer's forward is recomputed in the backward pass (-K keeps some)"},
        {"-z", "llm.c's ZeRO stage, for several GPUs: this trainer runs on one GPU and keeps the optimizer on the host"},
        {"-w", "llm.c's master-weights switch: here the master weights are always fp32"},
        {"-f", "llm.c's TF32 switch: here the GEMMs are bf16 with fp32 accumulation"},
        {"-ge", "llm.c's GELU fusion: see -G (train_gpt)"},
        {"-lg", "llm.c's GPU logging interval: not supported"},
        {"-pn", "llm.c's multi-process setting: this trainer runs on one GPU"},
        {"-pr", "llm.c's multi-process setting: this trainer runs on one GPU"},
        {"-pg", "llm.c's multi-process setting: this trainer runs on one GPU"},
        {"-pm", "llm.c's multi-process setting: this trainer runs on one GPU"},
        {"-ps", "llm.c's multi-process setting: this trainer runs on one GPU"},
        {"-pp", "llm.c's multi-process setting: this trainer runs on one GPU"},
        {"-pi", "llm.c's multi-process setting: this trainer runs on one GPU"},
        {"-pf", "llm.c's multi-process setting: this trainer runs on one GPU"},
    };
    for (size_t i = 0; i < sizeof notes / sizeof notes[0]; i++)
        if (strcmp(flag, notes[i].flag) == 0) return notes[i].note;
    return NULL;
}
// llm.c's "-h 1" turns on its HellaSwag evaluation; here -h alone is the help. A value after it is refused, so a
// script that asks for the evaluation does not get the help text and a zero exit instead.
static inline int help_flag(int argc, char** argv, int i, char* err, size_t errlen) {
    if (strcmp(argv[i], "-h") != 0 && strcmp(argv[i], "--help") != 0) return 0;
    if (i + 1 < argc && argv[i + 1][0] != '-') {
        snprintf(err, errlen, "flag %s takes no value (llm.c's -h %.20s, its HellaSwag evaluation, is not supported here)",
                 argv[i], argv[i + 1]);
        return -1;
    }
    return 1;
}
static inline void unknown_flag_error(const char* flag, char* err, size_t errlen) {
    const char* note = llmc_flag_note(flag);
    snprintf(err, errlen, "unknown flag %.100s%s%s", flag, note ? ": " : "", note ? note : "");
}

// Parses argv[1..] with only the shared flags (the CPU trainer; the GPU trainer runs its own loop over
// parse_train_arg). Returns 1 ok, 2 when -h was given, 0 on any error with err set.
static inline int parse_train_argv(int argc, char** argv, TrainArgs* a, char* err, size_t errlen) {
    for (int i = 1; i < argc; i += 2) {
        const int help = help_flag(argc, argv, i, err, errlen);
        if (help) return help > 0 ? 2 : 0;
        if (i + 1 >= argc) { snprintf(err, errlen, "flag %s needs a value", argv[i]); return 0; }
        int r = parse_train_arg(a, argv[i], argv[i + 1], err, errlen);
        if (r < 0) { unknown_flag_error(argv[i], err, errlen); return 0; }
        if (r == 0) return 0;
    }
    return train_args_check(a, err, errlen);
}

// ----------------------------------------------------------------------------
// Model specs

typedef struct { const char* name; int L, C, NH; } ModelPreset;
static const ModelPreset model_presets[] = {
    {"124m", 12, 768, 12},  {"350m", 24, 1024, 16}, {"774m", 36, 1280, 20},  {"1558m", 48, 1600, 25},
    {"1.3b", 24, 2048, 16}, {"2.7b", 32, 2560, 32}, {"5b", 24, 4096, 32},    {"7b", 32, 4096, 32},
    {"13b", 40, 5120, 40},  {"30b", 48, 7168, 56},  {"70b", 86, 8192, 64},   {"100b", 100, 9216, 72},
    {"175b", 96, 12288, 96}};

// Reads "<key><digits>" (e.g. "NH12") into *v if the token starts with key; 1 on a match.
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

// Turns a model spec into a config. Returns 1 for a valid spec, 2 when `spec` is not a spec at all (the
// caller treats it as an llm.c model file path), 0 for a malformed or invalid spec (err says why).
// Grammar: BASE[:T<n>][:V<n>] where BASE is dN, a preset name (case-insensitive) or L<n>:C<n>:NH<n>.
// Defaults: maxT 1024, V 50257, Vp = V rounded up to a multiple of 128 (50304).
static inline int parse_model_spec(const char* spec, GPTConfig* cfg, char* err, size_t errlen) {
    if (!spec || !*spec || strchr(spec, '/') || strchr(spec, '\\')) return 2;
    const size_t n = strlen(spec);
    if (n >= 4 && strcmp(spec + n - 4, ".bin") == 0) return 2;
    int64_t L = -1, C = -1, NH = -1, T = 1024, V = 50257, x;
    const char* tok = spec;
    size_t len = strcspn(tok, ":");
    // the first token decides whether this is a spec
    int is_shape = spec_key_value(tok, len, "L", &x);
    if (is_shape) L = x;
    else if (len > 1 && (tok[0] == 'd' || tok[0] == 'D') && spec_key_value(tok + 1, len - 1, "", &x)) {
        if (x == 12) { L = 12; C = 768; NH = 12; }
        else if (x == 24) { L = 24; C = 1024; NH = 16; }
        else if (x == 36) { L = 36; C = 1280; NH = 20; }
        else if (x == 48) { L = 48; C = 1600; NH = 25; }
        else { L = x; C = 64 * x; NH = x; }
    } else {
        for (size_t i = 0; i < sizeof model_presets / sizeof model_presets[0]; i++) {
            const ModelPreset* p = &model_presets[i];
            if (strlen(p->name) == len && strncasecmp(p->name, tok, len) == 0) { L = p->L; C = p->C; NH = p->NH; }
        }
        if (L < 0) {
            // "Lx:C128" is a mistyped spec, not a file name, unless such a file really exists
            struct stat st;
            if (strchr(spec, ':') && stat(spec, &st) != 0) {
                snprintf(err, errlen, "model spec '%s': bad part '%.*s' (want dN, a preset such as 124m, or "
                         "L<n>:C<n>:NH<n>), and no model file has that name", spec, (int)len, tok);
                return 0;
            }
            return 2;
        }
    }
    // the remaining ":KEYvalue" tokens
    while (tok[len] == ':') {
        tok += len + 1;
        len = strcspn(tok, ":");
        if (spec_key_value(tok, len, "NH", &x)) NH = x;  // before "C"/"L": no key is a prefix of another
        else if (spec_key_value(tok, len, "C", &x)) C = x;
        else if (spec_key_value(tok, len, "L", &x)) L = x;
        else if (spec_key_value(tok, len, "T", &x)) T = x;
        else if (spec_key_value(tok, len, "V", &x)) V = x;
        else {
            snprintf(err, errlen, "model spec '%s': bad part '%.*s' (want L<n> C<n> NH<n> T<n> V<n>)", spec, (int)len, tok);
            return 0;
        }
    }
    if (L < 0 || C < 0 || NH < 0) {
        snprintf(err, errlen, "model spec '%s': a shape needs L<n>:C<n>:NH<n>", spec);
        return 0;
    }
    if (L > 100000 || C > 1000000 || NH > 100000 || T > 10000000 || V > 10000000) {
        snprintf(err, errlen, "model spec '%s': dimensions too large", spec);
        return 0;
    }
    cfg->num_layers = (int)L; cfg->channels = (int)C; cfg->num_heads = (int)NH;
    cfg->max_seq_len = (int)T; cfg->vocab_size = (int)V; cfg->padded_vocab_size = (int)round_up64(V, 128);
    char why[256];
    if (!gpt_config_check(cfg, why, sizeof why)) {
        snprintf(err, errlen, "model spec '%.64s': %.160s", spec, why);
        return 0;
    }
    return 1;
}

// ----------------------------------------------------------------------------
// Schedule and clip

// llm.c's schedules: linear warmup to lr over warmup_steps (step 0 gets lr/warmup), then
//   cosine:   cosine decay from lr to lr*final_lr_frac at the last step,
//   linear:   linear decay from lr to lr*final_lr_frac at the last step,
//   constant: lr (llm.c's has no warmup: use -u 0 for that),
//   wsd:      warmup-stable-decay (arXiv 2405.18392): lr until 80% of the steps, then 1 - sqrt(ratio) decay to
//             lr*final_lr_frac (llm.c's; -q 0 is what that paper does).
// step is 0-based; total_steps is the number of steps of the run. A step past total_steps (a resumed run that
// lowered -x) stays at the end of the decay.
static inline float learning_rate_at(const TrainArgs* a, int step, int total_steps) {
    if (step < a->warmup_steps) return a->lr * (float)(step + 1) / (float)a->warmup_steps;
    const float min_lr = a->lr * a->final_lr_frac;
    int decay_start = a->warmup_steps;
    if (a->lr_schedule == LR_CONSTANT) return a->lr;
    if (a->lr_schedule == LR_WSD) decay_start = (int)(0.8f * (float)total_steps);
    if (step < decay_start || total_steps <= decay_start) return a->lr;
    float ratio = (float)(step - decay_start) / (float)(total_steps - decay_start);
    if (ratio > 1.0f) ratio = 1.0f;
    float coeff;  // 1 at the start of the decay, 0 at its end
    if (a->lr_schedule == LR_LINEAR) coeff = 1.0f - ratio;
    else if (a->lr_schedule == LR_WSD) coeff = 1.0f - sqrtf(ratio);
    else coeff = 0.5f * (1.0f + cosf(3.14159265358979f * ratio));
    return min_lr + coeff * (a->lr - min_lr);
}

// Factor that scales the gradients so their global norm is at most clip (torch.nn.utils.clip_grad_norm_:
// clip / (norm + 1e-6), capped at 1). 1 when clip <= 0. norm must be finite: the trainers check first.
static inline float clip_scale(float norm, float clip) {
    if (clip <= 0.0f) return 1.0f;
    const float s = clip / (norm + 1e-6f);
    return s < 1.0f ? s : 1.0f;
}

// ----------------------------------------------------------------------------
// AdamW over one block, tensor by tensor: the block's matrices get args->weight_decay, all other tensors
// (biases, LayerNorm) none. params, grads, m, v (and bf16_out, which may be NULL) point at the START of the
// block (the embedding block at 0, layer l at gpt_layer_offset(p, l)); args->t etc. as in cpu_adam.h.

static inline void adamw_tensors_f32grad(int count, const int64_t* offset, const int64_t* size, const int* is_matrix,
                                         float* params, const float* grads, float* m, float* v, uint16_t* bf16_out,
                                         const AdamWArgs* args) {
    for (int i = 0; i < count; i++) {
        AdamWArgs a = *args;
        if (!is_matrix[i]) a.weight_decay = 0.0f;
        const int64_t o = offset[i];
        adamw_update_f32grad(params + o, grads + o, m + o, v + o, bf16_out ? bf16_out + o : NULL, size[i], &a);
    }
}
static inline void adamw_tensors_bf16grad(int count, const int64_t* offset, const int64_t* size, const int* is_matrix,
                                          float* params, const uint16_t* grads, float* m, float* v, uint16_t* bf16_out,
                                          const AdamWArgs* args) {
    for (int i = 0; i < count; i++) {
        AdamWArgs a = *args;
        if (!is_matrix[i]) a.weight_decay = 0.0f;
        const int64_t o = offset[i];
        adamw_update_bf16grad(params + o, grads + o, m + o, v + o, bf16_out ? bf16_out + o : NULL, size[i], &a);
    }
}

static inline void adamw_layer_block_f32grad(const ParamLayout* p, float* params, const float* grads, float* m, float* v,
                                             uint16_t* bf16_out, const AdamWArgs* args) {
    adamw_tensors_f32grad(NUM_LAYER_TENSORS, p->layer_offset, p->layer_size, layer_tensor_is_matrix, params, grads, m,
                          v, bf16_out, args);
}
static inline void adamw_layer_block_bf16grad(const ParamLayout* p, float* params, const uint16_t* grads, float* m,
                                              float* v, uint16_t* bf16_out, const AdamWArgs* args) {
    adamw_tensors_bf16grad(NUM_LAYER_TENSORS, p->layer_offset, p->layer_size, layer_tensor_is_matrix, params, grads, m,
                           v, bf16_out, args);
}
static inline void adamw_embed_block_f32grad(const ParamLayout* p, float* params, const float* grads, float* m, float* v,
                                             uint16_t* bf16_out, const AdamWArgs* args) {
    adamw_tensors_f32grad(NUM_EMBED_TENSORS, p->embed_offset, p->embed_size, embed_tensor_is_matrix, params, grads, m,
                          v, bf16_out, args);
}

// The whole model with fp32 gradients (the CPU trainer): the embedding block, then every layer block.
static inline void adamw_model_f32grad(const GPTConfig* c, const ParamLayout* p, float* params, const float* grads,
                                       float* m, float* v, const AdamWArgs* args) {
    adamw_embed_block_f32grad(p, params, grads, m, v, NULL, args);
    for (int l = 0; l < c->num_layers; l++) {
        const int64_t o = gpt_layer_offset(p, l);
        adamw_layer_block_f32grad(p, params + o, grads + o, m + o, v + o, NULL, args);
    }
}

// llm.c's AdamW constants (beta1, beta2, eps); the lr comes from the schedule, weight decay from -c.
#define ADAMW_BETA1 0.9f
#define ADAMW_BETA2 0.95f
#define ADAMW_EPS 1e-8f

// One optimizer step of a whole model whose fp32 grads hold the SUM of accum micro-batch mean-loss
// gradients (gpt2_cpu_backward accumulates): norm of the averaged gradient, clip (-gc), AdamW with
// grad_scale = clip factor / accum. t is the 1-based step. Returns that norm; when it is not finite
// nothing is updated and the caller reports the divergence.
static inline float grad_norm_f32grad(const ParamLayout* p, const float* grads, int accum) {
    return (float)(sqrt(sumsq_f32(grads, p->total)) / accum);
}
// The update with a norm from grad_norm_f32grad (finite).
static inline void adamw_apply_model_f32grad(const GPTConfig* c, const ParamLayout* p, float* params, const float* grads,
                                             float* m, float* v, int accum, float lr, const TrainArgs* a, int64_t t,
                                             float norm) {
    AdamWArgs args = {lr, ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS, a->weight_decay,
                      clip_scale(norm, a->grad_clip) / (float)accum, t};
    adamw_model_f32grad(c, p, params, grads, m, v, &args);
}
static inline float adamw_step_model_f32grad(const GPTConfig* c, const ParamLayout* p, float* params,
                                             const float* grads, float* m, float* v, int accum, float lr,
                                             const TrainArgs* a, int64_t t) {
    const float norm = grad_norm_f32grad(p, grads, accum);
    if (isfinite(norm)) adamw_apply_model_f32grad(c, p, params, grads, m, v, accum, lr, a, t, norm);
    return norm;
}

// ----------------------------------------------------------------------------
// Skipping outlier updates (-sl, -sg): a step whose loss or gradient norm jumps far above the recent ones (a
// data glitch, the start of a divergence) updates nothing; the next step starts from the same weights and
// AdamW state. Each value is compared with the OUTLIER_WINDOW values before it and then joins them (a lasting
// change of level thus becomes the norm within a window). The windows live only in memory: a resumed run
// refills them before it skips again.

typedef struct { double values[OUTLIER_WINDOW]; int count, next; } OutlierWindow;

// How many standard deviations x lies above the window's mean (NaN until the window is full); x then joins it.
static inline double outlier_z(OutlierWindow* w, double x) {
    double z = NAN;
    if (w->count == OUTLIER_WINDOW) {
        double mean = 0.0, var = 0.0;
        for (int i = 0; i < OUTLIER_WINDOW; i++) mean += w->values[i];
        mean /= OUTLIER_WINDOW;
        for (int i = 0; i < OUTLIER_WINDOW; i++) var += (w->values[i] - mean) * (w->values[i] - mean);
        const double sd = sqrt(var / OUTLIER_WINDOW);
        z = sd > 0.0 ? (x - mean) / sd : (x > mean ? INFINITY : 0.0);
    }
    w->values[w->next] = x;
    w->next = (w->next + 1) % OUTLIER_WINDOW;
    if (w->count < OUTLIER_WINDOW) w->count++;
    return z;
}

// Feeds a step's loss and gradient norm to their windows; 1 when -sl or -sg says to skip its update, with a
// few words on why in `why` (empty otherwise).
static inline int outlier_skip(const TrainArgs* a, OutlierWindow* losses, OutlierWindow* norms, double loss,
                               double norm, char* why, size_t whylen) {
    const double zl = outlier_z(losses, loss), zg = outlier_z(norms, norm);
    why[0] = '\0';
    if (a->skip_loss_z > 0.0f && zl > a->skip_loss_z)
        snprintf(why, whylen, "loss z-score %.2f > %g", zl, a->skip_loss_z);
    else if (a->skip_grad_z > 0.0f && zg > a->skip_grad_z)
        snprintf(why, whylen, "grad norm z-score %.2f > %g", zg, a->skip_grad_z);
    return why[0] != '\0';
}

// ----------------------------------------------------------------------------
// CPU cores

// The cores a cgroup's CPU quota allows ("QUOTA PERIOD" in microseconds, as cgroup v2's cpu.max holds; "max" or a
// negative quota: no limit), rounded up; -1 when unlimited or unreadable.
static inline int cgroup_quota_cores(const char* cpu_max) {
    long long quota = 0, period = 0;
    if (!cpu_max || sscanf(cpu_max, "%lld %lld", &quota, &period) != 2 || quota <= 0 || period <= 0) return -1;
    return (int)((quota + period - 1) / period);
}
// The cores this process can really use: its affinity mask (taskset, numactl, a container's cpuset), further
// limited by a cgroup CPU quota (docker --cpus) when there is one. A thread team larger than that would
// time-slice every parallel region on fewer cores than it has threads.
static inline int usable_cpu_cores(void) {
    cpu_set_t allowed;
    int cores = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    char text[64] = "";
    FILE* f = fopen("/sys/fs/cgroup/cpu.max", "r");  // cgroup v2
    if (f) {
        if (!fgets(text, sizeof text, f)) text[0] = '\0';
        fclose(f);
    } else {  // cgroup v1: two files
        long long quota = -1, period = -1;
        FILE* q = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r");
        FILE* pf = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r");
        if (q && pf && fscanf(q, "%lld", &quota) == 1 && fscanf(pf, "%lld", &period) == 1)
            snprintf(text, sizeof text, "%lld %lld", quota, period);
        if (q) fclose(q);
        if (pf) fclose(pf);
    }
    const int quota_cores = cgroup_quota_cores(text);
    if (quota_cores > 0 && quota_cores < cores) cores = quota_cores;
    return cores > 0 ? cores : 1;
}

// OpenMP waits that do not steal the cores they wait for. At the end of every parallel region libgomp's threads
// that are done spin (GOMP_SPINCOUNT iterations, 300000 by default when OMP_WAIT_POLICY is unset) before they
// sleep. On an idle machine that saves a wake-up; beside one other busy process on 2 cores it takes the time slice
// the thread still working needs, and a trainer of many short parallel regions ran 16x slower (issue 20: test_cli's
// CpuSkipsLossSpikes 2.7 s alone, 43 s beside a busy loop). libgomp reads its settings when
// it is loaded, before main, so setenv in main is too late: when the user set neither OMP_WAIT_POLICY nor
// GOMP_SPINCOUNT, main calls this first, and it runs the program again (same argv, /proc/self/exe) with a short
// spin, once (LLMC_OMP_REEXEC marks the second run). Short, not none (OMP_WAIT_POLICY=passive): 10000 iterations
// (1/30 of the default) still catch the next of a step's back-to-back regions without a futex wake-up when the
// gap is short, and waste little of a time slice beside a busy process. Measured (train_gpt_cpu defaults, 2 cores, other engineers'
// builds using ~1.3 cores throughout, median ms/step): default spin 1510, this 1225, passive 1195; with a busy loop
// added 1920 / 1269 / 1272 (the machine was never idle enough to time the idle case). If the exec fails (no
// /proc), the program goes on with libgomp's default.
#define OMP_SHORT_SPINCOUNT "10000"
static inline void omp_short_spin_reexec(char** argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || getenv("LLMC_OMP_REEXEC")) return;
    setenv("GOMP_SPINCOUNT", OMP_SHORT_SPINCOUNT, 1);
    setenv("LLMC_OMP_REEXEC", "1", 1);
    execv("/proc/self/exe", argv);
    unsetenv("GOMP_SPINCOUNT");  // still this process: its libgomp keeps the default, say so to children too
}

// ----------------------------------------------------------------------------
// Logger: DIR/main.log with lines "s:STEP trl:LOSS lr:LR norm:NORM" (train) and "s:STEP tel:LOSS" (val), as
// llm.c writes them.

// f: DIR/main.log open for appending (NULL: no log); lost: a write failed (warned once, then no more tries).
typedef struct { FILE* f; int lost; char path[4200]; } TrainLogger;

// Creates dir (and its parents) if missing; mode 0755. Returns 0 with err set on failure.
static inline int make_dirs(const char* dir, char* err, size_t errlen) {
    char path[4096];
    // the loop below starts at path + 1: an empty path would make it walk past the terminator
    if (!dir[0]) { snprintf(err, errlen, "output dir path is empty"); return 0; }
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        snprintf(err, errlen, "output dir path too long");
        return 0;
    }
    for (char* s = path + 1; ; s++) {
        if (*s == '/' || *s == '\0') {
            const char saved = *s;
            *s = '\0';
            if (mkdir(path, 0755) != 0 && errno != EEXIST) {
                snprintf(err, errlen, "cannot create directory %.160s: %.60s", path, strerror(errno));
                return 0;
            }
            *s = saved;
            if (saved == '\0') break;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "output path %.200s is not a directory", dir);
        return 0;
    }
    return 1;
}

// One run per output directory: makes dir and holds DIR/LOCK (flock) until the process ends, however it ends
// (the kernel releases it). Two runs in one directory would interleave main.log and overwrite each other's
// checkpoints; the second is refused instead, with the pid the first wrote into LOCK. flock is advisory and
// per file system: where it is not supported (some network file systems) the run goes on unchecked.
static inline int lock_output_dir(const char* dir, char* err, size_t errlen) {
    if (!make_dirs(dir, err, errlen)) return 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/LOCK", dir);
    const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) { snprintf(err, errlen, "cannot create %.200s: %.60s", path, strerror(errno)); return 0; }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int busy = errno == EWOULDBLOCK;
        char pid[24] = "";
        const ssize_t n = busy ? pread(fd, pid, sizeof pid - 1, 0) : 0;
        close(fd);
        if (!busy) return 1;  // no flock here (ENOLCK, EINVAL)
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        snprintf(err, errlen, "%.200s is in use by another run (pid %s holds its LOCK): let it finish, or choose another -o",
                 dir, pid[0] ? pid : "unknown");
        return 0;
    }
    char pid[24];
    const int len = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) {}  // the pid only helps the message
    return 1;  // fd stays open, and the lock held, for the rest of the run
}

// Makes the renames, creations and removals of files in dir durable (a power loss after this cannot bring
// back an old name or lose a new one). Checkpoints call it between their data files and their DONE marker,
// so the marker can never reach the disk before what it vouches for. Returns 0 with err set on failure.
static inline int fsync_dir(const char* dir, char* err, size_t errlen) {
    const int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) { snprintf(err, errlen, "cannot open directory %.160s: %.60s", dir, strerror(errno)); return 0; }
    const int ok = fsync(fd) == 0;
    if (!ok) snprintf(err, errlen, "cannot fsync directory %.160s: %.60s", dir, strerror(errno));
    close(fd);
    return ok;
}

// Step N of a file named exactly <prefix>N<suffix> (N: decimal digits only, 1..INT_MAX, as the trainers write
// it), else -1: "DONE_00000200x", "DONE_-5" or a 30-digit step are not checkpoints.
static inline int64_t checkpoint_name_step(const char* name, const char* prefix, const char* suffix) {
    const size_t np = strlen(prefix);
    if (strncmp(name, prefix, np) != 0 || name[np] < '0' || name[np] > '9') return -1;  // strtoll skips spaces, signs
    char* end = NULL;
    errno = 0;
    const long long v = strtoll(name + np, &end, 10);
    if (errno == ERANGE || strcmp(end, suffix) != 0 || v < 1 || v > 2147483647) return -1;
    return v;
}

// Largest step below `below` among the files <prefix>N<suffix> in dir, or -1 (none, or no such dir). Callers
// walk down from INT64_MAX to visit the checkpoints newest first.
static inline int64_t dir_latest_step(const char* dir, const char* prefix, const char* suffix, int64_t below) {
    DIR* d = opendir(dir);
    if (!d) return -1;
    int64_t best = -1;
    struct dirent* e;
    while ((e = readdir(d))) {
        const int64_t s = checkpoint_name_step(e->d_name, prefix, suffix);
        if (s > best && s < below) best = s;
    }
    closedir(d);
    return best;
}

// The files of one checkpoint are <prefix><step, 8 digits><suffix> in the -o directory.
typedef struct { const char* prefix; const char* suffix; } CheckpointFile;

// -nk / -nm, called once the checkpoint of step `newest` is complete: removes every older complete checkpoint
// that is neither among the `keep` newest (the new one included) nor at a multiple of `major_every` (> 0).
// files[0] is the file whose presence makes a checkpoint complete (train_gpt: its DONE marker; train_gpt_cpu:
// its model file); it is removed first, durably, so a crash part way through never leaves a marker vouching for
// removed files. Checkpoints after `newest` (of an earlier pass over those steps, which this run rewrites when it
// gets there) and incomplete ones (no files[0]) are left alone. The new checkpoint is always written before the
// old ones go, so the disk must hold keep + 1 of them for a moment. Returns 0 with err set on failure.
static inline int prune_checkpoints(const char* dir, int64_t newest, int keep, int major_every,
                                    const CheckpointFile* files, int n_files, char* err, size_t errlen) {
    if (keep <= 0) return 1;
    int rank = 0;
    for (int64_t s = dir_latest_step(dir, files[0].prefix, files[0].suffix, newest + 1); s >= 0;
         s = dir_latest_step(dir, files[0].prefix, files[0].suffix, s)) {
        if (++rank <= keep || (major_every > 0 && s % major_every == 0)) continue;
        for (int i = 0; i < n_files; i++) {
            char path[4200];  // -o is at most 4000 characters (train_args_check)
            snprintf(path, sizeof path, "%s/%s%08lld%s", dir, files[i].prefix, (long long)s, files[i].suffix);
            const int removed = unlink(path) == 0;
            if (!removed && errno != ENOENT) {
                snprintf(err, errlen, "-nk: cannot remove %.300s: %.60s", path, strerror(errno));
                return 0;
            }
            if (i == 0 && !removed) break;  // a marker not named as we write it (fewer digits): not ours
            if (i == 0 && !fsync_dir(dir, err, errlen)) return 0;
            if (i == n_files - 1) printf("removed checkpoint step %lld (-nk %d)\n", (long long)s, keep);
        }
    }
    return 1;
}

// Opens DIR/main.log (dir NULL: a disabled logger, returns 1). resume_step < 0 starts a fresh log; a
// resumed run (resume_step >= 0) keeps the train lines of steps up to resume_step and the val lines of steps
// before it, and appends after them: the resumed run logs step resume_step's validation again itself, and the
// steps an interrupted run logged after its last checkpoint do not appear twice.
static inline int logger_open(TrainLogger* lg, const char* dir, int64_t resume_step, char* err, size_t errlen) {
    lg->f = NULL;
    lg->lost = 0;
    lg->path[0] = '\0';
    if (!dir) return 1;
    if (!make_dirs(dir, err, errlen)) return 0;
    char tmp[4300];
    char* path = lg->path;
    snprintf(path, sizeof lg->path, "%s/main.log", dir);
    if (resume_step >= 0) {
        FILE* in = fopen(path, "r");
        if (in) {
            snprintf(tmp, sizeof tmp, "%s.tmp", path);
            FILE* out = fopen(tmp, "w");
            if (!out) { fclose(in); snprintf(err, errlen, "cannot write %.160s: %.60s", tmp, strerror(errno)); return 0; }
            char line[512], kind[4] = "";
            long long step;
            while (fgets(line, sizeof line, in)) {
                if (sscanf(line, "s:%lld %3[a-z]", &step, kind) != 2) continue;
                if (strcmp(kind, "tel") == 0 ? step < resume_step : step <= resume_step) fputs(line, out);
            }
            fclose(in);
            // durable before the rename replaces the old log: a crash must leave the old or the new one whole
            const int synced = fflush(out) == 0 && fsync(fileno(out)) == 0;
            if (fclose(out) != 0 || !synced || rename(tmp, path) != 0) {
                snprintf(err, errlen, "cannot rewrite %.160s: %.60s", path, strerror(errno));
                return 0;
            }
            if (!fsync_dir(dir, err, errlen)) return 0;
        }
    }
    lg->f = fopen(path, resume_step >= 0 ? "a" : "w");
    if (!lg->f) { snprintf(err, errlen, "cannot open log file %.160s: %.60s", path, strerror(errno)); return 0; }
    return 1;
}
// One line, flushed. A failed write (a full disk) does not stop the run, whose state is in memory and in its
// checkpoints, but it is said once on stderr, since the log no longer holds every step; the same losses are on
// stdout.
// Train lines carry the step's lr and gradient norm after the loss, as llm.c's do (tools that split a line on
// spaces and read "s:" and the second field keep working).
static inline void logger_line(TrainLogger* lg, int step, const char* kind, float loss, const char* more) {
    if (!lg->f || lg->lost) return;
    errno = 0;
    if (fprintf(lg->f, "s:%d %s:%.6f%s\n", step, kind, loss, more) < 0 || fflush(lg->f) != 0) {
        lg->lost = 1;
        fprintf(stderr, "warning: cannot write %.200s (%s): its lines from step %d on are missing (stdout has them)\n",
                lg->path, errno ? strerror(errno) : "short write", step);
    }
}
static inline void logger_train(TrainLogger* lg, int step, float loss, float lr, float norm) {
    char more[64];
    snprintf(more, sizeof more, " lr:%.4e norm:%.4f", lr, norm);
    logger_line(lg, step, "trl", loss, more);
}
static inline void logger_val(TrainLogger* lg, int step, float loss) { logger_line(lg, step, "tel", loss, ""); }
static inline void logger_close(TrainLogger* lg) {
    if (lg->f) fclose(lg->f);
    lg->f = NULL;
}

// ----------------------------------------------------------------------------
// Sampling

// xorshift64* (Vigna): a tiny RNG for sampling; state must not be 0.
static inline uint64_t random_u64(uint64_t* state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return *state * 0x2545F4914F6CDD1Dull;
}
// Uniform in [0, 1), 24 random bits.
static inline float random_f32(uint64_t* state) { return (float)(random_u64(state) >> 40) / 16777216.0f; }

// Draws a token from softmax(logits[0..V)) with coin in [0, 1) by walking the CDF; the padded columns
// of the logits row (>= V) are never looked at.
static inline int sample_softmax(const float* logits, int V, float coin) {
    float maxv = logits[0];
    for (int i = 1; i < V; i++) maxv = logits[i] > maxv ? logits[i] : maxv;
    double sum = 0.0;
    for (int i = 0; i < V; i++) sum += exp((double)(logits[i] - maxv));
    const double target = coin * sum;
    double cdf = 0.0;
    for (int i = 0; i < V; i++) {
        cdf += exp((double)(logits[i] - maxv));
        if (target < cdf) return i;
    }
    return V - 1;  // coin * sum rounded up past the last bucket
}

// Prints one generated token: its text when a tokenizer is loaded, else its id.
static inline void print_sample_token(const Tokenizer* tok, int id) {
    if (tok && tok->init_ok) print_token(tok, (uint32_t)id);
    else printf("%d ", id);
}

// Prints a whole generated sample between "---" lines (tokens[0] is the prompt token and is not printed).
static inline void print_sample(const Tokenizer* tok, const int* tokens, int n) {
    printf("generated:\n---\n");
    for (int i = 1; i < n; i++) print_sample_token(tok, tokens[i]);
    printf("\n---\n");
    fflush(stdout);
}
