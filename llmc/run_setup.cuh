// llmc/run_setup.cuh — train_gpt.cu's set-up around the loop: the Run, -e's model, the output directory
// and what a resume finds there, data, tokenizer, logger, printed tables.
// Included after the step (train_gpt.cu), which it runs.
// Not here: the step, the loop and its lines (train_gpt.cu); the memory plan and fit check
// (llmc/run_fit.cuh); the weights and the -sd store (llmc/run_weights.cuh).
#pragma once
#include "llmc/evalloader.h"     // defines: EvalSet, evalset_read, evalset_check_fit (-h)
#include "llmc/plan_advice.cuh"  // defines: print_plan_verdicts, PlanChoice, PLAN_FITS, PLAN_FITS_WITH_ADVICE

#define INIT_SEED      1337ull     // weights of a spec's model, as the CPU trainer's
#define SHUFFLE_SEED   42ull       // order of the train batches
#define SAMPLE_SEED    1234567ull  // sampling RNG
#define SYNTHETIC_SEED 7ull        // tokens of the benchmark mode
static const char* kTokenizerPath = "gpt2_tokenizer.bin";

// -e as Llama: spec or preset 1, model file 2, Hugging Face checkpoint 3. 0: GPT-2.
static int llama_source_kind(const char* spec, LlamaConfig* llama) {
    char err[4352];
    memset(llama, 0, sizeof *llama);
    int kind = parse_llama_spec(spec, llama, err, sizeof err);
    if (kind == 0) die("%s", err);
    if (kind == 2 && llama_is_model_file(spec)) {
        if (!llama_read_header(spec, llama, err, sizeof err)) die("%s", err);
    } else if (kind == 2) {
        const int hf = llama_hf_read_config(spec, llama, err, sizeof err);
        if (hf == 0) die("%s", err);
        if (hf != 1) {
            memset(llama, 0, sizeof *llama);
            return 0;
        }
        kind = 3;
    }
    // multiples of 8 elements keep tensors and layers 16-byte aligned (copies, cuBLASLt)
    const LlamaConfig& c = *llama;
    const int QD = c.num_heads * c.head_dim, KVD = c.num_kv_heads * c.head_dim;
    if (c.hidden_size % 8 || QD % 8 || KVD % 8 || c.intermediate_size % 8)
        die("-e %s: this trainer needs C, NH*HD, KV*HD and I multiples of 8 (C%d, %d, %d, I%d)", spec,
            c.hidden_size, QD, KVD, c.intermediate_size);
    return kind;
}

// -e's config. Llama fills *llama, and cfg with its llama_gpt_config.
static int resolve_model(const char* spec, GPTConfig* cfg, LlamaConfig* llama) {
    char err[4352];
    const int llama_kind = llama_source_kind(spec, llama);
    if (llama_kind) {
        *cfg = llama_gpt_config(llama);
        return llama_kind == 1 ? 1 : 2;
    }
    const int kind = parse_model_spec(spec, cfg, err, sizeof err);
    if (kind == 0) die("%s", err);
    warn_if_spec_shadows_path(spec, kind);
    if (kind == 2 && !gpt_read_header(spec, cfg, err, sizeof err)) die("%s", err);
    return kind;
}

// One step's host tokens, n_micro x N each. pos: chat only, else NULL.
typedef struct {
    int *inputs, *targets, *pos;
} StepTokens;

// The loader's next batch, checked against V, into batch mb of `to`.
static void fetch_batch(DataLoader* dl, int V, const char* which, StepTokens* to, int mb) {
    const int64_t N = (int64_t)dl->B * dl->T;
    if (!dataloader_next_batch(dl)) die("%s", dl->err);
    char err[600];
    if (!dataloader_check_tokens(dl, V, err, sizeof err)) die("%s data: %s", which, err);
    memcpy(to->inputs + mb * N, dl->inputs, (size_t)N * sizeof(int));
    memcpy(to->targets + mb * N, dl->targets, (size_t)N * sizeof(int));
    // chat rows start a conversation: 0 <= pos[t] <= t < T keeps masks in the row
    if (to->pos) memcpy(to->pos + mb * N, dl->pos, (size_t)N * sizeof(int));
}

static void print_timeline(GPT* g, const TimelineSummary& t, const char* output_dir) {
    printf(
        "TIMELINE {\"step_s\": %.4f, \"compute_busy_s\": %.4f, \"h2d_busy_s\": %.4f, \"d2h_busy_s\": %.4f, "
        "\"adam_busy_s\": %.4f, \"gpu_idle_s\": %.4f, \"fwd_wait_s\": %.4f, \"bwd_wait_s\": %.4f",
        t.step_s, t.busy_s[TRACK_COMPUTE], t.busy_s[TRACK_H2D], t.busy_s[TRACK_D2H], t.busy_s[TRACK_ADAM],
        t.gpu_idle_s, t.fwd_wait_s, t.bwd_wait_s);
    if (g->ssd)  // -sd: the disk's busy time
        printf(", \"disk_read_busy_s\": %.4f, \"disk_write_busy_s\": %.4f", t.busy_s[TRACK_DISK_READ],
               t.busy_s[TRACK_DISK_WRITE]);
    printf("}\n");
    if (output_dir) {
        char path[4200];
        snprintf(path, sizeof path, "%s/trace.json", output_dir);
        if (!timeline_write_chrome_trace(g->timeline, path))
            fprintf(stderr, "warning: cannot write %s\n", path);
    }
}

static int compare_double(const void* a, const void* b) {
    const double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

// The run: main's set-up, and the loop's host state.
typedef struct {
    TrainArgs args;
    GpuArgs ga;
    GPTConfig cfg;                                // GPT-2's, or the Llama family's llama_gpt_config
    LlamaConfig llama;                            // the Llama family's config (num_layers 0: GPT-2)
    int kind;                                     // 1: spec (seeded init), 2: model file or checkpoint
    const char* model_arg;                        // -e as given (its tokenizer.json for samples and checks)
    int bench, n_micro, total_steps, start_step;  // n_micro: this rank's micro-batches per step
    int n_micro_all;                              // every rank's (-pn G: G x n_micro)
    int64_t step_tokens;                          // every rank's
    Comm* comm;                                   // the ranks (-pn; one: a Comm of world 1)
    int resident, kept;                           // -R / -K, once -1 is resolved
    MemoryPlan plan;
    bool no_gpu_here;
    cudaDeviceProp prop;
    int64_t gpu_free_at_start, gpu_total, gpu_budget;
    int gpu_sharing;  // ranks of this node on this rank's GPU (1 but where -pn exceeds the GPUs)
    int adam_threads;
    double peak_flops;  // 0: a GPU not in gpu_bf16_peak_flops's table (no MFU)
    const char* peak_label;
    int64_t resume_step;  // -1: a fresh run
    int64_t resume_header[ST_HEADER_FIELDS];
    RunTail resume_tail;  // its -a, -sl, -sg and their windows
    char resume_model[4200], resume_state[4200];
    GPTConfig resume_cfg;         // the checkpoint's config (rank 0 reads it; -e must match it)
    LlamaConfig resume_llama;     //   and the family's (num_layers 0: a GPT-2)
    char ssd_owner[4200];         // -sd: the store's owner, -o's absolute path ("": no checkpoints)
    double disk_rbps, disk_wbps;  // -sd: the probe's read and write rates, bytes/s (0: not measured)
    int disk_direct;              //   the probe ran with O_DIRECT
    bool ssd_dir_made;            //   this run made the -sd directory (a run that cannot start removes it)
    bool ssd_parent_made;         //   several nodes: and the DIR above the node's DIR/node<n>
    // the loop's
    DataLoader train, val;
    int64_t val_batches;
    EvalSet eval;  // -h: the multiple-choice eval file (every rank reads it)
    Tokenizer tok;
    TrainLogger logger;
    StepTokens batch;      // one step's tokens
    double* step_seconds;  // each step's time
    uint64_t sample_rng;
    int sample_tokens;              // per sample (gpu_sample_tokens: 0 for big models)
    int prompt[65536], prompt_len;  // chat data: the samples' prompt (dataloader_chat_prompt), or 0
    Timeline timeline;              // -Y 1
    TimelineSummary last_timeline;  // of the last step
} Run;
// -y 1 of an -sd run's checkpoint: its store holds the streamed layers' state (one of a run in RAM fills a
// new store from its state file: ssd_attach).
static bool resumes_ssd_store(const Run* r) {
    return r->resume_step >= 0 && state_version_ssd(r->resume_header[ST_VERSION]);
}

// -y 1 with -e: -e must name the checkpoint's model, either family (checkpoint.h).
static void check_resume_given(const char* model, const char* dir, const GPTConfig* ckpt,
                               const LlamaConfig* llama_ckpt) {
    LlamaConfig want;
    const bool llama_given = llama_source_kind(model, &want) != 0;
    check_resume_family(model, dir, llama_given, &want, ckpt, llama_ckpt);
}

// -o: one run per directory, -y 1 resumes its newest checkpoint.
// A benchmark writes only trace.json there, -P 1 nothing.
// Several ranks: rank 0 opens it and leaves what it found in NodeShared's note, where the others take it
// once rank 0's set-up passed (rank_gate_wait). A rank with an -e of its own (another node's command line)
// checks it against the checkpoint's config, as rank 0 checks its own.
struct ResumeNote {
    int64_t step, header[ST_HEADER_FIELDS];
    RunTail tail;
    char model[4200], state[4200];
    GPTConfig ckpt;
    LlamaConfig llama_ckpt;  // num_layers 0: the checkpoint is a GPT-2
};
static void open_output_dir_rank0(Run* r);
static void open_output_dir(Run* r) {
    r->model_arg = r->args.model;  // -e as given (a resume replaces args.model with its checkpoint's)
    r->resume_step = -1;
    if (r->comm->world == 1) return open_output_dir_rank0(r);
    static_assert(sizeof(ResumeNote) <= NODE_NOTE_BYTES, "the note holds it");
    ResumeNote* x = (ResumeNote*)r->comm->node->note;
    if (r->comm->rank == 0) {
        open_output_dir_rank0(r);
        x->step = r->resume_step;
        memcpy(x->header, r->resume_header, sizeof x->header);
        x->tail = r->resume_tail;
        memcpy(x->model, r->resume_model, sizeof x->model);
        memcpy(x->state, r->resume_state, sizeof x->state);
        x->ckpt = r->resume_cfg;
        x->llama_ckpt = r->resume_llama;
        if (r->comm->nodes > 1)
            net_bcast(&r->comm->net, NET_MAIN, x, sizeof *x);  // each node reads the files
        return;
    }
    if (r->comm->nodes > 1 && r->comm->local == 0) net_bcast(&r->comm->net, NET_MAIN, x, sizeof *x);
    if (r->bench || r->ga.plan_only) return;
    if (r->args.output_dir && !realpath(r->args.output_dir, r->ssd_owner))  // -sd's owner (several nodes:
        r->ssd_owner[0] = 0;                                                // each leader's store), rank 0's
    if (x->step < 0) return;
    if (r->ga.model_given) check_resume_given(r->args.model, r->args.output_dir, &x->ckpt, &x->llama_ckpt);
    r->resume_step = x->step;
    memcpy(r->resume_header, x->header, sizeof x->header);
    r->resume_tail = x->tail;
    memcpy(r->resume_model, x->model, sizeof x->model);
    memcpy(r->resume_state, x->state, sizeof x->state);
    resume_recorded_hyperparameters(r->resume_header, &r->resume_tail, &r->args);
    r->args.model = r->resume_model;
}
static void open_output_dir_rank0(Run* r) {
    char err[4352];
    const GpuArgs& ga = r->ga;
    if (r->args.output_dir && r->bench && ga.timeline && !ga.plan_only &&
        !lock_output_dir(r->args.output_dir, err, sizeof err))
        die("%s", err);
    if (ga.plan_only && r->args.resume && r->args.output_dir && !ga.model_given) {
        // -P 1 -y 1: the plan of the checkpoint's model (its files neither locked nor checked here)
        const int64_t step = latest_checkpoint(r->args.output_dir);
        if (step >= 0) {
            snprintf(r->resume_model, sizeof r->resume_model, "%s/model_%08lld.bin", r->args.output_dir,
                     (long long)step);
            r->args.model = r->resume_model;
        }
    }
    if (r->bench || ga.plan_only) return;
    GPTConfig& ckpt = r->resume_cfg;
    LlamaConfig& llama_ckpt = r->resume_llama;  // num_layers 0: the checkpoint is a GPT-2
    r->resume_step = open_run_dir(&r->args, r->resume_model, r->resume_state, sizeof r->resume_model, &ckpt,
                                  r->resume_header, &r->resume_tail, &llama_ckpt);
    if (r->args.output_dir && !realpath(r->args.output_dir, r->ssd_owner))
        r->ssd_owner[0] = 0;  // it exists now
    if (r->resume_step < 0) return;
    if (ga.model_given) check_resume_given(r->args.model, r->args.output_dir, &ckpt, &llama_ckpt);
    r->args.model = r->resume_model;
}

// Step token buffers (benchmark: one fixed random batch, as peers) and step times.
static void alloc_step_buffers(Run* r) {
    StepTokens* b = &r->batch;
    const size_t bytes = (size_t)r->step_tokens * sizeof(int);
    b->inputs = (int*)malloc(bytes);
    b->targets = (int*)malloc(bytes);
    b->pos = r->train.kind == DL_CHAT ? (int*)malloc(bytes) : NULL;
    r->step_seconds = (double*)calloc((size_t)r->total_steps + 1, sizeof(double));
    if (!b->inputs || !b->targets || (r->train.kind == DL_CHAT && !b->pos) || !r->step_seconds)
        die("out of host memory for the token buffers");
    uint64_t rng = SYNTHETIC_SEED;
    for (int64_t i = 0; r->bench && i < r->step_tokens; i++) {
        b->inputs[i] = (int)(random_u64(&rng) % (uint64_t)r->cfg.vocab_size);  // 50257 for GPT-2's vocabulary
        b->targets[i] = (int)(random_u64(&rng) % (uint64_t)r->cfg.vocab_size);
    }
}

// Samples' tokenizer: Llama's tokenizer.json, GPT-2's, or none (ids). Returns its path. Several ranks: rank
// 0 alone warns (every rank loads it).
static std::string open_tokenizer(Run* r) {
    char err[4352];
    FILE* warn = r->comm->rank == 0 ? stderr : NULL;
    const bool llama = r->llama.num_layers > 0;
    const std::string json = hf_tokenizer_json_of(r->model_arg);  // a resume's -e: the one given, if any
    if (llama && !json.empty()) {
        if (!tokenizer_init_hf(&r->tok, json.c_str(), err, sizeof err, r->cfg.vocab_size)) {
            if (warn) fprintf(warn, "warning: %s\n", err);
        } else if ((int64_t)r->tok.vocab_size > r->cfg.vocab_size) {
            if (warn)
                fprintf(warn, "warning: %s has %u tokens, the model %d: samples are printed as token ids\n",
                        json.c_str(), r->tok.vocab_size, r->cfg.vocab_size);
            tokenizer_free(&r->tok);
        }
        return r->tok.init_ok ? json : "";
    }
    if (llama && r->cfg.vocab_size != 50257) return "";
    if (!tokenizer_init(&r->tok, kTokenizerPath, err, sizeof err) && warn)
        fprintf(warn, "warning: %s; samples are printed as token ids\n", err);
    return r->tok.init_ok ? kTokenizerPath : "";
}

// Data (none for a benchmark), run length, resume checks; the tokenizer, and the shards against it and
// the model's vocabulary (dataloader_check_model), before the model is built.
// Several nodes: a hash of what every node must run alike (net_started compares them).
static uint64_t run_fingerprint(const Run* r) {
    struct {
        GPTConfig cfg;
        LlamaConfig llama;
        int64_t step_tokens;
        int B, T, total_steps, warmup, schedule, resident, kept, slots;
        float lr, weight_decay, grad_clip, final_lr_frac, skip_loss_z, skip_grad_z;
        // what runs when on every rank (a validation, a checkpoint: sums and barriers) and how (-E, -F, -G)
        int val_every, val_max_batches, checkpoint_every, overfit, vocab_host, flash, epilogues;
        int tier;            // -sd, -sw: every node's store takes part in the round and the checkpoints
        int ssd_keep_state;  // -sk: what every node's leader sends rank 0 at a save
        int64_t data[2][4];  // train and val: shards, tokens, kind and width, vocabulary (the same data)
        uint64_t eval_hash;  // -h: every rank sums its count at the same steps, of the same file
    } x;
    memset(&x, 0, sizeof x);
    x.cfg = r->cfg;
    x.llama = r->llama;
    x.step_tokens = r->step_tokens;
    x.B = r->args.B;
    x.T = r->args.T;
    x.total_steps = r->total_steps;
    x.warmup = r->args.warmup_steps;
    x.schedule = r->args.lr_schedule;
    x.resident = r->ga.resident;
    x.kept = r->ga.kept;
    x.slots = r->ga.num_slots;
    x.lr = r->args.lr;
    x.weight_decay = r->args.weight_decay;
    x.grad_clip = r->args.grad_clip;
    x.final_lr_frac = r->args.final_lr_frac;
    x.skip_loss_z = r->args.skip_loss_z;
    x.skip_grad_z = r->args.skip_grad_z;
    x.val_every = r->args.val_every;
    x.val_max_batches = r->args.val_max_batches;
    x.checkpoint_every = r->args.checkpoint_every;
    x.overfit = r->args.overfit_single_batch;
    x.vocab_host = r->ga.vocab_host;  // as given: check_fit, after the gate, resolves -E -1
    x.flash = r->ga.flash;
    x.epilogues = r->ga.epilogues;
    x.tier = ssd_tier(&r->ga);
    x.ssd_keep_state = r->ga.ssd_keep_state;
    const DataLoader* dl[2] = {&r->train, &r->val};  // empty for a benchmark
    for (int i = 0; i < 2; i++) {
        const int64_t d[4] = {dl[i]->num_shards, dl[i]->total_tokens, dl[i]->kind * 8 + dl[i]->token_bytes,
                              dl[i]->vocab};
        memcpy(x.data[i], d, sizeof d);
    }
    x.eval_hash = r->args.hellaswag ? r->eval.hash : 0;
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    const unsigned char* b = (const unsigned char*)&x;
    for (size_t i = 0; i < sizeof x; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static void open_data(Run* r) {
    char err[4352];
    TrainArgs* a = &r->args;
    DataLoader *train = &r->train, *val = &r->val;
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    memset(&r->tok, 0, sizeof r->tok);
    r->total_steps = r->bench ? r->ga.bench_warmup + r->ga.bench_steps : a->max_steps;
    r->val_batches = 0;
    if (!r->bench) {
        if (!dataloader_open_pair(train, a->train_data, val, a->val_data, a->B, a->T, SHUFFLE_SEED, err,
                                  sizeof err))
            die("%s", err);
        const bool matched =
            run_data_tokenizer(a->output_dir, train, r->resume_step >= 0, r->comm->rank == 0);
        if (r->total_steps < 0) r->total_steps = (int)(train->num_batches / r->n_micro_all);
        if (a->max_steps < 0 && r->total_steps < 1)
            die("train data %s holds fewer than %d batches of B*T: one step needs that many", a->train_data,
                r->n_micro_all);
        r->val_batches = dataloader_eval_batches(val, a->val_max_batches);
        if (a->hellaswag && (!evalset_read(a->hellaswag, &r->eval, err, sizeof err) ||
                             !evalset_check_fit(&r->eval, a->B, a->T, r->cfg.vocab_size, err, sizeof err)))
            die("%s", err);
        a->max_steps = r->total_steps;  // -x -1 resolved: checkpoints record the run's length
        const std::string tok = open_tokenizer(r);
        for (const DataLoader* dl : {train, val}) {
            const int record = model_run_trained_on(a->model, dl, a->output_dir, matched, err, sizeof err);
            if (record < 0) die("%s", err);
            if (dl->vocab <= r->cfg.vocab_size && record > 0) continue;
            const int fits = dataloader_check_model(dl, r->cfg.vocab_size, a->model,
                                                    r->tok.init_ok ? r->tok.token_table : NULL,
                                                    r->tok.vocab_size, tok.c_str(), err, sizeof err);
            if (!fits) die("%s", err);
            if (fits == 2 && dl == train) fprintf(stderr, "warning: %s\n", err);
        }
        const int room = a->T - 1 < 65536 ? a->T - 1 : 65536;
        r->prompt_len = dataloader_chat_prompt(val, r->prompt, room);
    }
    if (r->resume_step >= 0)
        check_resume_args(r->resume_header, a, r->total_steps, r->step_tokens, a->output_dir, &r->resume_tail,
                          r->comm->rank == 0);
    if (r->resume_step >= r->total_steps)
        die("resume: the checkpoint in %s is at step %lld, the run ends at step %d: nothing to train (raise "
            "-x)",
            a->output_dir, (long long)r->resume_step, r->total_steps);
    alloc_step_buffers(r);
}

static void open_logger(Run* r) {
    char err[4352];
    const bool logs = !r->bench && r->comm->rank == 0;  // several ranks: rank 0's log
    if (!logger_open(&r->logger, logs ? r->args.output_dir : NULL, r->resume_step, err, sizeof err))
        die("%s", err);
    r->sample_rng = SAMPLE_SEED;
    const int64_t params = model_layout(&r->cfg, &r->llama).total;
    r->sample_tokens = gpu_sample_tokens(&r->args, &r->ga, params);
    if (!r->bench && r->sample_tokens == 0 && sample_tokens(&r->args) > 0)
        printf(
            "samples off by default (%.1fB parameters%s: each token streams the model once); -g N asks for "
            "them\n",
            params / 1e9, ssd_tier(&r->ga) == TIER_SSD_WEIGHTS ? ", weights on disk" : "");
}

static void print_config_table(const Run* r, const GPT* g) {
    const double GiB = 1073741824.0;
    const TrainArgs& args = r->args;
    const GPTConfig& cfg = r->cfg;
    const MemoryPlan& plan = r->plan;
    const ParamLayout* p = &g->layout;
    const int64_t real_params = gpt_num_real_params(&cfg, p);
    table_rule();
    table_row("model", "%s (%s)", args.model,
              r->kind == 1 && r->llama.num_layers ? "spec, Llama init"
              : r->kind == 1                      ? "spec, GPT-2 init"
              : hf_is_checkpoint(args.model)      ? "Hugging Face checkpoint"
              : r->llama.num_layers               ? "Llama-family model file"
                                                  : "llm.c model file");
    if (r->llama.num_layers)
        table_row("Llama family", "KV %d / hd %d / I %d / rope theta %g%s / %s / %s", r->llama.num_kv_heads,
                  r->llama.head_dim, r->llama.intermediate_size, r->llama.rope_theta,
                  r->llama.rope_llama3 ? " llama3-scaled" : "",
                  r->llama.qkv_bias ? "q/k/v biases" : "no biases",
                  r->llama.tied_embeddings ? "tied lm_head" : "untied lm_head");
    table_row("L / C / NH / maxT", "%d / %d / %d / %d", cfg.num_layers, cfg.channels, cfg.num_heads,
              cfg.max_seq_len);
    table_row("V / Vp", "%d / %d", cfg.vocab_size, cfg.padded_vocab_size);
    table_row("parameters", "%.3f B (%lld; %lld with the padded vocab)", real_params / 1e9,
              (long long)real_params, (long long)p->total);
    if (r->comm->world > 1)
        table_row("B / T / accumulation", "%d / %d / %d on each of %d GPUs = %lld tokens per step", args.B,
                  args.T, r->n_micro, r->comm->world, (long long)r->step_tokens);
    else
        table_row("B / T / accumulation", "%d / %d / %d = %lld tokens per step", args.B, args.T, r->n_micro,
                  (long long)r->step_tokens);
    table_row("lr / warmup / schedule", "%.2e / %d / %s to %.2f x lr", args.lr, args.warmup_steps,
              lr_schedule_name(args.lr_schedule), args.final_lr_frac);
    table_row("weight decay / clip", "%g / %g", args.weight_decay, args.grad_clip);
    table_row("steps", r->bench ? "%d (benchmark: %d warm-up + %d timed)" : "%d", r->total_steps,
              r->ga.bench_warmup, r->ga.bench_steps);
    const int64_t left[2] = {dataloader_rows_left_out(&r->train), dataloader_rows_left_out(&r->val)};
    if ((left[0] || left[1]) && !r->bench)
        table_row("chat rows unused", "%lld train, %lld val (past each shard's last full batch of -b %d)",
                  (long long)left[0], (long long)left[1], args.B);
    if (args.hellaswag && !r->bench)
        table_row("HellaSwag (-h)", "%s: %zu examples, %d a batch", args.hellaswag, r->eval.examples.size(),
                  args.B / EVAL_CHOICES);
    if (r->ga.ssd_dir)
        table_row("host memory",
                  "%.2f GiB (fp32 master+m+v of the prefix %.2f, pinned bf16 %.2f, SSD ring %.2f)",
                  plan.host_bytes / GiB, plan.master_adam / GiB, plan.pinned / GiB, plan.ssd_ring / GiB);
    else
        table_row("host memory", "%.2f GiB (fp32 master+m+v %.2f, pinned bf16 %.2f)", plan.host_bytes / GiB,
                  plan.master_adam / GiB, plan.pinned / GiB);
    if (r->ga.ssd_dir)
        table_row(r->ga.ssd_weights ? "SSD tier (-sd -sw 1)" : "SSD tier (-sd)",
                  "%s: %.2f GiB on disk, %.3f GiB ring; per step %.2f GB read, %.2f GB written",
                  r->ga.ssd_dir, plan.ssd_disk / GiB, plan.ssd_ring / GiB, plan.ssd_read_per_step / 1e9,
                  plan.ssd_write_per_step / 1e9);
    table_row("GPU memory", "%.2f GiB (checkpoints %.2f, %d weight slots %.3f)", g->gpu_bytes / GiB,
              plan.layer_inputs / GiB, r->ga.num_slots, plan.slots / GiB);
    if (g->vocab)
        table_row("vocabulary tensors", "host RAM, CPU AdamW; the head in chunks of %lld rows (-E 1)",
                  (long long)g->vocab->rows);
    else if (r->llama.num_layers) table_row("vocabulary tensors", "GPU, with their AdamW state (-E 0)");
    const char* by_R = r->ga.resident == LAYERS_AUTO ? ", by -R auto" : "";
    const char* by_K = r->ga.kept == LAYERS_AUTO ? ", by -K auto" : "";
    if (r->resident)
        table_row("GPU-resident layers", "%d of %d (%.2f GiB with their AdamW state)%s", r->resident,
                  cfg.num_layers, plan.resident_layers / GiB, by_R);
    else table_row("GPU-resident layers", "%d of %d (all streamed)%s", r->resident, cfg.num_layers, by_R);
    if (r->kept)
        table_row("kept activations", "last %d of %d layers (%.2f GiB; no recompute there)%s", r->kept,
                  cfg.num_layers, plan.kept / GiB, by_K);
    else table_row("kept activations", "%d of %d layers (all recomputed)%s", r->kept, cfg.num_layers, by_K);
    if (g->attn_path == ATTN_CUDNN)
        table_row(
            "attention", "%s, workspace %.1f MiB%s", cudnn_attention_note,
            cudnn_attention_workspace / 1048576.0,
            g->flash ? "" : "; a chat micro-batch it cannot run: cuBLAS + softmax (T x T scores planned)");
    else
        table_row("attention", "%s%s%s",
                  g->flash ? "fused tensor-core kernels (flash_attention.cuh)"
                  : r->ga.flash
                      ? "cuBLAS GEMMs + softmax, T x T scores stored (head size not 32, 64, 80, 96, "
                        "128 or GPU before sm_80)"
                      : "cuBLAS GEMMs + softmax, T x T scores stored (-F 0)",
                  cudnn_attention_note[0] ? "; cuDNN not used: " : "", cudnn_attention_note);
    table_row("GEMM epilogues", "%s",
              r->ga.epilogues ? "bias, residual, GELU fused (cuBLASLt)" : "separate kernels (-G 0)");
    table_row("device", "%s, %.1f GiB", r->prop.name, r->gpu_total / GiB);
    if (r->comm->backend != COMM_SINGLE && r->comm->nodes > 1)
        table_row("GPUs (-pn, -pN)",
                  "%d ranks, %d nodes of %d; a node keeps 1/%d of the fp32 state; sums: %s", r->comm->world,
                  r->comm->nodes, r->comm->local_world, r->comm->nodes, r->comm->note);
    else if (r->comm->backend != COMM_SINGLE)
        table_row("GPUs (-pn)", "%d ranks; host arrays once on the node; sums: %s", r->comm->world,
                  r->comm->note);
    if (r->peak_flops > 0) table_row("MFU vs", "%.0f TFLOP/s (%s)", r->peak_flops / 1e12, r->peak_label);
    else table_row("MFU vs", "n/a (this GPU is not in gpu_bf16_peak_flops's table)");
    table_row("cpu adamw", "%d threads, %s", r->adam_threads, cpu_adam_simd_name());
    table_rule();
    fflush(stdout);
}

// After the first step: GPU memory taken beyond the plan (the margin check).
static void print_gpu_margin(const Run* r, const GPT* g, int step) {
    const double GiB = 1073741824.0;
    size_t free_now = 0, total_now = 0;
    cudaCheck(cudaMemGetInfo(&free_now, &total_now));
    const int n = std::max(r->gpu_sharing, 1);  // ranks sharing the GPU: all of their plans
    char who[64] = "this process";
    if (n > 1) snprintf(who, sizeof who, "the %d ranks on this GPU", n);
    const double beyond =
        ((double)(r->gpu_free_at_start - (int64_t)free_now) - (double)g->gpu_bytes * n) / GiB;
    printf(
        "GPU memory after step %d: %.2f GiB free of %.2f, %s %.2f GiB %s %s plan "
        "(-R / -K, auto or -1, leave %.2f GiB for that)\n",
        step + 1, free_now / GiB, total_now / GiB, who, fabs(beyond), beyond < 0 ? "within" : "beyond",
        n > 1 ? "their" : "its", n * (gpu_reserve_bytes + gpu_margin_bytes) / GiB);
}

// Median step time, and for a benchmark the RESULT line dev/bench reads.
static void print_median_and_result(const Run* r, const GPT* g, int timed, double median) {
    const double GiB = 1073741824.0, flops = step_flops(g, r->step_tokens), peak = r->peak_flops;
    char mfu[32] = "MFU n/a", mfu_json[32] = "null", peak_json[32] = "null";
    if (peak > 0) {
        snprintf(mfu, sizeof mfu, "MFU %.1f%%", 100.0 * flops / median / peak);
        snprintf(mfu_json, sizeof mfu_json, "%.4f", flops / median / peak);
        snprintf(peak_json, sizeof peak_json, "%.1f", peak / 1e12);
    }
    printf("median step time over %d steps: %.1f ms, %.0f tok/s, %.1f model TFLOP/s (%s)\n", timed,
           median * 1e3, r->step_tokens / median, flops / median / 1e12, mfu);
    if (!r->bench) return;
    const GPTConfig& c = r->cfg;
    printf(
        "RESULT {\"mode\": \"stream\", \"model\": \"%s\", \"params_B\": %.4f, \"L\": %d, \"C\": %d, \"NH\": "
        "%d, "
        "\"B\": %d, \"T\": %d, \"tokens_per_step\": %lld, \"grad_accum\": %d, \"slots\": %d, "
        "\"resident_layers\": %d, "
        "\"kept_layers\": %d, \"flash\": %d, \"attention\": \"%s\", \"epilogues\": %d, "
        "\"step_s\": %.5f, "
        "\"tok_per_s\": %.1f, \"model_TFLOPs\": %.2f, \"mfu\": %s, \"peak_TFLOPs\": %s, \"peak_gpu_GiB\": "
        "%.3f, "
        "\"host_GiB\": %.2f}\n",
        r->args.model, g->layout.total / 1e9, c.num_layers, c.channels, c.num_heads, r->args.B, r->args.T,
        (long long)r->step_tokens, r->n_micro, r->ga.num_slots, r->resident, r->kept, (int)g->flash,
        g->attn_path == ATTN_CUDNN   ? "cudnn"
        : g->attn_path == ATTN_FUSED ? "fused"
                                     : "cublas",
        r->ga.epilogues, median, r->step_tokens / median, flops / median / 1e12, mfu_json, peak_json,
        g->gpu_bytes / GiB, r->plan.host_bytes / GiB);
}

// -Y 1: -R and -K advice from the last step's timeline and spare GPU memory.
static void print_tuning_advice(const Run* r, const TimelineSummary* t) {
    const double GiB = 1073741824.0;
    size_t gpu_free = 0, gpu_total = 0;
    cudaCheck(cudaMemGetInfo(&gpu_free, &gpu_total));
    // the budget's rest (free, or -V less this run's use), less -R -1's margins
    const int64_t spare =
        std::min<int64_t>((int64_t)gpu_free, r->gpu_budget - (r->gpu_free_at_start - (int64_t)gpu_free)) -
        gpu_reserve_bytes - gpu_margin_bytes;
    const int64_t resident_bytes = r->plan.resident_layer, kept_bytes = r->plan.kept_layer;
    const Placement next =
        suggest_placement(t, r->cfg.num_layers, {r->resident, r->kept}, spare, resident_bytes, kept_bytes);
    printf(
        "tuning, from the last step's timeline: the forward pass waited %.3f s for weights (CPU AdamW %.1f "
        "ms per "
        "streamed layer, forward %.1f ms per layer), the backward pass %.3f s; %.2f GiB of GPU memory to "
        "spare "
        "(%.2f GiB per GPU-resident layer, %.2f GiB per kept one)",
        t->fwd_wait_s, t->adam_layers ? 1e3 * t->busy_s[TRACK_ADAM] / t->adam_layers : 0.0,
        t->fwd_layers ? 1e3 * t->fwd_busy_s / t->fwd_layers : 0.0, t->bwd_wait_s,
        std::max<int64_t>(spare, 0) / GiB, resident_bytes / GiB, kept_bytes / GiB);
    if (next.resident != r->resident || next.kept != r->kept)
        printf(": try -R %d -K %d\n", next.resident, next.kept);
    else printf(": -R %d -K %d fit this step\n", r->resident, r->kept);
}

// Run summary: bytes streamed, peak memory, median step, RESULT, -Y 1's advice.
static void print_run_summary(const Run* r, GPT* g) {
    const double GiB = 1073741824.0;
    printf(
        "streamed over the run: %.2f GB host->GPU (%lld layer copies, %lld layers reused from the previous "
        "pass), "
        "%.2f GB GPU->host; last CPU AdamW round %.3f s\n",
        g->stream.bytes_h2d / 1e9, (long long)g->stream.layer_copies, (long long)g->stream.layer_reuses,
        g->stream.bytes_d2h / 1e9, g->opt->last_round_seconds);
    if (g->ssd && g->ssd->weights_on_disk)
        printf(
            "bf16 weights read from the SSD tier over the run (-sw 1%s): %lld layers, %.2f GB; %lld layers "
            "taken from the AdamW round's handoff buffers instead\n",
            g->ssd->whole ? ", this rank's, from the node's whole layers: no handoff on several nodes"
            : g->sw_files ? ", rank 0's; the other ranks read the handoff's layers too"
                          : "",
            (long long)g->stream.reads.count, g->stream.reads.count * g->layout.layer_stride * 2 / 1e9,
            (long long)g->stream.reads.lent);
    if (g->attn_ragged[1])  // the run's path was cuDNN; say how much of it was not
        printf(
            "attention: %lld of %lld chat micro-batches ran %s, not cuDNN (the first one's reason is "
            "above)\n",
            (long long)g->attn_ragged[1], (long long)(g->attn_ragged[0] + g->attn_ragged[1]),
            g->flash ? "our fused kernel" : "cuBLAS + softmax");
    size_t gpu_free = 0, gpu_total = 0;  // all buffers exist from step 1: use now is the peak
    cudaCheck(cudaMemGetInfo(&gpu_free, &gpu_total));
    printf(
        "peak host memory: %.3f GiB resident; GPU memory: %.2f GiB allocated by this run (%.2f GiB in use on "
        "the device of %.2f)\n",
        peak_rss_bytes() / GiB, g->gpu_bytes / GiB, (gpu_total - gpu_free) / GiB, gpu_total / GiB);
    if (r->comm->nodes > 1) {  // each node keeps its part of the fp32 state (load_node_weights)
        double resident, share;
        node_state_bytes(g, &resident, &share);
        printf("node 0's RAM holds %s of the fp32 weights, m and v (its share: %s; all: %s)\n",
               SizeText(resident).s, SizeText(share).s, SizeText(12.0 * g->host_state_count).s);
    }
    const int first_timed = r->bench ? r->ga.bench_warmup : r->start_step + 1;  // the first is warm-up
    const int timed = r->total_steps - first_timed;
    if (timed > 0) {
        double* sorted = (double*)malloc(sizeof(double) * (size_t)timed);
        memcpy(sorted, r->step_seconds + first_timed, sizeof(double) * (size_t)timed);
        qsort(sorted, (size_t)timed, sizeof(double), compare_double);
        const double median = sorted[timed / 2];
        free(sorted);
        print_median_and_result(r, g, timed, median);
    }
    if (g->timeline && timed > 0) print_tuning_advice(r, &r->last_timeline);
    fflush(stdout);
}
