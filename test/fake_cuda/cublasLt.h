// test/fake_cuda/cublasLt.h — the part of cuBLASLt the trainer uses (one matmul with an epilogue), emulated
// on the CPU for the host-only and emulated builds: D = epilogue(alpha * op(A) op(B) + beta * C),
// column-major, with the epilogues BIAS (+ bias[row], a vector as long as D has rows), GELU_AUX_BIAS (+ bias,
// the sum kept in the aux matrix as bf16, then GELU, tanh form) and DGELU (times GELU'(aux)), as cublasLt.h
// documents them. It refuses what cuBLASLt refuses for these cases: a leading dimension smaller than its
// matrix's rows, sizes that do not chain, an attribute of the wrong size, an aux leading dimension that is
// not a multiple of 8 or smaller than D's rows, a bias or aux pointer missing for an epilogue that needs it,
// a matrix less aligned than the preference's MIN_ALIGNMENT promised (256 bytes unless set, as in cuBLASLt).
// A call is an operation on its stream for cuda_runtime.h's ordering model (A, B, C, bias read; D and a
// GELU_AUX_BIAS aux written); the workspace is accepted and ignored.
// FAKE_CUBLASLT_REFUSE=heuristic: the heuristic finds no algorithm; =matmul: cublasLtMatmul refuses the one
// it found (CUBLAS_STATUS_NOT_SUPPORTED), as a real cuBLASLt may on some GPU and driver. Read at each call.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include "cublas_v2.h"

typedef cudaDataType cudaDataType_t;
typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4,
    CUBLASLT_EPILOGUE_DGELU = 64 | 128,
} cublasLtEpilogue_t;
typedef enum {
    CUBLASLT_MATMUL_DESC_TRANSA = 3,
    CUBLASLT_MATMUL_DESC_TRANSB = 4,
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
} cublasLtMatmulDescAttributes_t;
typedef enum {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
} cublasLtMatmulPreferenceAttributes_t;

struct FakeLtHandle {
    int unused;
};
struct FakeLtDesc {
    int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
    uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void* bias = nullptr;
    void* aux = nullptr;
    int64_t aux_ld = 0;
};
struct FakeLtLayout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
};
struct FakeLtPreference {
    uint64_t workspace = 0;
    uint32_t align[4] = {256, 256, 256, 256};
};  // A, B, C, D
typedef FakeLtHandle* cublasLtHandle_t;
typedef FakeLtDesc* cublasLtMatmulDesc_t;
typedef FakeLtLayout* cublasLtMatrixLayout_t;
typedef FakeLtPreference* cublasLtMatmulPreference_t;
typedef struct {
    uint64_t data[8];
} cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
    *h = new FakeLtHandle();
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t ct,
                                               cudaDataType_t scale) {
    if (ct != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    *d = new FakeLtDesc();
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                                     cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                     size_t size) {
    switch (attr) {  // each attribute's documented type; a wrong size is CUBLAS_STATUS_INVALID_VALUE
        case CUBLASLT_MATMUL_DESC_TRANSA:
            if (size != 4) return CUBLAS_STATUS_INVALID_VALUE;
            memcpy(&d->transa, buf, 4);
            break;
        case CUBLASLT_MATMUL_DESC_TRANSB:
            if (size != 4) return CUBLAS_STATUS_INVALID_VALUE;
            memcpy(&d->transb, buf, 4);
            break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE:
            if (size != 4) return CUBLAS_STATUS_INVALID_VALUE;
            memcpy(&d->epilogue, buf, 4);
            break;
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
            if (size != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE;
            memcpy(&d->bias, buf, size);
            break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
            if (size != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE;
            memcpy(&d->aux, buf, size);
            break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
            if (size != 8) return CUBLAS_STATUS_INVALID_VALUE;
            memcpy(&d->aux_ld, buf, 8);
            break;
        default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows,
                                                 uint64_t cols, int64_t ld) {
    if (rows == 0 || cols == 0 || ld < (int64_t)rows) return CUBLAS_STATUS_INVALID_VALUE;
    *l = new FakeLtLayout{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
    *p = new FakeLtPreference();
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                           cublasLtMatmulPreferenceAttributes_t attr,
                                                           const void* buf, size_t size) {
    if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && size == 8) {
        memcpy(&p->workspace, buf, 8);
        return CUBLAS_STATUS_SUCCESS;
    }
    if (attr >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES &&
        attr <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES && size == 4) {
        memcpy(&p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, 4);
        return CUBLAS_STATUS_SUCCESS;
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}

namespace fake_cublaslt {
// FAKE_CUBLASLT_REFUSE names `what` (heuristic or matmul)
inline bool refuses(const char* what) {
    const char* e = getenv("FAKE_CUBLASLT_REFUSE");
    return e && strcmp(e, what) == 0;
}
// the problem the descriptors describe is well formed: op(A) m x k, op(B) k x n, C and D m x n,
// epilogue inputs set
inline bool valid(const FakeLtDesc* d, const FakeLtLayout* a, const FakeLtLayout* b, const FakeLtLayout* c,
                  const FakeLtLayout* dd) {
    const uint64_t m = d->transa == CUBLAS_OP_N ? a->rows : a->cols,
                   ka = d->transa == CUBLAS_OP_N ? a->cols : a->rows;
    const uint64_t kb = d->transb == CUBLAS_OP_N ? b->rows : b->cols,
                   n = d->transb == CUBLAS_OP_N ? b->cols : b->rows;
    if (ka != kb || dd->rows != m || dd->cols != n || c->rows != m || c->cols != n || c->ld != dd->ld)
        return false;
    const bool needs_bias =
        d->epilogue == CUBLASLT_EPILOGUE_BIAS || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    const bool needs_aux =
        d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || d->epilogue == CUBLASLT_EPILOGUE_DGELU;
    if (needs_bias && !d->bias) return false;
    if (needs_aux && (!d->aux || d->aux_ld % 8 != 0 || d->aux_ld < (int64_t)m)) return false;
    return d->epilogue == CUBLASLT_EPILOGUE_DEFAULT || needs_bias || needs_aux;
}
inline double gelu(double x) {
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
inline double gelu_grad(double x) {
    const double th = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}
}  // namespace fake_cublaslt

// The algorithm "chosen" records the alignments the preference promised: cublasLtMatmul refuses pointers less
// aligned than that (a real algorithm may need them), so a caller that over-promises fails here too.
inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d,
                                                     cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                     cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd,
                                                     cublasLtMatmulPreference_t pref, int requested,
                                                     cublasLtMatmulHeuristicResult_t* results,
                                                     int* returned) {
    *returned = 0;
    if (requested < 1 || !fake_cublaslt::valid(d, a, b, c, dd)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (fake_cublaslt::refuses("heuristic")) return CUBLAS_STATUS_NOT_SUPPORTED;  // none found, 0 returned
    memset(&results[0], 0, sizeof results[0]);
    for (int i = 0; i < 4; i++) results[0].algo.data[i] = pref->align[i];
    results[0].state = CUBLAS_STATUS_SUCCESS;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void* alpha,
                                     const void* A, cublasLtMatrixLayout_t a, const void* B,
                                     cublasLtMatrixLayout_t b, const void* beta, const void* C,
                                     cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t dd,
                                     const cublasLtMatmulAlgo_t* algo, void*, size_t, cudaStream_t stream) {
    if (fake_cublaslt::refuses("matmul")) return CUBLAS_STATUS_NOT_SUPPORTED;  // nothing queued
    const FakeDeviceAccess acc[6] = {{A, false},
                                     {B, false},
                                     {C, false},
                                     {d->bias, false},
                                     {d->aux, d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS},
                                     {D, true}};
    fake_cuda_device_op(stream, "a cuBLASLt matmul", acc, 6);
    if (!algo || !fake_cublaslt::valid(d, a, b, c, dd)) return CUBLAS_STATUS_INVALID_VALUE;
    const void* ptrs[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++)
        if ((uintptr_t)ptrs[i] % algo->data[i] != 0)
            return CUBLAS_STATUS_INVALID_VALUE;  // less aligned than promised
    const int m = (int)dd->rows, n = (int)dd->cols, k = (int)(d->transa == CUBLAS_OP_N ? a->cols : a->rows);
    const double al = *(const float*)alpha, be = *(const float*)beta;
    // queued on the stream with copies of the descriptors (the caller may change or destroy them meanwhile)
    fake_cuda::submit(stream, [=, d = *d, a = *a, b = *b, c = *c, dd = *dd] {
        FAKE_CUDA_DEVICE_ACCESS;
        std::vector<float> ab((size_t)m * n);
        // alpha * op(A) op(B) through the plain GEMM emulation (fp32 result, beta 0), then beta * C
        // and the epilogue
        const float one = 1.0f, zero = 0.0f;
        const cublasStatus_t st =
            cublasGemmEx(nullptr, (cublasOperation_t)d.transa, (cublasOperation_t)d.transb, m, n, k, &one, A,
                         a.type, (int)a.ld, B, b.type, (int)b.ld, &zero, ab.data(), CUDA_R_32F, m,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS) abort();  // valid() checked these sizes above
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                const int64_t di = i + (int64_t)j * dd.ld, ai = i + (int64_t)j * d.aux_ld;
                double x = al * ab[(size_t)i + (size_t)j * m] +
                           (be != 0.0 ? be * fake_cublas::load(C, c.type, di) : 0.0);
                if (d.epilogue == CUBLASLT_EPILOGUE_BIAS) {
                    x += fake_cublas::load(d.bias, dd.type, i);
                } else if (d.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
                    x += fake_cublas::load(d.bias, dd.type, i);
                    fake_cublas::store(d.aux, dd.type, ai, x);  // the GELU input, in D's type
                    x = fake_cublaslt::gelu(x);
                } else if (d.epilogue == CUBLASLT_EPILOGUE_DGELU) {
                    x *= fake_cublaslt::gelu_grad(fake_cublas::load(d.aux, dd.type, ai));
                }
                fake_cublas::store(D, dd.type, di, x);
            }
    });
    return CUBLAS_STATUS_SUCCESS;
}
