// test_layouts.h — two layouts the attention tests build their cases from (CPU and GPU suites alike): a
// matrix's column block as a matrix of its own (q, k, v out of a fused row), and the positions of rows packed
// with conversations. No checks here.
#pragma once
#include <stdint.h>
#include <vector>

// Columns [c0, c0 + width) of each row of a (rows, row_width) matrix, as a (rows, width) one.
inline std::vector<float> columns(const std::vector<float>& m, int64_t rows, int64_t row_width, int64_t c0,
                                  int64_t width) {
    std::vector<float> out((size_t)(rows * width));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < width; c++)
            out[(size_t)(r * width + c)] = m[(size_t)(r * row_width + c0 + c)];
    return out;
}

// Positions of B rows of T packed with conversations of the given lengths, in turn (each row starts at
// another length).
inline std::vector<int> packed_positions(int B, int T, const std::vector<int>& lengths) {
    std::vector<int> pos((size_t)B * T);
    for (int b = 0; b < B; b++) {
        int k = b, p = 0;
        for (int t = 0; t < T; t++) {
            if (p == lengths[(size_t)k % lengths.size()]) p = 0, k++;
            pos[(size_t)b * T + t] = p++;
        }
    }
    return pos;
}
