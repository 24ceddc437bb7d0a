// test/fake_cuda/cuda_bf16.h — the bf16 type's storage, for host-only tests that include cuda_common.h.
#pragma once
#include <stdint.h>
typedef struct { uint16_t x; } __nv_bfloat16;
