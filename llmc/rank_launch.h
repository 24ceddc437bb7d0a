// rank_launch.h — -pn G: this process starts G rank processes on this node, one per GPU, and watches them.
// Or another launcher started them (torchrun, mpirun, a scheduler): rank_attach finds the node's block by
// name. It maps the node's NodeShared (collectives.h) before it forks, so every rank finds it. Each rank: its
// own process group (a terminal's Ctrl-C reaches the launcher, which passes it on once), killed when the
// launcher dies, stdout silent but rank 0's. A rank that fails stops the others: the launcher marks it in
// NodeShared, which every waiting rank checks, and kills what still runs after a grace period. Several nodes
// (-pN N -pr n -ps HOST:PORT, or torchrun's / Open MPI's environment): the same on each node, ranks numbered
// node * G + local, and each node's rank on GPU 0 links to rank 0's node (net.h). Not here: what a rank does
// (train_gpt.cu), how ranks sum (collectives.h).
#pragma once
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <new>
#include <string>
#include <unistd.h>
#include "collectives.h"  // defines: Comm, NodeShared, MAX_RANKS
#include "net.h"          // defines: NetAddress, net_open (std::function)
#include "stop_signal.h"  // defines: on_stop_signals, stop_signal_install_setup, stop_signal_quiet
#include "utils.h"        // defines: die, die_rank

static pid_t launch_children[MAX_RANKS];
static int launch_count = 0;
static volatile sig_atomic_t launch_signal = 0;

// Ctrl-C / SIGTERM to the launcher: to every rank, once per signal (the ranks stop after a step together).
static void launch_forward_signal(int sig) {
    launch_signal = sig;
    for (int r = 0; r < launch_count; r++)
        if (launch_children[r] > 0) kill(launch_children[r], sig);
}

static double monotonic_seconds() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

// The launcher's wait: returns the run's exit status once every rank has ended. first: the node's rank 0's
// number over every node; world: the ranks of every node.
static int launch_wait(NodeShared* node, int G, int first, int world) {
    int status_of_run = 0, alive = G, failed = -1;
    double failed_at = 0;
    while (alive > 0) {
        int status = 0;
        const pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0) {
            if (failed >= 0 &&
                monotonic_seconds() - failed_at > 30.0)  // a rank stuck in a collective: end it
                for (int r = 0; r < G; r++)
                    if (launch_children[r] > 0) kill(launch_children[r], SIGKILL);
            usleep(50000);
            continue;
        }
        int r = 0;
        while (r < G && launch_children[r] != pid) r++;
        if (r == G) continue;
        launch_children[r] = 0;
        alive--;
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        // a stop that was asked for: of this launcher, or of a rank or node elsewhere (the ranks agree on it)
        const bool stopped = code == 130 || code == 143;
        if (code != 0 && !stopped && failed < 0) {
            failed = r;
            failed_at = monotonic_seconds();
            status_of_run = WIFEXITED(status) ? code : 1;
            node->failed_code.store(code);
            node->failed_rank.store(r, std::memory_order_release);
            char how[96];
            if (WIFEXITED(status)) snprintf(how, sizeof how, "ended with exit status %d", code);
            else
                snprintf(how, sizeof how, "was killed by signal %d (%s)", WTERMSIG(status),
                         strsignal(WTERMSIG(status)));
            // before the gate: rank 0's set-up error, said once by rank 0; after it, a rank that ended with
            // an error line of its own (die) said why
            if (node->gate_open.load() && !(WIFEXITED(status) && code == 1 && node->said.load()))
                fprintf(stderr, "error: rank %d of %d %s: stopping the other ranks%s\n", first + r, world,
                        how, world > G ? " of this node" : "");
        } else if (code != 0 && status_of_run == 0) {
            status_of_run = code;
        }
    }
    return status_of_run;
}

// This process's place: its node's G ranks, `nodes` nodes, this one node `node_rank`.
static void rank_place(Comm* c, int local, int G, int node_rank, int nodes, NodeShared* node) {
    c->local = local;
    c->local_world = G;
    c->node_rank = node_rank;
    c->nodes = nodes;
    c->rank = node_rank * G + local;
    c->world = G * nodes;
    c->node = node;
    if (c->world > 1) die_said = &node->said;
}

// Starts G ranks. Returns in each rank with its place (rank_place) set; the launcher itself never returns (it
// exits with the run's status). One rank on each of several nodes: no launcher, this process is the rank.
static void rank_launch(Comm* c, int G, int node_rank, int nodes) {
    if (G < 2 && nodes < 2) return;
    if (G > MAX_RANKS) die("-pn %d: at most %d ranks on one node", G, MAX_RANKS);
    void* p = mmap(NULL, sizeof(NodeShared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) die("cannot map the ranks' shared control block");
    NodeShared* node = new (p) NodeShared();
    node->failed_rank.store(-1);
    if (G == 1) {
        node->pids[0] = getpid();
        rank_place(c, 0, 1, node_rank, nodes, node);
        if (c->rank != 0) die_rank = c->rank;
        if (c->rank != 0 && !freopen("/dev/null", "w", stdout))
            die("cannot silence stdout");  // rank 0's alone
        return;
    }
    node->launched = 1;
    fflush(NULL);
    const pid_t launcher = getpid();
    for (int r = 0; r < G; r++) {
        const pid_t pid = fork();
        if (pid < 0) die("-pn %d: cannot start rank %d: %s", G, r, strerror(errno));
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);  // the launcher gone: so is this rank
            if (getppid() != launcher) _exit(1);
            setpgid(0, 0);
            stop_signal_install_setup();  // the launcher forwards a signal: during the set-up, one line, exit
            stop_signal_quiet = r != 0;   // (they died of it, silently, before)
            if ((r != 0 || node_rank != 0) && !freopen("/dev/null", "w", stdout)) _exit(1);
            rank_place(c, r, G, node_rank, nodes, node);
            node->pids[r] = getpid();
            if (c->rank != 0) die_rank = c->rank;  // rank 0's set-up errors are the run's (rank_gate_open)
            return;
        }
        launch_children[r] = pid;
        launch_count = r + 1;
    }
    on_stop_signals(launch_forward_signal);
    const int status = launch_wait(node, G, node_rank * G, G * nodes);
    fflush(NULL);
    _exit(status);
}

// Bad flags or data are found by rank 0 alone, in one line: the other ranks of its node wait here until its
// set-up passed (and end quietly if it failed). Other nodes: their rank on GPU 0 checks them likewise.
static void rank_gate_wait(const Comm* c) {
    if (c->local_world == 1 || c->local == 0) return;
    while (!c->node->gate_open.load(std::memory_order_acquire)) {
        const int pid0 = c->node->pids[0];
        if (c->node->failed_rank.load() == 0 ||
            c->node->said.load() ||  // it said why (not yet reaped, maybe)
            (pid0 > 0 && kill(pid0, 0) != 0 && errno == ESRCH))
            _exit(1);
        usleep(1000);
    }
}
// flags: a hash of what every rank must run alike. Several nodes: node 0 compares the nodes'. The node's
// other ranks compare theirs with its first's (another launcher starts each with its own command line).
static void rank_gate_open(Comm* c, uint64_t flags) {
    if (c->world == 1) return;
    if (c->local != 0) {
        if (c->node->flags.load(std::memory_order_acquire) != flags)
            die("its flags differ from rank %d's (or the data they name): every rank of a run starts with "
                "the same "
                "flags",
                c->rank - c->local);
        return;
    }
    if (c->rank == 0) die_rank = 0;
    net_started(&c->net, flags);  // several nodes: every node's set-up passed, with the same flags
    c->node->flags.store(flags, std::memory_order_release);
    c->node->gate_open.store(1, std::memory_order_release);
}

// ----------------------------------------------------------------------------
// Ranks started by another launcher: torchrun's RANK / WORLD_SIZE / LOCAL_WORLD_SIZE, Open MPI's
// OMPI_COMM_WORLD_*. false: none (or one rank); else this process's rank, world and ranks on this node.
static int env_int(const char* a, const char* b) {
    const char* name = a;
    const char* v = getenv(a);
    if (!v || !*v) v = getenv(name = b);
    if (!v || !*v) return -1;
    char* end = NULL;
    const long x = strtol(v, &end, 10);
    if (*end || x < 0 || x > (1 << 20)) die("%s=%.40s: a whole number is needed", name, v);
    return (int)x;
}
static bool env_ranks(int* rank, int* world, int* local_world) {
    *world = env_int("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE");
    *rank = env_int("RANK", "OMPI_COMM_WORLD_RANK");
    *local_world = env_int("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE");
    if (*world <= 1) return false;
    if (*rank < 0 || *rank >= *world) die("RANK %d with WORLD_SIZE %d", *rank, *world);
    if (*local_world < 0) *local_world = *world;
    return true;
}

// How long ranks and nodes wait for each other to start: LLMC_NODE_WAIT seconds, 600 by default.
static int start_wait_seconds() {
    const char* w = getenv("LLMC_NODE_WAIT");
    if (!w || !*w) return 600;
    char* end = NULL;
    const long s = strtol(w, &end, 10);
    if (*end || s < 1 || s > 10000000) die("LLMC_NODE_WAIT=%.40s: whole seconds, 1 or more", w);
    return (int)s;
}
// A wait of the start: true while it may go on. Says once, after 5 s, what it waits for (a rank that never
// starts would otherwise leave the others silent for the whole wait).
struct StartWait {
    double t0 = monotonic_seconds();
    bool said = false;
    bool go_on(const char* what) {
        const double t = monotonic_seconds() - t0;
        if (t > 5 && !said) {
            fprintf(stderr, "waiting for %s (up to %d s: LLMC_NODE_WAIT)\n", what, start_wait_seconds());
            said = true;
        }
        if (t > start_wait_seconds()) return false;
        usleep(1000);
        return true;
    }
};

// The node's block, by a name every rank of it derives alike: LLMC_RUN_ID, else MASTER_PORT (torchrun), else
// Open MPI's job id, and the node's index. Its rank 0 creates it (a stale one of a run that died is
// replaced); the others open it once that process is alive behind it; it removes the name once all joined.
// rank, world: this process on its node.
static void rank_attach(Comm* c, int rank, int world, int node_rank, int nodes) {
    if (world > MAX_RANKS) die("LOCAL_WORLD_SIZE %d: at most %d ranks on one node", world, MAX_RANKS);
    const char* key = getenv("LLMC_RUN_ID");
    if (!key || !*key) key = getenv("MASTER_PORT");
    if (!key || !*key) key = getenv("OMPI_MCA_ess_base_jobid");
    char name[128];
    snprintf(name, sizeof name, "/llmc-ranks-%d-%.60s-%d", (int)getuid(), key && *key ? key : "default",
             node_rank);
    for (char* p = name + 1; *p; p++)
        if (*p == '/') *p = '_';
    NodeShared* node = NULL;
    if (rank == 0) {
        shm_unlink(name);
        const int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0 || ftruncate(fd, sizeof(NodeShared)) != 0)
            die("cannot create %s: %s", name, strerror(errno));
        void* p = mmap(NULL, sizeof(NodeShared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED) die("cannot map %s", name);
        node = new (p) NodeShared();
        node->failed_rank.store(-1);
        node->pids[0] = getpid();
        node->magic.store(NODE_SHARED_MAGIC, std::memory_order_release);
    }
    StartWait wait;
    while (!node) {  // the others: rank 0 (a slow start)
        char what[160];
        snprintf(what, sizeof what, "rank 0 of this node to start (this is rank %d of %d)", rank, world);
        if (!wait.go_on(what)) die("rank 0 did not start (no %s after %d s)", name, start_wait_seconds());
        const int fd = shm_open(name, O_RDWR, 0600);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(NodeShared)) {
            void* p = mmap(NULL, sizeof(NodeShared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            NodeShared* n = p == MAP_FAILED ? NULL : (NodeShared*)p;
            if (n && n->magic.load(std::memory_order_acquire) == NODE_SHARED_MAGIC && n->pids[0] > 0 &&
                kill(n->pids[0], 0) == 0)
                node = n;
            else if (n) munmap(p, sizeof(NodeShared));
        }
        if (fd >= 0) close(fd);
    }
    node->pids[rank] = getpid();
    rank_place(c, rank, world, node_rank, nodes, node);
    if (c->rank != 0) die_rank = c->rank;
    if (c->rank != 0 && !freopen("/dev/null", "w", stdout)) die("cannot silence stdout");
    if (rank != 0) {
        node->attached.fetch_add(1, std::memory_order_acq_rel);
        return;
    }
    while (node->attached.load(std::memory_order_acquire) < world - 1) {
        char what[160];
        snprintf(what, sizeof what,
                 "the other ranks of this node to start (%d of %d joined; the environment's launcher starts "
                 "them)",
                 node->attached.load() + 1, world);
        if (!wait.go_on(what))
            die("%d of %d ranks of this node joined in %d s: the environment's RANK and WORLD_SIZE (or "
                "OMPI_COMM_WORLD_*) say a launcher starts them; without one, unset them (-pn starts its own)",
                node->attached.load() + 1, world, start_wait_seconds());
    }
    shm_unlink(name);  // every rank holds it: nothing is left behind
}

// main's choice: -pn's launcher (-pN, -pr, -ps: this node of several), another launcher's environment
// (several nodes: WORLD_SIZE over LOCAL_WORLD_SIZE, rank 0's node at MASTER_ADDR, port LLMC_NET_PORT or
// MASTER_PORT + 1), or one rank. Several nodes: each node's rank on GPU 0 links to rank 0's node (net.h;
// LLMC_NODE_WAIT seconds, 600 by default, for the nodes to start).
// -pi fs: node 0's "HOST PORT" from the file at path into *addr; false where it is not (yet) there.
static bool fs_read_address(const std::string& path, NetAddress* addr) {
    FILE* f = fopen(path.c_str(), "r");
    int port = 0;
    char host[256] = "";
    const bool got = f && fscanf(f, "%255s %d", host, &port) == 2 && port > 0 && port < 65536;
    if (f) fclose(f);
    if (!got) return false;
    snprintf(addr->host, sizeof addr->host, "%s", host);
    addr->port = port;
    return true;
}

// llm.c's -pi fs: node 0's leader leaves "HOST PORT" in the folder fs (a file named by LLMC_RUN_ID), the
// other nodes' leaders wait for it; node 0 removes it once every node joined. Returns the file's path. A file
// that an earlier start left (its node 0 ended before every node joined) names an old address: the nodes
// look at the file again while nobody answers there (net_open's reread), and node 0 writes over it.
static std::string fs_rendezvous(const char* fs, bool node0, NetAddress* addr) {
    const char* id = getenv("LLMC_RUN_ID");
    std::string name = std::string("llmc_node0_") + (id && *id ? id : "run");
    for (char& ch : name)
        if (ch == '/' || ch == ':') ch = '_';
    const std::string path = std::string(fs) + "/" + name;
    if (node0) {
        char host[256] = "";
        const char* own = getenv("LLMC_NODE0_HOST");  // where the hostname does not resolve on the others
        if (own && *own) snprintf(host, sizeof host, "%s", own);
        else if (gethostname(host, sizeof host) != 0) die("-pi fs: gethostname: %s", strerror(errno));
        const std::string tmp = path + ".tmp";
        FILE* f = fopen(tmp.c_str(), "w");
        if (!f || fprintf(f, "%s %d\n", host, addr->port) < 0 || fclose(f) != 0 ||
            rename(tmp.c_str(), path.c_str()) != 0)
            die("-pf %s: cannot leave node 0's address there: %s", fs, strerror(errno));
        return path;
    }
    struct stat st;  // a shared folder every node sees: not one that is not there (it would never appear)
    if (stat(fs, &st) != 0 || !S_ISDIR(st.st_mode))
        die("-pf %s: %s: the shared folder node 0 leaves its address in", fs,
            stat(fs, &st) != 0 ? strerror(errno) : "not a folder");
    StartWait wait;
    for (;;) {
        if (fs_read_address(path, addr)) return path;
        char what[4400];
        snprintf(what, sizeof what, "node 0's address in %s (-pi fs)", path.c_str());
        if (!wait.go_on(what))
            die("-pi fs: no %s after %d s (node 0 leaves it there)", path.c_str(), start_wait_seconds());
        usleep(200000);  // a shared file system's metadata server: 5 looks a second
    }
}

static void rank_start(Comm* c, int G, int nodes, int node_rank, const char* address, const char* fs = NULL) {
    int rank, world, local_world;
    NetAddress addr = {"127.0.0.1", NET_DEFAULT_PORT};
    std::string rendezvous;
    if (address && !net_parse_address(address, &addr)) die("-ps %s: HOST, HOST:PORT or [IPv6]:PORT", address);
    if (!env_ranks(&rank, &world, &local_world)) {
        rank_launch(c, G, node_rank, nodes);
    } else {
        if (G > 1 && G != local_world)
            die("-pn %d, but the environment's LOCAL_WORLD_SIZE is %d", G, local_world);
        if (local_world < 1 || world % local_world != 0)
            die("WORLD_SIZE %d is not a multiple of LOCAL_WORLD_SIZE %d: every node runs as many ranks",
                world, local_world);
        const int env_nodes = world / local_world, node = rank / local_world;
        if (nodes > 1 && nodes != env_nodes)
            die("-pN %d, but the environment has %d nodes", nodes, env_nodes);
        const char* host = getenv("MASTER_ADDR");
        const char* port = getenv("LLMC_NET_PORT");
        if (env_nodes > 1 && !address && fs) {  // llm.c's -pi fs
            addr.port = port && *port ? atoi(port) : NET_DEFAULT_PORT;
            if (addr.port < 1 || addr.port > 65535) die("LLMC_NET_PORT %s: a port", port);
            if (rank % local_world == 0) rendezvous = fs_rendezvous(fs, node == 0, &addr);
        } else if (env_nodes > 1 && !address) {
            if (!host || !*host)
                die("WORLD_SIZE %d over %d nodes: MASTER_ADDR (or -ps HOST) names rank 0's node", world,
                    env_nodes);
            snprintf(addr.host, sizeof addr.host, "%s", host);
            const int master_port = env_int("MASTER_PORT", "MASTER_PORT");
            addr.port = port && *port ? atoi(port) : master_port > 0 ? master_port + 1 : NET_DEFAULT_PORT;
            if (addr.port < 1 || addr.port > 65535) {
                if (port && *port) die("LLMC_NET_PORT %s: a port", port);
                die("MASTER_PORT %d: node 0 listens on MASTER_PORT + 1, which must be a port (1 to 65535; "
                    "LLMC_NET_PORT sets it)",
                    master_port);
            }
        }
        rank_attach(c, rank - node * local_world, local_world, node, env_nodes);
    }
    if (c->nodes > 1 && c->local == 0) {
        std::function<bool(NetAddress*)> reread;  // -pi fs: where the file says node 0 is now
        if (!rendezvous.empty() && c->node_rank != 0)
            reread = [rendezvous](NetAddress* a) { return fs_read_address(rendezvous, a); };
        net_open(&c->net, c->nodes, c->node_rank, c->local_world, &addr, start_wait_seconds(), reread);
        if (c->node_rank == 0 && !rendezvous.empty()) unlink(rendezvous.c_str());  // every node joined
        c->net.progress_here = &c->node->progress_here;
        c->net.progress_elsewhere = &c->node->progress_elsewhere;
        net_watch(&c->net);
    }
}
