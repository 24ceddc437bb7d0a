// test_multi_gpu_ssd.cpp — the SSD tier (-sd) on several ranks and nodes, run as the emulated train_gpt
// (test_multi_gpu.cpp's MultiGpu fixture): rank 0's store on one node, each node's store of its part on
// several, with -sw 1 and -sk 1, against the same ranks and nodes in RAM, byte for byte, with the race check.
#include "multi_gpu_test_common.h"  // defines: MultiGpu, run_nodes, run_args

// The -sd runs on ranks below: a short disk probe for the scope; both families (Llama with -E 1, -R 1, -K 1).
struct SsdRanksEnv {
    SsdRanksEnv() {
        setenv("SSD_PROBE_SECONDS", "0.2", 1);
        setenv("SSD_PROBE_MIB", "8", 1);
    }
    ~SsdRanksEnv() {
        unsetenv("SSD_PROBE_SECONDS");
        unsetenv("SSD_PROBE_MIB");
    }
};
static const char* const kSsdRanksSpecs[] = {"L3:C64:NH4:T32:V512", "llama:L3:C64:NH4:KV2:I128:T32:V512"};
static Args ssd_ranks_flags(const char* spec) {
    return strncmp(spec, "llama", 5) == 0 ? Args{"-E", "1", "-R", "1", "-K", "1"} : Args{};
}

// The SSD tier on several ranks of a node (-pn 2 -sd): rank 0's store, its round over whole layers, every
// rank's slice of the gradients through the node's host arrays. The same bits as -pn 2 in RAM (AdamW is
// element by element: whole layers or slices, the same ops), both families (Llama with -E 1, -R 1, -K 1),
// with the emulator's race check; the checkpoint resumes on one GPU (its store then writes the gradients to
// disk) and again on 2 ranks, still as RAM's; the disk takes no gradients file on ranks.
TEST_F(MultiGpu, SsdTierOnSeveralRanksTrainsAsInRam) {
    const SsdRanksEnv env;
    for (const char* spec : kSsdRanksSpecs) {
        SCOPED_TRACE(spec);
        const bool llama = strncmp(spec, "llama", 5) == 0;
        const Args more = ssd_ranks_flags(spec);
        const std::string ram = dir + "/ram", sd = dir + "/sd", store = dir + "/store";
        for (const std::string& d : {ram, sd, store}) nftw(d.c_str(), rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        const Result a = run_bin(kEmu, run_args(spec, ram, Args{"-pn", "2"} + more));
        const Result b = run_bin(kEmu, run_args(spec, sd, Args{"-pn", "2", "-sd", store} + more));
        ASSERT_EQ(a.code, 0) << a.err;
        ASSERT_EQ(b.code, 0) << b.err;
        EXPECT_TRUE(has(b.out, "race check: no races")) << b.out;
        EXPECT_TRUE(has(b.out, std::string("SSD tier: ") + (llama ? "2" : "3") +  // -R 1: 2 streamed
                                   " layers' fp32 weights and AdamW m, v in"))
            << b.out;
        EXPECT_EQ(access((store + "/grads.bf16").c_str(), F_OK), -1) << "the ranks' gradients stay in RAM";
        EXPECT_EQ(step_lines(a.out).size(), 3u) << a.out;
        EXPECT_TRUE(slurp(ram + "/model_00000003.bin") == slurp(sd + "/model_00000003.bin"))
            << "-pn 2 -sd against -pn 2 in RAM";
        // one GPU resumes the ranks' checkpoint, then 2 ranks again: each step as RAM's resumed alike
        int x = 3;
        for (const Args& ranks : {Args{}, Args{"-pn", "2"}}) {
            const std::string steps = std::to_string(++x);
            const Result ra = run_bin(kEmu, run_args(spec, ram, ranks + more + Args{"-y", "1", "-x", steps}));
            const Result rb =
                run_bin(kEmu, run_args(spec, sd, ranks + more + Args{"-y", "1", "-x", steps, "-sd", store}));
            ASSERT_EQ(ra.code, 0) << ra.err;
            ASSERT_EQ(rb.code, 0) << rb.err;
            EXPECT_TRUE(has(rb.out, "resumed at its checkpoint")) << rb.out;
            EXPECT_FALSE(has(rb.err, "made again")) << rb.err;  // a store of either kind resumes quietly
            const std::string model = "/" + step_name("model_", x, ".bin");
            EXPECT_TRUE(slurp(ram + model) == slurp(sd + model))
                << "step " << x << " on " << (ranks.empty() ? 1 : 2);
        }
        EXPECT_EQ(access((store + "/grads.bf16").c_str(), F_OK), -1)
            << "2 ranks again: one GPU's scratch went";
    }
}

// -sd -sw 1 on the GPUs of one node: the bf16 weights live in rank 0's store, and every rank reads them from
// its files through the page cache, in the generation rank 0 publishes with each layer's progress (rank 0's
// forward takes its round's handoff). The same bits as the ranks in RAM, both families, with the race check,
// a checkpoint every step (each flips the generation the rounds write); resumed on one GPU and on 2 ranks
// again, each step as RAM's.
TEST_F(MultiGpu, SsdTierWithWeightsOnDiskOnSeveralRanksTrainsAsInRam) {
    const SsdRanksEnv env;
    for (const char* spec : kSsdRanksSpecs) {
        SCOPED_TRACE(spec);
        const Args more = ssd_ranks_flags(spec);
        const std::string ram = dir + "/ram", sw = dir + "/sw", store = dir + "/store";
        for (const std::string& d : {ram, sw, store}) nftw(d.c_str(), rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        const Result a = run_bin(kEmu, run_args(spec, ram, Args{"-pn", "2", "-n", "1"} + more));
        const Result b = run_bin(
            kEmu,
            run_args(spec, sw, Args{"-pn", "2", "-n", "1", "-sd", store, "-sw", "1", "-Y", "1"} + more));
        ASSERT_EQ(a.code, 0) << a.err;
        ASSERT_EQ(b.code, 0) << b.err;
        // -Y 1: rank 0's trace alone (every rank wrote it, over one another, once)
        const std::string trace = slurp(sw + "/trace.json");
        EXPECT_EQ(trace.find("traceEvents", trace.find("traceEvents") + 1), std::string::npos) << trace;
        EXPECT_EQ(trace.substr(trace.size() - 3), "]}\n") << trace;
        EXPECT_TRUE(has(b.out, "race check: no races")) << b.out;
        EXPECT_TRUE(
            has(b.out, "AdamW m, v and bf16 weights (every rank reads them through the page cache) in"))
            << b.out;
        EXPECT_TRUE(has(b.out, "SSD tier (-sd -sw 1)")) << b.out;
        for (int x = 1; x <= 3; x++) {
            const std::string model = "/" + step_name("model_", x, ".bin");
            EXPECT_TRUE(slurp(ram + model) == slurp(sw + model))
                << "-pn 2 -sd -sw 1 against -pn 2 in RAM, step " << x;
        }
        int x = 3;
        for (const Args& ranks : {Args{}, Args{"-pn", "2"}}) {
            const std::string steps = std::to_string(++x);
            const Result ra = run_bin(kEmu, run_args(spec, ram, ranks + more + Args{"-y", "1", "-x", steps}));
            const Result rb = run_bin(
                kEmu,
                run_args(spec, sw, ranks + more + Args{"-y", "1", "-x", steps, "-sd", store, "-sw", "1"}));
            ASSERT_EQ(ra.code, 0) << ra.err;
            ASSERT_EQ(rb.code, 0) << rb.err;
            EXPECT_TRUE(has(rb.out, "resumed at its checkpoint")) << rb.out;
            const std::string model = "/" + step_name("model_", x, ".bin");
            EXPECT_TRUE(slurp(ram + model) == slurp(sw + model))
                << "step " << x << " on " << (ranks.empty() ? 1 : 2);
        }
    }
    // a disk error (the first chunk read: a rank's bf16 weights, or rank 0's round): one line for the run (a
    // hostile trial saw three: rank 0's, its launcher's, rank 1's)
    setenv("SSD_FAULT", "0,0,5", 1);
    const Result f = run_bin(kEmu, run_args("L3:C64:NH4:T32:V512", dir + "/fault",
                                            {"-pn", "2", "-sd", dir + "/fault_store", "-sw", "1"}));
    unsetenv("SSD_FAULT");
    EXPECT_EQ(f.code, 1) << f.err;
    EXPECT_EQ(error_lines(f.err).size(), 1u) << f.err;
    EXPECT_TRUE(has(f.err, "cannot read " + dir + "/fault_store/gen0/")) << f.err;
    EXPECT_TRUE(has(f.err, "Input/output error (no checkpoint was complete yet")) << f.err;
}

// The -sd runs on nodes below: a short disk probe, and -E 1's state in windows of 1000 floats (across the
// nodes' parts), for the scope.
struct SsdNodesEnv {
    SsdNodesEnv() {
        setenv("SSD_PROBE_SECONDS", "0.2", 1);
        setenv("SSD_PROBE_MIB", "8", 1);
        setenv("LLMC_TEST_STATE_WINDOW", "1000", 1);
    }
    ~SsdNodesEnv() {
        unsetenv("SSD_PROBE_SECONDS");
        unsetenv("SSD_PROBE_MIB");
        unsetenv("LLMC_TEST_STATE_WINDOW");
    }
};

// -sd on several nodes (-pN 2 -sd DIR): each node's store, DIR/node<n>, holds the node's part of each
// streamed layer (its ranks' slices); its leader's round updates it and exchanges the new bf16 part with the
// other nodes, as in RAM. The same bits as the nodes in RAM, both families (GPT-2 on 2 nodes of one rank;
// Llama with -E 1 -R 1 -K 1 on 2 nodes of 2 ranks, the vocabulary's state in windows across the nodes'
// parts), with the race check; each checkpoint's model file byte for byte, resumed on the same nodes byte for
// byte; resumed on one node, or on nodes of another -pn, refused in one line (the stores hold other parts); a
// node killed between its store's checkpoint and rank 0's model file leaves the last complete checkpoint to
// resume, bit for bit. A checkpoint of the same nodes in RAM resumes with -sd, bit for bit.
TEST_F(MultiGpu, SsdTierOnSeveralNodesTrainsAsInRam) {
    const SsdNodesEnv env;
    for (const char* spec : {"L3:C64:NH4:T32:V512", "llama:L3:C64:NH4:KV2:I128:T32:V512"}) {
        SCOPED_TRACE(spec);
        const bool llama = strncmp(spec, "llama", 5) == 0;
        const Args more = llama ? Args{"-pn", "2", "-E", "1", "-R", "1", "-K", "1"} : Args{};
        const std::string ram = dir + "/ram", sd = dir + "/sd", store = dir + "/store";
        for (const std::string& d : {ram, sd, store}) nftw(d.c_str(), rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        const Result a = run_nodes(2, run_args(spec, ram, more));
        const Result b = run_nodes(2, run_args(spec, sd, more + Args{"-sd", store}));
        EXPECT_TRUE(has(b.out, "race check: no races")) << b.out;
        EXPECT_TRUE(has(b.out, std::string("SSD tier: ") + (llama ? "2" : "3") +
                                   " layers' fp32 weights and AdamW m, v (node 0's part: "))
            << b.out;
        for (const char* n : {"/node0", "/node1"})
            EXPECT_EQ(access((store + n + "/ssd_manifest").c_str(), F_OK), 0) << n;
        EXPECT_EQ(access((store + "/ssd_manifest").c_str(), F_OK), -1) << "no store of whole layers";
        EXPECT_TRUE(slurp(ram + "/model_00000003.bin") == slurp(sd + "/model_00000003.bin"))
            << "-pN 2 -sd against -pN 2 in RAM";
        run_nodes(2, run_args(spec, ram, more + Args{"-y", "1", "-x", "4"}));
        const Result rb = run_nodes(2, run_args(spec, sd, more + Args{"-y", "1", "-x", "4", "-sd", store}));
        EXPECT_TRUE(has(rb.out, "resumed at its checkpoint")) << rb.out;
        EXPECT_TRUE(slurp(ram + "/model_00000004.bin") == slurp(sd + "/model_00000004.bin")) << "resumed";
        const Args resume = Args{"-y", "1", "-x", "5", "-sd", store};
        EXPECT_TRUE(CleanError(run_bin(kEmu, run_args(spec, sd, more + resume)),
                               {"resume: the checkpoint's SSD stores hold each layer in parts of",
                                "on 2 nodes", "resume on as many nodes with the -pn it ran with"}));
        if (llama) {  // a checkpoint of the nodes in RAM resumes with -sd: each node's store filled from its
                      // part
            const std::string moved = dir + "/moved";
            run_nodes(2, run_args(spec, moved, more));
            const Result m = run_nodes(
                2, run_args(spec, moved, more + Args{"-y", "1", "-x", "4", "-sd", dir + "/mstore"}));
            EXPECT_TRUE(has(m.out, "created from step 3's checkpoint (its state file holds all the state)"))
                << m.out;
            EXPECT_TRUE(slurp(ram + "/model_00000004.bin") == slurp(moved + "/model_00000004.bin"))
                << "moved to -sd";
            continue;
        }
        std::vector<int> codes;  // 2 nodes of 2 ranks cut other parts: every node says so
        const Result other = run_nodes(2, run_args(spec, sd, Args{"-pn", "2"} + resume), &codes);
        EXPECT_EQ(codes, (std::vector<int>{1, 1})) << other.err;
        // each node says it at its start (node 0 may see node 1 end first: then node 1's log has it)
        EXPECT_EQ(error_lines(other.err).size(), 1u) << other.err;
        EXPECT_TRUE(has(other.err + slurp(dir + "/node1/stderr.txt"),
                        "-pN 2 -pn 2 would cut parts of 25088: resume with the -pN and -pn it ran with"))
            << other.err;
        // every node's store is the run's (a hostile trial: node 1's had no owner, and another run's -o
        // replaced it); another run is refused each store and leaves them as they are
        char owner[4200];
        ASSERT_NE(realpath(sd.c_str(), owner), nullptr);
        const std::string node1_params = slurp(store + "/node1/gen0/params.f32");
        EXPECT_TRUE(has(slurp(store + "/node1/ssd_manifest"), std::string("owner ") + owner + "\n"));
        const Result thief = run_nodes(2, run_args(spec, dir + "/thief", {"-sd", store}), &codes);
        EXPECT_EQ(codes, (std::vector<int>{1, 1})) << thief.err;
        // each node refuses its store; the one that ends first says why, the other may see it go first
        EXPECT_EQ(error_lines(thief.err).size(), 1u) << thief.err;
        EXPECT_TRUE(has(thief.err + slurp(dir + "/node1/stderr.txt"), "holds the SSD store of the run in"))
            << thief.err;
        EXPECT_TRUE(slurp(store + "/node1/gen0/params.f32") == node1_params) << "node 1's store untouched";
        // -sd on one node only: refused at start on both (the trial: a deadlock at the first checkpoint)
        const Result half = run_nodes(2, run_args(spec, dir + "/half"), &codes, {"-sd", dir + "/half_store"});
        EXPECT_EQ(codes, (std::vector<int>{1, 1})) << half.err;
        EXPECT_TRUE(
            CleanError(half, {"node 1's flags differ from node 0's", "whether -sd and -sw are given"}));
        // node 1 killed in step 2's save, after its store took step 2 as its checkpoint and before rank 0 had
        // its part: no DONE for step 2, node 0 ends in one line; both stores resume step 1's and end as above
        const std::string kd = dir + "/killed", ks = dir + "/kstore";
        setenv("LLMC_TEST_RANK_DIES", "1:2:save", 1);
        std::vector<int> kc;
        const Result k = run_nodes(2, run_args(spec, kd, {"-n", "1", "-sd", ks}), &kc);
        unsetenv("LLMC_TEST_RANK_DIES");
        EXPECT_EQ(kc, (std::vector<int>{1, 128 + SIGKILL})) << k.err;
        EXPECT_EQ(error_lines(k.err).size(), 1u) << k.err;
        EXPECT_EQ(file_size(kd + "/DONE_00000002"), -1) << "step 2's checkpoint lacks node 1's part";
        const Result kr = run_nodes(2, run_args(spec, kd, {"-y", "1", "-sd", ks}));
        EXPECT_TRUE(has(kr.out, "(step 1)")) << kr.out;
        EXPECT_TRUE(slurp(kd + "/model_00000003.bin") == slurp(sd + "/model_00000003.bin")) << "resumed at 1";
    }
}

// -sd -sk 1 on several nodes: each node's leader reads its part of each layer's m and v from its store at a
// save and sends it to rank 0, so the checkpoints are the files of the same run in RAM, byte for byte (GPT-2
// on 2 nodes of 1; Llama -E 1 on 2 nodes of 2, the vocabulary in windows of 1000 floats); such a checkpoint
// resumes with -sd on the same nodes (their stores filled from it) and on another cut (one node of 2 ranks),
// as in RAM.
TEST_F(MultiGpu, SsdKeepStateCheckpointsResumeOnAnyCut) {
    const SsdNodesEnv env;
    for (const char* spec : {"L3:C64:NH4:T32:V512", "llama:L3:C64:NH4:KV2:I128:T32:V512"}) {
        SCOPED_TRACE(spec);
        const bool llama = strncmp(spec, "llama", 5) == 0;
        const Args more =
            llama ? Args{"-pn", "2", "-E", "1", "-R", "1", "-K", "1", "-n", "1"} : Args{"-n", "1"};
        const std::string ram = dir + "/ram", sd = dir + "/sd", store = dir + "/store";
        for (const std::string& d : {ram, sd, store}) nftw(d.c_str(), rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        run_nodes(2, run_args(spec, ram, more));
        const Result b = run_nodes(2, run_args(spec, sd, more + Args{"-sd", store, "-sk", "1"}));
        EXPECT_TRUE(has(b.out, "race check: no races")) << b.out;
        for (const char* step : {"1", "2", "3"}) {
            for (const char* kind : {"/state_0000000", "/model_0000000"}) {
                const std::string want = slurp(ram + kind + step + ".bin");
                ASSERT_GT(want.size(), 1024u);
                EXPECT_TRUE(slurp(sd + kind + step + ".bin") == want) << kind << step << ".bin";
            }
        }
        if (!llama) continue;
        // step 2's checkpoint on the same nodes and stores (each filled again with its part from the file)
        unlink((sd + "/DONE_00000003").c_str());
        const Result e = run_nodes(2, run_args(spec, sd, more + Args{"-y", "1", "-sd", store, "-sk", "1"}));
        EXPECT_TRUE(has(e.out, "created from step 2's checkpoint (its state file holds all the state)"))
            << e.out;
        EXPECT_TRUE(slurp(sd + "/model_00000003.bin") == slurp(ram + "/model_00000003.bin"));
        EXPECT_TRUE(slurp(sd + "/state_00000003.bin") == slurp(ram + "/state_00000003.bin"));
        // and on one node of 2 ranks with -sd, against the run in RAM's checkpoint there
        const Args one = {"-pn", "2", "-E", "1", "-R", "1", "-K", "1", "-y", "1"};
        for (const std::string& d : {ram, sd}) unlink((d + "/DONE_00000003").c_str());
        const Result c = run_bin(kEmu, run_args(spec, sd, one + Args{"-sd", dir + "/store1", "-sk", "1"}));
        ASSERT_EQ(c.code, 0) << c.cmd << "\n" << c.err << c.out;
        EXPECT_TRUE(has(c.out, "created from step 2's checkpoint (its state file holds all the state)"))
            << c.out;
        const Result d = run_bin(kEmu, run_args(spec, ram, one));
        ASSERT_EQ(d.code, 0) << d.cmd << "\n" << d.err << d.out;
        EXPECT_TRUE(slurp(sd + "/model_00000003.bin") == slurp(ram + "/model_00000003.bin"));
        EXPECT_TRUE(slurp(sd + "/state_00000003.bin") == slurp(ram + "/state_00000003.bin"));
    }
}
// -sd -sw 1 on several nodes: each node's store holds its part of each layer's fp32 state and, in its
// layers.bf16, every streamed layer's bf16 weights whole, which its leader writes (through the page cache)
// once the nodes have exchanged the layer's parts, and its ranks read back in both passes. The same bits as
// the nodes in RAM, both families (GPT-2 on 2 nodes of one rank; Llama -E 1 -R 1 -K 1 on 2 nodes of 2), with
// the race check. The stores' state is that of -sd alone (layers.bf16 is scratch, in no checkpoint): the
// checkpoint resumes without -sw 1 on the same stores, and that one's with -sw 1 again (layers.bf16 filled
// from the model file), each as RAM's.
TEST_F(MultiGpu, SsdTierWithWeightsOnDiskOnSeveralNodesTrainsAsInRam) {
    const SsdNodesEnv env;
    for (const char* spec : kSsdRanksSpecs) {
        SCOPED_TRACE(spec);
        const bool llama = strncmp(spec, "llama", 5) == 0;
        const Args more = llama ? Args{"-pn", "2"} + ssd_ranks_flags(spec) : Args{};
        const std::string ram = dir + "/ram", sd = dir + "/sd", store = dir + "/store";
        for (const std::string& d : {ram, sd, store}) nftw(d.c_str(), rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        run_nodes(2, run_args(spec, ram, more));
        const Result b = run_nodes(2, run_args(spec, sd, more + Args{"-sd", store, "-sw", "1"}));
        EXPECT_TRUE(has(b.out, "race check: no races")) << b.out;
        EXPECT_TRUE(has(b.out, "and their bf16 weights whole, in layers.bf16 (every rank reads them"))
            << b.out;
        for (const char* n : {"/node0", "/node1"}) {
            EXPECT_GT(file_size(store + n + "/layers.bf16"), 0) << n;
            EXPECT_EQ(file_size(store + n + "/gen0/weights.bf16"), -1) << n << ": no bf16 part in the store";
        }
        EXPECT_TRUE(slurp(ram + "/model_00000003.bin") == slurp(sd + "/model_00000003.bin"))
            << "-pN 2 -sd -sw 1 against -pN 2 in RAM";
        for (const char* x : {"4", "5"}) {
            SCOPED_TRACE(x);
            const Args resume =
                Args{"-y", "1", "-x", x, "-sd", store} + (x[0] == '5' ? Args{"-sw", "1"} : Args{});
            run_nodes(2, run_args(spec, ram, more + Args{"-y", "1", "-x", x}));
            const Result r = run_nodes(2, run_args(spec, sd, more + resume));
            EXPECT_TRUE(has(r.out, "resumed at its checkpoint")) << r.out;
            const std::string model = std::string("/model_0000000") + x + ".bin";
            EXPECT_TRUE(slurp(ram + model) == slurp(sd + model)) << "resumed";
        }
    }
}
