// llmc/run_fit.cuh — train_gpt.cu's memory plan and fit check: -e's shape against the flags (plan_run),
// -R auto / -K auto placed by the plan, host RAM, GPU memory and the -sd disk checked before anything large
// is allocated (check_fit), -sb auto's ring, and -P 1's printed plan (print_plan_only).
// Not here: the plan's arithmetic (llmc/memory_plan.cuh, llmc/plan_advice.cuh), the -sd directory and the
// weights (llmc/run_weights.cuh).
#pragma once
#include <fcntl.h>                 // defines: open, O_RDONLY
#include <sys/file.h>              // defines: flock
#include "llmc/llama_kernels.cuh"  // defines: llama_kernels_load
#include "llmc/run_setup.cuh"      // defines: Run, resolve_model, resumes_ssd_store

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

static void ssd_open_dir(Run* r);  // llmc/run_weights.cuh
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
