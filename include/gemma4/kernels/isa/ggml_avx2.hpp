// The AVX2 level of kernels/linear_ggml.hpp: the block decoders of the common types (Q4_K, Q5_K,
// Q6_K, IQ4_XS, IQ4_NL; the others use the portable ones), which every vector level shares, and
// the group dot product (into GgmlLanes, in their lane order). Compiled for AVX2 whatever the program's flags (kernels/target.hpp);
// called only where kernels/cpu.hpp found the level.
//
// Exactness: a decoder writes the bytes the portable one writes (tested). In the dot product
// vpmaddubsw multiplies unsigned by signed bytes, so the product is taken as |c| · (xq · sign(c))
// with c = u − offset; |c| ≤ 128 and |xq| ≤ 127 keep its int16 pair sums ≤ 32,512, and vpmaddwd
// adds the pairs into int32 lanes of 4 columns each: s, exactly. The float steps are those of
// ggml_dot_groups_portable.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/kernels/quant_acts.hpp>
#include <gemma4/kernels/target.hpp>
#include <gemma4/tensor/ggml_blocks.hpp>

#include <cstdint>
#include <cstring>

GEMMA4_TARGET_AVX2_BEGIN
namespace gemma4::inline GEMMA4_ABI::detail::ggml_avx2 {

inline float half_at(const std::byte* p) { return _cvtsh_ss(ggml::read_u16(p)); }

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline void store32(void* p, __m256i v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }

/// Block b's d and dmin for the 8 blocks of a super-block.
inline void fill_d(const ggml::IntBlocks& out, float d, float dmin) {
    _mm256_storeu_ps(out.d, _mm256_set1_ps(d));
    _mm256_storeu_ps(out.dmin, _mm256_set1_ps(dmin));
}

/// 8 bytes (one per block) as the int16 pairs [v, v] of the 8 blocks' two halves.
inline void store_pairs(std::int16_t* dst, std::uint64_t bytes) {
    const __m128i v = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(bytes)));
    store32(dst, _mm256_set_m128i(_mm_unpackhi_epi16(v, v), _mm_unpacklo_epi16(v, v)));
}

/// Q4_K's (and Q5_K's) 8 six-bit scales and 8 mins from the 12 packed bytes, as two words of 8
/// bytes each (q4_k_scale_min for j = 0 … 7).
inline void q4_k_scales(const std::byte* packed, std::uint64_t& scales, std::uint64_t& mins) {
    std::uint32_t u[3];
    std::memcpy(u, packed, 12);
    constexpr std::uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
    const std::uint32_t sc_lo = u[0] & low6, m_lo = u[1] & low6;
    const std::uint32_t sc_hi = (u[2] & low4) | (((u[0] >> 6) & low2) << 4);
    const std::uint32_t m_hi = ((u[2] >> 4) & low4) | (((u[1] >> 6) & low2) << 4);
    scales = sc_lo | (static_cast<std::uint64_t>(sc_hi) << 32);
    mins = m_lo | (static_cast<std::uint64_t>(m_hi) << 32);
}

/// Q4_K (qh = nullptr) and Q5_K super-blocks: the nibbles of 32 bytes are sub-blocks 2i (low)
/// and 2i + 1 (high), bit blk of qh[l] the 5th bit of sub-block blk.
template <bool Q5>
inline void decode_q45_k(const std::byte* src, std::int64_t count, const ggml::IntBlocks& out) {
    constexpr std::int64_t bytes = Q5 ? 176 : 144;
    const __m256i low4 = _mm256_set1_epi8(0x0f), bit4 = _mm256_set1_epi8(0x10);
    for (std::int64_t s = 0; s < count; ++s) {
        const std::byte* b = src + s * bytes;
        const ggml::IntBlocks o = out.at(8 * s);
        std::uint64_t scales, mins;
        q4_k_scales(b + 4, scales, mins);
        store_pairs(o.scale, scales);
        store_pairs(o.min, mins);
        fill_d(o, half_at(b), half_at(b + 2));
        const std::byte* qs = b + (Q5 ? 48 : 16);
        [[maybe_unused]] const __m256i qh = Q5 ? load32(b + 16) : _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
            const __m256i v = load32(qs + 32 * i);
            __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
            if constexpr (Q5) {  // bit 2i of qh[l] to bit 4 of the low, bit 2i + 1 of the high code
                const __m256i h = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * i));
                lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(h, 4), bit4));
                hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(h, 3), bit4));
            }
            store32(o.codes + 64 * i, lo);
            store32(o.codes + 64 * i + 32, hi);
        }
    }
}

/// Q6_K super-blocks: sub-block 4h + s takes the low (s < 2) or high nibbles of ql[64h + 32(s % 2)
/// + l] and bits 2s, 2s + 1 of qh[32h + l] as bits 4 and 5.
inline void decode_q6_k(const std::byte* src, std::int64_t count, const ggml::IntBlocks& out) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), bits45 = _mm256_set1_epi8(0x30);
    for (std::int64_t s = 0; s < count; ++s) {
        const std::byte* b = src + s * 210;
        const ggml::IntBlocks o = out.at(8 * s);
        store32(o.scale, _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192))));
        store32(o.min, _mm256_setzero_si256());
        fill_d(o, half_at(b + 208), 0.0f);
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            const __m256i l0 = load32(b + 64 * h), l1 = load32(b + 64 * h + 32), qh = load32(b + 128 + 32 * h);
            std::uint8_t* c = o.codes + 128 * h;
            store32(c, _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45)));
            store32(c + 32, _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45)));
            store32(c + 64, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(qh, bits45)));
            store32(c + 96, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4), _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45)));
        }
    }
}

/// IQ4's table lookup of 16 bytes of nibbles (values j low, j + 16 high) into 32 codes.
inline void iq4_block(const std::byte* qs, std::uint8_t* c) {
    const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ggml::kIq4Codes.data()));
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)), low4 = _mm_set1_epi8(0x0f);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(c), _mm_shuffle_epi8(table, _mm_and_si128(v, low4)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(c + 16), _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(v, 4), low4)));
}

inline void decode_iq4_xs(const std::byte* src, std::int64_t count, const ggml::IntBlocks& out) {
    for (std::int64_t s = 0; s < count; ++s) {
        const std::byte* b = src + s * 136;
        const ggml::IntBlocks o = out.at(8 * s);
        const unsigned scales_h = ggml::read_u16(b + 2);
        for (int blk = 0; blk < 8; ++blk) {
            const unsigned ls = ((ggml::byte_at(b + 4, blk / 2) >> (4 * (blk % 2))) & 15u) | (((scales_h >> (2 * blk)) & 3u) << 4);
            o.scale[2 * blk] = o.scale[2 * blk + 1] = static_cast<std::int16_t>(static_cast<int>(ls) - 32);
            iq4_block(b + 8 + 16 * blk, o.codes + 32 * blk);
        }
        store32(o.min, _mm256_setzero_si256());
        fill_d(o, half_at(b), 0.0f);
    }
}

inline void decode_iq4_nl(const std::byte* src, std::int64_t count, const ggml::IntBlocks& out) {
    for (std::int64_t blk = 0; blk < count; ++blk) {
        const std::byte* b = src + blk * 18;
        out.set(blk, half_at(b), 1, 1, 0.0f, 0, 0);
        iq4_block(b + 2, out.codes + 32 * blk);
    }
}

/// Decodes `count` stored blocks of a type (super-blocks of 256 or blocks of 32) into IntBlocks.
using DecodeBlocks = void (*)(const std::byte*, std::int64_t, const ggml::IntBlocks&);

/// This level's decoder of `t`, or nullptr where the portable one serves.
inline DecodeBlocks decoder(GgmlType t) {
    switch (t) {
        case GgmlType::Q4_K: return decode_q45_k<false>;
        case GgmlType::Q5_K: return decode_q45_k<true>;
        case GgmlType::Q6_K: return decode_q6_k;
        case GgmlType::IQ4_XS: return decode_iq4_xs;
        case GgmlType::IQ4_NL: return decode_iq4_nl;
        default: return nullptr;
    }
}

/// The 8 blocks' factors G = k · (d · x_scale) of a group, as the lanes of each block read them:
/// g[b] holds G of its first half in lanes 0–3 and of its second in 4–7.
inline void group_factors(const ggml::IntBlocks& w, const GgmlTokenActs& x, __m256 g[8]) {
    const __m256 f = _mm256_mul_ps(_mm256_loadu_ps(w.d), _mm256_loadu_ps(x.scale));
    const __m256i k = load32(w.scale);
    const __m256 k_lo = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(k)));
    const __m256 k_hi = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(k, 1)));
    const __m256 g_lo = _mm256_mul_ps(k_lo, _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)));
    const __m256 g_hi = _mm256_mul_ps(k_hi, _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7)));
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
        const __m256i idx = _mm256_setr_epi32(2 * j, 2 * j, 2 * j, 2 * j, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1);
        g[j] = _mm256_permutevar8x32_ps(g_lo, idx);
        g[j + 4] = _mm256_permutevar8x32_ps(g_hi, idx);
    }
}

/// The mins' term of a group's 8 blocks: m₀·Σq₀ + m₁·Σq₁ per block (exact in int32), times dmin · x_scale.
inline __m256 group_mins(const ggml::IntBlocks& w, const GgmlTokenActs& x, __m256 off) {
    const __m256i m = _mm256_madd_epi16(load32(w.min), load32(x.halves));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(_mm256_loadu_ps(w.dmin), _mm256_loadu_ps(x.scale)), off);
}

/// ggml_dot_groups_portable (kernels/linear_ggml.hpp) in registers: the same bits.
inline void dot_groups(const ggml::IntBlocks& w, std::int64_t groups, const GgmlTokenActs& x, int offset, bool mins, GgmlLanes& lanes) {
    const __m256i ones = _mm256_set1_epi16(1), shift = _mm256_set1_epi8(static_cast<char>(offset));
    __m256 even = _mm256_loadu_ps(lanes.acc), odd = _mm256_loadu_ps(lanes.acc + 8), off = _mm256_loadu_ps(lanes.off);
    for (std::int64_t g = 0; g < groups; ++g) {
        const ggml::IntBlocks wg = w.at(8 * g);
        const GgmlTokenActs xg{x.q + 256 * g, x.scale + 8 * g, x.halves + 16 * g, nullptr};
        __m256 f[8];
        group_factors(wg, xg, f);
#pragma GCC unroll 8
        for (int b = 0; b < 8; ++b) {
            const __m256i c = _mm256_sub_epi8(load32(wg.codes + 32 * b), shift);
            const __m256i q = load32(xg.q + 32 * b);
            const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(c), _mm256_sign_epi8(q, c)), ones);
            __m256& acc = b % 2 ? odd : even;
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), f[b], acc);
        }
        if (mins) off = group_mins(wg, xg, off);
    }
    _mm256_storeu_ps(lanes.acc, even);
    _mm256_storeu_ps(lanes.acc + 8, odd);
    _mm256_storeu_ps(lanes.off, off);
}

}  // namespace gemma4::detail::ggml_avx2
GEMMA4_TARGET_END
