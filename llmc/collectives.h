// collectives.h — the ranks of a multi-GPU run (-pn G GPUs a node, -pN N nodes): what the ranks of a node
// share and how all of them sum. One process per GPU, as llm.c's ranks; rank = node * G + local. The node's
// fp32 master weights, AdamW m, v and the pinned bf16 weights and gradients exist ONCE a node, in memory
// every rank of it maps (node_shared_alloc: a memfd), so host RAM does not grow with G; over several nodes
// each node updates (and keeps) only its ranks' slices of the fp32 state. Sums over all ranks, behind one
// interface with two backends:
//   COMM_NCCL: NCCL, loaded at run time (libnccl.so.2: LLMC_NCCL_LIB, the loader, Python wheels' nvidia/*)
//   COMM_HOST: through the node's shared memory, in rank order, then between nodes over net.h's links in node
//              order (the CPU emulator's backend, and the fallback where NCCL does not load: slow, same sums)
// LLMC_COLLECTIVES=host|nccl chooses; default NCCL where it loads.
// Not here: which buffers are summed when (train_gpt.cu), starting the ranks (rank_launch.h), TCP (net.h).
#pragma once
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <errno.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>
#include "cpu_cores.h"    // defines: usable_cpu_cores, cpu_share_of
#include "cuda_common.h"  // defines: cudaCheck
#include "net.h"          // defines: NetLinks, net_sum, net_bcast, net_gather
#include "utils.h"        // defines: die, die_rank
#include "wheel_libs.h"   // defines: wheel_libraries

#define MAX_RANKS          64
#define NODE_SHARED_ARRAYS 16
#define NODE_NOTE_BYTES    (64 * 1024)
#define NODE_SHARED_MAGIC  0x6c6c6d64  // "llmd": NodeShared's layout (a rank of another build times out)
enum { COMM_SINGLE = 0, COMM_HOST = 1, COMM_NCCL = 2 };

// One per node, in memory the launcher maps before it starts the ranks (rank_launch.h).
struct NodeShared {
    std::atomic<int> arrived, generation;       // node_barrier
    std::atomic<int> failed_rank, failed_code;  // set by the launcher when a rank dies (-1: none)
    std::atomic<int> gate_open;                 // rank 0 passed the set-up that checks flags and data
    std::atomic<uint64_t> flags;  // its run_fingerprint, set before gate_open: each rank's must match
    std::atomic<int64_t> progress[MAX_RANKS];  // each rank's CPU AdamW progress (llmc/cpu_optimizer.h)
    std::atomic<int> magic;                    // NODE_SHARED_MAGIC once rank 0 set it up (rank_attach)
    std::atomic<int> attached;                 // ranks that joined rank 0's block (rank_attach)
    std::atomic<int64_t> exchanged;  // several nodes: the bf16 exchange's progress (llmc/cpu_optimizer.h)
    std::atomic<int> said;           // a rank said why the run ends (utils.h die_said): the rest are quiet
    std::atomic<uint64_t> progress_here;  // ticks of this node's ranks (utils.h progress_tick)
    std::atomic<uint64_t>
        progress_elsewhere;  // several nodes: beats that said another node moved on (net_watch)
    int pids[MAX_RANKS];     // each rank's process, for comm_check_alive
    int launched;            // 1: -pn's launcher watches the ranks (rank_launch.h)
    int owner_pid;           // rank 0: the memfds below are its
    int fds[NODE_SHARED_ARRAYS];
    char nccl_id[128];
    char gpu_bus[MAX_RANKS][40];  // each rank's GPU: its UUID or PCI bus id (comm_ranks_on_my_gpu)
    cpu_set_t cpus[MAX_RANKS];    // each rank's affinity (comm_cpu_cores)
    double sums[MAX_RANKS][4];    // comm_sum_host's slots
    double node_sums[4];          //   several nodes: the sum over all of them
    char note[NODE_NOTE_BYTES];   // comm_share's bytes from rank 0
};

struct Comm {
    int rank = 0, world = 1;         // over every node: rank = node_rank * local_world + local
    int local = 0, local_world = 1;  // on this node (its NodeShared)
    int node_rank = 0, nodes = 1;
    NetLinks net;  // several nodes, the node's leader (local 0): the links (net.h)
    int backend = COMM_SINGLE;
    NodeShared* node = nullptr;
    int arrays = 0;            // node_shared_alloc calls so far (collective: same order on every rank)
    float* scratch = nullptr;  // COMM_HOST: world x chunk floats, shared and pinned
    float* staging = nullptr;  //   chunk floats, this rank's, pinned
    int64_t chunk = 0;
    void* nccl = nullptr;           // COMM_NCCL: the communicator
    double* dev_sums = nullptr;     //   4 doubles on the GPU for comm_sum_host
    cudaStream_t stream = nullptr;  //   comm_sum_host's stream
    std::thread* watch = nullptr;   //   comm_watch: NCCL's errors and dead ranks, while a wait blocks
    std::atomic<bool> watch_stop{false}, nccl_ready{false};  // nccl_ready: the communicator is made
    char note[256] = "";                                     // how the ranks sum, for the config table
};

// ----------------------------------------------------------------------------
// The host side: a barrier, small sums, bytes from rank 0. A dead rank ends the others in one line.

// Another rank of the node ended: -pn's launcher says so in the block; started by another launcher, its
// process is gone. True with the line to say in why ("" when that rank said why itself).
static inline bool comm_rank_gone(const Comm* c, char* why, size_t n) {
    const int f = c->node->failed_rank.load(std::memory_order_acquire);
    const int first = c->node_rank * c->local_world;  // the node's ranks, numbered over every node
    if (f >= 0 && c->node->said.load()) return snprintf(why, n, "%s", ""), true;
    // another launcher's rank that said why it ends (its flags differed, say): gone, though a launcher that
    // has not reaped it yet leaves a zombie that kill(pid, 0) still finds
    if (!c->node->launched && c->node->said.load()) return snprintf(why, n, "%s", ""), true;
    if (f >= 0)
        return snprintf(why, n, "rank %d stopped (exit status %d): this rank stops too", first + f,
                        c->node->failed_code.load()),
               true;
    if (c->node->launched) return false;
    for (int r = 0; r < c->local_world; r++) {
        const int pid = c->node->pids[r];
        if (r != c->local && pid > 0 && kill(pid, 0) != 0 && errno == ESRCH)
            return snprintf(why, n, "rank %d (process %d) is gone: this rank stops too", first + r, pid),
                   true;
    }
    return false;
}
static inline void comm_check_alive(const Comm* c) {
    char why[160];
    if (!comm_rank_gone(c, why, sizeof why)) return;
    if (!*why) _exit(1);  // it said why itself
    die("%s", why);
}

static inline void node_barrier(const Comm* c) {
    if (c->local_world == 1) return;
    NodeShared* n = c->node;
    const int gen = n->generation.load(std::memory_order_acquire);
    if (n->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == c->local_world) {
        n->arrived.store(0, std::memory_order_relaxed);
        n->generation.fetch_add(1, std::memory_order_acq_rel);
        return;
    }
    auto passed = [n, gen] { return n->generation.load(std::memory_order_acquire) != gen; };
    for (int spins = 0; !passed(); spins++)
        if (spins > 2000) {
            usleep(20);
            if (!passed()) comm_check_alive(c);  // the last rank may have left at once: passed first
        }
}

// ----------------------------------------------------------------------------
// NCCL, loaded at run time: its ABI's few types, declared here, so nothing needs nccl.h to build.

typedef struct {
    char internal[128];
} NcclUniqueId;
enum { NCCL_FLOAT32 = 7, NCCL_FLOAT64 = 8, NCCL_SUM = 0, NCCL_MIN = 3 };
enum { NCCL_IN_PROGRESS = 7 };  // ncclResult_t: ncclInProgress (0 is ncclSuccess)
struct NcclApi {
    int (*get_unique_id)(NcclUniqueId*);
    int (*comm_init_rank)(void**, int, NcclUniqueId, int);
    int (*all_reduce)(const void*, void*, size_t, int, int, void*, cudaStream_t);
    int (*reduce_scatter)(const void*, void*, size_t, int, int, void*, cudaStream_t);
    int (*comm_destroy)(void*);
    const char* (*error_string)(int);
    int (*get_version)(int*);
    int (*get_async_error)(void*, int*);  // ncclCommGetAsyncError
    const char* (*last_error)(void*);     // ncclGetLastError (NCCL 2.13+; NULL before): the error's detail
    std::string library;
};
static NcclApi nccl_api;

// NCCL's error rc as text, with its detail where NCCL has one ("Duplicate GPU detected ...").
static inline std::string nccl_error_text(int rc) {
    std::string t = nccl_api.error_string(rc);
    const char* last = nccl_api.last_error ? nccl_api.last_error(NULL) : NULL;
    if (last && *last) t += std::string(" (") + last + ")";
    return t;
}
#define ncclCheck(call)                                                                   \
    do {                                                                                  \
        const int nccl_rc_ = (call);                                                      \
        if (nccl_rc_ != 0) die("NCCL: %s: %s", #call, nccl_error_text(nccl_rc_).c_str()); \
    } while (0)

// Where libnccl.so.2 may be: LLMC_NCCL_LIB, the loader's search, Python wheels (PyTorch's nvidia/nccl).
static inline std::vector<std::string> nccl_candidates() {
    const char* env = getenv("LLMC_NCCL_LIB");
    if (env && *env) return {env};
    std::vector<std::string> c = {"libnccl.so.2"};
    for (const std::string& w : wheel_libraries("nccl/lib/libnccl.so.2")) c.push_back(w);
    return c;
}

// NCCL's functions, or false with why.
static inline bool nccl_open(char* why, size_t n) {
    if (nccl_api.all_reduce) return true;
    void* h = nullptr;
    std::string tried;
    for (const std::string& path : nccl_candidates()) {
        if ((h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL))) {
            nccl_api.library = path;
            break;
        }
        tried += (tried.empty() ? "" : ", ") + path;
    }
    if (!h) {
        snprintf(why, n, "no libnccl.so.2 found (tried %.300s; set LLMC_NCCL_LIB=/path/to/libnccl.so.2)",
                 tried.c_str());
        return false;
    }
    NcclApi a;
    a.library = nccl_api.library;
    a.get_unique_id = (int (*)(NcclUniqueId*))dlsym(h, "ncclGetUniqueId");
    a.comm_init_rank = (int (*)(void**, int, NcclUniqueId, int))dlsym(h, "ncclCommInitRank");
    a.all_reduce =
        (int (*)(const void*, void*, size_t, int, int, void*, cudaStream_t))dlsym(h, "ncclAllReduce");
    a.reduce_scatter =
        (int (*)(const void*, void*, size_t, int, int, void*, cudaStream_t))dlsym(h, "ncclReduceScatter");
    a.comm_destroy = (int (*)(void*))dlsym(h, "ncclCommDestroy");
    a.error_string = (const char* (*)(int))dlsym(h, "ncclGetErrorString");
    a.get_version = (int (*)(int*))dlsym(h, "ncclGetVersion");
    a.get_async_error = (int (*)(void*, int*))dlsym(h, "ncclCommGetAsyncError");
    a.last_error = (const char* (*)(void*))dlsym(h, "ncclGetLastError");
    if (!a.get_unique_id || !a.comm_init_rank || !a.all_reduce || !a.reduce_scatter || !a.comm_destroy ||
        !a.error_string || !a.get_version || !a.get_async_error) {
        snprintf(why, n, "%s lacks NCCL's functions", a.library.c_str());
        return false;
    }
    nccl_api = a;
    return true;
}

// ----------------------------------------------------------------------------
// Memory every rank of the node maps: its rank 0 makes a memfd, the others open it through /proc.
// Collective: every rank of the node calls it, in the same order. One rank a node: private anonymous memory.

static inline void* node_shared_alloc(Comm* c, int64_t bytes, const char* what) {
    if (bytes <= 0) return NULL;
    if (c->local_world == 1) {
        void* p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    const int id = c->arrays++;
    if (id >= NODE_SHARED_ARRAYS) die("internal: more than %d node-shared arrays", NODE_SHARED_ARRAYS);
    int fd = -1;
    if (c->local == 0) {
        fd = (int)syscall(SYS_memfd_create, what, 0);
        if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0)
            die("cannot make %.2f GiB of node-shared memory for %s: %s", bytes / 1073741824.0, what,
                strerror(errno));
        c->node->owner_pid = getpid();
        c->node->fds[id] = fd;
    }
    node_barrier(c);
    if (c->local != 0) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/fd/%d", c->node->owner_pid, c->node->fds[id]);
        fd = open(path, O_RDWR);
        if (fd < 0)
            die("cannot open rank 0's node-shared memory for %s (%s): %s", what, path, strerror(errno));
    }
    void* p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) die("cannot map %.2f GiB of node-shared memory for %s", bytes / 1073741824.0, what);
    node_barrier(c);  // every rank mapped it: the file may close (the mappings keep it)
    close(fd);
    return p;
}
static inline void node_shared_free(void* p, int64_t bytes) {
    if (p) munmap(p, (size_t)bytes);
}

// ----------------------------------------------------------------------------
// Sums

// v[0..n) summed over the ranks (min: their least), the same bits on every rank (n <= 4).
static inline void comm_sum_host(Comm* c, double* v, int n, bool min = false) {
    NodeShared* node = c->node;
    if (c->backend == COMM_SINGLE) return;
    if (c->backend == COMM_NCCL) {
        cudaCheck(cudaMemcpyAsync(c->dev_sums, v, (size_t)n * 8, cudaMemcpyHostToDevice, c->stream));
        ncclCheck(nccl_api.all_reduce(c->dev_sums, c->dev_sums, (size_t)n, NCCL_FLOAT64,
                                      min ? NCCL_MIN : NCCL_SUM, c->nccl, c->stream));
        cudaCheck(cudaMemcpyAsync(v, c->dev_sums, (size_t)n * 8, cudaMemcpyDeviceToHost, c->stream));
        cudaCheck(cudaStreamSynchronize(c->stream));
        return;
    }
    for (int i = 0; i < n; i++) node->sums[c->local][i] = v[i];
    node_barrier(c);
    for (int i = 0; i < n; i++) {
        double s = min ? node->sums[0][i] : 0.0;
        for (int r = min ? 1 : 0; r < c->local_world; r++)
            s = min ? std::min(s, node->sums[r][i]) : s + node->sums[r][i];
        v[i] = s;
    }
    if (c->nodes > 1) {  // the node's leader sums the nodes' sums; the node takes them
        node_barrier(c);
        if (c->local == 0) {
            net_sum(&c->net, NET_MAIN, v, n, min);
            for (int i = 0; i < n; i++) node->node_sums[i] = v[i];
        }
        node_barrier(c);
        for (int i = 0; i < n; i++) v[i] = node->node_sums[i];
    }
    node_barrier(c);  // the slots are free again
}

// The node's leader's `bytes` bytes at p, to the node's ranks.
static inline void node_share(Comm* c, void* p, size_t bytes) {
    if (c->local_world == 1) return;
    if (bytes > sizeof c->node->note) die("internal: %zu bytes to share", bytes);
    if (c->local == 0) memcpy(c->node->note, p, bytes);
    node_barrier(c);
    if (c->local != 0) memcpy(p, c->node->note, bytes);
    node_barrier(c);
}
// Rank 0's `bytes` bytes at p, to every rank (several nodes: to each node's leader, then its ranks).
static inline void comm_share(Comm* c, void* p, size_t bytes) {
    if (c->world == 1) return;
    if (c->nodes > 1 && c->local == 0) net_bcast(&c->net, NET_MAIN, p, (int64_t)bytes);
    node_share(c, p, bytes);
}

// The part of n elements that rank r owns: [lo, hi), slices of comm_slice elements (multiples of 64).
static inline int64_t slice_of(int64_t n, int world) {
    const int64_t s = (n + world - 1) / world;
    return (s + 63) / 64 * 64;
}
static inline int64_t comm_slice(const Comm* c, int64_t n) { return slice_of(n, c->world); }
static inline void comm_part(const Comm* c, int64_t n, int64_t* lo, int64_t* hi) {
    const int64_t s = comm_slice(c, n);
    *lo = std::min<int64_t>(n, (int64_t)c->rank * s);
    *hi = std::min<int64_t>(n, *lo + s);
}
// node_part_of: the most a node's part holds (node 0's), for N nodes of G ranks (the memory plan's, -sd).
static inline int64_t node_part_of(int64_t n, int nodes, int ranks) {
    return std::min<int64_t>(n, slice_of(n, nodes * ranks) * ranks);
}
// comm_node_stride: where node k's part starts, k * it (its G slices).
static inline int64_t comm_node_stride(const Comm* c, int64_t n) { return comm_slice(c, n) * c->local_world; }
// The part node `node`'s ranks own together: its G slices, [lo, hi).
static inline void comm_node_part(const Comm* c, int64_t n, int node, int64_t* lo, int64_t* hi) {
    const int64_t s = comm_node_stride(c, n);
    *lo = std::min<int64_t>(n, (int64_t)node * s);
    *hi = std::min<int64_t>(n, *lo + s);
}

// COMM_HOST: dev[0, n) summed over the ranks chunk by chunk, in rank order (several nodes: the node's ranks
// in order, then the nodes in order, by the node's leader); this rank keeps [keep_lo, keep_hi).
static inline void host_sum_device(Comm* c, float* dev, int64_t n, int64_t keep_lo, int64_t keep_hi,
                                   cudaStream_t s) {
    float* const node_sum = c->scratch + (int64_t)c->local_world * c->chunk;  // several nodes: all of them
    for (int64_t o = 0; o < n; o += c->chunk) {
        const int64_t m = std::min(c->chunk, n - o);
        float* mine = c->scratch + (int64_t)c->local * c->chunk;
        cudaCheck(cudaMemcpyAsync(mine, dev + o, (size_t)m * 4, cudaMemcpyDeviceToHost, s));
        cudaCheck(cudaStreamSynchronize(s));
        node_barrier(c);
        FAKE_CUDA_HOST_ACCESS(mine, m * 4, false, "the host summing the ranks' gradients");
        if (c->nodes > 1) {
            if (c->local == 0) {
                for (int64_t i = 0; i < m; i++) {
                    float sum = 0.0f;
                    for (int r = 0; r < c->local_world; r++) sum += c->scratch[(int64_t)r * c->chunk + i];
                    node_sum[i] = sum;
                }
                net_sum(&c->net, NET_MAIN, node_sum, m);
            }
            node_barrier(c);
        }
        const int64_t a = std::max(o, keep_lo), b = std::min(o + m, keep_hi);
        for (int64_t i = a; i < b; i++) {
            float sum = 0.0f;
            if (c->nodes > 1) sum = node_sum[i - o];
            else
                for (int r = 0; r < c->local_world; r++) sum += c->scratch[(int64_t)r * c->chunk + (i - o)];
            c->staging[i - a] = sum;
        }
        if (a < b) {
            FAKE_CUDA_HOST_ACCESS(c->staging, (b - a) * 4, true, "the host writing the ranks' sum");
            cudaCheck(cudaMemcpyAsync(dev + a, c->staging, (size_t)(b - a) * 4, cudaMemcpyHostToDevice, s));
            cudaCheck(cudaStreamSynchronize(s));
        }
        node_barrier(c);  // every rank read the scratch
    }
}

// dev[0, n) summed over the ranks, on every rank (stream s).
static inline void comm_all_reduce(Comm* c, float* dev, int64_t n, cudaStream_t s) {
    if (c->backend == COMM_SINGLE || n == 0) return;
    if (c->backend == COMM_NCCL)
        ncclCheck(nccl_api.all_reduce(dev, dev, (size_t)n, NCCL_FLOAT32, NCCL_SUM, c->nccl, s));
    else host_sum_device(c, dev, n, 0, n, s);
}

// dev holds world x comm_slice(n) floats (zero past n): afterwards this rank's slice holds their sum.
static inline void comm_reduce_scatter(Comm* c, float* dev, int64_t n, cudaStream_t s) {
    if (c->backend == COMM_SINGLE) return;
    const int64_t slice = comm_slice(c, n);
    if (c->backend == COMM_NCCL) {
        ncclCheck(nccl_api.reduce_scatter(dev, dev + (int64_t)c->rank * slice, (size_t)slice, NCCL_FLOAT32,
                                          NCCL_SUM, c->nccl, s));
        return;
    }
    int64_t lo, hi;
    comm_part(c, n, &lo, &hi);
    host_sum_device(c, dev, n, lo, hi, s);
}

// ----------------------------------------------------------------------------
// Set-up, after the rank chose its GPU.

// How many of the node's ranks run on this rank's GPU, told apart by its UUID (a MIG instance has its own),
// else its PCI bus id (a scheduler that gives each rank its own GPU through CUDA_VISIBLE_DEVICES numbers
// every one of them 0); *most: the most on any GPU of the node, the same on every rank. Collective over the
// node.
static inline int comm_ranks_on_my_gpu(Comm* c, int device, const cudaDeviceProp* prop, int* most) {
    *most = 1;
    if (c->local_world == 1) return 1;
    char bus[40] = "";
    bool uuid = false;
    for (int i = 0; i < 16; i++) uuid |= prop->uuid.bytes[i] != 0;
    if (uuid)
        for (int i = 0; i < 16; i++) snprintf(bus + 2 * i, 3, "%02x", (unsigned char)prop->uuid.bytes[i]);
    else if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, device) != cudaSuccess) {
        cudaGetLastError();
        snprintf(bus, sizeof bus, "device %d", device);
    }
    memcpy(c->node->gpu_bus[c->local], bus, sizeof bus);
    node_barrier(c);
    int n = 0;
    for (int r = 0; r < c->local_world; r++) {
        int same = 0;
        for (int q = 0; q < c->local_world; q++)
            same += strcmp(c->node->gpu_bus[q], c->node->gpu_bus[r]) == 0;
        *most = std::max(*most, same);
        if (r == c->local) n = same;
    }
    return n;
}

// The cores this rank's CPU AdamW may take: its share of the node's (cpu_share_of over every rank's affinity,
// so a launcher's pinning counts once), and of a cgroup quota (a node-wide cap: 1/G of it). Collective over
// the node.
static inline int comm_cpu_cores(Comm* c) {
    const int usable = usable_cpu_cores();
    if (c->local_world == 1) return usable;
    cpu_set_t mine;
    CPU_ZERO(&mine);
    if (sched_getaffinity(0, sizeof mine, &mine) != 0)
        for (int i = 0; i < (int)sysconf(_SC_NPROCESSORS_ONLN) && i < CPU_SETSIZE; i++) CPU_SET(i, &mine);
    c->node->cpus[c->local] = mine;
    node_barrier(c);
    const int share = cpu_share_of(c->node->cpus, c->local_world, c->local);
    node_barrier(c);  // every rank read the masks
    // usable < the mask's count: a cgroup quota, for the node's ranks together
    const int quota = CPU_COUNT(&mine) > usable ? std::max(1, usable / c->local_world) : share;
    return std::min(share, quota);
}

// While NCCL runs: its asynchronous errors (a network error, a node gone) and a rank of this node that ended
// end this rank in one line, also while a wait for the GPU blocks the main thread (which would hang).
static inline void comm_watch(Comm* c) {
    while (!c->watch_stop.load()) {
        usleep(100 * 1000);
        int err = 0;
        if (c->nccl_ready.load() && nccl_api.get_async_error(c->nccl, &err) == 0 && err != 0 &&
            err != NCCL_IN_PROGRESS)
            die("NCCL: %s: this rank stops", nccl_error_text(err).c_str());
        char why[160];
        if (c->local_world > 1 && comm_rank_gone(c, why, sizeof why)) {
            if (!*why) _exit(1);  // it said why itself
            die("%s", why);
        }
    }
}
static inline void comm_stop_watch(Comm* c) {
    if (!c->watch) return;
    c->watch_stop.store(true);
    c->watch->join();
    delete c->watch;
    c->watch = nullptr;
}

// One rank: nothing to set up, unless LLMC_COLLECTIVES=nccl asks for NCCL's one-rank sums (a check that it
// loads and runs). ranks_on_gpu > 1 (ranks share this GPU, which NCCL refuses): the host's sums, unless
// LLMC_NCCL_HOSTS=split (each rank another NCCL_HOSTID: the ranks talk as two nodes would) or
// LLMC_COLLECTIVES=nccl. Every rank takes the same backend (the ranks agree first).
static inline void comm_init(Comm* c, int ranks_on_gpu = 1) {
    const char* want = getenv("LLMC_COLLECTIVES");
    if (c->world == 1 && !(want && strcmp(want, "nccl") == 0)) return;
    const bool host_asked = want && strcmp(want, "host") == 0, nccl_asked = want && strcmp(want, "nccl") == 0;
    if (want && *want && !host_asked && !nccl_asked) die("LLMC_COLLECTIVES=%s: host or nccl", want);
    char why[512] = "";
#ifdef FAKE_CUDA_DEVICE
    if (nccl_asked) die("LLMC_COLLECTIVES=nccl: the CPU emulator has no NCCL");
    snprintf(why, sizeof why, "the CPU emulator");
    bool nccl = false;
#else
    bool nccl = !host_asked && nccl_open(why, sizeof why);
    if (nccl_asked && !nccl) die("LLMC_COLLECTIVES=nccl: %s", why);
#endif
    const char* hosts = getenv("LLMC_NCCL_HOSTS");
    if (hosts && *hosts && strcmp(hosts, "split")) die("LLMC_NCCL_HOSTS=%.40s: split, or unset", hosts);
    const bool split = hosts && strcmp(hosts, "split") == 0;
    if (nccl && ranks_on_gpu > 1 && !split && !nccl_asked) {
        nccl = false;
        snprintf(why, sizeof why,
                 "%d ranks share a GPU, which NCCL refuses; LLMC_NCCL_HOSTS=split: NCCL over sockets",
                 ranks_on_gpu);
    }
    if (c->world > 1) {  // one rank on NCCL would wait in ncclCommInitRank for another in the host's sums
        double usable = nccl ? 1.0 : 0.0;
        c->backend = COMM_HOST;  // the host's sum: node memory and net.h's links, nothing of comm_init's
        comm_sum_host(c, &usable, 1);
        c->backend = COMM_SINGLE;
        if (nccl && usable < c->world) {
            if (nccl_asked)
                die("LLMC_COLLECTIVES=nccl: NCCL is usable on %.0f of the %d ranks", usable, c->world);
            nccl = false;
            snprintf(why, sizeof why, "NCCL is usable on %.0f of the %d ranks", usable, c->world);
        }
    }
    if (nccl) {
        NcclUniqueId id;
        if (split && ranks_on_gpu == 1 && c->local_world > 1 && c->local == 0)
            fprintf(stderr,
                    "warning: LLMC_NCCL_HOSTS=split on ranks with a GPU each: NCCL talks over sockets, "
                    "not NVLink or PCIe (drop it where GPUs are not shared)\n");
        if (split) {
            char host[64];
            snprintf(host, sizeof host, "llmc-rank-%d", c->rank);
            setenv("NCCL_HOSTID", host, 1);
        }
        // NCCL's connection buffers at init (since 2.22 they come at the first collective), before the
        // memory plan measures what is free; a user's setting stands
        setenv("NCCL_RUNTIME_CONNECT", "0", 0);
        if (c->rank == 0) ncclCheck(nccl_api.get_unique_id(&id));
        comm_share(c, &id, sizeof id);              // several nodes: over net.h's link to each node's leader
        c->watch = new std::thread(comm_watch, c);  // a rank that dies while the others wait in the init
        ncclCheck(nccl_api.comm_init_rank(&c->nccl, c->world, id, c->rank));
        c->nccl_ready.store(true);
        cudaCheck(cudaMalloc((void**)&c->dev_sums, 4 * 8));
        cudaCheck(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
        int version = 0;
        nccl_api.get_version(&version);
        c->backend = COMM_NCCL;
        snprintf(c->note, sizeof c->note, "NCCL %d.%d.%d (%.180s)", version / 10000, version / 100 % 100,
                 version % 100, nccl_api.library.c_str());
        return;
    }
    c->backend = COMM_HOST;
    c->chunk = (int64_t)1 << 20;  // 4 MiB a rank, and one for the sum over the nodes
    const int64_t scratch_bytes = (int64_t)(c->local_world + 1) * c->chunk * 4;
    c->scratch = (float*)node_shared_alloc(c, scratch_bytes, "the ranks' sums");
    cudaCheck(cudaHostRegister(c->scratch, (size_t)scratch_bytes, cudaHostRegisterDefault));
    cudaCheck(cudaMallocHost((void**)&c->staging, (size_t)c->chunk * 4));
    snprintf(c->note, sizeof c->note, "through host memory%s, in rank order (%s)",
             c->nodes > 1 ? " and TCP" : "", host_asked ? "LLMC_COLLECTIVES=host" : why);
}

static inline void comm_free(Comm* c) {
    if (c->backend == COMM_NCCL) {
        comm_stop_watch(c);
        ncclCheck(nccl_api.comm_destroy(c->nccl));
        cudaCheck(cudaFree(c->dev_sums));
        cudaCheck(cudaStreamDestroy(c->stream));
    } else if (c->backend == COMM_HOST) {
        cudaCheck(cudaHostUnregister(c->scratch));
        node_shared_free(c->scratch, (int64_t)(c->local_world + 1) * c->chunk * 4);
        cudaCheck(cudaFreeHost(c->staging));
    }
    c->backend = COMM_SINGLE;
}
