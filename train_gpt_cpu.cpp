// train_gpt_cpu.cpp — trains a GPT-2 on the CPU with the reference model (gpt2_cpu.h). Flags, data, schedule,
// clip and AdamW are the streaming GPU trainer's, so the two compare line by line.
// With no arguments it trains a small model (L4 C128 NH4, T 64) on the shipped tinyshakespeare shards, in a
// few minutes on 2 cores. It writes train_gpt's log and checkpoints, so a run moves between the two trainers.
// It uses no GPU.
#include <chrono>
#include <stdarg.h>
#include <omp.h>
#include "llmc/adamw.h"        // defines: grad_norm_f32grad, adamw_apply_model_f32grad
#include "llmc/args.h"         // defines: TrainArgs, train_args_defaults, train_usage, parse_train_argv
#include "checkpoint.h"        // defines: checkpoint_save, open_run_dir, check_resume_args, state_file_read
#include "llmc/cpu_adam.h"     // defines: cpu_adam_set_threads, cpu_adam_simd_name
#include "llmc/cpu_cores.h"    // defines: usable_cpu_cores, omp_short_spin_reexec
#include "dataloader.h"        // defines: DataLoader, dataloader_init, dataloader_next_batch
#include "llmc/gpt2_cpu.h"     // defines: GPT2CPU, gpt2_cpu_forward, gpt2_cpu_backward
#include "llmc/logger.h"       // defines: TrainLogger, logger_open, logger_train, logger_val, logger_close
#include "llmc/model_file.h"   // defines: GPTConfig, ParamLayout, gpt_init_params, gpt_load_params
#include "llmc/model_specs.h"  // defines: parse_model_spec
#include "llmc/outliers.h"     // defines: OutlierWindow, outlier_skip, training_diverged, die_diverged
#include "llmc/sampler.h"      // defines: random_f32, sample_softmax, print_sample_token
#include "llmc/schedulers.h"   // defines: learning_rate_at
#include "llmc/stop_signal.h"  // defines: stop_signal_install, stop_if_signalled
#include "llmc/tokenizer.h"    // defines: Tokenizer, tokenizer_init
#include "llmc/utils.h"        // defines: die, table_row, table_rule, progress_text, peak_rss_bytes

#define INIT_SEED    1337ull     // weights of a model made from a spec
#define SHUFFLE_SEED 42ull       // order of the train batches
#define SAMPLE_SEED  1234567ull  // sampling RNG
static const char* kTokenizerPath = "gpt2_tokenizer.bin";

static double seconds_now(void) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The defaults of this trainer: small enough that the loss falls clearly within a few minutes on 2 cores.
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

// Dies unless `bytes` fit the available host RAM. Allocations are lazy (overcommit), so without this a
// model too big for the machine gets through malloc and is OOM-killed while it is initialized or trained.
static void check_host_fit(double bytes) {
    const int64_t avail = host_available_bytes();
    const double GiB = 1073741824.0;
    if (avail >= 0 && bytes > avail)
        die("host RAM too small for this config: needs %.1f GiB (fp32 weights, grads, AdamW m, v and "
            "activations), "
            "%.1f GiB available",
            bytes / GiB, avail / GiB);
}

// Builds the model from a spec (random init), an llm.c model file or a Hugging Face checkpoint, per -e, with
// activations for (B, T).
static void build_model(GPT2CPU* model, const char* spec, int B, int T, const char** source) {
    GPTConfig cfg;
    char err[4352];
    const int kind = parse_model_spec(spec, &cfg, err, sizeof err);
    if (kind == 0) die("%s", err);
    warn_if_spec_shadows_path(spec, kind);
    if (kind == 2 && !gpt_read_header(spec, &cfg, err, sizeof err)) die("%s", err);
    if (T > cfg.max_seq_len) die("-t %d exceeds the model's max sequence length %d", T, cfg.max_seq_len);
    const double state_bytes = 16.0 * gpt_layout(&cfg).total;  // params, grads, m, v
    // Before any malloc, in double: the main activation terms (per-layer (N, 12C), attention (B, NH, T, T),
    // logits and probs (N, Vp)), whose int64 sizes in gpt2_cpu_layout_activations can overflow for
    // absurd B, T.
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

// Mean loss over the first `batches` batches of the val loader (reset first, so every evaluation sees
// the same tokens).
static float validation_loss(GPT2CPU* model, DataLoader* val, int64_t batches) {
    dataloader_reset(val);
    double sum = 0.0;
    for (int64_t i = 0; i < batches; i++) {
        if (!dataloader_next_batch(val)) die("%s", val->err);
        char err[600];
        if (!dataloader_check_tokens(val, model->config.vocab_size, err, sizeof err))
            die("val data: %s", err);
        if (!gpt2_cpu_forward(model, val->inputs, val->targets, val->B, val->T)) die("%s", model->error);
        sum += model->mean_loss;
    }
    return (float)(sum / (double)batches);
}

// Generates n tokens after <|endoftext|> and prints them as they come. Each token is one forward pass
// with B=1 over the context, cropped to the last maxT tokens once it grows longer.
static void generate(GPT2CPU* model, const Tokenizer* tok, int n, uint64_t* rng) {
    const int maxT = model->config.max_seq_len, V = model->config.vocab_size,
              Vp = model->config.padded_vocab_size;
    const int eot = tok->init_ok ? tok->eot_token : 50256;
    int* tokens = (int*)malloc(sizeof(int) * (size_t)(n + 1));
    tokens[0] = eot < V ? eot : V - 1;
    printf("generating:\n---\n");
    for (int i = 1; i <= n; i++) {
        const int ctx = i < maxT ? i : maxT;
        if (!gpt2_cpu_forward(model, tokens + i - ctx, NULL, 1, ctx)) die("%s", model->error);
        const float* logits = model->acts.logits + (int64_t)(ctx - 1) * Vp;
        tokens[i] = sample_softmax(logits, V, random_f32(rng));
        print_sample_token(tok, tokens[i]);
        fflush(stdout);
    }
    printf("\n---\n");
    free(tokens);
}

// ----------------------------------------------------------------------------
// The run: what main() sets up, in the order it does so, and what the loop changes.

typedef struct {
    TrainArgs args, defaults;
    GPT2CPU model;
    const char* source;      // where the weights came from (the config table)
    float *adam_m, *adam_v;  // AdamW moments, the model's layout
    DataLoader train, val;
    int accum, total_steps;  // micro-batches per step; the step the run ends at
    int64_t val_batches;
    int64_t resume_step;  // the checkpoint resumed from, -1: a fresh run
    int64_t resume_header[ST_HEADER_SLOTS];
    char resume_model[4200], resume_state[4200];
    Tokenizer tok;
    TrainLogger logger;
    int start_step;
    int64_t adam_t;      // updates applied: the step count less the steps -sl / -sg skipped
    int64_t saved_step;  // the step of the newest checkpoint in -o (-1: none)
    OutlierWindow loss_window, norm_window;  // -sl / -sg
} CpuRun;

// Flags, then the OpenMP team: its default follows the affinity mask but not a cgroup CPU quota (docker
// --cpus).
static void parse_args(CpuRun* r, int argc, char** argv) {
    cpu_train_defaults(&r->defaults);
    r->args = r->defaults;
    char err[4352];  // model.h may report a 4 KiB path; a smaller buffer draws -Wformat-truncation
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

// -o: one run per directory, a fresh run only where no run left files, -y 1 from the newest valid checkpoint
// of either trainer, whose model file replaces -e (which, if given, must describe it).
static void open_output_dir(CpuRun* r, int argc, char** argv) {
    GPTConfig ckpt;
    r->resume_step = open_run_dir(&r->args, r->resume_model, r->resume_state, sizeof r->resume_model, &ckpt,
                                  r->resume_header);
    r->saved_step = r->resume_step;
    if (r->resume_step < 0) return;
    bool model_given = false;
    for (int i = 1; i + 1 < argc; i += 2) model_given |= strcmp(argv[i], "-e") == 0;
    if (model_given) check_resume_model(r->args.model, r->args.output_dir, &ckpt);
    r->args.model = r->resume_model;
}

// The shards, the run's length (-x -1: one epoch), and a resumed run's flags against its checkpoint.
static void open_data(CpuRun* r) {
    TrainArgs* a = &r->args;
    char err[4352];
    if (!dataloader_init(&r->train, a->train_data, a->B, a->T, 1, SHUFFLE_SEED, err, sizeof err))
        die("%s", err);
    if (!dataloader_init(&r->val, a->val_data, a->B, a->T, 0, 0, err, sizeof err)) die("%s", err);
    r->accum = grad_accum_steps(a);
    if (r->train.num_batches < 1)
        die("train data %s has no full batch of B*T = %lld tokens", a->train_data, (long long)a->B * a->T);
    if (r->val.num_batches < 1)
        die("val data %s has no full batch of B*T = %lld tokens", a->val_data, (long long)a->B * a->T);
    r->total_steps = a->max_steps >= 0 ? a->max_steps : (int)(r->train.num_batches / r->accum);
    // -x -1 (one epoch) with fewer batches than one step accumulates would silently train nothing
    if (r->total_steps < 1 && a->max_steps < 0)
        die("train data %s holds %lld batches of B*T, fewer than the %d one step needs (-d)", a->train_data,
            (long long)r->train.num_batches, r->accum);
    r->val_batches = dataloader_eval_batches(&r->val, a->val_max_batches);
    a->max_steps = r->total_steps;  // -x -1 resolved: checkpoints record the run's length
    if (r->resume_step < 0) return;
    check_resume_args(r->resume_header, a, r->total_steps, (int64_t)r->accum * a->B * a->T, a->output_dir);
    if (r->resume_step >= r->total_steps)
        die("resume: the checkpoint in %s is at step %lld, the run ends at step %d: nothing to train "
            "(raise -x)",
            a->output_dir, (long long)r->resume_step, r->total_steps);
}

// The AdamW moments: zero, or the checkpoint's (with the data position and the update count).
static void init_optimizer_state(CpuRun* r) {
    const int64_t total = r->model.layout.total;
    r->adam_m = (float*)calloc((size_t)total, sizeof(float));
    r->adam_v = (float*)calloc((size_t)total, sizeof(float));
    if (!r->adam_m || !r->adam_v)
        die("out of memory for the AdamW state (%lld parameters)", (long long)total);
    if (r->resume_step < 0) return;
    DataLoaderState data_state;
    int64_t step = 0;
    char err[600];
    state_file_read(r->resume_state, total, r->adam_m, r->adam_v, &data_state, &step, &r->adam_t);
    if (!dataloader_set_state(&r->train, &data_state, err, sizeof err)) die("resume: %s", err);
    r->start_step = (int)step;
    printf("resumed from %s (step %d)\n", r->resume_model, r->start_step);
}

static void open_tokenizer_and_log(CpuRun* r) {
    char err[4352];
    if (!tokenizer_init(&r->tok, kTokenizerPath, err, sizeof err))
        fprintf(stderr, "warning: %s; samples are printed as token ids\n", err);
    if (!logger_open(&r->logger, r->args.output_dir, r->resume_step, err, sizeof err)) die("%s", err);
}

static void print_config_table(const CpuRun* r) {
    const TrainArgs* a = &r->args;
    const GPTConfig* c = &r->model.config;
    const ParamLayout* p = &r->model.layout;
    const double mib = 1.0 / (1 << 20);
    const int64_t padded_rows = (int64_t)(c->padded_vocab_size - c->vocab_size) * c->channels;
    table_rule();
    table_row("model", "%s (%s)", a->model, r->source);
    table_row("L / C / NH / maxT", "%d / %d / %d / %d", c->num_layers, c->channels, c->num_heads,
              c->max_seq_len);
    table_row("V / Vp", "%d / %d", c->vocab_size, c->padded_vocab_size);
    table_row("parameters", "%lld (%lld with the padded vocab)", (long long)(p->total - padded_rows),
              (long long)p->total);
    table_row("B / T / accumulation", "%d / %d / %d = %lld tokens per step", a->B, a->T, r->accum,
              (long long)r->accum * a->B * a->T);
    table_row("lr / warmup / schedule", "%.2e / %d / %s to %.2f x lr", a->lr, a->warmup_steps,
              lr_schedule_name(a->lr_schedule), a->final_lr_frac);
    table_row("weight decay / clip", "%.2f / %.2f", a->weight_decay, a->grad_clip);
    table_row("steps", "%d", r->total_steps);
    table_row("train / val batches", "%lld / %lld (val uses %lld)", (long long)r->train.num_batches,
              (long long)r->val.num_batches, (long long)r->val_batches);
    table_row("host memory", "%.1f MiB params+grads+adam, %.1f MiB acts", 4.0 * p->total * 4 * mib,
              (double)r->model.act_capacity * 4 * mib);
    table_row("threads", "%d", omp_get_max_threads());
    table_rule();
    fflush(stdout);
}

// One step: the micro-batches' forward and backward, the divergence check, then AdamW unless -sl / -sg skip
// the update (*skipped says why, else ""). Returns the mean loss; *norm gets the gradient norm.
static double train_step(CpuRun* r, int step, float lr, float* norm, char* skipped, size_t skipped_len) {
    GPT2CPU* m = &r->model;
    char err[600];
    gpt2_cpu_zero_grad(m);
    if (r->args.overfit_single_batch) dataloader_reset(&r->train);  // -a 1: the same first batches every step
    double loss = 0.0;
    for (int micro = 0; micro < r->accum; micro++) {
        if (!dataloader_next_batch(&r->train)) die("%s", r->train.err);
        if (!dataloader_check_tokens(&r->train, m->config.vocab_size, err, sizeof err))
            die("train data: %s", err);
        if (!gpt2_cpu_forward(m, r->train.inputs, r->train.targets, r->args.B, r->args.T))
            die("%s", m->error);
        if (!gpt2_cpu_backward(m)) die("%s", m->error);
        loss += m->mean_loss;
    }
    loss /= r->accum;
    *norm = grad_norm_f32grad(&m->layout, m->grads, r->accum);
    char diverged[96];  // the rule both trainers stop by, before the update
    if (training_diverged(loss, *norm, m->config.vocab_size, diverged, sizeof diverged))
        die_diverged(step + 1, loss, *norm, diverged, r->saved_step);
    if (!outlier_skip(&r->args, &r->loss_window, &r->norm_window, loss, *norm, skipped, skipped_len))
        adamw_apply_model_f32grad(&m->config, &m->layout, m->params, m->grads, r->adam_m, r->adam_v, r->accum,
                                  lr, &r->args, ++r->adam_t, *norm);
    return loss;
}

static void save_checkpoint(CpuRun* r, int steps_done) {
    DataLoaderState data_state = dataloader_get_state(&r->train);
    checkpoint_save(r->args.output_dir, steps_done, r->adam_t, &r->model.config, r->model.params, r->adam_m,
                    r->adam_v, &r->args, r->args.B, r->args.T, &data_state);
    r->saved_step = steps_done;
}

// Ctrl-C / SIGTERM (stop_signal.h): the step in progress finishes, a checkpoint is written (with -o), exit.
static void stop_if_asked(CpuRun* r, int steps_done) {
    stop_if_signalled(steps_done, r->start_step, r->saved_step, r->args.output_dir,
                      [&] { save_checkpoint(r, steps_done); });
}

static void free_run(CpuRun* r) {
    logger_close(&r->logger);
    tokenizer_free(&r->tok);
    dataloader_free(&r->train);
    dataloader_free(&r->val);
    free(r->adam_m);
    free(r->adam_v);
    gpt2_cpu_free(&r->model);
}

int main(int argc, char** argv) {
    omp_short_spin_reexec(argv);  // first: waiting OpenMP threads must not spin away a loaded machine's cores
    static CpuRun run;            // static: zeroed (the outlier windows), and off the stack
    CpuRun* r = &run;
    const TrainArgs* a = &r->args;
    parse_args(r, argc, argv);
    open_output_dir(r, argc, argv);
    build_model(&r->model, a->model, a->B, a->T, &r->source);
    open_data(r);
    init_optimizer_state(r);
    open_tokenizer_and_log(r);
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
        if (sample_tokens(a) > 0 &&
            ((a->sample_every > 0 && step > 0 && step % a->sample_every == 0) || last))
            generate(&r->model, &r->tok, sample_tokens(a), &rng);
        if (last) break;

        const double t0 = seconds_now();
        const float lr = learning_rate_at(a, step, r->total_steps);
        float norm;
        char skipped[96];  // -sl / -sg: why this step updates nothing, or ""
        const double loss = train_step(r, step, lr, &norm, skipped, sizeof skipped);
        const double dt = seconds_now() - t0;
        const int64_t tokens = (int64_t)r->accum * a->B * a->T;
        if (step > r->start_step) {  // the first step includes warm-up costs
            train_seconds += dt;
            train_tokens += tokens;
        }
        char progress[64];
        progress_text(seconds_now() - run_t0, step + 1, r->start_step, r->total_steps, progress,
                      sizeof progress);
        printf("step %4d/%d | loss %.6f | norm %.4f | lr %.2e | ms %.1f | tok/s %.0f%s%s%s\n", step + 1,
               r->total_steps, loss, norm, lr, dt * 1e3, tokens / dt, progress,
               skipped[0] ? " | update skipped: " : "", skipped);
        fflush(stdout);
        logger_train(&r->logger, step + 1, (float)loss, lr, norm);
        if (a->output_dir && a->checkpoint_every > 0 &&
            ((step + 1) % a->checkpoint_every == 0 || step + 1 == r->total_steps))
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
