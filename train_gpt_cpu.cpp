// train_gpt_cpu.cpp — trains GPT-2 (gpt2_cpu.h) or Llama (llama_cpu.h) on the CPU. No GPU.
// Flags, data, schedule, clip and AdamW are train_gpt's, line for line.
// Same log and checkpoints: a run moves between the two trainers.
// No arguments: L4 C128 NH4, T 64 on tinyshakespeare, minutes on 2 cores.
#include <chrono>
#include <stdarg.h>
#include <omp.h>
#include "llmc/adamw.h"        // defines: clip_scale, ADAMW_BETA1
#include "llmc/args.h"         // defines: TrainArgs, train_args_defaults, train_usage, parse_train_argv
#include "llmc/checkpoint.h"   // defines: checkpoint_save, open_run_dir, check_resume_args, state_file_read
#include "llmc/cpu_adam.h"     // defines: cpu_adam_set_threads, cpu_adam_simd_name, sumsq_f32
#include "llmc/cpu_cores.h"    // defines: usable_cpu_cores, omp_short_spin_reexec
#include "dataloader.h"        // defines: DataLoader, dataloader_open_pair, _next_batch
#include "llmc/evalloader.h"   // defines: EvalSet, evalset_read, evalset_batch, evalset_correct (-h)
#include "llmc/gpt2_cpu.h"     // defines: GPT2CPU, gpt2_cpu_forward, gpt2_cpu_backward, adamw_model_f32grad
#include "llmc/llama_cpu.h"    // defines: LlamaCPU, llama_cpu_forward, llama_cpu_backward, llama_cpu_adamw
#include "llmc/llama_hf.h"     // defines: llama_hf_load, llama_hf_read_config
#include "llmc/llama_model.h"  // defines: LlamaConfig, parse_llama_spec, llama_init_params, llama_read_header
#include "llmc/hf_tokenizer.h"  // defines: tokenizer_init_hf
#include "llmc/logger.h"        // defines: TrainLogger, logger_open, logger_train, logger_val, logger_eval
#include "llmc/model_file.h"    // defines: GPTConfig, ParamLayout, gpt_init_params, gpt_load_params
#include "llmc/model_specs.h"   // defines: parse_model_spec
#include "llmc/outliers.h"      // defines: OutlierWindow, outlier_skip, training_diverged, die_diverged
#include "llmc/sampler.h"       // defines: random_f32, sample_softmax, print_sample_token
#include "llmc/schedulers.h"    // defines: learning_rate_at
#include "llmc/stop_signal.h"   // defines: stop_signal_install, stop_if_signalled
#include "llmc/tokenizer.h"     // defines: Tokenizer, tokenizer_init
#include "llmc/utils.h"         // defines: die, table_row, table_rule, progress_text, peak_rss_bytes

#define INIT_SEED    1337ull     // weights of a model made from a spec
#define SHUFFLE_SEED 42ull       // order of the train batches
#define SAMPLE_SEED  1234567ull  // sampling RNG
static const char* kTokenizerPath = "gpt2_tokenizer.bin";

static double seconds_now(void) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Defaults: the loss falls clearly within minutes on 2 cores.
static void cpu_train_defaults(TrainArgs* a) {
    train_args_defaults(a);
    a->model = "L4:C128:NH4:T64";
    a->B = 8;
    a->T = 64;
    a->lr = 2e-3f;
    a->warmup_steps = 20;
    a->final_lr_frac = 0.1f;
    a->max_steps = 300;
    a->val_every = 50;
    a->val_max_batches = 10;
}

// Dies unless bytes fit host RAM. Overcommit: malloc passes, then OOM kill mid-run.
static void check_host_fit(double bytes) {
    const int64_t avail = host_available_bytes();
    const double GiB = 1073741824.0;
    if (avail >= 0 && bytes > avail)
        die("host RAM too small for this config: needs %.1f GiB (fp32 weights, grads, AdamW m, v and "
            "activations), "
            "%.1f GiB available",
            bytes / GiB, avail / GiB);
}

// ----------------------------------------------------------------------------
// The model: GPT-2 or Llama, behind the calls the loop makes

typedef struct {
    int llama;  // 1: the Llama family (ll), 0: GPT-2 (gpt)
    GPT2CPU gpt;
    LlamaCPU ll;
} CpuModel;

static float* model_params(CpuModel* m) { return m->llama ? m->ll.params : m->gpt.params; }
static float* model_grads(CpuModel* m) { return m->llama ? m->ll.grads : m->gpt.grads; }
static int64_t model_total(const CpuModel* m) { return m->llama ? m->ll.layout.total : m->gpt.layout.total; }
static int model_vocab(const CpuModel* m) {
    return m->llama ? m->ll.config.vocab_size : m->gpt.config.vocab_size;
}
static int model_max_T(const CpuModel* m) {
    return m->llama ? m->ll.config.max_seq_len : m->gpt.config.max_seq_len;
}
static float model_mean_loss(const CpuModel* m) { return m->llama ? m->ll.mean_loss : m->gpt.mean_loss; }
static const char* model_error(const CpuModel* m) { return m->llama ? m->ll.error : m->gpt.error; }
static int64_t model_act_floats(const CpuModel* m) {
    return m->llama ? m->ll.act_capacity : m->gpt.act_capacity;
}

// Forward over (B, T), the loss given targets (-1: none). pos: packed chats, NULL: pretraining.
static void model_forward(CpuModel* m, const int* inputs, const int* targets, int B, int T,
                          const int* pos = NULL) {
    const int ok = m->llama ? llama_cpu_forward(&m->ll, inputs, targets, B, T, pos)
                            : gpt2_cpu_forward(&m->gpt, inputs, targets, B, T, pos);
    if (!ok) die("%s", model_error(m));
}
// The last forward's loss at each of its B x T positions (0 where no target).
static const float* model_token_losses(const CpuModel* m) {
    return m->llama ? m->ll.acts.losses : m->gpt.acts.losses;
}
static int64_t model_num_targets(const CpuModel* m) {
    return m->llama ? m->ll.num_targets : m->gpt.num_targets;
}
// Adds the gradient of normalizer * sum of target losses. 0: of their mean.
static void model_backward(CpuModel* m, float normalizer = 0.0f) {
    const int ok = m->llama ? llama_cpu_backward(&m->ll, normalizer) : gpt2_cpu_backward(&m->gpt, normalizer);
    if (!ok) die("%s", model_error(m));
}
static void model_zero_grad(CpuModel* m) {
    if (m->llama) llama_cpu_zero_grad(&m->ll);
    else gpt2_cpu_zero_grad(&m->gpt);
}
// Logits of row `row` of the last forward: V, then GPT-2's padding.
static const float* model_logits(const CpuModel* m, int64_t row) {
    return m->llama ? m->ll.acts.logits + row * m->ll.config.vocab_size
                    : m->gpt.acts.logits + row * m->gpt.config.padded_vocab_size;
}
// AdamW on grads / denom, clipped. Decay on matrices only.
// denom: micro-batches (mean gradients) or chat target tokens (sums).
static void model_adamw(CpuModel* m, float* adam_m, float* adam_v, float denom, float lr, const TrainArgs* a,
                        int64_t t, float norm) {
    const float scale = clip_scale(norm, a->grad_clip) / denom;
    const AdamWArgs args = {lr, ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS, a->weight_decay, scale, t};
    if (m->llama) llama_cpu_adamw(&m->ll, adam_m, adam_v, &args);
    else
        adamw_model_f32grad(&m->gpt.config, &m->gpt.layout, m->gpt.params, m->gpt.grads, adam_m, adam_v,
                            &args);
}
static void model_free(CpuModel* m) {
    if (m->llama) llama_cpu_free(&m->ll);
    else gpt2_cpu_free(&m->gpt);
}

// -e as Llama: spec 1, model file 2, Hugging Face checkpoint 3. 0: GPT-2.
static int llama_source_kind(const char* spec, LlamaConfig* cfg) {
    char err[4352];
    const int kind = parse_llama_spec(spec, cfg, err, sizeof err);
    if (kind == 0) die("%s", err);
    if (kind == 1) return 1;
    if (llama_is_model_file(spec)) {
        if (!llama_read_header(spec, cfg, err, sizeof err)) die("%s", err);
        return 2;
    }
    const int hf = llama_hf_read_config(spec, cfg, err, sizeof err);
    if (hf == 0) die("%s", err);
    return hf == 1 ? 3 : 0;
}

// Builds Llama for (B, T) from a spec, model file or Hugging Face checkpoint.
static void build_llama(LlamaCPU* model, const char* spec, int kind, const LlamaConfig* cfg, int B, int T,
                        const char** source) {
    char err[4352];
    if (T > cfg->max_seq_len)
        die("-t %d exceeds the model's max sequence length %d (a preset or spec takes :T<n>, e.g. -e "
            "13b:T2048)",
            T, cfg->max_seq_len);
    const double state_bytes = 16.0 * llama_layout(cfg).total;  // params, grads, m, v
    // before malloc, in double (int64 overflows for huge B, T):
    // per layer (N, 6C + 4QD + 3I), attention (B, NH, T, T), logits (N, V) x 2
    const double N = (double)B * T, L = cfg->num_layers, QD = (double)cfg->num_heads * cfg->head_dim;
    check_host_fit(state_bytes +
                   4.0 * (L * N * (6.0 * cfg->hidden_size + 4 * QD + 3.0 * cfg->intermediate_size) +
                          L * B * cfg->num_heads * (double)T * T + 2 * N * cfg->vocab_size));
    if (kind == 3) {  // llama_hf_load builds the model itself
        if (!llama_hf_load(spec, model)) die("%s", model->error);
        *source = "Hugging Face checkpoint";
    } else {
        if (!llama_cpu_build(model, cfg)) die("%s", model->error);
        if (kind == 1) llama_init_params(cfg, model->params, INIT_SEED);
        else if (!llama_load_params(spec, cfg, model->params, err, sizeof err)) die("%s", err);
        *source = kind == 1 ? "spec, Llama init" : "Llama-family model file";
    }
    if (!llama_cpu_layout_activations(model, B, T)) die("%s", model->error);
    check_host_fit(state_bytes + 4.0 * model->act_capacity);
}

// Builds -e's model with activations for (B, T).
static void build_model(CpuModel* m, const char* spec, int B, int T, const char** source) {
    memset(m, 0, sizeof *m);
    LlamaConfig lc;
    const int llama_kind = llama_source_kind(spec, &lc);
    if (llama_kind) {
        m->llama = 1;
        build_llama(&m->ll, spec, llama_kind, &lc, B, T, source);
        return;
    }
    GPT2CPU* model = &m->gpt;
    GPTConfig cfg;
    char err[4352];
    const int kind = parse_model_spec(spec, &cfg, err, sizeof err);
    if (kind == 0) die("%s", err);
    warn_if_spec_shadows_path(spec, kind);
    if (kind == 2 && !gpt_read_header(spec, &cfg, err, sizeof err)) die("%s", err);
    if (T > cfg.max_seq_len)
        die("-t %d exceeds the model's max sequence length %d (a preset or spec takes :T<n>, e.g. -e "
            "13b:T2048)",
            T, cfg.max_seq_len);
    const double state_bytes = 16.0 * gpt_layout(&cfg).total;  // params, grads, m, v
    // as in build_llama: per layer (N, 12C), attention (B, NH, T, T), logits and probs (N, Vp)
    const double N = (double)B * T, L = cfg.num_layers;
    check_host_fit(state_bytes + 4.0 * (L * N * 12 * cfg.channels + L * B * cfg.num_heads * (double)T * T +
                                        2 * N * cfg.padded_vocab_size));
    if (!gpt2_cpu_build(model, &cfg)) die("%s", model->error);
    if (!gpt2_cpu_layout_activations(model, B, T)) die("%s", model->error);
    check_host_fit(state_bytes + 4.0 * model->act_capacity);  // exact, before the init touches a page
    if (kind == 1) {
        gpt_init_params(&cfg, model->params, INIT_SEED);
        *source = "spec, GPT-2 init";
    } else {
        if (!gpt_load_params(spec, &cfg, model->params, err, sizeof err)) die("%s", err);
        *source = hf_is_checkpoint(spec) ? "Hugging Face checkpoint" : "llm.c model file";
    }
}

// Mean loss of the first `batches` val batches, the same each time. Chat: per target token.
static float validation_loss(CpuModel* model, DataLoader* val, int64_t batches) {
    dataloader_reset(val);
    const int chat = val->kind == DL_CHAT;
    double sum = 0.0, targets = 0.0;
    for (int64_t i = 0; i < batches; i++) {
        if (!dataloader_next_batch(val)) die("%s", val->err);
        char err[600];
        if (!dataloader_check_tokens(val, model_vocab(model), err, sizeof err)) die("val data: %s", err);
        model_forward(model, val->inputs, val->targets, val->B, val->T, chat ? val->pos : NULL);
        const double n = chat ? (double)model_num_targets(model) : 1.0;  // pretraining: a mean per batch
        sum += model_mean_loss(model) * n;
        targets += n;
    }
    if (chat && targets == 0)
        die("val data %s: no target tokens in its first %lld batches", val->pattern, (long long)batches);
    return (float)(sum / (chat ? targets : (double)batches));
}

// -h: the examples the model answers right (llmc/evalloader.h), B / 4 a forward pass; -1: a stop signal cut
// it short (a whole HellaSwag pass of a large model takes minutes).
static int eval_correct(CpuModel* model, const EvalSet* set, int B, int T) {
    std::vector<int> inputs((size_t)B * T), targets((size_t)B * T), labels((size_t)B);
    int correct = 0;
    for (int64_t first = 0; first < (int64_t)set->examples.size(); first += B / EVAL_CHOICES) {
        if (stop_signal_pending()) return -1;
        const int n = evalset_batch(set, first, B, T, inputs.data(), targets.data(), labels.data());
        model_forward(model, inputs.data(), targets.data(), B, T);
        correct += evalset_correct(model_token_losses(model), targets.data(), labels.data(), n, T);
    }
    return correct;
}

// Prints n sampled tokens after <|endoftext|>, or after a chat run's prompt (its P tokens, then at most
// T - P). Each: a B=1 forward over the last maxT.
static void generate(CpuModel* model, const Tokenizer* tok, int n, uint64_t* rng, const int* prompt = NULL,
                     int P = 0, int T = 0) {
    const int maxT = model_max_T(model), V = model_vocab(model);
    const int eot = tok->init_ok ? tok->eot_token : 50256;  // -1: a tokenizer without such a token
    if (P > 0 && n > T - P) n = T - P;
    int* tokens = (int*)malloc(sizeof(int) * (size_t)(n + (P > 0 ? P : 1)));
    tokens[0] = eot < 0 ? 0 : eot < V ? eot : V - 1;
    if (P > 0) {
        memcpy(tokens, prompt, sizeof(int) * (size_t)P);
        print_sample_prompt(tok, prompt, P);
    }
    const int first = P > 0 ? P : 1;
    printf("generating:\n---\n");
    for (int i = first; i < first + n; i++) {
        const int ctx = i < maxT ? i : maxT;
        model_forward(model, tokens + i - ctx, NULL, 1, ctx);
        const float* logits = model_logits(model, ctx - 1);
        tokens[i] = sample_softmax(logits, V, random_f32(rng));
        print_sample_token(tok, tokens[i]);
        fflush(stdout);
    }
    printf("\n---\n");
    free(tokens);
}

// ----------------------------------------------------------------------------
// The run: what main() sets up, in order, and what the loop changes.

typedef struct {
    TrainArgs args, defaults;
    CpuModel model;
    const char* source;      // where the weights came from (the config table)
    const char* model_arg;   // -e as given (resume replaces args.model)
    float *adam_m, *adam_v;  // AdamW moments, the model's layout
    DataLoader train, val;
    int accum, total_steps;  // micro-batches per step, the last step
    int64_t val_batches;
    EvalSet eval;         // -h: the multiple-choice eval file
    int64_t resume_step;  // the checkpoint resumed from, -1: a fresh run
    int64_t resume_header[ST_HEADER_FIELDS];
    RunTail resume_tail;  // its -a, -sl, -sg and their windows
    char resume_model[4200], resume_state[4200];
    Tokenizer tok;
    int* prompt;  // chat data: the samples' prompt (dataloader_chat_prompt), prompt_len tokens
    int prompt_len;
    TrainLogger logger;
    int start_step;
    int64_t adam_t;                          // updates applied: steps less -sl / -sg skips
    int64_t saved_step;                      // the step of the newest checkpoint in -o (-1: none)
    OutlierWindow loss_window, norm_window;  // -sl / -sg
} CpuRun;

// Flags, then OpenMP threads: the default ignores a cgroup CPU quota (docker --cpus).
static void parse_args(CpuRun* r, int argc, char** argv) {
    cpu_train_defaults(&r->defaults);
    r->args = r->defaults;
    char err[4352];  // fits model.h's 4 KiB paths (-Wformat-truncation)
    const int parsed = parse_train_argv(argc, argv, &r->args, err, sizeof err);
    if (parsed == 2) {
        printf("usage: %s [flags]\n", argv[0]);
        train_usage(stdout, &r->defaults);
        exit(0);
    }
    if (parsed == 0) die("%s (run %s -h for the flags)", err, argv[0]);
    const int cores = usable_cpu_cores();
    if (!getenv("OMP_NUM_THREADS") && cores < omp_get_max_threads()) omp_set_num_threads(cores);
}

// -o: one run per directory. -y 1: the newest valid checkpoint of either trainer.
static void open_output_dir(CpuRun* r, int argc, char** argv) {
    r->model_arg = r->args.model;
    GPTConfig ckpt;
    LlamaConfig llama_ckpt;  // num_layers 0: the checkpoint is a GPT-2
    r->resume_step = open_run_dir(&r->args, r->resume_model, r->resume_state, sizeof r->resume_model, &ckpt,
                                  r->resume_header, &r->resume_tail, &llama_ckpt);
    r->saved_step = r->resume_step;
    if (r->resume_step < 0) return;
    bool model_given = false;
    for (int i = 1; i + 1 < argc; i += 2) model_given |= strcmp(argv[i], "-e") == 0;
    if (model_given) {  // -e must match the checkpoint
        LlamaConfig want;
        const bool llama_given = llama_source_kind(r->args.model, &want) != 0;
        check_resume_family(r->args.model, r->args.output_dir, llama_given, &want, &ckpt, &llama_ckpt);
    }
    r->args.model = r->resume_model;  // the checkpoint's model replaces -e
}

// Samples' decoder. Llama: -e's tokenizer.json, or GPT-2's for its vocabulary, or ids. Returns its path.
static std::string open_tokenizer(CpuRun* r) {
    char err[4352];
    const int V = model_vocab(&r->model);
    const std::string json = hf_tokenizer_json_of(r->model_arg);
    if (r->model.llama && !json.empty()) {
        if (!tokenizer_init_hf(&r->tok, json.c_str(), err, sizeof err, V))
            fprintf(stderr, "warning: %s\n", err);
        else if ((int64_t)r->tok.vocab_size > V) {
            fprintf(stderr, "warning: %s has %u tokens, the model %d: samples are printed as token ids\n",
                    json.c_str(), r->tok.vocab_size, V);
            tokenizer_free(&r->tok);
        }
        return r->tok.init_ok ? json : "";
    }
    if (r->model.llama && V != 50257) return "";
    if (!tokenizer_init(&r->tok, kTokenizerPath, err, sizeof err))
        fprintf(stderr, "warning: %s; samples are printed as token ids\n", err);
    return r->tok.init_ok ? kTokenizerPath : "";
}

// Shards, run length (-x -1: one epoch), resume flags vs the checkpoint; the tokenizer, and the shards
// against it and the model's vocabulary (dataloader_check_model).
static void open_data(CpuRun* r) {
    TrainArgs* a = &r->args;
    char err[4352];
    if (!dataloader_open_pair(&r->train, a->train_data, &r->val, a->val_data, a->B, a->T, SHUFFLE_SEED, err,
                              sizeof err))
        die("%s", err);
    const bool matched = run_data_tokenizer(a->output_dir, &r->train, r->resume_step >= 0, true);
    r->accum = grad_accum_steps(a);
    if (r->train.num_batches < 1)
        die("train data %s has no full batch of B*T = %lld tokens", a->train_data, (long long)a->B * a->T);
    if (r->val.num_batches < 1)
        die("val data %s has no full batch of B*T = %lld tokens", a->val_data, (long long)a->B * a->T);
    r->total_steps = a->max_steps >= 0 ? a->max_steps : (int)(r->train.num_batches / r->accum);
    // -x -1 with less than one step's batches would silently train nothing
    if (r->total_steps < 1 && a->max_steps < 0)
        die("train data %s holds %lld batches of B*T, fewer than the %d one step needs (-d)", a->train_data,
            (long long)r->train.num_batches, r->accum);
    r->val_batches = dataloader_eval_batches(&r->val, a->val_max_batches);
    if (a->hellaswag && (!evalset_read(a->hellaswag, &r->eval, err, sizeof err) ||
                         !evalset_check_fit(&r->eval, a->B, a->T, model_vocab(&r->model), err, sizeof err)))
        die("%s", err);
    r->prompt = (int*)malloc(sizeof(int) * (size_t)a->T);  // a chat run samples after a prompt
    if (!r->prompt) die("out of memory");
    r->prompt_len = dataloader_chat_prompt(&r->val, r->prompt, a->T - 1);
    a->max_steps = r->total_steps;  // -x -1 resolved: checkpoints record the run's length
    const std::string tok = open_tokenizer(r);
    const char* model = r->resume_step >= 0 ? a->model : r->model_arg;  // a resume: the checkpoint's
    for (const DataLoader* dl : {&r->train, &r->val}) {
        const int record = model_run_trained_on(model, dl, a->output_dir, matched, err, sizeof err);
        if (record < 0) die("%s", err);
        if (dl->vocab <= model_vocab(&r->model) && record > 0) continue;
        const int fits = dataloader_check_model(dl, model_vocab(&r->model), model,
                                                r->tok.init_ok ? r->tok.token_table : NULL, r->tok.vocab_size,
                                                tok.c_str(), err, sizeof err);
        if (!fits) die("%s", err);
        if (fits == 2 && dl == &r->train) fprintf(stderr, "warning: %s\n", err);
    }
    if (r->resume_step < 0) return;
    check_resume_args(r->resume_header, a, r->total_steps, (int64_t)r->accum * a->B * a->T, a->output_dir,
                      &r->resume_tail);
    if (r->resume_step >= r->total_steps)
        die("resume: the checkpoint in %s is at step %lld, the run ends at step %d: nothing to train "
            "(raise -x)",
            a->output_dir, (long long)r->resume_step, r->total_steps);
}

// AdamW moments: zero, or the checkpoint's with data position and update count.
static void init_optimizer_state(CpuRun* r) {
    const int64_t total = model_total(&r->model);
    r->adam_m = (float*)calloc((size_t)total, sizeof(float));
    r->adam_v = (float*)calloc((size_t)total, sizeof(float));
    if (!r->adam_m || !r->adam_v)
        die("out of memory for the AdamW state (%lld parameters)", (long long)total);
    if (r->resume_step < 0) return;
    DataLoaderState data_state;
    int64_t step = 0;
    char err[600];
    state_file_read(r->resume_state, total, r->adam_m, r->adam_v, &data_state, &step, &r->adam_t);
    run_tail_windows(&r->resume_tail, &r->loss_window, &r->norm_window);  // -sl / -sg go on as they were
    if (!dataloader_set_state(&r->train, &data_state, err, sizeof err)) die("resume: %s", err);
    r->start_step = (int)step;
    printf("resumed from %s (step %d)\n", r->resume_model, r->start_step);
}

static void open_logger(CpuRun* r) {
    char err[4352];
    if (!logger_open(&r->logger, r->args.output_dir, r->resume_step, err, sizeof err)) die("%s", err);
}

// Config table shape rows: GPT-2's or Llama's.
static void print_model_rows(const CpuModel* m) {
    if (m->llama) {
        const LlamaConfig* c = &m->ll.config;
        table_row("L / C / NH / NKV / hd", "%d / %d / %d / %d / %d", c->num_layers, c->hidden_size,
                  c->num_heads, c->num_kv_heads, c->head_dim);
        table_row("MLP / V / maxT", "%d (SwiGLU) / %d / %d", c->intermediate_size, c->vocab_size,
                  c->max_seq_len);
        table_row("RoPE / RMSNorm eps", "theta %g%s / %g", c->rope_theta,
                  c->rope_llama3 ? ", llama3 scaling" : "", c->rms_norm_eps);
        table_row("q/k/v biases / tied", "%s / %s", c->qkv_bias ? "yes" : "no",
                  c->tied_embeddings ? "yes" : "no");
        table_row("parameters", "%lld", (long long)m->ll.layout.total);
        return;
    }
    const GPTConfig* c = &m->gpt.config;
    const int64_t padded_rows = (int64_t)(c->padded_vocab_size - c->vocab_size) * c->channels;
    table_row("L / C / NH / maxT", "%d / %d / %d / %d", c->num_layers, c->channels, c->num_heads,
              c->max_seq_len);
    table_row("V / Vp", "%d / %d", c->vocab_size, c->padded_vocab_size);
    table_row("parameters", "%lld (%lld with the padded vocab)",
              (long long)(m->gpt.layout.total - padded_rows), (long long)m->gpt.layout.total);
}

static void print_config_table(const CpuRun* r) {
    const TrainArgs* a = &r->args;
    const double mib = 1.0 / (1 << 20);
    table_rule();
    table_row("model", "%s (%s)", a->model, r->source);
    print_model_rows(&r->model);
    table_row("B / T / accumulation", "%d / %d / %d = %lld tokens per step", a->B, a->T, r->accum,
              (long long)r->accum * a->B * a->T);
    table_row("lr / warmup / schedule", "%.2e / %d / %s to %.2f x lr", a->lr, a->warmup_steps,
              lr_schedule_name(a->lr_schedule), a->final_lr_frac);
    table_row("weight decay / clip", "%g / %g", a->weight_decay, a->grad_clip);
    table_row("steps", "%d", r->total_steps);
    table_row("train / val batches", "%lld / %lld (val uses %lld)", (long long)r->train.num_batches,
              (long long)r->val.num_batches, (long long)r->val_batches);
    const int64_t left[2] = {dataloader_rows_left_out(&r->train), dataloader_rows_left_out(&r->val)};
    if (left[0] || left[1])
        table_row("chat rows unused", "%lld train, %lld val (past each shard's last full batch of -b %d)",
                  (long long)left[0], (long long)left[1], a->B);
    if (a->hellaswag)
        table_row("HellaSwag (-h)", "%s: %zu examples, %d a batch", a->hellaswag, r->eval.examples.size(),
                  a->B / EVAL_CHOICES);
    table_row("host memory", "%.1f MiB params+grads+adam, %.1f MiB acts",
              4.0 * model_total(&r->model) * 4 * mib, (double)model_act_floats(&r->model) * 4 * mib);
    table_row("threads", "%d", omp_get_max_threads());
    table_rule();
    fflush(stdout);
}

// One step: forward and backward per micro-batch, divergence check, AdamW.
// Returns the mean loss, per target token for chat.
static double train_step(CpuRun* r, int step, float lr, float* norm, int64_t* targets, char* skipped,
                         size_t skipped_len) {
    CpuModel* m = &r->model;
    DataLoader* dl = &r->train;
    const int chat = dl->kind == DL_CHAT;
    char err[600];
    model_zero_grad(m);
    if (r->args.overfit_single_batch) dataloader_reset(dl);  // -a 1: the same first batches every step
    double loss = 0.0;
    *targets = 0;
    for (int micro = 0; micro < r->accum; micro++) {
        if (!dataloader_next_batch(dl)) die("%s", dl->err);
        if (!dataloader_check_tokens(dl, model_vocab(m), err, sizeof err)) die("train data: %s", err);
        model_forward(m, dl->inputs, dl->targets, r->args.B, r->args.T, chat ? dl->pos : NULL);
        model_backward(m, chat ? 1.0f : 0.0f);  // chat: the sum over targets, divided once below
        loss += chat ? (double)model_mean_loss(m) * model_num_targets(m) : model_mean_loss(m);
        *targets += chat ? model_num_targets(m) : (int64_t)r->args.B * r->args.T;
    }
    if (chat && *targets == 0) {
        snprintf(skipped, skipped_len, "no target tokens in this step");
        *norm = 0.0f;
        return 0.0;
    }
    const double denom = chat ? (double)*targets : (double)r->accum;
    loss /= denom;
    *norm = (float)(sqrt(sumsq_f32(model_grads(m), model_total(m))) / denom);  // of the mean gradient
    char diverged[96];  // the rule both trainers stop by, before the update
    if (training_diverged(loss, *norm, model_vocab(m), diverged, sizeof diverged))
        die_diverged(step + 1, loss, *norm, diverged, r->saved_step);
    // -sl / -sg may skip the update: *skipped says why
    if (!outlier_skip(&r->args, &r->loss_window, &r->norm_window, loss, *norm, skipped, skipped_len))
        model_adamw(m, r->adam_m, r->adam_v, (float)denom, lr, &r->args, ++r->adam_t, *norm);
    return loss;
}

static void save_checkpoint(CpuRun* r, int steps_done) {
    DataLoaderState data_state = dataloader_get_state(&r->train);
    const CpuModel* m = &r->model;
    checkpoint_save(r->args.output_dir, steps_done, r->adam_t, m->llama ? NULL : &m->gpt.config,
                    model_params(&r->model), r->adam_m, r->adam_v, &r->args, r->args.B, r->args.T,
                    &data_state, &r->loss_window, &r->norm_window, NULL, m->llama ? &m->ll.config : NULL);
    r->saved_step = steps_done;
}

// Ctrl-C / SIGTERM: finish the step, checkpoint (with -o), exit.
static void stop_if_asked(CpuRun* r, int steps_done) {
    stop_if_signalled(
        steps_done, r->start_step, r->total_steps, r->saved_step, r->args.output_dir,
        [&] { save_checkpoint(r, steps_done); }, -1, stop_end_alone);
}

static void free_run(CpuRun* r) {
    logger_close(&r->logger);
    tokenizer_free(&r->tok);
    dataloader_free(&r->train);
    dataloader_free(&r->val);
    free(r->prompt);
    free(r->adam_m);
    free(r->adam_v);
    model_free(&r->model);
}

int main(int argc, char** argv) {
    omp_short_spin_reexec(argv);  // first: idle OpenMP threads must not spin on a loaded machine
    static CpuRun run;            // static: zeroed (the outlier windows), and off the stack
    CpuRun* r = &run;
    const TrainArgs* a = &r->args;
    parse_args(r, argc, argv);
    stop_signal_install_setup();  // until the first step: a signal ends the set-up at once, in one line
    r->args.model = model_of_run_dir(r->args.model);  // -e a run's -o: its latest checkpoint
    open_output_dir(r, argc, argv);
    build_model(&r->model, a->model, a->B, a->T, &r->source);
    open_data(r);
    init_optimizer_state(r);
    open_logger(r);
    print_config_table(r);

    uint64_t rng = SAMPLE_SEED;
    double train_seconds = 0.0;
    int64_t train_tokens = 0;
    stop_signal_install();
    const double run_t0 = seconds_now();
    for (int step = r->start_step; step <= r->total_steps; step++) {
        stop_if_asked(r, step);  // a signal during validation or sampling
        const int last = step == r->total_steps;
        if (a->val_every > 0 && (step % a->val_every == 0 || last)) {
            const float vl = validation_loss(&r->model, &r->val, r->val_batches);
            printf("val loss %.6f\n", vl);
            logger_val(&r->logger, step, vl);
        }
        if (a->hellaswag && ((a->val_every > 0 && step > 0 && step % a->val_every == 0) || last)) {
            const int n = (int)r->eval.examples.size(), right = eval_correct(&r->model, &r->eval, a->B, a->T);
            if (right < 0) printf("HellaSwag: cut short by the stop signal\n");
            else printf("HellaSwag: %d/%d = %.6f\n", right, n, (double)right / n);
            if (right >= 0) logger_eval(&r->logger, step, (float)right / (float)n);
        }
        if (sample_tokens(a) > 0 &&
            ((a->sample_every > 0 && step > 0 && step % a->sample_every == 0) || last))
            generate(&r->model, &r->tok, sample_tokens(a), &rng, r->prompt, r->prompt_len, a->T);
        if (last) break;

        const double t0 = seconds_now();
        const float lr = learning_rate_at(a, step, r->total_steps);
        float norm;
        char skipped[96];  // -sl / -sg: why this step updates nothing, or ""
        int64_t targets;
        const double loss = train_step(r, step, lr, &norm, &targets, skipped, sizeof skipped);
        const double dt = seconds_now() - t0;
        const int64_t tokens = (int64_t)r->accum * a->B * a->T;
        if (step > r->start_step) {  // the first step includes warm-up costs
            train_seconds += dt;
            train_tokens += tokens;
        }
        char progress[64];
        progress_text(seconds_now() - run_t0, step + 1, r->start_step, r->total_steps, progress,
                      sizeof progress);
        char targets_text[48] = "";  // chat: the target tokens the loss averages over
        if (r->train.kind == DL_CHAT)
            snprintf(targets_text, sizeof targets_text, " | targets %lld", (long long)targets);
        const int no_targets = r->train.kind == DL_CHAT && targets == 0;
        if (no_targets) {
            fprintf(stderr, "warning: step %d: no target tokens in its %d micro-batches: nothing to learn\n",
                    step + 1, r->accum);
            printf("step %4d/%d | loss - | lr %.2e | ms %.1f%s | update skipped: %s\n", step + 1,
                   r->total_steps, lr, dt * 1e3, targets_text, skipped);
        } else
            printf("step %4d/%d | loss %.6f | norm %.4f | lr %.2e | ms %.1f | tok/s %.0f%s%s%s%s\n", step + 1,
                   r->total_steps, loss, norm, lr, dt * 1e3, tokens / dt, targets_text, progress,
                   skipped[0] ? " | update skipped: " : "", skipped);
        fflush(stdout);
        if (!no_targets) logger_train(&r->logger, step + 1, (float)loss, lr, norm);
        // every -n steps, and the last step with -o whatever -n says: a run that ends saves its model
        if (a->output_dir && ((a->checkpoint_every > 0 && (step + 1) % a->checkpoint_every == 0) ||
                              step + 1 == r->total_steps))
            save_checkpoint(r, step + 1);
        stop_if_asked(r, step + 1);
    }
    stop_if_asked(r, r->total_steps);  // a signal during the last validation or sample
    if (train_tokens > 0)
        printf("total average iteration time: %.1f ms, %.0f tok/s\n",
               1e3 * train_seconds / (r->total_steps - r->start_step - 1), train_tokens / train_seconds);
    printf("peak host memory: %.2f GiB resident\n", peak_rss_bytes() / 1073741824.0);
    free_run(r);
    return 0;
}
