// cli_test_common.h — what the suites that run the trainers as subprocesses share (test_cli.cpp,
// test_nothing_lost.cpp): the binaries and data paths, running a trainer under `timeout` with its output in
// files, the one-error-line contract for bad input (CleanError), a scratch-directory fixture with writers for
// shards and model files, the Both fixture (one test per trainer), and reading step losses from stdout.
// Tests run from the repo root (RepoRootEnv moves there). Not here: any test.
#pragma once
#include <gtest/gtest.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <regex>
#include <sstream>
#include <string>
#include <vector>
#include "dataloader.h"
#include "llmc/model_file.h"  // defines: gpt_read_header, gpt_load_params, and model.h
#include "llmc/checkpoint.h"
#include "llmc/args.h"
#include "llmc/cpu_cores.h"
#include "llmc/model_specs.h"
#include "llmc/run_dir.h"
#include "llmc/sampler.h"
#include "llmc/schedulers.h"

static const char* const kCpu = "./train_gpt_cpu";
static const char* const kGpu = "./train_gpt";
// train_gpt built with its kernels emulated on the CPU (Makefile: build/emu, test/fake_cuda): the whole
// main() runs in CI, on a fake 8 GiB device
static const char* const kEmu = "./build/emu_train_gpt";
static const char* const kTrain = "dev/data/tinyshakespeare/tiny_shakespeare_train.bin";
static const char* const kVal = "dev/data/tinyshakespeare/tiny_shakespeare_val.bin";

typedef std::vector<std::string> Args;

// Valid everywhere except in what a test overrides (later flags win): a tiny model and one step without
// validation or sampling, so even an input that wrongly passes validation costs nothing.
static Args base_args() {
    return {"-e", "L2:C64:NH4:T32", "-b", "4", "-t", "32", "-x", "1", "-v", "0", "-g", "0",
            "-i", kTrain,           "-j", kVal};
}
static bool has(const std::string& text, const std::string& needle) {
    return text.find(needle) != std::string::npos;
}
static Args operator+(Args a, const Args& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// -P 1 printed its plan and exited 0 (fits), 2 (the advice fits) or 3 (nothing tried fits): which one
// depends on this machine's RAM and disk where a test does not give -M (and -sd a drive that large).
static bool plan_printed(int code, const std::string& out) {
    return (code == 0 || code == 2 || code == 3) && out.find("memory plan: ") != std::string::npos;
}

// ----------------------------------------------------------------------------
// Running a trainer

struct Result {
    std::string cmd, out, err;
    int code = -1;   // exit status when it exited
    int signal = 0;  // the signal that killed it, 0 if none
    bool timed_out = false;
};

static std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Runs `timeout -k 5 900 bin args...` (no shell, so arguments need no quoting) with stdout and stderr
// captured in files (pipes could fill up and block a chatty child). The limit catches a hang, not a slow run:
// a shared or loaded machine (CI, other builds on 2 cores) may take many times the seconds a run takes alone,
// and no test here may fail for that. max_file_bytes > 0: no file the run writes may grow past that
// (RLIMIT_FSIZE, with SIGXFSZ ignored so the write fails with EFBIG instead of killing it): a full disk, as
// far as a writer can tell. Its stdout and stderr files are under the limit too.
static Result run(const std::string& bin, const Args& args, const std::string& scratch,
                  int64_t max_file_bytes = 0) {
    Result r;
    r.cmd = bin;
    for (const std::string& a : args) r.cmd += " '" + a + "'";
    const std::string out_path = scratch + "/stdout.txt", err_path = scratch + "/stderr.txt";
    std::vector<std::string> argv_s = {"timeout", "-k", "5", "900", bin};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& s : argv_s) argv.push_back(&s[0]);
    argv.push_back(nullptr);
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        const int fo = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const int fe = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0) _exit(126);
        if (max_file_bytes > 0) {
            const struct rlimit lim = {(rlim_t)max_file_bytes, (rlim_t)max_file_bytes};
            if (signal(SIGXFSZ, SIG_IGN) == SIG_ERR || setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(126);
        }
        execvp("timeout", argv.data());
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) {
        r.code = -1;
        r.err = "fork/wait failed";
        return r;
    }
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);  // timeout re-raises the child's fatal signal
    else {
        r.code = WEXITSTATUS(status);
        if (r.code == 124 || r.code == 137)
            r.timed_out = true;                          // timeout's codes for TERM / KILL after the limit
        else if (r.code > 128) r.signal = r.code - 128;  // 128+N: killed by signal N
    }
    r.out = slurp(out_path);
    r.err = slurp(err_path);
    return r;
}

// stderr without "warning: ..." lines (the tokenizer may warn; that is not the error).
static std::vector<std::string> error_lines(const std::string& err) {
    std::vector<std::string> lines;
    std::stringstream ss(err);
    std::string line;
    while (std::getline(ss, line))
        if (line.rfind("warning: ", 0) != 0) lines.push_back(line);
    return lines;
}

// The contract for bad input: a normal non-zero exit, exactly one stderr line "error: ..." containing every
// needle, and no training step.
static ::testing::AssertionResult CleanError(const Result& r, const std::vector<std::string>& needles) {
    auto fail = [&](const std::string& why) {
        return ::testing::AssertionFailure()
               << why << "\n  command: " << r.cmd << "\n  exit " << r.code << ", signal " << r.signal
               << "\n  stderr: " << r.err
               << "\n  stdout tail: " << r.out.substr(r.out.size() > 600 ? r.out.size() - 600 : 0);
    };
    if (r.timed_out) return fail("hang: killed by timeout after 900 s");
    if (r.signal) return fail("crash: killed by signal " + std::to_string(r.signal));
    if (r.code == 0) return fail("exit status 0 on bad input");
    if (r.code == 126 || r.code == 127) return fail("could not run the binary");
    const std::vector<std::string> lines = error_lines(r.err);
    if (lines.size() != 1)
        return fail("want exactly one error line on stderr, got " + std::to_string(lines.size()));
    if (lines[0].rfind("error: ", 0) != 0) return fail("stderr line does not start with 'error: '");
    if (r.err.empty() || r.err.back() != '\n') return fail("stderr does not end with a newline");
    for (const std::string& n : needles)
        if (lines[0].find(n) == std::string::npos) return fail("error line lacks '" + n + "'");
    if (r.out.find("step    1/") != std::string::npos) return fail("it trained a step before failing");
    return ::testing::AssertionSuccess();
}

static bool have_binary(const char* bin) { return access(bin, X_OK) == 0; }

// A GPU is present when nvidia-smi lists one (cudaGetDeviceCount is not available to a plain C++ test).
static bool gpu_present() {
    static const int present = system("nvidia-smi -L >/dev/null 2>&1") == 0;
    return present;
}

static int rm_entry(const char* path, const struct stat*, int, struct FTW*) { return remove(path); }

// Tests run from the repo root (test/run_tests.sh does); when started elsewhere, move to the directory above
// the test binary (build/..) so the relative paths to the trainers and the shards hold.
class RepoRootEnv : public ::testing::Environment {
  public:
    void SetUp() override {
        if (access("train_gpt_cpu.cpp", F_OK) == 0) return;
        char exe[PATH_MAX];
        const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) return;
        exe[n] = '\0';
        std::string root(exe);
        for (int up = 0; up < 2 && root.find('/') != std::string::npos; up++) root.resize(root.rfind('/'));
        if (chdir(root.c_str()) != 0) fprintf(stderr, "warning: cannot chdir to %s\n", root.c_str());
    }
};
static ::testing::Environment* const kRepoRootEnv = ::testing::AddGlobalTestEnvironment(new RepoRootEnv);

// ----------------------------------------------------------------------------
// Fixture: a scratch directory and writers for shards and model files

class CliTest : public ::testing::Test {
  protected:
    std::string dir;
    void SetUp() override {
        ASSERT_EQ(access("train_gpt_cpu.cpp", F_OK), 0) << "run the tests from the repo root";
        char tmpl[] = "/tmp/test_cli_XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir = tmpl;
    }
    void TearDown() override {
        if (!dir.empty()) nftw(dir.c_str(), rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    }
    Result run_bin(const char* bin, const Args& args, int64_t max_file_bytes = 0) {
        return run(bin, args, dir, max_file_bytes);
    }
    // The names in a directory, sorted, without . and ..
    static std::vector<std::string> names_in(const std::string& path) {
        std::vector<std::string> names;
        if (DIR* d = opendir(path.c_str())) {
            while (const struct dirent* e = readdir(d))
                if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
            closedir(d);
        }
        std::sort(names.begin(), names.end());
        return names;
    }

    // A shard with header {magic, version, header_tokens (default: tokens)} followed by `tokens` uint16 ids
    // (ids < 50257).
    std::string shard(const std::string& name, int64_t tokens, int32_t magic = DATALOADER_MAGIC,
                      int32_t version = DATALOADER_VERSION, int64_t header_tokens = INT64_MIN) {
        std::vector<uint16_t> t((size_t)tokens);
        for (int64_t i = 0; i < tokens; i++) t[(size_t)i] = (uint16_t)((i * 7919) % 50257);
        return shard_of(name, t, magic, version, header_tokens != INT64_MIN ? header_tokens : tokens);
    }
    std::string shard_of(const std::string& name, const std::vector<uint16_t>& tokens,
                         int32_t magic = DATALOADER_MAGIC, int32_t version = DATALOADER_VERSION,
                         int64_t header_tokens = INT64_MIN) {
        const std::string path = dir + "/" + name;
        FILE* f = fopen(path.c_str(), "wb");
        EXPECT_NE(f, nullptr) << path;
        if (!f) return path;
        int32_t h[256] = {0};
        h[0] = magic;
        h[1] = version;
        h[2] = (int32_t)(header_tokens != INT64_MIN ? header_tokens : (int64_t)tokens.size());
        fwrite(h, sizeof h, 1, f);
        fwrite(tokens.data(), 2, tokens.size(), f);
        fclose(f);
        return path;
    }

    // A valid llm.c model file (L2 C64 NH4 maxT32, GPT-2 vocab), GPT-2 init.
    std::string model_file(const std::string& name) {
        const std::string path = dir + "/" + name;
        GPTConfig c = {32, 50257, 50304, 2, 4, 64};
        std::vector<float> params((size_t)gpt_layout(&c).total);
        gpt_init_params(&c, params.data(), 1);
        char err[4352];
        EXPECT_TRUE(gpt_save_params(path.c_str(), &c, params.data(), err, sizeof err)) << err;
        return path;
    }
    // Overwrites int32 number `index` of a file (header patching).
    void patch_int(const std::string& path, int index, int32_t value) {
        FILE* f = fopen(path.c_str(), "r+b");
        ASSERT_NE(f, nullptr) << path;
        fseek(f, index * 4L, SEEK_SET);
        fwrite(&value, 4, 1, f);
        fclose(f);
    }
    static int64_t file_size(const std::string& path) {
        struct stat st;
        return stat(path.c_str(), &st) == 0 ? (int64_t)st.st_size : -1;
    }
};

// The tests that apply to both trainers run once per binary (suffix /cpu, /gpu); a binary that is not
// built is skipped, so the CPU half still runs where nvcc is missing.
class Both : public CliTest, public ::testing::WithParamInterface<const char*> {
  protected:
    const char* bin = nullptr;
    void SetUp() override {
        bin = GetParam();
        if (!have_binary(bin))
            GTEST_SKIP() << bin << " not built (train_gpt is built only where nvcc is present)";
        CliTest::SetUp();
    }
    Result run_it(const Args& args) { return run_bin(bin, args); }
};

// Starts bin with args (stdout, stderr into files under scratch), returns its pid.
static pid_t spawn(const std::string& bin, const Args& args, const std::string& scratch) {
    std::vector<std::string> argv_s = {bin};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& s : argv_s) argv.push_back(&s[0]);
    argv.push_back(nullptr);
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        const int fo = open((scratch + "/stdout.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const int fe = open((scratch + "/stderr.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0) _exit(126);
        execv(bin.c_str(), argv.data());
        _exit(127);
    }
    return pid;
}
// Waits (up to `seconds`, generous for a loaded machine) until the file holds needle; false if it never does
// or process pid ended first (a zombie: its exit is left for wait_exit).
static bool wait_for_text(const std::string& path, const std::string& needle, double seconds, pid_t pid) {
    for (double t = 0; t < seconds; t += 0.05) {
        if (has(slurp(path), needle)) return true;
        const std::string stat = slurp("/proc/" + std::to_string((int)pid) + "/stat");
        const size_t paren = stat.rfind(')');
        if (stat.empty() || (paren != std::string::npos && stat.compare(paren, 3, ") Z") == 0))
            return has(slurp(path), needle);
        usleep(50000);
    }
    return false;
}
// Waits for pid to exit (killing it after `seconds`; 0: at once); its exit code, 128 + N if killed by signal
// N, -1 if it had to be killed.
static int wait_exit(pid_t pid, double seconds) {
    int status = 0;
    for (double t = 0; t <= seconds; t += 0.05) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        usleep(50000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

// step -> the loss printed on its `step n/N | loss X | ...` line
static std::map<int, std::string> step_losses(const std::string& out) {
    std::map<int, std::string> m;
    const std::regex re("step +([0-9]+)/[0-9]+ \\| loss ([0-9.]+)");
    for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it)
        m[std::stoi((*it)[1])] = (*it)[2];
    return m;
}

// A checkpoint file name: prefix, the step in 8 digits, suffix ("model_00000012.bin").
static std::string step_name(const char* prefix, int64_t step, const char* suffix) {
    char name[64];
    snprintf(name, sizeof name, "%s%08lld%s", prefix, (long long)step, suffix);
    return name;
}
