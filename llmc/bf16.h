// bf16.h — scalar bf16 <-> float on the host; a bf16 is a uint16_t, a float's upper half.
// Not here: the vectorized conversion (cpu_adam.h), the GPU's (cuda_common.h).
#pragma once
#include <stdint.h>
#include <string.h>

// float -> bf16, round to nearest even; NaN stays NaN, overflow is +-Inf.
// convert_f32_to_bf16 and adamw_update_* give the same bits.
static inline uint16_t float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x0040u);  // NaN: keep it, make it quiet
    u += 0x7FFFu + ((u >> 16) & 1u);  // below half an ulp: truncates; above: carries; exactly half: to even
    return (uint16_t)(u >> 16);
}

// bf16 -> float is exact: the bf16 bits are the upper half of the float.
static inline float bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
