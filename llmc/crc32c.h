// crc32c.h — CRC-32C, every checkpoint file's checksum (ext4's: "123456789" -> e3069283).
// Catches corruption, not tampering.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <string.h>

// Slicing-by-8 tables (reflected polynomial 0x82f63b78), built on first use.
static inline const uint32_t (*crc32c_tables(void))[256] {
    static uint32_t t[8][256];
    static int ready = 0;
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
            t[0][i] = c;
        }
        for (int s = 1; s < 8; s++)
            for (int i = 0; i < 256; i++) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
        ready = 1;
    }
    return t;
}

// Same function as crc32c_update, for any CPU.
static inline uint32_t crc32c_portable(uint32_t crc, const void* data, size_t n) {
    const unsigned char* p = (const unsigned char*)data;
    uint32_t c = ~crc;
    const uint32_t(*t)[256] = crc32c_tables();
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);  // little-endian only, as the checkpoint files
        w ^= c;
        c = t[7][w & 0xff] ^ t[6][(w >> 8) & 0xff] ^ t[5][(w >> 16) & 0xff] ^ t[4][(w >> 24) & 0xff] ^
            t[3][(w >> 32) & 0xff] ^ t[2][(w >> 40) & 0xff] ^ t[1][(w >> 48) & 0xff] ^ t[0][w >> 56];
    }
    for (; n > 0; n--, p++) c = (c >> 8) ^ t[0][(c ^ *p) & 0xff];
    return ~c;
}

#if defined(__SSE4_2__) && defined(__x86_64__)
// 3 independent lanes hide crc32's 3-cycle latency.
// A tabulated shift joins them: CRC is linear over GF(2).
#define CRC32C_LANE 4096
static inline uint64_t crc32c_hw_run(uint64_t c, const unsigned char* p, size_t n) {
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
    }
    for (; n > 0; n--, p++) c = __builtin_ia32_crc32qi((uint32_t)c, *p);
    return c;
}
static inline const uint32_t (*crc32c_shift_tables(void))[256] {
    static uint32_t t[4][256];
    static int ready = 0;
    if (!ready) {
        static const unsigned char zeros[CRC32C_LANE] = {0};
        uint32_t basis[32];
        for (int i = 0; i < 32; i++) basis[i] = (uint32_t)crc32c_hw_run(1u << i, zeros, CRC32C_LANE);
        for (int k = 0; k < 4; k++)
            for (int b = 0; b < 256; b++) {
                uint32_t v = 0;
                for (int i = 0; i < 8; i++)
                    if (b >> i & 1) v ^= basis[8 * k + i];
                t[k][b] = v;
            }
        ready = 1;
    }
    return t;
}
static inline uint32_t crc32c_shift(uint32_t c, const uint32_t (*t)[256]) {
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
}
#endif

// Extends crc (start at 0): crc32c(a + b) = update(update(0, a), b).
static inline uint32_t crc32c_update(uint32_t crc, const void* data, size_t n) {
#if defined(__SSE4_2__) && defined(__x86_64__)
    const unsigned char* p = (const unsigned char*)data;
    uint64_t c = (uint32_t)~crc;
    if (n >= 3 * CRC32C_LANE) {
        const uint32_t(*t)[256] = crc32c_shift_tables();
        for (; n >= 3 * CRC32C_LANE; n -= 3 * CRC32C_LANE, p += 3 * CRC32C_LANE) {
            uint64_t a = c, b = 0, d = 0;
            for (size_t i = 0; i < CRC32C_LANE; i += 8) {  // three independent chains, interleaved
                uint64_t wa, wb, wd;
                memcpy(&wa, p + i, 8);
                memcpy(&wb, p + CRC32C_LANE + i, 8);
                memcpy(&wd, p + 2 * CRC32C_LANE + i, 8);
                a = __builtin_ia32_crc32di(a, wa);
                b = __builtin_ia32_crc32di(b, wb);
                d = __builtin_ia32_crc32di(d, wd);
            }
            c = crc32c_shift(crc32c_shift((uint32_t)a, t) ^ (uint32_t)b, t) ^ (uint32_t)d;
        }
    }
    return ~(uint32_t)crc32c_hw_run(c, p, n);
#else
    return crc32c_portable(crc, data, n);
#endif
}

// Which implementation this build uses (for the benchmark's line).
static inline const char* crc32c_impl_name(void) {
#if defined(__SSE4_2__) && defined(__x86_64__)
    return "SSE4.2 crc32 instruction";
#else
    return "table (slicing by 8)";
#endif
}
