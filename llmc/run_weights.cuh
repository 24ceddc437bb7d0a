// llmc/run_weights.cuh — train_gpt.cu's weights into host memory: -sd's directory, lock and disk probe,
// the store made or opened (ssd_attach), several nodes' parts (load_node_weights), from init, -e or a
// checkpoint; build_model allocates the trainer (llmc/gpt_build.cuh) and resumes its state.
// Not here: the store's files (llmc/ssd_store.cpp), the checkpoint's format (llmc/checkpoint.h).
#pragma once
#include "llmc/run_fit.cuh"    // defines: ssd_probe_dir
#include "llmc/run_setup.cuh"  // defines: Run, INIT_SEED, resumes_ssd_store

// -sd: disk bandwidth and disk time per step. A failed probe only warns.
// -sd's directory made (a resume's must be there), locked for this run until it exits, and its disk's read
// and write rates measured (r->disk_*; 0 where the probe failed, said in one line).
static void ssd_open_dir(Run* r) {
    const char* dir = r->ga.ssd_dir;
    char err[4352];
    struct stat st;  // a resume's store is there already: a wrong -sd is not made (and left behind)
    if (resumes_ssd_store(r) && stat(dir, &st) != 0)
        die("resume: -sd %s: %s; a resume reads the SSD store from the run's -sd DIR", dir, strerror(errno));
    r->ssd_dir_made = mkdir(dir, 0755) == 0;
    if (!r->ssd_dir_made && errno != EEXIST) die("-sd %s: cannot create it: %s", dir, strerror(errno));
    if (ssd_lock_dir(dir, err, sizeof err) < 0) die("-sd: %s", err);  // held until exit
    if (!ssd_probe_dir(dir, &r->disk_rbps, &r->disk_wbps, &r->disk_direct, err, sizeof err)) {
        fprintf(stderr, "warning: -sd %s: %s; the disk's part of a step is not estimated\n", dir, err);
        r->disk_rbps = r->disk_wbps = 0;
    }
}
// -sd on several nodes: each node's store in DIR/node<n>, on each node's own drive (or in a folder every node
// sees: each takes its own); DIR is made here, the node's folder by ssd_open_dir.
static void ssd_node_dir(Run* r) {
    static std::string node_dir;
    const char* dir = r->ga.ssd_dir;
    if (!dir || r->comm->nodes == 1) return;
    char why[4352];
    if (!ssd_dir_usable(dir, why, sizeof why)) die("%s", why);
    // every rank tries; the leader's removes it on a failed start. A resume of the stores makes nothing: a
    // wrong -sd is said by ssd_open_dir (DIR/node<n> is not there), not made and left behind.
    const bool made = !resumes_ssd_store(r) && mkdir(dir, 0755) == 0;
    if (!made && !resumes_ssd_store(r) && errno != EEXIST)
        die("-sd %s: cannot create it: %s", dir, strerror(errno));
    r->ssd_parent_made = made && r->comm->local == 0;
    node_dir = std::string(dir) + "/node" + std::to_string(r->comm->node_rank);
    r->ga.ssd_dir = node_dir.c_str();
}
static void ssd_print_bandwidth(const Run* r) {
    const char* dir = r->ga.ssd_dir;
    const double rbps = r->disk_rbps, wbps = r->disk_wbps;
    const int direct = r->disk_direct;
    if (rbps <= 0 || wbps <= 0) return;
    const MemoryPlan& m = r->plan;
    printf(
        "disk %s: read %.2f GB/s, write %.2f GB/s%s; one step moves %.2f GB from it and %.2f GB to it: "
        "%.3f s of disk time per step at these rates, of which the round's part (%.3f s) runs in the next "
        "forward pass, which waits for each layer's update\n",
        dir, rbps / 1e9, wbps / 1e9, direct ? " (O_DIRECT)" : " (buffered: the filesystem refused O_DIRECT)",
        m.ssd_read_per_step / 1e9, m.ssd_write_per_step / 1e9,
        m.ssd_read_per_step / rbps + m.ssd_write_per_step / wbps,
        m.ssd_round_reads / rbps + m.ssd_round_writes / wbps);
}

// Llama: -e's parameters [lo, hi), in file order, into dst.
static void llama_load_window(const Run* r, float* dst, int64_t lo, int64_t hi) {
    char err[4352];
    const char* model = r->args.model;
    const int ok = llama_is_model_file(model)
                       ? llama_load_params(model, &r->llama, dst, err, sizeof err, lo, hi)
                       : llama_hf_load_window(model, &r->llama, dst, lo, hi, err, sizeof err);
    if (!ok) die("%s", err);
}

// -sd, and several nodes: the prefix (embeddings, layers 0..R-1) into g->master: init, -e or checkpoint.
static void ssd_load_prefix(Run* r, GPT* g) {
    char err[4352];
    const ParamLayout* p = &g->layout;
    const int R = g->resident_layers;
    const bool init = r->kind == 1 && r->resume_step < 0;
    if (init && is_llama(g)) {
        llama_init_embeddings(&r->llama, g->master, INIT_SEED);
        for (int l = 0; l < R; l++)
            llama_init_layer(&r->llama, l, g->master + gpt_layer_offset(p, l), INIT_SEED);
    } else if (init) {
        gpt_init_embeddings(&r->cfg, g->master, INIT_SEED);
        for (int l = 0; l < R; l++) gpt_init_layer(&r->cfg, l, g->master + gpt_layer_offset(p, l), INIT_SEED);
    } else if (is_llama(g)) {  // the file is [layers | embeddings]
        llama_load_window(r, g->master, p->total - p->embed_count, p->total);
        if (R > 0) llama_load_window(r, g->master + p->embed_count, 0, (int64_t)R * p->layer_stride);
    } else if (!gpt_load_params(r->args.model, &r->cfg, g->master, err, sizeof err, 0, g->resident_count)) {
        die("%s", err);
    }
}

// -sd, fresh run: streamed layer l's fp32 weights, from init or -e.
static void ssd_load_layer(Run* r, const GPT* g, int l, float* layer) {
    char err[4352];
    const ParamLayout* p = &g->layout;
    const int64_t lo = (int64_t)l * p->layer_stride;  // the family's file: layer l's offset
    if (is_llama(g) && r->kind == 1) llama_init_layer(&r->llama, l, layer, INIT_SEED);
    else if (is_llama(g)) llama_load_window(r, layer, lo, lo + p->layer_stride);
    else if (r->kind == 1) gpt_init_layer(&r->cfg, l, layer, INIT_SEED);
    else if (!gpt_load_params(r->args.model, &r->cfg, layer, err, sizeof err, gpt_layer_offset(p, l),
                              gpt_layer_offset(p, l) + p->layer_stride))
        die("%s", err);
}

// Several nodes with -E 1: the vocabulary tensors' bf16 copy whole (every GPU reads every chunk), their fp32
// weights in the node's part only (vocab_node_part). From init or a model file 16M floats at a time; from a
// Hugging Face checkpoint a tensor at a time (it reads whole tensors: Llama 3 405B's table is 8.4 GB).
static void load_node_vocab(Run* r, GPT* g) {
    const ParamLayout* p = &g->layout;
    const int64_t E = p->embed_count;
    int64_t lo, hi;
    vocab_node_part(g, g->comm->node_rank, &lo, &hi);
    uint16_t* bf16 = g->stream.weights_host_bf16;
    FAKE_CUDA_HOST_ACCESS(bf16, E * 2, true, "the host writing the vocabulary's bf16 copy (load)");
    const bool init = r->kind == 1 && r->resume_step < 0;
    const bool whole_tensors = !init && !llama_is_model_file(r->args.model);
    const int64_t most = state_window_floats();
    int64_t window_floats = std::min<int64_t>(E, most);
    for (int t = 0; t < NUM_EMBED_TENSORS && whole_tensors; t++)
        window_floats = std::max(window_floats, p->embed_size[t]);
    float* window = (float*)malloc((size_t)window_floats * 4);
    if (!window) die("out of host memory to load the vocabulary tensors");
    for (int t = 0; t < NUM_EMBED_TENSORS; t++) {
        const int64_t o = p->embed_offset[t], n = p->embed_size[t];
        const int64_t step = whole_tensors ? std::max<int64_t>(n, 1) : std::min(window_floats, most);
        for (int64_t a = o; a < o + n; a += step) {
            const int64_t b = std::min(o + n, a + step);
            if (init) llama_init_embeddings_window(&r->llama, window, a, b, INIT_SEED);
            else
                llama_load_window(r, window, p->total - E + a,
                                  p->total - E + b);  // the file: [layers | these]
            convert_f32_to_bf16(window, bf16 + a, b - a);
            const int64_t from = std::max(a, lo), to = std::min(b, hi);
            if (to > from) memcpy(g->master + from, window + (from - a), (size_t)(to - from) * 4);
        }
    }
    free(window);
}

// The prefix (-E 1: the vocabulary's part, and the -R layers whole): load_node_weights' and -sd's.
static void load_node_prefix(Run* r, GPT* g) {
    if (!g->vocab) return ssd_load_prefix(r, g);
    load_node_vocab(r, g);
    for (int l = 0; l < g->resident_layers; l++)
        ssd_load_layer(r, g, l, g->master + gpt_layer_offset(&g->layout, l));
}
// Several nodes, a node's leader: the weights from init, -e or a checkpoint, a layer at a time: the prefix
// whole (-E 1: the vocabulary's fp32 weights in the node's part: load_node_vocab), each streamed layer's bf16
// copy whole (every GPU reads whole layers) and its fp32 weights in the node's part only.
static void load_node_weights(Run* r, GPT* g) {
    const ParamLayout* p = &g->layout;
    load_node_prefix(r, g);
    float* layer = (float*)malloc((size_t)p->layer_stride * 4);
    if (!layer) die("out of host memory for one layer");
    int64_t lo, hi;
    comm_node_part(g->comm, p->layer_stride, g->comm->node_rank, &lo, &hi);
    for (int l = g->resident_layers; l < g->config.num_layers; l++) {
        ssd_load_layer(r, g, l, layer);
        uint16_t* bf16 = g->stream.weights_host_bf16 + gpt_layer_offset(p, l);
        FAKE_CUDA_HOST_ACCESS(bf16, p->layer_stride * 2, true, "the host writing the bf16 copy (load)");
        convert_f32_to_bf16(layer, bf16, p->layer_stride);
        memcpy(g->master + gpt_layer_offset(p, l) + lo, layer + lo, (size_t)(hi - lo) * 4);
    }
    free(layer);
}

// -sd: a fresh run fills a new store in DIR, a resume opens it. The prefix goes to host arrays. Several
// nodes: each node's leader, its store (DIR/node<n>: main) holding its part of each streamed layer; the
// bf16 copy whole from init, -e or the checkpoint's model file, as load_node_weights.
static void ssd_attach(Run* r, GPT* g) {
    const double GiB = 1073741824.0;
    const char* dir = r->ga.ssd_dir;
    const GPTConfig* c = &r->cfg;
    const ParamLayout* p = &g->layout;
    const int R = g->resident_layers;
    SsdStore*& st = g->ssd->store;
    char err[4352];
    SsdStoreConfig sc = ssd_store_config(c, R, ssd_tier(&r->ga), &r->llama);
    if (sc.num_layers < 1)  // -R -1 placed every layer on the GPU
        die("-sd %s with -R %d: all %d layers fit on the GPU, no state is left to put on disk: drop -sd", dir,
            r->ga.resident, c->num_layers);
    sc.owner = r->ssd_owner;  // another run's store is neither replaced nor resumed
    g->ssd->keep_state = r->ga.ssd_keep_state != 0;
    const bool nodes = g->comm->nodes > 1;
    const int64_t lo = g->ssd->part_lo;
    sc.layer_elems = g->ssd->part_n;  // the node's part (the plan's: node 0's, the largest; plan_run: > 0)
    // a checkpoint of a run in RAM or -sk 1's (its state file holds every parameter's m, v): a new store,
    // filled from it (the run's own store too: the file is the checkpoint, whatever the store holds)
    const bool resume = resumes_ssd_store(r), from_ram = r->resume_step >= 0 && !resume;
    double verify_s = 0;
    if (resume) {
        int64_t tail[SSD_TAIL_FIELDS];
        if (!state_file_ssd_tail(r->resume_state, tail, err, sizeof err)) die("resume: %s", err);
        if (tail[SSD_TAIL_PREFIX] != g->host_state_count)
            die("resume: -R %d differs from the checkpoint's (%lld streamed layers in its SSD store, %d "
                "now): "
                "keep -R to resume with -sd",
                R, (long long)tail[SSD_TAIL_STREAMED_LAYERS], c->num_layers - R);
        const double t0 = timeline_now();
        st = ssd_store_open(dir, &sc, r->resume_step, err, sizeof err);  // reads it once: checksums
        verify_s = timeline_now() - t0;
        if (!st && strstr(err, "other checkpoint, step "))  // damaged, the older checkpoint intact
            die("resume: -sd %s: %s: to resume from that one, remove %s/DONE_%08lld", dir, err,
                r->args.output_dir, (long long)r->resume_step);
        if (!st && (strstr(err, " is damaged") || strstr(err, " is unusable")))
            die("resume: -sd %s: %s", dir, err);
        if (!st && strstr(err, "holds no complete checkpoint"))  // made again since, never saved
            die("resume: -sd %s: %s: the store was made again since and its state of step %lld is gone "
                "(a checkpoint written with -sk 1 holds all of its own state)",
                dir, err, (long long)r->resume_step);
        if (!st && strstr(err, ", not of step "))  // an older checkpoint than the store's last two
            die("resume: -sd %s: %s: a store keeps the state of its last two checkpoints only (resume one of "
                "those; with -sk 1 each checkpoint's state file holds all of its own)",
                dir, err);
        if (!st && strstr(err, " layers of "))  // another shape: its -R, -sw (or node) differ
            die("resume: -sd %s: %s (resume with the run's -R%s)", dir, err,
                nodes ? "; each node's DIR/node<n> must be its own" : " and -sw");
        if (!st)  // a store of another node's (not an error of the system's, "cannot ...")
            die("resume: -sd %s: %s%s", dir, err,
                nodes && !strstr(err, "cannot ") ? " (each node's DIR/node<n> must be its own)" : "");
    } else {
        st = ssd_store_create(dir, &sc, err, sizeof err);
        if (!st) die("-sd %s: %s", dir, err);
    }
    ssd_set_fault_from_env(ssd_store_io(st));
    nodes ? load_node_prefix(r, g) : ssd_load_prefix(r, g);
    // the streamed layers, one at a time through one buffer
    float* layer = (float*)malloc((size_t)p->layer_stride * 4);
    if (!layer) die("out of host memory for one layer");
    std::vector<float> part(nodes && resume ? (size_t)sc.layer_elems : 0);
    std::vector<float> m(from_ram ? (size_t)sc.layer_elems : 0), v(m.size());
    const bool file_order = r->llama.num_layers > 0;  // the Llama files: [layers | embeddings]
    for (int l = R; l < c->num_layers; l++) {
        int rc = 0;
        if (nodes) ssd_load_layer(r, g, l, layer);  // whole: the bf16 copy
        if (resume) {  // several nodes: its part, which must be the checkpoint model file's
            rc = ssd_store_read_layer(st, l - R, nodes ? part.data() : layer, NULL, NULL, NULL, err,
                                      sizeof err);
            if (rc == 0 && nodes && memcmp(part.data(), layer + lo, part.size() * 4) != 0)
                die("resume: -sd %s: layer %d's weights differ from the checkpoint's model file %s: this "
                    "store holds another node's part or another checkpoint's (each node's DIR/node<n> must "
                    "be "
                    "its own)",
                    dir, l, r->args.model);
        } else {
            if (!nodes) ssd_load_layer(r, g, l, layer);
            const int64_t at = (file_order ? 0 : p->embed_count) + (int64_t)l * p->layer_stride + lo;
            if (from_ram && !state_file_read_moments(r->resume_state, p->total, at, sc.layer_elems, m.data(),
                                                     v.data(), err, sizeof err))
                die("resume: %s", err);
            rc = ssd_store_write_layer(st, l - R, layer + lo, from_ram ? m.data() : NULL,
                                       from_ram ? v.data() : NULL, err, sizeof err);  // fresh: zero m, v
        }
        if (rc != 0) die("-sd %s: %s", dir, err);
        if (g->ssd->whole) {  // -sw 1 on several nodes: the whole layer to the store's layers.bf16
            FAKE_CUDA_HOST_ACCESS(g->ssd->whole, p->layer_stride * 2, true,
                                  "the host writing the bf16 copy (load)");
            convert_f32_to_bf16(layer, g->ssd->whole, p->layer_stride);
            if (ssd_store_write_whole_bf16(st, l - R, g->ssd->whole, err, sizeof err) != 0)
                die("-sd %s: %s", dir, err);
        }
        if (g->ssd->weights_on_disk) continue;  // the store wrote their bf16 copy (-sw 1)
        uint16_t* bf16 = g->stream.weights_host_bf16 + gpt_layer_offset(p, l);
        FAKE_CUDA_HOST_ACCESS(bf16, p->layer_stride * 2, true, "the host writing the bf16 copy (load)");
        convert_f32_to_bf16(layer, bf16, p->layer_stride);
    }
    free(layer);
    sw_publish_gen(g, -1);  // -sw 1 on several ranks: where they read each layer
    if (r->ga.timeline) ssd_io_log_busy(ssd_store_io(st), 1);  // the timeline's disk tracks
    if (!g->ssd_ranks) ssd_tier_start_writer(g);               // several ranks: no gradients to write
    char how[128] = "created";
    if (from_ram)
        snprintf(how, sizeof how, "created from step %lld's checkpoint (its state file holds all the state)",
                 (long long)r->resume_step);
    if (resume)
        snprintf(how, sizeof how, "resumed at its checkpoint, its checksums verified in %.1f s", verify_s);
    char part_text[96] = "";
    if (nodes)
        snprintf(part_text, sizeof part_text, " (node %d's part: %lld of each layer's %lld)",
                 g->comm->node_rank, (long long)sc.layer_elems, (long long)p->layer_stride);
    printf(
        "SSD tier: %d layers' fp32 weights and AdamW m, v%s%s%s in %s (%.2f GiB on disk, %s; %s); the AdamW "
        "round's ring: %d pieces for its %lld, %.3f GiB of host RAM (-sb)\n",
        sc.num_layers,
        !g->ssd->weights_on_disk || g->ssd->whole ? ""
        : g->sw_gen ? " and bf16 weights (every rank reads them through the page cache)"
                    : " and bf16 weights",
        part_text,
        g->ssd->whole
            ? " and their bf16 weights whole, in layers.bf16 (every rank reads them through the page cache)"
            : "",
        dir, r->plan.ssd_disk / GiB, ssd_io_backend(ssd_store_io(st)), how, sc.ring,
        (long long)(sc.num_layers * ssd_store_layer_pieces(&sc)), r->plan.ssd_ring / GiB);
}

// Llama weights into g->master, then this trainer's order.
static void load_llama_weights(Run* r, GPT* g) {
    if (r->kind == 1) llama_init_params(&r->llama, g->master, INIT_SEED);
    else llama_load_window(r, g->master, 0, g->layout.total);
    llama_trainer_order(&g->layout, g->master);
}

// Builds the model and its weights. -y 1: AdamW state and data position too.
static void build_model(Run* r, GPT* g) {
    char err[4352];
    // CPU AdamW threads: every usable core but adam_threads_beside's
    const int beside = adam_threads_beside(r->ga.ssd_dir != NULL);
    int cores = comm_cpu_cores(r->comm);       // a rank's share of the node's
    if (r->ga.ssd_dir && r->comm->local == 0)  // its round updates whole layers: the node's cores but a core
        cores = std::max(1, usable_cpu_cores() - (r->comm->local_world - 1));  // for each other rank's thread
    r->adam_threads = r->ga.adam_threads > 0 ? r->ga.adam_threads : std::max(1, cores - beside);  // a rank's
    cpu_adam_set_threads(r->adam_threads);
    if (r->ga.ssd_dir) ssd_print_bandwidth(r);  // measured in check_fit (ssd_open_dir)
    gpt_build(g, &r->cfg, r->args.B, r->args.T, r->n_micro, r->ga.num_slots, r->resident, r->kept, &r->args,
              ssd_tier(&r->ga), &r->llama, r->ga.vocab_host > 0, r->comm);
    if (r->ga.ssd_dir && r->comm->local == 0) ssd_attach(r, g);  // either family, one layer at a time
    else if (r->comm->local != 0) {  // several ranks: the node's rank 0 fills its host arrays (and -sd store)
    } else if (r->comm->nodes > 1) {  // several nodes: its parts, a layer at a time
        load_node_weights(r, g);
    } else if (r->llama.num_layers) load_llama_weights(r, g);
    else if (r->kind == 1) gpt_init_params(&r->cfg, g->master, INIT_SEED);
    else if (!gpt_load_params(r->args.model, &r->cfg, g->master, err, sizeof err)) die("%s", err);
    gpt_weights_ready(g);  // several ranks: rank 0 has filled its store
    if (g->sw_gen || (ssd_tier(&r->ga) == TIER_SSD_WEIGHTS && r->comm->nodes > 1)) {
        // -sw 1 on several ranks: every rank reads the store's bf16 files (several nodes: its whole layers')
        g->sw_files = ssd_bf16_files_open(r->ga.ssd_dir, r->cfg.num_layers - g->resident_layers,
                                          g->layout.layer_stride, r->comm->nodes > 1, err, sizeof err);
        if (!g->sw_files) die("-sd %s -sw 1: %s", r->ga.ssd_dir, err);
        if (r->ga.timeline) ssd_io_log_busy(ssd_bf16_files_io(g->sw_files), 1);  // rank 0's disk tracks
        ssd_set_fault_from_env(ssd_bf16_files_io(g->sw_files));
    }
    if (r->ga.timeline) {
        timeline_init(&r->timeline, 8 * r->cfg.num_layers + 64 +
                                        (g->ssd ? (g->sw_files ? 3 : 2) * TIMELINE_DISK_SPANS : 0));
        g->timeline = g->stream.timeline = &r->timeline;
    }
    r->start_step = 0;
    if (r->resume_step < 0) return;
    DataLoaderState data_state;
    load_state(g, r->resume_state, &data_state, resumes_ssd_store(r));
    run_tail_windows(&r->resume_tail, &g->loss_window, &g->norm_window);  // every rank's: the note's
    if (!dataloader_set_state(&r->train, &data_state, err, sizeof err)) die("resume: %s", err);
    r->start_step = (int)g->step;
    g->checkpoint_step = g->step;
    printf("resumed from %s (step %d)\n", r->resume_model, r->start_step);
}
