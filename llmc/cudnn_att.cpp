// cudnn_att.cpp — cuDNN's SDPA forward and backward through cudnn-frontend, llm.c's way: one translation
// unit (the frontend's headers compile slowly), graphs cached per shape, one workspace.
// cuDNN is dlopen'ed (the frontend's dynamic loading): nothing links against it, a machine without it runs.
// Not here: which path runs, the numerical self-check (attention_path.cuh).
#include "cudnn_att.h"
#include "wheel_libs.h"  // defines: wheel_libraries
#include <dlfcn.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>
#include <cudnn_frontend.h>

namespace fe = cudnn_frontend;
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;  // the frontend's dynamic loading reads it
}

static cudnnHandle_t handle = nullptr;
static std::string library;
static long version = 0;
static void* workspace = nullptr;  // the plan's, or our own when a later graph needs more
static int64_t workspace_bytes = 0;
static bool workspace_own = false;
static int64_t workspace_need = 0;

// Ragged: a tensor of its own for each role, as cudnn-frontend's samples and TransformerEngine give them (the
// GQA backward derives its workspace offsets from dK's and dQ's apart), all bound to the same arrays.
enum Uid { Q = 1, K, V, O, STATS, DO, DQ, DK, DV };
enum RaggedUid { SEQ_LEN_Q = 16, SEQ_LEN_KV, OFF_Q, OFF_K, OFF_V, OFF_O, OFF_STATS };

static bool fail(char* why, size_t n, const std::string& what) {
    snprintf(why, n, "%s", what.c_str());
    return false;
}

static bool file_exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Where libcudnn.so.9 may be: LLMC_CUDNN_LIB, the loader's search, the toolkit, Python wheels (PyTorch's).
static std::vector<std::string> cudnn_candidates() {
    std::vector<std::string> c;
    const char* env = getenv("LLMC_CUDNN_LIB");
    if (env && *env) return {env};
    c.push_back("libcudnn.so.9");
    for (const char* dir : {"/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/lib/x86_64-linux-gnu"})
        c.push_back(std::string(dir) + "/libcudnn.so.9");
    for (const std::string& w : wheel_libraries("*/lib/libcudnn.so.9")) c.push_back(w);
    return c;
}

// The frontend dlopens libcudart.so.12 first, then .13, by name: point it at CUDA 13's (ours), by name when
// the loader knows it, else the toolkit's.
static void point_frontend_at_cudart() {
    if (getenv("CUDNN_FRONTEND_CUDART_LIB_NAME")) return;
    void* h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
    if (!h) h = dlopen("libcudart.so.13", RTLD_NOW);
    if (h) {
        setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", "libcudart.so.13", 0);  // left loaded
        return;
    }
    for (const char* p : {"/usr/local/cuda/lib64/libcudart.so.13", "/usr/local/cuda/lib/libcudart.so.13"})
        if (file_exists(p)) {
            setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", p, 0);
            return;
        }
}

static void dlopen_global(const std::string& path) {
    if (file_exists(path)) dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);  // a failure shows in cuDNN's own
}
// cuDNN 9 dlopens its sub-libraries (libcudnn_graph, _engines_*, ...) and NVRTC (runtime-compiled engines) by
// name: from a folder the loader does not search (a Python wheel's nvidia/cudnn/lib), they would not be
// found, or another cuDNN's would. Loaded first from libcudnn.so.9's own folder (a loaded library answers to
// its name), and NVRTC of cuDNN's CUDA major from the toolkit or a wheel beside it, as PyTorch preloads them.
static void preload_beside(void* h, const std::string& dir) {
    typedef size_t (*GetCudart)();
    GetCudart cudart = (GetCudart)dlsym(h, "cudnnGetCudartVersion");
    const int major = cudart ? (int)(cudart() / 1000) : 13;
    const std::string nvrtc = "libnvrtc.so." + std::to_string(major);
    if (!dlopen(nvrtc.c_str(), RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD) &&
        !dlopen(nvrtc.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
        std::vector<std::string> dirs = {dir + "/../../cuda_nvrtc/lib",
                                         dir + "/../../cu" + std::to_string(major) + "/lib",
                                         "/usr/local/cuda/lib64"};
        for (const std::string& d : dirs)
            if (file_exists(d + "/" + nvrtc)) {
                glob_t g;  // its builtins first: NVRTC dlopens them by name too
                if (glob((d + "/libnvrtc-builtins.so." + std::to_string(major) + "*").c_str(), 0, NULL, &g) ==
                    0)
                    for (size_t i = 0; i < g.gl_pathc; i++) dlopen_global(g.gl_pathv[i]);
                globfree(&g);
                dlopen_global(d + "/" + nvrtc);
                break;
            }
    }
    for (const char* sub :
         {"graph", "engines_precompiled", "engines_runtime_compiled", "heuristic", "ops", "cnn", "adv"})
        dlopen_global(dir + "/libcudnn_" + sub + ".so.9");
}

bool cudnn_att_open(char* why, size_t n) {
    if (handle) return true;
    std::string tried;
    void* h = nullptr;
    for (const std::string& path : cudnn_candidates()) {
        dlerror();
        h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
        if (h) {
            library = path;
            break;
        }
        if (tried.size() < 400) tried += (tried.empty() ? "" : ", ") + path;
    }
    if (!h)
        return fail(
            why, n,
            "no libcudnn.so.9 found (tried " + tried + "; set LLMC_CUDNN_LIB=/path/to/libcudnn.so.9)");
    char resolved[4096];
    if (dlinfo(h, RTLD_DI_ORIGIN, resolved) == 0) {
        if (library.find('/') == std::string::npos) library = std::string(resolved) + "/" + library;
        preload_beside(h, resolved);
    }
    typedef size_t (*GetVersion)();
    GetVersion get_version = (GetVersion)dlsym(h, "cudnnGetVersion");
    if (!get_version) return fail(why, n, library + " has no cudnnGetVersion");
    const long v = (long)get_version();
    if (v < 90000) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s is cuDNN %ld.%ld.%ld; the SDPA path needs 9.0 or newer",
                 library.c_str(), v / 10000, v / 100 % 100, v % 100);
        return fail(why, n, msg);
    }
    fe::cudnn_dlhandle = h;
    point_frontend_at_cudart();
    try {
        const cudnnStatus_t st = fe::detail::create_handle(&handle);
        if (st != CUDNN_STATUS_SUCCESS) {
            handle = nullptr;
            return fail(why, n, library + ": cudnnCreate failed (" + std::to_string((int)st) + ")");
        }
    } catch (const std::exception& e) {
        handle = nullptr;
        return fail(why, n, library + ": " + e.what());
    }
    version = v;
    return true;
}

const char* cudnn_att_library() { return library.c_str(); }
long cudnn_att_version() { return version; }

// ----------------------------------------------------------------------------
// Graphs. Q (b, NH, T, hs), K and V (b, NKV, T, hs) are views into a qkv row [q | k | v] of ld elements;
// O and dO rows hold NH hs. Ragged: each tensor's sequence starts come from an offsets tensor.

typedef std::tuple<int, int, int, int, int, int> Key;  // B, T, NH, NKV, hs, seqs
struct Graphs {
    std::shared_ptr<fe::graph::Graph> fwd, bwd;
};
static std::map<Key, Graphs> cache;

static std::shared_ptr<fe::graph::Tensor_attributes> index_tensor(fe::graph::Graph& g, const char* name,
                                                                  int uid, int64_t count) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({count, 1, 1, 1})
                        .set_stride({1, 1, 1, 1})
                        .set_data_type(fe::DataType_t::INT32));
}

struct Layout {
    int64_t b, T, NH, NKV, hs, ld, od;
    bool ragged;
};
static Layout layout_of(const CudnnAttShape* s) {
    Layout l;
    l.ragged = s->seqs > 0;
    l.b = l.ragged ? s->seqs : s->B;
    l.T = s->T;
    l.NH = s->NH;
    l.NKV = s->NKV;
    l.hs = s->hs;
    l.ld = (int64_t)(s->NH + 2 * s->NKV) * s->hs;
    l.od = (int64_t)s->NH * s->hs;
    return l;
}
static fe::graph::Tensor_attributes qkv_view(const Layout& l, const char* name, int uid, int64_t heads) {
    return fe::graph::Tensor_attributes()
        .set_name(name)
        .set_uid(uid)
        .set_dim({l.b, heads, l.T, l.hs})
        .set_stride({l.T * l.ld, l.hs, l.ld, 1});
}
static void set_out_view(fe::graph::Tensor_attributes& t, const Layout& l, int uid) {
    t.set_uid(uid).set_dim({l.b, l.NH, l.T, l.hs}).set_stride({l.T * l.od, l.hs, l.od, 1});
}
static void set_stats_view(fe::graph::Tensor_attributes& t, const Layout& l) {
    t.set_uid(STATS).set_data_type(fe::DataType_t::FLOAT).set_dim({l.b, l.NH, l.T, 1});
    if (l.ragged)
        t.set_stride({l.T * l.NH, 1, l.NH, 1});  // (token, head): the dense (B, NH, T) would not fit
    else t.set_stride({l.NH * l.T, l.T, 1, 1});
}

static bool finish(fe::graph::Graph& g, const char* what, char* why, size_t n) {
    auto check = [&](fe::error_object e, const char* step) {
        if (e.is_good()) return true;
        return fail(why, n, std::string(what) + " graph: " + step + ": " + e.get_message());
    };
    if (!check(g.validate(), "validate")) return false;
    if (!check(g.build_operation_graph(handle), "build_operation_graph")) return false;
    if (!check(g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "execution plans"))
        return false;
    if (!check(g.check_support(handle), "check_support")) return false;
    if (!check(g.build_plans(handle, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "build_plans")) return false;
    int64_t ws = 0;
    if (!check(g.get_workspace_size(ws), "workspace size")) return false;
    if (ws > workspace_need) workspace_need = ws;
    return true;
}

static std::shared_ptr<fe::graph::Graph> new_graph() {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    return g;
}

struct Ragged {
    std::shared_ptr<fe::graph::Tensor_attributes> seq_len_q, seq_len_kv, off_q, off_k, off_v, off_out,
        off_stats;
};
static Ragged ragged_tensors(fe::graph::Graph& g, const Layout& l) {
    Ragged r;
    if (!l.ragged) return r;
    r.seq_len_q = index_tensor(g, "seq_len_q", SEQ_LEN_Q, l.b);
    r.seq_len_kv = index_tensor(g, "seq_len_kv", SEQ_LEN_KV, l.b);
    r.off_q = index_tensor(g, "off_q", OFF_Q, l.b + 1);
    r.off_k = index_tensor(g, "off_k", OFF_K, l.b + 1);
    r.off_v = index_tensor(g, "off_v", OFF_V, l.b + 1);
    r.off_out = index_tensor(g, "off_out", OFF_O, l.b + 1);
    r.off_stats = index_tensor(g, "off_stats", OFF_STATS, l.b + 1);
    return r;
}
// The ragged options of both graphs: the padding mask, the lengths, and the most tokens (the micro-batch's,
// rounded up to 64 as cudnn-frontend's tests do: it sizes cuDNN's own buffers, whose tiles are 64 rows)
template <typename Attributes>
static void set_ragged_options(Attributes& opt, const Ragged& r, const CudnnAttShape* s) {
    const int64_t most = ((int64_t)s->B * s->T + 63) / 64 * 64;
    opt.set_padding_mask(true).set_seq_len_q(r.seq_len_q).set_seq_len_kv(r.seq_len_kv);
    opt.set_max_total_seq_len_q(most).set_max_total_seq_len_kv(most);
}

static std::shared_ptr<fe::graph::Graph> build_forward(const CudnnAttShape* s, char* why, size_t n) {
    const Layout l = layout_of(s);
    auto g = new_graph();
    auto q = g->tensor(qkv_view(l, "Q", Q, l.NH));
    auto k = g->tensor(qkv_view(l, "K", K, l.NKV));
    auto v = g->tensor(qkv_view(l, "V", V, l.NKV));
    Ragged r = ragged_tensors(*g, l);
    auto opt = fe::graph::SDPA_attributes()
                   .set_name("sdpa")
                   .set_generate_stats(true)
                   .set_attn_scale(1.0f / sqrtf((float)l.hs))
                   .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                   .set_diagonal_band_right_bound(0);  // causal
    if (l.ragged) {
        q->set_ragged_offset(r.off_q);
        k->set_ragged_offset(r.off_k);
        v->set_ragged_offset(r.off_v);
        set_ragged_options(opt, r, s);
    }
    auto [o, stats] = g->sdpa(q, k, v, opt);
    o->set_output(true);
    set_out_view(*o, l, O);
    stats->set_output(true);
    set_stats_view(*stats, l);
    if (l.ragged) {
        o->set_ragged_offset(r.off_out);
        stats->set_ragged_offset(r.off_stats);
    }
    if (!finish(*g, "forward", why, n)) return nullptr;
    return g;
}

static std::shared_ptr<fe::graph::Graph> build_backward(const CudnnAttShape* s, char* why, size_t n) {
    const Layout l = layout_of(s);
    auto g = new_graph();
    auto q = g->tensor(qkv_view(l, "Q", Q, l.NH));
    auto k = g->tensor(qkv_view(l, "K", K, l.NKV));
    auto v = g->tensor(qkv_view(l, "V", V, l.NKV));
    fe::graph::Tensor_attributes oa, doa, sa;
    oa.set_name("O");
    set_out_view(oa, l, O);
    doa.set_name("dO");
    set_out_view(doa, l, DO);
    sa.set_name("Stats");
    set_stats_view(sa, l);
    auto o = g->tensor(oa);
    auto dout = g->tensor(doa);
    auto stats = g->tensor(sa);
    Ragged r = ragged_tensors(*g, l);
    auto opt = fe::graph::SDPA_backward_attributes()
                   .set_name("sdpa_backward")
                   .set_attn_scale(1.0f / sqrtf((float)l.hs))
                   .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                   .set_diagonal_band_right_bound(0);
    const char* det = getenv("LLMC_CUDNN_DETERMINISTIC");  // 1: no atomics in dq's sum, slower
    if (det && atoi(det) == 1) opt.set_deterministic_algorithm(true);
    if (l.ragged) {
        q->set_ragged_offset(r.off_q);
        k->set_ragged_offset(r.off_k);
        v->set_ragged_offset(r.off_v);
        o->set_ragged_offset(r.off_out);
        dout->set_ragged_offset(r.off_out);
        stats->set_ragged_offset(r.off_stats);
        set_ragged_options(opt, r, s);
    }
    auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, opt);
    dq->set_output(true);
    dk->set_output(true);
    dv->set_output(true);
    dq->set_uid(DQ).set_dim({l.b, l.NH, l.T, l.hs}).set_stride({l.T * l.ld, l.hs, l.ld, 1});
    dk->set_uid(DK).set_dim({l.b, l.NKV, l.T, l.hs}).set_stride({l.T * l.ld, l.hs, l.ld, 1});
    dv->set_uid(DV).set_dim({l.b, l.NKV, l.T, l.hs}).set_stride({l.T * l.ld, l.hs, l.ld, 1});
    if (l.ragged) {
        dq->set_ragged_offset(r.off_q);
        dk->set_ragged_offset(r.off_k);
        dv->set_ragged_offset(r.off_v);
    }
    if (!finish(*g, "backward", why, n)) return nullptr;
    return g;
}

static const Graphs* graphs_for(const CudnnAttShape* s, char* why, size_t n) {
    if (!handle) return fail(why, n, "cuDNN is not loaded"), nullptr;
    const Key key{s->B, s->T, s->NH, s->NKV, s->hs, s->seqs};
    auto it = cache.find(key);
    if (it != cache.end()) return &it->second;
    if (s->seqs > 0 && version < 90600)
        return fail(why, n,
                    "cuDNN " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) +
                        ": packed conversations (cuDNN's ragged layout) need cuDNN 9.6 or newer"),
               nullptr;
    // the GQA backward scales dK's and dV's offsets by the group (NH / NKV) for its own buffers
    const int64_t group = s->NKV > 0 ? (s->NH + s->NKV - 1) / s->NKV : 1;
    if (s->seqs > 0 && (int64_t)s->B * s->T * (s->NH + 2 * s->NKV) * s->hs * group >= ((int64_t)1 << 31))
        return fail(why, n,
                    "a micro-batch's qkv, times the heads' group, has 2^31 elements or more: the 32-bit "
                    "ragged offsets cannot address it"),
               nullptr;
    Graphs gr;
    try {
        gr.fwd = build_forward(s, why, n);
        if (!gr.fwd) return nullptr;
        gr.bwd = build_backward(s, why, n);
        if (!gr.bwd) return nullptr;
    } catch (const std::exception& e) {
        return fail(why, n, std::string("cudnn-frontend: ") + e.what()), nullptr;
    }
    return &cache.emplace(key, gr).first->second;
}

static bool workspace_for(int64_t need, char* why, size_t n);  // below
static bool planned = false;                                   // the plan's workspace is in use
bool cudnn_att_prepare(const CudnnAttShape* s, char* why, size_t n) {
    const Graphs* gr = graphs_for(s, why, n);
    if (!gr) return false;
    if (!planned) return true;
    // after the plan (a new ragged bucket): its workspace now, so that a shortage falls back, not dies
    int64_t f = 0, b = 0;
    if (!gr->fwd->get_workspace_size(f).is_good() || !gr->bwd->get_workspace_size(b).is_good())
        return fail(why, n, "cuDNN: a graph's workspace size");
    return workspace_for(f > b ? f : b, why, n);
}
int64_t cudnn_att_workspace_need() { return workspace_need; }
int64_t cudnn_att_workspace_of(const CudnnAttShape* s, char* why, size_t n) {
    const Graphs* gr = graphs_for(s, why, n);
    if (!gr) return -1;
    int64_t f = 0, b = 0;
    if (!gr->fwd->get_workspace_size(f).is_good() || !gr->bwd->get_workspace_size(b).is_good())
        return fail(why, n, "cuDNN: a graph's workspace size"), -1;
    return f > b ? f : b;
}

bool cudnn_att_reserve_workspace(char* why, size_t n) { return workspace_for(workspace_need, why, n); }
void cudnn_att_free_own_workspace() {
    if (workspace_own && workspace) cudaFree(workspace);
    workspace = nullptr;
    workspace_bytes = 0;
    workspace_own = false;
}
void cudnn_att_use_workspace(void* p, int64_t bytes) {
    cudnn_att_free_own_workspace();
    workspace = p;
    workspace_bytes = bytes;
    planned = p != nullptr;  // NULL: the trainer is freed
}
// Before the plan (the self-check, the tests), our own workspace as large as a shape needs. After it, the
// plan's only: a shape prepared later (a larger ragged bucket) that needs more fails, and its micro-batch
// runs our kernel: GPU memory stays what the plan says.
static bool workspace_for(int64_t need, char* why, size_t n) {
    if (need <= workspace_bytes) return true;
    if (planned) {
        char msg[160];
        snprintf(msg, sizeof msg, "cuDNN's graphs for it need %.1f MiB of workspace, the plan holds %.1f MiB",
                 need / 1048576.0, workspace_bytes / 1048576.0);
        return fail(why, n, msg);
    }
    cudnn_att_free_own_workspace();
    const cudaError_t err = cudaMalloc(&workspace, (size_t)need);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();  // not sticky: the caller goes on without cuDNN, or without this shape
        workspace = nullptr;
        return fail(why, n, std::string("cuDNN workspace: ") + cudaGetErrorString(err));
    }
    workspace_bytes = need;
    workspace_own = true;
    return true;
}

static bool run(const fe::graph::Graph& g, std::unordered_map<int64_t, void*>& pack, const RaggedMeta* r,
                cudaStream_t stream, const char* what, char* why, size_t n) {
    int64_t need = 0;
    if (!g.get_workspace_size(need).is_good() || !workspace_for(need, why, n)) return false;
    if (r) {
        pack[SEQ_LEN_Q] = pack[SEQ_LEN_KV] = r->seq_len;
        pack[OFF_Q] = pack[OFF_K] = pack[OFF_V] = r->off_qkv;  // each from its own base pointer
        pack[OFF_O] = r->off_out;
        pack[OFF_STATS] = r->off_stats;
    }
    try {
        if (fe::detail::set_stream(handle, stream) != CUDNN_STATUS_SUCCESS)
            return fail(why, n, "cudnnSetStream failed");
        fe::error_object e = g.execute(handle, pack, workspace);
        if (!e.is_good()) return fail(why, n, std::string(what) + ": " + e.get_message());
    } catch (const std::exception& e) { return fail(why, n, std::string(what) + ": " + e.what()); }
    return true;
}

bool cudnn_att_forward(void* out, float* stats, const void* qkv, const CudnnAttShape* s, const RaggedMeta* r,
                       cudaStream_t stream, char* why, size_t n) {
    const Graphs* gr = graphs_for(s, why, n);
    if (!gr) return false;
    const int64_t q = (int64_t)s->NH * s->hs, kv = (int64_t)s->NKV * s->hs;
    char* base = (char*)qkv;
    std::unordered_map<int64_t, void*> pack = {
        {Q, base}, {K, base + 2 * q}, {V, base + 2 * (q + kv)}, {O, out}, {STATS, stats}};
    return run(*gr->fwd, pack, s->seqs > 0 ? r : nullptr, stream, "cuDNN SDPA forward", why, n);
}

bool cudnn_att_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* stats,
                        const CudnnAttShape* s, const RaggedMeta* r, cudaStream_t stream, char* why,
                        size_t n) {
    const Graphs* gr = graphs_for(s, why, n);
    if (!gr) return false;
    const int64_t q = (int64_t)s->NH * s->hs, kv = (int64_t)s->NKV * s->hs;
    char *base = (char*)qkv, *dbase = (char*)dqkv;  // bf16: 2 bytes an element
    std::unordered_map<int64_t, void*> pack = {
        {Q, base},       {K, base + 2 * q},   {V, base + 2 * (q + kv)},
        {O, (void*)out}, {DO, (void*)dout},   {STATS, (void*)stats},
        {DQ, dbase},     {DK, dbase + 2 * q}, {DV, dbase + 2 * (q + kv)}};
    return run(*gr->bwd, pack, s->seqs > 0 ? r : nullptr, stream, "cuDNN SDPA backward", why, n);
}
