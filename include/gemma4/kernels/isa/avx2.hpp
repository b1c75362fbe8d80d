// The AVX2 level (AVX2 + FMA + F16C): the Q8/Q4 panel kernel (with AVX-VNNI where the CPU has
// it) and the float kernels (kernels/isa/float_kernels-inl.hpp) at 8 lanes. Compiled for AVX2
// whatever the program's flags (kernels/target.hpp); called only where kernels/cpu.hpp found
// the level.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/kernels/attention_rows.hpp>
#include <gemma4/kernels/quant_acts.hpp>
#include <gemma4/kernels/rows.hpp>
#include <gemma4/kernels/target.hpp>
#include <gemma4/tensor/dtype.hpp>
#include <gemma4/tensor/quant.hpp>
#include <gemma4/tensor/weight_view.hpp>

#include <algorithm>
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
inline void vstore(float* p, V v) { _mm256_storeu_ps(p, v); }
inline V vadd(V a, V b) { return _mm256_add_ps(a, b); }
inline V vmul(V a, V b) { return _mm256_mul_ps(a, b); }
inline V vfma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
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
