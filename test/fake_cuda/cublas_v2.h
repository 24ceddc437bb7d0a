// test/fake_cuda/cublas_v2.h — the two cuBLAS names cuda_common.h refers to, for host-only tests.
#pragma once
typedef enum { CUBLAS_STATUS_SUCCESS = 0 } cublasStatus_t;
inline const char* cublasGetStatusString(cublasStatus_t) { return "fake"; }
