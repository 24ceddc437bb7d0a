// net.h — the links between the nodes of a run over several nodes (-pN N): TCP between the nodes' leaders
// (each node's rank on GPU 0). To node 0, a star: rank 0's notes (where the run stands, the NCCL id), small
// sums (loss, norm, stop), the host backend's gradient sums (the CPU emulator's, and the fallback where NCCL
// does not load) and a checkpoint's parts; sums run in node order, so every node gets the same bits. Between
// every two nodes, a mesh: each layer's updated bf16 weights, each node's part straight to every other node
// (net_exchange). The star's main link serves the main thread; the mesh (whose links to node 0 are the star's
// second link) the optimizer thread; a second mesh (whose links to node 0 are the main link) the main
// thread's exchanges (-E 1's vocabulary); a third link carries heartbeats. A peer that goes away, or goes
// silent (its process stopped, its machine or the network to it down: LLMC_NODE_TIMEOUT seconds without a
// heartbeat), ends this process in one line. Not found by the heartbeats alone: a process that hangs but
// beats (a deadlock, a GPU hang), and a cut between two nodes other than node 0; those the progress watch
// finds (llmc/progress_watch.h): the beats also carry whether a node moved on. Not here: the ranks inside a
// node (collectives.h), when what is sent (train_gpt.cu, llmc/cpu_optimizer.h).
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
#include <sys/time.h>  // defines: timeval (SO_RCVTIMEO)
#include <time.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <thread>
#include <functional>  // defines: std::function (net_open's reread)
#include <vector>
#include "utils.h"  // defines: die, progress_tick

#define NET_MAGIC        0x6c6c6e75  // "llnu": bumped with each change of the links (two meshes)
#define NET_LINKS        3           // NET_MAIN, NET_OPT, NET_BEAT
#define NET_MAIN         0
#define NET_OPT          1
#define NET_BEAT         2  // heartbeats, node 0 to each node and back (net_watch)
#define NET_DEFAULT_PORT 29600

struct NetLinks {
    int nodes = 1, node = 0;
    std::vector<int> fd[NET_LINKS];  // node 0: fd[k][n] for n = 1..nodes-1; the others: fd[k][0], to node 0
    std::vector<int> mesh;           // mesh[n]: to node n (n != node); to node 0 it is fd[NET_OPT]
    std::vector<int> mesh_main;      // the main thread's: to node 0 it is fd[NET_MAIN]
    std::atomic<int> started{0};     // every node passed its set-up (net_started)
    std::atomic<int> closing{0};     // net_finish began: peers may go
    std::atomic<int> finished{0};    // net_finish's barrier passed: every node is done
    // progress (llmc/progress_watch.h): whether this node's ticks moved, told to node 0 with the heartbeats;
    // node 0 tells every node of its own and the others' (progress_elsewhere counts the beats that said so)
    std::atomic<uint64_t>* progress_here = nullptr;
    std::atomic<uint64_t>* progress_elsewhere = nullptr;
};

// Who this run's node 0 is: "host[:port]", an IPv6 address as "[addr]:port" or "[addr]" (or bare, without
// a port: two colons or more).
struct NetAddress {
    char host[256];
    int port;
};
static inline bool net_parse_address(const char* s, NetAddress* a) {
    const char* colon = strrchr(s, ':');
    const char* host = s;
    size_t n;
    if (s[0] == '[') {  // [IPv6]:port
        const char* close = strchr(s, ']');
        if (!close || (close[1] && close[1] != ':')) return false;
        host = s + 1;
        n = (size_t)(close - host);
        colon = close[1] ? close + 1 : NULL;
    } else if (colon && strchr(s, ':') != colon) {  // a bare IPv6 address: no port
        n = strlen(s);
        colon = NULL;
    } else {
        n = colon ? (size_t)(colon - s) : strlen(s);
    }
    if (n == 0 || n >= sizeof a->host) return false;
    memcpy(a->host, host, n);
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
// node ended, the others that node 0 ended (each node's log has a line: on a cluster each is read apart).
static inline void net_lost(const NetLinks* L, int peer, const char* what) {
    if (!L->started.load() && L->node != 0)
        die("node 0 ended before the run started (the node that failed first says why in its own output)");
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
        progress_tick();  // bytes moved: a long transfer (a checkpoint's parts) is progress
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
        progress_tick();  // bytes moved: a long transfer (a checkpoint's parts) is progress
    }
}

struct NetHello {
    int32_t magic, nodes, node, link, local_world, mesh_port;
};
struct NetPeer {  // where a node listens for the mesh (node 0 tells every node), as node 0 saw it connect
    uint8_t addr[16];  // IPv4: the first 4 bytes (network order)
    int32_t family;    // AF_INET or AF_INET6
    int32_t port;
};

// A socket's address of either family: its port, and whether two are the same address and port.
static inline int net_port_of(const sockaddr_storage& a) {
    return ntohs(a.ss_family == AF_INET6 ? ((const sockaddr_in6*)&a)->sin6_port
                                         : ((const sockaddr_in*)&a)->sin_port);
}
static inline bool net_same_endpoint(const sockaddr_storage& a, const sockaddr_storage& b) {
    if (a.ss_family != b.ss_family || net_port_of(a) != net_port_of(b)) return false;
    if (a.ss_family == AF_INET6)
        return memcmp(&((const sockaddr_in6*)&a)->sin6_addr, &((const sockaddr_in6*)&b)->sin6_addr, 16) == 0;
    return ((const sockaddr_in*)&a)->sin_addr.s_addr == ((const sockaddr_in*)&b)->sin_addr.s_addr;
}
// The peer of a connected socket as a NetPeer listening on `port` (an IPv4 peer on a dual-stack socket, whose
// address is IPv4-mapped: as IPv4).
static inline NetPeer net_peer_of(int fd, int port) {
    NetPeer p = {};
    sockaddr_storage from = {};
    socklen_t len = sizeof from;
    getpeername(fd, (sockaddr*)&from, &len);
    p.port = port;
    if (from.ss_family == AF_INET6) {
        const in6_addr& a = ((const sockaddr_in6*)&from)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(&a)) {
            p.family = AF_INET;
            memcpy(p.addr, a.s6_addr + 12, 4);
        } else {
            p.family = AF_INET6;
            memcpy(p.addr, a.s6_addr, 16);
        }
    } else {
        p.family = AF_INET;
        memcpy(p.addr, &((const sockaddr_in*)&from)->sin_addr.s_addr, 4);
    }
    return p;
}
// A socket listening on `port` (0: one the kernel picks) of every address of this host: IPv6 and IPv4 where
// the host has IPv6, else IPv4. -1 with errno where neither.
static inline int net_listen(int port, int backlog) {
    const int one = 1, zero = 0;
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd >= 0) {
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in6 sa = {};
        sa.sin6_family = AF_INET6;
        sa.sin6_addr = in6addr_any;
        sa.sin6_port = htons((uint16_t)port);
        if (bind(fd, (sockaddr*)&sa, sizeof sa) == 0 && listen(fd, backlog) == 0) return fd;
        close(fd);
    }
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa = {};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    sa.sin_port = htons((uint16_t)port);
    if (bind(fd, (sockaddr*)&sa, sizeof sa) == 0 && listen(fd, backlog) == 0) return fd;
    const int err = errno;
    close(fd);
    errno = err;
    return -1;
}

// A connect to a port of this host that nobody listens on yet can meet itself: where the kernel picks the
// very port as the socket's own (a port in the ephemeral range), TCP's simultaneous open connects the socket
// to itself, and the node would wait for its own answer. Such a connection counts as not connected.
static inline bool net_self_connected(int fd) {
    sockaddr_storage self = {}, peer = {};
    socklen_t a = sizeof self, b = sizeof peer;
    return getsockname(fd, (sockaddr*)&self, &a) == 0 && getpeername(fd, (sockaddr*)&peer, &b) == 0 &&
           net_same_endpoint(self, peer);
}
static inline int net_connect_to(const sockaddr* sa, socklen_t len) {
    const int fd = socket(sa->sa_family, SOCK_STREAM, 0);
    if (fd < 0) die("-pN: cannot make a socket: %s", strerror(errno));
    int err = 0;
    if (connect(fd, sa, len) != 0) err = errno;
    else if (net_self_connected(fd)) err = ECONNREFUSED;  // met itself: nobody listens there yet
    if (err) {
        close(fd);
        errno = err;
        return -1;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

// The two meshes between nodes 1..N-1 (node 0's links are the star's: NET_OPT for the optimizer thread's
// mesh, NET_MAIN for the main thread's): node j connects twice to each node 1 <= i < j (its listener is in
// peers; the hello says which mesh), then accepts two from each node above it: within wait_s seconds, while
// node 0 is there (a node above that ended before it connected, whose end ends node 0, must not leave this
// one waiting in accept for good). A connection that says nothing in 10 s (not a node's) is dropped.
static inline void net_open_mesh(NetLinks* L, int listener, const std::vector<NetPeer>& peers,
                                 int wait_s = 0) {
    std::vector<int>* meshes[2] = {&L->mesh, &L->mesh_main};
    const int star[2] = {NET_OPT, NET_MAIN};  // each mesh's links to node 0
    for (int m = 0; m < 2; m++) {
        meshes[m]->assign((size_t)L->nodes, -1);
        if (L->node == 0)
            for (int n = 1; n < L->nodes; n++) (*meshes[m])[(size_t)n] = L->fd[star[m]][(size_t)n];
        else (*meshes[m])[0] = L->fd[star[m]][0];
    }
    if (L->node == 0) return;
    const char* dies = getenv("LLMC_TEST_MESH_DIES");  // tests: this node ends before its mesh links
    if (dies && atoi(dies) == L->node) _exit(1);
    for (int i = 1; i < L->node; i++) {
        const NetPeer& p = peers[(size_t)i];
        sockaddr_storage sa = {};
        socklen_t len = sizeof(sockaddr_in);
        if (p.family == AF_INET6) {
            sockaddr_in6* a = (sockaddr_in6*)&sa;
            a->sin6_family = AF_INET6;
            memcpy(&a->sin6_addr, p.addr, 16);
            a->sin6_port = htons((uint16_t)p.port);
            len = sizeof(sockaddr_in6);
        } else {
            sockaddr_in* a = (sockaddr_in*)&sa;
            a->sin_family = AF_INET;
            memcpy(&a->sin_addr.s_addr, p.addr, 4);
            a->sin_port = htons((uint16_t)p.port);
        }
        for (int m = 0; m < 2; m++) {
            const int fd = net_connect_to((const sockaddr*)&sa, len);
            if (fd < 0)
                die("-pN: node %d cannot reach node %d's mesh port %d: %s", L->node, i, peers[(size_t)i].port,
                    strerror(errno));
            const int32_t hello[2] = {L->node, m};  // who, and which mesh
            net_send(L, fd, i, hello, sizeof hello);
            (*meshes[m])[(size_t)i] = fd;
        }
    }
    const time_t deadline = time(NULL) + wait_s;
    for (int k = 0; k < 2 * (L->nodes - 1 - L->node);) {  // each higher node's two links
        pollfd p[2] = {{listener, POLLIN, 0}, {L->fd[NET_MAIN][0], POLLRDHUP, 0}};
        const int ready = poll(p, 2, 1000);
        if (ready < 0 && errno != EINTR) die("-pN: node %d: poll: %s", L->node, strerror(errno));
        if (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) net_lost(L, 0, "its connection closed");
        if (!(p[0].revents & POLLIN)) {
            if (time(NULL) > deadline)
                die("-pN: node %d: the nodes above it did not open their mesh links within LLMC_NODE_WAIT "
                    "(%d s)",
                    L->node, wait_s);
            continue;
        }
        const int fd = accept(listener, NULL, NULL);
        if (fd < 0) die("-pN: node %d: accept: %s", L->node, strerror(errno));
        int32_t hello[2] = {-1, -1};
        timeval tv = {10, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        if (recv(fd, hello, sizeof hello, MSG_WAITALL) != (ssize_t)sizeof hello) {
            close(fd);  // not a node: it said nothing
            continue;
        }
        tv = {0, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        k++;
        const int who = hello[0], m = hello[1];
        if (who <= L->node || who >= L->nodes || m < 0 || m > 1 || (*meshes[m])[(size_t)who] >= 0)
            die("-pN: node %d: a mesh link from an unexpected node %d (mesh %d; twice, or another run's)",
                L->node, who, m);
        const int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        (*meshes[m])[(size_t)who] = fd;
    }
}

// Node 0 listens on addr's port; the others connect (retrying while node 0 starts), each link with a hello.
// Every node must agree on the number of nodes and GPUs a node. wait_s: how long node 0 waits for the rest.
// reread (may be empty): node 0's address as it stands now, asked again while nobody answers there (-pi fs:
// the file an earlier start left can name an old address until node 0 writes its own).
static inline void net_open(NetLinks* L, int nodes, int node, int local_world, const NetAddress* node0,
                            int wait_s, const std::function<bool(NetAddress*)>& reread = {}) {
    NetAddress at = *node0;  // where node 0 is: reread may move it
    const NetAddress* addr = &at;
    L->nodes = nodes;
    L->node = node;
    for (int k = 0; k < NET_LINKS; k++) L->fd[k].assign((size_t)nodes, -1);
    const time_t deadline = time(NULL) + wait_s;
    if (node == 0) {
        const int one = 1;
        const int ls = net_listen(addr->port, 2 * nodes);
        if (ls < 0)
            die("-pN: node 0 cannot listen on port %d: %s (another run, or another node started with -pr 0? "
                "-ps HOST:PORT chooses the "
                "port)",
                addr->port, strerror(errno));
        int joined = 0;
        std::vector<NetPeer> peers((size_t)nodes, NetPeer{});
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
                        "-ps NODE0_HOST:%d)",
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
            char why[256] = "";  // node 0's answer to the hello: empty, or why the node is refused
            if (h.nodes != nodes)
                snprintf(why, sizeof why,
                         "-pN: node %d says -pN %d, node 0 -pN %d: every node starts with the same flags",
                         h.node, h.nodes, nodes);
            else if (h.local_world != local_world)
                snprintf(why, sizeof why,
                         "-pN: node %d has %d GPU rank%s, node 0 %d: every node runs the same -pn", h.node,
                         h.local_world, h.local_world == 1 ? "" : "s", local_world);
            else if (h.node <= 0 || h.node >= nodes || h.link < 0 || h.link >= NET_LINKS ||
                     L->fd[h.link][h.node] >= 0)
                snprintf(why, sizeof why,
                         "-pN %d: two nodes say they are node %d (-pr): each node takes its own index", nodes,
                         h.node);
            if (send(fd, why, sizeof why, MSG_NOSIGNAL) != (ssize_t)sizeof why || why[0]) {
                close(fd);
                if (why[0]) die("%s", why);
                continue;
            }
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            L->fd[h.link][h.node] = fd;
            if (h.link == NET_MAIN) peers[(size_t)h.node] = net_peer_of(fd, h.mesh_port);
            joined++;
        }
        close(ls);
        for (int n = 1; n < nodes; n++)  // where each node listens for the mesh
            net_send(L, L->fd[NET_MAIN][(size_t)n], n, peers.data(),
                     (int64_t)(peers.size() * sizeof(NetPeer)));
        net_open_mesh(L, -1, peers);
        return;
    }
    // the mesh's listener first: its port goes to node 0 in the hello
    const int listener = net_listen(0, 2 * nodes);  // two mesh links from each higher node
    sockaddr_storage any = {};
    socklen_t any_len = sizeof any;
    if (listener < 0 || getsockname(listener, (sockaddr*)&any, &any_len) != 0)
        die("-pN: node %d cannot listen for the other nodes: %s", node, strerror(errno));
    const int mesh_port = net_port_of(any);
    addrinfo hints = {}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    char port[16];
    snprintf(port, sizeof port, "%d", addr->port);
    int rc = getaddrinfo(addr->host, port, &hints, &res);
    if (rc != 0 || !res) die("-ps %s: %s", addr->host, gai_strerror(rc));
    bool said = false;
    for (int k = 0; k < NET_LINKS; k++) {
        int fd = -1;
        for (;;) {
            int err = ECONNREFUSED;
            for (const addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {  // each of the host's addresses
                fd = socket(ai->ai_family, SOCK_STREAM, 0);
                if (fd < 0) {
                    err = errno;
                    continue;
                }
                if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
                    if (!net_self_connected(fd)) break;
                    err = ECONNREFUSED;  // met itself: node 0 does not listen yet
                } else {
                    err = errno;
                }
                close(fd);
                fd = -1;
            }
            if (fd >= 0) break;
            if (time(NULL) > deadline)
                die("-pN: node %d cannot reach node 0 at %s:%d in %d s: %s", node, addr->host, addr->port,
                    wait_s, strerror(err));
            if (!said && time(NULL) > deadline - wait_s + 5) {  // a node 0 that never starts: not silence
                fprintf(stderr, "waiting for node 0 at %s:%d (up to %d s: LLMC_NODE_WAIT)\n", addr->host,
                        addr->port, wait_s);
                said = true;
            }
            NetAddress now = at;
            if (reread && reread(&now) && (strcmp(now.host, at.host) != 0 || now.port != at.port)) {
                addrinfo* moved = NULL;
                snprintf(port, sizeof port, "%d", now.port);
                rc = getaddrinfo(now.host, port, &hints, &moved);
                if (rc == 0 && moved) {  // else the old address stays, and the next look may find another
                    freeaddrinfo(res);
                    res = moved;
                    at = now;
                    said = false;
                }
            }
            usleep(100000);
        }
        const int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        // node 0's answer within what is left of the wait: what listens there may be something else (an
        // sshd, a stale address), which would never answer
        timeval left = {std::max<time_t>(deadline - time(NULL), 1), 0}, none = {0, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &left, sizeof left);
        const NetHello h = {NET_MAGIC, nodes, node, k, local_world, mesh_port};
        net_send(L, fd, 0, &h, sizeof h);
        char why[256];
        const ssize_t got = recv(fd, why, sizeof why, MSG_WAITALL);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            die("-pN: node 0 at %s:%d closed the connection before it answered (its error says why)",
                addr->host, addr->port);
        if (got != (ssize_t)sizeof why)  // the wait ran out with less (or nothing) said
            die("-pN: what listens at %s:%d did not answer as train_gpt's node 0 within LLMC_NODE_WAIT (%d "
                "s): "
                "another program, or a stale address?",
                addr->host, addr->port, wait_s);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
        if (why[0]) die("refused by node 0: %.250s", why);
        L->fd[k][0] = fd;
    }
    freeaddrinfo(res);
    std::vector<NetPeer> peers((size_t)nodes);
    net_recv(L, L->fd[NET_MAIN][0], 0, peers.data(), (int64_t)(peers.size() * sizeof(NetPeer)));
    net_open_mesh(L, listener, peers, wait_s);
    close(listener);
}

static inline void net_close(NetLinks* L) {
    for (std::vector<int>* mesh : {&L->mesh, &L->mesh_main}) {
        for (int i = 1; i < (int)mesh->size(); i++)  // mesh[0] and node 0's are the star's
            if (L->node != 0 && i != L->node && (*mesh)[(size_t)i] >= 0) close((*mesh)[(size_t)i]);
        mesh->clear();
    }
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

// v[0, n) summed over the nodes in node order (min: their least); every node gets the same bits. T: float or
// double.
template <typename T>
static inline void net_sum(const NetLinks* L, int link, T* v, int64_t n, bool min = false) {
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
            for (int64_t i = 0; i < m; i++)
                v[o + i] = min ? std::min(v[o + i], in[(size_t)i]) : v[o + i] + in[(size_t)i];
        }
    for (int node = 1; node < L->nodes; node++)
        net_send(L, L->fd[link][node], node, v, n * (int64_t)sizeof(T));
}

// Each node's bytes [lo[node], hi[node]) of base, to every node over a mesh (L->mesh: the optimizer
// thread's; L->mesh_main: the main thread's): a thread sends this node's to node + 1, node + 2, ... while
// this one takes node - 1's, node - 2's, ... (each round pairs every sender with a receiver, so no two nodes
// wait on each other).
static inline void net_exchange(const NetLinks* L, const std::vector<int>& mesh, char* base,
                                const int64_t* lo, const int64_t* hi) {
    const int N = L->nodes, me = L->node;
    std::thread sender([&] {
        for (int t = 1; t < N; t++) {
            const int to = (me + t) % N;
            net_send(L, mesh[(size_t)to], to, base + lo[me], hi[me] - lo[me]);
        }
    });
    for (int t = 1; t < N; t++) {
        const int from = (me - t + N) % N;
        net_recv(L, mesh[(size_t)from], from, base + lo[from], hi[from] - lo[from]);
    }
    sender.join();
}

// Each node's bytes [lo[node], hi[node]) of base, to node 0 (a save's parts; to every node: net_exchange).
static inline void net_gather(const NetLinks* L, int link, char* base, const int64_t* lo, const int64_t* hi) {
    if (L->node != 0) {
        net_send(L, L->fd[link][0], 0, base + lo[L->node], hi[L->node] - lo[L->node]);
        return;
    }
    for (int n = 1; n < L->nodes; n++) net_recv(L, L->fd[link][n], n, base + lo[n], hi[n] - lo[n]);
}

// How long a node may go without a heartbeat: LLMC_NODE_TIMEOUT seconds, 60 by default.
static inline double net_timeout_seconds() {
    const char* t = getenv("LLMC_NODE_TIMEOUT");
    if (!t || !*t) return 60.0;
    char* end = NULL;
    const double s = strtod(t, &end);
    if (*end || !(s > 0) || s > 1e6) die("LLMC_NODE_TIMEOUT=%.40s: seconds, above 0", t);
    return s;
}

// A watch on the links while the run lasts, on a thread of its own: a node that goes away (its process
// ended, its machine went down and the connection reset) ends this one within a second, even while its
// threads wait in NCCL or the GPU. A node that goes silent closes nothing (a stopped process, a machine that
// lost power, a cut network): each node and node 0 send each other a byte a second over NET_BEAT, whatever
// the other threads do; a peer unheard for net_timeout_seconds() from the run's start to the end of
// net_finish's barrier ends this node, and its links' closing ends the rest. The beats go on until the
// process exits (a node still in its last step must not take a finished one for silent).
// A beat's byte: 1, or 3 when the sender's node ticked since its last beat (node 0: or another node told it
// so): each node learns within a second or two whether the run moves anywhere (llmc/progress_watch.h).
static inline void net_watch(NetLinks* L) {
    std::vector<pollfd> fds;
    std::vector<int> peer, beat;                // beat: the index in fds of each heartbeat link
    for (int k = 0; k <= NET_LINKS + 1; k++) {  // the star's links, then the meshes' own
        const std::vector<int>& f = k < NET_LINKS ? L->fd[k] : k == NET_LINKS ? L->mesh : L->mesh_main;
        for (int n = 0; n < (int)f.size(); n++)
            if (f[(size_t)n] >= 0 && (k < NET_LINKS || (n != 0 && L->node != 0))) {
                if (k == NET_BEAT) beat.push_back((int)fds.size());
                fds.push_back({f[(size_t)n], (short)(POLLRDHUP | (k == NET_BEAT ? POLLIN : 0)), 0});
                peer.push_back(n);
            }
    }
    const double timeout = net_timeout_seconds();
    std::thread([L, fds, peer, beat, timeout]() mutable {
        auto now = [] {
            timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            return ts.tv_sec + 1e-9 * ts.tv_nsec;
        };
        std::vector<double> heard(beat.size(), now());
        std::vector<uint64_t> told(beat.size(), L->progress_here ? L->progress_here->load() : 0);
        std::vector<char> relay(beat.size(), 0);  // node 0: another node progressed since the last beat to j
        double sent = 0;
        for (;;) {
            const double t = now();
            if (t - sent >= 1.0) {  // a full socket buffer (the peer stopped reading) drops the beat
                const uint64_t here = L->progress_here ? L->progress_here->load() : 0;
                for (size_t j = 0; j < beat.size(); j++) {
                    const char b = (here != told[j] || relay[j]) ? 3 : 1;
                    const int fd = fds[(size_t)beat[j]].fd;
                    if (fd >= 0 && send(fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1) {  // else told later
                        told[j] = here;
                        relay[j] = 0;
                    }
                }
                sent = t;
            }
            const int ready = poll(fds.data(), fds.size(), 250);
            // silence counts from the start until every node passed net_finish's barrier (a node in it still
            // waits for the others' last steps); a closed link only until net_finish began
            const bool watching = L->started.load() && !L->finished.load();
            for (size_t j = 0; j < beat.size(); j++) {
                pollfd& f = fds[(size_t)beat[j]];
                if (ready > 0 && (f.revents & POLLIN)) {
                    char drain[256];
                    const ssize_t got = recv(f.fd, drain, sizeof drain, MSG_DONTWAIT);
                    if (got > 0) heard[j] = now();
                    bool moved = false;
                    for (ssize_t i = 0; i < got; i++) moved |= (drain[i] & 2) != 0;
                    if (moved) {  // that node progressed: this one hears of it, node 0 tells the others
                        if (L->progress_elsewhere) L->progress_elsewhere->fetch_add(1);
                        for (size_t k = 0; k < beat.size(); k++)
                            if (k != j) relay[k] = 1;
                    }
                }
                if (!watching)
                    heard[j] = std::max(heard[j], now() - timeout / 2);  // set-up and end: no verdict
                else if (now() - heard[j] > timeout) {
                    char why[160];
                    snprintf(why, sizeof why,
                             "no heartbeat in %.0f s: its process is stopped, or its machine or the network "
                             "to it is down; LLMC_NODE_TIMEOUT sets the wait",
                             timeout);
                    net_lost(L, peer[(size_t)beat[j]], why);
                }
            }
            if (ready <= 0) continue;
            for (size_t i = 0; i < fds.size(); i++)
                if (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) {
                    if (L->started.load() && !L->closing.load())
                        net_lost(L, peer[i], "its connection closed, seen by the link watch");
                    fds[i].fd =
                        -1;  // set-up (the main thread's own reads say it) or the end: poll it no more
                }
        }
    }).detach();
}

// What a node's flags hash (run_fingerprint) covers, for the line that refuses a node whose hash differs.
#define NET_FLAGS_DIFFER                                                                                    \
    "node %d's flags differ from node 0's (the model, -b, -t, -d, -x, the learning rate and schedule, -R, " \
    "-K, -E, -F, -G, -v, -m, -n, -a, -sl, -sg, -h and its file, whether -sd and -sw are given, or the "     \
    "data: its shards' count, tokens and kind): every node starts with the same flags and data but -pr"

// Every node passed its set-up: from here a node that goes away is an error on every node. flags: a hash of
// what must be the same on every node (the model, the batch, the schedule): node 0 compares, and a node that
// differs ends the run with a line on both sides.
static inline void net_started(NetLinks* L, uint64_t flags) {
    if (L->nodes == 1 || L->fd[NET_MAIN].empty()) return;
    int32_t differs = 0;
    if (L->node != 0) {
        net_send(L, L->fd[NET_MAIN][0], 0, &flags, sizeof flags);
        net_recv(L, L->fd[NET_MAIN][0], 0, &differs, sizeof differs);
        if (differs) die(NET_FLAGS_DIFFER, L->node);
    } else {
        int first = 0;
        for (int n = 1; n < L->nodes; n++) {
            uint64_t theirs = 0;
            net_recv(L, L->fd[NET_MAIN][(size_t)n], n, &theirs, sizeof theirs);
            if (theirs != flags && !first) first = n;
        }
        for (int n = 1; n < L->nodes; n++) {
            differs = first != 0;
            net_send(L, L->fd[NET_MAIN][(size_t)n], n, &differs, sizeof differs);
        }
        if (first) die(NET_FLAGS_DIFFER, first);
    }
    L->started.store(1);
}

// The run's end on every node: after it, a node may exit without the others taking it for a failure.
static inline void net_finish(NetLinks* L) {
    if (L->nodes == 1 || L->fd[NET_MAIN].empty()) return;
    L->closing.store(1);
    double one = 1;
    net_sum(L, NET_MAIN, &one, 1);  // a barrier: a node lost in it is said by net_send / net_recv
    L->finished.store(1);
}
