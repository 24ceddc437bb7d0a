// test_resume_cli.cpp — train_gpt's checkpoints and resume as the trainers see them from the command line
// (moved from test_cli.cpp, which runs the rest of the flags and files): a fresh run refuses an -o with
// checkpoints, a resume picks the newest valid checkpoint, refuses a changed B/T/-d or -e and warns about
// other changed hyperparameters. Every train_gpt run in ResumeTest is refused before the GPU is touched. At
// the end, resumes that train (the CPU trainer and the emulated train_gpt): checkpoints without their marker,
// and the -sl / -sg windows a resume carries on. Elsewhere: test_cli's emulated run, test_nothing_lost,
// test_ssd_trainer.
#include "cli_test_common.h"

// ----------------------------------------------------------------------------
// train_gpt's checkpoints and resume (-o, -y 1). Everything is checked before the GPU is touched, so these
// run, and must fail cleanly, on a machine without a GPU too. A run that passes every check would need the
// device (and with one would train): the tests stop it first with -x at the checkpoint's step ("nothing to
// train"), whose message names the step the resume picked.

// The state file header (checkpoint.h) is ST_HEADER_FIELDS int64, floats as their 32 bits. The tests leave
// ST_ADAM_T 0, as in files written before -sl / -sg: a resume then takes the step as the update count.
class ResumeTest : public CliTest {
  protected:
    std::string out;                                     // the -o of the run being resumed
    const GPTConfig cfg = {32, 50257, 50304, 2, 4, 64};  // model_file's
    void SetUp() override {
        if (!have_binary(kGpu))
            GTEST_SKIP() << kGpu << " not built (train_gpt is built only where nvcc is present)";
        CliTest::SetUp();
        out = dir + "/ckpt";
        ASSERT_EQ(mkdir(out.c_str(), 0755), 0);
    }
    // What train_gpt with base_args() + {"-x", "5"} and its defaults (-l 6e-4 -u 10 -q 0.1 -c 0 -gc 1 -k
    // cosine) writes at step (ST_LR_SCHEDULE stays 0, as in files written before -k: cosine).
    std::vector<int64_t> header(int64_t step) const {
        std::vector<int64_t> h(ST_HEADER_FIELDS, 0);
        // literals, not checkpoint.h's names: files already on disk must stay readable
        h[ST_MAGIC] = 20241122;
        h[ST_VERSION] = 2;
        h[ST_STEP] = step;
        h[ST_PARAMS] = gpt_layout(&cfg).total;
        h[ST_DATA_STATE_BYTES] = (int64_t)sizeof(DataLoaderState);
        h[ST_TOTAL_STEPS] = 5;
        h[ST_STEP_TOKENS] = 128;
        h[ST_B] = 4;
        h[ST_T] = 32;
        h[ST_LR] = float_bits(6e-4f);
        h[ST_WARMUP] = 10;
        h[ST_FINAL_LR_FRAC] = float_bits(0.1f);
        h[ST_WEIGHT_DECAY] = float_bits(0.0f);
        h[ST_GRAD_CLIP] = float_bits(1.0f);
        return h;
    }
    std::string state_path(int64_t step) const { return out + "/" + step_name("state_", step, ".bin"); }
    std::string model_path(int64_t step) const { return out + "/" + step_name("model_", step, ".bin"); }
    // header h, a zero data position, then body_floats floats (m and v: 2 * params by default), then the run
    // tail where given (version 3)
    void write_state(int64_t step, const std::vector<int64_t>& h, int64_t body_floats = -1,
                     const RunTail* tail = nullptr) {
        if (body_floats < 0) body_floats = 2 * gpt_layout(&cfg).total;
        FILE* f = fopen(state_path(step).c_str(), "wb");
        ASSERT_NE(f, nullptr);
        fwrite(h.data(), 8, h.size(), f);
        DataLoaderState ds;
        memset(&ds, 0, sizeof ds);
        fwrite(&ds, sizeof ds, 1, f);
        std::vector<float> zeros((size_t)body_floats, 0.0f);
        fwrite(zeros.data(), 4, zeros.size(), f);
        if (tail) fwrite(tail, sizeof *tail, 1, f);
        fclose(f);
        if (access((out + "/" + step_name("DONE_", step, "")).c_str(), F_OK) == 0) mark_done(step);
    }
    // DONE_<step> with the sizes and checksums of the step's files, as checkpoint_save writes it
    void mark_done(int64_t step) {
        FileSum sums[2];
        char err[4352];
        ASSERT_TRUE(file_crc32c(model_path(step).c_str(), &sums[0].bytes, &sums[0].crc, err, sizeof err))
            << err;
        ASSERT_TRUE(file_crc32c(state_path(step).c_str(), &sums[1].bytes, &sums[1].crc, err, sizeof err))
            << err;
        ASSERT_TRUE(checkpoint_write_done(out.c_str(), step, sums, err, sizeof err)) << err;
    }
    void touch(const std::string& name) {
        FILE* f = fopen((out + "/" + name).c_str(), "w");
        ASSERT_NE(f, nullptr) << name;
        fclose(f);
    }
    // a complete checkpoint: model file, state file, DONE marker
    void checkpoint(int64_t step, const std::vector<int64_t>& h) {
        model_file("ckpt/" + step_name("model_", step, ".bin"));
        write_state(step, h);
        mark_done(step);
    }
    Result resume(const Args& extra) {
        return run_bin(kGpu, base_args() + Args{"-o", out, "-y", "1", "-x", "5"} + extra);
    }
};

TEST_F(ResumeTest, ChecksStateFile) {
    model_file("ckpt/model_00000002.bin");
    touch("DONE_00000002");
    const int64_t total = gpt_layout(&cfg).total;
    const Result missing = resume({});
    EXPECT_TRUE(CleanError(missing, {"no valid checkpoint", "cannot open optimizer state", state_path(2)}));
    EXPECT_TRUE(has(missing.err, "warning: resume: skipping the checkpoint of step 2: cannot open"))
        << missing.err;
    struct Case {
        int slot;
        int64_t value;
        std::vector<std::string> why;
    };
    const Case cases[] = {
        {ST_MAGIC, 12345, {"bad header"}},
        {ST_VERSION, 1, {"version 1", "not supported"}},
        {ST_VERSION, 4, {"bad header", "version 4"}},
        {ST_VERSION, 3, {"optimizer state", "truncated"}},  // version 3 without its run tail
        {ST_PARAMS, total + 1, {"holds " + std::to_string(total + 1) + " parameters"}},
        {ST_DATA_STATE_BYTES, (int64_t)sizeof(DataLoaderState) + 8, {"data-loader position is"}},
        {ST_STEP, 3, {"does not hold step 2"}},
        {ST_ADAM_T,
         3,
         {"bad update count 3 for step 2"}},  // more updates than steps (0: a file from before -sl)
        {ST_ADAM_T, -1, {"bad update count -1"}},
        {ST_LR_SCHEDULE, LR_SCHEDULES, {"bad lr schedule " + std::to_string(LR_SCHEDULES)}},
    };
    for (const Case& c : cases) {
        std::vector<int64_t> h = header(2);
        h[c.slot] = c.value;
        write_state(2, h);
        EXPECT_TRUE(
            CleanError(resume({}), c.why + std::vector<std::string>{"no valid checkpoint", state_path(2)}));
    }
    write_state(2, header(2), 2 * total - 1);
    EXPECT_TRUE(CleanError(resume({}), {"optimizer state", "truncated"}));
    // version 3: its run tail checked (a damaged one, as a damaged file: no valid checkpoint), then taken
    std::vector<int64_t> v3 = header(2);
    v3[ST_VERSION] = 3;
    TrainArgs a;
    train_args_defaults(&a);
    a.skip_loss_z = 2.5f;
    RunTail tail = run_tail_of(&a, nullptr, nullptr);
    tail.count[1] = OUTLIER_WINDOW + 1;
    write_state(2, v3, -1, &tail);
    EXPECT_TRUE(CleanError(resume({}), {"no valid checkpoint", "a damaged run tail"}));
    tail.count[1] = 0;
    write_state(2, v3, -1, &tail);
    const Result v3_ok = resume({"-x", "2"});
    EXPECT_TRUE(CleanError(v3_ok, {"is at step 2", "nothing to train"}));
    EXPECT_TRUE(has(v3_ok.out, "resume: the checkpoint's -sl 2.5")) << v3_ok.out;
    write_state(2, header(2));
    const Result ok = resume({"-x", "2"});
    EXPECT_TRUE(CleanError(ok, {"the checkpoint in " + out + " is at step 2", "nothing to train"}));
    if (!gpu_present()) {  // a valid checkpoint passes every check and only then meets the missing GPU
        const Result r = resume({});
        EXPECT_TRUE(CleanError(r, {"no CUDA device found"}));
        EXPECT_FALSE(has(r.err, "warning: resume")) << r.err;
    }
}

TEST_F(ResumeTest, PicksNewestValidCheckpoint) {
    checkpoint(2, header(2));
    // newer ones that are damaged: a version-1 state file, a truncated model file, a DONE marker alone
    model_file("ckpt/model_00000004.bin");
    std::vector<int64_t> v1 = header(4);
    v1[ST_VERSION] = 1;
    write_state(4, v1);
    touch("DONE_00000004");
    checkpoint(6, header(6));
    ASSERT_EQ(truncate(model_path(6).c_str(), 5000), 0);
    touch("DONE_00000008");
    // names that only look like markers (sscanf("DONE_%lld") took the first ones as steps 200, 10, 2^63-1)
    for (const char* name : {"DONE_00000200x", "DONE_ 10", "DONE_-0000010", "DONE_+0000010", "DONE_",
                             "DONE_99999999999999999999", "DONE_00000010.tmp", "DONE_9999999999"})
        touch(name);
    const Result r = resume({"-x", "2"});
    EXPECT_TRUE(CleanError(r, {"is at step 2", "nothing to train"}));
    EXPECT_TRUE(has(r.err, "warning: resume: skipping the checkpoint of step 8: cannot open model file"))
        << r.err;
    EXPECT_TRUE(has(r.err, "warning: resume: skipping the checkpoint of step 6: model file")) << r.err;
    EXPECT_TRUE(has(r.err, "warning: resume: skipping the checkpoint of step 4: optimizer state")) << r.err;
    EXPECT_FALSE(has(r.err, "step 10") || has(r.err, "step 200") || has(r.err, "step 9999")) << r.err;
    // with no valid one left, resume refuses rather than start over
    ASSERT_EQ(remove(state_path(2).c_str()), 0);
    EXPECT_TRUE(CleanError(resume({"-x", "2"}),
                           {"no valid checkpoint in " + out, "4 with a DONE marker", "model_00000008.bin"}));
}

TEST_F(ResumeTest, ChecksHyperparameters) {
    checkpoint(2, header(2));
    // B, T and the tokens per step cannot change: the data position and the gradient scale depend on them
    const Args shape_changes[] = {{"-b", "2"}, {"-t", "16"}, {"-d", "256"}};
    for (const Args& a : shape_changes)
        EXPECT_TRUE(CleanError(resume(a), {"resume:", "differ from the checkpoint in " + out,
                                           "(-b 4 -t 32, 128 tokens per step)"}));
    // the others may: one warning each
    const Result r =
        resume({"-x", "2", "-l", "0.001", "-u", "3", "-q", "0.5", "-c", "0.1", "-gc", "0.5", "-k", "wsd"});
    EXPECT_TRUE(CleanError(r, {"nothing to train"}));
    for (const char* w :
         {"warning: resume: -x 2 differs from the checkpoint's 5: the lr schedule changes from here\n",
          "warning: resume: -l 0.001 differs from the checkpoint's 0.0006: the lr schedule changes",
          "warning: resume: -u 3 differs from the checkpoint's 10: the lr schedule changes",
          "warning: resume: -q 0.5 differs from the checkpoint's 0.1: the lr schedule changes",
          "warning: resume: -c 0.1 differs from the checkpoint's 0: the weight decay changes",
          "warning: resume: -k wsd differs from the checkpoint's cosine: the lr schedule changes",
          "warning: resume: -gc 0.5 differs from the checkpoint's 1: the gradient clip changes"})
        EXPECT_TRUE(has(r.err, w)) << w << " not in:\n" << r.err;
    // the same values: no warning (a checkpoint of a 2-step run)
    std::vector<int64_t> h = header(2);
    h[ST_TOTAL_STEPS] = 2;
    write_state(2, h);
    const Result same = resume({"-x", "2"});
    EXPECT_TRUE(CleanError(same, {"nothing to train"}));
    EXPECT_FALSE(has(same.err, "warning: resume")) << same.err;
    // an older build's empty DONE marker: resumed, unverified, with a warning
    touch(step_name("DONE_", 2, ""));
    const Result old = resume({"-x", "2"});
    EXPECT_TRUE(CleanError(old, {"nothing to train"}));
    EXPECT_TRUE(has(old.err,
                    "warning: resume: the checkpoint of step 2 has no checksums (an older build's): resumed "
                    "unverified"))
        << old.err;
}

TEST_F(ResumeTest, ExplicitModelMustMatchCheckpoint) {
    checkpoint(2, header(2));
    EXPECT_TRUE(CleanError(resume({"-e", "L2:C128:NH4:T32", "-x", "2"}),
                           {"-e L2:C128:NH4:T32 does not match the checkpoint in " + out,
                            "(L2 C128 NH4 maxT32 V50257 against its L2 C64 NH4 maxT32 V50257)", "drop -e"}));
    EXPECT_TRUE(CleanError(resume({"-e", "L2:C64:NH4:T64", "-x", "2"}), {"does not match the checkpoint"}));
    // the same model, as a spec or as the checkpoint's own file, and no -e at all, resume
    EXPECT_TRUE(
        CleanError(resume({"-e", "L2:C64:NH4:T32", "-x", "2"}), {"is at step 2", "nothing to train"}));
    EXPECT_TRUE(CleanError(resume({"-e", model_path(2), "-x", "2"}), {"is at step 2", "nothing to train"}));
    Args no_e = base_args();
    no_e.erase(no_e.begin(), no_e.begin() + 2);
    ASSERT_EQ(no_e[0], "-b");
    EXPECT_TRUE(CleanError(run_bin(kGpu, no_e + Args{"-o", out, "-y", "1", "-x", "2"}),
                           {"is at step 2", "nothing to train"}));
}

TEST_F(ResumeTest, FreshRunRefusesDirWithCheckpoints) {
    touch("DONE_00000003");
    touch("DONE_00000200x");  // not a checkpoint: the latest step is 3
    {
        FILE* f = fopen((out + "/main.log").c_str(), "w");
        ASSERT_NE(f, nullptr);
        fputs("s:3 trl:5.0\n", f);
        fclose(f);
    }
    EXPECT_TRUE(
        CleanError(run_bin(kGpu, base_args() + Args{"-o", out}),
                   {out + " already holds checkpoints (latest step 3)", "resume with -y 1", "another -o"}));
    EXPECT_EQ(slurp(out + "/main.log"), "s:3 trl:5.0\n") << "the old run's log was touched";
    // a directory without DONE markers is fine, and so is benchmark mode, which writes no log or checkpoint
    if (!gpu_present()) {
        EXPECT_TRUE(
            CleanError(run_bin(kGpu, base_args() + Args{"-o", out, "-B", "1"}), {"no CUDA device found"}));
        EXPECT_TRUE(
            CleanError(run_bin(kGpu, base_args() + Args{"-o", dir + "/fresh"}), {"no CUDA device found"}));
    }
}

TEST_F(CliTest, CpuRefusesDirWithCheckpoints) {
    if (!have_binary(kCpu)) GTEST_SKIP() << kCpu << " not built";
    const std::string out = dir + "/out";
    ASSERT_EQ(mkdir(out.c_str(), 0755), 0);
    // train_gpt's checkpoints (DONE markers), and its own model files
    const std::string files[] = {"DONE_00000007", "model_00000004.bin"};
    for (const std::string& name : files) {
        FILE* f = fopen((out + "/" + name).c_str(), "w");
        ASSERT_NE(f, nullptr);
        fclose(f);
        EXPECT_TRUE(CleanError(run_bin(kCpu, base_args() + Args{"-o", out}),
                               {out + " already holds ", "another -o"}));
        EXPECT_EQ(access((out + "/main.log").c_str(), F_OK), -1) << "main.log written into a used directory";
        remove((out + "/" + name).c_str());
    }
    const std::string not_ours[] = {"DONE_7x", "model_00000004.bin.tmp"};
    for (const std::string& name : not_ours) {
        FILE* f = fopen((out + "/" + name).c_str(), "w");
        ASSERT_NE(f, nullptr);
        fclose(f);
    }
    const Result r = run_bin(kCpu, base_args() + Args{"-o", out});
    EXPECT_EQ(r.code, 0) << r.cmd << "\n" << r.err;
}

// ----------------------------------------------------------------------------
// Resumes that train

// A stop (kill -9) can leave a checkpoint's files without their DONE marker: one between a save's files and
// its marker, one within -nk's removal (marker first, then the files). No run reads them. A resume says so
// and removes nothing (a DONE removed by hand, to resume an older checkpoint, leaves the newer files whole,
// even where the resume is then refused); with -nk a save removes those of the steps below its own, so a run
// stopped now and then does not fill its disk with them. A name of ours with other digits stays.
TEST_F(CliTest, CpuUnfinishedCheckpointsGoWithNk) {
    if (!have_binary(kCpu)) GTEST_SKIP() << kCpu << " not built";
    const std::string out = dir + "/unfinished";
    const Result r = run_bin(kCpu, base_args() + Args{"-x", "4", "-o", out, "-n", "1"});
    ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.err;
    auto there = [&](const char* name) { return access((out + "/" + name).c_str(), F_OK) == 0; };
    ASSERT_EQ(unlink((out + "/DONE_00000004").c_str()), 0);  // step 4's save, cut before its marker
    ASSERT_EQ(unlink((out + "/DONE_00000001").c_str()), 0);  // -nk's removal of step 1, cut after the marker
    ASSERT_EQ(unlink((out + "/model_00000001.bin").c_str()), 0);
    FILE* f = fopen((out + "/model_7.bin").c_str(), "w");  // not a name of ours
    ASSERT_NE(f, nullptr);
    fclose(f);
    const std::string note = "note: " + out + " holds checkpoint files without a DONE marker (steps 1, 4: ";
    const Result refused = run_bin(kCpu, base_args() + Args{"-x", "6", "-o", out, "-y", "1", "-b", "2"});
    EXPECT_TRUE(CleanError(refused, {"resume: -b 2"})) << refused.out;
    EXPECT_TRUE(has(refused.out, note)) << refused.out;
    for (const char* kept : {"state_00000001.bin", "model_00000004.bin", "state_00000004.bin"})
        EXPECT_TRUE(there(kept)) << kept << ": a resume removes nothing";
    const Result r2 =
        run_bin(kCpu, base_args() + Args{"-x", "6", "-o", out, "-n", "5", "-nk", "2", "-y", "1"});
    ASSERT_EQ(r2.code, 0) << r2.cmd << "\n" << r2.err;
    EXPECT_TRUE(has(r2.out, "(step 3)")) << r2.out;  // the newest complete one
    EXPECT_TRUE(has(r2.out, note)) << r2.out;
    EXPECT_TRUE(
        has(r2.out, "removed 3 files of unfinished checkpoints in " + out + " (steps 1, 4: no DONE marker)"))
        << r2.out;
    for (const char* gone : {"state_00000001.bin", "model_00000004.bin", "state_00000004.bin",
                             "DONE_00000003", "model_00000003.bin"})
        EXPECT_FALSE(there(gone)) << gone;
    for (const char* kept : {"model_7.bin", "DONE_00000005", "model_00000006.bin", "DONE_00000006"})
        EXPECT_TRUE(there(kept)) << kept;
}

// The step lines of steps [from, to] of a run's output, without their times: loss, norm, lr, and the skip.
static std::string step_lines(const std::string& out, int from, int to) {
    std::string got;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
        int step = 0;
        if (sscanf(line.c_str(), "step %d/", &step) != 1 || step < from || step > to) continue;
        const size_t ms = line.find(" | ms "), skip = line.find(" | update skipped");
        got += line.substr(0, ms) + (skip == std::string::npos ? "" : line.substr(skip)) + "\n";
    }
    return got;
}

// -sl / -sg decide on the 128 steps before (llm.c's window): the checkpoint keeps the windows, -a, -sl and
// -sg (the state file's run tail), so a run resumed at step 180 skips the updates the uninterrupted one
// skipped, with the same losses, flags not given again (without the windows it skipped none for 128 steps).
// Both trainers (the emulated train_gpt where built; also on 2 ranks, whose others take the windows from rank
// 0's resume note); a tiny model whose skips start near step 160.
TEST_F(CliTest, ResumeSkipsTheStepsTheUninterruptedRunSkipped) {
    const struct {
        const char* bin;
        Args ranks;
    } runs[] = {{kCpu, {}}, {kEmu, {}}, {kEmu, {"-pn", "2", "-d", "64"}}};
    for (const auto& w : runs) {
        const char* bin = w.bin;
        if (!have_binary(bin)) continue;
        const std::string out =
            dir + "/skips" + (bin == kCpu ? "_cpu" : "_emu") + std::to_string(w.ranks.size());
        const Args run = Args{"-e", "L1:C32:NH2:T16", "-b", "2",  "-t", "16",  "-v", "0", "-g", "0",
                              "-i", kTrain,           "-j", kVal, "-x", "200", "-o", out} +
                         w.ranks;
        const Result a = run_bin(bin, run + Args{"-n", "180", "-sl", "0.5", "-sg", "0.5"});
        ASSERT_EQ(a.code, 0) << a.cmd << "\n" << a.err;
        const std::string uninterrupted = step_lines(a.out, 181, 200), log = slurp(out + "/main.log");
        ASSERT_TRUE(has(uninterrupted, "update skipped: ")) << bin << "\n"
                                                            << uninterrupted;  // the test's point
        for (const char* f : {"/DONE_00000200", "/model_00000200.bin", "/state_00000200.bin"})
            ASSERT_EQ(unlink((out + f).c_str()), 0) << f;
        const Result b = run_bin(bin, run + Args{"-y", "1"});
        ASSERT_EQ(b.code, 0) << b.cmd << "\n" << b.err;
        EXPECT_TRUE(has(b.out, "resume: the checkpoint's -sl 0.5 -sg 0.5")) << b.out;
        EXPECT_EQ(step_lines(b.out, 181, 200), uninterrupted) << bin;
        EXPECT_EQ(slurp(out + "/main.log"), log) << bin;
        // -sg given again, otherwise: a warning (the skips change from here)
        const Result c = run_bin(bin, run + Args{"-y", "1", "-x", "201", "-sg", "0"});
        ASSERT_EQ(c.code, 0) << c.cmd << "\n" << c.err;
        EXPECT_TRUE(has(c.err, "warning: resume: -sg 0 differs from the checkpoint's 0.5: the skips change"))
            << c.err;
    }
}
