// multi_gpu_test_common.h — what test_multi_gpu.cpp and test_multi_gpu_ssd.cpp share: the MultiGpu fixture
// (runs of the emulated train_gpt on several ranks and nodes, compared with one GPU), step lines, node
// shares. The bound they compare with is explained at the head of test_multi_gpu.cpp.
#pragma once
#include <math.h>
#include "cli_test_common.h"
#include "chat_test_common.h"  // defines: Tok, row, write_chat_shard
#include "hf_cases.h"          // defines: hf_python
#include <poll.h>
#include <atomic>
#include <thread>
#include "llmc/net.h"  // defines: net_self_connected

namespace {

// step -> {loss, norm, lr}
struct StepLine {
    double loss, norm, lr;
};
std::map<int, StepLine> step_lines(const std::string& out) {
    std::map<int, StepLine> m;
    const std::regex re("step +([0-9]+)/[0-9]+ \\| loss ([0-9.]+) \\| norm ([0-9.]+) \\| lr ([0-9.e+-]+)");
    for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it)
        m[std::stoi((*it)[1])] = {std::stod((*it)[2]), std::stod((*it)[3]), std::stod((*it)[4])};
    return m;
}

// A model file's parameters (llm.c's and the Llama family's files: a 256-int header, then floats). GPT-2's
// key biases are NaN (not compared: see the bound above).
std::vector<float> params_of(const std::string& path) {
    const std::string bytes = slurp(path);
    std::vector<float> p;
    if (bytes.size() <= 1024) return p;
    p.resize((bytes.size() - 1024) / 4);
    memcpy(p.data(), bytes.data() + 1024, p.size() * 4);
    int32_t h[8];
    memcpy(h, bytes.data(), sizeof h);
    if (h[0] != MODEL_MAGIC) return p;  // {magic, version, maxT, V, L, NH, C, Vp}, tensor-major
    const int64_t maxT = h[2], L = h[4], C = h[6], Vp = h[7];
    const int64_t qkvb = (Vp + maxT + 2 * L) * C + L * 3 * C * C;  // after wte, wpe, ln1w, ln1b, qkvw
    for (int64_t l = 0; l < L; l++)
        for (int64_t i = 0; i < C; i++) p[(size_t)(qkvb + l * 3 * C + C + i)] = NAN;
    return p;
}
// The largest difference of two models' parameters (NaN: not compared), and how many differ by over 1e-6.
double max_difference(const std::vector<float>& a, const std::vector<float>& b, int64_t* over = NULL) {
    double worst = 0;
    int64_t n = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); i++)
        if (!std::isnan(a[i])) {
            worst = std::max(worst, fabs((double)a[i] - b[i]));
            n += fabs((double)a[i] - b[i]) > 1e-6;
        }
    if (over) *over = n;
    return worst;
}

class MultiGpu : public CliTest {
  protected:
    std::string train, val;
    void SetUp() override {
        if (!have_binary(kEmu)) GTEST_SKIP() << kEmu << " not built";
        CliTest::SetUp();
        setenv("LLMC_EMU_RACECHECK", "1", 1);
        train = shard_of("train.bin", ids(24576, 1));
        val = shard_of("val.bin", ids(4096, 2));
    }
    static std::vector<uint16_t> ids(int64_t n, uint64_t seed) {  // a vocabulary of 512 (V512)
        std::vector<uint16_t> t((size_t)n);
        for (auto& x : t) x = (uint16_t)(random_u64(&seed) % 512);
        return t;
    }
    // 3 steps of 4 micro-batches of 2 x 32 tokens, a checkpoint at the end (and each step with -n 1).
    Args run_args(const char* spec, const std::string& out, const Args& more = {}) {
        return Args{"-e", spec, "-b", "2", "-t", "32", "-d", "256", "-x", "3",
                    "-v", "3",  "-g", "0", "-o", out,  "-i", train, "-j", val} +
               more;
    }
    // A run on G ranks against the same run on one; returns the G-rank run.
    Result expect_like_one_gpu(const Args& one, const Args& many, const std::string& one_dir,
                               const std::string& many_dir, int steps = 3) {
        return compare_with_one_gpu(run_bin(kEmu, one), run_bin(kEmu, many), one_dir, many_dir, steps);
    }
    // Node n of N on this machine, in the background: `train_gpt args -pN N -pr n -ps addr`, its output in
    // dir/<prefix><n>.
    pid_t spawn_node(int n, int N, const Args& args, const std::string& addr,
                     const std::string& prefix = "node") {
        const std::string scratch = dir + "/" + prefix + std::to_string(n);
        mkdir(scratch.c_str(), 0755);
        return spawn(kEmu, args + Args{"-pN", std::to_string(N), "-pr", std::to_string(n), "-ps", addr},
                     scratch);
    }
    // Node 0's address for a run of several nodes: a port of its own for each run, below Linux's ephemeral
    // range (32768 on), as the other tests' here: no socket gets one as its own.
    static std::string node_address(const std::string& host = "127.0.0.1") {
        static int runs = 0;
        return host + ":" + std::to_string(20000 + (getpid() * 31 + 97 * runs++) % 12000);
    }
    // Nodes N-1 .. 0 of a run, all in the background (spawn_node: their output in dir/<prefix><n>), started
    // with env's settings and LLMC_NODE_WAIT 600 (a loaded machine may start them far apart). Their pids.
    std::vector<pid_t> spawn_nodes(int N, const Args& args,
                                   const std::vector<std::pair<std::string, std::string>>& env = {},
                                   const std::string& prefix = "node") {
        const std::string addr = node_address();
        setenv("LLMC_NODE_WAIT", "600", 1);
        for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
        std::vector<pid_t> pids((size_t)N);
        for (int n = N - 1; n >= 0; n--) pids[(size_t)n] = spawn_node(n, N, args, addr, prefix);
        unsetenv("LLMC_NODE_WAIT");
        for (const auto& [name, value] : env) unsetenv(name.c_str());
        return pids;
    }
    // Several nodes on this machine: node n is `train_gpt args -pN N -pr n -ps 127.0.0.1:PORT`, nodes
    // 1..N-1 in the background (their output in dir/node<n>), node 0 here.
    // Returns node 0's run; codes: each node's exit status.
    Result run_nodes(int N, const Args& args, std::vector<int>* codes = nullptr, const Args& node1 = {},
                     const std::string& host = "127.0.0.1") {
        const std::string addr = node_address(host);
        setenv("LLMC_NODE_WAIT", "600", 1);  // a loaded machine may start them far apart
        std::vector<pid_t> pids;
        for (int n = 1; n < N; n++) pids.push_back(spawn_node(n, N, args + (n == 1 ? node1 : Args{}), addr));
        const Result r = run_bin(kEmu, args + Args{"-pN", std::to_string(N), "-pr", "0", "-ps", addr});
        std::vector<int> all = {r.code};
        for (pid_t pid : pids) all.push_back(wait_exit(pid, 900));
        unsetenv("LLMC_NODE_WAIT");
        if (codes) *codes = all;
        else
            for (int n = 0; n < N; n++)
                EXPECT_EQ(all[(size_t)n], 0)
                    << "node " << n << ": "
                    << (n ? slurp(dir + "/node" + std::to_string(n) + "/stderr.txt") : r.err);
        return r;
    }
    // A run's stdout `o` after Ctrl-C: stopped after step S, S saved; -y 1 (one GPU) resumes at S.
    void expect_stopped_and_resumed(const char* spec, const std::string& o) {
        std::smatch m;
        ASSERT_TRUE(
            std::regex_search(o, m, std::regex("stopped by SIGINT after step ([0-9]+): resume with -y 1")))
            << o;
        const std::string stopped = m[1];
        EXPECT_TRUE(has(o, "saved checkpoint step " + stopped)) << o;
        const Result b = run_bin(
            kEmu, run_args(spec, dir + "/run", {"-y", "1", "-x", std::to_string(std::stoi(stopped) + 1)}));
        EXPECT_EQ(b.code, 0) << b.err;
        EXPECT_TRUE(has(b.out, "(step " + stopped + ")")) << b.out;
    }
    Result compare_with_one_gpu(const Result& a, const Result& b, const std::string& one_dir,
                                const std::string& many_dir, int steps = 3) {
        EXPECT_EQ(a.code, 0) << a.cmd << "\n" << a.err << a.out;
        EXPECT_EQ(b.code, 0) << b.cmd << "\n" << b.err << b.out;
        EXPECT_TRUE(has(a.out, "race check: no races")) << a.out;
        EXPECT_TRUE(has(b.out, "race check: no races")) << b.out;
        const auto la = step_lines(a.out), lb = step_lines(b.out);
        EXPECT_EQ(la.size(), (size_t)steps) << a.out;
        double lr_sum = 0;
        for (const auto& [step, x] : la) {
            lr_sum += x.lr;
            if (!lb.count(step)) {
                ADD_FAILURE() << "no step " << step << " in\n" << b.out;
                continue;
            }
            EXPECT_NEAR(lb.at(step).loss, x.loss, 1e-4 * x.loss) << "loss of step " << step;
            EXPECT_NEAR(lb.at(step).norm, x.norm, 1e-4 * x.norm) << "norm of step " << step;
        }
        const std::string model = "/" + step_name("model_", steps, ".bin");
        const std::vector<float> pa = params_of(one_dir + model), pb = params_of(many_dir + model);
        EXPECT_GT(pa.size(), 1000u);
        EXPECT_EQ(pa.size(), pb.size());
        int64_t over = 0;
        const double worst = max_difference(pa, pb, &over);
        EXPECT_LT(worst, 0.1 * lr_sum) << "final weights of " << many_dir << " against one GPU's";
        EXPECT_LE(over, (int64_t)(0.005 * pa.size())) << "weights past 1e-6 of one GPU's";
        return b;
    }
};

// "1.31 MiB", "512 bytes", "2.00 GiB" (SizeText) -> bytes
double size_of_text(const std::string& t) {
    const double v = std::stod(t);
    return has(t, "GiB") ? v * 1073741824.0 : has(t, "MiB") ? v * 1048576.0 : v;
}

// Node 0's line "node 0's RAM holds X of the fp32 weights, m and v (its share: Y; all: Z)": X within a page
// at each end of each of its `parts` parts (a streamed layer's, -E 1's vocabulary's) in the 3 arrays, and
// well under all of it.
void expect_node_share(const std::string& out, int parts) {
    std::smatch m;
    ASSERT_TRUE(
        std::regex_search(out, m,
                          std::regex("node 0's RAM holds ([0-9.]+ [A-Za-z]+) of the fp32 weights, m and "
                                     "v \\(its share: ([0-9.]+ [A-Za-z]+); all: ([0-9.]+ [A-Za-z]+)\\)")))
        << out;
    const double held = size_of_text(m[1]), share = size_of_text(m[2]), all = size_of_text(m[3]);
    EXPECT_LE(held, share + 3 * parts * 2 * 4096.0) << m[0];
    EXPECT_LT(held, 0.7 * all) << m[0];
}

}  // namespace
