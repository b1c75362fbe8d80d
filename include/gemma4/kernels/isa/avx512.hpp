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
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace gemma4::inline GEMMA4_ABI::detail::avx512 {

// The Q8/Q4 panel kernel (vpdpbusd, 64 int8 products per instruction). A panel interleaves its
// 16 rows in 4-byte words, so one 64-byte load holds 4 codes of each row: a 32-column unit is 8
// such vectors, and a block (one or two units) is loaded once and met by the broadcast
// activation words of up to 16 tokens, each token's block sum then taking one convert and one
// FMA, with no shuffles and no horizontal sums. The weights stream once per pass, as one
// contiguous prefetched sequence; more than 16 tokens make more passes over a panel, which is
// then in L2. vpdpbusd multiplies unsigned by signed bytes, so weights enter as unsigned (Q8:
// code + 128 by flipping the sign bit; Q4: the stored nibble, code + 8) and each block's int32
// sum starts at −offset·Σx.
struct PanelVnni {
    /// The offset that makes a weight code unsigned (GroupActs).
    static constexpr int offset(DType t) { return t == DType::Q4 ? quant::kQ4Offset : 128; }

    static constexpr int P = static_cast<int>(quant::kPanelRows);  ///< rows per panel: the 16 int32 lanes of a zmm
    static constexpr int G = static_cast<int>(kGroupTokens);  ///< tokens per pass: 16 float accumulators in registers

    /// The N tokens of one group over one panel of Block-element blocks: y[t][0 … 16) for the
    /// panel's rows (mask). Prefetches the panel's stream as `pf` says (none: already cached).
    template <bool Q4, int N, int Block>
    static void pass(const std::byte* panel, std::int64_t blocks, const std::int32_t* act, PanelPrefetch pf, float* const y[N],
                     __mmask16 mask) {
        constexpr DType kType = Q4 ? DType::Q4 : DType::Q8;
        constexpr int U = Block / 32, W = Block / 4, R = W + 2;  // units and words per block, record words per token
        // Eight tokens at a time: eight independent vpdpbusd chains cover its latency (5 cycles
        // at one per cycle; four chains left a batch of 16 decoding 10 % slower). Fewer tokens
        // than that keep one sum per unit, so that a 64-element block still gives two chains.
        constexpr int C = N < 8 ? N : 8, S = C <= 4 ? U : 1;
        const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80)), low4 = _mm512_set1_epi8(0x0f);
        __m512 acc[N];
        for (int t = 0; t < N; ++t) acc[t] = _mm512_setzero_ps();
        for (std::int64_t b = 0; b < blocks; ++b) {
            if (pf) prefetch_block<kType, Block>(panel, b, pf);
            __m512i wv[W];
            const std::byte* base = panel + quant::block_codes_offset(kType, Block, b);
#pragma GCC unroll 16
            for (int s = 0; s < W; ++s) {
                const __m512i v = _mm512_loadu_si512(base + 64 * s);  // unit s / 8 at 512 · (s / 8)
                if constexpr (Q4) {
                    // the low or high nibbles of the units' bytes
                    wv[s] = _mm512_and_si512(quant::unit_high(b * U) ? _mm512_srli_epi16(v, 4) : v, low4);
                } else {
                    wv[s] = _mm512_xor_si512(v, flip);
                }
            }
            const __m512 ws = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + quant::block_scales_offset(kType, Block, b))));
            const std::int32_t* words = act + b * R * N;
            const auto* xs = reinterpret_cast<const float*>(words + W * N);
            const std::int32_t* start = words + (W + 1) * N;
            // the accumulators stay in registers, a few in L1 (the loops are unrolled fully)
#pragma GCC unroll 16
            for (int t0 = 0; t0 < N; t0 += C) {
                __m512i isum[C][S];
#pragma GCC unroll 8
                for (int c = 0; c < C; ++c)
#pragma GCC unroll 2
                    for (int k = 0; k < S; ++k)
                        if (t0 + c < N) isum[c][k] = k == 0 ? _mm512_set1_epi32(start[t0 + c]) : _mm512_setzero_si512();
#pragma GCC unroll 16
                for (int s = 0; s < W; ++s)
#pragma GCC unroll 8
                    for (int c = 0; c < C; ++c)
                        if (t0 + c < N)
                            isum[c][s / 8 % S] = _mm512_dpbusd_epi32(isum[c][s / 8 % S], wv[s], _mm512_set1_epi32(words[s * N + t0 + c]));
#pragma GCC unroll 8
                for (int c = 0; c < C; ++c) {
                    if (t0 + c >= N) break;
                    __m512i sum = isum[c][0];
                    if constexpr (S > 1) sum = _mm512_add_epi32(sum, isum[c][1]);  // exact: the order of an int32 sum is free
                    acc[t0 + c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(ws, _mm512_set1_ps(xs[t0 + c])), acc[t0 + c]);
                }
            }
        }
        for (int t = 0; t < N; ++t) _mm512_mask_storeu_ps(y[t], mask, acc[t]);
    }

    /// pass<true, 1, Block> taken a 128-column group (4 units) at a time. One token does 8
    /// products per 64 loaded bytes, and Q4 reads each 64 bytes for two units (k and k + 2 hold
    /// their codes as the low and high nibbles), so the loads and the unpacking weigh as much as
    /// the products: here the group's 1024 code bytes are loaded once for both nibbles, and the
    /// four units' sums are four independent chains (a 64-element block adds its two). The float
    /// accumulation keeps block order, so the output has the same bits. Streamed from memory on
    /// a 2-thread AMD Zen 5, 4–15 % faster (docs/perf-log/); Q8, which loads each byte once
    /// anyway, gained nothing in the model.
    template <int Block>
    static void pass_q4_one_token(const std::byte* panel, std::int64_t blocks, const std::int32_t* act, PanelPrefetch pf, float* y,
                                  __mmask16 mask) {
        constexpr int U = Block / 32, W = Block / 4, R = W + 2, B = static_cast<int>(quant::group_blocks(Block));
        const __m512i low4 = _mm512_set1_epi8(0x0f);
        // one token's record per block (GroupActs, n = 1): W words, the x scale, the start value;
        // word s of unit u of the group is word (u % U)·8 + s of its block
        const auto word = [&](std::int64_t b0, int u, int s) { return _mm512_set1_epi32(act[(b0 + u / U) * R + u % U * 8 + s]); };
        __m512 acc = _mm512_setzero_ps();
        for (std::int64_t b0 = 0; b0 < blocks; b0 += B) {  // blocks is a whole number of groups
            if (pf) {
#pragma GCC unroll 4
                for (int k = 0; k < B; ++k) prefetch_block<DType::Q4, Block>(panel, b0 + k, pf);
            }
            __m512i isum[4];  // per unit; a block's start value in its first unit's sum
#pragma GCC unroll 4
            for (int u = 0; u < 4; ++u) isum[u] = u % U == 0 ? _mm512_set1_epi32(act[(b0 + u / U) * R + W + 1]) : _mm512_setzero_si512();
            const std::byte* base = panel + quant::block_codes_offset(DType::Q4, Block, b0);
#pragma GCC unroll 2
            for (int k = 0; k < 2; ++k)  // units k (low nibbles) and k + 2 (high nibbles)
#pragma GCC unroll 8
                for (int s = 0; s < 8; ++s) {
                    const __m512i v = _mm512_loadu_si512(base + quant::kUnitBytes * k + 64 * s);
                    isum[k] = _mm512_dpbusd_epi32(isum[k], _mm512_and_si512(v, low4), word(b0, k, s));
                    isum[k + 2] = _mm512_dpbusd_epi32(isum[k + 2], _mm512_and_si512(_mm512_srli_epi16(v, 4), low4), word(b0, k + 2, s));
                }
#pragma GCC unroll 4
            for (int k = 0; k < B; ++k) {
                const std::int64_t b = b0 + k;
                __m512i sum = isum[k * U];
                if constexpr (U > 1) sum = _mm512_add_epi32(sum, isum[k * U + 1]);
                const __m512 ws = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + quant::block_scales_offset(DType::Q4, Block, b))));
                const float xs = std::bit_cast<float>(act[b * R + W]);
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(ws, _mm512_set1_ps(xs)), acc);
            }
        }
        _mm512_mask_storeu_ps(y, mask, acc);
    }

    template <bool Q4, int Block, int N = G>
    static void dispatch(int n, const std::byte* panel, std::int64_t blocks, const std::int32_t* act, PanelPrefetch pf,
                         float* const* y, __mmask16 mask) {
        if constexpr (N > 1)
            if (n < N) return dispatch<Q4, Block, N - 1>(n, panel, blocks, act, pf, y, mask);
        if constexpr (Q4 && N == 1) pass_q4_one_token<Block>(panel, blocks, act, pf, y[0], mask);
        else pass<Q4, N, Block>(panel, blocks, act, pf, y, mask);
    }

    /// dispatch for the block size `block` of the weights.
    template <bool Q4>
    static void dispatch(std::int64_t block, int n, const std::byte* panel, std::int64_t blocks, const std::int32_t* act,
                         PanelPrefetch pf, float* const* y, __mmask16 mask) {
        if (block == 64) dispatch<Q4, 64>(n, panel, blocks, act, pf, y, mask);
        else dispatch<Q4, 32>(n, panel, blocks, act, pf, y, mask);
    }
};

/// quantize_row_portable (kernels/quant_acts.hpp; the rule is quant::quantize_symmetric) with
/// whole blocks in registers: the same bits.
template <int Block>
inline void quantize_blocks(const float* x, std::int64_t cols, std::int64_t blocks, std::int8_t* q, float* scale, std::int32_t* sum) {
    constexpr int V = Block / 16;
    const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    const __m512 hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
    for (std::int64_t b = 0; b < blocks; ++b) {
        const std::int64_t i0 = b * Block;
        if (cols - i0 < Block) {
            scale[b] = quantize_block(x + i0, std::max<std::int64_t>(cols - i0, 0), Block, q + i0, sum[b]);
            continue;
        }
        __m512 v[V];
        __m512 m = _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int k = 0; k < V; ++k) {
            v[k] = _mm512_loadu_ps(x + i0 + 16 * k);
            m = _mm512_max_ps(_mm512_and_ps(v[k], abs_mask), m);  // a NaN keeps the running value, as std::max does
        }
        const float amax = _mm512_reduce_max_ps(m);
        const float inv = amax > 0 ? 127.0f / amax : 0.0f;
        const __m512 vi = _mm512_set1_ps(inv);
        __m512i total = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int k = 0; k < V; ++k) {
            // rounding to nearest even, as nearbyint in the default rounding mode
            const __m512i c = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v[k], vi), lo), hi));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i0 + 16 * k), _mm512_cvtsepi32_epi8(c));
            total = _mm512_add_epi32(total, c);
        }
        scale[b] = amax / 127.0f;
        sum[b] = _mm512_reduce_add_epi32(total);
    }
}

/// quantize_blocks<Block> for the block size `block`.
inline void quantize_row(const float* x, std::int64_t cols, std::int64_t block, std::int64_t blocks, std::int8_t* q, float* scale,
                         std::int32_t* sum) {
    if (block == 64) quantize_blocks<64>(x, cols, blocks, q, scale, sum);
    else quantize_blocks<32>(x, cols, blocks, q, scale, sum);
}

/// Panels [p0, p1) of w for all tokens of `a` (their activations in `ga`, offset as above).
#if GEMMA4_KERNEL_BODIES
GEMMA4_KERNEL_ENTRY void panels(const WeightView& w, const QuantActs& a, const GroupActs& ga, std::int64_t p0, std::int64_t p1, Rows<float> y) {
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
            if (q4) PanelVnni::dispatch<true>(w.block, n, w.panel(p), a.blocks, ga.group(t0), pf, yt, mask);
            else PanelVnni::dispatch<false>(w.block, n, w.panel(p), a.blocks, ga.group(t0), pf, yt, mask);
        }
    }
}
#else
GEMMA4_KERNEL_ENTRY void panels(const WeightView& w, const QuantActs& a, const GroupActs& ga, std::int64_t p0, std::int64_t p1, Rows<float> y);
#endif

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
