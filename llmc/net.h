// net.h — the links between the nodes of a run over several nodes (-pN N): TCP between each node's leader
// (its rank on GPU 0) and rank 0's node, a star. What crosses them: rank 0's notes (where the run stands, the
// NCCL id), small sums (loss, norm, stop), the host backend's gradient sums (the CPU emulator's, and the
// fallback where NCCL does not load), each layer's updated bf16 weights (every node's part to every node),
// and a checkpoint's parts to rank 0. Sums run in node order, so every node gets the same bits. Two links a
// node: one for the main thread, one for the optimizer thread's weight exchange. A peer that goes away ends
// this process in one line. Not here: the ranks inside a node (collectives.h), when what is sent
// (train_gpt.cu).
#pragma once
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <string.h>
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>
#include "utils.h"  // defines: die

#define NET_MAGIC        0x6c6c6e74  // "llnt"
#define NET_LINKS        2           // NET_MAIN, NET_OPT
#define NET_MAIN         0
#define NET_OPT          1
#define NET_DEFAULT_PORT 29600

struct NetLinks {
    int nodes = 1, node = 0;
    std::vector<int> fd[NET_LINKS];  // node 0: fd[k][n] for n = 1..nodes-1; the others: fd[k][0], to node 0
    std::atomic<int> started{0};     // every node passed its set-up (net_started)
    std::atomic<int> closing{0};     // net_finish began: peers may go
};

// Who this run's node 0 is: "host[:port]".
struct NetAddress {
    char host[256];
    int port;
};
static inline bool net_parse_address(const char* s, NetAddress* a) {
    const char* colon = strrchr(s, ':');
    const size_t n = colon ? (size_t)(colon - s) : strlen(s);
    if (n == 0 || n >= sizeof a->host) return false;
    memcpy(a->host, s, n);
    a->host[n] = 0;
    a->port = NET_DEFAULT_PORT;
    if (colon) {
        char* end = NULL;
        const long p = strtol(colon + 1, &end, 10);
        if (!colon[1] || *end || p < 1 || p > 65535) return false;
        a->port = (int)p;
    }
    return true;
}

// Before the run started a node that fails its set-up (bad flags or data) says why itself: node 0 says which
// node ended, the others end quietly (node 0 said why).
static inline void net_lost(const NetLinks* L, int peer, const char* what) {
    if (!L->started.load() && L->node != 0) _exit(1);
    if (!L->started.load()) die("node %d ended before the run started (its own output says why)", peer);
    die("node %d is gone (%s): this rank stops too", peer, what);
}
static inline void net_send(const NetLinks* L, int fd, int peer, const void* p, int64_t bytes) {
    const char* c = (const char*)p;
    while (bytes > 0) {
        const ssize_t k = send(fd, c, (size_t)std::min<int64_t>(bytes, 1 << 26), MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) net_lost(L, peer, k < 0 ? strerror(errno) : "its connection closed");
        c += k;
        bytes -= k;
    }
}
static inline void net_recv(const NetLinks* L, int fd, int peer, void* p, int64_t bytes) {
    char* c = (char*)p;
    while (bytes > 0) {
        const ssize_t k = recv(fd, c, (size_t)std::min<int64_t>(bytes, 1 << 26), 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) net_lost(L, peer, k < 0 ? strerror(errno) : "its connection closed");
        c += k;
        bytes -= k;
    }
}

struct NetHello {
    int32_t magic, nodes, node, link, local_world;
};

// Node 0 listens on addr's port; the others connect (retrying while node 0 starts), each link with a hello.
// Every node must agree on the number of nodes and GPUs a node. wait_s: how long node 0 waits for the rest.
static inline void net_open(NetLinks* L, int nodes, int node, int local_world, const NetAddress* addr,
                            int wait_s) {
    L->nodes = nodes;
    L->node = node;
    for (int k = 0; k < NET_LINKS; k++) L->fd[k].assign((size_t)nodes, -1);
    const time_t deadline = time(NULL) + wait_s;
    if (node == 0) {
        const int ls = socket(AF_INET, SOCK_STREAM, 0);
        if (ls < 0) die("-pN: cannot make a socket: %s", strerror(errno));
        const int one = 1;
        setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in sa = {};
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_ANY);
        sa.sin_port = htons((uint16_t)addr->port);
        if (bind(ls, (sockaddr*)&sa, sizeof sa) != 0 || listen(ls, 2 * nodes) != 0)
            die("-pN: node 0 cannot listen on port %d: %s (another run there? -ps HOST:PORT chooses the "
                "port)",
                addr->port, strerror(errno));
        int joined = 0;
        while (joined < NET_LINKS * (nodes - 1)) {
            fd_set set;
            FD_ZERO(&set);
            FD_SET(ls, &set);
            timeval tv = {1, 0};
            const int ready = select(ls + 1, &set, NULL, NULL, &tv);
            if (ready <= 0) {
                if (time(NULL) > deadline)
                    die("-pN %d: %d of %d nodes joined in %d s (each node starts train_gpt with -pr "
                        "ITS_INDEX "
                        "-ps THIS_HOST:%d)",
                        nodes, 1 + joined / NET_LINKS, nodes, wait_s, addr->port);
                continue;
            }
            const int fd = accept(ls, NULL, NULL);
            if (fd < 0) continue;
            NetHello h;
            timeval rt = {10, 0};
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &rt, sizeof rt);
            if (recv(fd, &h, sizeof h, MSG_WAITALL) != (ssize_t)sizeof h || h.magic != NET_MAGIC) {
                close(fd);  // not one of ours
                continue;
            }
            rt = {0, 0};
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &rt, sizeof rt);
            if (h.nodes != nodes)
                die("-pN: node %d says -pN %d, node 0 -pN %d: every node starts with the same flags", h.node,
                    h.nodes, nodes);
            if (h.local_world != local_world)
                die("-pN: node %d has %d GPU rank%s, node 0 %d: every node runs the same -pn", h.node,
                    h.local_world, h.local_world == 1 ? "" : "s", local_world);
            if (h.node <= 0 || h.node >= nodes || h.link < 0 || h.link >= NET_LINKS ||
                L->fd[h.link][h.node] >= 0)
                die("-pN %d: two nodes say they are node %d (-pr): each node takes its own index", nodes,
                    h.node);
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            L->fd[h.link][h.node] = fd;
            joined++;
        }
        close(ls);
        return;
    }
    addrinfo hints = {}, *res = NULL;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    char port[16];
    snprintf(port, sizeof port, "%d", addr->port);
    const int rc = getaddrinfo(addr->host, port, &hints, &res);
    if (rc != 0 || !res) die("-ps %s: %s", addr->host, gai_strerror(rc));
    for (int k = 0; k < NET_LINKS; k++) {
        int fd = -1;
        for (;;) {
            fd = socket(AF_INET, SOCK_STREAM, 0);
            if (fd < 0) die("-pN: cannot make a socket: %s", strerror(errno));
            if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) break;
            const int err = errno;
            close(fd);
            if (time(NULL) > deadline)
                die("-pN: node %d cannot reach node 0 at %s:%d in %d s: %s", node, addr->host, addr->port,
                    wait_s, strerror(err));
            usleep(100000);
        }
        const int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        const NetHello h = {NET_MAGIC, nodes, node, k, local_world};
        net_send(L, fd, 0, &h, sizeof h);
        L->fd[k][0] = fd;
    }
    freeaddrinfo(res);
}

static inline void net_close(NetLinks* L) {
    for (int k = 0; k < NET_LINKS; k++)
        for (int& fd : L->fd[k])
            if (fd >= 0) {
                close(fd);
                fd = -1;
            }
}

// Node 0's bytes at p, to every node.
static inline void net_bcast(const NetLinks* L, int link, void* p, int64_t bytes) {
    if (L->node == 0)
        for (int n = 1; n < L->nodes; n++) net_send(L, L->fd[link][n], n, p, bytes);
    else net_recv(L, L->fd[link][0], 0, p, bytes);
}

// v[0, n) summed over the nodes in node order; every node gets the same bits. T: float or double.
template <typename T>
static inline void net_sum(const NetLinks* L, int link, T* v, int64_t n) {
    if (L->node != 0) {
        net_send(L, L->fd[link][0], 0, v, n * (int64_t)sizeof(T));
        net_recv(L, L->fd[link][0], 0, v, n * (int64_t)sizeof(T));
        return;
    }
    std::vector<T> in((size_t)std::min<int64_t>(n, 1 << 20));
    for (int node = 1; node < L->nodes; node++)
        for (int64_t o = 0; o < n; o += (int64_t)in.size()) {
            const int64_t m = std::min<int64_t>((int64_t)in.size(), n - o);
            net_recv(L, L->fd[link][node], node, in.data(), m * (int64_t)sizeof(T));
            for (int64_t i = 0; i < m; i++) v[o + i] += in[(size_t)i];
        }
    for (int node = 1; node < L->nodes; node++)
        net_send(L, L->fd[link][node], node, v, n * (int64_t)sizeof(T));
}

// Each node's bytes [lo[node], hi[node]) of base, to every node (all_gather) or to node 0 (to_root).
static inline void net_gather(const NetLinks* L, int link, char* base, const int64_t* lo, const int64_t* hi,
                              bool all_gather) {
    if (L->node != 0) {
        net_send(L, L->fd[link][0], 0, base + lo[L->node], hi[L->node] - lo[L->node]);
        if (all_gather)
            for (int n = 0; n < L->nodes; n++)
                if (n != L->node) net_recv(L, L->fd[link][0], 0, base + lo[n], hi[n] - lo[n]);
        return;
    }
    for (int n = 1; n < L->nodes; n++) net_recv(L, L->fd[link][n], n, base + lo[n], hi[n] - lo[n]);
    if (!all_gather) return;
    for (int to = 1; to < L->nodes; to++)
        for (int n = 0; n < L->nodes; n++)
            if (n != to) net_send(L, L->fd[link][to], to, base + lo[n], hi[n] - lo[n]);
}

// A watch on the links while the run lasts: a node that goes away (its process ended, its machine went down
// and the connection reset) ends this one within a second, even while its threads wait in NCCL or the GPU.
static inline void net_watch(NetLinks* L) {
    std::vector<pollfd> fds;
    std::vector<int> peer;
    for (int k = 0; k < NET_LINKS; k++)
        for (int n = 0; n < L->nodes; n++)
            if (L->fd[k][n] >= 0) {
                fds.push_back({L->fd[k][n], POLLRDHUP, 0});
                peer.push_back(n);
            }
    std::thread([L, fds, peer]() mutable {
        while (!L->closing.load()) {
            if (poll(fds.data(), fds.size(), 1000) <= 0 || !L->started.load()) continue;
            for (size_t i = 0; i < fds.size(); i++)
                if ((fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) && !L->closing.load())
                    net_lost(L, peer[i], "its connection closed");
        }
    }).detach();
}

// Every node passed its set-up: from here a node that goes away is an error on every node.
static inline void net_started(NetLinks* L) {
    if (L->nodes == 1 || L->fd[NET_MAIN].empty()) return;
    double one = 1;
    net_sum(L, NET_MAIN, &one, 1);
    L->started.store(1);
}

// The run's end on every node: after it, a node may exit without the others taking it for a failure.
static inline void net_finish(NetLinks* L) {
    if (L->nodes == 1 || L->fd[NET_MAIN].empty()) return;
    L->closing.store(1);
    double one = 1;
    net_sum(L, NET_MAIN, &one, 1);  // a barrier: a node lost in it is said by net_send / net_recv
}
