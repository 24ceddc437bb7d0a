// test_cli.cpp — GoogleTest suite that runs the two trainers, ./train_gpt_cpu and ./train_gpt, as subprocesses
// from the repo root and checks that bad input (unknown or valueless flags, bad values, malformed model specs,
// missing / corrupt / truncated model files, missing / corrupt / short data shards, a model too big for the
// host RAM) ends in exactly ONE "error: ..." line on stderr and a non-zero exit: never a crash (death by
// signal), a hang (each run is under `timeout 60`) or a training run on garbage. It also runs a 3-step CPU
// training smoke test (step lines, main.log, a model file that loads back).
// It does not check training math (test_gpt2_cpu, test_gpu do) and never lets train_gpt train: every
// train_gpt run here is refused before the GPU is touched, and the one valid-input run ("no CUDA device") is
// skipped when `nvidia-smi -L` finds a GPU. A trainer that is not built (train_gpt without nvcc) is skipped.
// Scratch files live in a mkdtemp directory under /tmp, removed at the end.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>
#include "dataloader.h"
#include "model.h"

static const char* const kCpu = "./train_gpt_cpu";
static const char* const kGpu = "./train_gpt";
static const char* const kTrain = "dev/data/tinyshakespeare/tiny_shakespeare_train.bin";
static const char* const kVal = "dev/data/tinyshakespeare/tiny_shakespeare_val.bin";

typedef std::vector<std::string> Args;

// Valid everywhere except in what a test overrides (later flags win): a tiny model and one step without
// validation or sampling, so even an input that wrongly passes validation costs nothing.
static Args base_args() {
    return {"-e", "L2:C64:NH4:T32", "-b", "4", "-t", "32", "-x", "1", "-v", "0", "-g", "0", "-i", kTrain, "-j", kVal};
}
static Args operator+(Args a, const Args& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// ----------------------------------------------------------------------------
// Running a trainer

struct Result {
    std::string cmd, out, err;
    int code = -1;       // exit status when it exited
    int signal = 0;      // the signal that killed it, 0 if none
    bool timed_out = false;
};

static std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Runs `timeout -k 5 60 bin args...` (no shell, so arguments need no quoting) with stdout and stderr captured
// in files (pipes could fill up and block a chatty child).
static Result run(const std::string& bin, const Args& args, const std::string& scratch) {
    Result r;
    r.cmd = bin;
    for (const std::string& a : args) r.cmd += " '" + a + "'";
    const std::string out_path = scratch + "/stdout.txt", err_path = scratch + "/stderr.txt";
    std::vector<std::string> argv_s = {"timeout", "-k", "5", "60", bin};
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
        execvp("timeout", argv.data());
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) { r.code = -1; r.err = "fork/wait failed"; return r; }
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);  // timeout re-raises the child's fatal signal
    else {
        r.code = WEXITSTATUS(status);
        if (r.code == 124 || r.code == 137) r.timed_out = true;   // timeout's codes for TERM / KILL after the limit
        else if (r.code > 128) r.signal = r.code - 128;           // 128+N: killed by signal N
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
        return ::testing::AssertionFailure() << why << "\n  command: " << r.cmd << "\n  exit " << r.code << ", signal "
                                             << r.signal << "\n  stderr: " << r.err << "\n  stdout tail: "
                                             << r.out.substr(r.out.size() > 600 ? r.out.size() - 600 : 0);
    };
    if (r.timed_out) return fail("hang: killed by timeout after 60 s");
    if (r.signal) return fail("crash: killed by signal " + std::to_string(r.signal));
    if (r.code == 0) return fail("exit status 0 on bad input");
    if (r.code == 126 || r.code == 127) return fail("could not run the binary");
    const std::vector<std::string> lines = error_lines(r.err);
    if (lines.size() != 1) return fail("want exactly one error line on stderr, got " + std::to_string(lines.size()));
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
    Result run_bin(const char* bin, const Args& args) { return run(bin, args, dir); }

    // A shard with header {magic, version, header_tokens (default: tokens)} followed by `tokens` uint16 ids (ids < 50257).
    std::string shard(const std::string& name, int64_t tokens, int32_t magic = DATALOADER_MAGIC,
                      int32_t version = DATALOADER_VERSION, int64_t header_tokens = INT64_MIN) {
        const std::string path = dir + "/" + name;
        FILE* f = fopen(path.c_str(), "wb");
        EXPECT_NE(f, nullptr) << path;
        if (!f) return path;
        int32_t h[256] = {0};
        h[0] = magic; h[1] = version; h[2] = (int32_t)(header_tokens != INT64_MIN ? header_tokens : tokens);
        fwrite(h, sizeof h, 1, f);
        std::vector<uint16_t> t((size_t)tokens);
        for (int64_t i = 0; i < tokens; i++) t[(size_t)i] = (uint16_t)((i * 7919) % 50257);
        fwrite(t.data(), 2, t.size(), f);
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
        if (!have_binary(bin)) GTEST_SKIP() << bin << " not built (train_gpt is built only where nvcc is present)";
        CliTest::SetUp();
    }
    Result run_it(const Args& args) { return run_bin(bin, args); }
};
INSTANTIATE_TEST_SUITE_P(Trainers, Both, ::testing::Values(kCpu, kGpu),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                             return std::string(i.param == kCpu ? "cpu" : "gpu");
                         });

// ----------------------------------------------------------------------------
// Flags

TEST_P(Both, UnknownFlag) {
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-w", "1"}), {"unknown flag -w"}));
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"--bogus", "1"}), {"unknown flag --bogus"}));
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"stray", "word"}), {"unknown flag stray"}));
    if (bin == kCpu) {  // the streaming trainer's own flags are unknown to the CPU one
        EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-S", "2"}), {"unknown flag -S"}));
    }
}

TEST_P(Both, FlagWithoutValue) {
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-x"}), {"flag -x needs a value"}));
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-o"}), {"flag -o needs a value"}));
    EXPECT_TRUE(CleanError(run_it(Args{"-b"}), {"flag -b needs a value"}));
}

TEST_P(Both, BadValues) {
    struct Case { const char* flag; const char* value; const char* why; };
    const Case cases[] = {
        {"-b", "0", "out of range"},          {"-t", "-5", "out of range"},
        {"-l", "abc", "not a finite number"}, {"-y", "2", "out of range"},
        {"-b", "4x", "not an integer"},       {"-b", "", "not an integer"},
        {"-t", "1.5", "not an integer"},      {"-l", "nan", "not a finite number"},
        {"-l", "1e999", "not a finite number"}, {"-q", "2", "out of range"},
        {"-k", "-1", "out of range"},         {"-d", "-128", "out of range"},
        {"-x", "-2", "out of range"},         {"-x", "99999999999", "out of range"},
        {"-x", "99999999999999999999999", "not an integer"}, {"-g", "abc", "not an integer"},
        {"-v", "-1", "out of range"},         {"-n", "1e3", "not an integer"},
    };
    for (const Case& c : cases)
        EXPECT_TRUE(CleanError(run_it(base_args() + Args{c.flag, c.value}),
                               {std::string("flag ") + c.flag, c.why}));
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-o", ""}), {"-o", "must not be empty"}));
}

TEST_F(CliTest, GpuOnlyFlagValues) {
    if (!have_binary(kGpu)) GTEST_SKIP() << kGpu << " not built (train_gpt is built only where nvcc is present)";
    const Args bad[] = {{"-S", "1"}, {"-S", "x"}, {"-Y", "2"}, {"-A", "-1"}, {"-B", "-3"}, {"-W", "1.5"}};
    for (const Args& a : bad) EXPECT_TRUE(CleanError(run_bin(kGpu, base_args() + a), {"flag " + a[0]}));
}

TEST_P(Both, InconsistentFlags) {
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-d", "100"}), {"-d 100", "not a multiple of B*T", "128"}));
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-d", "1099511627776"}), {"2^20 micro-batches"}));
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-n", "1"}), {"-n and -y need an output directory"}));
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-y", "1"}), {"-n and -y need an output directory"}));
    // -t longer than the model's position table
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-e", "L2:C64:NH4:T16"}),
                           {"-t 32 exceeds the model's max sequence length 16"}));
}

TEST_P(Both, HelpExitsZero) {
    const Result r = run_it({"-h"});
    EXPECT_EQ(r.code, 0) << r.cmd << "\n" << r.err;
    EXPECT_EQ(r.signal, 0) << r.cmd;
    EXPECT_NE(r.out.find("-e <model>"), std::string::npos) << r.out;
    EXPECT_TRUE(error_lines(r.err).empty()) << r.err;
}

// ----------------------------------------------------------------------------
// Model specs and model files

TEST_P(Both, MalformedModelSpec) {
    struct Case { const char* spec; const char* why; };
    const Case cases[] = {
        {"L4:C100:NH3", "multiple of 32"},
        {"L4:C96:NH5", "divisible by num_heads"},
        {"L0:C128:NH4", "must be positive"},
        {"Lx:C128", "bad part 'Lx'"},
        {"L4:C128", "needs L<n>:C<n>:NH<n>"},
        {"L2:C64:NH4:Q5", "bad part 'Q5'"},
        {"L2:C64:NH4:T0", "must be positive"},
        {"L2:C64:NH4:V70000", "uint16"},
        {"L2:C64:NH4:T99999999999", "bad part"},
        {"d0", "must be positive"},
        {"124m:", "bad part"},
    };
    for (const Case& c : cases)
        EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-e", c.spec}), {c.spec, c.why}));
}

TEST_P(Both, BadModelFiles) {
    const std::string good = model_file("good.bin");
    const int64_t size = file_size(good);
    const GPTConfig cfg = {32, 50257, 50304, 2, 4, 64};
    ASSERT_EQ(size, 1024 + 4 * gpt_layout(&cfg).total);

    const std::string magic = model_file("magic.bin");
    patch_int(magic, 0, 12345);
    const std::string version = model_file("version.bin");
    patch_int(version, 1, 5);  // llm.c's bf16 files are version 5
    const std::string trunc = model_file("trunc.bin");
    ASSERT_EQ(truncate(trunc.c_str(), size - 4), 0);
    const std::string longer = model_file("long.bin");
    { FILE* f = fopen(longer.c_str(), "ab"); ASSERT_NE(f, nullptr); fputs("junk", f); fclose(f); }
    const std::string tiny = model_file("tiny.bin");
    ASSERT_EQ(truncate(tiny.c_str(), 100), 0);
    const std::string dims = model_file("dims.bin");
    patch_int(dims, 6, 100);  // C=100
    const std::string huge = model_file("huge.bin");
    patch_int(huge, 4, 2000000000);  // L=2e9: the layout would overflow int64 if it were trusted
    const std::string empty = dir + "/empty.bin";
    { FILE* f = fopen(empty.c_str(), "wb"); ASSERT_NE(f, nullptr); fclose(f); }
    const std::string subdir = dir + "/model_dir";
    ASSERT_EQ(mkdir(subdir.c_str(), 0755), 0);

    struct Case { std::string path; const char* why; };
    const Case cases[] = {
        {dir + "/missing.bin", "cannot open model file"},
        {magic, "bad magic 12345"},
        {version, "version 5 not supported"},
        {trunc, "header implies"},
        {longer, "header implies"},
        {tiny, "too short for its 1024-byte header"},
        {empty, "too short for its 1024-byte header"},
        {dims, "multiple of 32"},
        {huge, "too large"},
        {subdir, "not a regular file"},
    };
    for (const Case& c : cases)
        EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-e", c.path}), {c.path, c.why}));
    // the untouched file is fine for the CPU trainer (not run with train_gpt: with a GPU that would train)
    if (bin == kCpu) {
        const Result r = run_it(base_args() + Args{"-e", good});
        EXPECT_EQ(r.code, 0) << r.cmd << "\n" << r.err;
        EXPECT_NE(r.out.find("llm.c model file"), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("step    1/1"), std::string::npos) << r.out;
    }
}

// ----------------------------------------------------------------------------
// Data shards

TEST_P(Both, BadDataShards) {
    const int64_t need = 4 * 32 + 1;  // B*T+1 of base_args
    const std::string good = shard("good.bin", 1000);
    const std::string magic = shard("magic.bin", 1000, 20240326);
    const std::string version = shard("version.bin", 1000, DATALOADER_MAGIC, 2);
    const std::string fewer = shard("fewer.bin", 999, DATALOADER_MAGIC, DATALOADER_VERSION, 1000);
    const std::string more = shard("more.bin", 1001, DATALOADER_MAGIC, DATALOADER_VERSION, 1000);
    const std::string negative = shard("negative.bin", 10, DATALOADER_MAGIC, DATALOADER_VERSION, -5);
    const std::string short_shard = shard("short.bin", need - 1);
    const std::string header_only = dir + "/header_only.bin";
    { FILE* f = fopen(header_only.c_str(), "wb"); ASSERT_NE(f, nullptr); fputs("abc", f); fclose(f); }
    ASSERT_EQ(mkdir((dir + "/glob").c_str(), 0755), 0);
    shard("glob/a_000.bin", 1000);
    const std::string glob_bad = shard("glob/a_001.bin", 1000, 7);
    const std::string subdir = dir + "/shard_dir";
    ASSERT_EQ(mkdir(subdir.c_str(), 0755), 0);

    struct Case { std::string path; std::vector<std::string> why; };
    const std::vector<Case> cases = {
        {dir + "/missing.bin", {"no files match pattern", "missing.bin"}},
        {dir + "/nothing_*.bin", {"no files match pattern", "nothing_*.bin"}},
        {magic, {magic, "bad magic 20240326"}},
        {version, {version, "unsupported version 2"}},
        {fewer, {fewer, "disagrees with the header's 1000 tokens"}},
        {more, {more, "disagrees with the header's 1000 tokens"}},
        {negative, {negative, "disagrees with the header"}},
        {short_shard, {short_shard, "too short", "B*T+1 = 129"}},
        {header_only, {header_only, "smaller than the 1024-byte header"}},
        {dir + "/glob/a_*.bin", {glob_bad, "bad magic 7"}},
        {subdir, {subdir, "not a regular file"}},
    };
    for (const Case& c : cases) {
        EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-i", c.path}), c.why)) << "train data";
        EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-j", c.path}), c.why)) << "val data";
    }
    // the good shard passes the data checks: the CPU trainer trains on it
    if (bin == kCpu) {
        const Result r = run_it(base_args() + Args{"-i", good, "-j", good});
        EXPECT_EQ(r.code, 0) << r.cmd << "\n" << r.err;
    }
}

// ----------------------------------------------------------------------------
// Resources and what only one trainer does

TEST_P(Both, HostRamTooSmall) {
    if (host_available_bytes() < 0) GTEST_SKIP() << "no MemAvailable in /proc/meminfo: the trainers cannot check";
    if (host_available_bytes() > ((int64_t)4 << 40)) GTEST_SKIP() << "more than 4 TiB of RAM: 175b fits";
    const std::regex amounts("needs [0-9]+\\.[0-9] GiB .*[0-9]+\\.[0-9] GiB available");
    const Result r = run_it(base_args() + Args{"-e", "175b"});
    EXPECT_TRUE(CleanError(r, {"host RAM too small"}));
    EXPECT_TRUE(std::regex_search(r.err, amounts)) << r.err;
    // absurd activation sizes (int64 overflow territory) are refused the same way by the CPU trainer
    if (bin == kCpu) {
        const Result r2 = run_it(base_args() + Args{"-e", "L2:C64:NH4:T1048576", "-t", "1048576", "-b", "1048576"});
        EXPECT_TRUE(CleanError(r2, {"host RAM too small"}));
    }
}

TEST_F(CliTest, TrainGptWithoutGpu) {
    if (!have_binary(kGpu)) GTEST_SKIP() << kGpu << " not built (train_gpt is built only where nvcc is present)";
    if (gpu_present()) GTEST_SKIP() << "a GPU is present: valid input would train";
    const Result r = run_bin(kGpu, base_args());
    EXPECT_TRUE(CleanError(r, {"no CUDA device found", "train_gpt_cpu"}));
}

// Resuming (-y 1) checks the latest complete checkpoint's optimizer state file before any GPU work, so
// these run (and must fail cleanly) on a machine without a GPU too.
TEST_F(CliTest, TrainGptResumeChecksStateFile) {
    if (!have_binary(kGpu)) GTEST_SKIP() << kGpu << " not built (train_gpt is built only where nvcc is present)";
    const std::string out = dir + "/ckpt";
    ASSERT_EQ(mkdir(out.c_str(), 0755), 0);
    model_file("ckpt/model_00000002.bin");
    FILE* done = fopen((out + "/DONE_00000002").c_str(), "w");
    ASSERT_NE(done, nullptr);
    fclose(done);
    GPTConfig c = {32, 50257, 50304, 2, 4, 64};
    const int64_t total = gpt_layout(&c).total;
    const std::string state = out + "/state_00000002.bin";
    // header {magic, version, step, total, sizeof(DataLoaderState)} (16 int64), the data position, m, v
    auto write_state = [&](int64_t magic, int64_t step, int64_t params, int64_t body_floats) {
        FILE* f = fopen(state.c_str(), "wb");
        ASSERT_NE(f, nullptr);
        int64_t h[16] = {magic, 1, step, params, (int64_t)sizeof(DataLoaderState)};
        fwrite(h, sizeof h, 1, f);
        DataLoaderState ds;
        memset(&ds, 0, sizeof ds);
        fwrite(&ds, sizeof ds, 1, f);
        std::vector<float> zeros((size_t)body_floats, 0.0f);
        fwrite(zeros.data(), 4, zeros.size(), f);
        fclose(f);
    };
    const Args resume = base_args() + Args{"-o", out, "-y", "1", "-x", "5"};
    EXPECT_TRUE(CleanError(run_bin(kGpu, resume), {"cannot open optimizer state", state}));
    write_state(12345, 2, total, 2 * total);
    EXPECT_TRUE(CleanError(run_bin(kGpu, resume), {"optimizer state", "bad header"}));
    write_state(20241122, 2, total + 1, 2 * total);
    EXPECT_TRUE(CleanError(run_bin(kGpu, resume), {"optimizer state", "parameters"}));
    write_state(20241122, 2, total, 2 * total - 1);
    EXPECT_TRUE(CleanError(run_bin(kGpu, resume), {"optimizer state", "truncated"}));
    write_state(20241122, 3, total, 2 * total);
    EXPECT_TRUE(CleanError(run_bin(kGpu, resume), {"does not hold step 2"}));
    write_state(20241122, 2, total, 2 * total);
    EXPECT_TRUE(CleanError(run_bin(kGpu, base_args() + Args{"-o", out, "-y", "1", "-x", "2"}), {"nothing to train"}));
    if (!gpu_present()) {  // a valid checkpoint passes every check and only then meets the missing GPU
        EXPECT_TRUE(CleanError(run_bin(kGpu, resume), {"no CUDA device found"}));
    }
}

TEST_F(CliTest, CpuOnlyErrors) {
    if (!have_binary(kCpu)) GTEST_SKIP() << kCpu << " not built";
    // it does not resume
    EXPECT_TRUE(CleanError(run_bin(kCpu, base_args() + Args{"-y", "1", "-o", dir + "/out"}), {"cannot resume"}));
    // token ids of the GPT-2 shards are outside a 100-token vocabulary: refused, not read out of bounds
    EXPECT_TRUE(CleanError(run_bin(kCpu, base_args() + Args{"-e", "L2:C64:NH4:T32:V100"}), {"token id", "V=100"}));
    // one epoch (-x -1) shorter than one accumulated step (4096 micro-batches of a ~2400-batch shard)
    EXPECT_TRUE(CleanError(run_bin(kCpu, base_args() + Args{"-x", "-1", "-d", std::to_string(4096 * 128)}),
                           {"fewer than the 4096"}));
    // -o names a file, not a directory
    const std::string file = shard("not_a_dir.bin", 10);
    EXPECT_TRUE(CleanError(run_bin(kCpu, base_args() + Args{"-o", file}), {file}));
}

// ----------------------------------------------------------------------------
// Happy path

TEST_F(CliTest, CpuSmokeRun) {
    if (!have_binary(kCpu)) GTEST_SKIP() << kCpu << " not built";
    const std::string out = dir + "/run";
    const Result r = run_bin(kCpu, {"-e", "L2:C64:NH4:T32", "-b", "4", "-t", "32", "-x", "3", "-v", "3", "-m", "2", "-g",
                                    "8", "-o", out, "-n", "3"});
    ASSERT_EQ(r.code, 0) << r.cmd << "\nsignal " << r.signal << "\n" << r.err;
    EXPECT_TRUE(error_lines(r.err).empty()) << r.err;
    EXPECT_NE(r.out.find("step    1/3"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("step    3/3"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("val loss"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("generating:"), std::string::npos) << r.out;

    const std::string log = slurp(out + "/main.log");
    for (const char* line : {"s:0 tel:", "s:1 trl:", "s:3 trl:", "s:3 tel:"})
        EXPECT_NE(log.find(line), std::string::npos) << line << " not in main.log:\n" << log;
    // every logged loss is a finite number near ln(50257) = 10.8 for this tiny, barely trained model
    std::stringstream ss(log);
    std::string line;
    int n = 0;
    while (std::getline(ss, line)) {
        const size_t colon = line.rfind(':');
        ASSERT_NE(colon, std::string::npos) << line;
        const double loss = atof(line.c_str() + colon + 1);
        EXPECT_TRUE(isfinite(loss) && loss > 5.0 && loss < 12.0) << line;
        n++;
    }
    EXPECT_EQ(n, 5) << log;  // tel at 0 and 3, trl at 1, 2, 3

    // the checkpoint loads back and holds finite weights of the right shape
    const std::string model = out + "/model_00000003.bin";
    GPTConfig c;
    char err[4352];
    ASSERT_TRUE(gpt_read_header(model.c_str(), &c, err, sizeof err)) << err;
    EXPECT_EQ(c.num_layers, 2);
    EXPECT_EQ(c.channels, 64);
    EXPECT_EQ(c.num_heads, 4);
    EXPECT_EQ(c.max_seq_len, 32);
    EXPECT_EQ(c.vocab_size, 50257);
    std::vector<float> params((size_t)gpt_layout(&c).total);
    ASSERT_TRUE(gpt_load_params(model.c_str(), &c, params.data(), err, sizeof err)) << err;
    int64_t bad = 0;
    for (float v : params) bad += !isfinite(v);
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(access((model + ".tmp").c_str(), F_OK), -1) << "temporary file left behind";

    // and the trainer resumes training from it as an llm.c model file
    const Result r2 = run_bin(kCpu, base_args() + Args{"-e", model});
    EXPECT_EQ(r2.code, 0) << r2.cmd << "\n" << r2.err;
    EXPECT_NE(r2.out.find("llm.c model file"), std::string::npos) << r2.out;
}
