// llmc/run_setup.cuh — train_gpt.cu's set-up around the loop: -e's model, data, output directory,
// memory plan and fit check, weights (RAM or SSD), tokenizer, printed tables.
// Included after the step (train_gpt.cu), which it runs; gpt_build and load_state come from
// llmc/gpt_build.cuh and llmc/gpt_checkpoint.cuh.
// Not here: the step, the loop and its lines (train_gpt.cu).
#pragma once
#include <fcntl.h>                 // defines: open, O_RDONLY
#include <sys/file.h>              // defines: flock
#include "llmc/evalloader.h"       // defines: EvalSet, evalset_read, evalset_check_fit (-h)
#include "llmc/llama_kernels.cuh"  // defines: llama_kernels_load
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
    return r->resume_step >= 0 && r->resume_header[ST_VERSION] == STATE_VERSION_SSD;
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
    char model[4200], state[4200];
    GPTConfig ckpt;
    LlamaConfig llama_ckpt;  // num_layers 0: the checkpoint is a GPT-2
};
static void open_output_dir_rank0(Run* r);
static void open_output_dir(Run* r) {
    r->resume_step = -1;
    if (r->comm->world == 1) return open_output_dir_rank0(r);
    static_assert(sizeof(ResumeNote) <= NODE_NOTE_BYTES, "the note holds it");
    ResumeNote* x = (ResumeNote*)r->comm->node->note;
    if (r->comm->rank == 0) {
        open_output_dir_rank0(r);
        x->step = r->resume_step;
        memcpy(x->header, r->resume_header, sizeof x->header);
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
    memcpy(r->resume_model, x->model, sizeof x->model);
    memcpy(r->resume_state, x->state, sizeof x->state);
    resume_recorded_hyperparameters(r->resume_header, &r->args);
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
                                  r->resume_header, &llama_ckpt);
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
    const std::string json = std::string(r->args.model) + "/tokenizer.json";
    if (llama && is_dir(r->args.model) && file_exists(json)) {
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
            if (dl->vocab <= r->cfg.vocab_size && model_run_trained_on(a->model, dl, a->output_dir, matched))
                continue;
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
        check_resume_args(r->resume_header, a, r->total_steps, r->step_tokens, a->output_dir,
                          r->comm->rank == 0);
    if (r->resume_step >= r->total_steps)
        die("resume: the checkpoint in %s is at step %lld, the run ends at step %d: nothing to train (raise "
            "-x)",
            a->output_dir, (long long)r->resume_step, r->total_steps);
    alloc_step_buffers(r);
}

// -sd, fresh run: DIR must hold the store, allocated at full size (a store there now is replaced first: its
// files count as free; one of another run is refused by ssd_store_create).
static void check_ssd_space(const Run* r) {
    const char* dir = r->ga.ssd_dir;
    // a resume opens its store; one of a run in RAM makes a new one (ssd_attach)
    if (!dir || resumes_ssd_store(r)) return;
    char why[4400];
    if (!ssd_dir_usable(dir, why, sizeof why)) die("%s", why);
    int64_t avail = dir_free_bytes(dir);
    if (avail < 0) die("-sd %s: %s", dir, strerror(errno));
    avail += ssd_store_held_bytes(dir);
    if (avail < r->plan.ssd_disk)
        die("-sd %s: the optimizer state needs %s on disk (two generations of the fp32 weights, m and "
            "v%s of %d streamed layers%s), the filesystem has %s free",
            dir, SizeText((double)r->plan.ssd_disk).s, r->ga.ssd_weights ? " and the bf16 weights" : "",
            r->cfg.num_layers - r->resident, ssd_grads_in_ram ? "" : ", and their gradients",
            SizeText((double)avail).s);
}

// Fit check before large allocations: host RAM, then GPU.
static void check_host_fit(const Run* r) {
    const GpuArgs* ga = &r->ga;
    const int64_t host_avail = host_memory_to_count_on(ga);
    // -E 1 on several ranks: each its own pinned staging; the rest once a node
    const int64_t host_bytes = r->plan.host_bytes + (int64_t)(ga->ranks - 1) * r->plan.vocab_staging;
    if (host_avail >= 0 && host_bytes > host_avail)
        die("host RAM too small for this config: needs %s (fp32 weights + AdamW m, v + pinned bf16 "
            "weights and grads), %s %s",
            SizeText((double)host_bytes).s, SizeText((double)host_avail).s,
            ga->host_gib > 0
                ? "given by -M"
                : "available (MemAvailable; where memory grows as it is used, -M GiB says how much)");
}
// Without a GPU: one line. Several ranks: rank 0 says it before the others start (rank_gate_open).
static void require_gpu(const Run* r) {
    if (r->no_gpu_here)
        die("no CUDA device found: this trainer needs an NVIDIA GPU; ./train_gpt_cpu trains on the CPU");
}
// -R auto / -K auto (the default): placed by the plan's model of the step (plan_place_layers) on `budget`,
// at `peak` FLOP/s; -K -1 beside -R auto is filled there too. Returns the placement without what auto placed
// (none.step_s 0 where neither is auto).
static PlanEval place_layers_auto(Run* r, int64_t budget, double peak) {
    GpuArgs* ga = &r->ga;
    const bool auto_R = ga->resident == LAYERS_AUTO, auto_K = ga->kept == LAYERS_AUTO,
               fill_K = auto_R && ga->kept == -1;
    PlanEval none;
    memset(&none, 0, sizeof none);
    if (!auto_R && !auto_K) return none;
    PlanTarget t = plan_target(&r->cfg, &r->llama, r->args.T, ga);
    t.gpu_budget = budget, t.peak_flops = peak;
    const PlanChoice c = {r->args.B, r->n_micro, r->resident, r->kept, ga->vocab_host, ssd_tier(ga)};
    const PlanEval e = plan_place_layers(&t, c, auto_R, auto_K, fill_K, &none);
    r->resident = e.c.resident;
    r->kept = e.c.kept;
    r->plan = gpt_memory_plan(&r->cfg, r->args.B, r->args.T, r->n_micro, ga->num_slots, r->resident, r->kept,
                              ssd_tier(ga), &r->llama, ga->vocab_host > 0);
    return none;
}
// The line for what -R auto / -K auto placed, where they placed any layer.
static void print_auto_placement(const Run* r, int64_t budget, double peak, const PlanEval& none) {
    const GpuArgs* ga = &r->ga;
    const bool auto_R = ga->resident == LAYERS_AUTO, auto_K = ga->kept == LAYERS_AUTO;
    if (none.step_s <= 0 || (r->resident == none.c.resident && r->kept == none.c.kept)) return;
    PlanTarget t = plan_target(&r->cfg, &r->llama, r->args.T, ga);
    t.gpu_budget = budget, t.peak_flops = peak;
    const PlanChoice c = {r->args.B, r->n_micro, r->resident, r->kept, ga->vocab_host, ssd_tier(ga)};
    const PlanEval e = plan_evaluate(&t, c);
    char step[32], without[32], adam[32], fwd[32];
    plan_seconds(step, sizeof step, e.step_s);
    plan_seconds(without, sizeof without, none.step_s);
    plan_seconds(adam, sizeof adam, none.adam_s);
    plan_seconds(fwd, sizeof fwd, none.fwd_s);
    printf(
        "layers placed by the plan (-R %s, -K %s): -R %d -K %d, a step of %s in its model against %s with -R "
        "%d "
        "-K %d (whose CPU AdamW takes %s beside a %s forward)\n",
        auto_R ? "auto" : "given",
        auto_K           ? "auto"
        : ga->kept == -1 ? "-1"
                         : "given",
        r->resident, r->kept, step, without, none.c.resident, none.c.kept, adam, fwd);
}
// This GPU's dense bf16 peak, or an H100's where the name is not known.
static double plan_peak_flops(const char* gpu_name) {
    const char* label = NULL;
    const double peak = gpu_name ? gpu_bf16_peak_flops(gpu_name, &label) : 0;
    return peak > 0 ? peak : PLAN_H100_PEAK_FLOPS;
}

// The plan's GPU memory within the budget, else one line that says what to lower (and the -sd directory
// goes again if this run made it: only its lock is in it yet).
static void check_gpu_fit(const Run* r, int sharing) {
    const double GiB = 1073741824.0;
    const GpuArgs* ga = &r->ga;
    const MemoryPlan& m = r->plan;
    if (m.gpu_bytes + gpu_reserve_bytes <= r->gpu_budget) return;
    char budget_text[512];
    if (r->gpu_budget < r->gpu_free_at_start)  // -V, a shared GPU's share, or the least of the ranks'
        snprintf(budget_text, sizeof budget_text, "%.2f GiB %s (%.2f GiB free on %s)", r->gpu_budget / GiB,
                 sharing > 1       ? "for this rank, its share of a GPU the node's ranks share"
                 : ga->gpu_gib > 0 ? "given by -V"
                                   : "for every rank, the least any rank has free",
                 r->gpu_free_at_start / GiB, r->prop.name);
    else
        snprintf(budget_text, sizeof budget_text, "%.2f GiB free on %s", r->gpu_free_at_start / GiB,
                 r->prop.name);
    if (r->ssd_dir_made) {
        unlink((std::string(ga->ssd_dir) + "/ssd_lock").c_str());
        rmdir(ga->ssd_dir);  // not empty (another's file came meanwhile): it stays
    }
    if (r->ssd_parent_made) rmdir(parent_dir(ga->ssd_dir).c_str());  // several nodes: DIR, if empty
    die("GPU memory too small for this config: needs %.2f GiB (of which %.2f GiB layer-input checkpoints: "
        "lower -d, "
        "-b or -t; %.2f GiB for %d GPU-resident layers: lower -R; %.2f GiB for %d layers' kept activations: "
        "lower "
        "-K) and %.2f GiB kept free for CUDA and the libraries, %s",
        m.gpu_bytes / GiB, m.layer_inputs / GiB, m.resident_layers / GiB, r->resident, m.kept / GiB, r->kept,
        gpu_reserve_bytes / GiB, budget_text);
}

static void ssd_open_dir(Run* r);
static void ssd_ring_auto(Run* r, double peak, const char* rates_are = "this disk's");
static void check_fit(Run* r) {
    GpuArgs* ga = &r->ga;
    check_ssd_space(r);
    check_host_fit(r);
    require_gpu(r);
    // before the context: a host thread waiting on the GPU sleeps, not spins
    cudaCheck(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
    int devices = 1;
    cudaCheck(cudaGetDeviceCount(&devices));
    const int device = r->comm->local % devices;  // -pn: the node's rank r on GPU r
    cudaCheck(cudaGetDeviceProperties(&r->prop, device));
    cudaCheck(cudaSetDevice(device));
    int shared_most = 1;  // the most ranks on one GPU of this node
    const int sharing = comm_ranks_on_my_gpu(r->comm, device, &r->prop, &shared_most);  // by UUID
    if (shared_most > 1 && r->comm->local == 0)
        fprintf(stderr,
                "warning: %d ranks on this node's %d GPU%s: ranks share a GPU, each planned for its share\n",
                r->comm->local_world, devices, devices > 1 ? "s" : "");
    comm_init(r->comm, sharing);  // NCCL's communicator, or the host's sums
    r->peak_flops = gpu_bf16_peak_flops(r->prop.name, &r->peak_label) * r->comm->world;  // MFU of all GPUs
    // cuBLAS handles and kernels first: what they take is not free for the plan
    matmul_handles_create();
    kernels_load();
    if (r->llama.num_layers) llama_kernels_load();
    // the attention path: cuDNN if it loads, builds this shape's graphs and agrees with our kernel
    const int hs = attention_head_size(&r->cfg, &r->llama), NH = r->cfg.num_heads;
    const int NKV = r->llama.num_layers ? r->llama.num_kv_heads : NH;
    attention_path_select(flash_attention_flag, r->args.B, r->args.T, NH, NKV, hs, r->train.kind == DL_CHAT,
                          r->comm->world == 1);
    if (r->comm->world > 1) {  // one path on every rank: cuDNN where every rank can run it, by the mean times
        double a[4] = {cudnn_attention_works ? 0.0 : 1.0, attention_timed ? 0.0 : 1.0, attention_ms[0],
                       attention_ms[1]};
        comm_sum_host(r->comm, a, 4);
        const float ms[2] = {(float)(a[2] / r->comm->world), (float)(a[3] / r->comm->world)};
        if (cudnn_attention_works && a[0] > 0)
            snprintf(cudnn_attention_note, sizeof cudnn_attention_note, "%d of %d ranks cannot run it",
                     (int)a[0], r->comm->world);
        if (cudnn_attention_works && a[0] > 0 && r->comm->rank == 0)
            fprintf(stderr, "attention: cuDNN not used: %s (their lines say why); %s instead\n",
                    cudnn_attention_note,
                    flash_attention_usable(hs) ? "our fused kernels" : "cuBLAS + softmax");
        attention_path_settle(flash_attention_flag, a[0] == 0, a[1] == 0, ms, hs);
    }
    if (flash_attention_usable(hs)) flash_attention_load(hs);
    if (flash_attention_flag == ATTN_FUSED && !flash_attention_usable(hs) && r->comm->rank == 0)
        fprintf(stderr,  // as -F 2's "cuDNN not used" line (the table alone said it: a hostile trial)
                "attention: -F 1's fused kernels not used: they need head size 32, 64, 80, 96 or 128 and "
                "sm_80 or "
                "newer (head size %d, sm_%d%d here); cuBLAS + softmax instead\n",
                hs, r->prop.major, r->prop.minor);
    size_t gpu_free = 0, gpu_total = 0;
    cudaCheck(cudaMemGetInfo(&gpu_free, &gpu_total));
    r->gpu_free_at_start = (int64_t)gpu_free;
    r->gpu_total = (int64_t)gpu_total;
    // ranks sharing this GPU (-pn over fewer GPUs: tests, a trial): each plans for its share of the memory
    // free once every rank has its context (none allocates before the agreements below), so that -R / -K,
    // auto or -1, and the fit check do not count the same free memory twice
    r->gpu_sharing = sharing;
    if (shared_most > 1) {  // every rank of the node, or none: a barrier
        node_barrier(r->comm);
        cudaCheck(cudaMemGetInfo(&gpu_free, &gpu_total));
        r->gpu_free_at_start = (int64_t)gpu_free;
    }
    r->gpu_budget = gpu_memory_budget(ga, r->gpu_free_at_start) / sharing;
    if (r->comm->world > 1) {  // every rank plans for the least budget: the same -E, -R, -K everywhere
        double budget = (double)r->gpu_budget;
        comm_sum_host(r->comm, &budget, 1, true);
        r->gpu_budget = (int64_t)budget;
    }
    const int vocab_host = ga->vocab_host;
    ga->vocab_host = vocab_host_for(&r->cfg, r->args.B, r->args.T, r->n_micro, ga->num_slots, ga,
                                    r->gpu_budget, &r->llama);
    // -E -1: the same on every rank, the host if any rank's GPU needs it. Every rank sums, whatever its -E:
    // a node whose -E differs (refused at the gate: run_fingerprint) must not wait in a sum the others skip
    if (r->comm->world > 1) {
        double neg = vocab_host < 0 ? -(double)ga->vocab_host : 0.0;
        comm_sum_host(r->comm, &neg, 1, true);
        if (vocab_host < 0) ga->vocab_host = (int)-neg;
    }
    r->plan = place_layers(&r->cfg, r->args.B, r->args.T, r->n_micro, ga->num_slots, ga, r->gpu_budget,
                           &r->resident, &r->kept, &r->llama);
    const double peak = plan_peak_flops(r->prop.name);
    const PlanEval none = place_layers_auto(r, r->gpu_budget, peak);
    if (vocab_host < 0 && ga->vocab_host > 0) {  // -E -1 chose the host: its RAM must hold them too
        printf(
            "vocabulary tensors: in host RAM (-E -1: they do not fit the GPU's budget with the layers')\n");
        check_host_fit(r);
    }
    if (r->comm->world >
        1) {  // every rank the same -R and -K (-1, auto: placed by its GPU's memory): the least
        double rk[2] = {(double)r->resident, (double)r->kept};
        comm_sum_host(r->comm, rk, 2, true);
        if ((int)rk[0] != r->resident || (int)rk[1] != r->kept) {
            r->resident = (int)rk[0];
            r->kept = (int)rk[1];
            r->plan = gpt_memory_plan(&r->cfg, r->args.B, r->args.T, r->n_micro, ga->num_slots, r->resident,
                                      r->kept, ssd_tier(ga), &r->llama, ga->vocab_host > 0);
        }
    }
    print_auto_placement(r, r->gpu_budget, peak, none);
    if (ga->ssd_dir && r->comm->local == 0) {  // the probe first (its buffers are gone before the model's
        ssd_open_dir(r);  // arrive), then -sb auto; several ranks: the node's leader's store
        ssd_ring_auto(r, peak);
    }
    if (ga->ssd_dir && r->comm->world > 1) {  // the other ranks plan with their node's ring and disk
        struct {
            double ring, rbps, wbps;
            int direct;
        } disk = {ssd_ring_budget_bytes, r->disk_rbps, r->disk_wbps, r->disk_direct};
        node_share(r->comm, &disk, sizeof disk);  // several nodes: each node's store, its own drive
        ssd_ring_budget_bytes = disk.ring, r->disk_rbps = disk.rbps, r->disk_wbps = disk.wbps;
        r->disk_direct = disk.direct;
        r->plan = gpt_memory_plan(&r->cfg, r->args.B, r->args.T, r->n_micro, ga->num_slots, r->resident,
                                  r->kept, ssd_tier(ga), &r->llama, ga->vocab_host > 0);
    }
    check_gpu_fit(r, sharing);  // a -sd directory this run made goes again
}

// -sb auto (the default with -sd): the ring plan_ssd_ring finds at the disk's probed rates (-P 1 prints the
// same for -sr's), where it shortens the round's disk work and half of the host RAM the plan leaves holds it;
// else as large a ring as that half holds, the default SSD_RING_MIN pieces at least. Not where that does not
// shorten the step: a ring moves the round's disk work into the backward, where the disk's reads and writes
// may bound the step anyway. Says what it chose.
static void ssd_ring_auto(Run* r, double peak, const char* rates_are) {
    GpuArgs* ga = &r->ga;
    if (!ga->ssd_dir || ga->ssd_ring_gib >= 0) return;
    const int64_t avail = host_memory_to_count_on(ga);
    const char* why_not = r->disk_rbps <= 0 || r->disk_wbps <= 0 ? "the disk's rates were not measured"
                          : avail < 0 ? "the host RAM it may take is unknown: -M GiB says it"
                                      : NULL;
    if (why_not) {
        printf("SSD tier's ring (-sb auto): the default %d pieces (%s)\n", SSD_RING_MIN, why_not);
        return;
    }
    const double GiB = 1073741824.0;
    PlanTarget t = plan_target(&r->cfg, &r->llama, r->args.T, ga);
    t.gpu_budget = r->gpu_budget, t.peak_flops = peak;
    t.disk_read_Bps = r->disk_rbps, t.disk_write_Bps = r->disk_wbps;
    const PlanChoice given = {r->args.B,   r->n_micro, r->resident, r->kept, ga->vocab_host > 0 ? 1 : 0,
                              ssd_tier(ga)};
    ssd_ring_budget_bytes = 0;
    const PlanEval now = plan_evaluate(&t, given);
    PlanEval best;
    int64_t most = 0;
    int64_t ring = plan_ssd_ring(&t, given, &best, &most);
    const double piece = plan_ssd_piece_bytes(&t, given);
    const int64_t wanted = ring;  // half of what the plan leaves, beside the default ring
    const double room = 0.5 * (double)(avail - now.m.host_bytes) + (double)now.m.ssd_ring;
    ring = std::min<int64_t>(ring, (int64_t)(room / piece));
    if (ring <= SSD_RING_MIN) {
        char enough[128];  // the rates, whichever way it went: a fast disk takes this branch
        snprintf(enough, sizeof enough, "enough at %s %.2f / %.2f GB/s", rates_are, r->disk_rbps / 1e9,
                 r->disk_wbps / 1e9);
        printf("SSD tier's ring (-sb auto): the default %d pieces (%s)\n", SSD_RING_MIN,
               wanted <= SSD_RING_MIN ? enough
               : best.round_disk_s >= now.round_disk_s
                   ? "a larger one would not shorten the round's disk work"
                   : "half of the host RAM the plan leaves holds no more");
        return;
    }
    ssd_ring_budget_bytes = ((double)ring + 0.5) * piece;
    const PlanEval chosen = plan_evaluate(&t, given);
    if (chosen.step_s > 0.99 * now.step_s) {  // the disk's reads and writes bound the step anyway
        ssd_ring_budget_bytes = 0;
        printf(
            "SSD tier's ring (-sb auto): the default %d pieces (a ring of %lld would not shorten the step, "
            "%.2f s: the disk's %.2f s a step bound it at %s %.2f / %.2f GB/s)\n",
            SSD_RING_MIN, (long long)ring, now.step_s, now.disk_s, rates_are, r->disk_rbps / 1e9,
            r->disk_wbps / 1e9);
        return;
    }
    r->plan = gpt_memory_plan(&r->cfg, r->args.B, r->args.T, r->n_micro, ga->num_slots, r->resident, r->kept,
                              ssd_tier(ga), &r->llama, ga->vocab_host > 0);
    printf(
        "SSD tier's ring (-sb auto): %lld of the round's %lld pieces, %.2f GiB of host RAM: the round's disk "
        "work in the next forward %.2f s (%.2f s with the default %d), at %s %.2f / %.2f GB/s\n",
        (long long)ring, (long long)(most - 1), r->plan.ssd_ring / GiB, chosen.round_disk_s, now.round_disk_s,
        SSD_RING_MIN, rates_are, r->disk_rbps / 1e9, r->disk_wbps / 1e9);
    if (!ga->plan_only) check_host_fit(r);  // -P 1 says its verdicts itself
}

// An -sd checkpoint's stores hold the parts of the nodes it ran on (SSD_TAIL_NODE_PART): every node refuses
// another cut at once, in one line.
static void check_resume_node_parts(const Run* r) {
    char err[4352];
    int64_t tail[SSD_TAIL_FIELDS];
    if (!state_file_ssd_tail(r->resume_state, tail, err, sizeof err)) die("resume: %s", err);
    const Comm* c = r->comm;
    const int64_t S = model_layout(&r->cfg, &r->llama).layer_stride, was = tail[SSD_TAIL_NODE_PART],
                  now = c->nodes > 1 ? comm_node_stride(c, S) : 0;
    const char* anew =
        "and -sk 1 to make its next checkpoints resume on any cut, or start a new run from its model file "
        "with -e (AdamW's moments start again)";
    if (was == now) return;
    if (was == 0)
        die("resume: the checkpoint's SSD store holds whole layers (a run on one node): resume it on one "
            "node "
            "(any -pn), %s",
            anew);
    if (was < 0 || was > S)
        die("resume: %s: a damaged SSD-tier tail (node part %lld)", r->resume_state, (long long)was);
    const long long nodes = (S + was - 1) / was;
    if (now == 0)
        die("resume: the checkpoint's SSD stores hold each layer in parts of %lld parameters on %lld nodes "
            "(%s/node<n>): resume on as many nodes with the -pn it ran with, %s",
            (long long)was, nodes, r->ga.ssd_dir, anew);
    die("resume: the checkpoint's SSD stores hold each layer in parts of %lld parameters on %lld nodes; -pN "
        "%d "
        "-pn %d would cut parts of %lld: resume with the -pN and -pn it ran with, %s",
        (long long)was, nodes, c->nodes, c->local_world, (long long)now, anew);
}

// Model, shape checks, memory plan. -R -1 / -K -1 count as 0 here.
static void plan_run(Run* r) {
    const TrainArgs& a = r->args;
    const GpuArgs& ga = r->ga;
    r->kind = resolve_model(a.model, &r->cfg, &r->llama);
    if (ga.vocab_host > 0 && !r->llama.num_layers)
        die("-E 1 moves the Llama family's vocabulary tensors to the host: GPT-2's stay on the GPU");
    if (!r->llama.num_layers) r->ga.vocab_host = 0;  // -E -1 decides with the GPU's budget (check_fit)
    if (a.T > r->cfg.max_seq_len)
        die("-t %d exceeds the model's max sequence length %d (a preset or spec takes :T<n>, e.g. -e "
            "13b:T2048)",
            a.T, r->cfg.max_seq_len);
    r->n_micro_all = grad_accum_steps(&a);
    r->step_tokens = (int64_t)r->n_micro_all * a.B * a.T;
    const int G = ga.ranks * ga.nodes;  // each rank takes n_micro of the step's micro-batches
    char ranks_text[48];
    snprintf(ranks_text, sizeof ranks_text, ga.nodes > 1 ? "-pn %d -pN %d" : "-pn %d", ga.ranks, ga.nodes);
    if (r->n_micro_all % G != 0)
        die("%s: the step's %d micro-batches (-d %lld / (-b %d * -t %d)) do not divide among %d GPUs: "
            "make -d a multiple of %lld",
            ranks_text, r->n_micro_all, (long long)r->step_tokens, a.B, a.T, G, (long long)G * a.B * a.T);
    r->n_micro = r->n_micro_all / G;
    if (ga.resident > r->cfg.num_layers)
        die("-R %d: the model has only %d layers", ga.resident, r->cfg.num_layers);
    if (ga.kept > r->cfg.num_layers) die("-K %d: the model has only %d layers", ga.kept, r->cfg.num_layers);
    r->resident = ga.resident > 0 ? ga.resident : 0;
    r->kept = ga.kept > 0 ? ga.kept : 0;
    int devices = 0;
    r->no_gpu_here = cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0;
    cudaGetLastError();
    if (ga.plan_only && r->no_gpu_here)
        flash_attention_device_major = 9;  // plan for an H100's attention path
    r->plan = gpt_memory_plan(&r->cfg, a.B, a.T, r->n_micro, ga.num_slots, r->resident, r->kept,
                              ssd_tier(&ga), &r->llama, ga.vocab_host > 0);
    if (ga.ssd_dir && ga.resident >= r->cfg.num_layers)
        die("-sd %s with -R %d: every layer is GPU-resident, no state is left to put on disk", ga.ssd_dir,
            ga.resident);
    if (r->resume_step >= 0) {  // streamed state: in an SSD store, or the checkpoint's files
        const bool ckpt_ssd = resumes_ssd_store(r);
        if (ckpt_ssd && !ga.ssd_dir)
            die("resume: the checkpoint of step %lld in %s keeps its streamed layers' state in an SSD store: "
                "resume with -sd DIR (the run's -sd directory); with -sk 1 too, its next checkpoints hold "
                "all "
                "the state and resume without -sd",
                (long long)r->resume_step, a.output_dir);
        // a checkpoint of a run in RAM resumes with -sd too: its state fills a new store (ssd_attach)
        if (ckpt_ssd) check_resume_node_parts(r);
    }
    if (ga.ssd_dir && ga.nodes > 1) {  // each node's store holds its part: every node needs one (the RAM
        const int64_t S = model_layout(&r->cfg, &r->llama).layer_stride;  // tier takes empty parts)
        const int64_t stride = slice_of(S, G) * ga.ranks;
        if ((int64_t)(ga.nodes - 1) * stride >= S)
            die("-sd on %d nodes of %d GPUs: a layer's %lld parameters, in parts of %lld, leave the last "
                "node "
                "none: use fewer nodes",
                ga.nodes, ga.ranks, (long long)S, (long long)stride);
    }
}

// The -sd disk's read and write rates (bytes/s): ssd_probe_bandwidth's, up to 1 GiB for 3 s (tests shorten
// it: SSD_PROBE_SECONDS, SSD_PROBE_MIB). false with why.
static bool ssd_probe_dir(const char* dir, double* rbps, double* wbps, int* direct, char* why, size_t n) {
    const char* sec = getenv("SSD_PROBE_SECONDS");
    const char* mib = getenv("SSD_PROBE_MIB");
    const double seconds = sec ? atof(sec) : 3.0;
    const int64_t max_bytes = mib && atoll(mib) > 0 ? atoll(mib) << 20 : (int64_t)1 << 30;
    return ssd_probe_bandwidth(dir, seconds, max_bytes, rbps, wbps, direct, why, n) == 0;
}
// A run holds DIR's store (ssd_lock_dir's lock): -P 1 then measures nothing there. Takes no lock of its own.
static bool ssd_dir_in_use(const char* dir) {
    const int fd = open((std::string(dir) + "/ssd_lock").c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return false;
    const bool busy = flock(fd, LOCK_SH | LOCK_NB) != 0;
    close(fd);
    return busy;
}

// -P 1: print the plan, its verdicts and advice; returns the exit status (PLAN_FITS ...).
// With -V, -R -1 / -K -1 / -E -1 fit that budget.
static int print_plan_only(Run* r) {
    GpuArgs* ga = &r->ga;
    char why[4400];
    bool elsewhere = false;  // -sd under a folder not here: another machine's disk, its free space unknown
    if (ga->ssd_dir && !ssd_dir_usable(ga->ssd_dir, why, sizeof why, &elsewhere)) {
        if (!elsewhere) die("%s", why);
        fprintf(
            stderr,
            "warning: %s: planned as another machine's disk, its free space not checked (a run here refuses "
            "it)\n",
            why);
    }
    struct stat st;  // -sd DIR there and no -sr: its disk's rates, measured as a run measures them
    if (ga->ssd_dir && ga->disk_read_gbs <= 0 && stat(ga->ssd_dir, &st) == 0) {
        double rbps = 0, wbps = 0;
        int direct = 0;
        if (ssd_dir_in_use(ga->ssd_dir)) snprintf(why, sizeof why, "a run is using it, not measured now");
        else if (ssd_probe_dir(ga->ssd_dir, &rbps, &wbps, &direct, why, sizeof why)) {
            ga->disk_read_gbs = (float)(rbps / 1e9);
            ga->disk_write_gbs = (float)(wbps / 1e9);
            ga->disk_rates_measured = 1;
            printf(
                "-sd %s: its disk measured at %.2f GB/s read, %.2f GB/s write%s: the plan takes these (-sr "
                "R,W plans for another disk)\n",
                ga->ssd_dir, rbps / 1e9, wbps / 1e9, direct ? ", direct I/O" : ", buffered (no O_DIRECT)");
        }
        if (!ga->disk_rates_measured)
            fprintf(stderr, "warning: -sd %s: %s; the plan assumes a disk's rates (-sr R,W gives them)\n",
                    ga->ssd_dir, why);
    }
    ga->vocab_host = ga->gpu_gib > 0
                         ? vocab_host_for(&r->cfg, r->args.B, r->args.T, r->n_micro, ga->num_slots, ga,
                                          gpu_memory_budget(ga, INT64_MAX), &r->llama)
                         : std::max(ga->vocab_host, 0);  // -E -1 without -V: on the GPU
    r->plan = gpt_memory_plan(&r->cfg, r->args.B, r->args.T, r->n_micro, ga->num_slots, r->resident, r->kept,
                              ssd_tier(ga), &r->llama, ga->vocab_host > 0);
    // -R / -K, auto or -1, placed for -V's memory, else this GPU's free memory (as the run places them)
    int64_t budget = ga->gpu_gib > 0 ? gpu_memory_budget(ga, INT64_MAX) : -1;
    double peak = PLAN_H100_PEAK_FLOPS;
    PlanEval none;
    memset(&none, 0, sizeof none);
    cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    if (!r->no_gpu_here && cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
        peak = plan_peak_flops(prop.name);
        size_t free_b = 0, total_b = 0;
        if (budget < 0 && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) budget = (int64_t)free_b;
    }
    cudaGetLastError();
    if (budget >= 0) {
        r->plan = place_layers(&r->cfg, r->args.B, r->args.T, r->n_micro, ga->num_slots, ga, budget,
                               &r->resident, &r->kept, &r->llama);
        none = place_layers_auto(r, budget, peak);
    }
    if (ga->ssd_dir && ga->ssd_ring_gib < 0) {  // -sb auto, as a run takes it, at the rates above
        r->disk_rbps = ga->disk_read_gbs > 0 ? ga->disk_read_gbs * 1e9 : PLAN_DISK_READ_BPS;
        r->disk_wbps = ga->disk_write_gbs > 0 ? ga->disk_write_gbs * 1e9 : PLAN_DISK_WRITE_BPS;
        r->gpu_budget = budget >= 0 ? budget : (int64_t)(PLAN_DEFAULT_GPU_GIB * 1073741824.0);
        ssd_ring_auto(r, peak,
                      ga->disk_rates_measured ? "the measured"
                      : ga->disk_read_gbs > 0 ? "-sr's"
                                              : "the assumed");
    }
    print_memory_plan(&r->cfg, r->args.B, r->args.T, r->n_micro, ga->num_slots, r->resident, r->kept, ga,
                      r->plan, r->no_gpu_here, &r->llama);
    print_auto_placement(r, budget, peak, none);
    const PlanChoice given = {r->args.B, r->n_micro, r->resident, r->kept, ga->vocab_host, ssd_tier(ga)};
    return print_plan_verdicts(&r->cfg, &r->llama, r->args.T, ga, given, r->no_gpu_here);
}

// -sd: disk bandwidth and disk time per step. A failed probe only warns.
// -sd's directory made (a resume's must be there), locked for this run until it exits, and its disk's read
// and write rates measured (r->disk_*; 0 where the probe failed, said in one line).
static void ssd_open_dir(Run* r) {
    const char* dir = r->ga.ssd_dir;
    char err[4352];
    struct stat st;  // a resume's store is there already: a wrong -sd is not made (and left behind)
    if (resumes_ssd_store(r) && stat(dir, &st) != 0)
        die("resume: -sd %s: %s; a resume reads the SSD store from the run's -sd DIR", dir, strerror(errno));
    r->ssd_dir_made = mkdir(dir, 0755) == 0;
    if (!r->ssd_dir_made && errno != EEXIST) die("-sd %s: cannot create it: %s", dir, strerror(errno));
    if (ssd_lock_dir(dir, err, sizeof err) < 0) die("-sd: %s", err);  // held until exit
    if (!ssd_probe_dir(dir, &r->disk_rbps, &r->disk_wbps, &r->disk_direct, err, sizeof err)) {
        fprintf(stderr, "warning: -sd %s: %s; the disk's part of a step is not estimated\n", dir, err);
        r->disk_rbps = r->disk_wbps = 0;
    }
}
// -sd on several nodes: each node's store in DIR/node<n>, on each node's own drive (or in a folder every node
// sees: each takes its own); DIR is made here, the node's folder by ssd_open_dir.
static void ssd_node_dir(Run* r) {
    static std::string node_dir;
    const char* dir = r->ga.ssd_dir;
    if (!dir || r->comm->nodes == 1) return;
    char why[4352];
    if (!ssd_dir_usable(dir, why, sizeof why)) die("%s", why);
    // every rank tries; the leader's removes it on a failed start. A resume of the stores makes nothing: a
    // wrong -sd is said by ssd_open_dir (DIR/node<n> is not there), not made and left behind.
    const bool made = !resumes_ssd_store(r) && mkdir(dir, 0755) == 0;
    if (!made && !resumes_ssd_store(r) && errno != EEXIST)
        die("-sd %s: cannot create it: %s", dir, strerror(errno));
    r->ssd_parent_made = made && r->comm->local == 0;
    node_dir = std::string(dir) + "/node" + std::to_string(r->comm->node_rank);
    r->ga.ssd_dir = node_dir.c_str();
}
static void ssd_print_bandwidth(const Run* r) {
    const char* dir = r->ga.ssd_dir;
    const double rbps = r->disk_rbps, wbps = r->disk_wbps;
    const int direct = r->disk_direct;
    if (rbps <= 0 || wbps <= 0) return;
    const MemoryPlan& m = r->plan;
    printf(
        "disk %s: read %.2f GB/s, write %.2f GB/s%s; one step moves %.2f GB from it and %.2f GB to it: "
        "%.3f s of disk time per step at these rates, of which the round's part (%.3f s) runs in the next "
        "forward pass, which waits for each layer's update\n",
        dir, rbps / 1e9, wbps / 1e9, direct ? " (O_DIRECT)" : " (buffered: the filesystem refused O_DIRECT)",
        m.ssd_read_per_step / 1e9, m.ssd_write_per_step / 1e9,
        m.ssd_read_per_step / rbps + m.ssd_write_per_step / wbps,
        m.ssd_round_reads / rbps + m.ssd_round_writes / wbps);
}

// Llama: -e's parameters [lo, hi), in file order, into dst.
static void llama_load_window(const Run* r, float* dst, int64_t lo, int64_t hi) {
    char err[4352];
    const char* model = r->args.model;
    const int ok = llama_is_model_file(model)
                       ? llama_load_params(model, &r->llama, dst, err, sizeof err, lo, hi)
                       : llama_hf_load_window(model, &r->llama, dst, lo, hi, err, sizeof err);
    if (!ok) die("%s", err);
}

// -sd, and several nodes: the prefix (embeddings, layers 0..R-1) into g->master: init, -e or checkpoint.
static void ssd_load_prefix(Run* r, GPT* g) {
    char err[4352];
    const ParamLayout* p = &g->layout;
    const int R = g->resident_layers;
    const bool init = r->kind == 1 && r->resume_step < 0;
    if (init && is_llama(g)) {
        llama_init_embeddings(&r->llama, g->master, INIT_SEED);
        for (int l = 0; l < R; l++)
            llama_init_layer(&r->llama, l, g->master + gpt_layer_offset(p, l), INIT_SEED);
    } else if (init) {
        gpt_init_embeddings(&r->cfg, g->master, INIT_SEED);
        for (int l = 0; l < R; l++) gpt_init_layer(&r->cfg, l, g->master + gpt_layer_offset(p, l), INIT_SEED);
    } else if (is_llama(g)) {  // the file is [layers | embeddings]
        llama_load_window(r, g->master, p->total - p->embed_count, p->total);
        if (R > 0) llama_load_window(r, g->master + p->embed_count, 0, (int64_t)R * p->layer_stride);
    } else if (!gpt_load_params(r->args.model, &r->cfg, g->master, err, sizeof err, 0, g->resident_count)) {
        die("%s", err);
    }
}

// -sd, fresh run: streamed layer l's fp32 weights, from init or -e.
static void ssd_load_layer(Run* r, const GPT* g, int l, float* layer) {
    char err[4352];
    const ParamLayout* p = &g->layout;
    const int64_t lo = (int64_t)l * p->layer_stride;  // the family's file: layer l's offset
    if (is_llama(g) && r->kind == 1) llama_init_layer(&r->llama, l, layer, INIT_SEED);
    else if (is_llama(g)) llama_load_window(r, layer, lo, lo + p->layer_stride);
    else if (r->kind == 1) gpt_init_layer(&r->cfg, l, layer, INIT_SEED);
    else if (!gpt_load_params(r->args.model, &r->cfg, layer, err, sizeof err, gpt_layer_offset(p, l),
                              gpt_layer_offset(p, l) + p->layer_stride))
        die("%s", err);
}

// Several nodes with -E 1: the vocabulary tensors' bf16 copy whole (every GPU reads every chunk), their fp32
// weights in the node's part only (vocab_node_part). From init or a model file 16M floats at a time; from a
// Hugging Face checkpoint a tensor at a time (it reads whole tensors: Llama 3 405B's table is 8.4 GB).
static void load_node_vocab(Run* r, GPT* g) {
    const ParamLayout* p = &g->layout;
    const int64_t E = p->embed_count;
    int64_t lo, hi;
    vocab_node_part(g, g->comm->node_rank, &lo, &hi);
    uint16_t* bf16 = g->stream.weights_host_bf16;
    FAKE_CUDA_HOST_ACCESS(bf16, E * 2, true, "the host writing the vocabulary's bf16 copy (load)");
    const bool init = r->kind == 1 && r->resume_step < 0;
    const bool whole_tensors = !init && !llama_is_model_file(r->args.model);
    const int64_t most = state_window_floats();
    int64_t window_floats = std::min<int64_t>(E, most);
    for (int t = 0; t < NUM_EMBED_TENSORS && whole_tensors; t++)
        window_floats = std::max(window_floats, p->embed_size[t]);
    float* window = (float*)malloc((size_t)window_floats * 4);
    if (!window) die("out of host memory to load the vocabulary tensors");
    for (int t = 0; t < NUM_EMBED_TENSORS; t++) {
        const int64_t o = p->embed_offset[t], n = p->embed_size[t];
        const int64_t step = whole_tensors ? std::max<int64_t>(n, 1) : std::min(window_floats, most);
        for (int64_t a = o; a < o + n; a += step) {
            const int64_t b = std::min(o + n, a + step);
            if (init) llama_init_embeddings_window(&r->llama, window, a, b, INIT_SEED);
            else
                llama_load_window(r, window, p->total - E + a,
                                  p->total - E + b);  // the file: [layers | these]
            convert_f32_to_bf16(window, bf16 + a, b - a);
            const int64_t from = std::max(a, lo), to = std::min(b, hi);
            if (to > from) memcpy(g->master + from, window + (from - a), (size_t)(to - from) * 4);
        }
    }
    free(window);
}

// The prefix (-E 1: the vocabulary's part, and the -R layers whole): load_node_weights' and -sd's.
static void load_node_prefix(Run* r, GPT* g) {
    if (!g->vocab) return ssd_load_prefix(r, g);
    load_node_vocab(r, g);
    for (int l = 0; l < g->resident_layers; l++)
        ssd_load_layer(r, g, l, g->master + gpt_layer_offset(&g->layout, l));
}
// Several nodes, a node's leader: the weights from init, -e or a checkpoint, a layer at a time: the prefix
// whole (-E 1: the vocabulary's fp32 weights in the node's part: load_node_vocab), each streamed layer's bf16
// copy whole (every GPU reads whole layers) and its fp32 weights in the node's part only.
static void load_node_weights(Run* r, GPT* g) {
    const ParamLayout* p = &g->layout;
    load_node_prefix(r, g);
    float* layer = (float*)malloc((size_t)p->layer_stride * 4);
    if (!layer) die("out of host memory for one layer");
    int64_t lo, hi;
    comm_node_part(g->comm, p->layer_stride, g->comm->node_rank, &lo, &hi);
    for (int l = g->resident_layers; l < g->config.num_layers; l++) {
        ssd_load_layer(r, g, l, layer);
        uint16_t* bf16 = g->stream.weights_host_bf16 + gpt_layer_offset(p, l);
        FAKE_CUDA_HOST_ACCESS(bf16, p->layer_stride * 2, true, "the host writing the bf16 copy (load)");
        convert_f32_to_bf16(layer, bf16, p->layer_stride);
        memcpy(g->master + gpt_layer_offset(p, l) + lo, layer + lo, (size_t)(hi - lo) * 4);
    }
    free(layer);
}

// -sd: a fresh run fills a new store in DIR, a resume opens it. The prefix goes to host arrays. Several
// nodes: each node's leader, its store (DIR/node<n>: main) holding its part of each streamed layer; the
// bf16 copy whole from init, -e or the checkpoint's model file, as load_node_weights.
static void ssd_attach(Run* r, GPT* g) {
    const double GiB = 1073741824.0;
    const char* dir = r->ga.ssd_dir;
    const GPTConfig* c = &r->cfg;
    const ParamLayout* p = &g->layout;
    const int R = g->resident_layers;
    SsdStore*& st = g->ssd->store;
    char err[4352];
    SsdStoreConfig sc = ssd_store_config(c, R, ssd_tier(&r->ga), &r->llama);
    if (sc.num_layers < 1)  // -R -1 placed every layer on the GPU
        die("-sd %s with -R %d: all %d layers fit on the GPU, no state is left to put on disk: drop -sd", dir,
            r->ga.resident, c->num_layers);
    sc.owner = r->ssd_owner;  // another run's store is neither replaced nor resumed
    g->ssd->keep_state = r->ga.ssd_keep_state != 0;
    const bool nodes = g->comm->nodes > 1;
    const int64_t lo = g->ssd->part_lo;
    sc.layer_elems = g->ssd->part_n;  // the node's part (the plan's: node 0's, the largest; plan_run: > 0)
    // a checkpoint of a run in RAM or -sk 1's (its state file holds every parameter's m, v): a new store,
    // filled from it (the run's own store too: the file is the checkpoint, whatever the store holds)
    const bool resume = resumes_ssd_store(r), from_ram = r->resume_step >= 0 && !resume;
    double verify_s = 0;
    if (resume) {
        int64_t tail[SSD_TAIL_FIELDS];
        if (!state_file_ssd_tail(r->resume_state, tail, err, sizeof err)) die("resume: %s", err);
        if (tail[SSD_TAIL_PREFIX] != g->host_state_count)
            die("resume: -R %d differs from the checkpoint's (%lld streamed layers in its SSD store, %d "
                "now): "
                "keep -R to resume with -sd",
                R, (long long)tail[SSD_TAIL_STREAMED_LAYERS], c->num_layers - R);
        const double t0 = timeline_now();
        st = ssd_store_open(dir, &sc, r->resume_step, err, sizeof err);  // reads it once: checksums
        verify_s = timeline_now() - t0;
        if (!st && strstr(err, "other checkpoint, step "))  // damaged, the older checkpoint intact
            die("resume: -sd %s: %s: to resume from that one, remove %s/DONE_%08lld", dir, err,
                r->args.output_dir, (long long)r->resume_step);
        if (!st && (strstr(err, " is damaged") || strstr(err, " is unusable")))
            die("resume: -sd %s: %s", dir, err);
        if (!st && strstr(err, "holds no complete checkpoint"))  // made again since, never saved
            die("resume: -sd %s: %s: the store was made again since and its state of step %lld is gone "
                "(a checkpoint written with -sk 1 holds all of its own state)",
                dir, err, (long long)r->resume_step);
        if (!st && strstr(err, ", not of step "))  // an older checkpoint than the store's last two
            die("resume: -sd %s: %s: a store keeps the state of its last two checkpoints only (resume one of "
                "those; with -sk 1 each checkpoint's state file holds all of its own)",
                dir, err);
        if (!st && strstr(err, " layers of "))  // another shape: its -R, -sw (or node) differ
            die("resume: -sd %s: %s (resume with the run's -R%s)", dir, err,
                nodes ? "; each node's DIR/node<n> must be its own" : " and -sw");
        if (!st)  // a store of another node's (not an error of the system's, "cannot ...")
            die("resume: -sd %s: %s%s", dir, err,
                nodes && !strstr(err, "cannot ") ? " (each node's DIR/node<n> must be its own)" : "");
    } else {
        st = ssd_store_create(dir, &sc, err, sizeof err);
        if (!st) die("-sd %s: %s", dir, err);
    }
    ssd_set_fault_from_env(ssd_store_io(st));
    nodes ? load_node_prefix(r, g) : ssd_load_prefix(r, g);
    // the streamed layers, one at a time through one buffer
    float* layer = (float*)malloc((size_t)p->layer_stride * 4);
    if (!layer) die("out of host memory for one layer");
    std::vector<float> part(nodes && resume ? (size_t)sc.layer_elems : 0);
    std::vector<float> m(from_ram ? (size_t)sc.layer_elems : 0), v(m.size());
    const bool file_order = r->llama.num_layers > 0;  // the Llama files: [layers | embeddings]
    for (int l = R; l < c->num_layers; l++) {
        int rc = 0;
        if (nodes) ssd_load_layer(r, g, l, layer);  // whole: the bf16 copy
        if (resume) {  // several nodes: its part, which must be the checkpoint model file's
            rc = ssd_store_read_layer(st, l - R, nodes ? part.data() : layer, NULL, NULL, NULL, err,
                                      sizeof err);
            if (rc == 0 && nodes && memcmp(part.data(), layer + lo, part.size() * 4) != 0)
                die("resume: -sd %s: layer %d's weights differ from the checkpoint's model file %s: this "
                    "store holds another node's part or another checkpoint's (each node's DIR/node<n> must "
                    "be "
                    "its own)",
                    dir, l, r->args.model);
        } else {
            if (!nodes) ssd_load_layer(r, g, l, layer);
            const int64_t at = (file_order ? 0 : p->embed_count) + (int64_t)l * p->layer_stride + lo;
            if (from_ram && !state_file_read_moments(r->resume_state, p->total, at, sc.layer_elems, m.data(),
                                                     v.data(), err, sizeof err))
                die("resume: %s", err);
            rc = ssd_store_write_layer(st, l - R, layer + lo, from_ram ? m.data() : NULL,
                                       from_ram ? v.data() : NULL, err, sizeof err);  // fresh: zero m, v
        }
        if (rc != 0) die("-sd %s: %s", dir, err);
        if (g->ssd->whole) {  // -sw 1 on several nodes: the whole layer to the store's layers.bf16
            FAKE_CUDA_HOST_ACCESS(g->ssd->whole, p->layer_stride * 2, true,
                                  "the host writing the bf16 copy (load)");
            convert_f32_to_bf16(layer, g->ssd->whole, p->layer_stride);
            if (ssd_store_write_whole_bf16(st, l - R, g->ssd->whole, err, sizeof err) != 0)
                die("-sd %s: %s", dir, err);
        }
        if (g->ssd->weights_on_disk) continue;  // the store wrote their bf16 copy (-sw 1)
        uint16_t* bf16 = g->stream.weights_host_bf16 + gpt_layer_offset(p, l);
        FAKE_CUDA_HOST_ACCESS(bf16, p->layer_stride * 2, true, "the host writing the bf16 copy (load)");
        convert_f32_to_bf16(layer, bf16, p->layer_stride);
    }
    free(layer);
    sw_publish_gen(g, -1);  // -sw 1 on several ranks: where they read each layer
    if (r->ga.timeline) ssd_io_log_busy(ssd_store_io(st), 1);  // the timeline's disk tracks
    if (!g->ssd_ranks) ssd_tier_start_writer(g);               // several ranks: no gradients to write
    char how[128] = "created";
    if (from_ram)
        snprintf(how, sizeof how, "created from step %lld's checkpoint (its state file holds all the state)",
                 (long long)r->resume_step);
    if (resume)
        snprintf(how, sizeof how, "resumed at its checkpoint, its checksums verified in %.1f s", verify_s);
    char part_text[96] = "";
    if (nodes)
        snprintf(part_text, sizeof part_text, " (node %d's part: %lld of each layer's %lld)",
                 g->comm->node_rank, (long long)sc.layer_elems, (long long)p->layer_stride);
    printf(
        "SSD tier: %d layers' fp32 weights and AdamW m, v%s%s%s in %s (%.2f GiB on disk, %s; %s); the AdamW "
        "round's ring: %d pieces for its %lld, %.3f GiB of host RAM (-sb)\n",
        sc.num_layers,
        !g->ssd->weights_on_disk || g->ssd->whole ? ""
        : g->sw_gen ? " and bf16 weights (every rank reads them through the page cache)"
                    : " and bf16 weights",
        part_text,
        g->ssd->whole
            ? " and their bf16 weights whole, in layers.bf16 (every rank reads them through the page cache)"
            : "",
        dir, r->plan.ssd_disk / GiB, ssd_io_backend(ssd_store_io(st)), how, sc.ring,
        (long long)(sc.num_layers * ssd_store_layer_pieces(&sc)), r->plan.ssd_ring / GiB);
}

// Llama weights into g->master, then this trainer's order.
static void load_llama_weights(Run* r, GPT* g) {
    if (r->kind == 1) llama_init_params(&r->llama, g->master, INIT_SEED);
    else llama_load_window(r, g->master, 0, g->layout.total);
    llama_trainer_order(&g->layout, g->master);
}

// Builds the model and its weights. -y 1: AdamW state and data position too.
static void build_model(Run* r, GPT* g) {
    char err[4352];
    // CPU AdamW threads: every usable core but adam_threads_beside's
    const int beside = adam_threads_beside(r->ga.ssd_dir != NULL);
    int cores = comm_cpu_cores(r->comm);       // a rank's share of the node's
    if (r->ga.ssd_dir && r->comm->local == 0)  // its round updates whole layers: the node's cores but a core
        cores = std::max(1, usable_cpu_cores() - (r->comm->local_world - 1));  // for each other rank's thread
    r->adam_threads = r->ga.adam_threads > 0 ? r->ga.adam_threads : std::max(1, cores - beside);  // a rank's
    cpu_adam_set_threads(r->adam_threads);
    if (r->ga.ssd_dir) ssd_print_bandwidth(r);  // measured in check_fit (ssd_open_dir)
    gpt_build(g, &r->cfg, r->args.B, r->args.T, r->n_micro, r->ga.num_slots, r->resident, r->kept, &r->args,
              ssd_tier(&r->ga), &r->llama, r->ga.vocab_host > 0, r->comm);
    if (r->ga.ssd_dir && r->comm->local == 0) ssd_attach(r, g);  // either family, one layer at a time
    else if (r->comm->local != 0) {  // several ranks: the node's rank 0 fills its host arrays (and -sd store)
    } else if (r->comm->nodes > 1) {  // several nodes: its parts, a layer at a time
        load_node_weights(r, g);
    } else if (r->llama.num_layers) load_llama_weights(r, g);
    else if (r->kind == 1) gpt_init_params(&r->cfg, g->master, INIT_SEED);
    else if (!gpt_load_params(r->args.model, &r->cfg, g->master, err, sizeof err)) die("%s", err);
    gpt_weights_ready(g);  // several ranks: rank 0 has filled its store
    if (g->sw_gen || (ssd_tier(&r->ga) == TIER_SSD_WEIGHTS && r->comm->nodes > 1)) {
        // -sw 1 on several ranks: every rank reads the store's bf16 files (several nodes: its whole layers')
        g->sw_files = ssd_bf16_files_open(r->ga.ssd_dir, r->cfg.num_layers - g->resident_layers,
                                          g->layout.layer_stride, r->comm->nodes > 1, err, sizeof err);
        if (!g->sw_files) die("-sd %s -sw 1: %s", r->ga.ssd_dir, err);
        if (r->ga.timeline) ssd_io_log_busy(ssd_bf16_files_io(g->sw_files), 1);  // rank 0's disk tracks
        ssd_set_fault_from_env(ssd_bf16_files_io(g->sw_files));
    }
    if (r->ga.timeline) {
        timeline_init(&r->timeline, 8 * r->cfg.num_layers + 64 +
                                        (g->ssd ? (g->sw_files ? 3 : 2) * TIMELINE_DISK_SPANS : 0));
        g->timeline = g->stream.timeline = &r->timeline;
    }
    r->start_step = 0;
    if (r->resume_step < 0) return;
    DataLoaderState data_state;
    load_state(g, r->resume_state, &data_state, resumes_ssd_store(r));
    if (!dataloader_set_state(&r->train, &data_state, err, sizeof err)) die("resume: %s", err);
    r->start_step = (int)g->step;
    g->checkpoint_step = g->step;
    printf("resumed from %s (step %d)\n", r->resume_model, r->start_step);
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
    table_row("weight decay / clip", "%.2f / %.2f", args.weight_decay, args.grad_clip);
    table_row("steps", r->bench ? "%d (benchmark: %d warm-up + %d timed)" : "%d", r->total_steps,
              r->ga.bench_warmup, r->ga.bench_steps);
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
