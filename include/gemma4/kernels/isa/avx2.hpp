// The AVX2 level (AVX2 + FMA + F16C): the Q8/Q4 panel kernel (with AVX-VNNI where the CPU has
// it) and the float kernels (kernels/isa/float_kernels-inl.hpp) at 8 lanes. Compiled for AVX2
// whatever the program's flags (kernels/target.hpp); called only where kernels/cpu.hpp found
// the level.
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

GEMMA4_TARGET_AVX2_BEGIN
namespace gemma4::inline GEMMA4_ABI::detail::avx2 {

// ---- the vector layer of float_kernels-inl.hpp: 8 floats -----------------------------------
using V = __m256;
inline constexpr std::int64_t kLanes = 8;
inline constexpr int kBf16Rows = 2, kBf16Tokens = 2;  ///< 2 × 2 accumulators + operands fit 16 registers
inline V vzero() { return _mm256_setzero_ps(); }
inline V vsplat(float a) { return _mm256_set1_ps(a); }
inline V vload(const float* p) { return _mm256_loadu_ps(p); }
inline V vhold(V v) {  // as avx512::vhold
    asm("" : "+x"(v));
    return v;
}
inline void vstore(float* p, V v) { _mm256_storeu_ps(p, v); }
inline V vadd(V a, V b) { return _mm256_add_ps(a, b); }
inline V vsub(V a, V b) { return _mm256_sub_ps(a, b); }
inline V vmul(V a, V b) { return _mm256_mul_ps(a, b); }
inline V vfma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline V vdiv(V a, V b) { return _mm256_div_ps(a, b); }
inline V vmin(V a, V b) { return _mm256_min_ps(a, b); }
inline V vmax(V a, V b) { return _mm256_max_ps(a, b); }
inline V vabs(V a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
inline V vcopysign(V mag, V sign) {  // |mag| with the sign bit of `sign`
    const V s = _mm256_set1_ps(-0.0f);
    return _mm256_or_ps(_mm256_andnot_ps(s, mag), _mm256_and_ps(s, sign));
}
inline V vselect_lt(V a, V b, V x, V y) { return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
inline V vround(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline V vpow2i(V n) {  // 2^n for whole n in [−126, 127]: n + 127 in the exponent field
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
inline float vsum(V a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
inline V vload_i8(const std::int8_t* c) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c))));
}
inline void vload_bf16(const std::uint16_t* w, V& even, V& odd) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    odd = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}

#include <gemma4/kernels/isa/float_kernels-inl.hpp>

/// quantize_row_portable (kernels/quant_acts.hpp; the rule is quant::quantize_symmetric) with
/// whole blocks in registers: the same bits.
template <int Block>
inline void quantize_blocks(const float* x, std::int64_t cols, std::int64_t blocks, std::int8_t* q, float* scale, std::int32_t* sum) {
    constexpr int V = Block / 8;
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
    for (std::int64_t b = 0; b < blocks; ++b) {
        const std::int64_t i0 = b * Block;
        if (cols - i0 < Block) {
            scale[b] = quantize_block(x + i0, std::max<std::int64_t>(cols - i0, 0), Block, q + i0, sum[b]);
            continue;
        }
        __m256 v[V], m = _mm256_setzero_ps();
#pragma GCC unroll 8
        for (int k = 0; k < V; ++k) {
            v[k] = _mm256_loadu_ps(x + i0 + 8 * k);
            m = _mm256_max_ps(_mm256_and_ps(v[k], abs_mask), m);  // a NaN keeps the running value, as std::max does
        }
        __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
        m4 = _mm_max_ps(_mm_movehl_ps(m4, m4), m4);
        m4 = _mm_max_ss(_mm_movehdup_ps(m4), m4);
        const float amax = _mm_cvtss_f32(m4);
        const __m256 vi = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
        __m256i s = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int k0 = 0; k0 < V; k0 += 4) {  // 32 codes at a time
            __m256i c[4];  // rounding to nearest even, as nearbyint in the default rounding mode
            for (int k = 0; k < 4; ++k) c[k] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v[k0 + k], vi), lo), hi));
            // int32 → int16 → int8 packs interleave the 128-bit lanes; the permute puts them back in order
            const __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i0 + 8 * k0),
                                _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
            s = _mm256_add_epi32(s, _mm256_add_epi32(_mm256_add_epi32(c[0], c[1]), _mm256_add_epi32(c[2], c[3])));
        }
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        scale[b] = amax / 127.0f;
        sum[b] = _mm_cvtsi128_si32(s4);
    }
}

/// quantize_blocks<Block> for the block size `block`.
inline void quantize_row(const float* x, std::int64_t cols, std::int64_t block, std::int64_t blocks, std::int8_t* q, float* scale,
                         std::int32_t* sum) {
    if (block == 64) quantize_blocks<64>(x, cols, blocks, q, scale, sum);
    else quantize_blocks<32>(x, cols, blocks, q, scale, sum);
}

inline constexpr bool kAvxVnni = false;
#include <gemma4/kernels/isa/quant_avx2-inl.hpp>

}  // namespace gemma4::detail::avx2
GEMMA4_TARGET_END

GEMMA4_TARGET_AVXVNNI_BEGIN
namespace gemma4::inline GEMMA4_ABI::detail::avxvnni {

inline constexpr bool kAvxVnni = true;
#include <gemma4/kernels/isa/quant_avx2-inl.hpp>

}  // namespace gemma4::detail::avxvnni
GEMMA4_TARGET_END
