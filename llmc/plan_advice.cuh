// llmc/plan_advice.cuh — -P 1's verdicts, step time and advice, after llmc/memory_plan.cuh's part-by-part
// lines: a table of what the plan needs against what the GPU, host RAM and disk have, the time a step must
// take at stated rates (compute, PCIe, disk, CPU AdamW), and for a plan that does not fit, the flags
// that make it fit (-b, -R, -K, -E, -sd, -sw), found by planning again with gpt_memory_plan.
// -P 1 then exits PLAN_FITS, PLAN_FITS_WITH_ADVICE or PLAN_FITS_NOWHERE.
// Not here: the plan (llmc/memory_plan.cuh), a run's own fit check (llmc/run_fit.cuh's check_fit).
// The rates are stated assumptions unless given (-sr), measured (-sd DIR's disk, llmc/run_fit.cuh) or read
// from the GPU here.
// Included by llmc/run_setup.cuh (llmc/run_fit.cuh prints it): uses train_gpt.cu's gpu_bf16_peak_flops.
#pragma once
#include <math.h>
#include <string.h>
#include <algorithm>
#include <vector>
#include "llmc/memory_plan.cuh"  // defines: MemoryPlan, gpt_memory_plan, gpu_reserve_bytes, dir_free_bytes,
                                 // host_memory_to_count_on, gpu_memory_budget

// -P 1's exit status: scripts tell a plan that fits from one that needs other flags.
enum { PLAN_FITS = 0, PLAN_FITS_WITH_ADVICE = 2, PLAN_FITS_NOWHERE = 3 };

// Without a GPU and without -V the verdict is against an H100 80GB (79 GiB usable, as -V 79).
#define PLAN_DEFAULT_GPU_GIB 79.0
// The rates a step's bounds assume, each printed beside its bound.
#define PLAN_H100_PEAK_FLOPS 989.4e12  // H100 SXM dense bf16 (docs/memory.md's table)
#define PLAN_MFU             0.45      // the kernels' share of that peak (0.33-0.41 measured, docs/status.md)
// The forward alone runs faster than a step's average (no attention backward, our slowest kernel): 585
// TFLOP/s at Llama 3 8B's shape, 25.4 ms a layer at 32K tokens (gpu_ledger.md, window 3).
#define PLAN_FWD_MFU              0.59
#define PLAN_PCIE_BPS             50e9  // each way: pinned copies over PCIe 5.0 x16
#define PLAN_DISK_READ_BPS        6e9   // one PCIe 4.0 NVMe drive, unless -sr
#define PLAN_DISK_WRITE_BPS       4e9
#define PLAN_HOST_BPS             125e9  // CPU AdamW: 4.48 Gparam/s on the H100 machine (docs/status.md)
#define ADAMW_BYTES_PER_PARAM     28     // read fp32 weight, m, v, gradient; write weight, m, v
#define PLAN_NVLINK_BPS           360e9  // each GPU's share of a ring reduce-scatter in an H100 node (NVLink 4)
#define PLAN_NETWORK_BPS          50e9    // each GPU's 400 Gb/s NIC (InfiniBand NDR), between nodes
#define PLAN_HOST_MEM_BPS         300e9   // a two-socket node's host memory, for the PCIe copies' reads
#define PLAN_HBM_BPS              2.5e12  // the GPU AdamW of -R layers: an H100's 3.35 TB/s HBM3 at 75%
#define GPU_ADAMW_BYTES_PER_PARAM 30      // as the CPU's, and the bf16 copy written
// The placement the plan chooses (-R / -K auto) differs from none only for a step at least this much faster:
// the model leaves out each step's fixed costs (launches, syncs), which decide a small step's time.
#define PLAN_PLACE_MIN_GAIN_S 0.010
#define PLAN_PLACE_MIN_GAIN   0.03

// The flags the advice may change. tier: TIER_RAM, TIER_SSD (-sd), TIER_SSD_WEIGHTS (-sd -sw 1).
typedef struct {
    int B, n_micro, resident, kept, vocab_host, tier;
} PlanChoice;

// One choice's plan, its fit and the bounds on its step (seconds; 0: no such traffic).
typedef struct {
    PlanChoice c;
    MemoryPlan m;
    bool gpu_fits, host_fits, disk_fits;
    double flops, h2d, d2h, adam_bytes;  // a step's work and bytes moved
    double compute_s, h2d_s, d2h_s, disk_s, adam_s, step_s;
    // the CPU AdamW's round of a step runs during the next step's forward (fwd_s), layer by layer; -E 1's
    // vocabulary part that the forward waits for runs before it, the GPU idle (vocab_adam_s). With -sd the
    // round also reads what it updates and writes it back, as it goes (round_disk_s: its reads not moved to
    // the backward and its writes, one after the other on the one drive), so it takes the longer of the two.
    // The GPU waits adam_wait_s for them, and updates the -R layers itself (gpu_adam_s): gpu_s = compute_s +
    // adam_wait_s + gpu_adam_s.
    double fwd_s, vocab_adam_s, round_disk_s, adam_wait_s, gpu_adam_s, gpu_s;
    const char* bound;  // which of them is step_s
    // several GPUs (-pn / -pN): step_s and bound are the several-GPU step's (plan_several); part_s and
    // part_bound one GPU's part of it, as on one GPU
    double part_s;
    const char* part_bound;
} PlanEval;

// What -P 1 plans for and checks against.
typedef struct {
    const GPTConfig* cfg;
    const LlamaConfig* llama;
    int T, slots;
    int64_t gpu_budget, host_avail, disk_free;  // bytes; -1: unknown (no check)
    int64_t disk_held;  // of disk_free: a store in -sd DIR now, which a run's store replaces (or resumes)
    double peak_flops, disk_read_Bps, disk_write_Bps;
    bool several;  // -pn / -pN: the advice and the table compare the several-GPU step
    int nodes;     // -pN: host RAM is a node's (its part of the streamed layers' fp32 state); 0 or 1: all
    int ranks;     // -pn: a node's GPUs (-E 1: each its own pinned staging)
} PlanTarget;

// What the GPU's part of a step (gpu_s) is mostly: compute, with any wait for the CPU AdamW, or its own
// AdamW.
static const char* plan_gpu_bound(const PlanEval& e) {
    if (e.adam_wait_s > 0)
        return e.round_disk_s > e.adam_s ? "compute and the round's disk work" : "compute and the CPU AdamW";
    return e.gpu_adam_s > e.compute_s ? "the GPU AdamW" : "compute";
}

// -pn G -pN N: the step on G GPUs a node, N nodes. Each GPU computes its micro-batches (e, planned for them)
// and streams every layer over its own PCIe link; the gradients are reduce-scattered in fp32, over NVLink in
// a node and the network between nodes; each GPU sends its slice to the host; the node's CPU AdamW updates
// the node's share of the parameters: all of them on one node, 1/N of them on N nodes, whose updated bf16
// weights are then all-gathered over the network (net.h: TCP between the nodes' leaders). -sd: each node's
// disk reads and writes its part of the state every step. Each link's bytes and seconds, and the step they
// bound (plan_evaluate's step_s with several GPUs; print_multi_gpu_plan prints them).
typedef struct {
    const char* what;
    char need[64], at[160];
    double s;
} PlanLinkRow;
typedef struct {
    PlanLinkRow rows[10];
    int n;
    double nvlink, sums_s;  // the gradients' bytes over NVLink; their sums' seconds on each GPU's stream
    double step_s;
    const char* bound;
} PlanSeveral;
static PlanSeveral plan_several(const PlanTarget* t, const PlanEval& e) {
    PlanSeveral out;
    memset(&out, 0, sizeof out);
    const int G = std::max(1, t->ranks), N = std::max(1, t->nodes);
    const double ranks = (double)G * N;
    const ParamLayout p = model_layout(t->cfg, t->llama);
    const double streamed = (t->cfg->num_layers - e.c.resident) * (double)p.layer_stride;
    const double resident = (double)p.total - streamed;
    // in a node: a ring reduce-scatter sends (G-1)/G of each GPU's fp32 gradients; the prefix an all-reduce
    const double nvlink = G > 1 ? (G - 1.0) / G * (streamed * 4 + 2 * resident * 4) : 0.0;
    // between nodes: the gradients' reduce-scatter (fp32) and the prefix's all-reduce, per node (NCCL)
    const double network = N > 1 ? (N - 1.0) / N * (streamed * 4 + 2 * resident * 4) : 0.0;
    // the updated bf16 weights (net.h's meshes): each node's part straight to every other node, over the node
    // leader's TCP links: (N-1)/N of the streamed layers' bf16 bytes in, and as many out; -E 1's vocabulary
    // likewise (vocab_exchange_bf16)
    const double vocab = e.c.vocab_host > 0 ? (double)p.embed_count : 0.0;
    const double exchange = N > 1 ? (streamed + vocab) * 2 * (N - 1.0) / N : 0.0;
    const double pcie_down = e.d2h / ranks;
    const double host_copies =
        G * e.h2d + G * pcie_down;     // every byte over PCIe is read or written on the host
    const double adam = e.adam_bytes;  // plan_evaluate: a node's share
    const struct {
        const char* what;
        double bytes, rate;
        const char* at;
    } rows[] = {
        {"compute, a GPU", e.flops, t->peak_flops * PLAN_MFU, "TFLOP/s (as above), assumed"},
        {"PCIe up, a GPU", e.h2d, PLAN_PCIE_BPS, "GB/s, assumed"},
        {"PCIe down", pcie_down, PLAN_PCIE_BPS, "GB/s (its slice of the gradients), assumed"},
        {"NVLink, a GPU", nvlink, PLAN_NVLINK_BPS, "GB/s (fp32 gradients), assumed"},
        {"network, node", network, PLAN_NETWORK_BPS * G, "GB/s (a 400 Gb/s NIC a GPU), assumed"},
        {"exchange, node", exchange, PLAN_NETWORK_BPS, "GB/s each way (bf16 weights, TCP), assumed"},
        {"host mem, node", host_copies, PLAN_HOST_MEM_BPS, "GB/s for the copies, assumed"},
        {"CPU AdamW, node", adam, PLAN_HOST_BPS, "GB/s of host memory (its share), assumed"},
    };
    out.step_s = 0;
    out.bound = "";
    for (const auto& r : rows) {
        if (r.bytes <= 0) continue;
        PlanLinkRow& o = out.rows[out.n++];
        o.what = r.what;
        const bool flops = r.what[0] == 'c';
        if (flops) snprintf(o.need, sizeof o.need, "%.2f PFLOP", r.bytes / 1e15);
        else snprintf(o.need, sizeof o.need, "%.1f GB", r.bytes / 1e9);
        snprintf(o.at, sizeof o.at, "%.0f %s", (flops ? r.rate / 1e12 : r.rate / 1e9), r.at);
        o.s = flops ? e.compute_s : r.bytes / r.rate;  // compute_s: the recompute at a forward's rate
        if (o.s > out.step_s) out.step_s = o.s, out.bound = r.what;
    }
    if (e.c.tier != TIER_RAM) {  // -sd: each node's disk reads and writes its part of the state every step
        PlanLinkRow& o = out.rows[out.n++];
        o.what = N > 1 ? "disk r+w, node" : "disk r + w";
        snprintf(o.need, sizeof o.need, "%.1f + %.1f GB", e.m.ssd_read_per_step / 1e9,
                 e.m.ssd_write_per_step / 1e9);
        snprintf(o.at, sizeof o.at, "%.2f / %.2f GB/s (its part of the state)", t->disk_read_Bps / 1e9,
                 t->disk_write_Bps / 1e9);
        o.s = e.disk_s;
        if (o.s > out.step_s) out.step_s = o.s, out.bound = "the disk";
    }
    // the gradient sums (NCCL) run on each GPU's compute stream, between its layers' backward passes: they
    // add to its part of the step
    out.nvlink = nvlink;
    out.sums_s = nvlink / PLAN_NVLINK_BPS + network / (PLAN_NETWORK_BPS * G);
    if (e.gpu_s + out.sums_s > out.step_s)
        out.step_s = e.gpu_s + out.sums_s,
        out.bound = out.sums_s > 0 && out.sums_s >= e.adam_wait_s     ? "compute and the gradient sums"
                    : e.adam_wait_s > 0 || e.gpu_adam_s > e.compute_s ? plan_gpu_bound(e)
                                                                      : "compute, a GPU";
    return out;
}

// Choice c's plan, whether it fits t, and the bounds on its step.
static PlanEval plan_evaluate(const PlanTarget* t, PlanChoice c) {
    PlanEval e;
    memset(&e, 0, sizeof e);
    e.c = c;
    const GPTConfig* cfg = t->cfg;
    e.m = gpt_memory_plan(cfg, c.B, t->T, c.n_micro, t->slots, c.resident, c.kept, c.tier, t->llama,
                          c.vocab_host > 0);
    if (t->nodes > 1) {  // a node holds the prefix's fp32 state whole and 1/N of the streamed layers' (-sd:
                         // in its store, whose plan is the node's already), and the bf16 gradients of its
                         // part of each layer; -E 1: 1/N of the vocabulary's fp32 weights, m, v and gradients
                         // (llmc/vocab_host.cuh vocab_node_part)
        const ParamLayout pl = model_layout(cfg, t->llama);
        const double stride = (double)pl.layer_stride, streamed = (cfg->num_layers - c.resident) * stride;
        const double vocab = c.vocab_host > 0 ? 16.0 * pl.embed_count : 0.0;
        const double in_ram = c.tier == TIER_RAM ? 12.0 * streamed : 0.0;
        e.m.host_bytes -=
            (int64_t)((in_ram + 2.0 * cfg->num_layers * stride + vocab) * (t->nodes - 1.0) / t->nodes);
    }
    if (t->ranks > 1) e.m.host_bytes += (int64_t)(t->ranks - 1) * e.m.vocab_staging;
    e.gpu_fits = e.m.gpu_bytes + gpu_reserve_bytes <= t->gpu_budget;
    e.host_fits = t->host_avail < 0 || e.m.host_bytes <= t->host_avail;
    e.disk_fits = c.tier == TIER_RAM || t->disk_free < 0 || e.m.ssd_disk <= t->disk_free;
    // the work: step_flops' model FLOPs, plus the recompute of the layers not kept (-K)
    const ParamLayout p = model_layout(cfg, t->llama);
    const bool llama = t->llama && t->llama->num_layers;
    const double width = llama ? (double)t->llama->num_heads * t->llama->head_dim : cfg->channels;
    const double tokens = (double)c.B * t->T * c.n_micro, L = cfg->num_layers;
    const double streamed = (L - c.resident) * (double)p.layer_stride;  // parameters crossing the bus
    const double head = (double)cfg->vocab_size * cfg->channels;        // -E 1: lm_head in chunks
    e.flops = 6.0 * p.total * tokens + 6.0 * L * width * t->T * tokens;
    const double recompute = 2.0 * (L - c.kept) * ((double)p.layer_stride + width * t->T) * tokens;
    e.flops += recompute;
    if (c.vocab_host > 0) e.flops += 2.0 * head * tokens;  // the head's logits, again in pass 2
    // host -> GPU: bf16 weights of each streamed layer in both passes, -E 1's head chunks twice;
    // GPU -> host: their bf16 gradients, -E 1's fp32 head gradient and the embedding rows' gradients
    e.h2d = 2.0 * streamed * 2 + (c.vocab_host > 0 ? 2.0 * head * 2 : 0.0);
    e.d2h = streamed * 2 + (c.vocab_host > 0 ? head * 4 + tokens * cfg->channels * 2 : 0.0);
    // a node's CPU AdamW: its 1/N of the streamed layers and of -E 1's vocabulary (several nodes)
    const double nodes = t->nodes > 1 ? t->nodes : 1;
    const double vocab_params = c.vocab_host > 0 ? (double)p.embed_count : 0.0;
    const double cpu_params = (streamed + vocab_params) / nodes;
    e.adam_bytes = cpu_params * ADAMW_BYTES_PER_PARAM;
    // the recompute is a forward: at the forward's rate
    e.compute_s =
        (e.flops - recompute) / (t->peak_flops * PLAN_MFU) + recompute / (t->peak_flops * PLAN_FWD_MFU);
    // the forward alone: 2 FLOPs a parameter and token, and attention's share (a third of 6 L w T)
    e.fwd_s = (2.0 * p.total * tokens + 2.0 * L * width * t->T * tokens) / (t->peak_flops * PLAN_FWD_MFU);
    e.h2d_s = e.h2d / PLAN_PCIE_BPS;
    e.d2h_s = e.d2h / PLAN_PCIE_BPS;
    e.disk_s = c.tier == TIER_RAM ? 0.0
                                  : e.m.ssd_read_per_step / t->disk_read_Bps +
                                        e.m.ssd_write_per_step / t->disk_write_Bps;  // one drive, both ways
    e.adam_s = e.adam_bytes / PLAN_HOST_BPS;
    // -E 1 before the forward. One GPU: the final norm, and the embedding rows of the step's tokens, which
    // its gathers (every micro-batch's, before layer 0) update themselves (the table and an untied head on a
    // thread of their own, beside the round and the forward: vocab_head_update_submit); at most a row a
    // token. Several ranks a node: every tensor. Several nodes: the node's part of every tensor, then the
    // exchange of the bf16 weights (vocab_exchange_bf16, over the main thread's mesh: each node sends its
    // part to every other node and takes theirs, (N-1)/N of them each way).
    const double first_rows = std::min((double)cfg->vocab_size, tokens) * cfg->channels;
    const bool one_gpu = t->ranks <= 1 && nodes == 1;
    const double before_forward = llama && one_gpu ? cfg->channels + first_rows : vocab_params / nodes;
    e.vocab_adam_s = (vocab_params > 0 ? before_forward : 0.0) * ADAMW_BYTES_PER_PARAM / PLAN_HOST_BPS;
    if (nodes > 1) e.vocab_adam_s += vocab_params * 2.0 * (nodes - 1.0) / nodes / PLAN_NETWORK_BPS;
    e.round_disk_s = c.tier == TIER_RAM
                         ? 0.0
                         : e.m.ssd_round_reads / t->disk_read_Bps + e.m.ssd_round_writes / t->disk_write_Bps;
    e.adam_wait_s = std::max(e.vocab_adam_s, std::max(e.adam_s, e.round_disk_s) - e.fwd_s);
    e.gpu_adam_s = ((double)p.total - streamed - vocab_params) * GPU_ADAMW_BYTES_PER_PARAM / PLAN_HBM_BPS;
    e.gpu_s = e.compute_s + e.adam_wait_s + e.gpu_adam_s;
    const struct {
        double s;
        const char* name;
    } bounds[] = {{e.gpu_s, plan_gpu_bound(e)},
                  {e.h2d_s, "PCIe, host to GPU"},
                  {e.d2h_s, "PCIe, GPU to host"},
                  {e.disk_s, "the disk"}};
    e.step_s = -1;
    for (const auto& b : bounds)
        if (b.s > e.step_s) e.step_s = b.s, e.bound = b.name;
    e.part_s = e.step_s, e.part_bound = e.bound;
    if (t->several) {  // the advice, the placement and the table compare the several-GPU step
        const PlanSeveral sv = plan_several(t, e);
        e.step_s = sv.step_s, e.bound = sv.bound;
    }
    return e;
}

static bool plan_fits(const PlanEval& e) { return e.gpu_fits && e.host_fits && e.disk_fits; }

// -sd: one piece's bytes in the ring (its fp32 weights, m, v and bf16 gradient).
static double plan_ssd_piece_bytes(const PlanTarget* t, const PlanChoice& c) {
    SsdStoreConfig one = ssd_store_config(t->cfg, c.resident, c.tier, t->llama);
    one.ring = 1;
    return (double)ssd_store_ring_bytes(&one);
}
// -sd's ring (-sb) for a plan: the fewest pieces whose read-ahead and trailing writes keep the round's disk
// work within the forward and a tenth of the compute, else the whole round and one (*most: the most a ring
// can do). *best: the plan with it. ssd_ring_budget_bytes is left as it was.
static int64_t plan_ssd_ring(const PlanTarget* t, const PlanChoice& given, PlanEval* best, int64_t* most) {
    const SsdStoreConfig sc = ssd_store_config(t->cfg, given.resident, given.tier, t->llama);
    const double piece = plan_ssd_piece_bytes(t, given), budget = ssd_ring_budget_bytes;
    *most = (int64_t)sc.num_layers * ssd_store_layer_pieces(&sc) + 1;
    auto with_ring = [&](int64_t ring) {
        ssd_ring_budget_bytes = ((double)ring + 0.5) * piece;
        return plan_evaluate(t, given);
    };
    auto within = [&](const PlanEval& x) { return x.round_disk_s <= x.fwd_s + 0.1 * x.compute_s; };
    const PlanEval least = with_ring(SSD_RING_MIN);
    if (within(least)) {  // the default ring is enough
        *best = least;
        ssd_ring_budget_bytes = budget;
        return SSD_RING_MIN;
    }
    *best = with_ring(*most);
    int64_t ring = *most;
    if (within(*best))
        for (int64_t lo = SSD_RING_MIN + 1, hi = *most; lo < hi;) {  // the smallest ring within: monotone
            const int64_t mid = lo + (hi - lo) / 2;
            const PlanEval x = with_ring(mid);
            if (within(x)) hi = mid, ring = mid, *best = x;
            else lo = mid + 1;
        }
    ssd_ring_budget_bytes = budget;
    return ring;
}

// The flags that differ from the given ones, cheapest first: -b, -R, -K, -E, -sd, -sw, as a command
// line's (-b with the -d that keeps the tokens per step).
static void plan_changes(const PlanChoice& given, const PlanChoice& c, int T, const char* dir, char* text,
                         size_t len, int64_t ranks = 1) {
    int at = 0;
    text[0] = 0;
    auto add = [&](const char* fmt, auto... v) {
        at += snprintf(text + at, at < (int)len ? len - at : 0, fmt, v...);
    };
    if (c.B != given.B) add(" -b %d -d %lld", c.B, (long long)c.B * T * c.n_micro * ranks);  // every GPU's
    if (c.resident != given.resident) add(" -R %d", c.resident);
    if (c.kept != given.kept) add(" -K %d", c.kept);
    if (c.vocab_host != given.vocab_host) add(" -E %d", c.vocab_host);
    if (c.tier != TIER_RAM && given.tier == TIER_RAM) add(" -sd %s", dir ? dir : "DIR");
    if (c.tier == TIER_SSD_WEIGHTS && given.tier != TIER_SSD_WEIGHTS) add(" -sw 1");
}
// Bit i: flag i of plan_changes' order differs.
static unsigned plan_change_mask(const PlanChoice& given, const PlanChoice& c) {
    return (c.B != given.B) | (c.resident != given.resident) << 1 | (c.kept != given.kept) << 2 |
           (c.vocab_host != given.vocab_host) << 3 | (c.tier != given.tier && given.tier == TIER_RAM) << 4 |
           (c.tier == TIER_SSD_WEIGHTS && given.tier != TIER_SSD_WEIGHTS) << 5;
}

// Every choice the advice tries: -b down to 1 at the same tokens per step; -R and -K as given, as many
// as fit (at most as given), or 0; -E 1; -sd, -sd -sw 1.
static std::vector<PlanEval> plan_alternatives(const PlanTarget* t, const PlanChoice& given) {
    std::vector<PlanEval> out;
    const bool llama = t->llama && t->llama->num_layers;
    const int L = t->cfg->num_layers;
    for (int tier = given.tier; tier <= TIER_SSD_WEIGHTS; tier++)
        for (int E = given.vocab_host; E <= (llama ? 1 : given.vocab_host); E++)
            for (int B = given.B; B >= 1; B--) {
                if (given.B % B) continue;  // the same tokens per step
                PlanChoice c = given;
                c.tier = tier, c.vocab_host = E, c.B = B, c.n_micro = given.n_micro * (given.B / B);
                c.resident = c.kept = 0;
                const PlanEval bare = plan_evaluate(t, c);  // how many -R / -K layers the GPU has room for
                const int64_t spare = t->gpu_budget - gpu_reserve_bytes - bare.m.gpu_bytes;
                const int R_fit =
                    spare > 0 ? (int)std::min<int64_t>(given.resident,
                                                       spare / std::max<int64_t>(bare.m.resident_layer, 1))
                              : 0;
                const int Rs[3] = {given.resident, R_fit, 0};
                for (int i = 0; i < 3; i++) {
                    if (i && Rs[i] == Rs[i - 1]) continue;
                    if (tier != TIER_RAM && Rs[i] >= L) continue;  // -sd needs a streamed layer
                    const int64_t left = spare - (int64_t)Rs[i] * bare.m.resident_layer;
                    const int K_fit = left > 0
                                          ? (int)std::min<int64_t>(
                                                given.kept, left / std::max<int64_t>(bare.m.kept_layer, 1))
                                          : 0;
                    const int Ks[3] = {given.kept, K_fit, 0};
                    for (int j = 0; j < 3; j++) {
                        if (j && Ks[j] == Ks[j - 1]) continue;
                        c.resident = Rs[i], c.kept = Ks[j];
                        out.push_back(plan_evaluate(t, c));
                    }
                }
            }
    return out;
}

// -R auto / -K auto: among the -R that fit (auto_R; else c.resident as given) with the most -K that fit
// beside each (auto_K, or fill_K: -K -1 beside -R auto; else c.kept), the placement with the shortest step in
// plan_evaluate's model, on t->gpu_budget less place_layers' margins. Where the CPU AdamW does not fit in the
// forward, -R layers shorten its round; past that, more -R only adds GPU AdamW and takes -K's room, so the
// shortest step has the least -R that suffices. None (the auto ones 0; -K -1's as many as fit) unless
// PLAN_PLACE_MIN_GAIN and PLAN_PLACE_MIN_GAIN_S faster. -sd: -R auto is 0 (the store holds the streamed
// layers, and a resume must find the same ones). *none: that placement and its step.
static PlanEval plan_place_layers(const PlanTarget* t, PlanChoice c, bool auto_R, bool auto_K, bool fill_K,
                                  PlanEval* none) {
    const int L = t->cfg->num_layers;
    if (auto_R) c.resident = 0;
    if (auto_K || fill_K) c.kept = 0;
    const PlanEval bare = plan_evaluate(t, c);
    const int64_t room = t->gpu_budget - gpu_reserve_bytes - gpu_margin_bytes;
    const int64_t spare = room - bare.m.gpu_bytes;
    const int64_t per_R = std::max<int64_t>(bare.m.resident_layer, 1),
                  per_K = std::max<int64_t>(bare.m.kept_layer, 1);
    if (fill_K && spare > 0) c.kept = (int)std::min<int64_t>(spare / per_K, L);
    *none = fill_K ? plan_evaluate(t, c) : bare;
    if (fill_K) c.kept = 0;
    if (spare <= 0 || (!auto_R && !auto_K && !fill_K)) return *none;
    auto_K = auto_K || fill_K;
    const int R_max =
        auto_R ? (c.tier != TIER_RAM ? 0 : (int)std::min<int64_t>(spare / per_R, L)) : c.resident;
    PlanEval best = *none;
    for (int R = c.resident; R <= R_max; R++) {
        PlanChoice x = c;
        x.resident = R;
        const int64_t left = spare - (int64_t)(R - c.resident) * per_R;
        if (auto_K) x.kept = (int)std::min<int64_t>(std::max<int64_t>(left / per_K, 0), L);
        PlanEval e = plan_evaluate(t, x);
        while (auto_K && x.kept > 0 && e.m.gpu_bytes > room) {  // the per-layer figures are exact; in case
            x.kept--;
            e = plan_evaluate(t, x);
        }
        if (e.m.gpu_bytes <= room && e.step_s < best.step_s) best = e;
    }
    const double gain = none->step_s - best.step_s;
    if (gain < PLAN_PLACE_MIN_GAIN_S || gain < PLAN_PLACE_MIN_GAIN * none->step_s) return *none;
    return best;
}

// What a plan is evaluated against, but the GPU's budget and peak (the caller's): the model, -t, the slots,
// ranks and nodes, host RAM, the disk and its rates.
static PlanTarget plan_target(const GPTConfig* cfg, const LlamaConfig* llama, int T, const GpuArgs* ga) {
    PlanTarget t;
    memset(&t, 0, sizeof t);
    t.cfg = cfg, t.llama = llama, t.T = T, t.slots = ga->num_slots, t.nodes = ga->nodes, t.ranks = ga->ranks;
    t.several = ga->ranks * ga->nodes > 1;
    t.host_avail = host_memory_to_count_on(ga);
    t.disk_free = ga->ssd_dir ? dir_free_bytes(ga->ssd_dir) : -1;
    t.disk_held = t.disk_free >= 0 ? ssd_store_held_bytes(ga->ssd_dir) : 0;
    if (t.disk_free >= 0) t.disk_free += t.disk_held;
    t.disk_read_Bps = ga->disk_read_gbs > 0 ? ga->disk_read_gbs * 1e9 : PLAN_DISK_READ_BPS;
    t.disk_write_Bps = ga->disk_write_gbs > 0 ? ga->disk_write_gbs * 1e9 : PLAN_DISK_WRITE_BPS;
    t.peak_flops = PLAN_H100_PEAK_FLOPS;
    return t;
}

// The GPU budget of the verdict: -V, else this GPU's free memory, else PLAN_DEFAULT_GPU_GIB. Also the
// peak the compute bound divides by: this GPU's, else an H100's.
static int64_t plan_gpu_target(const GpuArgs* ga, bool no_gpu_here, char* text, size_t len, double* peak,
                               char* peak_text, size_t peak_len) {
    const double GiB = 1073741824.0;
    const char* label = NULL;
    cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    if (!no_gpu_here && cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        *peak = gpu_bf16_peak_flops(prop.name, &label);
    else *peak = 0;
    if (*peak > 0)
        snprintf(peak_text, peak_len, "%.*s",
                 (int)(strstr(label, " bf16") ? strstr(label, " bf16") - label : strlen(label)), label);
    else {
        *peak = PLAN_H100_PEAK_FLOPS;
        snprintf(peak_text, peak_len, "H100");
    }
    if (ga->gpu_gib > 0) {
        snprintf(text, len, "%.2f GiB given by -V", ga->gpu_gib);
        return gpu_memory_budget(ga, INT64_MAX);
    }
    size_t free_b = 0, total_b = 0;
    if (!no_gpu_here && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
        snprintf(text, len, "%.2f GiB free on %.22s", free_b / GiB, prop.name);
        return (int64_t)free_b;
    }
    cudaGetLastError();
    snprintf(text, len, "%.2f GiB: H100 80GB, assumed", PLAN_DEFAULT_GPU_GIB);
    return (int64_t)(PLAN_DEFAULT_GPU_GIB * GiB);
}

// A time in the table: seconds, or milliseconds below 0.1 s.
static void plan_seconds(char* text, size_t len, double s) {
    if (s >= 0.1) snprintf(text, len, "%.2f s", s);
    else snprintf(text, len, "%.2f ms", s * 1e3);
}

// Two sizes in GiB as text, with the decimals (2, up to 4) that tell them apart where they differ: a verdict
// between them must not read "0.04 GiB" against "0.04 GiB" beside "does NOT fit" (-M 0.042).
static void plan_gib_pair(char* a_text, size_t a_len, double a, char* b_text, size_t b_len, double b,
                          const char* b_suffix) {
    for (int d = 2;; d++) {
        snprintf(a_text, a_len, "%.*f GiB", d, a);
        snprintf(b_text, b_len, "%.*f GiB%s", d, b, b_suffix);
        if (d == 4 || a == b || strncmp(a_text, b_text, strlen(a_text)) != 0) return;
    }
}

// A row of the table: what, needed, available, verdict.
static void plan_row(const char* what, const char* needed, const char* available, const char* verdict) {
    printf("%-14s %18s   %-46s %s\n", what, needed, available, verdict);
}

// The table: memory needed and available with verdicts, then a step's work and the time it takes.
static void print_plan_table(const PlanTarget* t, const PlanEval& e, const GpuArgs* ga, const char* gpu_text,
                             const char* peak_text) {
    const double GiB = 1073741824.0;
    char need[64], have[160], verdict[64];
    auto fit = [](bool f) { return f ? "fits" : "does NOT fit"; };
    plan_row("", "needed", "available", "verdict");
    snprintf(need, sizeof need, "%.2f GiB", e.m.gpu_bytes / GiB);
    plan_row("GPU memory", need, gpu_text, fit(e.gpu_fits));
    snprintf(need, sizeof need, "%.2f GiB", e.m.host_bytes / GiB);
    if (t->host_avail >= 0)
        plan_gib_pair(need, sizeof need, e.m.host_bytes / GiB, have, sizeof have, t->host_avail / GiB,
                      ga->host_gib > 0 ? " given by -M" : " available here (-M GiB for another)");
    plan_row(t->nodes > 1 ? "host RAM, node" : "host RAM", need, t->host_avail >= 0 ? have : "unknown",
             t->host_avail >= 0 ? fit(e.host_fits) : "");
    if (e.c.tier != TIER_RAM) {
        snprintf(need, sizeof need, "%.2f GiB", e.m.ssd_disk / GiB);
        if (t->disk_free >= 0)
            plan_gib_pair(need, sizeof need, e.m.ssd_disk / GiB, have, sizeof have, t->disk_free / GiB,
                          t->disk_held > 0 ? " free in -sd DIR (with its store)" : " free in -sd DIR");
        plan_row("disk space", need, t->disk_free >= 0 ? have : "unknown: -sd DIR's folder is not here",
                 t->disk_free >= 0 ? fit(e.disk_fits) : "not checked");
    }
    plan_row("a step", "moves", "at", "takes");
    if (e.flops >= 1e15) snprintf(need, sizeof need, "%.2f PFLOP", e.flops / 1e15);
    else snprintf(need, sizeof need, "%.2f TFLOP", e.flops / 1e12);
    snprintf(have, sizeof have, "%.0f (%s) x MFU %.2f, recompute %.2f, assumed", t->peak_flops / 1e12,
             peak_text, PLAN_MFU, PLAN_FWD_MFU);
    plan_seconds(verdict, sizeof verdict, e.compute_s);
    plan_row("compute", need, have, verdict);
    snprintf(need, sizeof need, "%.1f GB", e.h2d / 1e9);
    snprintf(have, sizeof have, "%.0f GB/s each way, assumed", PLAN_PCIE_BPS / 1e9);
    plan_seconds(verdict, sizeof verdict, e.h2d_s);
    plan_row("PCIe up", need, have, verdict);
    snprintf(need, sizeof need, "%.1f GB", e.d2h / 1e9);
    plan_seconds(verdict, sizeof verdict, e.d2h_s);
    plan_row("PCIe down", need, have, verdict);
    if (e.c.tier != TIER_RAM) {
        const bool given = ga->disk_read_gbs > 0;
        snprintf(need, sizeof need, "%.1f + %.1f GB", e.m.ssd_read_per_step / 1e9,
                 e.m.ssd_write_per_step / 1e9);
        snprintf(have, sizeof have, "%.2f / %.2f GB/s, %s", t->disk_read_Bps / 1e9, t->disk_write_Bps / 1e9,
                 ga->disk_rates_measured ? "measured on -sd DIR"
                 : given                 ? "given by -sr"
                                         : "assumed: -sr for yours");
        plan_seconds(verdict, sizeof verdict, e.disk_s);
        plan_row("disk r + w", need, have, verdict);
        snprintf(need, sizeof need, "%.1f + %.1f GB", e.m.ssd_round_reads / 1e9, e.m.ssd_round_writes / 1e9);
        plan_seconds(verdict, sizeof verdict, e.round_disk_s);
        plan_row("  the round's", need, "of them, the AdamW round's (the forward waits)", verdict);
    }
    snprintf(need, sizeof need, "%.1f GB", e.adam_bytes / 1e9);
    snprintf(have, sizeof have, "%.0f GB/s of host memory, assumed", PLAN_HOST_BPS / 1e9);
    plan_seconds(verdict, sizeof verdict, e.adam_s);
    plan_row("CPU AdamW", need, have, verdict);
    char fwd[32];
    plan_seconds(fwd, sizeof fwd, e.fwd_s);
    if (e.vocab_adam_s > 0) snprintf(have, sizeof have, "-E 1's part first, then the forward (%s)", fwd);
    else if (e.c.tier != TIER_RAM) snprintf(have, sizeof have, "AdamW and disk beside a %s forward", fwd);
    else snprintf(have, sizeof have, "during the next forward (%s)", fwd);
    plan_seconds(verdict, sizeof verdict, e.adam_wait_s);
    plan_row("GPU waits", "", have, verdict);
    if (e.gpu_adam_s > 0) {
        snprintf(need, sizeof need, "%.1f GB", e.gpu_adam_s * PLAN_HBM_BPS / 1e9);
        snprintf(have, sizeof have, "%.0f GB/s of GPU memory, assumed", PLAN_HBM_BPS / 1e9);
        plan_seconds(verdict, sizeof verdict, e.gpu_adam_s);
        plan_row("GPU AdamW", need, have, verdict);
    }
    const double tokens = (double)e.c.B * t->T * e.c.n_micro;
    const double rate = tokens / e.part_s;
    if (ga->ranks * ga->nodes > 1) printf("each GPU's part of the step (several GPUs: below): ");
    char step[32];
    plan_seconds(step, sizeof step, e.part_s);
    printf(rate >= 100 ? "step >= %s (bound by %s), <= %.0f tokens/s\n"
                       : "step >= %s (bound by %s), <= %.3g tokens/s\n",
           step, e.part_bound, rate);
}

static void print_multi_gpu_plan(const PlanTarget* t, const PlanEval& e, int G, int N) {
    const double GiB = 1073741824.0, ranks = (double)G * N;
    const ParamLayout p = model_layout(t->cfg, t->llama);
    const PlanSeveral sv = plan_several(t, e);
    printf(
        "\nseveral GPUs: %d node%s of %d GPUs (-pN %d -pn %d), %.0f tokens a step; each GPU: %d "
        "micro-batches "
        "of %d x %d\n",
        N, N > 1 ? "s" : "", G, N, G, ranks * e.c.B * t->T * e.c.n_micro, e.c.n_micro, e.c.B, t->T);
    plan_row("", "moves", "at", "takes");
    char takes[64];
    for (int i = 0; i < sv.n; i++) {
        plan_seconds(takes, sizeof takes, sv.rows[i].s);
        plan_row(sv.rows[i].what, sv.rows[i].need, sv.rows[i].at, takes);
    }
    if (e.adam_wait_s >
        0) {  // the node's CPU AdamW runs during each GPU's next forward: the GPUs wait for the rest
        char during[160];
        plan_seconds(takes, sizeof takes, e.fwd_s);
        snprintf(during, sizeof during, "during the next forward (%s)", takes);
        plan_seconds(takes, sizeof takes, e.adam_wait_s);
        plan_row("GPUs wait", "", during, takes);
    }
    if (sv.sums_s > 0) {
        plan_seconds(takes, sizeof takes, e.gpu_s + sv.sums_s);
        plan_row("a GPU's part", "", "its compute, waits and sums (one stream)", takes);
    }
    const double tokens = ranks * e.c.B * t->T * e.c.n_micro;
    printf("step >= %.2f s (bound by %s), <= %.0f tokens/s on %d GPUs\n", sv.step_s, sv.bound,
           tokens / sv.step_s, G * N);
    if (G > 1)  // the other way to feed G GPUs: each reads 1/G of a layer, NVLink all-gathers the rest
        printf(
            "each GPU reads whole layers over its own PCIe link (%.2f s a step); reading 1/%d of each and "
            "all-gathering the rest over NVLink would take %.2f s + %.2f s: worth it only where GPUs share "
            "a PCIe link\n",
            e.h2d / PLAN_PCIE_BPS, G, e.h2d / G / PLAN_PCIE_BPS, e.h2d * (G - 1.0) / G / PLAN_NVLINK_BPS);
    const double host = (double)e.m.host_bytes;  // plan_evaluate: a node's
    printf(
        "memory: each GPU %.2f GiB (the plan above, for its micro-batches); each node's host RAM %.2f GiB: ",
        e.m.gpu_bytes / GiB, host / GiB);
    if (N == 1)
        printf(
            "%s once, whatever G (%.1f bytes a parameter)%s%s\n",
            e.c.tier == TIER_RAM ? "the fp32 weights, m, v and bf16 copies"
            : e.c.tier == TIER_SSD
                ? "the bf16 weights and gradients, the -sd ring and the prefix's fp32 state"
                : "the bf16 gradients, the -sd ring and the prefix's fp32 state and bf16 weights (-sw 1: the "
                  "others' on disk)",
            host / p.total, e.c.tier == TIER_SSD_WEIGHTS ? "; each GPU's -sw 1 read buffers too" : "",
            e.c.vocab_host > 0 ? "; -E 1: each GPU's own pinned staging too" : "");
    else {
        char vocab[80] = "";
        if (e.c.vocab_host > 0)
            snprintf(vocab, sizeof vocab, " but -E 1's vocabulary: 16/%d with its fp32 gradients", N);
        printf(
            "%.1f bytes a parameter (fp32 weights, m, v: %s the prefix whole%s; bf16 gradients: 2/%d; bf16 "
            "weights whole: %s%s)\n",
            host / p.total,
            e.c.tier == TIER_RAM ? ("12/" + std::to_string(N) + " of the streamed layers,").c_str()
                                 : "the streamed layers' 1/N on each node's disk (-sd),",
            vocab, N,
            e.c.tier == TIER_SSD_WEIGHTS ? "the prefix's 2, the layers' on each node's disk (-sw 1)" : "2",
            e.c.tier == TIER_RAM ? "" : "; the -sd ring");
    }
}

// -P 1 after the part-by-part lines: the table, and advice where the plan does not fit. Returns the exit
// status. given: the flags as resolved (-R -1 / -K -1 / -E -1 placed or 0).
static int print_plan_verdicts(const GPTConfig* cfg, const LlamaConfig* llama, int T, const GpuArgs* ga,
                               PlanChoice given, bool no_gpu_here) {
    const bool several = ga->ranks * ga->nodes > 1;
    const double ranks = (double)ga->ranks * ga->nodes;
    const double GiB = 1073741824.0;
    PlanTarget t = plan_target(cfg, llama, T, ga);
    char gpu_text[96], peak_text[64];
    t.gpu_budget = plan_gpu_target(ga, no_gpu_here, gpu_text, sizeof gpu_text, &t.peak_flops, peak_text,
                                   sizeof peak_text);
    const PlanEval e = plan_evaluate(&t, given);
    printf("\n");
    if (no_gpu_here && ga->gpu_gib <= 0)
        printf("no GPU here: the GPU verdict is against an H100 80GB's %.0f GiB; -V GiB for another\n",
               PLAN_DEFAULT_GPU_GIB);
    print_plan_table(&t, e, ga, gpu_text, peak_text);
    if (several) print_multi_gpu_plan(&t, e, ga->ranks, ga->nodes);
    // -sd: the tokens a step at which the disk costs at most 10% of RAM's step. Its bytes a step do not grow
    // with -d; compute and the forward do. Both must hold: all of its reads and writes within 1.1 x compute,
    // and the round's disk work within the forward plus a tenth of the compute (what the GPU may wait).
    const double disk_k = e.c.tier == TIER_RAM ? 0.0
                                               : std::max(e.disk_s / (1.1 * e.compute_s),
                                                          e.round_disk_s / (e.fwd_s + 0.1 * e.compute_s));
    if (disk_k > 1) {
        PlanChoice more = given;
        more.n_micro = (int)std::min<double>(ceil(given.n_micro * disk_k), 1 << 20);
        const PlanEval d = plan_evaluate(&t, more);
        printf(
            "the disk (%.2f s a step, the round's part %.2f s, at %.2f / %.2f GB/s%s) costs at most 10%% of "
            "the step from -d %lld on (%d micro-batches of %d x %d%s; GPU %.2f GiB, %s)\n",
            e.disk_s, e.round_disk_s, t.disk_read_Bps / 1e9, t.disk_write_Bps / 1e9,
            ga->disk_rates_measured ? ", measured"
            : ga->disk_read_gbs > 0 ? ", -sr"
                                    : ", assumed",
            (long long)more.n_micro * given.B * T * (int64_t)ranks, more.n_micro, given.B, T,
            several ? " on each GPU" : "", d.m.gpu_bytes / GiB, d.gpu_fits ? "fits" : "does NOT fit");
        // or more host RAM for the ring (-sb): only where all of the disk's work fits the step and the RAM
        // is there
        PlanEval best;
        int64_t most = 0;
        const int64_t ring = plan_ssd_ring(&t, given, &best, &most);
        if (e.disk_s <= 1.1 * e.compute_s && best.round_disk_s < e.round_disk_s && best.host_fits) {
            char waits[32];
            plan_seconds(waits, sizeof waits, best.adam_wait_s);
            printf(
                "-sb %.2f (a ring of %lld of the round's %lld pieces, %.2f GiB of host RAM) would leave the "
                "round's part %.2f s and a GPU wait of %s (-sb auto, the default, takes it at the disk's "
                "measured rates where half of the host RAM left holds it)\n",
                ceil(best.m.ssd_ring / GiB * 100) / 100, (long long)ring, (long long)(most - 1),
                best.m.ssd_ring / GiB, best.round_disk_s, waits);
        }
    }
    // more tokens a step: compute grows, the copies and the disk do not, and the forward hides more of the
    // CPU AdamW (all but -E 1's part before it)
    const double k = std::max({e.h2d_s / e.compute_s, e.d2h_s / e.compute_s, e.disk_s / e.compute_s,
                               (std::max(e.adam_s, e.round_disk_s) - e.vocab_adam_s) / e.fwd_s});
    const double micro = ceil(given.n_micro * k);  // -d's limit: 2^20 micro-batches
    if (!several && k > 1 && micro <= (1 << 20)) {
        PlanChoice more = given;
        more.n_micro = (int)micro;
        PlanEval d = plan_evaluate(&t, more);
        // -R / -K auto, where this plan placed them (-V, a GPU here): placed again for that -d, as a run
        // would
        const bool auto_R = ga->resident == LAYERS_AUTO, auto_K = ga->kept == LAYERS_AUTO;
        char placed[64] = "";
        if ((auto_R || auto_K) && (ga->gpu_gib > 0 || !no_gpu_here)) {
            PlanEval none;
            d = plan_place_layers(&t, more, auto_R, auto_K, auto_R && ga->kept == -1, &none);
            snprintf(placed, sizeof placed, " with -R %d -K %d", d.c.resident, d.c.kept);
        }
        printf(
            "-d %lld (%d micro-batches) would make compute the bound: %.0f tokens/s, GPU %.2f GiB%s (%s)\n",
            (long long)more.n_micro * given.B * T, more.n_micro,
            (double)more.n_micro * given.B * T / d.step_s, d.m.gpu_bytes / GiB, placed,
            d.gpu_fits ? "fits" : "does NOT fit");
    }
    if (plan_fits(e)) return PLAN_FITS;
    // plan again with other flags: the fitting ones, fastest step first, fewer and cheaper changes first
    std::vector<PlanEval> all = plan_alternatives(&t, given), fit;
    for (const PlanEval& a : all)
        if (plan_fits(a)) fit.push_back(a);
    std::sort(fit.begin(), fit.end(), [&](const PlanEval& a, const PlanEval& b) {
        if (a.step_s != b.step_s) return a.step_s < b.step_s;
        const unsigned ma = plan_change_mask(given, a.c), mb = plan_change_mask(given, b.c);
        if (__builtin_popcount(ma) != __builtin_popcount(mb))
            return __builtin_popcount(ma) < __builtin_popcount(mb);
        return ma < mb;
    });
    char missing[64] = "";
    const struct {
        bool fits;
        const char* name;
    } parts[] = {{e.gpu_fits, "the GPU"}, {e.host_fits, "host RAM"}, {e.disk_fits, "the disk"}};
    for (const auto& p : parts)
        if (!p.fits)
            snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s%s",
                     missing[0] ? ", " : "", p.name);
    if (fit.empty()) {  // the least each resource is asked for, by any choice tried
        double gpu = 1e30, host = 1e30, disk = 1e30;
        for (const PlanEval& a : all) {
            gpu = std::min(gpu, (double)a.m.gpu_bytes);
            host = std::min(host, (double)a.m.host_bytes);
            if (a.c.tier != TIER_RAM) disk = std::min(disk, (double)a.m.ssd_disk);
        }
        // what plan_alternatives tried beside the flags as given
        std::vector<std::string> tried = {"a smaller -b", "fewer -R / -K"};
        if (llama && llama->num_layers && !given.vocab_host)
            tried.push_back("-E 1");  // GPT-2's stays on the GPU
        if (given.tier == TIER_RAM) tried.push_back("-sd");
        if (given.tier != TIER_SSD_WEIGHTS) tried.push_back("-sd -sw 1");
        std::string list;
        for (size_t i = 0; i < tried.size(); i++)
            list += (i == 0 ? "" : i + 1 == tried.size() ? ", or " : ", ") + tried[i];
        printf("advice: nothing fits, as given or with %s;\n", list.c_str());
        printf("  the least any of them needs: GPU %.2f GiB (%.2f here), host %.2f GiB", gpu / GiB,
               t.gpu_budget / GiB, host / GiB);
        if (t.host_avail >= 0) printf(" (%.2f here)", t.host_avail / GiB);
        if (t.disk_free >= 0 && disk < 1e30)
            printf(", disk %.2f GiB (%.2f free)", disk / GiB, t.disk_free / GiB);
        printf("\n  lower -t or -d, or choose a smaller model%s\n",
               !several ? ""
               : ga->ssd_dir
                   ? ", or plan more GPUs (-pn) or nodes (-pN: each node's host RAM and disk hold 1/N of the "
                     "state)"
                   : ", or plan more GPUs (-pn) or nodes (-pN: each node's host RAM holds 1/N of the state)");
        // the most tokens a step that fit, at this -b and -t: fewer micro-batches need fewer layer-input
        // checkpoints, the only part of the plan that grows with -d (a binary search: fitting is monotone)
        auto fastest_fit = [&](int n_micro, PlanEval* best) {
            PlanChoice c = given;
            c.n_micro = n_micro;
            bool any = false;
            for (const PlanEval& a : plan_alternatives(&t, c))
                if (plan_fits(a) && (!any || a.step_s < best->step_s)) *best = a, any = true;
            return any;
        };
        PlanEval most;
        int lo = 1, hi = given.n_micro - 1, found = 0;
        while (lo <= hi) {
            const int mid = lo + (hi - lo) / 2;
            PlanEval x;
            if (fastest_fit(mid, &x)) found = mid, most = x, lo = mid + 1;
            else hi = mid - 1;
        }
        if (found) {
            char flags[256];
            PlanChoice as_given = given;
            as_given.n_micro = found;
            plan_changes(as_given, most.c, T, ga->ssd_dir, flags, sizeof flags, (int64_t)ranks);
            const double tokens = (double)given.B * T * found * ranks;  // -b changes keep the tokens
            printf(
                "  the most that fits: -d %.0f (%d micro-batches of %d x %d%s)%s%s: GPU %.2f GiB, host %.2f "
                "GiB; step >= %.2f s (%s), <= %.0f tokens/s\n",
                tokens, found, given.B, T, several ? " on each GPU" : "", flags[0] ? " with" : "", flags,
                most.m.gpu_bytes / GiB, most.m.host_bytes / GiB, most.step_s, most.bound,
                tokens / most.step_s);
        }
        return PLAN_FITS_NOWHERE;
    }
    printf("advice: it does not fit %s; these do, the shortest step first:\n", missing);
    std::vector<unsigned> shown;
    for (const PlanEval& a : fit) {
        const unsigned mask = plan_change_mask(given, a.c);
        bool more = false;  // changes a shown one's flags and more: no faster, so not shown
        for (unsigned s : shown) more |= (mask & s) == s;
        if (more) continue;
        shown.push_back(mask);
        char flags[256], disk[64] = "";
        plan_changes(given, a.c, T, ga->ssd_dir, flags, sizeof flags, (int64_t)ranks);
        if (a.c.tier != TIER_RAM) snprintf(disk, sizeof disk, ", disk %.2f GiB", a.m.ssd_disk / GiB);
        const double rate = ranks * a.c.B * T * a.c.n_micro / a.step_s;  // every GPU's tokens
        printf(rate >= 100 ? "  %-24s GPU %.2f GiB, host %.2f GiB%s; step >= %.2f s (%s), <= %.0f tokens/s\n"
                           : "  %-24s GPU %.2f GiB, host %.2f GiB%s; step >= %.2f s (%s), <= %.3g tokens/s\n",
               flags + 1, a.m.gpu_bytes / GiB, a.m.host_bytes / GiB, disk, a.step_s, a.bound, rate);
        if (shown.size() == 3) break;
    }
    return PLAN_FITS_WITH_ADVICE;
}
