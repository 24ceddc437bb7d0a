// test_cli.cpp — GoogleTest suite that runs the two trainers, ./train_gpt_cpu and ./train_gpt, as
// subprocesses from the repo root and checks that bad input (unknown or valueless flags, bad values,
// malformed model specs, missing / corrupt / truncated model files, missing / corrupt / short data shards,
// shards of another tokenizer than the model's, a model too big for the host RAM) ends in exactly ONE "error:
// ..." line on stderr and a non-zero exit: never a crash (death by signal), a hang (each run is under
// `timeout 900`) or a training run on garbage. The memory plan refuses shapes whose byte counts overflow
// (train_gpt's checkpoints and resume from the command line: test_resume_cli.cpp). A checkpoint that cannot
// be written (a file-size limit standing for a full disk) is one error line, leaves no partial file, and the
// checkpoint before it resumes. It also runs a 3-step CPU training smoke test (step lines with progress,
// main.log, a model file that loads back) and dev/plot.py on a log. It does not check training math
// (test_gpt2_cpu, test_gpu do) and never lets the real train_gpt train: every train_gpt run here is refused
// before the GPU is touched, and the one valid-input run ("no CUDA device") is skipped when `nvidia-smi -L`
// finds a GPU. A trainer that is not built (train_gpt without nvcc) is skipped. The emulated train_gpt (kEmu)
// does train, a tiny model for 6 steps: the step lines, validation, sampling, checkpoints (and -nk pruning
// them), a resume that continues with the very same losses, and -R -1 (every layer GPU-resident). Nothing
// lost across trainers, checksums and signals: test_nothing_lost.cpp. Scratch files live in a mkdtemp
// directory under /tmp, removed at the end.
#include "cli_test_common.h"
#include "llmc/hf.h"  // defines: hf_tokenizer_json_of

INSTANTIATE_TEST_SUITE_P(Trainers, Both, ::testing::Values(kCpu, kGpu),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                             return std::string(i.param == kCpu ? "cpu" : "gpu");
                         });

// ----------------------------------------------------------------------------
// CPU cores: a cgroup CPU quota (cgroup v2's cpu.max: "QUOTA PERIOD" or "max PERIOD") in whole
// cores, rounded up

TEST(CpuCores, CgroupQuota) {
    EXPECT_EQ(cgroup_quota_cores("1600000 100000\n"), 16);
    EXPECT_EQ(cgroup_quota_cores("150000 100000"), 2);  // 1.5 cores: 2 threads, not 1
    EXPECT_EQ(cgroup_quota_cores("100000 100000"), 1);
    EXPECT_EQ(cgroup_quota_cores("max 100000\n"), -1);  // no limit
    EXPECT_EQ(cgroup_quota_cores("-1 100000"), -1);     // cgroup v1's "no limit"
    EXPECT_EQ(cgroup_quota_cores(""), -1);
    EXPECT_EQ(cgroup_quota_cores(NULL), -1);
    EXPECT_EQ(cgroup_quota_cores("100000 0"), -1);
    const int cores = usable_cpu_cores();
    EXPECT_GE(cores, 1);
    cpu_set_t allowed;
    ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
    EXPECT_LE(cores, CPU_COUNT(&allowed));
}

// A rank's share of the node's cores for its CPU AdamW (issue 43): ranks of one launcher share its mask and
// split it; ranks pinned apart keep theirs (each divided by the ranks again gave 1/G^2 of the node); overlaps
// split what they share.
TEST(CpuCores, ShareOfTheNodesCores) {
    auto mask = [](int lo, int hi) {
        cpu_set_t s;
        CPU_ZERO(&s);
        for (int i = lo; i < hi; i++) CPU_SET(i, &s);
        return s;
    };
    const cpu_set_t shared[4] = {mask(0, 16), mask(0, 16), mask(0, 16), mask(0, 16)};
    EXPECT_EQ(cpu_share_of(shared, 4, 0), 4);
    EXPECT_EQ(cpu_share_of(shared, 4, 3), 4);
    const cpu_set_t pinned[4] = {mask(0, 4), mask(4, 8), mask(8, 12), mask(12, 16)};
    EXPECT_EQ(cpu_share_of(pinned, 4, 1), 4);
    const cpu_set_t overlap[2] = {mask(0, 8), mask(4, 12)};  // 4 own and 4 shared each
    EXPECT_EQ(cpu_share_of(overlap, 2, 0), 6);
    EXPECT_EQ(cpu_share_of(overlap, 2, 1), 6);
    const cpu_set_t crowded[3] = {mask(0, 1), mask(0, 1), mask(0, 1)};  // one core for three: at least 1
    EXPECT_EQ(cpu_share_of(crowded, 3, 2), 1);
    EXPECT_EQ(cpu_share_of(shared, 1, 0), 16);
}

// ----------------------------------------------------------------------------
// Flags

TEST_P(Both, UnknownFlag) {
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-w", "1"}), {"unknown flag -w"}));
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"--bogus", "1"}), {"unknown flag --bogus"}));
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"stray", "word"}), {"unknown flag stray"}));
    // what the error quotes cannot break it into lines: control characters print as \xNN
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-b\nx", "1"}), {"unknown flag -b\\x0ax"}));
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-i", "no\nsuch\r.bin"}), {"no\\x0asuch\\x0d.bin"}));
    // llm.c's flags that neither trainer takes say what they were for there
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-z", "1"}),
                           {"unknown flag -z: llm.c's ZeRO stage", "host RAM, once per node"}));
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-r", "1"}), {"unknown flag -r: llm.c's recompute"}));
    // llm.c's process start (-pi, -pn, -pr, -pg, -pf, -ps) is train_gpt's (test_multi_gpu); -pg alone is a
    // line
    EXPECT_TRUE(
        CleanError(run_it(base_args() + Args{"-pg", "8"}),
                   {bin == std::string(kCpu) ? "unknown flag -pg: train_gpt's flag (llm.c's way to start"
                                             : "-pf and -pg go with llm.c's -pi tcp|fs|mpi"}));
    if (bin == std::string(kCpu)) {  // train_gpt takes -pn, -pN, -pr and -ps (test_multi_gpu)
        EXPECT_TRUE(
            CleanError(run_it(base_args() + Args{"-pn", "2"}), {"unknown flag -pn: train_gpt's flag"}));
        EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-pr", "1"}),
                               {"unknown flag -pr: train_gpt's flag (this node's index"}));
    }
    // llm.c's -h 1 is its HellaSwag evaluation (test_eval), not a request for the help text: its file is not
    // here
    EXPECT_TRUE(
        CleanError(run_it(base_args() + Args{"-h", "1"}), {"cannot open the eval file dev/data/hellaswag"}));
    const Result help = run_it(Args{"-b", "4", "-h"});
    EXPECT_EQ(help.code, 0) << help.err;
    EXPECT_TRUE(has(help.out, "-gc <float>")) << help.out;
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
    struct Case {
        const char* flag;
        const char* value;
        const char* why;
    };
    const Case cases[] = {
        {"-b", "0", "out of range"},
        {"-t", "-5", "out of range"},
        {"-l", "abc", "not a finite number"},
        {"-y", "2", "out of range"},
        {"-b", "4x", "not an integer"},
        {"-b", "", "not an integer"},
        {"-t", "1.5", "not an integer"},
        {"-l", "nan", "not a finite number"},
        {"-l", "1e999", "not a finite number"},
        {"-q", "2", "out of range"},
        {"-gc", "-1", "out of range"},
        {"-d", "-128", "out of range"},
        {"-k", "cos", "not an lr schedule"},
        {"-k", "1.0", "the gradient clip is -gc"},
        {"-x", "-2", "out of range"},
        {"-x", "0", "no step to train: -x N for N steps, or -1 for one epoch"},
        {"-x", "99999999999", "out of range"},
        {"-x", "99999999999999999999999", "not an integer"},
        {"-g", "abc", "not an integer"},
        {"-v", "-1", "out of range"},
        {"-n", "1e3", "not an integer"},
        {"-nk", "-1", "out of range"},
        {"-nm", "x", "not an integer"},
        {"-a", "2", "out of range"},
        {"-sl", "-1", "out of range"},
        {"-sg", "x", "not a finite number"},
    };
    for (const Case& c : cases)
        EXPECT_TRUE(
            CleanError(run_it(base_args() + Args{c.flag, c.value}), {std::string("flag ") + c.flag, c.why}));
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-o", ""}), {"-o", "must not be empty"}));
}

TEST_F(CliTest, GpuOnlyFlagValues) {
    if (!have_binary(kGpu))
        GTEST_SKIP() << kGpu << " not built (train_gpt is built only where nvcc is present)";
    const Args bad[] = {{"-S", "1"},  {"-S", "x"},  {"-Y", "2"},  {"-A", "-1"}, {"-B", "-3"}, {"-W", "1.5"},
                        {"-R", "-2"}, {"-K", "-2"}, {"-K", "y"},  {"-F", "3"},  {"-F", "x"},  {"-G", "-1"},
                        {"-M", "-1"}, {"-M", "x"},  {"-V", "-1"}, {"-V", "x"}};
    for (const Args& a : bad) EXPECT_TRUE(CleanError(run_bin(kGpu, base_args() + a), {"flag " + a[0]}));
    // more GPU-resident layers than the model has (base_args' model has 2)
    EXPECT_TRUE(CleanError(run_bin(kGpu, base_args() + Args{"-R", "3"}), {"-R 3", "only 2 layers"}));
    EXPECT_TRUE(CleanError(run_bin(kGpu, base_args() + Args{"-K", "3"}), {"-K 3", "only 2 layers"}));
}

TEST_P(Both, InconsistentFlags) {
    EXPECT_TRUE(
        CleanError(run_it(base_args() + Args{"-d", "100"}), {"-d 100", "not a multiple of B*T", "128"}));
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-d", "1099511627776"}), {"2^20 micro-batches"}));
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-n", "1"}), {"-n and -y need an output directory"}));
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-y", "1"}), {"-n and -y need an output directory"}));
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-o", dir + "/nk", "-nm", "10"}),
                           {"-nk and -nm", "need checkpoints"}));
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
    struct Case {
        const char* spec;
        const char* why;
    };
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
    patch_int(version, 1, 4);
    const std::string bf16_size = model_file("bf16_size.bin");
    patch_int(bf16_size, 1, 5);  // llm.c's bf16 files are version 5: 2 bytes per parameter, not 4
    const std::string trunc = model_file("trunc.bin");
    ASSERT_EQ(truncate(trunc.c_str(), size - 4), 0);
    const std::string longer = model_file("long.bin");
    {
        FILE* f = fopen(longer.c_str(), "ab");
        ASSERT_NE(f, nullptr);
        fputs("junk", f);
        fclose(f);
    }
    const std::string tiny = model_file("tiny.bin");
    ASSERT_EQ(truncate(tiny.c_str(), 100), 0);
    const std::string dims = model_file("dims.bin");
    patch_int(dims, 6, 100);  // C=100
    const std::string huge = model_file("huge.bin");
    patch_int(huge, 4, 2000000000);  // L=2e9: the layout would overflow int64 if it were trusted
    const std::string empty = dir + "/empty.bin";
    {
        FILE* f = fopen(empty.c_str(), "wb");
        ASSERT_NE(f, nullptr);
        fclose(f);
    }
    const std::string subdir = dir + "/model_dir";
    ASSERT_EQ(mkdir(subdir.c_str(), 0755), 0);

    struct Case {
        std::string path;
        const char* why;
    };
    const Case cases[] = {
        {dir + "/missing.bin", "cannot open model file"},
        {magic, "bad magic 12345"},
        {version, "version 4 not supported"},
        {bf16_size, "header implies"},
        {trunc, "header implies"},
        {longer, "header implies"},
        {tiny, "too short for its 1024-byte header"},
        {empty, "too short for its 1024-byte header"},
        {dims, "multiple of 32"},
        {huge, "too large"},
        {subdir, "holds no model.safetensors"},  // a directory is read as a Hugging Face checkpoint (hf.h)
    };
    for (const Case& c : cases)
        EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-e", c.path}), {c.path, c.why}));
    // the untouched file is fine for the CPU trainer (not run with train_gpt: with a GPU that would train)
    if (bin == kCpu) {
        const Result r = run_it(base_args() + Args{"-e", good});
        EXPECT_EQ(r.code, 0) << r.cmd << "\n" << r.err;
        EXPECT_NE(r.out.find("llm.c model file"), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("step    1/1"), std::string::npos) << r.out;
        // the same weights as llm.c's CUDA trainer saves them (version 5, bf16: the top half of each fp32)
        std::string bytes = slurp(good);
        const int32_t v5 = 5;
        memcpy(&bytes[4], &v5, 4);
        for (size_t i = 0; 1024 + 4 * i < bytes.size(); i++)
            memmove(&bytes[1024 + 2 * i], &bytes[1024 + 4 * i + 2], 2);
        bytes.resize(1024 + (bytes.size() - 1024) / 2);
        const std::string bf16 = dir + "/bf16.bin";
        {
            FILE* f = fopen(bf16.c_str(), "wb");
            ASSERT_NE(f, nullptr);
            fwrite(bytes.data(), 1, bytes.size(), f);
            fclose(f);
        }
        const Result h = run_it(base_args() + Args{"-e", bf16});
        EXPECT_EQ(h.code, 0) << h.cmd << "\n" << h.err;
        EXPECT_NE(h.out.find("step    1/1"), std::string::npos) << h.out;
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
    {
        FILE* f = fopen(header_only.c_str(), "wb");
        ASSERT_NE(f, nullptr);
        fputs("abc", f);
        fclose(f);
    }
    ASSERT_EQ(mkdir((dir + "/glob").c_str(), 0755), 0);
    shard("glob/a_000.bin", 1000);
    const std::string glob_bad = shard("glob/a_001.bin", 1000, 7);
    const std::string subdir = dir + "/shard_dir";
    ASSERT_EQ(mkdir(subdir.c_str(), 0755), 0);

    struct Case {
        std::string path;
        std::vector<std::string> why;
    };
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
    // both shards too short for -b 16: the shorter one (val) is named, and its -b fits the train shard too
    // (the train shard's own advice, -b 9, the val shard would then refuse)
    const std::string train300 = shard("train300.bin", 300), val100 = shard("val100.bin", 100);
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-b", "16", "-i", train300, "-j", val100}),
                           {val100, "too short: 100 tokens", "use -b 3 or fewer"}));
    // the good shard passes the data checks: the CPU trainer trains on it
    if (bin == kCpu) {
        const Result r = run_it(base_args() + Args{"-i", good, "-j", good});
        EXPECT_EQ(r.code, 0) << r.cmd << "\n" << r.err;
    }
}

// The same tokens as llm.c's Llama 3 shard (uint32 ids, version 7) train to the same losses as the GPT-2
// shard (uint16); a run with one of each is refused. Chat shards: train_gpt refuses them (not wired yet), and
// train_gpt_cpu refuses a validation set without target tokens (test_sft_trainer trains on them).
TEST_P(Both, Llama3ShardsTrainAsGpt2Shards) {
    std::vector<uint16_t> t16(2000);
    for (size_t i = 0; i < t16.size(); i++) t16[i] = (uint16_t)((i * 7919) % 50257);
    const std::string narrow = shard_of("narrow.bin", t16), wide = dir + "/wide.bin";
    FILE* f = fopen(wide.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    int32_t h[256] = {DATALOADER_MAGIC_U32, DATALOADER_VERSION_U32, (int32_t)t16.size()};
    fwrite(h, sizeof h, 1, f);
    for (uint16_t t : t16) {
        const uint32_t w = t;
        fwrite(&w, 4, 1, f);
    }
    fclose(f);
    // train_gpt trains here only emulated (no GPU): its refusals below run the real binary
    const char* trainer = bin == kGpu && !gpu_present() ? kEmu : bin;
    if (!have_binary(trainer)) GTEST_SKIP() << trainer << " not built";
    const Args two = {"-x", "2", "-v", "1", "-m", "1"};
    const Result a = run_bin(trainer, base_args() + two + Args{"-i", narrow, "-j", narrow});
    const Result b = run_bin(trainer, base_args() + two + Args{"-i", wide, "-j", wide});
    ASSERT_EQ(a.code, 0) << a.cmd << "\n" << a.err;
    ASSERT_EQ(b.code, 0) << b.cmd << "\n" << b.err;
    EXPECT_EQ(step_losses(a.out).size(), 2u) << a.out;
    EXPECT_EQ(step_losses(a.out), step_losses(b.out));
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-i", wide, "-j", narrow}),
                           {wide, "Llama 3 (uint32 ids, version 7)", "one run reads one token width"}));
    // a chat shard: 4 rows of T=32, one conversation each
    const std::string chat = dir + "/chat.bin";
    f = fopen(chat.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    int32_t ch[256] = {DATALOADER_CHAT_MAGIC, DATALOADER_CHAT_VERSION, 2, 32, 4, 50257, 4, 4};
    fwrite(ch, sizeof ch, 1, f);
    fwrite(t16.data(), 2, 4 * 32, f);
    std::vector<uint8_t> flags(4 * 32, 0);
    for (int r = 0; r < 4; r++) flags[r * 32] = CHAT_START;
    fwrite(flags.data(), 1, flags.size(), f);
    fclose(f);
    const Result c = run_bin(trainer, base_args() + Args{"-i", chat, "-j", chat, "-v", "1"});
    EXPECT_TRUE(CleanError(c, {"no target tokens"})) << c.err;  // both trainers: its validation has none
}

// Shards of another tokenizer are refused before training, in one line naming both sides: a chat shard's
// vocabulary against the model's tokenizer (GPT-2's: gpt2_tokenizer.bin) or, with none known, the model's
// vocabulary; its special tokens' texts against the tokenizer's; train against val. GPT-2's uint16 shards on
// a vocabulary past 65536 ids train, with a warning. Both trainers, train_gpt emulated (the checks run before
// the device is used).
TEST_F(CliTest, ShardsOfAnotherTokenizerRefused) {
    // 4 rows of T=32, a conversation each, its last 16 tokens targets; specials: (id, text) in the header
    auto chat = [&](const std::string& name, int vocab, const std::vector<std::pair<int, std::string>>& sp) {
        const std::string path = dir + "/" + name;
        int32_t h[256] = {DATALOADER_CHAT_MAGIC, DATALOADER_CHAT_VERSION, 2, 32, 4, vocab, 4, 4, 4 * 15};
        h[CHAT_H_SPECIALS] = (int32_t)sp.size();
        char* text = (char*)h + CHAT_SPECIAL_TEXT_AT;
        for (size_t i = 0; i < sp.size(); i++, text += sp[i - 1].second.size() + 1) {
            h[CHAT_H_SPECIAL_IDS + i] = sp[i].first;
            memcpy(text, sp[i].second.c_str(), sp[i].second.size() + 1);
        }
        std::vector<uint16_t> ids(4 * 32);
        std::vector<uint8_t> flags(4 * 32, 0);
        for (int i = 0; i < 4 * 32; i++) {
            ids[i] = (uint16_t)((i * 7919) % 50256);
            flags[i] = i % 32 == 0 ? CHAT_START : i % 32 >= 17 ? CHAT_TARGET : 0;
        }
        FILE* f = fopen(path.c_str(), "wb");
        EXPECT_NE(f, nullptr);
        fwrite(h, sizeof h, 1, f);
        fwrite(ids.data(), 2, ids.size(), f);
        fwrite(flags.data(), 1, flags.size(), f);
        fclose(f);
        return path;
    };
    const std::string ok = chat("ok.bin", 50257, {{50256, "<|endoftext|>"}});
    const std::string wider = chat("wider.bin", 50261, {{50256, "<|endoftext|>"}});
    const std::string eot = chat("eot.bin", 50257, {{50256, "<|eot_id|>"}});
    const std::string none = chat("none.bin", 50257, {});  // no specials recorded (a shard from before)
    const std::string other = chat("other.bin", 50257, {{50256, "<|end|>"}});
    const std::string llama = "llama:L1:C64:NH4:KV2:I128:V128256:T32";
    int ran = 0;
    for (const char* trainer : {kCpu, kEmu}) {
        if (!have_binary(trainer)) continue;
        ran++;
        auto go = [&](const Args& more) { return run_bin(trainer, base_args() + more); };
        EXPECT_TRUE(CleanError(go({"-i", wider, "-j", wider}), {"data " + wider, "a tokenizer of 50261 ids",
                                                                "the model L2:C64:NH4:T32's tokenizer "
                                                                "gpt2_tokenizer.bin has 50257"}))
            << trainer;
        EXPECT_TRUE(
            CleanError(go({"-i", eot, "-j", eot}), {"data " + eot,
                                                    "token 50256 is '<|eot_id|>' in the tokenizer the "
                                                    "shards were made with, '<|endoftext|>' in the model"}))
            << trainer;
        EXPECT_TRUE(CleanError(go({"-i", ok, "-j", other}), {ok, other, "record different special tokens"}))
            << trainer;
        EXPECT_TRUE(
            CleanError(go({"-i", ok, "-j", wider}), {ok, wider, "a vocabulary of 50257 ids", "with 50261"}))
            << trainer;
        EXPECT_TRUE(CleanError(
            go({"-e", llama, "-i", ok, "-j", ok}),
            {"data " + ok, "a tokenizer of 50257 ids", "the model " + llama, "has a vocabulary of 128256"}))
            << trainer;
        // a model file in the run's own fresh -o: the data_tokenizer.bin the run writes there first is no
        // record of the model's run, which vouches for its shards on a resume (a review: it skipped the
        // check)
        const std::string own = dir + "/own" + std::to_string(ran);
        ASSERT_EQ(mkdir(own.c_str(), 0755), 0);
        LlamaConfig wide;
        char err[4352];
        ASSERT_EQ(parse_llama_spec("llama:L1:C64:NH4:KV2:I128:V60000:T32", &wide, err, sizeof err), 1) << err;
        std::vector<float> w((size_t)llama_layout(&wide).total);
        llama_init_params(&wide, w.data(), 1);
        ASSERT_TRUE(llama_save_params((own + "/m.bin").c_str(), &wide, w.data(), err, sizeof err)) << err;
        EXPECT_TRUE(CleanError(go({"-e", own + "/m.bin", "-o", own, "-i", ok, "-j", ok}),
                               {"a tokenizer of 50257 ids", "has a vocabulary of 60000"}))
            << trainer;
        // a model file of another run whose record (data_tokenizer.bin) is of other shards' tokenizer: its
        // ids are not these shards' (the record was read only to vouch, and the check passed on the size
        // rule)
        const std::string other_run = dir + "/other_run" + std::to_string(ran);
        ASSERT_EQ(mkdir(other_run.c_str(), 0755), 0);
        ASSERT_EQ(system(("head -c 1024 " + ok + " > " + other_run + "/data_tokenizer.bin").c_str()), 0);
        ASSERT_EQ(system(("cp " + own + "/m.bin " + other_run + "/m.bin").c_str()), 0);
        EXPECT_TRUE(CleanError(go({"-e", other_run + "/m.bin", "-i", eot, "-j", eot}),
                               {"the run that made -e " + other_run + "/m.bin trained on"}))
            << trainer;
        Result a = go({"-i", ok, "-j", none});  // none recorded: nothing to compare
        EXPECT_EQ(a.code, 0) << trainer << "\n" << a.err;
        EXPECT_EQ(a.code, 0) << trainer << "\n" << a.err;
        // the tinyshakespeare GPT-2 shards for a Llama 3 vocabulary: refused, naming both
        EXPECT_TRUE(
            CleanError(go({"-e", llama}),
                       {"data " + std::string(kTrain) +
                            " holds uint16 ids and records no vocabulary (GPT-2's shards?), the model " +
                            llama + " has 128256 ids",
                        ":V50257"}))
            << trainer;
    }
    if (!ran) GTEST_SKIP() << "neither trainer is built";
}

// The tokenizer.json the trainers check chat shards against (and decode samples with): beside -e, whether a
// Hugging Face folder, its .safetensors file or its index; none for a model file of ours or a spec.
TEST_F(CliTest, TokenizerOfEveryFormOfAHuggingFaceModel) {
    const std::string hf = dir + "/hf";
    ASSERT_EQ(mkdir(hf.c_str(), 0755), 0);
    for (const char* name :
         {"config.json", "tokenizer.json", "model.safetensors", "model.safetensors.index.json"})
        fclose(fopen((hf + "/" + name).c_str(), "w"));
    for (const std::string& e : {hf, hf + "/model.safetensors", hf + "/model.safetensors.index.json"})
        EXPECT_EQ(hf_tokenizer_json_of(e.c_str()), hf + "/tokenizer.json") << e;
    fclose(fopen((hf + "/model_00000001.bin").c_str(), "w"));
    EXPECT_EQ(hf_tokenizer_json_of((hf + "/model_00000001.bin").c_str()), "");
    EXPECT_EQ(hf_tokenizer_json_of("llama:L1:C64:NH4:I128"), "");
    unlink((hf + "/tokenizer.json").c_str());
    EXPECT_EQ(hf_tokenizer_json_of(hf.c_str()), "");
}

// ----------------------------------------------------------------------------
// Resources and what only one trainer does

TEST_P(Both, HostRamTooSmall) {
    if (host_available_bytes() < 0)
        GTEST_SKIP() << "no MemAvailable in /proc/meminfo: the trainers cannot check";
    if (host_available_bytes() > ((int64_t)4 << 40)) GTEST_SKIP() << "more than 4 TiB of RAM: 175b fits";
    const std::regex amounts(
        "needs [0-9]+\\.[0-9]+ GiB .*[0-9]+\\.[0-9]+ GiB available");  // (train_gpt: "... -M")
    const Result r = run_it(base_args() + Args{"-e", "175b"});
    EXPECT_TRUE(CleanError(r, {"host RAM too small"}));
    EXPECT_TRUE(std::regex_search(r.err, amounts)) << r.err;
    // absurd activation sizes (int64 overflow territory) are refused the same way by the CPU trainer
    if (bin == kCpu) {
        const Result r2 =
            run_it(base_args() + Args{"-e", "L2:C64:NH4:T1048576", "-t", "1048576", "-b", "1048576"});
        EXPECT_TRUE(CleanError(r2, {"host RAM too small"}));
    }
}

// OMP_NUM_THREADS past what libgomp can start (a hostile trial: 100000 crashed train_gpt_cpu in
// GOMP_parallel; 5000 took 4.9 GiB): one line, before anything runs. A list's first level counts.
TEST_F(CliTest, TooManyOpenMpThreadsAreOneLine) {
    for (const char* n : {"100000", "5000,2"}) {
        setenv("OMP_NUM_THREADS", n, 1);
        const Result r = run_bin(kCpu, base_args());
        unsetenv("OMP_NUM_THREADS");
        EXPECT_TRUE(CleanError(r, {std::string("OMP_NUM_THREADS=") + n + ": at most 4096 threads"}));
    }
}

TEST_F(CliTest, TrainGptWithoutGpu) {
    if (!have_binary(kGpu))
        GTEST_SKIP() << kGpu << " not built (train_gpt is built only where nvcc is present)";
    if (gpu_present()) GTEST_SKIP() << "a GPU is present: valid input would train";
    const Result r = run_bin(kGpu, base_args());
    EXPECT_TRUE(CleanError(r, {"no CUDA device found", "train_gpt_cpu"}));
}

TEST_F(CliTest, TrainGptPlanOverflow) {
    if (!have_binary(kGpu))
        GTEST_SKIP() << kGpu << " not built (train_gpt is built only where nvcc is present)";
    // B*NH*T*T attention scores of 2^16 * 96 * 2^40 elements: the byte counts of the memory plan would wrap
    // negative and pass the fit check; refused before the data, the RAM check or the device
    const Args huge = {"-e", "L1:C768:NH96:T1048576", "-b", "65536", "-t", "1048576"};
    EXPECT_TRUE(CleanError(run_bin(kGpu, huge), {"config too large", "attention scores", "overflows int64"}));
    EXPECT_TRUE(CleanError(run_bin(kGpu, huge + Args{"-B", "1"}), {"config too large", "overflows int64"}));
    // so many parameters that 12 bytes each overflow
    EXPECT_TRUE(CleanError(run_bin(kGpu, {"-e", "L100000:C1000000:NH1000", "-b", "1", "-t", "64", "-B", "1"}),
                           {"config too large", "parameters", "overflows int64"}));
}

TEST_P(Both, LongOutputDir) {
    // longer than any file name under it may be: refused up front, not after training with a truncated name
    const std::string long_dir = dir + "/" + std::string(4050, 'a');
    EXPECT_TRUE(CleanError(run_it(base_args() + Args{"-o", long_dir}), {"flag -o", "too long", "4000"}));
}

TEST_F(CliTest, CpuSavesUnderLongOutputDir) {
    if (!have_binary(kCpu)) GTEST_SKIP() << kCpu << " not built";
    // ~3,800 characters in 250-character components (NAME_MAX is 255): the model file's name must not be cut
    // at 2,048 characters (it was)
    std::string out = dir;
    while (out.size() + 251 < 3900) out += "/" + std::string(250, 'd');
    ASSERT_GT(out.size(), 3600u);
    const Result r = run_bin(kCpu, base_args() + Args{"-o", out, "-n", "1"});
    ASSERT_EQ(r.code, 0) << r.err;
    const std::string model = out + "/model_00000001.bin";
    EXPECT_TRUE(has(r.out, "saved checkpoint step 1 to " + out + "\n"))
        << r.out.substr(r.out.size() > 300 ? r.out.size() - 300 : 0);
    GPTConfig c;
    char err[4352];
    EXPECT_TRUE(gpt_read_header(model.c_str(), &c, err, sizeof err)) << err;
}

TEST_F(CliTest, CpuOnlyErrors) {
    if (!have_binary(kCpu)) GTEST_SKIP() << kCpu << " not built";
    // token ids of the GPT-2 shards are outside a 100-token vocabulary: refused, not read out of bounds
    EXPECT_TRUE(CleanError(run_bin(kCpu, base_args() + Args{"-e", "L2:C64:NH4:T32:V100"}),
                           {"train data: shard", "outside the model's vocabulary of 100"}));
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
    const Result r = run_bin(kCpu, {"-e", "L2:C64:NH4:T32", "-b", "4", "-t", "32", "-x", "3", "-v", "3", "-m",
                                    "2", "-g", "8", "-o", out, "-n", "3"});
    ASSERT_EQ(r.code, 0) << r.cmd << "\nsignal " << r.signal << "\n" << r.err;
    EXPECT_TRUE(error_lines(r.err).empty()) << r.err;
    EXPECT_NE(r.out.find("step    1/3"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("step    3/3"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("val loss"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("generating:"), std::string::npos) << r.out;
    // progress: the time since the first step and an ETA end each step line; the peak memory ends the run
    EXPECT_TRUE(std::regex_search(r.out, std::regex("step    1/3 [^\n]* \\| [0-9.]+m?s, eta [0-9.]+m?s\n")))
        << r.out;
    EXPECT_TRUE(std::regex_search(r.out, std::regex("step    3/3 [^\n]*, eta 0ms\n"))) << r.out;
    EXPECT_TRUE(std::regex_search(r.out, std::regex("peak host memory: 0\\.[0-9]+ GiB resident\n"))) << r.out;

    const std::string log = slurp(out + "/main.log");
    for (const char* line : {"s:0 tel:", "s:1 trl:", "s:3 trl:", "s:3 tel:"})
        EXPECT_NE(log.find(line), std::string::npos) << line << " not in main.log:\n" << log;
    // every logged loss is a finite number near ln(50257) = 10.8 for this tiny, barely trained model; train
    // lines also carry the step's lr and gradient norm, as llm.c's do, and the stdout step line has
    // the same values
    std::stringstream ss(log);
    std::string line;
    int n = 0;
    const std::regex train_line("s:([0-9]+) trl:([0-9.]+) lr:([0-9.e+-]+) norm:([0-9.]+)"),
        val_line("s:[0-9]+ tel:([0-9.]+)");
    while (std::getline(ss, line)) {
        std::smatch m;
        const bool train = std::regex_match(line, m, train_line);
        ASSERT_TRUE(train || std::regex_match(line, m, val_line)) << line;
        const double loss = atof(m[train ? 2 : 1].str().c_str());
        EXPECT_TRUE(isfinite(loss) && loss > 5.0 && loss < 12.0) << line;
        if (train) {
            char step_line[160];
            snprintf(step_line, sizeof step_line, "step %4d/3 | loss %.6f | norm %.4f | lr %.2e |",
                     atoi(m[1].str().c_str()), loss, atof(m[4].str().c_str()), atof(m[3].str().c_str()));
            EXPECT_TRUE(has(r.out, step_line)) << step_line << " not in:\n" << r.out;
        }
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

// -nk 2 -nm 2 over 4 steps with a model file every step: the two newest (3, 4) and the major ones (2, 4) stay
TEST_F(CliTest, CpuKeepsTheNewestCheckpoints) {
    if (!have_binary(kCpu)) GTEST_SKIP() << kCpu << " not built";
    const std::string out = dir + "/keep";
    const Result r =
        run_bin(kCpu, base_args() + Args{"-x", "4", "-o", out, "-n", "1", "-nk", "2", "-nm", "2"});
    ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.err;
    EXPECT_NE(r.out.find("removed checkpoint step 1 (-nk 2)"), std::string::npos) << r.out;
    for (int s = 1; s <= 4; s++) {
        char name[64];
        snprintf(name, sizeof name, "/model_%08d.bin", s);
        EXPECT_EQ(access((out + name).c_str(), F_OK) == 0, s != 1) << name;
    }
    // without checkpoints there is nothing to keep: refused, so a user never believes -nk is at work
    EXPECT_TRUE(CleanError(run_bin(kCpu, base_args() + Args{"-nk", "2"}), {"-nk and -nm", "-n"}));
}

// A checkpoint that cannot be written (here: no file may exceed 1 MB, the model file is 13 MB) ends the run
// with one error line that says why, leaves no half-written file and no marker behind, and an earlier
// checkpoint stays whole: train_gpt resumes from it. The trainers are the CPU one and, where built,
// the emulated train_gpt.
TEST_F(CliTest, FullDiskIsACleanErrorAndLosesNoCheckpoint) {
    const int64_t limit = 1 << 20;
    {
        const std::string out = dir + "/full_cpu";
        const Result r = run_bin(kCpu, base_args() + Args{"-x", "2", "-n", "1", "-o", out}, limit);
        EXPECT_FALSE(r.timed_out || r.signal) << r.cmd << "\nsignal " << r.signal << "\n" << r.err;
        EXPECT_NE(r.code, 0) << r.cmd;
        const std::vector<std::string> lines = error_lines(r.err);
        ASSERT_EQ(lines.size(), 1u) << r.err;
        EXPECT_EQ(lines[0].rfind("error: failed writing model file", 0), 0u) << lines[0];
        EXPECT_NE(lines[0].find("model_00000001.bin: File too large"), std::string::npos) << lines[0];
        EXPECT_EQ(names_in(out), (std::vector<std::string>{"LOCK", "main.log"}))
            << "no partial model file is left";
        EXPECT_EQ(slurp(out + "/main.log").rfind("s:1 trl:", 0), 0u)
            << "the step before the failure is logged";
    }
    if (!have_binary(kEmu)) GTEST_SKIP() << kEmu << " not built";
    const std::string out = dir + "/full_emu";
    const Args run = {
        "-e", "L2:C64:NH2:T32", "-b", "4", "-t", "32", "-v", "0", "-g", "0", "-n", "1", "-o", out,
        "-i", kTrain,           "-j", kVal};
    const Result a = run_bin(kEmu, run + Args{"-x", "1"});
    ASSERT_EQ(a.code, 0) << a.cmd << "\n" << a.err << a.out;
    const std::vector<std::string> saved = names_in(out);
    const std::string model1 = slurp(out + "/model_00000001.bin"),
                      state1 = slurp(out + "/state_00000001.bin");
    ASSERT_GT(model1.size(), (size_t)limit);

    // the resumed run trains step 2 and cannot save it
    const Result b = run_bin(kEmu, run + Args{"-x", "2", "-y", "1"}, limit);
    EXPECT_FALSE(b.timed_out || b.signal) << b.cmd << "\nsignal " << b.signal << "\n" << b.err;
    EXPECT_NE(b.code, 0) << b.cmd;
    EXPECT_NE(b.out.find("step    2/2"), std::string::npos) << b.out;
    const std::vector<std::string> lines = error_lines(b.err);
    ASSERT_EQ(lines.size(), 1u) << b.err;
    EXPECT_NE(lines[0].find("model_00000002.bin: File too large"), std::string::npos) << lines[0];
    EXPECT_EQ(names_in(out), saved) << "step 2 left no file, step 1's checkpoint is all there";
    EXPECT_TRUE(slurp(out + "/model_00000001.bin") == model1 && slurp(out + "/state_00000001.bin") == state1);

    // with room again, the run resumes from step 1 and saves step 2
    const Result c = run_bin(kEmu, run + Args{"-x", "2", "-y", "1"});
    ASSERT_EQ(c.code, 0) << c.cmd << "\n" << c.err << c.out;
    EXPECT_NE(c.out.find("resumed from"), std::string::npos) << c.out;
    EXPECT_NE(c.out.find("saved checkpoint step 2"), std::string::npos) << c.out;
}

// Issue 33: -B draws its tokens below the model's vocabulary (it drew them below 50257 whatever the model:
// out-of-bounds embedding reads, an illegal memory access in the emulator).
TEST_F(CliTest, BenchmarkTokensAreBelowTheVocabulary) {
    if (!have_binary(kEmu)) GTEST_SKIP() << kEmu << " not built";
    const Result r =
        run_bin(kEmu, {"-e", "L2:C32:NH1:T16:V128", "-b", "2", "-t", "16", "-B", "2", "-W", "1"});
    EXPECT_EQ(r.code, 0) << r.cmd << "\n" << r.err << r.out;
    EXPECT_NE(r.out.find("RESULT {"), std::string::npos) << r.out;
}

// -P 1 creates nothing: with -sd naming a missing directory it measures the free space of its parent,
// where a run would create it (it made the directory before). A parent not there is another machine's disk.
TEST_F(CliTest, MemoryPlanCreatesNoSsdDirectory) {
    for (const char* bin : {kGpu, kEmu}) {
        if (!have_binary(bin)) continue;
        const std::string sd = dir + "/new/";
        const Result r = run_bin(bin, Args{"-e", "d12", "-b", "4", "-t", "64", "-P", "1", "-sd", sd});
        EXPECT_EQ(r.code, 0) << r.cmd << "\n" << r.err << r.out;
        EXPECT_TRUE(has(r.out, "GiB free in -sd DIR")) << r.out;
        EXPECT_FALSE(file_exists(dir + "/new")) << bin << " -sd " << sd;
        // what a run could not use, refused as the run refuses it (the plan said the disk had room: a
        // hostile trial): a file, a directory under one that does not exist
        FILE* f = fopen((dir + "/file").c_str(), "w");
        ASSERT_NE(f, nullptr);
        fclose(f);
        const Args plan = {"-e", "d12", "-b", "4", "-t", "64", "-P", "1", "-sd"};
        EXPECT_TRUE(CleanError(run_bin(bin, plan + Args{dir + "/file"}), {"/file is not a directory"}));
        // a folder not here (/mnt/nvme/state on a laptop): planned as another machine's disk, with a warning
        // and its free space not checked (it refused the docs' own example); a run here refuses it
        const Result elsewhere = run_bin(bin, plan + Args{dir + "/new2/sub"});
        EXPECT_EQ(elsewhere.code, 0) << elsewhere.err << elsewhere.out;
        EXPECT_TRUE(has(elsewhere.err,
                        "warning: -sd " + dir + "/new2/sub: cannot create it: " + dir +
                            "/new2 does not exist (a run creates DIR, not its parents): planned "
                            "as another machine's disk, its free space not checked (a run here refuses "
                            "it)"))
            << elsewhere.err;
        EXPECT_TRUE(std::regex_search(
            elsewhere.out, std::regex("disk space .* unknown: -sd DIR's folder is not here +not checked\n")))
            << elsewhere.out;
        EXPECT_FALSE(has(elsewhere.out, "GiB free in -sd DIR")) << elsewhere.out;
        EXPECT_FALSE(file_exists(dir + "/new2"));
        if (bin == kEmu) {
            EXPECT_TRUE(CleanError(run_bin(bin, Args{"-e", "L2:C32:NH1:T16:V128", "-b", "2", "-t", "16", "-x",
                                                     "1", "-sd", dir + "/new2/sub"}),
                                   {"/new2 does not exist", "not its parents"}));
        }
        EXPECT_FALSE(file_exists(dir + "/new2"));
    }
}

// Issue 33: -e d2 with a directory d2 where the trainer runs trained the spec without a word; it still does
// (a path has a '/': ./d2), and says so in one warning line.
TEST_F(CliTest, ASpecThatIsAlsoAPathIsSaid) {
    char cwd[4096];
    ASSERT_NE(getcwd(cwd, sizeof cwd), nullptr);
    const std::string root = cwd;
    ASSERT_EQ(mkdir((dir + "/d2").c_str(), 0755), 0);
    ASSERT_EQ(chdir(dir.c_str()), 0);
    const Result r =
        run_bin((root + "/train_gpt_cpu").c_str(),
                base_args() + Args{"-e", "d2", "-i", root + "/" + kTrain, "-j", root + "/" + kVal});
    ASSERT_EQ(chdir(root.c_str()), 0);
    EXPECT_EQ(r.code, 0) << r.cmd << "\n" << r.err;
    EXPECT_TRUE(
        has(r.err, "warning: -e d2 is read as a model spec, not as the directory d2 here: write ./d2"))
        << r.err;
}

// -P 1 prints the memory plan and exits, with no GPU and no data (-i names no file here): the 175B preset at
// B=8, T=1024 needs 2600.45 GiB of host memory and 54.69 GiB of GPU memory (-P 1's figures; test_gpu's
// plan test checks them against the allocations), and at half the depth exactly the checkpoints less.
// -M 3000 -V 79 hold it: exit 0. Its verdicts are the table's rows (issue 41).
TEST_F(CliTest, MemoryPlanNeedsNoGpu) {
    auto plan = [&](const char* bin, const char* model, double* host, double* gpu, double* ckpt) {
        const Result r = run_bin(bin, Args{"-e", model, "-b", "8", "-t", "1024", "-i", dir + "/none_*.bin",
                                           "-P", "1", "-M", "3000", "-V", "79", "-R", "0", "-K", "0"});
        EXPECT_EQ(r.code, 0) << r.cmd << "\n" << r.err << r.out;
        std::smatch m;
        const std::regex re(
            "host +([0-9.]+) GiB[^\n]*\nGPU +([0-9.]+) GiB: layer-input checkpoints ([0-9.]+);");
        ASSERT_TRUE(std::regex_search(r.out, m, re)) << r.out;
        *host = atof(m[1].str().c_str());
        *gpu = atof(m[2].str().c_str());
        *ckpt = atof(m[3].str().c_str());
    };
    for (const char* bin : {kGpu, kEmu}) {
        if (!have_binary(bin)) continue;
        double host, gpu, ckpt, host2, gpu2, ckpt2;
        plan(bin, "175b", &host, &gpu, &ckpt);
        EXPECT_EQ(host, 2600.45) << bin;
        EXPECT_EQ(gpu, 54.69) << bin;
        plan(bin, "L48:C12288:NH96", &host2, &gpu2, &ckpt2);
        EXPECT_NEAR(gpu - gpu2, ckpt - ckpt2, 0.011)
            << bin << ": GPU memory grows with depth only by the checkpoints";
        EXPECT_NEAR(ckpt, 2 * ckpt2 - 0.19, 0.011) << bin << ": (L + 1) layer inputs of 0.19 GiB each";
        // -M: the host memory to count on instead of MemAvailable (a VM whose memory grows as it is used)
        const Result big = run_bin(bin, Args{"-e", "175b", "-b", "8", "-t", "1024", "-P", "1", "-M", "3000"});
        auto row = [](const Result& r, const std::string& re) {
            return std::regex_search(r.out, std::regex(re));
        };
        EXPECT_TRUE(row(big, "\nhost RAM +2600.45 GiB +3000.00 GiB given by -M +fits\n")) << bin << "\n"
                                                                                          << big.out;
        const Result tight =
            run_bin(bin, Args{"-e", "175b", "-b", "8", "-t", "1024", "-P", "1", "-M", "2600", "-V", "79"});
        EXPECT_TRUE(row(tight, "\nhost RAM +2600.45 GiB +2600.00 GiB given by -M +does NOT fit\n"))
            << bin << "\n"
            << tight.out;
        EXPECT_EQ(tight.code, 2) << bin << ": the advice (-sd DIR) fits\n" << tight.out;
        // a verdict between two sizes that round alike shows the decimals that tell them apart
        const Result close =
            run_bin(bin, Args{"-e", "175b", "-b", "8", "-t", "1024", "-P", "1", "-M", "2600.45", "-V", "79"});
        std::smatch cm;
        ASSERT_TRUE(std::regex_search(
            close.out, cm,
            std::regex(
                "\nhost RAM +(2600\\.45[0-9]+) GiB +(2600\\.45[0-9]+) GiB given by -M +does NOT fit\n")))
            << bin << "\n"
            << close.out;
        EXPECT_NE(cm[1].str(), cm[2].str()) << close.out;
        EXPECT_TRUE(CleanError(run_bin(bin, base_args() + Args{"-M", "0.01"}),
                               {"host RAM too small", "needs 44.54 MiB", "10.24 MiB given by -M"}))
            << bin;
        // -V: -R -1 / -K -1 placed for that much GPU memory, as on such a GPU (79 GiB: an H100 80GB), and its
        // fit check. 5B at 8K tokens: 3.38 GiB per resident layer; 20 of 24 leave 79 - 77.28 - 0.25 < the
        // 1 GiB margin
        const Result h100 =
            run_bin(bin, Args{"-e", "5b", "-b", "8", "-t", "1024", "-R", "-1", "-V", "79", "-P", "1"});
        EXPECT_TRUE(has(h100.out, "GPU      77.28 GiB:")) << bin << "\n" << h100.out;
        EXPECT_TRUE(has(h100.out, "; 20 resident layers 67.52;")) << bin << "\n" << h100.out;
        EXPECT_TRUE(row(h100, "\nGPU memory +77.28 GiB +79.00 GiB given by -V +fits\n")) << bin << "\n"
                                                                                         << h100.out;
        const Result h200 = run_bin(
            bin, Args{"-e", "5b", "-b", "8", "-t", "1024", "-R", "-1", "-K", "-1", "-V", "130", "-P", "1"});
        EXPECT_TRUE(has(h200.out, "; 24 resident layers 81.02; 24 layers' kept activations 13.52;"))
            << bin << "\n"
            << h200.out;
        const Result too_big = run_bin(
            bin, Args{"-e", "70b", "-b", "8", "-t", "1024", "-R", "10", "-V", "79", "-P", "1", "-M", "4096"});
        EXPECT_TRUE(row(too_big, "\nGPU memory +166.00 GiB +79.00 GiB given by -V +does NOT fit\n"))
            << bin << "\n"
            << too_big.out;
        EXPECT_TRUE(row(too_big, "\n  -R 3 +GPU 71.48 GiB, host 1037.62 GiB; step >= ")) << bin << "\n"
                                                                                         << too_big.out;
        // without -V: placed on the GPU's free memory where there is one (the emulator's 8 GiB device: d12's
        // 12 layers), as a run places them; none without a GPU
        const Result unplaced =
            run_bin(bin, Args{"-e", "d12", "-b", "8", "-t", "1024", "-R", "-1", "-P", "1"});
        if (has(unplaced.out, "no GPU here")) {
            EXPECT_TRUE(has(unplaced.out, "; 0 resident layers 0.00;")) << bin << "\n" << unplaced.out;
            EXPECT_TRUE(has(unplaced.out, "-V GiB plans them for that much")) << bin << "\n" << unplaced.out;
        } else {
            EXPECT_TRUE(has(unplaced.out, "; 12 resident layers")) << bin << "\n" << unplaced.out;
            EXPECT_FALSE(has(unplaced.out, "-V GiB plans them")) << bin << "\n" << unplaced.out;
        }
        // it writes nothing, not even to an -o it is given
        const Result r = run_bin(bin, Args{"-e", "d12", "-P", "1", "-o", dir + "/plan_out", "-n", "1"});
        EXPECT_EQ(r.code, 0) << r.cmd << "\n" << r.err;
        EXPECT_NE(access((dir + "/plan_out").c_str(), F_OK), 0) << bin;
    }
}

// Issue 41: -P 1's exit status tells a plan that fits (0) from one the advice's flags make fit (2) and from
// one nothing tried fits (3): 70b's layer inputs alone (10.9 GiB at 8K tokens) exceed -V 2 at any -b. 5B with
// -R 4 -K 8 in 20 GiB: the shortest step, at -b 1 (the same 32K tokens a step), gives its room to -R layers
// (the CPU AdamW's 0.90 s does not fit in the 0.58 s forward: each -R layer shortens the wait).
// Without -V the GPU verdict is against the GPU here (the emulator's 8 GiB device).
TEST_F(CliTest, MemoryPlanExitStatusSaysWhatFits) {
    if (!have_binary(kEmu)) GTEST_SKIP() << kEmu << " not built";
    const Result fits = run_bin(kEmu, Args{"-e", "d12", "-b", "4", "-t", "64", "-P", "1", "-M", "64"});
    EXPECT_EQ(fits.code, 0) << fits.cmd << "\n" << fits.err << fits.out;
    EXPECT_TRUE(std::regex_search(
        fits.out, std::regex("\nGPU memory +[0-9.]+ GiB +8.00 GiB free on fake CUDA[^\n]* fits\n")))
        << fits.out;
    EXPECT_FALSE(has(fits.out, "advice:")) << fits.out;
    const Result none =
        run_bin(kEmu, Args{"-e", "70b", "-b", "8", "-t", "1024", "-P", "1", "-M", "4096", "-V", "2"});
    EXPECT_EQ(none.code, 3) << none.cmd << "\n" << none.err << none.out;
    EXPECT_TRUE(has(none.out, "advice: nothing fits")) << none.out;
    EXPECT_TRUE(has(none.out, "the least any of them needs: GPU 27.57 GiB (2.00 here)")) << none.out;
    // where fewer tokens a step fit, the most that do (the layer inputs grow with -d, nothing else): Llama 3
    // 70B at 1M tokens on an H200's 139 GiB and 125 GiB of RAM fits at 23 x 4096 with the SSD tier's -sw 1
    // (at 24 x 4096 the GPU needs 139.88 GiB)
    const Result most = run_bin(kEmu, Args{"-e", "llama3-70b", "-b", "1", "-t", "4096", "-d", "1048576", "-R",
                                           "0", "-K", "0", "-P", "1", "-M", "125", "-V", "139"});
    EXPECT_EQ(most.code, 3) << most.cmd << "\n" << most.err << most.out;
    EXPECT_TRUE(has(most.out,
                    "  the most that fits: -d 94208 (23 micro-batches of 1 x 4096) with -sd DIR -sw 1: "
                    "GPU 134.57 GiB, host 50.95 GiB; step >= "))
        << most.out;
    EXPECT_FALSE(has(none.out, "the most that fits")) << "70b's layer inputs at one micro-batch exceed -V 2\n"
                                                      << none.out;
    const Result advised = run_bin(kEmu, Args{"-e", "5b", "-b", "8", "-t", "1024", "-d", "32768", "-R", "4",
                                              "-K", "8", "-V", "20", "-M", "4096", "-P", "1"});
    EXPECT_EQ(advised.code, 2) << advised.cmd << "\n" << advised.err << advised.out;
    EXPECT_TRUE(has(advised.out,
                    "advice: it does not fit the GPU; these do, the shortest step first:\n"
                    "  -b 1 -d 32768 -R 2 -K 0  GPU 19.35 GiB"))
        << advised.out;
    EXPECT_TRUE(
        has(run_bin(kEmu, Args{"-h"}).out, "Exit status 0: fits, 2: does not fit but the advice does"));
    EXPECT_TRUE(CleanError(run_bin(kEmu, Args{"-e", "d12", "-P", "1", "-sr", "fast"}), {"-sr", "fast"}));
    // -sr and -W where they did nothing (a hostile trial): a run measures its own disk; -W needs -B
    EXPECT_TRUE(CleanError(run_bin(kEmu, Args{"-e", "d12", "-sd", dir + "/sr", "-sr", "1"}),
                           {"a run measures its own disk: drop -sr, or add -P 1"}));
    EXPECT_TRUE(
        CleanError(run_bin(kEmu, Args{"-e", "d12", "-W", "3"}), {"-W sets the benchmark's warm-up steps"}));
    EXPECT_TRUE(
        CleanError(run_bin(kEmu, Args{"-e", "d12", "-P", "1", "-sr", "6,0"}), {"-sr", "out of range"}));
    EXPECT_TRUE(CleanError(run_bin(kEmu, Args{"-e", "d12", "-P", "1", "-sd", dir + "/sd", "-sb", "lots"}),
                           {"-sb", "lots"}));
    EXPECT_TRUE(CleanError(run_bin(kEmu, Args{"-e", "d12", "-P", "1", "-sd", dir + "/sd", "-sb", "-1"}),
                           {"-sb", "out of range"}));
}

// Issue 40 item 5: -R auto / -K auto, the default, place layers by -P 1's model of the step, in which the CPU
// AdamW of the streamed layers runs during the next forward and the GPU waits for what does not fit there. At
// 32K tokens a step on 79 GiB (an H100 80GB) its choices are the placements the GPU windows found fastest or
// the timeline advised (dev/bench/gpu_ledger.md): 1.3B -R 8 -K 24 (48.2K tok/s, the fastest of those run), 5B
// -R 10 -K 12 (14.3K, the fastest run), Llama 3 8B's shape -R 12 (the forward waited 0.56 s for a 41.9 ms a
// layer AdamW; the timeline advised -R 12). A tiny model is left alone (a gain under 10 ms a step); given
// flags are kept; -sd places no -R layer.
TEST_F(CliTest, AutoPlacementChoosesWhatTheWindowsMeasuredBest) {
    if (!have_binary(kEmu)) GTEST_SKIP() << kEmu << " not built";
    auto placed = [&](const Args& a, int* R, int* K) {
        const Result r = run_bin(kEmu, a + Args{"-V", "79", "-M", "4096", "-P", "1"});
        EXPECT_TRUE(plan_printed(r.code, r.out)) << r.cmd << "\n" << r.err << r.out;
        *R = *K = -1;
        std::smatch m;
        if (!std::regex_search(r.out, m,
                               std::regex("layers placed by the plan \\(-R (auto|given), -K (auto|given)\\): "
                                          "-R ([0-9]+) -K ([0-9]+), a step of")))
            return std::string();
        *R = atoi(m[3].str().c_str());
        *K = atoi(m[4].str().c_str());
        return m[1].str() + "," + m[2].str() + "\n" + r.out;
    };
    int R = -1, K = -1;
    std::string out = placed(Args{"-e", "1.3b", "-b", "8", "-t", "1024", "-d", "32768"}, &R, &K);
    EXPECT_TRUE(R >= 6 && R <= 12 && K == 24) << "-R " << R << " -K " << K << out;
    out = placed(Args{"-e", "5b", "-b", "8", "-t", "1024", "-d", "32768"}, &R, &K);
    EXPECT_TRUE(R >= 8 && R <= 12 && K >= 10 && K <= 14) << "-R " << R << " -K " << K << out;
    out = placed(Args{"-e", "llama3-8b", "-b", "4", "-t", "2048", "-d", "32768"}, &R, &K);
    EXPECT_TRUE(R >= 10 && R <= 14) << "-R " << R << " -K " << K << out;
    EXPECT_EQ(out.substr(0, 9), "auto,auto") << out;
    // given flags stay; the other is placed beside them
    out = placed(Args{"-e", "llama3-8b", "-b", "4", "-t", "2048", "-d", "32768", "-R", "4"}, &R, &K);
    EXPECT_TRUE(R == 4 && K > 0 && out.substr(0, 10) == "given,auto") << "-R " << R << " -K " << K << out;
    // -sd: no -R layer (the store holds the streamed layers); a disk fast enough not to bound the step
    out = placed(
        Args{"-e", "llama3-8b", "-b", "4", "-t", "2048", "-d", "32768", "-sd", dir + "/sd", "-sr", "500"}, &R,
        &K);
    EXPECT_TRUE(R == 0 && K > 0) << "-R " << R << " -K " << K << out;
    // none: no line, and the GPU's wait is the AdamW's time less the forward's
    const Result none = run_bin(kEmu, Args{"-e", "llama3-8b", "-b", "4", "-t", "2048", "-d", "32768", "-R",
                                           "0", "-K", "0", "-V", "79", "-M", "4096", "-P", "1"});
    EXPECT_FALSE(has(none.out, "layers placed by the plan")) << none.out;
    std::smatch m;
    ASSERT_TRUE(
        std::regex_search(none.out, m,
                          std::regex("\nCPU AdamW +[0-9.]+ GB +[^\n]* ([0-9.]+) s\n"
                                     "GPU waits +during the next forward \\(([0-9.]+) s\\) +([0-9.]+) s\n")))
        << none.out;
    const double adam = atof(m[1].str().c_str()), fwd = atof(m[2].str().c_str()),
                 wait = atof(m[3].str().c_str());
    EXPECT_NEAR(wait, adam - fwd, 0.011) << none.out;
    EXPECT_GT(wait, 0.3) << "8B at 32K tokens: the forward waited 0.56 s on the H100\n" << none.out;
    // a tiny model: the model's gain is microseconds, nothing placed; a run says what it placed
    const Result tiny = run_bin(kEmu, base_args());
    EXPECT_EQ(tiny.code, 0) << tiny.cmd << "\n" << tiny.err;
    EXPECT_FALSE(has(tiny.out, "layers placed by the plan")) << tiny.out;
    EXPECT_TRUE(has(tiny.out, "0 of 2 (all streamed)")) << tiny.out;
    // 57M parameters over 32 tokens a step: the AdamW's 12.7 ms has no forward to hide in; both layers go
    // to the GPU (synthetic tokens, -B 1)
    const Result wide = run_bin(
        kEmu, Args{"-e", "L2:C1536:NH12:T32:V512", "-b", "1", "-t", "32", "-B", "1", "-W", "0", "-g", "0"});
    EXPECT_EQ(wide.code, 0) << wide.cmd << "\n" << wide.err;
    EXPECT_TRUE(has(wide.out, "layers placed by the plan (-R auto, -K auto): -R 2 -K 2,")) << wide.out;
    EXPECT_TRUE(has(wide.out, "| GPU-resident layers    | 2 of 2")) << wide.out;
    EXPECT_TRUE(has(wide.out, "\"resident_layers\": 2, \"kept_layers\": 2")) << wide.out;
    EXPECT_TRUE(has(run_bin(kEmu, Args{"-h"}).out, "auto: the -R and -K with the shortest step")) << "usage";
}

// One run per -o: while a run holds DIR/LOCK (here this test, as a running trainer would), a second one,
// fresh or resuming, is refused with the holder's pid before it writes anything; once the lock is free the
// run goes on (a LOCK file left behind by an ended run holds nothing). Every trainer that is built.
TEST_F(CliTest, OneRunPerOutputDir) {
    const std::string out = dir + "/busy";
    ASSERT_EQ(mkdir(out.c_str(), 0755), 0);
    const int fd = open((out + "/LOCK").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);
    const std::string pid = std::to_string((int)getpid());
    ASSERT_EQ(pwrite(fd, (pid + "\n").c_str(), pid.size() + 1, 0), (ssize_t)pid.size() + 1);
    for (const char* bin : {kCpu, kGpu, kEmu}) {
        if (!have_binary(bin)) continue;
        EXPECT_TRUE(CleanError(run_bin(bin, base_args() + Args{"-o", out}),
                               {out, "in use by another run", "pid " + pid}))
            << bin;
        if (bin != kCpu) {
            EXPECT_TRUE(
                CleanError(run_bin(bin, base_args() + Args{"-o", out, "-y", "1"}), {"in use by another run"}))
                << bin;
        }
    }
    EXPECT_EQ(names_in(out), std::vector<std::string>{"LOCK"}) << "a refused run writes nothing";
    close(fd);  // the lock goes with it
    const Result r = run_bin(kCpu, base_args() + Args{"-o", out});
    EXPECT_EQ(r.code, 0) << r.cmd << "\n" << r.err;
    EXPECT_EQ(slurp(out + "/LOCK").find(pid), std::string::npos) << "the run wrote its own pid";
}

// -a 1 (llm.c's overfit_single_batch): every step trains on the same first -d tokens. With lr 0 every step's
// loss is then the very same (without -a the loader moves on and it changes); with a high constant lr the
// model memorizes those 256 tokens (seen: 10.8 -> 2.5 in 30 steps; 8.6 without -a). The CPU trainer and,
// where built, the emulated train_gpt (the lr-0 half).
TEST_F(CliTest, OverfitSingleBatch) {
    const Args tiny = base_args() + Args{"-d", "256", "-u", "0", "-q", "1"};
    auto losses = [&](const char* bin, const Args& more) {
        const Result r = run_bin(bin, tiny + more);
        EXPECT_EQ(r.code, 0) << r.cmd << "\n" << r.err;
        std::vector<double> v;
        const std::regex re("step +[0-9]+/[0-9]+ \\| loss ([0-9.]+)");
        for (std::sregex_iterator it(r.out.begin(), r.out.end(), re), end; it != end; ++it)
            v.push_back(atof((*it)[1].str().c_str()));
        return v;
    };
    for (const char* bin : {kCpu, kEmu}) {
        if (!have_binary(bin)) continue;
        const std::vector<double> same = losses(bin, {"-x", "3", "-l", "0", "-a", "1"});
        ASSERT_EQ(same.size(), 3u) << bin;
        EXPECT_TRUE(same[0] == same[1] && same[1] == same[2])
            << bin << ": " << same[0] << " " << same[1] << " " << same[2];
        const std::vector<double> moving = losses(bin, {"-x", "3", "-l", "0"});
        ASSERT_EQ(moving.size(), 3u) << bin;
        EXPECT_NE(moving[1], moving[0]) << bin << ": without -a the second step reads other tokens";
    }
    const std::vector<double> fit = losses(kCpu, {"-x", "30", "-l", "0.003", "-a", "1"});
    ASSERT_EQ(fit.size(), 30u);
    EXPECT_LT(fit.back(), 4.0) << "from " << fit.front();
}

// -k: each trainer's step lines print the lr that learning_rate_at gives for the schedule (4 steps,
// 1 warmup step).
TEST_F(CliTest, LrSchedules) {
    for (const char* bin : {kCpu, kEmu}) {
        if (!have_binary(bin)) continue;
        for (const char* name : {"linear", "wsd", "constant", "cosine"}) {
            if (bin == kEmu && strcmp(name, "linear") != 0)
                continue;  // the wiring is shared; the emulation is slow
            const Result r =
                run_bin(bin, base_args() + Args{"-x", "6", "-u", "1", "-l", "1e-3", "-q", "0.1", "-k", name});
            ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.err;
            EXPECT_TRUE(has(r.out, std::string(name) + " to 0.10 x lr")) << r.out;  // the config table
            TrainArgs a;
            train_args_defaults(&a);
            char err[256];
            ASSERT_EQ(parse_train_arg(&a, "-k", name, err, sizeof err), 1) << err;
            a.lr = 1e-3f;
            a.warmup_steps = 1;
            a.final_lr_frac = 0.1f;
            std::set<std::string> distinct;
            for (int step = 0; step < 6; step++) {
                char want[64];
                snprintf(want, sizeof want, "step %4d/6 | ", step + 1);
                const size_t at = r.out.find(want);
                ASSERT_NE(at, std::string::npos) << want << " not in:\n" << r.out;
                const size_t lr_at = r.out.find("| lr ", at);
                ASSERT_NE(lr_at, std::string::npos) << r.out;
                char lr[32];
                snprintf(lr, sizeof lr, "| lr %.2e |", learning_rate_at(&a, step, 6));
                EXPECT_EQ(r.out.compare(lr_at, strlen(lr), lr), 0)
                    << bin << " -k " << name << " step " << step + 1 << ": want " << lr << " in "
                    << r.out.substr(at, 120);
                distinct.insert(lr);
            }
            // the schedules differ where they should: warmup + 5 decaying steps, wsd's last step only, none
            const size_t want_distinct = strcmp(name, "constant") == 0 ? 1 : strcmp(name, "wsd") == 0 ? 2 : 5;
            EXPECT_EQ(distinct.size(), want_distinct) << bin << " -k " << name;
        }
    }
}

// -sl: a loss spike's update is skipped. The train data: 100 batches of 16 tokens, all the same token but 4
// batches of random ones; -b 1 -t 16 -x 200 is two shuffled epochs. The model soon predicts the constant
// batches (loss < 0.1) while a random batch costs > 10: in the first epoch the window of OUTLIER_WINDOW = 128
// losses is not full yet, so nothing is skipped; in the second, exactly the 4 random batches are (seen at
// steps 160, 175, 181, 199, z-scores 4.2 to 7.5). Whether a skipped step leaves the weights and AdamW state
// untouched is test_gpu's OutlierStepUpdatesNothing (the streaming trainer); here the CPU trainer's flag
// end to end.
TEST_F(CliTest, CpuSkipsLossSpikes) {
    const int bt = 16, batches = 100;
    std::vector<uint16_t> tokens((size_t)(batches * bt + 1), 100);
    uint64_t rng = 1;
    for (int k : {10, 35, 60, 85})
        for (int i = 0; i < bt; i++) tokens[(size_t)(k * bt + i)] = (uint16_t)(random_u64(&rng) % 50257);
    const std::string path = shard_of("spikes.bin", tokens);
    const Result r =
        run_bin(kCpu, base_args() + Args{"-b", "1", "-t", "16", "-x", "200", "-i", path, "-sl", "3"});
    ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.err;
    const std::regex re(
        "step +([0-9]+)/200 \\| loss ([0-9.]+)[^\n]*?( \\| update skipped: loss z-score [0-9.]+ > 3)?\n");
    int steps = 0, skipped = 0;
    for (std::sregex_iterator it(r.out.begin(), r.out.end(), re), end; it != end; ++it) {
        const int step = std::stoi((*it)[1]);
        const double loss = atof((*it)[2].str().c_str());
        const bool skip = (*it)[3].matched;
        steps++;
        skipped += skip;
        if (step > 100 + OUTLIER_WINDOW / 4) {  // the second epoch, the model well trained by then
            EXPECT_EQ(skip, loss > 5.0) << "step " << step << ": loss " << loss;
        } else {
            EXPECT_FALSE(skip && step <= OUTLIER_WINDOW)
                << "step " << step << " skipped before the window was full";
        }
    }
    EXPECT_EQ(steps, 200) << r.out.substr(0, 2000);
    EXPECT_EQ(skipped, 4) << r.out;
}

// ----------------------------------------------------------------------------
// train_gpt end to end, with its kernels emulated on the CPU

// Validation walks the layers once per step's worth of micro-batches (-d / (-b * -t)) of validation batches:
// the first val loss (step 0, the same init) is the same with 1 batch per walk (-d 128) as with 4 (-d 512: 6
// batches in walks of 4 and 2).
TEST_F(CliTest, EmulatedValidationLossIndependentOfBatchesPerWalk) {
    if (!have_binary(kEmu)) GTEST_SKIP() << kEmu << " not built";
    const Args run = {
        "-e", "L2:C64:NH2:T32", "-b", "4", "-t", "32", "-x", "1", "-v", "1", "-m", "6", "-g", "0",
        "-i", kTrain,           "-j", kVal};
    const Result one = run_bin(kEmu, run + Args{"-d", "128"}), four = run_bin(kEmu, run + Args{"-d", "512"});
    ASSERT_EQ(one.code, 0) << one.err << one.out;
    ASSERT_EQ(four.code, 0) << four.err << four.out;
    const size_t a = one.out.find("val loss "), b = four.out.find("val loss ");
    ASSERT_NE(a, std::string::npos) << one.out;
    ASSERT_NE(b, std::string::npos) << four.out;
    EXPECT_EQ(one.out.substr(a, 20), four.out.substr(b, 20));
}

// -e a run's -o (a hostile trial: "holds no model.safetensors ... and no checkpoint of a run", while it held
// four): the run's latest checkpoint, as export_hf -i reads it; without a complete one, the one line says so.
TEST_F(CliTest, ModelFromARunsDirectoryIsItsLatestCheckpoint) {
    const std::string run = dir + "/first";
    const Args data = {"-b", "2", "-t", "32", "-i", kTrain, "-j", kVal, "-v", "0", "-g", "0"};
    const Result a = run_bin(kCpu, Args{"-e", "L2:C64:NH2:T32", "-x", "2", "-n", "1", "-o", run} + data);
    ASSERT_EQ(a.code, 0) << a.err;
    for (const char* bin : {kCpu, kEmu}) {
        if (bin == kEmu && !have_binary(kEmu)) continue;
        const Result b = run_bin(bin, Args{"-e", run, "-x", "1"} + data);
        EXPECT_EQ(b.code, 0) << bin << "\n" << b.err;
        EXPECT_TRUE(has(b.out, "-e " + run + ": the run's latest checkpoint, step 2")) << bin << "\n"
                                                                                       << b.out;
    }
    // a damaged newest model file (bytes changed in place, its size kept): step 1's, with a warning, as -y 1
    // and export_hf -i take it (it trained on the damaged weights, silently: a hostile trial)
    const std::string good = slurp(run + "/model_00000002.bin");
    std::string bad = good;
    for (size_t i = 5000; i < 6000; i++) bad[i] = 0x40;
    FILE* f = fopen((run + "/model_00000002.bin").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(fwrite(bad.data(), 1, bad.size(), f), bad.size());
    fclose(f);
    for (const char* bin : {kCpu, kEmu}) {
        if (bin == kEmu && !have_binary(kEmu)) continue;
        const Result c = run_bin(bin, Args{"-e", run, "-x", "1"} + data);
        EXPECT_EQ(c.code, 0) << bin << "\n" << c.err;
        EXPECT_TRUE(has(c.err, "warning: -e " + run + ": skipping the checkpoint of step 2: " + run +
                                   "/model_00000002.bin: checksum mismatch"))
            << bin << "\n"
            << c.err;
        EXPECT_TRUE(has(c.out, "-e " + run + ": the run's newest whole checkpoint, step 1")) << bin << "\n"
                                                                                             << c.out;
    }
    unlink((run + "/DONE_00000001").c_str());
    EXPECT_TRUE(CleanError(run_bin(kCpu, Args{"-e", run, "-x", "1"} + data),
                           {"-e " + run + ": no whole checkpoint (1 with a DONE marker, all damaged)"}));
    for (const char* f : {"/DONE_00000001", "/DONE_00000002"}) unlink((run + f).c_str());
    EXPECT_TRUE(
        CleanError(run_bin(kCpu, Args{"-e", run, "-x", "1"} + data), {"no complete checkpoint of a run"}));
}

TEST_F(CliTest, EmulatedTrainGptTrainsCheckpointsAndResumes) {
    if (!have_binary(kEmu)) GTEST_SKIP() << kEmu << " not built";
    const std::string out = dir + "/emu";
    const Args run = {"-e", "L2:C64:NH2:T32", "-b", "4", "-t", "32", "-x", "6",
                      "-i", kTrain,           "-j", kVal};  // hs 32
    const Result a = run_bin(kEmu, run + Args{"-v", "3", "-m", "2", "-g", "8", "-n", "3", "-o", out});
    ASSERT_EQ(a.code, 0) << a.cmd << "\nsignal " << a.signal << "\n" << a.err << a.out;
    EXPECT_TRUE(error_lines(a.err).empty()) << a.err;
    for (const char* s :
         {"GPU memory", "GPU-resident layers", "fused tensor-core kernels", "val loss",
          "generating:", "saved checkpoint step 3", "saved checkpoint step 6", "streamed over the run"})
        EXPECT_NE(a.out.find(s), std::string::npos) << s << " not in:\n" << a.out;
    const auto first = step_losses(a.out);
    ASSERT_EQ(first.size(), 6u) << a.out;
    EXPECT_LT(atof(first.at(6).c_str()), atof(first.at(1).c_str()))
        << "6 steps on the same small data: the loss falls";

    // -P 1 -y 1 without -e plans the checkpoint's model (it planned the default d12: a hostile trial)
    const Result p = run_bin(kEmu, Args{"-b", "4", "-t", "32", "-o", out, "-y", "1", "-P", "1"});
    EXPECT_TRUE(has(p.out, "memory plan: L2 C64 NH2")) << p.err << p.out;

    // resume from step 3 (the step-6 checkpoint's marker removed): steps 4..6 again, with the same losses
    ASSERT_EQ(unlink((out + "/DONE_00000006").c_str()), 0);
    const Result b = run_bin(kEmu, run + Args{"-v", "0", "-g", "0", "-n", "0", "-o", out, "-y", "1"});
    ASSERT_EQ(b.code, 0) << b.cmd << "\n" << b.err << b.out;
    EXPECT_NE(b.out.find("resumed from"), std::string::npos) << b.out;
    const auto resumed = step_losses(b.out);
    ASSERT_EQ(resumed.size(), 3u) << b.out;
    for (int s = 4; s <= 6; s++) EXPECT_EQ(resumed.at(s), first.at(s)) << "step " << s << " after the resume";

    // -nk 1: only the newest checkpoint stays, the older ones go once it is complete (DONE, model
    // and state file)
    const std::string keep = dir + "/emu_keep";
    const Result n =
        run_bin(kEmu, run + Args{"-x", "3", "-v", "0", "-g", "0", "-n", "1", "-nk", "1", "-o", keep});
    ASSERT_EQ(n.code, 0) << n.cmd << "\n" << n.err << n.out;
    for (const char* s : {"removed checkpoint step 1 (-nk 1)", "removed checkpoint step 2 (-nk 1)"})
        EXPECT_NE(n.out.find(s), std::string::npos) << s << " not in:\n" << n.out;
    for (int s = 1; s <= 3; s++)
        for (const char* f : {"/DONE_%08d", "/model_%08d.bin", "/state_%08d.bin"}) {
            char name[64];
            snprintf(name, sizeof name, f, s);
            EXPECT_EQ(access((keep + name).c_str(), F_OK) == 0, s == 3) << name;
        }

    // every layer GPU-resident (-R -1 on the fake device's memory): the same run, to bf16 gradient rounding
    const Result c = run_bin(kEmu, run + Args{"-v", "0", "-g", "0", "-R", "-1"});
    ASSERT_EQ(c.code, 0) << c.cmd << "\n" << c.err << c.out;
    EXPECT_NE(c.out.find("2 of 2"), std::string::npos) << c.out;
    const auto resident = step_losses(c.out);
    ASSERT_EQ(resident.size(), 6u) << c.out;
    for (int s = 1; s <= 6; s++)
        EXPECT_NEAR(atof(resident.at(s).c_str()), atof(first.at(s).c_str()), 1e-3 * atof(first.at(s).c_str()))
            << "step " << s;
    // -V: what the run may use of the fake device's 8 GiB. 1.2 GiB leaves nothing after -R -1's reserve and
    // margin (1.25 GiB): every layer streamed, the run as the first; a budget under the plan is refused
    const Result v = run_bin(kEmu, run + Args{"-x", "1", "-v", "0", "-g", "0", "-R", "-1", "-V", "1.2"});
    ASSERT_EQ(v.code, 0) << v.cmd << "\n" << v.err << v.out;
    EXPECT_NE(v.out.find("0 of 2 (all streamed)"), std::string::npos) << v.out;
    ASSERT_EQ(step_losses(v.out).size(), 1u) << v.out;
    EXPECT_EQ(step_losses(v.out).at(1), first.at(1));
    EXPECT_TRUE(CleanError(run_bin(kEmu, run + Args{"-x", "1", "-V", "0.2"}),
                           {"GPU memory too small", "0.20 GiB given by -V (", "GiB free on"}));

    // every layer's activations kept (-K -1): the backward pass reads what the recompute would produce, but
    // for the GELU it redoes with its own kernel where the forward's came from the cuBLASLt epilogue
    // (last-bit differences; bit for bit with -G 0: test_gpu's KeptActivationsTrainLikeRecompute), so the
    // losses agree to 1e-3 relative (seen: 4e-6). With the timeline (-Y 1, which only measures; the
    // emulation's clocks read 0): its lines and the -R / -K advice at the end.
    const Result k = run_bin(kEmu, run + Args{"-v", "0", "-g", "0", "-K", "-1", "-Y", "1"});
    ASSERT_EQ(k.code, 0) << k.cmd << "\n" << k.err << k.out;
    EXPECT_NE(k.out.find("last 2 of 2 layers"), std::string::npos) << k.out;
    EXPECT_NE(k.out.find("TIMELINE {\"step_s\""), std::string::npos) << k.out;
    EXPECT_NE(k.out.find("tuning, from the last step's timeline"), std::string::npos) << k.out;
    EXPECT_NE(k.out.find("-R 0 -K 2 fit this step"), std::string::npos) << k.out;
    const auto kept = step_losses(k.out);
    ASSERT_EQ(kept.size(), 6u) << k.out;
    for (int s = 1; s <= 6; s++)
        EXPECT_NEAR(atof(kept.at(s).c_str()), atof(first.at(s).c_str()), 1e-3 * atof(first.at(s).c_str()))
            << "step " << s << " with kept activations";

    // unfused: the cuBLAS + softmax attention (-F 0) and the bias / GELU passes as separate kernels (-G 0):
    // the same run, to the paths' rounding (test_gpu's FusedAndCublasAttentionTrainAlike: 5e-3)
    EXPECT_NE(a.out.find("fused (cuBLASLt)"), std::string::npos) << a.out;
    const Result d = run_bin(kEmu, run + Args{"-v", "0", "-g", "0", "-F", "0", "-G", "0"});
    ASSERT_EQ(d.code, 0) << d.cmd << "\n" << d.err << d.out;
    EXPECT_NE(d.out.find("T x T scores stored (-F 0)"), std::string::npos) << d.out;
    EXPECT_NE(d.out.find("separate kernels (-G 0)"), std::string::npos) << d.out;
    const auto cublas = step_losses(d.out);
    ASSERT_EQ(cublas.size(), 6u) << d.out;
    for (int s = 1; s <= 6; s++)
        EXPECT_NEAR(atof(cublas.at(s).c_str()), atof(first.at(s).c_str()), 5e-3 * atof(first.at(s).c_str()))
            << "step " << s;
    // -F 1 asked for where its kernels cannot run (head size 16): one line says so, as -F 2's does for cuDNN
    // (only the config table said it: a hostile trial)
    const Result f = run_bin(kEmu, Args{"-e", "L2:C64:NH4:T32", "-b", "4", "-t", "32", "-x", "1", "-v", "0",
                                        "-g", "0", "-i", kTrain, "-j", kVal, "-F", "1"});
    EXPECT_EQ(f.code, 0) << f.err;
    EXPECT_TRUE(has(f.err,
                    "attention: -F 1's fused kernels not used: they need head size 32, 64, 80, 96 or "
                    "128 and sm_80 or newer (head size 16"))
        << f.err;
}

// A long read (over 1 GiB) says how far it is, one line per quarter; a short one says nothing.
TEST(ReadProgress, OneLinePerQuarterOfALargeFile) {
    const int64_t GiB = (int64_t)1 << 30;
    testing::internal::CaptureStdout();
    int quarter = 0;
    for (int64_t done = 0; done <= 2 * GiB; done += GiB / 16)
        read_progress("loading model file", "m.bin", done, 2 * GiB, &quarter);
    int small = 0;
    read_progress("loading model file", "small.bin", 100, 100, &small);
    EXPECT_EQ(testing::internal::GetCapturedStdout(),
              "loading model file m.bin: 25%\nloading model file m.bin: 50%\n"
              "loading model file m.bin: 75%\nloading model file m.bin: 100%\n");
}

// dev/plot.py draws a main.log (train and val loss against steps and tokens, the lr) into a PNG; several logs
// overlay; a malformed log is one error line. Needs python3 with matplotlib (.ci/run installs it).
TEST_F(CliTest, PlotDrawsTheLog) {
    if (system("python3 -c 'import matplotlib' >/dev/null 2>&1") != 0)
        GTEST_SKIP() << "python3 matplotlib missing";
    const std::string run1 = dir + "/run1", run2 = dir + "/run2";
    for (const std::string& d : {run1, run2}) {
        ASSERT_EQ(mkdir(d.c_str(), 0755), 0);
        FILE* f = fopen((d + "/main.log").c_str(), "w");
        ASSERT_NE(f, nullptr);
        for (int s = 0; s <= 40; s++) {
            if (s % 10 == 0) fprintf(f, "s:%d tel:%.6f\n", s, 10.0 - 0.1 * s);
            if (s > 0) fprintf(f, "s:%d trl:%.6f lr:%.4e norm:%.4f\n", s, 10.5 - 0.1 * s, 1e-3 * s / 40, 1.5);
            if (s % 20 == 0 && s > 0 && d == run1) fprintf(f, "s:%d eval:%.6f\n", s, 0.25 + 0.002 * s);  // -h
        }
        fclose(f);
    }
    std::vector<int64_t> h(16, 0);  // a state file header gives the tokens per step
    h[0] = 20241122;
    h[6] = 8192;
    FILE* f = fopen((run1 + "/state_00000040.bin").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    fwrite(h.data(), 8, h.size(), f);
    fclose(f);
    const std::string png = dir + "/loss.png";
    const Result r = run_bin("/usr/bin/env",
                             {"python3", "dev/plot.py", run1 + "/main.log", run2 + "/main.log", "-o", png});
    ASSERT_EQ(r.code, 0) << r.err << r.out;
    const std::string img = slurp(png);
    EXPECT_GT(img.size(), 20000u);
    EXPECT_EQ(img.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
    // issue 41: the right panel is the gradient norm, which every run logs, and the tokens seen go on top
    // where the tokens per step are known (before: the right panel stayed empty without a state file);
    // the tokens per step is --tokens-per-step, not -t, the trainers' sequence length
    EXPECT_TRUE(has(r.out, "gradient norm by step")) << r.out;
    EXPECT_TRUE(has(r.out, "HellaSwag accuracy by step")) << r.out;  // run1's -h lines: a third panel
    const Result one = run_bin("/usr/bin/env", {"python3", "dev/plot.py", run1 + "/main.log", "-o", png});
    ASSERT_EQ(one.code, 0) << one.err << one.out;
    EXPECT_TRUE(has(one.out, "tokens seen on top (8,192 a step)")) << one.out;
    const Result given = run_bin("/usr/bin/env", {"python3", "dev/plot.py", run2 + "/main.log", "-o", png,
                                                  "--tokens-per-step", "4096"});
    ASSERT_EQ(given.code, 0) << given.err << given.out;
    EXPECT_FALSE(has(given.out, "HellaSwag")) << given.out;  // no eval lines: two panels
    EXPECT_TRUE(has(given.out, "tokens seen on top (4,096 a step)")) << given.out;
    EXPECT_TRUE(CleanError(
        run_bin("/usr/bin/env", {"python3", "dev/plot.py", run2 + "/main.log", "-o", png, "-t", "64"}),
        {"plot.py has no -t", "sequence length", "--tokens-per-step"}));
    f = fopen((run2 + "/main.log").c_str(), "a");
    fputs("s:41 trl:abc\n", f);
    fclose(f);
    const Result bad = run_bin("/usr/bin/env", {"python3", "dev/plot.py", run2 + "/main.log", "-o", png});
    EXPECT_TRUE(CleanError(bad, {run2 + "/main.log:", "not a main.log line"}));
}

// dev/plot.py on hostile input: one error line or handled, never a traceback or a hang. Runs with or without
// matplotlib (without it, input that is fine ends in the one line that says matplotlib is missing).
TEST_F(CliTest, PlotRefusesHostileInputInOneLine) {
    const bool mpl = system("python3 -c 'import matplotlib' >/dev/null 2>&1") == 0;
    auto plot = [&](const Args& a) { return run_bin("/usr/bin/env", Args{"python3", "dev/plot.py"} + a); };
    const std::string log = dir + "/main.log", png = dir + "/p.png";
    FILE* f = fopen(log.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs("s:1 trl:5.0 lr:1e-3 norm:1\ns:2 trl:inf lr:1e-3 norm:1\ns:3 tel:4.5\ns:4 trl:4.9 lr:1e-", f);
    fclose(f);
    // a cut last line and an inf loss: skipped with warnings
    const Result ok = plot({log, "-o", png});
    if (mpl) EXPECT_EQ(ok.code, 0) << ok.err;
    else EXPECT_TRUE(CleanError(ok, {"needs matplotlib"}));
    EXPECT_TRUE(has(ok.err, "incomplete last line")) << ok.err;
    EXPECT_FALSE(has(ok.err, "Traceback")) << ok.err;
    f = fopen((dir + "/latin1.log").c_str(), "w");
    fputs("s:1 trl:5.0\n\xff\xfe\n", f);
    fclose(f);
    EXPECT_TRUE(CleanError(plot({dir + "/latin1.log", "-o", png}), {"not UTF-8"}));
    ASSERT_EQ(mkfifo((dir + "/fifo").c_str(), 0644), 0);
    EXPECT_TRUE(CleanError(plot({dir + "/fifo", "-o", png}), {"not a regular file"}));
    EXPECT_TRUE(CleanError(plot({log, "-o", dir + "/fifo"}), {"not a regular file"}));
    EXPECT_TRUE(CleanError(plot({log, "-o", dir + "/none/p.png"}), {"no directory"}));
    // a second trial: a traceback for a huge --tokens-per-step, a hidden ".png" for -o "", and "wrote x"
    // where matplotlib wrote x.png
    EXPECT_TRUE(CleanError(plot({log, "-o", png, "--tokens-per-step", "100000000000000000000000000"}),
                           {"--tokens-per-step", "at most 2^62"}));
    EXPECT_TRUE(CleanError(plot({log, "-o", ""}), {"an image file name is needed"}));
    if (mpl) {
        const Result bare = plot({log, "-o", dir + "/bare"});
        EXPECT_TRUE(has(bare.out, "wrote " + dir + "/bare.png:")) << bare.out << bare.err;
        EXPECT_TRUE(file_exists(dir + "/bare.png"));
    }
}

// Issue 41: an -e that is no file and no preset lists the presets and the nearest one (before: "cannot open
// model file llama-3-70b"); a spec key given twice is refused (before: the last one won silently); a Llama
// C that NH does not divide says so (before: "the head size must be even"). Both trainers (train_gpt
// emulated).
TEST_F(CliTest, ModelNamesAndSpecsSayWhatIsWrong) {
    for (const char* bin : {kCpu, kEmu}) {
        if (!have_binary(bin)) continue;
        auto refused = [&](const char* model, const std::vector<std::string>& why) {
            return CleanError(run_bin(bin, base_args() + Args{"-e", model}), why);
        };
        EXPECT_TRUE(
            refused("llama-3-70b", {"-e llama-3-70b: no such file or directory, and not a model preset",
                                    "did you mean llama3-70b?", "124m", "175b", "qwen2.5-72b"}));
        EXPECT_TRUE(refused("llama3.1-70b", {"did you mean llama3-70b?", "llama3.2-1b"}));
        EXPECT_TRUE(refused("gpt2-small", {"not a model preset", "the presets are 124m"}));
        EXPECT_TRUE(refused("llama3-8b:L2:C256:NH4:KV2:I512:L3", {"L is given twice"}));
        EXPECT_TRUE(refused("L2:C64:NH4:T32:C128", {"C is given twice"}));
        EXPECT_TRUE(refused("llama:L2:C100:NH3:I64", {"C (100) is not divisible by the head count (3)"}));
        EXPECT_TRUE(refused((dir + "/missing.bin").c_str(), {"cannot open model file"}));
    }
}
