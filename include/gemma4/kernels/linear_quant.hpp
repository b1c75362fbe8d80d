// linear for Q8/Q4 weights (tensor/quant.hpp). The activations of a call are quantized once to
// int8 per 32-element block (scale max|x|/127), so each block's dot product is exact in int32 and
// only Σ_b (w_scale·x_scale)·isum_b is computed in float.
//
// Two implementations of the same arithmetic:
//  * a portable one (plain loops the compiler vectorises), correct on any x86-64;
//  * an AVX-512 VNNI one (vpdpbusd, 64 int8 products per instruction). vpdpbusd multiplies
//    unsigned by signed bytes, so weights enter as unsigned (Q8: code + 128 by flipping the sign
//    bit; Q4: the stored nibble, code + 8) and the excess offset·Σx of each block is removed by
//    starting its int32 lanes at −offset·Σx / 8 (each block spans 8 lanes). The block sums stay
//    exact, so both paths agree up to float summation order.
// Both tile rows × tokens so each weight load serves several tokens (prefill) and several rows
// stream at once (decode).
#pragma once

#include <gemma4/kernels/rows.hpp>
#include <gemma4/kernels/thread_pool.hpp>
#include <gemma4/tensor/quant.hpp>
#include <gemma4/tensor/weight_view.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include <immintrin.h>
#define GEMMA4_HAVE_VNNI512 1
#endif

namespace gemma4::detail {

#ifdef GEMMA4_HAVE_VNNI512
inline constexpr bool kHaveVnni512 = true;
#else
inline constexpr bool kHaveVnni512 = false;
#endif

/// Activations of one call, int8 per 32-element block.
struct QuantActs {
    std::int64_t tokens = 0, cols = 0, padded = 0, blocks = 0;
    std::vector<std::int8_t> q;     ///< [tokens, padded], zeros past cols
    std::vector<float> scale;       ///< [tokens, blocks]
    std::vector<std::int32_t> sum;  ///< [tokens, blocks]: Σ q over the block

    const std::int8_t* q_row(std::int64_t t) const { return q.data() + t * padded; }
    const float* scale_row(std::int64_t t) const { return scale.data() + t * blocks; }
    const std::int32_t* sum_row(std::int64_t t) const { return sum.data() + t * blocks; }
};

inline void quantize_activations(Rows<const float> x, std::int64_t tokens, std::int64_t cols, QuantActs& a) {
    a.tokens = tokens;
    a.cols = cols;
    a.padded = quant::padded_cols(cols);
    a.blocks = a.padded / quant::kBlock;
    a.q.assign(static_cast<std::size_t>(tokens * a.padded), 0);
    a.scale.resize(static_cast<std::size_t>(tokens * a.blocks));
    a.sum.resize(static_cast<std::size_t>(tokens * a.blocks));
    for (std::int64_t t = 0; t < tokens; ++t) {
        const float* xr = x.row(t);
        std::int8_t* q = a.q.data() + t * a.padded;
        for (std::int64_t b = 0; b < a.blocks; ++b) {
            const std::int64_t i0 = b * quant::kBlock, i1 = std::min(cols, i0 + quant::kBlock);
            float amax = 0;
            for (std::int64_t i = i0; i < i1; ++i) amax = std::max(amax, std::fabs(xr[i]));
            const float d = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
            std::int32_t s = 0;
            for (std::int64_t i = i0; i < i1; ++i) {
                const auto v = static_cast<std::int8_t>(std::clamp(static_cast<int>(std::nearbyint(xr[i] * inv)), -127, 127));
                q[i] = v;
                s += v;
            }
            a.scale[static_cast<std::size_t>(t * a.blocks + b)] = d;
            a.sum[static_cast<std::size_t>(t * a.blocks + b)] = s;
        }
    }
}

/// The integer dot product of weight block b (codes, Q4 minus offset) with activation block b.
inline std::int32_t block_dot(DType type, const std::byte* codes, const std::int8_t* xq, std::int64_t b) {
    std::int32_t s = 0;
    if (type == DType::Q8) {
        const auto* w = reinterpret_cast<const std::int8_t*>(codes) + b * quant::kBlock;
        const std::int8_t* x = xq + b * quant::kBlock;
        for (int i = 0; i < quant::kBlock; ++i) s += static_cast<std::int32_t>(w[i]) * x[i];
        return s;
    }
    // Q4: block k of a 128-group is the low (k < 2) or high nibbles of bytes (k % 2)·32 … +32.
    const std::int64_t g = b / 4, k = b % 4;
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(codes) + g * 64 + (k % 2) * 32;
    const std::int8_t* x = xq + b * quant::kBlock;
    // Nibbles are unpacked four at a time in 32-bit words: GCC 12 with AVX-512 miscompiles the
    // vectorised per-byte form (`byte >> 4` widened to int32 loses its mask).
    const unsigned shift = k >= 2 ? 4u : 0u;
    for (int j = 0; j < quant::kBlock / 4; ++j) {
        std::uint32_t v;
        std::memcpy(&v, bytes + 4 * j, 4);
        v = (v >> shift) & 0x0f0f0f0fu;
        for (int l = 0; l < 4; ++l)
            s += (static_cast<std::int32_t>((v >> (8 * l)) & 0xffu) - quant::kQ4Offset) * x[4 * j + l];
    }
    return s;
}

/// Portable path: y[t0.., n] for one row n.
inline void quant_row_portable(const WeightView& w, std::int64_t n, const QuantActs& a, std::int64_t t0, std::int64_t t1,
                               Rows<float> y) {
    const std::byte* codes = w.codes_row(n);
    const std::uint16_t* sc = w.scales_row(n);
    thread_local std::vector<float> ws;
    ws.resize(static_cast<std::size_t>(a.blocks));
    for (std::int64_t b = 0; b < a.blocks; ++b) ws[static_cast<std::size_t>(b)] = f16_to_float(sc[b]);
    for (std::int64_t t = t0; t < t1; ++t) {
        const std::int8_t* xq = a.q_row(t);
        const float* xs = a.scale_row(t);
        float acc = 0;
        for (std::int64_t b = 0; b < a.blocks; ++b)
            acc += static_cast<float>(block_dot(w.dtype, codes, xq, b)) * (ws[static_cast<std::size_t>(b)] * xs[b]);
        y.row(t)[n] = acc;
    }
}

#ifdef GEMMA4_HAVE_VNNI512
// GCC 12 reports the intrinsics' own `_mm512_undefined_*` pass-through operands (PR 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
struct Vnni512Kernel {
    static constexpr int R = 4, TT = 4;

    /// y[t0 + t][n0 + r] for r < RR, t < TTT; one 128-element group (4 blocks, 2 zmm halves of
    /// 2 blocks each) per step.
    template <int RR, int TTT>
    static void tile(const WeightView& w, std::int64_t n0, const QuantActs& a, std::int64_t t0, Rows<float> y) {
        const bool q4 = w.dtype == DType::Q4;
        const std::int64_t groups = a.padded / 128, nb = a.blocks;
        // lanes 0–7 take the first block of a half, lanes 8–15 the second
        const __m512i idx[2] = {_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3)};
        const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80)), low4 = _mm512_set1_epi8(0x0f);
        const __m128i corr_mul = _mm_set1_epi32(q4 ? -quant::kQ4Offset / 8 : -128 / 8);
        __m512 acc[RR][TTT];
        for (auto& r : acc)
            for (auto& v : r) v = _mm512_setzero_ps();
        const std::uint8_t* wr[RR];
        const std::uint16_t* sr[RR];
        for (int r = 0; r < RR; ++r) {
            wr[r] = reinterpret_cast<const std::uint8_t*>(w.codes_row(n0 + r));
            sr[r] = w.scales_row(n0 + r);
        }
        for (std::int64_t g = 0; g < groups; ++g) {
            __m512 ws[RR];
            for (int r = 0; r < RR; ++r)
                ws[r] = _mm512_zextps128_ps512(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sr[r] + 4 * g))));
            for (int h = 0; h < 2; ++h) {
                __m512i wv[RR];
                __m512 wd[RR];
                for (int r = 0; r < RR; ++r) {
                    if (q4) {
                        const __m512i v = _mm512_loadu_si512(wr[r] + 64 * g);
                        wv[r] = _mm512_and_si512(h ? _mm512_srli_epi16(v, 4) : v, low4);
                    } else {
                        wv[r] = _mm512_xor_si512(_mm512_loadu_si512(wr[r] + 128 * g + 64 * h), flip);
                    }
                    wd[r] = _mm512_permutexvar_ps(idx[h], ws[r]);
                }
                for (int t = 0; t < TTT; ++t) {
                    const std::int64_t tt = t0 + t;
                    const __m512i xv = _mm512_loadu_si512(a.q_row(tt) + 128 * g + 64 * h);
                    const __m512 xs = _mm512_permutexvar_ps(idx[h], _mm512_zextps128_ps512(_mm_loadu_ps(a.scale_row(tt) + 4 * g)));
                    const __m128i s4 = _mm_mullo_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.sum_row(tt) + 4 * g)), corr_mul);
                    const __m512i corr = _mm512_permutexvar_epi32(idx[h], _mm512_zextsi128_si512(s4));
                    for (int r = 0; r < RR; ++r) {
                        const __m512i isum = _mm512_dpbusd_epi32(corr, wv[r], xv);
                        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(wd[r], xs), acc[r][t]);
                    }
                }
            }
        }
        (void)nb;
        for (int r = 0; r < RR; ++r)
            for (int t = 0; t < TTT; ++t) y.row(t0 + t)[n0 + r] = _mm512_reduce_add_ps(acc[r][t]);
    }

    template <int RR>
    static void row_tile(const WeightView& w, std::int64_t n0, const QuantActs& a, std::int64_t t0, std::int64_t t1, Rows<float> y) {
        std::int64_t t = t0;
        for (; t + TT <= t1; t += TT) tile<RR, TT>(w, n0, a, t, y);
        for (; t < t1; ++t) tile<RR, 1>(w, n0, a, t, y);
    }
};
#pragma GCC diagnostic pop
#endif

enum class QuantPath : std::uint8_t { Best, Portable };

/// y[t, n] = Σ_k x[t, k] · w[n, k] for Q8/Q4 w and float x.
inline void linear_quant(const WeightView& w, Rows<const float> x, Rows<float> y, std::int64_t tokens, ThreadPool& pool,
                         QuantPath path = QuantPath::Best) {
    const std::int64_t N = w.rows(), K = w.cols();
    thread_local QuantActs acts;
    quantize_activations(x, tokens, K, acts);
    const QuantActs& a = acts;
    const bool vnni = kHaveVnni512 && path == QuantPath::Best;
    const std::int64_t tb = token_block(a.padded + 8 * a.blocks, 4);
    pool.parallel_for(
        N,
        [&](std::int64_t n0, std::int64_t n1) {
            for (std::int64_t tb0 = 0; tb0 < tokens; tb0 += tb) {
                const std::int64_t tb1 = std::min(tokens, tb0 + tb);
                std::int64_t n = n0;
#ifdef GEMMA4_HAVE_VNNI512
                if (vnni) {
                    using Kn = Vnni512Kernel;
                    for (; n + Kn::R <= n1; n += Kn::R) Kn::row_tile<Kn::R>(w, n, a, tb0, tb1, y);
                    for (; n < n1; ++n) Kn::row_tile<1>(w, n, a, tb0, tb1, y);
                }
#endif
                for (; n < n1; ++n) quant_row_portable(w, n, a, tb0, tb1, y);
            }
        },
        16);
    (void)vnni;
}

}  // namespace gemma4::detail

#undef GEMMA4_HAVE_VNNI512
