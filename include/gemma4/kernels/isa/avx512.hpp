// The AVX-512 level (F/BW/VL + VNNI): the Q8/Q4 panel kernel, and the float kernels
// (kernels/isa/float_kernels-inl.hpp) at 16 lanes. Compiled for AVX-512 whatever the program's
// flags (kernels/target.hpp); called only where kernels/cpu.hpp found the level.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/kernels/attention_rows.hpp>
#include <gemma4/kernels/isa/prefetch.hpp>
#include <gemma4/kernels/quant_acts.hpp>
#include <gemma4/kernels/rows.hpp>
#include <gemma4/kernels/target.hpp>
#include <gemma4/tensor/dtype.hpp>
#include <gemma4/tensor/quant.hpp>
#include <gemma4/tensor/weight_view.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

GEMMA4_TARGET_AVX512_BEGIN
// GCC 12 reports the intrinsics' own `_mm512_undefined_*` pass-through operands (PR 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace gemma4::inline GEMMA4_ABI::detail::avx512 {

// The Q8/Q4 panel kernel (vpdpbusd, 64 int8 products per instruction). A panel interleaves its
// 16 rows in 4-byte words, so one 64-byte load holds 4 codes of each row: a block (32 columns)
// is 8 such vectors, loaded once and met by the broadcast activation words of up to 16 tokens,
// each token's block sum then taking one convert and one FMA, with no shuffles and no
// horizontal sums. The weights stream once per pass, as one contiguous prefetched sequence;
// more than 16 tokens make more passes over a panel, which is then in L2. vpdpbusd multiplies
// unsigned by signed bytes, so weights enter as unsigned (Q8: code + 128 by flipping the sign
// bit; Q4: the stored nibble, code + 8) and each block's int32 sum starts at −offset·Σx.
struct PanelVnni {
    /// The offset that makes a weight code unsigned (GroupActs).
    static constexpr int offset(DType t) { return t == DType::Q4 ? quant::kQ4Offset : 128; }

    static constexpr int P = static_cast<int>(quant::kPanelRows);  ///< rows per panel: the 16 int32 lanes of a zmm
    static constexpr int G = static_cast<int>(kGroupTokens);  ///< tokens per pass: 16 float accumulators in registers

    /// The N tokens of one group over one panel: y[t][0 … 16) for the panel's rows (mask).
    /// Prefetches the panel's stream as `pf` says (none: the panel is already cached).
    template <bool Q4, int N>
    static void pass(const std::byte* panel, std::int64_t blocks, const std::int32_t* act, PanelPrefetch pf, float* const y[N],
                     __mmask16 mask) {
        constexpr DType kType = Q4 ? DType::Q4 : DType::Q8;
        const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80)), low4 = _mm512_set1_epi8(0x0f);
        __m512 acc[N];
        for (int t = 0; t < N; ++t) acc[t] = _mm512_setzero_ps();
        for (std::int64_t b = 0; b < blocks; ++b) {
            if (pf) prefetch_block<kType>(panel, b, pf);
            __m512i wv[8];
            const std::byte* base = panel + quant::block_codes_offset(kType, b);
            if constexpr (Q4) {
                // the low (b % 4 < 2) or high nibbles of 512 bytes of the group
                const bool high = b % 4 >= 2;
#pragma GCC unroll 8
                for (int s = 0; s < 8; ++s) {
                    const __m512i v = _mm512_loadu_si512(base + 64 * s);
                    wv[s] = _mm512_and_si512(high ? _mm512_srli_epi16(v, 4) : v, low4);
                }
            } else {
#pragma GCC unroll 8
                for (int s = 0; s < 8; ++s) wv[s] = _mm512_xor_si512(_mm512_loadu_si512(base + 64 * s), flip);
            }
            const __m512 ws = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + quant::block_scales_offset(kType, b))));
            const std::int32_t* words = act + b * 10 * N;
            const auto* xs = reinterpret_cast<const float*>(words + 8 * N);
            const std::int32_t* start = words + 9 * N;
            // Eight tokens at a time: eight independent vpdpbusd chains cover its latency (5
            // cycles at one per cycle; four chains left a batch of 16 decoding 10 % slower), and
            // the accumulators stay in registers, a few in L1 (the loops are unrolled fully).
#pragma GCC unroll 16
            for (int t0 = 0; t0 < N; t0 += 8) {
                constexpr int kChains = 8;
                __m512i isum[kChains];
#pragma GCC unroll 8
                for (int c = 0; c < kChains; ++c)
                    if (t0 + c < N) isum[c] = _mm512_set1_epi32(start[t0 + c]);
#pragma GCC unroll 8
                for (int s = 0; s < 8; ++s)
#pragma GCC unroll 8
                    for (int c = 0; c < kChains; ++c)
                        if (t0 + c < N) isum[c] = _mm512_dpbusd_epi32(isum[c], wv[s], _mm512_set1_epi32(words[s * N + t0 + c]));
#pragma GCC unroll 8
                for (int c = 0; c < kChains; ++c)
                    if (t0 + c < N)
                        acc[t0 + c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(ws, _mm512_set1_ps(xs[t0 + c])), acc[t0 + c]);
            }
        }
        for (int t = 0; t < N; ++t) _mm512_mask_storeu_ps(y[t], mask, acc[t]);
    }

    /// pass<true, 1> taken a 128-column group (4 blocks) at a time. One token does 8 products
    /// per 64 loaded bytes, and Q4 reads each 64 bytes for two blocks (k and k + 2 hold their
    /// codes as the low and high nibbles), so the loads and the unpacking weigh as much as the
    /// products: here the group's 1024 code bytes are loaded once for both nibbles, and the four
    /// blocks' sums are four independent chains. The float accumulation keeps block order, so
    /// the output has the same bits. Streamed from memory on a 2-thread AMD Zen 5, 4–15 % faster
    /// (docs/performance.md); Q8, which loads each byte once anyway, gained nothing in the model.
    static void pass_q4_one_token(const std::byte* panel, std::int64_t blocks, const std::int32_t* act, PanelPrefetch pf, float* y,
                                  __mmask16 mask) {
        constexpr int B = static_cast<int>(quant::kGroupBlocks);
        static_assert(B == 4, "a group's code bytes hold blocks k and k + 2 as low and high nibbles");
        const __m512i low4 = _mm512_set1_epi8(0x0f);
        // one token's record per block (GroupActs, n = 1): 8 words, the x scale, the start value
        const auto word = [&](std::int64_t b, int s) { return _mm512_set1_epi32(act[b * 10 + s]); };
        __m512 acc = _mm512_setzero_ps();
        for (std::int64_t b0 = 0; b0 < blocks; b0 += B) {  // blocks is a whole number of groups
            if (pf) {
#pragma GCC unroll 4
                for (int k = 0; k < B; ++k) prefetch_block<DType::Q4>(panel, b0 + k, pf);
            }
            __m512i isum[B];
#pragma GCC unroll 4
            for (int k = 0; k < B; ++k) isum[k] = _mm512_set1_epi32(act[(b0 + k) * 10 + 9]);
            const std::byte* base = panel + quant::block_codes_offset(DType::Q4, b0);
#pragma GCC unroll 2
            for (int k = 0; k < 2; ++k)  // blocks k (low nibbles) and k + 2 (high nibbles)
#pragma GCC unroll 8
                for (int s = 0; s < 8; ++s) {
                    const __m512i v = _mm512_loadu_si512(base + 512 * k + 64 * s);
                    isum[k] = _mm512_dpbusd_epi32(isum[k], _mm512_and_si512(v, low4), word(b0 + k, s));
                    isum[k + 2] = _mm512_dpbusd_epi32(isum[k + 2], _mm512_and_si512(_mm512_srli_epi16(v, 4), low4), word(b0 + k + 2, s));
                }
#pragma GCC unroll 4
            for (int k = 0; k < B; ++k) {
                const std::int64_t b = b0 + k;
                const __m512 ws = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + quant::block_scales_offset(DType::Q4, b))));
                const float xs = std::bit_cast<float>(act[b * 10 + 8]);
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[k]), _mm512_mul_ps(ws, _mm512_set1_ps(xs)), acc);
            }
        }
        _mm512_mask_storeu_ps(y, mask, acc);
    }

    template <bool Q4, int N = G>
    static void dispatch(int n, const std::byte* panel, std::int64_t blocks, const std::int32_t* act, PanelPrefetch pf,
                         float* const* y, __mmask16 mask) {
        if constexpr (N > 1)
            if (n < N) return dispatch<Q4, N - 1>(n, panel, blocks, act, pf, y, mask);
        if constexpr (Q4 && N == 1) pass_q4_one_token(panel, blocks, act, pf, y[0], mask);
        else pass<Q4, N>(panel, blocks, act, pf, y, mask);
    }
};


/// quantize_row_portable (kernels/quant_acts.hpp; the rule is quant::quantize_symmetric) with
/// whole blocks in registers: the same bits.
inline void quantize_row(const float* x, std::int64_t cols, std::int64_t blocks, std::int8_t* q, float* scale, std::int32_t* sum) {
    const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    const __m512 hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
    for (std::int64_t b = 0; b < blocks; ++b) {
        const std::int64_t i0 = b * quant::kBlock;
        if (cols - i0 < quant::kBlock) {
            scale[b] = quantize_block(x + i0, std::max<std::int64_t>(cols - i0, 0), q + i0, sum[b]);
            continue;
        }
        const __m512 x0 = _mm512_loadu_ps(x + i0), x1 = _mm512_loadu_ps(x + i0 + 16);
        // max(|x|, running): a NaN keeps the running value, as std::max does
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(x1, abs_mask), _mm512_and_ps(x0, abs_mask)));
        const float inv = amax > 0 ? 127.0f / amax : 0.0f;
        const __m512 vi = _mm512_set1_ps(inv);
        // rounding to nearest even, as nearbyint in the default rounding mode
        const __m512i c0 = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(x0, vi), lo), hi));
        const __m512i c1 = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(x1, vi), lo), hi));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i0), _mm512_cvtsepi32_epi8(c0));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i0 + 16), _mm512_cvtsepi32_epi8(c1));
        scale[b] = amax / 127.0f;
        sum[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(c0, c1));
    }
}

/// Panels [p0, p1) of w for all tokens of `a` (their activations in `ga`, offset as above).
inline void panels(const WeightView& w, const QuantActs& a, const GroupActs& ga, std::int64_t p0, std::int64_t p1, Rows<float> y) {
    constexpr int P = PanelVnni::P, G = PanelVnni::G;
    const bool q4 = w.dtype == DType::Q4;
    const PanelPrefetch plan = avx512_panel_prefetch(w.dtype, a.tokens, isa_report().features);
    float* yt[G];
    for (std::int64_t p = p0; p < p1; ++p) {
        const std::int64_t n0 = p * P, rows = std::min<std::int64_t>(P, w.rows() - n0);
        const auto mask = static_cast<__mmask16>((1u << rows) - 1u);
        for (std::int64_t t0 = 0; t0 < a.tokens; t0 += G) {
            const int n = static_cast<int>(std::min<std::int64_t>(G, a.tokens - t0));
            for (int t = 0; t < n; ++t) yt[t] = y.row(t0 + t) + n0;
            const PanelPrefetch pf = t0 == 0 ? plan : PanelPrefetch{};  // later groups find the panel in L2
            if (q4) PanelVnni::dispatch<true>(n, w.panel(p), a.blocks, ga.group(t0), pf, yt, mask);
            else PanelVnni::dispatch<false>(n, w.panel(p), a.blocks, ga.group(t0), pf, yt, mask);
        }
    }
}

// ---- the vector layer of float_kernels-inl.hpp: 16 floats ----------------------------------
using V = __m512;
inline constexpr std::int64_t kLanes = 16;
inline constexpr int kBf16Rows = 4, kBf16Tokens = 4;  ///< 4 × 4 accumulators + operands: 26 of 32 registers
inline V vzero() { return _mm512_setzero_ps(); }
inline V vsplat(float a) { return _mm512_set1_ps(a); }
inline V vload(const float* p) { return _mm512_loadu_ps(p); }
/// v, held in a register for its several uses. GCC tuned for Zen 4 (-march=znver4, which
/// -march=native gives there) folds such a vector's load into every FMA that uses it instead, and
/// the bf16 tiles, four loads where one serves, ran load-bound: 1.6 times slower.
inline V vhold(V v) {
    asm("" : "+v"(v));
    return v;
}
inline void vstore(float* p, V v) { _mm512_storeu_ps(p, v); }
inline V vadd(V a, V b) { return _mm512_add_ps(a, b); }
inline V vsub(V a, V b) { return _mm512_sub_ps(a, b); }
inline V vmul(V a, V b) { return _mm512_mul_ps(a, b); }
inline V vfma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
inline V vdiv(V a, V b) { return _mm512_div_ps(a, b); }
inline V vmin(V a, V b) { return _mm512_min_ps(a, b); }
inline V vmax(V a, V b) { return _mm512_max_ps(a, b); }
inline V vabs(V a) { return _mm512_abs_ps(a); }
inline V vcopysign(V mag, V sign) {  // |mag| with the sign bit of `sign`
    const __m512i s = _mm512_set1_epi32(static_cast<int>(0x80000000u));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_andnot_si512(s, _mm512_castps_si512(mag)), _mm512_and_si512(s, _mm512_castps_si512(sign))));
}
inline V vselect_lt(V a, V b, V x, V y) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), y, x); }
inline V vround(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline V vpow2i(V n) {  // 2^n for whole n in [−126, 127]: n + 127 in the exponent field
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
inline float vsum(V a) { return _mm512_reduce_add_ps(a); }
inline V vload_i8(const std::int8_t* c) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c))));
}
inline void vload_bf16(const std::uint16_t* w, V& even, V& odd) {
    const __m512i v = _mm512_loadu_si512(w);  // rows of odd K are not 4-byte aligned: unaligned load
    even = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    odd = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

#include <gemma4/kernels/isa/float_kernels-inl.hpp>

}  // namespace gemma4::detail::avx512

#pragma GCC diagnostic pop
GEMMA4_TARGET_END
