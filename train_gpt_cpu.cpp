// train_gpt_cpu.cpp — trains a GPT-2 on the CPU with the reference model (gpt2_cpu.h). Flags, data, schedule,
// clip and AdamW are the streaming GPU trainer's, so the two compare line by line.
// With no arguments it trains a small model (L4 C128 NH4, T 64) on the shipped tinyshakespeare shards, in a
// few minutes on 2 cores. It writes train_gpt's log and checkpoints, so a run moves between the two trainers.
// It uses no GPU.
#include <chrono>
#include <stdarg.h>
#include <omp.h>
#include "adamw.h"        // defines: grad_norm_f32grad, adamw_apply_model_f32grad
#include "args.h"         // defines: TrainArgs, train_args_defaults, train_usage, parse_train_argv
#include "checkpoint.h"   // defines: checkpoint_save, open_run_dir, check_resume_args, state_file_read
#include "cpu_adam.h"     // defines: cpu_adam_set_threads, cpu_adam_simd_name
#include "cpu_cores.h"    // defines: usable_cpu_cores, omp_short_spin_reexec
#include "dataloader.h"   // defines: DataLoader, dataloader_init, dataloader_next_batch
#include "gpt2_cpu.h"     // defines: GPT2CPU, gpt2_cpu_forward, gpt2_cpu_backward
#include "logger.h"       // defines: TrainLogger, logger_open, logger_train, logger_val, logger_close
#include "model.h"        // defines: GPTConfig, ParamLayout, gpt_init_params, gpt_load_params
#include "model_specs.h"  // defines: parse_model_spec
#include "outliers.h"     // defines: OutlierWindow, outlier_skip, training_diverged, die_diverged
#include "sampler.h"      // defines: random_f32, sample_softmax, print_sample_token
#include "schedulers.h"   // defines: learning_rate_at
#include "stop_signal.h"  // defines: stop_signal_install, stop_if_signalled
#include "tokenizer.h"    // defines: Tokenizer, tokenizer_init
#include "utils.h"        // defines: die, table_row, table_rule, progress_text, peak_rss_bytes

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

int main(int argc, char** argv) {
    omp_short_spin_reexec(
        argv);  // first: OpenMP threads that wait must not spin away a loaded machine's cores
    TrainArgs args, defaults;
    cpu_train_defaults(&defaults);
    args = defaults;
    char err[4352];  // model.h may report a 4 KiB path; a smaller buffer draws -Wformat-truncation
    const int parsed = parse_train_argv(argc, argv, &args, err, sizeof err);
    if (parsed == 2) {
        printf("usage: %s [flags]\n", argv[0]);
        train_usage(stdout, &defaults);
        return 0;
    }
    if (parsed == 0) die("%s (run %s -h for the flags)", err, argv[0]);
    // OpenMP's default team follows the affinity mask but not a cgroup CPU quota (docker --cpus)
    const int cores = usable_cpu_cores();
    if (!getenv("OMP_NUM_THREADS") && cores < omp_get_max_threads()) omp_set_num_threads(cores);
    // -o: one run per directory, a fresh run only where no run left files, -y 1 from the newest valid
    // checkpoint of either trainer, whose model file replaces -e (which, if given, must describe it)
    int64_t resume_step = -1, resume_header[ST_HEADER_SLOTS];
    char resume_model[4200] = "", resume_state[4200] = "";
    GPTConfig ckpt;
    resume_step = open_run_dir(&args, resume_model, resume_state, sizeof resume_model, &ckpt, resume_header);
    if (resume_step >= 0) {
        bool model_given = false;
        for (int i = 1; i + 1 < argc; i += 2) model_given |= strcmp(argv[i], "-e") == 0;
        GPTConfig want;
        const int kind = model_given ? parse_model_spec(args.model, &want, err, sizeof err) : 0;
        if (model_given && (kind == 0 || (kind == 2 && !gpt_read_header(args.model, &want, err, sizeof err))))
            die("%s", err);
        if (kind != 0 && memcmp(&want, &ckpt, sizeof want) != 0)  // GPTConfig is six ints, no padding
            die("-e %s does not match the checkpoint in %s (L%d C%d NH%d maxT%d V%d): drop -e or choose "
                "another -o",
                args.model, args.output_dir, ckpt.num_layers, ckpt.channels, ckpt.num_heads, ckpt.max_seq_len,
                ckpt.vocab_size);
        args.model = resume_model;
    }

    // model
    GPT2CPU model;
    const char* source = "";
    build_model(&model, args.model, args.B, args.T, &source);
    const GPTConfig* cfg = &model.config;
    const ParamLayout* p = &model.layout;
    float* adam_m = (float*)calloc((size_t)p->total, sizeof(float));
    float* adam_v = (float*)calloc((size_t)p->total, sizeof(float));
    if (!adam_m || !adam_v) die("out of memory for the AdamW state (%lld parameters)", (long long)p->total);

    // data, tokenizer, log
    DataLoader train, val;
    if (!dataloader_init(&train, args.train_data, args.B, args.T, 1, SHUFFLE_SEED, err, sizeof err))
        die("%s", err);
    if (!dataloader_init(&val, args.val_data, args.B, args.T, 0, 0, err, sizeof err)) die("%s", err);
    const int accum = grad_accum_steps(&args);
    if (train.num_batches < 1)
        die("train data %s has no full batch of B*T = %lld tokens", args.train_data,
            (long long)args.B * args.T);
    if (val.num_batches < 1)
        die("val data %s has no full batch of B*T = %lld tokens", args.val_data, (long long)args.B * args.T);
    const int total_steps = args.max_steps >= 0 ? args.max_steps : (int)(train.num_batches / accum);
    // -x -1 (one epoch) with fewer batches than one step accumulates would silently train nothing
    if (total_steps < 1 && args.max_steps < 0)
        die("train data %s holds %lld batches of B*T, fewer than the %d one step needs (-d)", args.train_data,
            (long long)train.num_batches, accum);
    const int64_t val_batches = dataloader_eval_batches(&val, args.val_max_batches);
    args.max_steps = total_steps;  // -x -1 resolved: checkpoints record the run's length
    if (resume_step >= 0) {
        check_resume_args(resume_header, &args, total_steps, (int64_t)accum * args.B * args.T,
                          args.output_dir);
        if (resume_step >= total_steps)
            die("resume: the checkpoint in %s is at step %lld, the run ends at step %d: nothing to train "
                "(raise -x)",
                args.output_dir, (long long)resume_step, total_steps);
    }
    Tokenizer tok;
    if (!tokenizer_init(&tok, kTokenizerPath, err, sizeof err))
        fprintf(stderr, "warning: %s; samples are printed as token ids\n", err);
    int64_t adam_t = 0;  // updates applied: the step count less the steps -sl / -sg skipped
    int start_step = 0;
    if (resume_step >= 0) {
        DataLoaderState data_state;
        int64_t step = 0;
        state_file_read(resume_state, p->total, adam_m, adam_v, &data_state, &step, &adam_t);
        if (!dataloader_set_state(&train, &data_state, err, sizeof err)) die("resume: %s", err);
        start_step = (int)step;
        printf("resumed from %s (step %d)\n", resume_model, start_step);
    }
    TrainLogger logger;
    if (!logger_open(&logger, args.output_dir, resume_step, err, sizeof err)) die("%s", err);

    // the config table
    const double mib = 1.0 / (1 << 20);
    const int64_t padded_rows = (int64_t)(cfg->padded_vocab_size - cfg->vocab_size) * cfg->channels;
    table_rule();
    table_row("model", "%s (%s)", args.model, source);
    table_row("L / C / NH / maxT", "%d / %d / %d / %d", cfg->num_layers, cfg->channels, cfg->num_heads,
              cfg->max_seq_len);
    table_row("V / Vp", "%d / %d", cfg->vocab_size, cfg->padded_vocab_size);
    table_row("parameters", "%lld (%lld with the padded vocab)", (long long)(p->total - padded_rows),
              (long long)p->total);
    table_row("B / T / accumulation", "%d / %d / %d = %lld tokens per step", args.B, args.T, accum,
              (long long)accum * args.B * args.T);
    table_row("lr / warmup / schedule", "%.2e / %d / %s to %.2f x lr", args.lr, args.warmup_steps,
              lr_schedule_name(args.lr_schedule), args.final_lr_frac);
    table_row("weight decay / clip", "%.2f / %.2f", args.weight_decay, args.grad_clip);
    table_row("steps", "%d", total_steps);
    table_row("train / val batches", "%lld / %lld (val uses %lld)", (long long)train.num_batches,
              (long long)val.num_batches, (long long)val_batches);
    table_row("host memory", "%.1f MiB params+grads+adam, %.1f MiB acts", 4.0 * p->total * 4 * mib,
              (double)model.act_capacity * 4 * mib);
    table_row("threads", "%d", omp_get_max_threads());
    table_rule();
    fflush(stdout);

    // training
    uint64_t rng = SAMPLE_SEED;
    double train_seconds = 0.0;
    int64_t train_tokens = 0;
    static OutlierWindow loss_window, norm_window;  // -sl / -sg (static: zeroed, and off the stack)
    int64_t saved_step = resume_step;               // the step of the newest checkpoint in -o (-1: none)
    auto save = [&](int steps_done) {
        DataLoaderState data_state = dataloader_get_state(&train);
        checkpoint_save(args.output_dir, steps_done, adam_t, cfg, model.params, adam_m, adam_v, &args, args.B,
                        args.T, &data_state);
        saved_step = steps_done;
    };
    // Ctrl-C / SIGTERM (stop_signal.h): the step in progress finishes, a checkpoint is written
    // (with -o), exit.
    stop_signal_install();
    auto stop_if_asked = [&](int steps_done) {
        stop_if_signalled(steps_done, start_step, saved_step, args.output_dir, [&] { save(steps_done); });
    };
    const double run_t0 = seconds_now();
    for (int step = start_step; step <= total_steps; step++) {
        stop_if_asked(step);  // a signal during validation or sampling
        const int last = step == total_steps;
        if (args.val_every > 0 && (step % args.val_every == 0 || last)) {
            const float vl = validation_loss(&model, &val, val_batches);
            printf("val loss %.6f\n", vl);
            logger_val(&logger, step, vl);
        }
        if (sample_tokens(&args) > 0 &&
            ((args.sample_every > 0 && step > 0 && step % args.sample_every == 0) || last))
            generate(&model, &tok, sample_tokens(&args), &rng);
        if (last) break;

        const double t0 = seconds_now();
        gpt2_cpu_zero_grad(&model);
        if (args.overfit_single_batch) dataloader_reset(&train);  // -a 1: the same first batches every step
        double loss = 0.0;
        for (int micro = 0; micro < accum; micro++) {
            if (!dataloader_next_batch(&train)) die("%s", train.err);
            if (!dataloader_check_tokens(&train, cfg->vocab_size, err, sizeof err))
                die("train data: %s", err);
            if (!gpt2_cpu_forward(&model, train.inputs, train.targets, args.B, args.T))
                die("%s", model.error);
            if (!gpt2_cpu_backward(&model)) die("%s", model.error);
            loss += model.mean_loss;
        }
        loss /= accum;
        const float lr = learning_rate_at(&args, step, total_steps);
        const float norm = grad_norm_f32grad(p, model.grads, accum);
        char diverged[96];  // the rule both trainers stop by, before the update
        if (training_diverged(loss, norm, cfg->vocab_size, diverged, sizeof diverged))
            die_diverged(step + 1, loss, norm, diverged, saved_step);
        char skipped[96];  // -sl / -sg: why this step updates nothing, or ""
        if (!outlier_skip(&args, &loss_window, &norm_window, loss, norm, skipped, sizeof skipped))
            adamw_apply_model_f32grad(cfg, p, model.params, model.grads, adam_m, adam_v, accum, lr, &args,
                                      ++adam_t, norm);
        const double dt = seconds_now() - t0;
        const int64_t tokens = (int64_t)accum * args.B * args.T;
        if (step > start_step) {
            train_seconds += dt;
            train_tokens += tokens;
        }  // the first step includes warm-up costs
        char progress[64];
        progress_text(seconds_now() - run_t0, step + 1, start_step, total_steps, progress, sizeof progress);
        printf("step %4d/%d | loss %.6f | norm %.4f | lr %.2e | ms %.1f | tok/s %.0f%s%s%s\n", step + 1,
               total_steps, loss, norm, lr, dt * 1e3, tokens / dt, progress,
               skipped[0] ? " | update skipped: " : "", skipped);
        fflush(stdout);
        logger_train(&logger, step + 1, (float)loss, lr, (float)norm);
        if (args.output_dir && args.checkpoint_every > 0 &&
            ((step + 1) % args.checkpoint_every == 0 || step + 1 == total_steps))
            save(step + 1);
        stop_if_asked(step + 1);
    }
    stop_if_asked(total_steps);  // a signal during the last validation or sample
    if (train_tokens > 0)
        printf("total average iteration time: %.1f ms, %.0f tok/s\n",
               1e3 * train_seconds / (total_steps - start_step - 1), train_tokens / train_seconds);
    printf("peak host memory: %.2f GiB resident\n", peak_rss_bytes() / 1073741824.0);

    logger_close(&logger);
    tokenizer_free(&tok);
    dataloader_free(&train);
    dataloader_free(&val);
    free(adam_m);
    free(adam_v);
    gpt2_cpu_free(&model);
    return 0;
}
