// hf_logits.cpp — test helper for test/hf_check.py: loads a model the way the trainers do (-e: an llm.c model
// file or a Hugging Face checkpoint, through model.h / hf.h), runs the CPU reference forward pass
// (gpt2_cpu.h) on the token ids given and writes the logits as raw float32, T rows of V.
//   build/hf_logits <model> <out.f32> <id> [<id> ...]
// It does not train or sample; the comparison with transformers is the Python script's.
#include <stdio.h>
#include <stdlib.h>
#include <vector>
#include "llmc/gpt2_cpu.h"
#include "llmc/model_file.h"  // defines: gpt_read_header, gpt_load_params, and model.h

int main(int argc, char** argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s <model> <out.f32> <id> [<id> ...]\n", argv[0]);
        return 2;
    }
    char err[4352];
    GPTConfig cfg;
    if (!gpt_read_header(argv[1], &cfg, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    const int T = argc - 3;
    std::vector<int> ids(T);
    for (int i = 0; i < T; i++) ids[i] = atoi(argv[3 + i]);
    GPT2CPU model;
    if (!gpt2_cpu_build(&model, &cfg) || !gpt2_cpu_layout_activations(&model, 1, T)) {
        fprintf(stderr, "error: %s\n", model.error);
        return 1;
    }
    if (!gpt_load_params(argv[1], &cfg, model.params, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    if (!gpt2_cpu_forward(&model, ids.data(), NULL, 1, T)) {
        fprintf(stderr, "error: %s\n", model.error);
        return 1;
    }
    FILE* f = fopen(argv[2], "wb");
    bool ok = f != NULL;
    for (int t = 0; t < T && ok; t++)
        ok = fwrite(model.acts.logits + (int64_t)t * cfg.padded_vocab_size, 4, (size_t)cfg.vocab_size, f) ==
             (size_t)cfg.vocab_size;
    if (!f || fclose(f) != 0 || !ok) {
        fprintf(stderr, "error: cannot write %s\n", argv[2]);
        return 1;
    }
    printf("L%d C%d NH%d maxT%d V%d: %d positions\n", cfg.num_layers, cfg.channels, cfg.num_heads,
           cfg.max_seq_len, cfg.vocab_size, T);
    return 0;
}
