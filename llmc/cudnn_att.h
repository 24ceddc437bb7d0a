// cudnn_att.h — cuDNN's fused attention (SDPA) as the trainers' third attention path, loaded at run time.
// q, k, v are strided views into the qkv buffer, dq, dk, dv written into dqkv; GQA native; packed chat rows
// as ragged (THD) sequences. Graphs are built once per shape and cached (llm.c's llmc/cudnn_att.cpp). Not
// here: choosing the path or checking its numbers (attention_path.cuh), our own kernels. Built without
// cudnn-frontend's headers, every call reports "not built with cuDNN"; the emulated build (make test) has a
// stand-in that runs the graphs' semantics, when LLMC_FAKE_CUDNN=1 (test/fake_cuda/fake_cudnn.h).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cuda_runtime.h>  // defines: cudaStream_t
#include "ragged.h"        // defines: RaggedMeta (a micro-batch's sequences on the GPU)

// One attention shape. seqs 0: B dense rows of T tokens. seqs > 0: the B*T tokens as `seqs` ragged sequences
// (a bucket: a power of two at least the micro-batch's count; unused ones have length 0), each within T.
typedef struct {
    int B, T, NH, NKV, hs, seqs;
} CudnnAttShape;

#ifdef ENABLE_CUDNN
static inline bool cudnn_att_built() { return true; }
// Loads libcudnn (LLMC_CUDNN_LIB, the loader's path, the CUDA toolkit, Python wheels' nvidia/cudnn/lib),
// checks its version and makes a handle. false, with the reason in why, if any of it fails.
bool cudnn_att_open(char* why, size_t n);
const char* cudnn_att_library();  // the file loaded, or ""
long cudnn_att_version();         // e.g. 91900; 0 before cudnn_att_open succeeds
// Builds (or finds) the forward and backward graphs of a shape; false with why if cuDNN cannot run them.
bool cudnn_att_prepare(const CudnnAttShape* s, char* why, size_t n);
// The largest workspace of the graphs prepared so far, in bytes.
int64_t cudnn_att_workspace_need();
// One shape's graphs' workspace (the larger of forward and backward), preparing them; -1 with why if cuDNN
// cannot run the shape.
int64_t cudnn_att_workspace_of(const CudnnAttShape* s, char* why, size_t n);
// Before the plan: our own workspace as large as every graph prepared so far needs; false with why.
bool cudnn_att_reserve_workspace(char* why, size_t n);
// The workspace the memory plan allocated; a shape prepared later that needs more fails (its micro-batch runs
// our kernel), so GPU memory stays what the plan says.
void cudnn_att_use_workspace(void* p, int64_t bytes);
void cudnn_att_free_own_workspace();
// out (B*T, NH*hs) bf16, stats (per token and query head) fp32, qkv (B*T, (NH + 2 NKV) hs) bf16.
bool cudnn_att_forward(void* out, float* stats, const void* qkv, const CudnnAttShape* s, const RaggedMeta* r,
                       cudaStream_t stream, char* why, size_t n);
// dqkv overwritten: dq, dk, dv (dk, dv summed over each kv head's query heads).
bool cudnn_att_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* stats,
                        const CudnnAttShape* s, const RaggedMeta* r, cudaStream_t stream, char* why,
                        size_t n);
#elif defined(FAKE_CUDA_DEVICE)
#include "fake_cudnn.h"  // the CUDA emulation's stand-in (test/fake_cuda): off unless LLMC_FAKE_CUDNN=1
#else
static inline bool cudnn_att_built() { return false; }
static inline bool cudnn_att_unbuilt(char* why, size_t n) {
    snprintf(why, n, "this build has no cuDNN path (cudnn-frontend's headers were missing at build time)");
    return false;
}
static inline bool cudnn_att_open(char* why, size_t n) { return cudnn_att_unbuilt(why, n); }
static inline const char* cudnn_att_library() { return ""; }
static inline long cudnn_att_version() { return 0; }
static inline bool cudnn_att_prepare(const CudnnAttShape*, char* why, size_t n) {
    return cudnn_att_unbuilt(why, n);
}
static inline int64_t cudnn_att_workspace_need() { return 0; }
static inline int64_t cudnn_att_workspace_of(const CudnnAttShape*, char* why, size_t n) {
    return cudnn_att_unbuilt(why, n) ? 0 : -1;
}
static inline bool cudnn_att_reserve_workspace(char* why, size_t n) { return cudnn_att_unbuilt(why, n); }
static inline void cudnn_att_use_workspace(void*, int64_t) {}
static inline void cudnn_att_free_own_workspace() {}
static inline bool cudnn_att_forward(void*, float*, const void*, const CudnnAttShape*, const RaggedMeta*,
                                     cudaStream_t, char* why, size_t n) {
    return cudnn_att_unbuilt(why, n);
}
static inline bool cudnn_att_backward(void*, const void*, const void*, const void*, const float*,
                                      const CudnnAttShape*, const RaggedMeta*, cudaStream_t, char* why,
                                      size_t n) {
    return cudnn_att_unbuilt(why, n);
}
#endif
