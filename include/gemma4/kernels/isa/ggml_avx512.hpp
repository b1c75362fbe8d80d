// The AVX-512 VNNI level of kernels/linear_ggml.hpp: the group dot product, and row kernels for
// the common types (Q4_K, Q5_K, Q6_K, IQ4_XS) that unpack each stored super-block straight into
// registers, for one token and for up to 16 tokens per pass over a row (the decoders to IntBlocks
// are the AVX2 level's).
//
// vpdpbusd multiplies the unsigned codes u = c + offset by the signed activations and adds 4
// products into each int32 lane; it starts from −offset · Σ xq of the same 4 values
// (GgmlTokenActs::start), so each lane ends at s = Σ c · xq exactly. One register holds two blocks:
// the lanes of an even block in 0–7, of an odd one in 8–15, which is the lane order of
// ggml_dot_groups_portable, so the float steps and their bits are the same.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/kernels/isa/ggml_avx2.hpp>
#include <gemma4/kernels/quant_acts.hpp>
#include <gemma4/kernels/target.hpp>
#include <gemma4/tensor/ggml_blocks.hpp>

#include <cstdint>
#include <cstring>
#include <type_traits>

GEMMA4_TARGET_AVX512_BEGIN
namespace gemma4::inline GEMMA4_ABI::detail::ggml_avx512 {

/// One group of 8 blocks in registers: what a decoder makes of a stored super-block (or of 8
/// blocks of 32) and what the dot product reads.
struct Group {
    __m512i u[4];  ///< codes of blocks 2p (bytes 0–31) and 2p + 1 (32–63)
    __m512 k;      ///< k of the 16 halves, [2b + h]
    __m256i m;     ///< mins of the 16 halves as int16, [2b + h]
    __m256 d, dmin;
};

/// A group's terms of one token (at the group's activations) into the lanes: the float steps of
/// ggml_dot_groups_portable (kernels/linear_ggml.hpp), two blocks per register.
template <bool Mins>
inline void add_group(const Group& w, const GgmlTokenActs& x, __m512& acc, __m256& off) {
    const __m512i spread = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m256 xs = _mm256_loadu_ps(x.scale);
    const __m512 gk = _mm512_mul_ps(w.k, _mm512_permutexvar_ps(spread, _mm512_castps256_ps512(_mm256_mul_ps(w.d, xs))));
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
        // pair p's lanes read G[4p], G[4p + 1] (block 2p) and G[4p + 2], G[4p + 3] (block 2p + 1)
        const __m512i pick = _mm512_add_epi32(_mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 2),
                                              _mm512_set1_epi32(4 * p));
        const __m512i start = x.start ? _mm512_loadu_si512(x.start + 16 * p) : _mm512_setzero_si512();
        const __m512i s = _mm512_dpbusd_epi32(start, w.u[p], _mm512_loadu_si512(x.q + 64 * p));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_permutexvar_ps(pick, gk), acc);
    }
    if constexpr (Mins) {
        const __m256i m = _mm256_madd_epi16(w.m, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.halves)));
        off = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(w.dmin, xs), off);
    }
}

/// Decoded groups (IntBlocks) into registers.
inline void load_group(const ggml::IntBlocks& w, Group& g) {
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) g.u[p] = _mm512_loadu_si512(w.codes + 64 * p);
    g.k = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.scale))));
    g.m = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.min));
    g.d = _mm256_loadu_ps(w.d);
    g.dmin = _mm256_loadu_ps(w.dmin);
}

/// ggml_dot_groups_portable (kernels/linear_ggml.hpp) over decoded groups: the same bits.
inline void dot_groups(const ggml::IntBlocks& w, std::int64_t groups, const GgmlTokenActs& x, bool mins, GgmlLanes& lanes) {
    __m512 acc = _mm512_loadu_ps(lanes.acc);
    __m256 off = _mm256_loadu_ps(lanes.off);
    Group grp;
    for (std::int64_t g = 0; g < groups; ++g) {
        load_group(w.at(8 * g), grp);
        if (mins) add_group<true>(grp, x.group(g), acc, off);
        else add_group<false>(grp, x.group(g), acc, off);
    }
    _mm512_storeu_ps(lanes.acc, acc);
    _mm256_storeu_ps(lanes.off, off);
}

// Decoders of stored super-blocks straight into registers, for the row kernels: the bytes of the
// portable decoders (ggml_blocks.hpp), tested through the dot products' bits. The scalar parts
// (scales, f16 splats) are the AVX2 level's.
using ggml_avx2::half_splat;
using ggml_avx2::halves_i16;

/// 8 bytes, one per block, as the 16 halves' values [2b + h] = byte b, in float.
inline __m512 halves_f32(std::uint64_t bytes) { return _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(halves_i16(bytes))); }

/// Q4_K (Q5 false) and Q5_K.
template <bool Q5>
inline void unpack_q45_k(const std::byte* b, Group& g) {
    std::uint64_t scales, mins;
    ggml_avx2::q4_k_scales(b + 4, scales, mins);
    g.k = halves_f32(scales);
    g.m = halves_i16(mins);
    g.d = half_splat(b);
    g.dmin = half_splat(b + 2);
    const std::byte* qs = b + (Q5 ? 48 : 16);
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    [[maybe_unused]] const __m512i qh = Q5 ? _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16))) : __m512i{};
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {  // block 2p: the low nibbles of qs[32p …], block 2p + 1: the high ones
        const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * p)));
        __m512i u = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xffff0000u, v, 4), low4);
        if constexpr (Q5) {  // bit 2p (block 2p) or 2p + 1 of qh[l] as bit 4
            const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(2 * p)), _mm256_set1_epi16(static_cast<short>(2 * p + 1)), 1);
            u = _mm512_or_si512(u, _mm512_and_si512(_mm512_slli_epi16(_mm512_srlv_epi16(qh, shift), 4), _mm512_set1_epi8(0x10)));
        }
        g.u[p] = u;
    }
}

inline void unpack_q6_k(const std::byte* b, Group& g) {
    g.k = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192))));
    g.m = _mm256_setzero_si256();
    g.d = half_splat(b + 208);
    g.dmin = _mm256_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30);
    const __m512i shift_up = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shift_down = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {  // blocks 4h + s: ql[64h …] low (s = 0, 1) or high nibbles (2, 3), qh bits 2s, 2s + 1
        const __m512i ql = _mm512_loadu_si512(b + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h)));
        g.u[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, low4), _mm512_and_si512(_mm512_sllv_epi16(qh, shift_up), bits45));
        g.u[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4), _mm512_and_si512(_mm512_srlv_epi16(qh, shift_down), bits45));
    }
}

inline void unpack_iq4_xs(const std::byte* b, Group& g) {
    const unsigned scales_h = ggml::read_u16(b + 2);
    std::uint32_t scales_l;
    std::memcpy(&scales_l, b + 4, 4);
    // sub-block j's 6-bit scale: nibble j of scales_l, bits 2j, 2j + 1 of scales_h; offset 32
    const __m512i j = _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 1);
    const __m512i low = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(scales_l)), _mm512_slli_epi32(j, 2)), _mm512_set1_epi32(15));
    const __m512i high = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(scales_h)), _mm512_slli_epi32(j, 1)), _mm512_set1_epi32(3));
    g.k = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_or_si512(low, _mm512_slli_epi32(high, 4)), _mm512_set1_epi32(32)));
    g.m = _mm256_setzero_si256();
    g.d = half_splat(b);
    g.dmin = _mm256_setzero_ps();
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ggml::kIq4Codes.data())));
    const __m512i low4 = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {  // blocks 2p, 2p + 1: 16 bytes each, values j low and j + 16 high
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 8 + 32 * p));
        const __m512i four = _mm512_shuffle_i64x2(_mm512_castsi256_si512(v), _mm512_castsi256_si512(v), 0x50);  // 128-bit lanes 0, 0, 1, 1
        const __m512i nib = _mm512_and_si512(_mm512_mask_srli_epi16(four, 0xff00ff00u, four, 4), low4);
        g.u[p] = _mm512_shuffle_epi8(table, nib);
    }
}

using Unpack = void (*)(const std::byte*, Group&);

inline float lanes_sum(__m512 acc, __m256 off) {
    return ggml_avx2::lanes_sum(_mm512_castps512_ps256(acc), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)), off);
}

/// One row of stored super-blocks times one token, each group decoded in registers.
template <Unpack U, std::int64_t Bytes, bool Mins>
inline float dot_row_stored(const std::byte* row, std::int64_t groups, const GgmlTokenActs& x) {
    Group grp;
    __m512 acc = _mm512_setzero_ps();
    __m256 off = _mm256_setzero_ps();
    for (std::int64_t g = 0; g < groups; ++g) {
        U(row + g * Bytes, grp);
        add_group<Mins>(grp, x.group(g), acc, off);
    }
    return lanes_sum(acc, off);
}

/// The same for `tokens` tokens (into y[t], with their lanes in `lanes`), each group decoded
/// once for all of them.
template <Unpack U, std::int64_t Bytes, bool Mins>
inline void dot_row_stored_tokens(const std::byte* row, std::int64_t groups, const GgmlTokenActs* x, std::int64_t tokens, GgmlLanes* lanes,
                                  float* y) {
    Group grp;
    for (std::int64_t t = 0; t < tokens; ++t) lanes[t] = {};
    for (std::int64_t g = 0; g < groups; ++g) {
        U(row + g * Bytes, grp);
        for (std::int64_t t = 0; t < tokens; ++t) {
            __m512 acc = _mm512_loadu_ps(lanes[t].acc);
            __m256 off = _mm256_loadu_ps(lanes[t].off);
            add_group<Mins>(grp, x[t].group(g), acc, off);
            if (g + 1 == groups) {
                y[t] = lanes_sum(acc, off);
                continue;
            }
            _mm512_storeu_ps(lanes[t].acc, acc);
            _mm256_storeu_ps(lanes[t].off, off);
        }
    }
}

using DotRowStored = ggml_avx2::DotRowStored;
using DotRowStoredTokens = ggml_avx2::DotRowStoredTokens;

/// The row kernels of `t` that decode in registers (one token, several), or nullptr (then rows
/// are decoded to IntBlocks first).
template <bool Tokens>
inline auto stored_row_kernel(GgmlType t) {
    using Kernel = std::conditional_t<Tokens, DotRowStoredTokens, DotRowStored>;
    const auto pick = [&]<Unpack U, std::int64_t Bytes, bool Mins>() -> Kernel {
        if constexpr (Tokens) return dot_row_stored_tokens<U, Bytes, Mins>;
        else return dot_row_stored<U, Bytes, Mins>;
    };
    switch (t) {
        case GgmlType::Q4_K: return pick.template operator()<unpack_q45_k<false>, 144, true>();
        case GgmlType::Q5_K: return pick.template operator()<unpack_q45_k<true>, 176, true>();
        case GgmlType::Q6_K: return pick.template operator()<unpack_q6_k, 210, false>();
        case GgmlType::IQ4_XS: return pick.template operator()<unpack_iq4_xs, 136, false>();
        default: return Kernel{nullptr};
    }
}

}  // namespace gemma4::detail::ggml_avx512
GEMMA4_TARGET_END
