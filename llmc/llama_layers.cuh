// llama_layers.cuh — Llama 3 and Qwen2 layers, head and embeddings on the GPU.
// Each function mirrors its fp32 twin in llama_cpu.h. GPT-2's functions defer here when is_llama.
// Not here: kernels, the step, buffers (llmc/memory_plan.cuh), optimizers.

// N = B*T tokens, C channels, NH query and NKV key/value heads of hd.

// pos: chat data's positions on the GPU, or NULL: t = row % T.
#pragma once
#include "llmc/gpt.cuh"             // defines: GPT, LayerActs, llama_layer_params, llama_embed_params
#include "llmc/attention_path.cuh"  // defines: attention_forward_path, attention_backward_path (GQA: NKV)
#include "llmc/kernels.cuh"         // defines: fused_classifier, bias_backward
#include "llmc/llama_kernels.cuh"  // defines: rmsnorm_forward, rmsnorm_backward, rope_forward, swiglu_forward
#include "llmc/matmul.cuh"         // defines: matmul_forward, matmul_forward_bias, matmul_backward_*

typedef LlamaLayerParams<const bf16> LlamaLayerWeights;
typedef LlamaLayerParams<float> LlamaLayerGrads;

// ----------------------------------------------------------------------------
// CUDA kernels: token embedding, no positions (RoPE has them)

// out[i] = embed[tokens[i]]
__global__ void token_embedding_forward_kernel(bf16* out, const int* tokens, const bf16* embed, int64_t N,
                                               int C) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N * C;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = embed[(int64_t)tokens[i / C] * C + i % C];
}
// dembed[tokens[i]] += dout[i], atomic: tokens repeat
__global__ void token_embedding_backward_kernel(float* dembed, const bf16* dout, const int* tokens, int64_t N,
                                                int C) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N * C;
         i += (int64_t)gridDim.x * blockDim.x)
        atomicAdd(&dembed[(int64_t)tokens[i / C] * C + i % C], (float)dout[i]);
}

// the residual, for an unfused GEMM's beta = 1 sum
__global__ void copy_bf16_kernel(bf16* out, const bf16* in, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = in[i];
}

// ----------------------------------------------------------------------------
// kernel launchers

static void llama_embedding_forward(GPT* g, bf16* out, const int* tokens, cudaStream_t s) {
    const int64_t N = (int64_t)g->B * g->T;
    const int C = g->llama.hidden_size;
    const LlamaEmbedParams<const bf16> e = llama_embed_params(&g->layout, (const bf16*)g->resident);
    token_embedding_forward_kernel<<<grid_for(N * C, 256), 256, 0, s>>>(out, tokens, e.embed, N, C);
    cudaCheckLaunch();
}
static void llama_embedding_backward(GPT* g, const bf16* dout, const int* tokens, cudaStream_t s) {
    const int64_t N = (int64_t)g->B * g->T;
    const int C = g->llama.hidden_size;
    const LlamaEmbedParams<float> de = llama_embed_params(&g->layout, g->resident_grads);
    token_embedding_backward_kernel<<<grid_for(N * C, 256), 256, 0, s>>>(de.embed, dout, tokens, N, C);
    cudaCheckLaunch();
}

// out = inp @ w^T + residual (cuBLASLt's C term), residual != out
static void matmul_forward_residual(bf16* out, const bf16* inp, const bf16* w, const bf16* residual,
                                    int64_t N, int C, int OC, cudaStream_t s) {
    if (lt_matmul(out, OC, w, CUBLAS_OP_T, C, inp, CUBLAS_OP_N, C, OC, (int)N, C, residual,
                  CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0, s))
        return;
    lt_fell_back("a GEMM + residual");
    copy_bf16_kernel<<<grid_for(N * OC, 256), 256, 0, s>>>(out, residual, N * OC);
    cudaCheckLaunch();
    const float one = 1.0f;
    cublas_use_stream(s);
    cublasCheck(cublasGemmEx(cublas_handle, CUBLAS_OP_T, CUBLAS_OP_N, OC, (int)N, C, &one, w, CUDA_R_16BF, C,
                             inp, CUDA_R_16BF, C, &one, out, CUDA_R_16BF, OC, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT));
}

// ----------------------------------------------------------------------------
// One layer forward, as llama_cpu.h's llama_cpu_forward:
//   h   = x + wo(attention(rope(wq rms1(x) + bq), rope(wk rms1(x) + bk), wv rms1(x) + bv))
//   out = h + w_down(silu(w_gate rms2(h)) * w_up rms2(h))

static void llama_layer_forward(GPT* g, const bf16* weights, const bf16* x, bf16* out, LayerActs* a,
                                const int* pos, cudaStream_t s) {
    const LlamaConfig* c = &g->llama;
    const int B = g->B, T = g->T, C = c->hidden_size, NH = c->num_heads, NKV = c->num_kv_heads;
    const int hd = c->head_dim, I = c->intermediate_size, QD = NH * hd, QKV = QD + 2 * NKV * hd;
    const float eps = c->rms_norm_eps;
    const int64_t N = (int64_t)B * T;
    const LlamaLayerWeights w = llama_layer_params(&g->layout, weights);
    bf16* res2 = a->residual2;
    // attention: wq holds [wq; wk; wv], bq [bq; bk; bv] or NULL
    rmsnorm_forward(a->rms1, a->rms1_rstd, x, w.attn_norm, N, C, eps, s);
    if (w.bq) matmul_forward_bias(a->qkv, a->rms1, w.wq, w.bq, NULL, N, C, QKV, s);
    else matmul_forward(a->qkv, a->rms1, w.wq, N, C, QKV, s);
    rope_forward(a->qkv, g->rope_inv_freq, N, T, NH, NKV, hd, s, pos);  // q and k heads, in place
    attention_forward_path(g->attn_path, a->atty, a->att_lse, a->att, a->qkv, B, T, NH, NKV, hd, pos,
                           attn_micro_of(g, pos), s);
    matmul_forward_residual(res2, a->atty, w.wo, x, N, QD, C, s);  // wo + layer input
    // MLP branch; w_gate is [w_gate; w_up]
    rmsnorm_forward(a->rms2, a->rms2_rstd, res2, w.mlp_norm, N, C, eps, s);
    matmul_forward(a->gate_up, a->rms2, w.w_gate, N, C, 2 * I, s);
    swiglu_forward(a->swiglu, a->gate_up, N, I, s);
    if (out) matmul_forward_residual(out, a->swiglu, w.w_down, res2, N, I, C, s);  // out NULL: a recompute
}

// -K layers redo their RMSNorms and SwiGLU before backward.
static void llama_layer_redo_cheap_part(GPT* g, const bf16* weights, const bf16* x, LayerActs* a,
                                        cudaStream_t s) {
    const LlamaConfig* c = &g->llama;
    const int64_t N = (int64_t)g->B * g->T;
    const int C = c->hidden_size;
    const LlamaLayerWeights w = llama_layer_params(&g->layout, weights);
    rmsnorm_forward(a->rms1, a->rms1_rstd, x, w.attn_norm, N, C, c->rms_norm_eps, s);
    rmsnorm_forward(a->rms2, a->rms2_rstd, a->residual2, w.mlp_norm, N, C, c->rms_norm_eps, s);
    swiglu_forward(a->swiglu, a->gate_up, N, c->intermediate_size, s);
}

// ----------------------------------------------------------------------------
// One layer backward, as llama_cpu_backward. `a` holds its activations.
// dres: output gradient in, input gradient out. grads: +=.

static void llama_layer_backward(GPT* g, const bf16* weights, float* grads, const bf16* x, bf16* dres,
                                 LayerActs* a, const int* pos, cudaStream_t s) {
    const LlamaConfig* c = &g->llama;
    const int B = g->B, T = g->T, C = c->hidden_size, NH = c->num_heads, NKV = c->num_kv_heads;
    const int hd = c->head_dim, I = c->intermediate_size, QD = NH * hd, QKV = QD + 2 * NKV * hd;
    const int64_t N = (int64_t)B * T;
    const LlamaLayerWeights w = llama_layer_params(&g->layout, weights);
    const LlamaLayerGrads dw = llama_layer_params(&g->layout, grads);
    const bf16* res2 = a->residual2;
    // MLP branch: res3 = res2 + w_down(silu(w_gate rms2(res2)) * w_up rms2(res2))
    matmul_backward_weight(dw.w_down, dres, a->swiglu, N, I, C, s);
    matmul_backward_input(a->dswiglu, dres, w.w_down, N, I, C, s);
    swiglu_backward(a->dgate_up, a->dswiglu, a->gate_up, N, I, s);
    matmul_backward_weight(dw.w_gate, a->dgate_up, a->rms2, N, C, 2 * I, s);  // w_gate and w_up
    matmul_backward_input(a->dln, a->dgate_up, w.w_gate, N, C, 2 * I, s);
    rmsnorm_backward(dres, dw.mlp_norm, a->dln, res2, w.mlp_norm, a->rms2_rstd, N, C, s);
    // attention branch: res2 = x + wo(attention(rope(q), rope(k), v))
    matmul_backward_weight(dw.wo, dres, a->atty, N, QD, C, s);
    matmul_backward_input(a->datty, dres, w.wo, N, QD, C, s);
    attention_backward_path(g->attn_path, a->dqkv, a->att_dsum, a->datt, a->datty, a->atty, a->att, a->qkv,
                            a->att_lse, B, T, NH, NKV, hd, pos, attn_micro_of(g, pos), s);
    rope_backward(a->dqkv, g->rope_inv_freq, N, T, NH, NKV, hd, s, pos);  // dq, dk rotated back
    matmul_backward_weight(dw.wq, a->dqkv, a->rms1, N, C, QKV, s);        // wq, wk, wv
    if (dw.bq) bias_backward(dw.bq, a->dqkv, N, QKV, s);                  // bq, bk, bv
    matmul_backward_input(a->dln, a->dqkv, w.wq, N, C, QKV, s);
    rmsnorm_backward(dres, dw.attn_norm, a->dln, x, w.attn_norm, a->rms1_rstd, N, C, s);
}

// ----------------------------------------------------------------------------
// Head: final RMSNorm, lm_head (tied: the embedding), loss.

static void llama_head_forward(GPT* g, const bf16* x, const int* targets, float* losses, float dloss_scale,
                               cudaStream_t s) {
    const int64_t N = (int64_t)g->B * g->T;
    const int C = g->llama.hidden_size, V = g->llama.vocab_size;
    LayerActs* a = &g->acts;
    const LlamaEmbedParams<const bf16> e = llama_embed_params(&g->layout, (const bf16*)g->resident);
    rmsnorm_forward(a->lnf, a->lnf_rstd, x, e.final_norm, N, C, g->llama.rms_norm_eps, s);
    matmul_forward(a->logits, a->lnf, e.lm_head, N, C, V, s);
    if (targets) fused_classifier(a->logits, losses, targets, N, V, V, dloss_scale, s);
}

// logits hold their gradient (fused_classifier). Overwrites dres.
static void llama_head_backward(GPT* g, const bf16* x, bf16* dres, cudaStream_t s) {
    const int64_t N = (int64_t)g->B * g->T;
    const int C = g->llama.hidden_size, V = g->llama.vocab_size;
    LayerActs* a = &g->acts;
    const LlamaEmbedParams<const bf16> e = llama_embed_params(&g->layout, (const bf16*)g->resident);
    const LlamaEmbedParams<float> de = llama_embed_params(&g->layout, g->resident_grads);
    matmul_backward_weight(de.lm_head, a->logits, a->lnf, N, C, V, s);
    matmul_backward_input(a->dlnf, a->logits, e.lm_head, N, C, V, s);
    cudaCheck(cudaMemsetAsync(dres, 0, (size_t)(N * C * 2), s));
    rmsnorm_backward(dres, de.final_norm, a->dlnf, x, e.final_norm, a->lnf_rstd, N, C, s);
}
