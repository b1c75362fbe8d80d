// linear for GGUF block types run as stored (WeightView dtype Ggml: Q4_K, Q6_K, Q5_K, IQ4_XS,
// Q4_1, …; tensor/ggml_blocks.hpp). The rows stay in the mapped file; a chunk of rows is decoded
// into IntBlocks (int8 codes, integer sub-block scales and mins, float d and dmin per 32 values)
// and multiplied with the activations quantized once to int8 per 32 (kernels/quant_acts.hpp).
// Each 32-value block's sum is exact in int32 but for two float products:
//
//     y += (d · x_scale) · Σ_h k_h·Σ c·xq  −  (dmin · x_scale) · Σ_h m_h·Σ xq
//
// The first term is accumulated in 8 lanes (lane j holds columns 4j … 4j + 3 of every block,
// the lanes summed at the end in a fixed order), the second in one scalar, so an output does not
// depend on the thread count or on which tokens share its call; the portable loops and the AVX2
// kernel (kernels/isa/ggml_avx2.hpp; the AVX-512 and AMX levels run it too) give the same bits.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/kernels/cpu.hpp>
#include <gemma4/kernels/isa/avx2.hpp>
#include <gemma4/kernels/isa/ggml_avx2.hpp>
#include <gemma4/kernels/linear_quant.hpp>
#include <gemma4/kernels/quant_acts.hpp>
#include <gemma4/kernels/rows.hpp>
#include <gemma4/kernels/thread_pool.hpp>
#include <gemma4/tensor/ggml_blocks.hpp>
#include <gemma4/tensor/weight_view.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gemma4::inline GEMMA4_ABI::detail {

/// The portable dot product of one decoded row (`blocks` blocks of w) with one token: the float
/// sequence of ggml_avx2::row_dot, written with plain loops.
inline float ggml_row_dot_portable(const ggml::IntBlocks& w, std::int64_t blocks, const GgmlTokenActs& x, bool mins) {
    float lane[8] = {};
    float offset = 0;
    for (std::int64_t b = 0; b < blocks; ++b) {
        const std::int8_t* c = w.codes + 32 * b;
        const std::int8_t* q = x.q + 32 * b;
        const float f = w.d[b] * x.scale[b];
        for (int j = 0; j < 8; ++j) {
            std::int32_t s = 0;
            for (int i = 4 * j; i < 4 * j + 4; ++i) s += static_cast<std::int32_t>(c[i]) * q[i];
            lane[j] = std::fma(static_cast<float>(s * w.scale[2 * b + j / 4]), f, lane[j]);
        }
        if (mins) {
            const std::int32_t m = w.min[2 * b] * x.half[b] + w.min[2 * b + 1] * (x.sum[b] - x.half[b]);
            offset = std::fma(static_cast<float>(m), w.dmin[b] * x.scale[b], offset);
        }
    }
    const float t0 = lane[0] + lane[4], t1 = lane[1] + lane[5], t2 = lane[2] + lane[6], t3 = lane[3] + lane[7];
    return ((t0 + t2) + (t1 + t3)) - offset;
}

/// Whether a block type subtracts a min (its dmin·m term is not zero).
inline bool ggml_has_mins(GgmlType t) {
    return t == GgmlType::Q4_1 || t == GgmlType::Q5_1 || t == GgmlType::Q2_K || t == GgmlType::Q4_K || t == GgmlType::Q5_K;
}

/// The bytes of stored rows a one-token chunk of linear_ggml holds at least (as linear_quant's).
inline constexpr std::int64_t kGgmlStreamChunkBytes = std::int64_t{2} << 20;
/// Rows decoded at a time: each is then used by every token of the call.
inline constexpr std::int64_t kGgmlRowTile = 8;

/// y_i[t, n] = Σ_k x[t, k] · w_i[n, k] for matrices w_i of GGUF block types (DType::Ggml; any
/// mix of types) with one column count, and float x: x is quantized once for all of them.
/// `vector` picks the AVX2 kernel (which needs the level) over the portable loops.
inline void linear_ggml(std::span<const QuantTarget> targets, Rows<const float> x, std::int64_t tokens, ThreadPool& pool,
                        bool vector = active_isa() >= Isa::Avx2) {
    if (targets.empty()) return;
    const std::int64_t K = targets.front().w->cols();
    for (const QuantTarget& t : targets) {
        const WeightView& w = *t.w;
        const std::int64_t values = ggml::block_decoder(w.ggml).values;
        if (w.cols() != K)
            throw InvalidArgument("linear_ggml: '" + w.name + "' does not share the columns of '" + targets.front().w->name + "'");
        if (K % values != 0)
            throw ShapeError("linear: '" + w.name + "' has rows of " + std::to_string(K) + " values, not a multiple of its " +
                             std::string(ggml_type_name(w.ggml)) + " blocks of " + std::to_string(values));
    }
    thread_local GgmlActs acts;
    GgmlActs& a = acts;  // the caller's, also in the lambdas below
    shape_ggml_acts(tokens, K, a);
    const auto quantize = [&](std::int64_t t0, std::int64_t t1) {
        if (vector) quantize_ggml_acts(x, t0, t1, a, avx2::quantize_row);
        else quantize_ggml_acts(x, t0, t1, a, quantize_row_portable);
    };
    if (tokens == 1) quantize(0, 1);
    else pool.parallel_for(tokens, quantize);
    const std::int64_t blocks = K / 32;
    for (const QuantTarget& target : targets) {
        const WeightView& w = *target.w;
        const ggml::BlockDecoder dec = ggml::block_decoder(w.ggml);
        const std::int64_t N = w.rows(), row_bytes = w.ggml_row_bytes();
        const bool mins = ggml_has_mins(w.ggml);
        // One token streams the rows (chunks of about 2 MiB, as linear_quant); several share each
        // decoded tile of rows, so smaller chunks balance the threads.
        const std::int64_t grain = tokens > 1 ? kGgmlRowTile
                                              : std::clamp<std::int64_t>(kGgmlStreamChunkBytes / std::max<std::int64_t>(row_bytes, 1), kGgmlRowTile,
                                                                         std::max<std::int64_t>(kGgmlRowTile, N / pool.size()));
        pool.parallel_chunks(
            N,
            [&](std::int64_t n0, std::int64_t n1) {
                thread_local ggml::IntBlockBuffer buffer;
                const ggml::IntBlocks tile = buffer.view(kGgmlRowTile * blocks);
                for (std::int64_t r0 = n0; r0 < n1; r0 += kGgmlRowTile) {
                    const std::int64_t rows = std::min(kGgmlRowTile, n1 - r0);
                    for (std::int64_t r = 0; r < rows; ++r) ggml::decode_row(dec, w.data + (r0 + r) * row_bytes, K, tile.at(r * blocks));
                    for (std::int64_t t = 0; t < tokens; ++t) {
                        const GgmlTokenActs xt = a.token(t);
                        float* out = target.y.row(t) + r0;
                        for (std::int64_t r = 0; r < rows; ++r)
                            out[r] = vector ? ggml_avx2::row_dot(tile.at(r * blocks), blocks, xt, mins)
                                            : ggml_row_dot_portable(tile.at(r * blocks), blocks, xt, mins);
                    }
                }
            },
            std::max<std::int64_t>(grain, N / (16 * pool.size())));
    }
}

/// y[t, n] = Σ_k x[t, k] · w[n, k] for w of a GGUF block type (DType::Ggml) and float x.
inline void linear_ggml(const WeightView& w, Rows<const float> x, Rows<float> y, std::int64_t tokens, ThreadPool& pool,
                        bool vector = active_isa() >= Isa::Avx2) {
    const QuantTarget target{&w, y};
    linear_ggml(std::span<const QuantTarget>(&target, 1), x, tokens, pool, vector);
}

}  // namespace gemma4::detail
