// args.h — flags both trainers share (llm.c's where they overlap): TrainArgs, defaults, -h,
// parsing, cross-flag checks. Not here: train_gpt.cu's flags (GpuArgs).
#pragma once
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OUTLIER_WINDOW    128                                     // -sl / -sg window: the previous N steps
#define EVAL_DEFAULT_PATH "dev/data/hellaswag/hellaswag_val.bin"  // -h 1: llm.c's HellaSwag file

// -k values, saved in checkpoints: fixed, cosine 0 as in older files.
enum { LR_COSINE = 0, LR_LINEAR = 1, LR_CONSTANT = 2, LR_WSD = 3, LR_SCHEDULES };
static const char* const LR_SCHEDULE_NAMES[LR_SCHEDULES] = {"cosine", "linear", "constant", "wsd"};
static inline const char* lr_schedule_name(int64_t s) {
    return s >= 0 && s < LR_SCHEDULES ? LR_SCHEDULE_NAMES[s] : "unknown";
}

typedef struct {
    const char* train_data;  // -i  train shard pattern (glob)
    const char* val_data;    // -j  val shard pattern
    const char* model;       // -e  llm.c model file, Hugging Face checkpoint, or a spec (parse_model_spec)
    const char* output_dir;  // -o  log + checkpoint directory, NULL: none
    int B;                   // -b  micro-batch size
    int T;                   // -t  sequence length
    int64_t total_batch_tokens;  // -d  tokens per optimizer step; 0 = B*T (no accumulation)
    float lr;                    // -l  peak learning rate
    int warmup_steps;            // -u  linear warmup steps
    float final_lr_frac;         // -q  the decay ends at lr * final_lr_frac (1 = constant lr)
    int lr_schedule;             // -k  LR_COSINE, LR_LINEAR, LR_CONSTANT or LR_WSD (after the warmup)
    float weight_decay;          // -c  AdamW decoupled weight decay, 2-D matrices only
    float grad_clip;             // -gc global gradient-norm clip; 0 = off (llm.c: always 1.0)
    int max_steps;               // -x  optimizer steps; -1 = one epoch of the train data
    int val_every;               // -v  validation every N steps (and at the end); 0 = never
    int val_max_batches;         // -m  batches per validation; 0 = the whole val set
    int sample_every;            // -s  generate a sample every N steps; 0 = only at the end
    int gen_tokens;              // -g  tokens per sample; 0 = no sampling; -1 = sample_tokens()
    int checkpoint_every;        // -n  checkpoint every N steps (needs -o); the last step saves anyway
    int keep_checkpoints;        // -nk keep the newest N checkpoints (llm.c's flag); 0 = all
    int major_checkpoint_every;  // -nm checkpoints at multiples of N steps outlive -nk; 0 = none
    int resume;                  // -y  1 = resume from the latest checkpoint in -o
    int overfit_single_batch;    // -a  1 = every step trains on the first step's tokens (loss -> 0)
    float skip_loss_z;           // -sl skip an update whose loss z-score exceeds this; 0 = off
    float skip_grad_z;           // -sg the same for the gradient norm; 0 = off
    const char* hellaswag;       // -h  multiple-choice eval file (llmc/evalloader.h), NULL = none
    unsigned given;              // GIVEN_* bits: flags on the command line (-y 1 takes the rest from the run)
} TrainArgs;
// The hyperparameters a checkpoint records, as bits of TrainArgs.given.
enum {
    GIVEN_X = 1,
    GIVEN_L = 2,
    GIVEN_U = 4,
    GIVEN_Q = 8,
    GIVEN_K = 16,
    GIVEN_C = 32,
    GIVEN_GC = 64,
    GIVEN_A = 128,
    GIVEN_SL = 256,
    GIVEN_SG = 512
};

// llm.c's defaults; a trainer changes its own before parsing.
static inline void train_args_defaults(TrainArgs* a) {
    memset(a, 0, sizeof *a);
    a->train_data = "dev/data/tinyshakespeare/tiny_shakespeare_train.bin";
    a->val_data = "dev/data/tinyshakespeare/tiny_shakespeare_val.bin";
    a->model = "d12";
    a->output_dir = NULL;
    a->B = 4;
    a->T = 1024;
    a->total_batch_tokens = 0;
    a->lr = 3e-4f;
    a->warmup_steps = 0;
    a->final_lr_frac = 1.0f;
    a->lr_schedule = LR_COSINE;
    a->weight_decay = 0.0f;
    a->grad_clip = 1.0f;
    a->max_steps = -1;
    a->val_every = 20;
    a->val_max_batches = 20;
    a->sample_every = 0;
    a->gen_tokens = -1;
    a->checkpoint_every = 0;
    a->keep_checkpoints = 0;
    a->major_checkpoint_every = 0;
    a->resume = 0;
    a->overfit_single_batch = 0;
}

// Prints the flags with the defaults in `d` (NULL: train_args_defaults).
static inline void train_usage(FILE* f, const TrainArgs* d = NULL) {
    TrainArgs def;
    if (!d) {
        train_args_defaults(&def);
        d = &def;
    }
    fprintf(
        f,
        "flags (every flag takes a value: -X value):\n"
        "  -i <glob>   train data shards, GPT-2 / Llama 3 / chat (default %s)\n"
        "  -j <glob>   val data shards (default %s)\n"
        "  -e <model>  llm.c model file (fp32 or bf16), a run's -o (its latest checkpoint), Hugging Face\n"
        "              GPT-2 checkpoint (a directory as save_pretrained writes it, or its .safetensors / "
        "index\n"
        "              .json), or a spec (default %s):\n"
        "              dN (d12 d24 d36 d48 are GPT-2; other N: L=N C=64N NH=N), "
        "L<n>:C<n>:NH<n>[:T<n>][:V<n>],\n"
        "              124m 350m 774m 1558m 1.3b 2.7b 5b 7b 13b 30b 70b 100b 175b (any spec may add :T<n> "
        ":V<n>)\n"
        "              Llama 3 / Qwen2.5: a LlamaForCausalLM or Qwen2ForCausalLM directory, a preset\n"
        "              (llama3.2-1b llama3-8b llama3-70b llama3-405b qwen2.5-0.5b qwen2.5-7b qwen2.5-72b)\n"
        "              or llama: / qwen2: with :L :C :NH :KV :HD :I :V :T :TIE :BIAS parts (docs/hf.md)\n"
        "  -o <dir>    output dir for main.log and checkpoints (default none)\n"
        "  -b <int>    micro-batch size B (default %d)\n"
        "  -t <int>    sequence length T (default %d)\n"
        "  -d <int>    tokens per step, a multiple of B*T: gradient accumulation (default B*T)\n"
        "  -l <float>  peak learning rate (default %g)\n"
        "  -u <int>    warmup steps (default %d)\n"
        "  -q <float>  final lr fraction, where the decay ends (default %g)\n"
        "  -k <name>   lr schedule after the warmup: cosine, linear (decay to -q x lr over the run),\n"
        "              constant, wsd (constant, then 1 - sqrt decay over the last 20%% of steps) (default "
        "%s)\n"
        "  -c <float>  weight decay, matrices only (default %g)\n"
        "  -gc <float> gradient global-norm clip, 0 = off (default %g)\n"
        "  -x <int>    max steps, -1 = one epoch (default %d)\n"
        "  -v <int>    val loss every N steps, 0 = never (default %d)\n"
        "  -m <int>    val batches, 0 = all (default %d)\n"
        "  -s <int>    sample every N steps, 0 = only at the end (default %d)\n"
        "  -g <int>    generated tokens per sample, at most T - 1, 0 = none (default 64, or T - 1 if less)\n"
        "  -n <int>    checkpoint every N steps; with -o the last step always saves one (default %d)\n"
        "  -nk <int>   keep only the newest N checkpoints, removing older ones once a new one is complete,\n"
        "              0 = keep all (default %d)\n"
        "  -nm <int>   checkpoints at multiples of N steps are never removed by -nk, 0 = none (default %d)\n"
        "  -y <0|1>    resume from the latest checkpoint in -o (default %d)\n"
        "  -a <0|1>    overfit one batch: every step trains on the first -d tokens again (default %d)\n"
        "  -sl <float> skip the update of a step whose loss is more than this many standard deviations\n"
        "              above the mean of the last %d steps' (a loss spike), 0 = off (default %g)\n"
        "  -sg <float> the same for the gradient norm, 0 = off (default %g)\n"
        "  -h <0|1|file> HellaSwag accuracy at each validation and at the end: 1 reads\n"
        "              " EVAL_DEFAULT_PATH
        " (llm.c's; dev/data/hellaswag.py makes it), a file\n"
        "              path reads that file, 0 = none (default 0)\n"
        "  -h          alone: this help\n",
        d->train_data, d->val_data, d->model, d->B, d->T, d->lr, d->warmup_steps, d->final_lr_frac,
        lr_schedule_name(d->lr_schedule), d->weight_decay, d->grad_clip, d->max_steps, d->val_every,
        d->val_max_batches, d->sample_every, d->checkpoint_every, d->keep_checkpoints,
        d->major_checkpoint_every, d->resume, d->overfit_single_batch, OUTLIER_WINDOW, d->skip_loss_z,
        d->skip_grad_z);
}

// Whole-string integer / float parse, range checked; 0 with a one-line err.
static inline int parse_int_in(const char* flag, const char* s, int64_t lo, int64_t hi, int64_t* out,
                               char* err, size_t errlen) {
    char* end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE) {
        snprintf(err, errlen, "flag %s: '%s' is not an integer", flag, s);
        return 0;
    }
    if (v < lo || v > hi) {
        snprintf(err, errlen, "flag %s: %lld out of range [%lld, %lld]", flag, v, (long long)lo,
                 (long long)hi);
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

// One "-X value" pair: 1 consumed, 0 bad value (err), -1 not shared.
static inline int parse_train_arg(TrainArgs* a, const char* flag, const char* value, char* err,
                                  size_t errlen) {
    const int64_t IMAX = 2147483647;
    int64_t i = 0;
    int ok = 1;
    if (strcmp(flag, "-nk") == 0 || strcmp(flag, "-nm") == 0) {  // llm.c's two-letter checkpoint flags
        if (!value) {
            snprintf(err, errlen, "flag %s needs a value", flag);
            return 0;
        }
        ok = parse_int_in(flag, value, 0, IMAX, &i, err, errlen);
        (flag[2] == 'k' ? a->keep_checkpoints : a->major_checkpoint_every) = (int)i;
        return ok;
    }
    if (strcmp(flag, "-gc") == 0) {
        if (!value) {
            snprintf(err, errlen, "flag %s needs a value", flag);
            return 0;
        }
        a->given |= GIVEN_GC;
        return parse_float_in(flag, value, 0.0, 1e30, &a->grad_clip, err, errlen);
    }
    if (strcmp(flag, "-sl") == 0 || strcmp(flag, "-sg") == 0) {  // llm.c's outlier thresholds (z-scores)
        if (!value) {
            snprintf(err, errlen, "flag %s needs a value", flag);
            return 0;
        }
        a->given |= flag[2] == 'l' ? GIVEN_SL : GIVEN_SG;
        return parse_float_in(flag, value, 0.0, 1e30, flag[2] == 'l' ? &a->skip_loss_z : &a->skip_grad_z, err,
                              errlen);
    }
    if (flag[0] != '-' || flag[1] == '\0' || flag[2] != '\0') return -1;
    if (!value) {
        snprintf(err, errlen, "flag %s needs a value", flag);
        return 0;
    }
    const char* recorded = strchr("xluqkc", flag[1]);  // GIVEN_X ... GIVEN_C, in this order
    if (recorded) a->given |= 1u << (recorded - "xluqkc");
    switch (flag[1]) {
        case 'i': a->train_data = value; break;
        case 'j': a->val_data = value; break;
        case 'e': a->model = value; break;
        case 'o':  // "" would pass the -n/-y check, then fail at the first write
            if (!*value) {
                snprintf(err, errlen, "flag -o: the output directory must not be empty");
                return 0;
            }
            a->output_dir = value;
            break;
        case 'b':
            ok = parse_int_in(flag, value, 1, 1 << 20, &i, err, errlen);
            a->B = (int)i;
            break;
        case 't':
            ok = parse_int_in(flag, value, 1, 1 << 20, &i, err, errlen);
            a->T = (int)i;
            break;
        case 'd':
            ok = parse_int_in(flag, value, 0, (int64_t)1 << 40, &i, err, errlen);
            a->total_batch_tokens = i;
            break;
        case 'l': ok = parse_float_in(flag, value, 0.0, 10.0, &a->lr, err, errlen); break;
        case 'u':
            ok = parse_int_in(flag, value, 0, IMAX, &i, err, errlen);
            a->warmup_steps = (int)i;
            break;
        case 'q': ok = parse_float_in(flag, value, 0.0, 1.0, &a->final_lr_frac, err, errlen); break;
        case 'c': ok = parse_float_in(flag, value, 0.0, 10.0, &a->weight_decay, err, errlen); break;
        case 'k':
            for (i = 0; i < LR_SCHEDULES && strcmp(value, LR_SCHEDULE_NAMES[i]) != 0; i++) {}
            if (i == LR_SCHEDULES) {  // a number: the clip, which is -gc
                snprintf(err, errlen,
                         "flag -k: '%.40s' is not an lr schedule (cosine, linear, constant or wsd)%s", value,
                         isdigit((unsigned char)value[0]) || value[0] == '.' || value[0] == '-'
                             ? "; the gradient clip is -gc"
                             : "");
                return 0;
            }
            a->lr_schedule = (int)i;
            break;
        case 'x':
            ok = parse_int_in(flag, value, -1, IMAX, &i, err, errlen);
            if (ok && i == 0) {  // it ran, trained nothing and saved nothing, silently (a hostile trial)
                snprintf(err, errlen, "flag -x 0: no step to train: -x N for N steps, or -1 for one epoch");
                return 0;
            }
            a->max_steps = (int)i;
            break;
        case 'v':
            ok = parse_int_in(flag, value, 0, IMAX, &i, err, errlen);
            a->val_every = (int)i;
            break;
        case 'm':
            ok = parse_int_in(flag, value, 0, IMAX, &i, err, errlen);
            a->val_max_batches = (int)i;
            break;
        case 's':
            ok = parse_int_in(flag, value, 0, IMAX, &i, err, errlen);
            a->sample_every = (int)i;
            break;
        case 'g':
            ok = parse_int_in(flag, value, 0, 1 << 20, &i, err, errlen);
            a->gen_tokens = (int)i;
            break;
        case 'n':
            ok = parse_int_in(flag, value, 0, IMAX, &i, err, errlen);
            a->checkpoint_every = (int)i;
            break;
        case 'y':
            ok = parse_int_in(flag, value, 0, 1, &i, err, errlen);
            a->resume = (int)i;
            break;
        case 'a':
            a->given |= GIVEN_A;
            ok = parse_int_in(flag, value, 0, 1, &i, err, errlen);
            a->overfit_single_batch = (int)i;
            break;
        case 'h':  // 0, 1 (llm.c's file) or a file
            if (!*value) {
                snprintf(err, errlen, "flag -h: 0, 1 or an eval file (empty given)");
                return 0;
            }
            a->hellaswag = strcmp(value, "0") == 0   ? NULL
                           : strcmp(value, "1") == 0 ? EVAL_DEFAULT_PATH
                                                     : value;
            break;
        default: return -1;
    }
    return ok;
}

// What single flags cannot check: -d against B*T, -n/-y need -o. After parsing.
static inline int train_args_check(const TrainArgs* a, char* err, size_t errlen) {
    const int64_t bt = (int64_t)a->B * a->T;
    if (a->total_batch_tokens != 0 && a->total_batch_tokens % bt != 0) {
        snprintf(err, errlen, "-d %lld is not a multiple of B*T = %d*%d = %lld",
                 (long long)a->total_batch_tokens, a->B, a->T, (long long)bt);
        return 0;
    }
    if (a->total_batch_tokens / bt > (1 << 20)) {
        snprintf(err, errlen, "-d %lld asks for more than 2^20 micro-batches per step",
                 (long long)a->total_batch_tokens);
        return 0;
    }
    // a sample is -g tokens after <|endoftext|> in one sequence of T positions
    if (a->gen_tokens >= 0 && a->gen_tokens > a->T - 1) {
        snprintf(err, errlen,
                 "-g %d: a sample is generated within one sequence of -t %d positions after "
                 "<|endoftext|>, so at most %d tokens: lower -g or raise -t",
                 a->gen_tokens, a->T, a->T - 1);
        return 0;
    }
    if ((a->checkpoint_every > 0 || a->resume) && !a->output_dir) {
        snprintf(err, errlen, "-n and -y need an output directory (-o)");
        return 0;
    }
    if ((a->keep_checkpoints > 0 || a->major_checkpoint_every > 0) && a->checkpoint_every == 0) {
        snprintf(err, errlen,
                 "-nk and -nm choose which checkpoints to keep: they need checkpoints (-n N and -o)");
        return 0;
    }
    // names under -o must fit 4200-byte buffers: refuse now, not hours later
    if (a->output_dir && strlen(a->output_dir) > 4000) {
        snprintf(err, errlen, "flag -o: the output directory path is too long (%zu characters, at most 4000)",
                 strlen(a->output_dir));
        return 0;
    }
    return 1;
}

// Tokens per sample: -g, or by default 64 (llm.c's) or T - 1 if less.
static inline int sample_tokens(const TrainArgs* a) {
    return a->gen_tokens >= 0 ? a->gen_tokens : (a->T - 1 < 64 ? a->T - 1 : 64);
}

// Micro-batches per optimizer step (-d / (B*T)).
static inline int grad_accum_steps(const TrainArgs* a) {
    return a->total_batch_tokens == 0 ? 1 : (int)(a->total_batch_tokens / ((int64_t)a->B * a->T));
}

// Why an llm.c flag is not here, appended to the unknown-flag error.
static inline const char* llmc_flag_note(const char* flag) {
    static const struct {
        const char* flag;
        const char* note;
    } notes[] = {
        {"-r",
         "llm.c's recompute setting: here every layer's forward is recomputed in the backward pass (-K keeps "
         "some)"},
        {"-z",
         "llm.c's ZeRO stage: train_gpt keeps the optimizer state in host RAM, once per node, and with -pn "
         "each "
         "GPU's CPU threads update its slice"},
        {"-w", "llm.c's master-weights switch: here the master weights are always fp32"},
        {"-f", "llm.c's TF32 switch: here the GEMMs are bf16 with fp32 accumulation"},
        {"-ge", "llm.c's GELU fusion: see -G (train_gpt)"},
        {"-lg", "llm.c's GPU logging interval: not supported"},
        {"-pn", "train_gpt's flag (the GPUs of one node): ./train_gpt -h lists it"},
        {"-pr", "train_gpt's flag (this node's index, with -pN): ./train_gpt -h lists it"},
        {"-pg",
         "train_gpt's flag (llm.c's way to start the processes: -pi tcp|fs|mpi, -pn, -pr, -pg, -pf, -ps): "
         "./train_gpt -h lists it"},
        {"-pm",
         "llm.c's multi-process setting: train_gpt takes -pn G (the GPUs of a node), -pN N -pr n -ps "
         "HOST:PORT "
         "(several nodes), or a launcher's RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and MASTER_ADDR (torchrun)"},
        {"-ps", "train_gpt's flag (node 0's HOST:PORT, with -pN): ./train_gpt -h lists it"},
        {"-pp",
         "llm.c's multi-process setting: train_gpt takes -pn G (the GPUs of a node), -pN N -pr n -ps "
         "HOST:PORT "
         "(several nodes), or a launcher's RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and MASTER_ADDR (torchrun)"},
        {"-pi",
         "train_gpt's flag (llm.c's way to start the processes: -pi tcp|fs|mpi, -pn, -pr, -pg, -pf, -ps): "
         "./train_gpt -h lists it"},
        {"-pf",
         "train_gpt's flag (llm.c's way to start the processes: -pi tcp|fs|mpi, -pn, -pr, -pg, -pf, -ps): "
         "./train_gpt -h lists it"},
        // reached only in train_gpt_cpu: train_gpt parses these itself
        {"-P", "train_gpt's (the GPU trainer's) flag: ./train_gpt -h lists it; -P 1 runs without a GPU"},
        {"-R", "train_gpt's (the GPU trainer's) flag: ./train_gpt -h lists it; -P 1 runs without a GPU"},
        {"-K", "train_gpt's (the GPU trainer's) flag: ./train_gpt -h lists it; -P 1 runs without a GPU"},
        {"-F", "train_gpt's (the GPU trainer's) flag: ./train_gpt -h lists it; -P 1 runs without a GPU"},
        {"-G", "train_gpt's (the GPU trainer's) flag: ./train_gpt -h lists it; -P 1 runs without a GPU"},
        {"-M", "train_gpt's (the GPU trainer's) flag: ./train_gpt -h lists it; -P 1 runs without a GPU"},
        {"-V", "train_gpt's (the GPU trainer's) flag: ./train_gpt -h lists it; -P 1 runs without a GPU"},
        {"-E", "train_gpt's (the GPU trainer's) flag: ./train_gpt -h lists it; -P 1 runs without a GPU"},
        {"-sd", "train_gpt's (the GPU trainer's) flag: ./train_gpt -h lists it; -P 1 runs without a GPU"},
        {"-sw", "train_gpt's (the GPU trainer's) flag: ./train_gpt -h lists it; -P 1 runs without a GPU"},
        {"-sr", "train_gpt's (the GPU trainer's) flag: ./train_gpt -h lists it; -P 1 runs without a GPU"},
        {"-sk", "train_gpt's (the GPU trainer's) flag: ./train_gpt -h lists it; -P 1 runs without a GPU"},
        {"-sb", "train_gpt's (the GPU trainer's) flag: ./train_gpt -h lists it; -P 1 runs without a GPU"},
        {"-Y", "train_gpt's (the GPU trainer's) flag: ./train_gpt -h lists it; -P 1 runs without a GPU"},
        {"-B", "train_gpt's (the GPU trainer's) flag: ./train_gpt -h lists it; -P 1 runs without a GPU"},
        {"-W", "train_gpt's (the GPU trainer's) flag: ./train_gpt -h lists it; -P 1 runs without a GPU"},
        {"-A", "train_gpt's (the GPU trainer's) flag: ./train_gpt -h lists it; -P 1 runs without a GPU"},
        {"-S", "train_gpt's (the GPU trainer's) flag: ./train_gpt -h lists it; -P 1 runs without a GPU"},
    };
    for (size_t i = 0; i < sizeof notes / sizeof notes[0]; i++)
        if (strcmp(flag, notes[i].flag) == 0) return notes[i].note;
    return NULL;
}
// -h alone (or before another flag) is the help; -h with a value is llm.c's HellaSwag flag (parse_train_arg).
static inline int help_flag(int argc, char** argv, int i, char* err, size_t errlen) {
    if (strcmp(argv[i], "-h") != 0 && strcmp(argv[i], "--help") != 0) return 0;
    const char* next = i + 1 < argc ? argv[i + 1] : NULL;
    if (next && strcmp(argv[i], "-h") == 0 && next[0] == '-' && isdigit((unsigned char)next[1])) {
        snprintf(err, errlen, "flag -h: 0, 1 or an eval file (%.20s given)", next);
        return -1;
    }
    if (next && next[0] != '-') {
        if (strcmp(argv[i], "-h") == 0) return 0;  // -h 0, -h 1, -h FILE
        snprintf(err, errlen, "flag %s takes no value", argv[i]);
        return -1;
    }
    return 1;
}
static inline void unknown_flag_error(const char* flag, char* err, size_t errlen) {
    const char* note = llmc_flag_note(flag);
    if (!note && flag[0] != '-')  // the shell expanded an unquoted -i "data/*.bin"
        note = "not a flag: a file pattern the shell expanded? quote it: -i \"data/my_train_*.bin\"";
    snprintf(err, errlen, "unknown flag %.100s%s%s", flag, note ? ": " : "", note ? note : "");
}

// argv[1..], shared flags only (CPU trainer): 1 ok, 2 -h, 0 error (err set).
static inline int parse_train_argv(int argc, char** argv, TrainArgs* a, char* err, size_t errlen) {
    for (int i = 1; i < argc; i += 2) {
        const int help = help_flag(argc, argv, i, err, errlen);
        if (help) return help > 0 ? 2 : 0;
        if (argv[i][0] != '-') {  // not a flag: likely a file of an unquoted pattern
            unknown_flag_error(argv[i], err, errlen);
            return 0;
        }
        if (i + 1 >= argc) {
            snprintf(err, errlen, "flag %s needs a value", argv[i]);
            return 0;
        }
        int r = parse_train_arg(a, argv[i], argv[i + 1], err, errlen);
        if (r < 0) {
            unknown_flag_error(argv[i], err, errlen);
            return 0;
        }
        if (r == 0) return 0;
    }
    return train_args_check(a, err, errlen);
}
