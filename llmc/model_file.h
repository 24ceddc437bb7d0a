// model_file.h — llm.c (model.h) or Hugging Face (hf.h) model files, by path.
#pragma once
#include "hf.h"     // defines: hf_is_checkpoint, hf_read_config, hf_load_params
#include "model.h"  // defines: GPTConfig, llmc_read_header, llmc_load_params

// Config from the header, size checked; 0 with err.
static inline int gpt_read_header(const char* path, GPTConfig* cfg, char* err, size_t errlen) {
    if (hf_is_checkpoint(path)) return hf_read_config(path, cfg, err, errlen);
    return llmc_read_header(path, cfg, err, errlen);
}
// Weights into params, layout order; [lo, hi): just that window.
static inline int gpt_load_params(const char* path, const GPTConfig* cfg, float* params, char* err,
                                  size_t errlen, int64_t lo = 0, int64_t hi = INT64_MAX) {
    if (hf_is_checkpoint(path)) return hf_load_params(path, cfg, params, err, errlen, lo, hi);
    return llmc_load_params(path, cfg, params, err, errlen, lo, hi);
}
