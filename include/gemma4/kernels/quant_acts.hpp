// The activations of a Q8/Q4 linear call, quantized once to int8 per block of the weights'
// block size (32 or 64 elements; scale max|x|/127), and the layouts the panel kernels of every instruction-set level read them in.
// Each block's dot product with a weight block is then exact in int32, and every kernel computes
// y = Σ_b isum_b · (w_scale_b · x_scale_b) over the blocks in order, one multiply-add per block.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/kernels/rows.hpp>
#include <gemma4/tensor/quant.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

namespace gemma4::inline GEMMA4_ABI::detail {

/// Activations of one call, int8 per block of `block` elements.
struct QuantActs {
    std::int64_t tokens = 0, cols = 0, padded = 0, block = 0, blocks = 0;
    std::vector<std::int8_t> q;     ///< [tokens, padded], zeros past cols
    std::vector<float> scale;       ///< [tokens, blocks]
    std::vector<std::int32_t> sum;  ///< [tokens, blocks]: Σ q over the block

    const std::int8_t* q_row(std::int64_t t) const { return q.data() + t * padded; }
    const float* scale_row(std::int64_t t) const { return scale.data() + t * blocks; }
    const std::int32_t* sum_row(std::int64_t t) const { return sum.data() + t * blocks; }
};

/// Sizes `a` for tokens × cols in blocks of `block`, each row padded with zeros to `padded`
/// values (the buffers are reused across calls: resize, not assign, as quantize_activations
/// writes every element).
inline void shape_activations(std::int64_t tokens, std::int64_t cols, std::int64_t block, std::int64_t padded, QuantActs& a) {
    a.tokens = tokens;
    a.cols = cols;
    a.padded = padded;
    a.block = block;
    a.blocks = a.padded / block;
    a.q.resize(static_cast<std::size_t>(tokens * a.padded));
    a.scale.resize(static_cast<std::size_t>(tokens * a.blocks));
    a.sum.resize(static_cast<std::size_t>(tokens * a.blocks));
}

/// The same, rows padded as the weights' (quant::padded_cols).
inline void shape_activations(std::int64_t tokens, std::int64_t cols, std::int64_t block, QuantActs& a) {
    shape_activations(tokens, cols, block, quant::padded_cols(cols), a);
}

/// One block of n ≤ block activations to int8 codes (the rest of the block zero) by
/// quant::quantize_symmetric with limit 127: scale max|x|/127, codes round(x · 127/max|x|);
/// returns the scale, `sum` gets Σ codes. The vector levels' quantize_row give the same bits for
/// whole blocks.
inline float quantize_block(const float* x, std::int64_t n, std::int64_t block, std::int8_t* q, std::int32_t& sum) {
    const float d = quant::quantize_symmetric(x, n, quant::kQ8Max, q);
    std::int32_t s = 0;
    for (std::int64_t i = 0; i < n; ++i) s += q[i];
    for (std::int64_t i = n; i < block; ++i) q[i] = 0;
    sum = s;
    return d;
}

/// A row of `cols` activations into `blocks` blocks of `block` codes, scales and sums.
inline void quantize_row_portable(const float* x, std::int64_t cols, std::int64_t block, std::int64_t blocks, std::int8_t* q, float* scale,
                                  std::int32_t* sum) {
    for (std::int64_t b = 0; b < blocks; ++b) {
        const std::int64_t i0 = b * block;
        scale[b] = quantize_block(x + i0, std::clamp<std::int64_t>(cols - i0, 0, block), block, q + i0, sum[b]);
    }
}

/// Quantizes tokens [t0, t1) of x into `a` (shaped by shape_activations), a row at a time with
/// `row` (quantize_row_portable or a vector level's quantize_row: the same bits).
template <class RowFn>
inline void quantize_activations(Rows<const float> x, std::int64_t t0, std::int64_t t1, QuantActs& a, RowFn row) {
    for (std::int64_t t = t0; t < t1; ++t)
        row(x.row(t), a.cols, a.block, a.blocks, a.q.data() + t * a.padded, a.scale.data() + t * a.blocks, a.sum.data() + t * a.blocks);
}

inline void quantize_activations(Rows<const float> x, std::int64_t t0, std::int64_t t1, QuantActs& a) {
    quantize_activations(x, t0, t1, a, quantize_row_portable);
}

/// Values per group of linear_ggml's kernels: 8 blocks of 32, a K-quant super-block. Rows and
/// activations are padded with zero blocks to whole groups.
inline constexpr std::int64_t kGgmlGroup = 256;

/// One token's activations as linear_ggml reads them (blocks of 32, zero past the columns up to a
/// whole group).
struct GgmlTokenActs {
    const std::int8_t* q;
    const float* scale;          ///< per block
    const std::int16_t* halves;  ///< 2 per block: Σ q over its values 0–15 and over 16–31
    /// Per 4 values: −offset · Σ q over them, for the code offset the call asked for (the start
    /// value of vpdpbusd, which multiplies the unsigned codes); null for offset 0.
    const std::int32_t* start;

    /// The same activations from group g (of kGgmlGroup values) on.
    GgmlTokenActs group(std::int64_t g) const {
        return {q + kGgmlGroup * g, scale + 8 * g, halves + 16 * g, start ? start + kGgmlGroup / 4 * g : nullptr};
    }
};

/// The lanes of one row's linear_ggml dot product in progress (kernels/linear_ggml.hpp): 16 of
/// the codes' terms (lane 8·(b mod 2) + j for columns 4j … 4j + 3 of block b), 8 of the mins'.
struct GgmlLanes {
    float acc[16] = {};
    float off[8] = {};
};

/// The activations of a linear_ggml call: QuantActs in blocks of 32 (padded to whole groups),
/// the half-block sums, and the start values of the code offsets asked for.
struct GgmlActs {
    QuantActs acts;
    std::vector<std::int16_t> halves;  ///< [tokens, 2 · blocks]
    std::vector<std::pair<int, std::vector<std::int32_t>>> starts;  ///< offset, [tokens, padded / 4]

    GgmlTokenActs token(std::int64_t t, int offset = 0) const {
        const std::int32_t* start = nullptr;
        for (const auto& [o, values] : starts)
            if (o == offset && offset != 0) start = values.data() + t * (acts.padded / 4);
        return {acts.q_row(t), acts.scale_row(t), halves.data() + t * 2 * acts.blocks, start};
    }
};

/// Sizes `a` for tokens × cols and the code offsets `offsets` (each nonzero one gets start values).
inline void shape_ggml_acts(std::int64_t tokens, std::int64_t cols, std::span<const int> offsets, GgmlActs& a) {
    shape_activations(tokens, cols, 32, (cols + kGgmlGroup - 1) / kGgmlGroup * kGgmlGroup, a.acts);
    a.halves.resize(static_cast<std::size_t>(tokens * 2 * a.acts.blocks));
    std::size_t n = 0;
    for (const int o : offsets) {
        if (o == 0) continue;
        if (a.starts.size() <= n) a.starts.emplace_back();
        a.starts[n].first = o;
        a.starts[n].second.resize(static_cast<std::size_t>(tokens * a.acts.padded / 4));
        ++n;
    }
    a.starts.resize(n);
}

/// Tokens [t0, t1) of x into `a` (shaped by shape_ggml_acts), a row at a time with `row` as
/// quantize_activations.
template <class RowFn>
inline void quantize_ggml_acts(Rows<const float> x, std::int64_t t0, std::int64_t t1, GgmlActs& a, RowFn row) {
    quantize_activations(x, t0, t1, a.acts, row);
    const std::int64_t words = a.acts.padded / 4;
    for (std::int64_t t = t0; t < t1; ++t) {
        const std::int8_t* q = a.acts.q_row(t);
        std::int16_t* halves = a.halves.data() + t * 2 * a.acts.blocks;
        for (std::int64_t b = 0; b < a.acts.blocks; ++b) {
            std::int32_t h = 0;
            for (int i = 0; i < 16; ++i) h += q[32 * b + i];
            halves[2 * b] = static_cast<std::int16_t>(h);
            halves[2 * b + 1] = static_cast<std::int16_t>(a.acts.sum_row(t)[b] - h);
        }
        for (auto& [offset, values] : a.starts) {
            std::int32_t* start = values.data() + t * words;
            for (std::int64_t w = 0; w < words; ++w) start[w] = -offset * (q[4 * w] + q[4 * w + 1] + q[4 * w + 2] + q[4 * w + 3]);
        }
    }
}

/// Tokens per group in the panel kernels' activation layout: a pass over a panel serves up to
/// this many tokens.
inline constexpr std::int64_t kGroupTokens = 16;

/// Activations for the vector panel kernels, per group of up to kGroupTokens tokens (n in the
/// group): for every block, its W = block / 4 words of 4 codes as [W][n] int32, then the n x
/// scales and the n start values −offset·Σx — one contiguous record of (W + 2)·n words per block
/// (record_words). `offset` is what
/// the kernel adds to each weight code to make it unsigned (vpdpbusd multiplies unsigned by
/// signed bytes), so that the start value takes it back out and each block sum stays exact.
/// Words per token in a block's record of GroupActs: its block / 4 code words, scale and start.
constexpr std::int64_t record_words(std::int64_t block) { return block / 4 + 2; }

struct GroupActs {
    std::vector<std::int32_t> data;  ///< group starting at token t0: at t0 · blocks · record_words
    std::int64_t blocks = 0, words = 0;  ///< words: record_words(block)

    /// The record of block 0 of the group that starts at token t0.
    const std::int32_t* group(std::int64_t t0) const { return data.data() + t0 * blocks * words; }
};

/// Sizes `out` for all of a's tokens.
inline void shape_group_acts(const QuantActs& a, GroupActs& out) {
    out.blocks = a.blocks;
    out.words = record_words(a.block);
    out.data.resize(static_cast<std::size_t>(a.tokens * a.blocks * out.words));
}

/// Blocks [b0, b1) of the groups that start at token t0 (a multiple of kGroupTokens) and after,
/// from `a` into `out` (shaped by shape_group_acts). The records are written in order, each the
/// [W][n] transpose of its n tokens' codes, so that threads given disjoint block ranges write
/// disjoint memory (by tokens, every cache line of a record would be written by all of them).
inline void group_acts(const QuantActs& a, int offset, std::int64_t t0, std::int64_t b0, std::int64_t b1, GroupActs& out) {
    constexpr std::int64_t G = kGroupTokens;
    const std::int64_t words = out.words, W = words - 2;
    for (std::int64_t g0 = t0; g0 < a.tokens; g0 += G) {
        const std::int64_t n = std::min<std::int64_t>(G, a.tokens - g0);
        std::int32_t* rec = out.data.data() + (g0 * a.blocks + b0 * n) * words;
        for (std::int64_t b = b0; b < b1; ++b) {
            for (std::int64_t s = 0; s < W; ++s)
                for (std::int64_t i = 0; i < n; ++i) std::memcpy(rec++, a.q_row(g0 + i) + b * a.block + 4 * s, 4);
            for (std::int64_t i = 0; i < n; ++i) std::memcpy(rec++, a.scale_row(g0 + i) + b, 4);
            for (std::int64_t i = 0; i < n; ++i) *rec++ = -offset * a.sum_row(g0 + i)[b];
        }
    }
}

}  // namespace gemma4::detail
