// test/fake_cuda/cuda_bf16.h — the bf16 type for host-only tests that include cuda_common.h: its storage,
// the explicit conversion to float and __float2bfloat16 (round to nearest even), as the GPU does them.
#pragma once
#include <stdint.h>
#include <string.h>
struct __nv_bfloat16 {
    uint16_t x;
    explicit operator float() const {
        uint32_t u = (uint32_t)x << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
};
// round to nearest even; NaN stays NaN (quiet), as the GPU's conversion
inline __nv_bfloat16 __float2bfloat16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 r;
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
        r.x = (uint16_t)((u >> 16) | 0x0040u);
        return r;
    }
    u += 0x7FFFu + ((u >> 16) & 1u);
    r.x = (uint16_t)(u >> 16);
    return r;
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) {
    __nv_bfloat16 h;
    h.x = u;
    return h;
}
