// linear for GGUF block types run as stored (WeightView dtype Ggml: Q4_K, Q6_K, Q5_K, IQ4_XS,
// Q4_1, …; tensor/ggml_blocks.hpp). The rows stay in the mapped file; they are decoded into
// IntBlocks (unsigned codes u = c + offset, integer half-block scales k and mins m, float d and
// dmin per 32 values) a stretch at a time, and multiplied with the activations quantized once to
// int8 per 32 (kernels/quant_acts.hpp). The sums run over groups of 8 blocks (256 values, a
// K-quant super-block; rows and activations are padded with zero blocks to whole groups):
//
//     y += Σ_b Σ_j fl(k_{b,h(j)} · fl(d_b · x_scale_b)) · s_{b,j}  −  Σ_b fl(dmin_b · x_scale_b) · M_b
//
// with s_{b,j} = Σ c · xq over the 4 columns 4j … 4j + 3 of block b and M_b = m₀·Σxq₀ + m₁·Σxq₁,
// both exact in int32. The first sum is accumulated in 16 lanes (lane 8·(b mod 2) + j), the second
// in 8 (lane b mod 8), each with one FMA per term and reduced in a fixed order at the end, so an
// output does not depend on the thread count or on which tokens share its call, and the portable
// loops, AVX2 (kernels/isa/ggml_avx2.hpp) and AVX-512 VNNI (kernels/isa/ggml_avx512.hpp; the AMX
// level runs it too) give the same bits.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/kernels/cpu.hpp>
#include <gemma4/kernels/isa/avx2.hpp>
#include <gemma4/kernels/isa/ggml_avx2.hpp>
#include <gemma4/kernels/isa/ggml_avx512.hpp>
#include <gemma4/kernels/linear_quant.hpp>
#include <gemma4/kernels/quant_acts.hpp>
#include <gemma4/kernels/rows.hpp>
#include <gemma4/kernels/thread_pool.hpp>
#include <gemma4/tensor/ggml_blocks.hpp>
#include <gemma4/tensor/weight_view.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace gemma4::inline GEMMA4_ABI::detail {

/// `groups` groups of decoded blocks of w (codes of `offset`) times one token's activations,
/// into the lanes: the portable loops, the float sequence every level performs.
inline void ggml_dot_groups_portable(const ggml::IntBlocks& w, std::int64_t groups, const GgmlTokenActs& x, int offset, bool mins,
                                     GgmlLanes& l) {
    for (std::int64_t b = 0; b < 8 * groups; ++b) {
        const std::uint8_t* u = w.codes + 32 * b;
        const std::int8_t* q = x.q + 32 * b;
        const float f = w.d[b] * x.scale[b];
        const float g[2] = {static_cast<float>(w.scale[2 * b]) * f, static_cast<float>(w.scale[2 * b + 1]) * f};
        for (int j = 0; j < 8; ++j) {
            std::int32_t s = 0;
            for (int i = 4 * j; i < 4 * j + 4; ++i) s += (static_cast<std::int32_t>(u[i]) - offset) * q[i];
            float& acc = l.acc[8 * (b % 2) + j];
            acc = std::fma(static_cast<float>(s), g[j / 4], acc);
        }
        if (mins) {
            const std::int32_t m = w.min[2 * b] * x.halves[2 * b] + w.min[2 * b + 1] * x.halves[2 * b + 1];
            l.off[b % 8] = std::fma(static_cast<float>(m), w.dmin[b] * x.scale[b], l.off[b % 8]);
        }
    }
}

/// The dot product the lanes hold: Σ acc − Σ off, each in a fixed tree.
inline float ggml_lanes_sum(const GgmlLanes& l) {
    const auto sum8 = [](const float* v) { return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7])); };
    float t[8];
    for (int j = 0; j < 8; ++j) t[j] = l.acc[j] + l.acc[j + 8];
    return sum8(t) - sum8(l.off);
}

/// Whether a block type subtracts a min (its dmin·m term is not zero).
inline bool ggml_has_mins(GgmlType t) {
    return t == GgmlType::Q4_1 || t == GgmlType::Q5_1 || t == GgmlType::Q2_K || t == GgmlType::Q4_K || t == GgmlType::Q5_K;
}

/// One matrix's rows as the kernels read them: the decoder (the level's, or the portable one),
/// the code offset and whether there are mins.
struct GgmlRows {
    const WeightView* w;
    ggml::BlockDecoder dec;
    ggml_avx2::DecodeBlocks vector_decode;  ///< nullptr: the portable decoder
    ggml_avx2::DotRowStored one_token;             ///< row kernels decoding in registers; nullptr: none at this level
    ggml_avx2::DotRowStoredTokens many_tokens;
    std::int64_t row_bytes, cols, groups;   ///< groups: of 256 values, the last padded
    bool mins;

    GgmlRows(const WeightView& view, Isa level)
        : w(&view), dec(ggml::block_decoder(view.ggml)), vector_decode(level >= Isa::Avx2 ? ggml_avx2::decoder(view.ggml) : nullptr),
          one_token(level >= Isa::Avx512 ? ggml_avx512::stored_row_kernel<false>(view.ggml)
                    : level >= Isa::Avx2 ? ggml_avx2::stored_row_kernel<false>(view.ggml)
                                         : nullptr),
          many_tokens(level >= Isa::Avx512 ? ggml_avx512::stored_row_kernel<true>(view.ggml)
                      : level >= Isa::Avx2 ? ggml_avx2::stored_row_kernel<true>(view.ggml)
                                           : nullptr),
          row_bytes(view.ggml_row_bytes()), cols(view.cols()), groups((view.cols() + kGgmlGroup - 1) / kGgmlGroup), mins(ggml_has_mins(view.ggml)) {}

    /// Groups [g0, g1) of row r into `out` (its block 0 = the row's block 8·g0), zero blocks past the row's end.
    void decode(std::int64_t r, std::int64_t g0, std::int64_t g1, const ggml::IntBlocks& out) const {
        const std::int64_t v0 = g0 * kGgmlGroup, v1 = std::min(g1 * kGgmlGroup, cols);
        const std::byte* src = w->data + r * row_bytes + v0 / dec.values * dec.bytes;
        const std::int64_t stored = (v1 - v0) / dec.values;
        if (vector_decode) vector_decode(src, stored, out);
        else ggml::decode_row(dec, src, v1 - v0, out);
        const std::int64_t filled = (v1 - v0) / 32, blocks = 8 * (g1 - g0);
        if (filled == blocks) return;
        const auto n = static_cast<std::size_t>(blocks - filled);
        std::memset(out.codes + 32 * filled, 0, 32 * n);
        std::memset(out.scale + 2 * filled, 0, 2 * n * sizeof(std::int16_t));
        std::memset(out.min + 2 * filled, 0, 2 * n * sizeof(std::int16_t));
        std::fill_n(out.d + filled, n, 0.0f);
        std::fill_n(out.dmin + filled, n, 0.0f);
    }
};

/// Whether `level`'s kernels take a code offset out through start values −offset·Σxq (all of
/// AVX-512's; AVX2's for codes ≤ 127): GgmlActs then makes them.
inline bool ggml_uses_start(Isa level, int offset) {
    return offset != 0 && (level >= Isa::Avx512 || (level >= Isa::Avx2 && ggml_avx2::small_codes(offset)));
}

/// The bytes of stored rows a one-token chunk of linear_ggml holds at least (as linear_quant's).
inline constexpr std::int64_t kGgmlStreamChunkBytes = std::int64_t{2} << 20;
/// Rows decoded at a time when several tokens share them.
inline constexpr std::int64_t kGgmlRowTile = 8;
/// Tokens whose lanes one pass over a row decoded in registers carries.
inline constexpr std::int64_t kGgmlTokenTile = 16;
/// Groups one token decodes at a time (4,096 values: the decoded stretch stays in L1).
inline constexpr std::int64_t kGgmlStreamGroups = 16;

/// Adds groups of decoded blocks of one row times one token to `lanes`, with `level`'s kernel.
inline void ggml_dot_groups(Isa level, const GgmlRows& rows, const ggml::IntBlocks& w, std::int64_t groups, const GgmlTokenActs& x,
                            GgmlLanes& lanes) {
    if (level >= Isa::Avx512) ggml_avx512::dot_groups(w, groups, x, rows.mins, lanes);
    else if (level >= Isa::Avx2) ggml_avx2::dot_groups(w, groups, x, rows.dec.offset, rows.mins, lanes);
    else ggml_dot_groups_portable(w, groups, x, rows.dec.offset, rows.mins, lanes);
}

/// y_i[t, n] = Σ_k x[t, k] · w_i[n, k] for matrices w_i of GGUF block types (DType::Ggml; any
/// mix of types) with one column count, and float x: x is quantized once for all of them.
/// `level` picks the kernels (Baseline: the portable loops; any level the CPU has).
inline void linear_ggml(std::span<const QuantTarget> targets, Rows<const float> x, std::int64_t tokens, ThreadPool& pool,
                        Isa level = active_isa()) {
    if (targets.empty()) return;
    const std::int64_t K = targets.front().w->cols();
    std::array<int, 8> offsets{};  // the start values vpdpbusd needs, one set per code offset
    std::size_t distinct = 0;
    for (const QuantTarget& t : targets) {
        const WeightView& w = *t.w;
        const ggml::BlockDecoder dec = ggml::block_decoder(w.ggml);
        if (w.cols() != K)
            throw InvalidArgument("linear_ggml: '" + w.name + "' does not share the columns of '" + targets.front().w->name + "'");
        if (K % dec.values != 0)
            throw ShapeError("linear: '" + w.name + "' has rows of " + std::to_string(K) + " values, not a multiple of its " +
                             std::string(ggml_type_name(w.ggml)) + " blocks of " + std::to_string(dec.values));
        if (ggml_uses_start(level, dec.offset) && std::find(offsets.begin(), offsets.begin() + distinct, dec.offset) == offsets.begin() + distinct)
            offsets[distinct++] = dec.offset;  // at most the 6 offsets of ggml_blocks.hpp
    }
    thread_local GgmlActs acts;
    GgmlActs& a = acts;  // the caller's, also in the lambdas below
    shape_ggml_acts(tokens, K, std::span<const int>(offsets.data(), distinct), a);
    const auto quantize = [&](std::int64_t t0, std::int64_t t1) {
        if (level >= Isa::Avx2) quantize_ggml_acts(x, t0, t1, a, avx2::quantize_row);
        else quantize_ggml_acts(x, t0, t1, a, quantize_row_portable);
    };
    if (tokens == 1) quantize(0, 1);
    else pool.parallel_for(tokens, quantize);
    for (const QuantTarget& target : targets) {
        const GgmlRows rows(*target.w, level);
        const std::int64_t N = target.w->rows(), G = rows.groups;
        // One token streams the rows (chunks of about 2 MiB, as linear_quant), decoding a stretch
        // of each at a time; several share each decoded tile of rows, so smaller chunks balance
        // the threads.
        const std::int64_t grain = tokens > 1 ? kGgmlRowTile
                                              : std::clamp<std::int64_t>(kGgmlStreamChunkBytes / std::max<std::int64_t>(rows.row_bytes, 1), kGgmlRowTile,
                                                                         std::max<std::int64_t>(kGgmlRowTile, N / pool.size()));
        pool.parallel_chunks(
            N,
            [&](std::int64_t n0, std::int64_t n1) {
                thread_local ggml::IntBlockBuffer buffer;
                if (tokens == 1) {
                    const ggml::IntBlocks stretch = buffer.view(8 * kGgmlStreamGroups);
                    const GgmlTokenActs xt = a.token(0, rows.dec.offset);
                    for (std::int64_t r = n0; r < n1; ++r) {
                        if (rows.one_token) {
                            target.y.row(0)[r] = rows.one_token(target.w->data + r * rows.row_bytes, G, xt);
                            continue;
                        }
                        GgmlLanes lanes;
                        for (std::int64_t g0 = 0; g0 < G; g0 += kGgmlStreamGroups) {
                            const std::int64_t g1 = std::min(G, g0 + kGgmlStreamGroups);
                            rows.decode(r, g0, g1, stretch);
                            ggml_dot_groups(level, rows, stretch, g1 - g0, xt.group(g0), lanes);
                        }
                        target.y.row(0)[r] = ggml_lanes_sum(lanes);
                    }
                    return;
                }
                if (rows.many_tokens) {  // each row's groups decoded once for up to kGgmlTokenTile tokens
                    GgmlTokenActs xt[kGgmlTokenTile];
                    GgmlLanes lanes[kGgmlTokenTile];
                    float sums[kGgmlTokenTile];
                    for (std::int64_t t0 = 0; t0 < tokens; t0 += kGgmlTokenTile) {
                        const std::int64_t count = std::min(kGgmlTokenTile, tokens - t0);
                        for (std::int64_t t = 0; t < count; ++t) xt[t] = a.token(t0 + t, rows.dec.offset);
                        for (std::int64_t r = n0; r < n1; ++r) {
                            rows.many_tokens(target.w->data + r * rows.row_bytes, G, xt, count, lanes, sums);
                            for (std::int64_t t = 0; t < count; ++t) target.y.row(t0 + t)[r] = sums[t];
                        }
                    }
                    return;
                }
                const ggml::IntBlocks tile = buffer.view(kGgmlRowTile * 8 * G);
                for (std::int64_t r0 = n0; r0 < n1; r0 += kGgmlRowTile) {
                    const std::int64_t count = std::min(kGgmlRowTile, n1 - r0);
                    for (std::int64_t r = 0; r < count; ++r) rows.decode(r0 + r, 0, G, tile.at(r * 8 * G));
                    for (std::int64_t t = 0; t < tokens; ++t) {
                        const GgmlTokenActs xt = a.token(t, rows.dec.offset);
                        float* out = target.y.row(t) + r0;
                        for (std::int64_t r = 0; r < count; ++r) {
                            GgmlLanes lanes;
                            ggml_dot_groups(level, rows, tile.at(r * 8 * G), G, xt, lanes);
                            out[r] = ggml_lanes_sum(lanes);
                        }
                    }
                }
            },
            std::max<std::int64_t>(grain, N / (16 * pool.size())));
    }
}

/// y[t, n] = Σ_k x[t, k] · w[n, k] for w of a GGUF block type (DType::Ggml) and float x.
inline void linear_ggml(const WeightView& w, Rows<const float> x, Rows<float> y, std::int64_t tokens, ThreadPool& pool,
                        Isa level = active_isa()) {
    const QuantTarget target{&w, y};
    linear_ggml(std::span<const QuantTarget>(&target, 1), x, tokens, pool, level);
}

}  // namespace gemma4::detail
