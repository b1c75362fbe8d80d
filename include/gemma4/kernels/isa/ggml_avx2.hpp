// The AVX2 kernel of kernels/linear_ggml.hpp: one decoded row (IntBlocks) times one token's
// int8 activations, 32 values per step. Compiled for AVX2 whatever the program's flags
// (kernels/target.hpp); called only where kernels/cpu.hpp found the level.
//
// Exactness: vpmaddubsw multiplies unsigned by signed bytes, so the product is taken as
// |c| · (xq · sign(c)); |c| ≤ 128 and |xq| ≤ 127 keep its int16 pair sums ≤ 32,512. vpmaddwd then
// multiplies the pair sums by the half's scale k (|k| ≤ 127) into int32 lanes of 4 columns each.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/kernels/quant_acts.hpp>
#include <gemma4/kernels/target.hpp>
#include <gemma4/tensor/ggml_blocks.hpp>

#include <cstdint>

GEMMA4_TARGET_AVX2_BEGIN
namespace gemma4::inline GEMMA4_ABI::detail::ggml_avx2 {

/// ggml_row_dot_portable (kernels/linear_ggml.hpp) in registers: the same bits.
inline float row_dot(const ggml::IntBlocks& w, std::int64_t blocks, const GgmlTokenActs& x, bool mins) {
    __m256 acc = _mm256_setzero_ps();
    float offset = 0;
    for (std::int64_t b = 0; b < blocks; ++b) {
        const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.codes + 32 * b));
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + 32 * b));
        const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(c), _mm256_sign_epi8(q, c));
        const __m256i k = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(w.scale[2 * b])), _mm_set1_epi16(w.scale[2 * b + 1]), 1);
        const __m256i s = _mm256_madd_epi16(pairs, k);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(w.d[b] * x.scale[b]), acc);
        if (mins) {
            const std::int32_t m = w.min[2 * b] * x.half[b] + w.min[2 * b + 1] * (x.sum[b] - x.half[b]);
            offset = std::fma(static_cast<float>(m), w.dmin[b] * x.scale[b], offset);
        }
    }
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s) - offset;
}

}  // namespace gemma4::detail::ggml_avx2
GEMMA4_TARGET_END
