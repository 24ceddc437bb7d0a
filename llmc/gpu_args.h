// llmc/gpu_args.h — train_gpt's own flags: defaults, usage, parsing, TIER_*. Shared: args.h.
// Not here: what the flags do (train_gpt.cu, llmc/memory_plan.cuh).
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/args.h"    // defines: TrainArgs, train_args_defaults, train_usage, parse_train_arg, help_flag
#include "llmc/net.h"     // defines: NetAddress, net_parse_address, NET_DEFAULT_PORT
#include "llmc/stream.h"  // defines: MAX_SLOTS
#include "llmc/utils.h"   // defines: die

// -R auto / -K auto (the default): the placement with the shortest step in -P 1's model of the step, on
// this GPU's free memory or -V's (llmc/plan_advice.cuh plan_place_layers).
#define LAYERS_AUTO (-2)

// Streamed layers' state: RAM, SSD (-sd), or SSD with bf16 weights too (-sw 1).
enum { TIER_RAM = 0, TIER_SSD = 1, TIER_SSD_WEIGHTS = 2 };

// -sw 1: pinned read-ahead buffers for bf16 layers (stream.h HostReader), and pinned layer buffers in which
// the AdamW round hands its bf16 output to the next forward pass (ssd_tier.h sw_lend). Two of each: one
// filled while the other is copied keeps the disk (or the round) busy; four layers in all, as before the
// handoff (four read buffers), so host RAM stays where it was (405B: 128 GiB).
#define SW_READ_BUFFERS    2
#define SW_HANDOFF_BUFFERS 2

// Cores -A 0 leaves to other threads: main, plus -sd's gradient writer and I/O completion.
static inline int adam_threads_beside(bool ssd) { return ssd ? 3 : 1; }

// No default samples above this or with -sw 1: each token streams the model. -g N asks.
#define SAMPLE_DEFAULT_MAX_PARAMS 10000000000LL

// The flags only this trainer has.
typedef struct {
    int num_slots;        // -S  GPU weight slots (>= 2)
    int bench_steps;      // -B  N timed benchmark steps on synthetic tokens, 0: off
    int bench_warmup;     // -W  untimed steps before them
    int timeline;         // -Y  1: per-step timeline, -o adds DIR/trace.json
    int adam_threads;     // -A  CPU AdamW threads, 0: all cores but adam_threads_beside
    int model_given;      // -e given: with -y 1 it must match the checkpoint
    int resident;         // -R  first layers resident with AdamW state, -1: all that fit, LAYERS_AUTO
    int kept;             // -K  last layers keeping activations. -1: all that fit, LAYERS_AUTO
    int flash;            // -F  -1: fastest that works, 2: cuDNN, 1: our fused kernels, 0: cuBLAS
    int epilogues;        // -G  1: bias / GELU as cuBLASLt epilogues
    int plan_only;        // -P  1: print the memory plan and exit, without GPU or data
    float host_gib;       // -M  host GiB for the fit check, 0: MemAvailable
    float gpu_gib;        // -V  GPU GiB this run may use, 0: all free
    int vocab_host;       // -E  1: Llama's vocabulary in host RAM, -1: if needed
    const char* ssd_dir;  // -sd the SsdStore's directory (fp32 weights, m, v)
    int ssd_weights;      // -sw 1: with -sd, their bf16 weights there too
    int ssd_keep_state;   // -sk 1: with -sd, each checkpoint's state file holds every parameter's m and v
    float disk_read_gbs;  // -sr R[,W] the -sd disk's GB/s, for -P 1's step time. 0: measured or assumed
    float disk_write_gbs;
    int disk_rates_measured;  // -P 1: the rates above are the probe's of -sd DIR (not -sr's)
    float ssd_ring_gib;       // -sb host GiB for the SSD tier's ring of piece buffers, 0: 4 pieces, -1: auto
    int ranks;      // -pn GPUs of this node, one rank process each, started by this process (1: this one)
    int nodes;      // -pN nodes of -pn GPUs each
    int node_rank;  // -pr this node's index, 0..nodes-1 (0: rank 0's node)
    const char* node_address;  // -ps HOST[:PORT] of node 0 (its rank 0 listens there), for the other nodes
    // llm.c's way to start the processes (-pi): then -pn is the run's processes and -pr this one's rank
    const char* llmc_init;  // -pi tcp, fs or mpi (NULL: train_gpt's -pn / -pN / -pr)
    const char* llmc_fs;    // -pf a folder every node shares (-pi fs)
    int llmc_gpus;          // -pg GPUs a node (llm.c's default 8)
} GpuArgs;

static int ssd_tier(const GpuArgs* ga) {
    return !ga->ssd_dir ? TIER_RAM : ga->ssd_weights ? TIER_SSD_WEIGHTS : TIER_SSD;
}

static void gpu_train_defaults(TrainArgs* a, GpuArgs* ga) {
    train_args_defaults(a);
    a->model = "d12";  // GPT-2 124M shape, from a random init
    a->B = 8;
    a->T = 1024;
    a->lr = 6e-4f;
    a->warmup_steps = 10;
    a->final_lr_frac = 0.1f;
    a->max_steps = 70;  // two epochs of the shipped shard at 8K tokens a step
    a->val_every = 10;
    a->val_max_batches = 4;  // caps big val sets. The shipped one (3 batches) runs whole
    ga->num_slots = 2;
    ga->bench_steps = 0;
    ga->bench_warmup = 2;
    ga->timeline = 0;
    ga->adam_threads = 0;
    ga->model_given = 0;
    ga->resident = LAYERS_AUTO;
    ga->kept = LAYERS_AUTO;
    ga->flash = -1;
    ga->epilogues = 1;
    ga->plan_only = 0;
    ga->host_gib = 0;
    ga->gpu_gib = 0;
    ga->vocab_host = -1;
    ga->ssd_dir = NULL;
    ga->ssd_weights = 0;
    ga->ssd_keep_state = 0;
    ga->disk_read_gbs = ga->disk_write_gbs = 0;
    ga->disk_rates_measured = 0;
    ga->ssd_ring_gib = -1;  // auto
    ga->ranks = 1;
    ga->nodes = 1;
}

static void gpu_usage(const TrainArgs* d, const GpuArgs* gd) {
    printf(
        "usage: ./train_gpt [flags]   (no flags: train GPT-2 small (d12) on the shipped tinyshakespeare "
        "shards)\n");
    train_usage(stdout, d);
    printf(
        "flags of the streaming trainer:\n"
        "  -S <int>    GPU weight slots, 2..%d (default %d)\n"
        "  -B <int>    benchmark mode: N timed steps on synthetic tokens, then a RESULT json line (default "
        "off)\n"
        "  -W <int>    benchmark warm-up steps, not timed (default %d)\n"
        "  -Y <0|1>    per-step timeline: busy time per stream and of the CPU AdamW, GPU idle (with -sd "
        "also\n"
        "              the disk's read and write busy time); with -o also DIR/trace.json, a Chrome trace of\n"
        "              the last step; at the end, the -R / -K that the last step's timeline suggests "
        "(default %d)\n"
        "  -A <int>    CPU AdamW threads, 0 = all cores but one (-sd: but three) (default %d)\n"
        "  -R <N|auto> keep the first N layers on the GPU with their fp32 weights and AdamW state (updated "
        "there,\n"
        "              never copied): uses GPU memory the streaming leaves free to shorten the CPU AdamW;\n"
        "              0 = stream every layer, -1 = as many as fit (default auto, below)\n"
        "  -K <N|auto> keep the last N layers' activations from the forward to the backward pass, which "
        "then\n"
        "              skips their recompute (a quarter of their compute); costs about 18*C*tokens-per-step\n"
        "              bytes per layer: 0 = recompute every layer, -1 = as many as fit after -R (default "
        "auto)\n"
        "              auto: the -R and -K with the shortest step in -P 1's model of it (the CPU AdamW\n"
        "              must fit in the next forward), in the GPU's free memory or -V's; none unless that\n"
        "              is 3%% and 10 ms a step faster. -sd: -R auto is 0\n"
        "  -F <-1..2>  attention: 2 = cuDNN's SDPA (loaded at run time, checked against our kernel at "
        "start;\n"
        "              falls back with one line), 1 = our fused tensor-core kernels (head sizes 32, 64, 80, "
        "96,\n"
        "              128), 0 = cuBLAS GEMMs + softmax over stored (T x T) scores, -1 = the fastest that\n"
        "              works: cuDNN, then fused, then cuBLAS (default %d)\n"
        "  -G <0|1>    1 = the bias, residual and GELU passes after the GEMMs run as cuBLASLt epilogues,\n"
        "              0 = as separate kernels (default %d)\n"
        "  -P <0|1>    print the host and GPU memory this run would need, part by part, and exit: a "
        "capacity\n"
        "              check that needs no GPU and no data. A table sets them against the GPU's memory (-V,\n"
        "              else this GPU's free memory, else an H100 80GB's 79 GiB), host RAM (-M) and the -sd\n"
        "              disk, with the time a step must take at stated rates; where they do not fit, the\n"
        "              flags that make them fit. Exit status 0: fits, 2: does not fit but the advice does,\n"
        "              3: nothing tried fits (default %d)\n"
        "  -M <GiB>    host memory the fit check may count on, 0 = MemAvailable of /proc/meminfo: for "
        "machines\n"
        "              whose memory grows as it is used (VMs with memory hotplug) (default %g)\n"
        "  -V <GiB>    GPU memory this run may use (its fit check, -R / -K auto or -1; with -P 1 they are "
        "planned\n"
        "              for it), 0 = all that is free: e.g. -V 79 places layers as on an H100 80GB (default "
        "%g)\n"
        "  -E <int>    the Llama family's vocabulary tensors (embeddings, lm_head, final norm): 0 = on the "
        "GPU\n"
        "              with their AdamW state, 1 = in host RAM, updated by the CPU AdamW; the head and the "
        "loss\n"
        "              then run over the vocabulary in chunks, so the logits never exist for all of it;\n"
        "              -1 = in host RAM only when the GPU (or -V) cannot hold them (default %d)\n"
        "  -sd <dir>   SSD tier: the streamed layers' fp32 weights and AdamW m, v live in files under dir "
        "(an\n"
        "              NVMe drive; O_DIRECT over io_uring), and their bf16 gradients too: 14 bytes per\n"
        "              parameter less RAM, 26 on disk (two generations: checkpoints copy nothing). Measures "
        "the\n"
        "              disk at start. Resume (-y 1) with the same dir and -R, on any -pn of one node (a\n"
        "              run in RAM's checkpoint too: its state fills a new store).\n"
        "              With -pn: the node's rank 0 holds it, the gradients stay in host RAM:\n"
        "              12 bytes per parameter less RAM, 24 on disk. With -pN: each node's leader keeps its\n"
        "              1/N of each layer in dir/node<n> on its drive (resume with the -pN and -pn it ran\n"
        "              with, each -pr on the machine that holds its dir/node<n>) (default off)\n"
        "  -sw <0|1>   with -sd: the streamed layers' bf16 weights live there too, read ahead into %d "
        "pinned\n"
        "              layer buffers for each pass: 2 bytes per parameter less RAM, RAM no longer grows\n"
        "              with depth (one GPU; -pn keeps the gradients in RAM); the backward pass reads 2 more\n"
        "              bytes per parameter, 4 more on disk (the forward takes them from the AdamW round\n"
        "              in %d pinned handoff buffers). With -pn each GPU reads them through the page\n"
        "              cache, the forward's too: one GPU's read serves the others. With -pN each node's\n"
        "              dir/node<n>/layers.bf16 holds whole layers, its ranks reading them the same way\n"
        "              (2 more bytes per parameter on each node's disk) (default %d)\n"
        "  -sk <0|1>   with -sd: each checkpoint's state file holds every parameter's m and v, read from\n"
        "              the store at the save (8 bytes per parameter more on -o's disk and that much more\n"
        "              to read): it resumes like a run in RAM's, without -sd, on any -pn and -pN, or with\n"
        "              -sd (its state fills the store) (default 0)\n"
        "  -sr <GB/s>[,<GB/s>]  -P 1's step time: the -sd disk's read[,write] rate (R alone: both; default:\n"
        "              -sd DIR's disk measured where DIR is there, else 6,4 assumed)\n"
        "  -sb <GiB>|auto  with -sd: host RAM for the CPU AdamW round's ring of piece buffers (a piece:\n"
        "              up to 64 Mi parameters' fp32 weights, m, v and bf16 gradient). Whole pieces, at "
        "least\n"
        "              4 (0: 4), at most the round's + 1. More reads the next round ahead during the "
        "backward\n"
        "              and lets its writes trail into it, off the next forward's path. auto: the smallest\n"
        "              that keeps the round's disk work within the forward at the disk's measured rates,\n"
        "              within half of the host RAM the plan leaves; -P 1 says it at its rates (default "
        "auto)\n"
        "  -pn <int>   GPUs of this node: starts one rank process per GPU, each computing its share of the\n"
        "              step's micro-batches (-d / (-b * -t) must divide by it); the fp32 weights, AdamW "
        "state\n"
        "              and pinned bf16 copies exist once in host RAM for all of them; gradients are summed\n"
        "              by NCCL (LLMC_COLLECTIVES=host: through host memory) (default %d)\n"
        "  -pN <int>   nodes of -pn GPUs each: start train_gpt on each node with the same flags and its own\n"
        "              -pr; each node keeps and updates 1/N of the fp32 weights and AdamW state; -P 1 plans\n"
        "              memory per GPU and per node, each link's bytes and the step time (default 1)\n"
        "  -pr <int>   this node's index, 0..N-1 (node 0 holds rank 0: it logs and saves) (default 0)\n"
        "  -ps <host[:port]>  node 0's address: the other nodes connect there, node 0 listens on its port\n"
        "              (default port %d; IPv6: [addr]:port). LLMC_NODE_WAIT: seconds to wait for every node\n"
        "              (default 600);\n"
        "              LLMC_NODE_TIMEOUT: seconds a node may go silent before the run ends (default 60)\n"
        "              torchrun / mpirun instead of -pn, -pN, -pr: RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and\n"
        "              MASTER_ADDR; node 0 listens on MASTER_PORT + 1 (LLMC_NET_PORT sets it)\n"
        "  -pi <tcp|fs|mpi>  llm.c's way instead: each process started by hand or a scheduler (srun) with\n"
        "              -pn the run's processes, -pr its rank, -pg GPUs a node (default 8); tcp: -ps node "
        "0's\n"
        "              host; fs: -pf a folder every node shares (node 0 leaves its address there); mpi:\n"
        "              mpirun's environment\n"
        "samples (-g, -s): none by default for a model over %.0fB parameters or with -sw 1 (each token\n"
        "  streams the whole model once); -g N still asks for them\n",
        MAX_SLOTS, gd->num_slots, gd->bench_warmup, gd->timeline, gd->adam_threads, gd->flash, gd->epilogues,
        gd->plan_only, gd->host_gib, gd->gpu_gib, gd->vocab_host, SW_READ_BUFFERS, SW_HANDOFF_BUFFERS,
        gd->ssd_weights, gd->ranks, NET_DEFAULT_PORT, SAMPLE_DEFAULT_MAX_PARAMS / 1e9);
}

// -g, else SAMPLE_DEFAULT_MAX_PARAMS' rule, else args.h's.
static int gpu_sample_tokens(const TrainArgs* a, const GpuArgs* ga, int64_t params) {
    if (a->gen_tokens < 0 && (params > SAMPLE_DEFAULT_MAX_PARAMS || ssd_tier(ga) == TIER_SSD_WEIGHTS))
        return 0;
    return sample_tokens(a);
}

// -sr R or R,W in GB/s: write as read where W is left out. 1 ok, 0 error (err set).
static int parse_disk_rates(const char* value, GpuArgs* ga, char* err, size_t errlen) {
    char read[64];
    const char* comma = strchr(value, ',');
    snprintf(read, sizeof read, "%.*s", comma ? (int)(comma - value) : (int)strlen(value), value);
    if (!parse_float_in("-sr", read, 0.001, 1e4, &ga->disk_read_gbs, err, errlen)) return 0;
    if (!comma) {
        ga->disk_write_gbs = ga->disk_read_gbs;
        return 1;
    }
    return parse_float_in("-sr", comma + 1, 0.001, 1e4, &ga->disk_write_gbs, err, errlen);
}

// llm.c's way to start the processes (its multi_gpu_config_init): each process started by hand or by a
// scheduler (srun) with -pn (the run's processes), -pr (this one's rank), -pg (GPUs a node, 8) and -pi: tcp
// (node 0 at -ps's host), fs (node 0's address left in -pf's folder, which every node shares), mpi (Open
// MPI's environment, as mpirun sets it). Turned into the launcher environment train_gpt takes already (RANK,
// WORLD_SIZE, LOCAL_WORLD_SIZE: rank_start); -pn, -pN, -pr as this process's own then mean one of each.
static void llmc_process_flags(GpuArgs* ga, bool ranks_given, bool rank_given) {
    const char* how = ga->llmc_init;
    if (!how) die("-pf and -pg go with llm.c's -pi tcp|fs|mpi (run ./train_gpt -h for the flags)");
    if (ga->nodes > 1) die("-pN is train_gpt's nodes; with llm.c's -pi the nodes are -pn / -pg");
    if (strcmp(how, "fs") == 0 && !ga->llmc_fs) die("-pi fs: -pf names a folder every node shares");
    const int gpus = ga->llmc_gpus > 0 ? ga->llmc_gpus : 8;
    char v[32];
    if (strcmp(how, "mpi") == 0) {  // rank_start reads Open MPI's OMPI_COMM_WORLD_*
        if (ranks_given || rank_given)
            die("-pi mpi: mpirun's environment numbers the processes: drop -pn and -pr (or take -pi tcp)");
        const char* size = getenv("OMPI_COMM_WORLD_SIZE");
        if (!size && !getenv("WORLD_SIZE"))
            die("-pi mpi: no Open MPI environment (start the processes with mpirun)");
        if (size && !getenv("WORLD_SIZE")) setenv("WORLD_SIZE", size, 1);  // -ps over several nodes
        if (!getenv("OMPI_COMM_WORLD_LOCAL_SIZE") && !getenv("LOCAL_WORLD_SIZE")) {
            snprintf(v, sizeof v, "%d", gpus);
            setenv("LOCAL_WORLD_SIZE", v, 1);
        }
    } else {
        if (!ranks_given || (!rank_given && !ga->plan_only))
            die("-pi %s: llm.c's -pn (the run's processes) and -pr (this process's rank) are needed", how);
        const int world = ga->ranks, rank = ga->node_rank, local = std::min(gpus, world);
        if (rank >= world) die("-pr %d with -pn %d: a process's rank is 0..%d", rank, world, world - 1);
        if (world % local)
            die("-pn %d processes over nodes of -pg %d GPUs: every node runs as many (make -pn a multiple of "
                "-pg)",
                world, local);
        if (world > local && strcmp(how, "tcp") == 0 && !ga->node_address && !ga->plan_only)
            die("-pi tcp over %d nodes: -ps names node 0's host (llm.c's server address)", world / local);
        if (world <= local && ga->node_address)
            die("-pi %s: -ps names node 0 of several nodes: -pn (the run's processes) is not more than -pg "
                "(GPUs "
                "a node) here",
                how);
        if (ga->plan_only) {  // -P 1 plans nodes of -pg GPUs, as -pn G -pN N
            ga->ranks = local, ga->nodes = world / local, ga->node_rank = 0;
            return;
        }
        snprintf(v, sizeof v, "%d", world), setenv("WORLD_SIZE", v, 1);
        snprintf(v, sizeof v, "%d", rank), setenv("RANK", v, 1);
        snprintf(v, sizeof v, "%d", local), setenv("LOCAL_WORLD_SIZE", v, 1);
        // the node's shared block and -pf's file are named by the run: a scheduler's job, else node 0's
        // address, -pf's folder or the working folder (two runs of one node need one of them apart)
        if (!getenv("LLMC_RUN_ID")) {
            const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
            char key[4400], cwd[4096] = "", id[64];
            if (job && *job) snprintf(key, sizeof key, "%s.%s", job, step ? step : "");
            else
                snprintf(key, sizeof key, "%s",
                         ga->node_address          ? ga->node_address
                         : ga->llmc_fs             ? ga->llmc_fs
                         : getcwd(cwd, sizeof cwd) ? cwd
                                                   : "run");
            uint64_t h = 1469598103934665603ull;  // FNV-1a: a long path's name, whole, in a short one
            for (const char* c = key; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
            snprintf(id, sizeof id, "pi-%016llx", (unsigned long long)h);
            setenv("LLMC_RUN_ID", id, 1);
        }
    }
    ga->ranks = 1, ga->nodes = 1, ga->node_rank = 0;  // the environment's, from here (rank_start)
}

// Our flags first, then shared ones. Dies on errors.
static void parse_args(int argc, char** argv, TrainArgs* a, GpuArgs* ga) {
    TrainArgs d;
    GpuArgs gd;
    gpu_train_defaults(&d, &gd);
    *a = d;
    *ga = gd;
    char err[512];
    bool warmup_given = false, ranks_given = false, rank_given = false;
    for (int i = 1; i < argc; i += 2) {
        const char* flag = argv[i];
        const int help = help_flag(argc, argv, i, err, sizeof err);
        if (help < 0) die("%s", err);
        if (help) {
            gpu_usage(&d, &gd);
            exit(0);
        }
        if (flag[0] != '-') {  // not a flag: likely a file of an unquoted pattern
            unknown_flag_error(flag, err, sizeof err);
            die("%s (run ./train_gpt -h for the flags)", err);
        }
        if (i + 1 >= argc) die("flag %s needs a value (run ./train_gpt -h for the flags)", flag);
        const char* value = argv[i + 1];
        int64_t v = 0;
        int ok = 1;
        if (strcmp(flag, "-S") == 0) {
            ok = parse_int_in(flag, value, 2, MAX_SLOTS, &v, err, sizeof err);
            ga->num_slots = (int)v;
        } else if (strcmp(flag, "-B") == 0) {
            ok = parse_int_in(flag, value, 0, 1000000, &v, err, sizeof err);
            ga->bench_steps = (int)v;
        } else if (strcmp(flag, "-W") == 0) {
            ok = parse_int_in(flag, value, 0, 1000000, &v, err, sizeof err);
            ga->bench_warmup = (int)v;
            warmup_given = true;
        } else if (strcmp(flag, "-Y") == 0) {
            ok = parse_int_in(flag, value, 0, 1, &v, err, sizeof err);
            ga->timeline = (int)v;
        } else if (strcmp(flag, "-A") == 0) {
            ok = parse_int_in(flag, value, 0, 4096, &v, err, sizeof err);
            ga->adam_threads = (int)v;
        } else if (strcmp(flag, "-R") == 0 || strcmp(flag, "-K") == 0) {
            int* layers = flag[1] == 'R' ? &ga->resident : &ga->kept;
            if (strcmp(value, "auto") == 0) *layers = LAYERS_AUTO;
            else if (!parse_int_in(flag, value, -1, 1 << 20, &v, err, sizeof err)) {
                ok = 0;
                snprintf(err, sizeof err,
                         "flag %s: '%s': want auto, -1 (as many as fit) or a number of layers", flag, value);
            } else *layers = (int)v;
        } else if (strcmp(flag, "-F") == 0) {
            ok = parse_int_in(flag, value, -1, 2, &v, err, sizeof err);
            ga->flash = (int)v;
        } else if (strcmp(flag, "-P") == 0) {
            ok = parse_int_in(flag, value, 0, 1, &v, err, sizeof err);
            ga->plan_only = (int)v;
        } else if (strcmp(flag, "-G") == 0) {
            ok = parse_int_in(flag, value, 0, 1, &v, err, sizeof err);
            ga->epilogues = (int)v;
        } else if (strcmp(flag, "-M") == 0)
            ok = parse_float_in(flag, value, 0.0, 1 << 24, &ga->host_gib, err, sizeof err);
        else if (strcmp(flag, "-V") == 0)
            ok = parse_float_in(flag, value, 0.0, 1 << 20, &ga->gpu_gib, err, sizeof err);
        else if (strcmp(flag, "-E") == 0) {
            ok = parse_int_in(flag, value, -1, 1, &v, err, sizeof err);
            ga->vocab_host = (int)v;
        } else if (strcmp(flag, "-sd") == 0) {
            if (!value[0]) die("-sd needs a directory (run ./train_gpt -h for the flags)");
            ga->ssd_dir = value;
        } else if (strcmp(flag, "-sr") == 0) {
            ok = parse_disk_rates(value, ga, err, sizeof err);
        } else if (strcmp(flag, "-sb") == 0) {
            if (strcmp(value, "auto") == 0) ga->ssd_ring_gib = -1;
            else ok = parse_float_in(flag, value, 0.0, 1 << 24, &ga->ssd_ring_gib, err, sizeof err);
        } else if (strcmp(flag, "-pn") == 0) {  // at most 64 a node; -pi: the run's processes
            ok = parse_int_in(flag, value, 1, 1 << 18, &v, err, sizeof err);
            ga->ranks = (int)v;
            ranks_given = true;
        } else if (strcmp(flag, "-pi") == 0) {
            if (strcmp(value, "tcp") && strcmp(value, "fs") && strcmp(value, "mpi"))
                die("-pi %s: llm.c's ways to start the processes are tcp, fs and mpi (run ./train_gpt -h for "
                    "the "
                    "flags)",
                    value);
            ga->llmc_init = value;
        } else if (strcmp(flag, "-pf") == 0) {
            if (!value[0]) die("-pf needs a folder every node shares (run ./train_gpt -h for the flags)");
            ga->llmc_fs = value;
        } else if (strcmp(flag, "-pg") == 0) {
            ok = parse_int_in(flag, value, 1, 64, &v, err, sizeof err);
            ga->llmc_gpus = (int)v;
        } else if (strcmp(flag, "-pN") == 0) {
            ok = parse_int_in(flag, value, 1, 4096, &v, err, sizeof err);
            ga->nodes = (int)v;
        } else if (strcmp(flag, "-pr") == 0) {  // a node's index; -pi: a process's rank
            ok = parse_int_in(flag, value, 0, (1 << 18) - 1, &v, err, sizeof err);
            rank_given = true;
            ga->node_rank = (int)v;
        } else if (strcmp(flag, "-ps") == 0) {
            NetAddress a;
            if (!net_parse_address(value, &a))
                die("-ps %s: HOST, HOST:PORT or [IPv6]:PORT, a port of 1..65535 (run ./train_gpt -h for the "
                    "flags)",
                    value);
            ga->node_address = value;
        } else if (strcmp(flag, "-sw") == 0) {
            ok = parse_int_in(flag, value, 0, 1, &v, err, sizeof err);
            ga->ssd_weights = (int)v;
        } else if (strcmp(flag, "-sk") == 0) {
            ok = parse_int_in(flag, value, 0, 1, &v, err, sizeof err);
            ga->ssd_keep_state = (int)v;
        } else {
            if (strcmp(flag, "-e") == 0) ga->model_given = 1;
            const int r = parse_train_arg(a, flag, value, err, sizeof err);
            if (r < 0) {
                unknown_flag_error(flag, err, sizeof err);
                die("%s (run ./train_gpt -h for the flags)", err);
            }
            ok = r;
        }
        if (!ok) die("%s (run ./train_gpt -h for the flags)", err);
    }
    if (!train_args_check(a, err, sizeof err)) die("%s (run ./train_gpt -h for the flags)", err);
    if (ga->llmc_init || ga->llmc_fs || ga->llmc_gpus) llmc_process_flags(ga, ranks_given, rank_given);
    (void)net_timeout_seconds();  // a bad LLMC_NODE_TIMEOUT is one line now, not when the nodes have joined
    if (ga->ranks > 64)
        die("-pn %d: at most 64 GPUs a node (llm.c's -pn, the run's processes, goes with -pi)", ga->ranks);
    if (ga->node_rank >= ga->nodes)
        die("-pr %d with -pN %d: a node's index is 0..%d (run ./train_gpt -h for the flags)", ga->node_rank,
            ga->nodes, ga->nodes - 1);
    if (ga->nodes > 1 && ga->node_rank > 0 && !ga->node_address && !ga->plan_only)
        die("-pr %d: -ps HOST[:PORT] names node 0, where this node joins the run (run ./train_gpt -h for the "
            "flags)",
            ga->node_rank);
    if (ga->ssd_weights && !ga->ssd_dir)
        die("-sw 1 puts the bf16 weights in the SSD tier: it needs -sd DIR (run ./train_gpt -h for the "
            "flags)");
    if (ga->ssd_keep_state && !ga->ssd_dir)
        die("-sk 1 puts the SSD tier's state in each checkpoint's state file: it needs -sd DIR (run "
            "./train_gpt -h for the flags)");
    if (ga->ssd_ring_gib > 0 && !ga->ssd_dir)
        die("-sb sizes the SSD tier's ring: it needs -sd DIR (run ./train_gpt -h for the flags)");
    if (ga->disk_read_gbs > 0 && !ga->ssd_dir)
        die("-sr gives -P 1 the SSD tier's disk rates: it needs -sd DIR (run ./train_gpt -h for the flags)");
    if (ga->disk_read_gbs > 0 && !ga->plan_only)
        die("-sr gives -P 1 the SSD tier's disk rates; a run measures its own disk: drop -sr, or add -P 1");
    if (warmup_given && ga->bench_steps == 0)
        die("-W sets the benchmark's warm-up steps: it needs -B N (run ./train_gpt -h for the flags)");
    const char* world = getenv("WORLD_SIZE");
    if (ga->node_address && ga->nodes <= 1 && !(world && atoi(world) > 1))
        die("-ps names node 0 of several nodes: it needs -pN N, N of 2 or more (run ./train_gpt -h for the "
            "flags)");
}
