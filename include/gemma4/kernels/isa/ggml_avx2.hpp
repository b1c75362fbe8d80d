// The AVX2 level of kernels/linear_ggml.hpp: unpackers of the common types' stored super-blocks
// into registers (Q4_K, Q5_K, Q6_K, IQ4_XS) and, with IQ4_NL's, the decoders to IntBlocks that
// every vector level shares (the other types use the portable ones); the group dot product (into
// GgmlLanes, in their lane order); and row kernels that decode in registers, for one token and
// for up to 16 tokens per pass over a row. Compiled
// for AVX2 whatever the program's flags (kernels/target.hpp); called only where kernels/cpu.hpp
// found the level.
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
#include <type_traits>

GEMMA4_TARGET_AVX2_BEGIN
namespace gemma4::inline GEMMA4_ABI::detail::ggml_avx2 {

inline float half_at(const std::byte* p) { return _cvtsh_ss(ggml::read_u16(p)); }

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline void store32(void* p, __m256i v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }

/// One group of 8 blocks in registers: what an unpacker makes of a stored super-block, what the
/// decoders store as IntBlocks and what the dot product reads.
struct Group {
    __m256i u[8];   ///< codes of block b
    __m256i k, m;   ///< scales and mins of the 16 halves as int16, [2b + h]
    __m256 d, dmin;
};

/// 8 bytes, one per block, as the int16 pairs [v, v] of the 8 blocks' two halves.
inline __m256i halves_i16(std::uint64_t bytes) {
    const __m128i v = _mm_cvtsi64_si128(static_cast<long long>(bytes));
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(v, v));
}

inline __m256 half_splat(const std::byte* p) { return _mm256_set1_ps(half_at(p)); }

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

/// Q4_K (Q5 false) and Q5_K super-blocks: the nibbles of 32 bytes are sub-blocks 2i (low) and
/// 2i + 1 (high), bit blk of qh[l] the 5th bit of sub-block blk.
template <bool Q5>
inline void unpack_q45_k(const std::byte* b, Group& g) {
    std::uint64_t scales, mins;
    q4_k_scales(b + 4, scales, mins);
    g.k = halves_i16(scales);
    g.m = halves_i16(mins);
    g.d = half_splat(b);
    g.dmin = half_splat(b + 2);
    const std::byte* qs = b + (Q5 ? 48 : 16);
    const __m256i low4 = _mm256_set1_epi8(0x0f), bit4 = _mm256_set1_epi8(0x10);
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
        g.u[2 * i] = lo;
        g.u[2 * i + 1] = hi;
    }
}

/// Q6_K super-blocks: sub-block 4h + s takes the low (s < 2) or high nibbles of ql[64h + 32(s % 2)
/// + l] and bits 2s, 2s + 1 of qh[32h + l] as bits 4 and 5.
inline void unpack_q6_k(const std::byte* b, Group& g) {
    g.k = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)));
    g.m = _mm256_setzero_si256();
    g.d = half_splat(b + 208);
    g.dmin = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(0x0f), bits45 = _mm256_set1_epi8(0x30);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
        const __m256i l0 = load32(b + 64 * h), l1 = load32(b + 64 * h + 32), qh = load32(b + 128 + 32 * h);
        g.u[4 * h] = _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45));
        g.u[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45));
        g.u[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(qh, bits45));
        g.u[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4), _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45));
    }
}

/// IQ4's table lookup of 16 bytes of nibbles (values j low, j + 16 high) into 32 codes.
inline __m256i iq4_block(const std::byte* qs) {
    const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ggml::kIq4Codes.data()));
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)), low4 = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(v, 4), low4)), _mm_shuffle_epi8(table, _mm_and_si128(v, low4)));
}

inline void unpack_iq4_xs(const std::byte* b, Group& g) {
    const unsigned scales_h = ggml::read_u16(b + 2);
    std::uint32_t scales_l;
    std::memcpy(&scales_l, b + 4, 4);
    // sub-block j's 6-bit scale: nibble j of scales_l, bits 2j, 2j + 1 of scales_h; offset 32
    const __m256i j = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i low = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(scales_l)), _mm256_slli_epi32(j, 2)), _mm256_set1_epi32(15));
    const __m256i high = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(scales_h)), _mm256_slli_epi32(j, 1)), _mm256_set1_epi32(3));
    const __m256i k32 = _mm256_sub_epi32(_mm256_or_si256(low, _mm256_slli_epi32(high, 4)), _mm256_set1_epi32(32));
    // [k_0 … k_7] as int16 pairs [k_b, k_b]: each 32-bit lane k | k << 16
    g.k = _mm256_or_si256(_mm256_and_si256(k32, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(k32, 16));
    g.m = _mm256_setzero_si256();
    g.d = half_splat(b);
    g.dmin = _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int blk = 0; blk < 8; ++blk) g.u[blk] = iq4_block(b + 8 + 16 * blk);
}

/// A group in registers as IntBlocks (block 0 of `out` and on).
inline void store_group(const Group& g, const ggml::IntBlocks& out) {
#pragma GCC unroll 8
    for (int b = 0; b < 8; ++b) store32(out.codes + 32 * b, g.u[b]);
    store32(out.scale, g.k);
    store32(out.min, g.m);
    _mm256_storeu_ps(out.d, g.d);
    _mm256_storeu_ps(out.dmin, g.dmin);
}

/// IntBlocks (block 0 of `w` and on) into registers.
inline void load_group(const ggml::IntBlocks& w, Group& g) {
#pragma GCC unroll 8
    for (int b = 0; b < 8; ++b) g.u[b] = load32(w.codes + 32 * b);
    g.k = load32(w.scale);
    g.m = load32(w.min);
    g.d = _mm256_loadu_ps(w.d);
    g.dmin = _mm256_loadu_ps(w.dmin);
}

using Unpack = void (*)(const std::byte*, Group&);

/// Decodes `count` stored blocks of a type (super-blocks of 256 or blocks of 32) into IntBlocks.
using DecodeBlocks = void (*)(const std::byte*, std::int64_t, const ggml::IntBlocks&);

template <Unpack U, std::int64_t Bytes>
inline void decode_superblocks(const std::byte* src, std::int64_t count, const ggml::IntBlocks& out) {
    Group g;
    for (std::int64_t s = 0; s < count; ++s) {
        U(src + s * Bytes, g);
        store_group(g, out.at(8 * s));
    }
}

inline void decode_iq4_nl(const std::byte* src, std::int64_t count, const ggml::IntBlocks& out) {
    for (std::int64_t blk = 0; blk < count; ++blk) {
        const std::byte* b = src + blk * 18;
        out.set(blk, half_at(b), 1, 1, 0.0f, 0, 0);
        store32(out.codes + 32 * blk, iq4_block(b + 2));
    }
}

/// This level's decoder of `t`, or nullptr where the portable one serves.
inline DecodeBlocks decoder(GgmlType t) {
    switch (t) {
        case GgmlType::Q4_K: return decode_superblocks<unpack_q45_k<false>, 144>;
        case GgmlType::Q5_K: return decode_superblocks<unpack_q45_k<true>, 176>;
        case GgmlType::Q6_K: return decode_superblocks<unpack_q6_k, 210>;
        case GgmlType::IQ4_XS: return decode_superblocks<unpack_iq4_xs, 136>;
        case GgmlType::IQ4_NL: return decode_iq4_nl;
        default: return nullptr;
    }
}

/// The mins' term of a group's 8 blocks: m₀·Σq₀ + m₁·Σq₁ per block (exact in int32), times dmin · x_scale.
inline __m256 group_mins(__m256i mins, __m256 dmin, const GgmlTokenActs& x, __m256 off) {
    const __m256i m = _mm256_madd_epi16(mins, load32(x.halves));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(dmin, _mm256_loadu_ps(x.scale)), off);
}

/// Whether a type's codes u = c + offset are at most 127, so that vpmaddubsw takes them as they
/// are (its int16 pair sums ≤ 2 · 127 · 127) and the start value −offset·Σxq takes the offset out;
/// the codes of offset 128 (IQ4, Q8_0) go through |c| · (xq · sign(c)) instead.
constexpr bool small_codes(int offset) { return offset < 128; }

/// A group's terms of one token (at the group's activations) into the lanes: the float steps of
/// ggml_dot_groups_portable (kernels/linear_ggml.hpp), one block per register. `shift`: the
/// offset in every byte, for codes that are not small.
template <bool Mins, bool Small>
inline void add_group(const Group& w, const GgmlTokenActs& x, __m256i shift, __m256& even, __m256& odd, __m256& off) {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256 f = _mm256_mul_ps(w.d, _mm256_loadu_ps(x.scale));
    const __m256 k_lo = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(w.k)));
    const __m256 k_hi = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(w.k, 1)));
    const __m256 g_lo = _mm256_mul_ps(k_lo, _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)));
    const __m256 g_hi = _mm256_mul_ps(k_hi, _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7)));
#pragma GCC unroll 8
    for (int b = 0; b < 8; ++b) {
        // block b's lanes read G of its first half in 0–3, of its second in 4–7
        const int j = b % 4;
        const __m256 g = _mm256_permutevar8x32_ps(b < 4 ? g_lo : g_hi, _mm256_setr_epi32(2 * j, 2 * j, 2 * j, 2 * j, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1));
        const __m256i q = load32(x.q + 32 * b);
        __m256i s;
        if constexpr (Small) {
            s = _mm256_madd_epi16(_mm256_maddubs_epi16(w.u[b], q), ones);
            if (x.start) s = _mm256_add_epi32(s, load32(x.start + 8 * b));
        } else {
            const __m256i c = _mm256_sub_epi8(w.u[b], shift);
            s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(c), _mm256_sign_epi8(q, c)), ones);
        }
        __m256& acc = b % 2 ? odd : even;
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), g, acc);
    }
    if constexpr (Mins) off = group_mins(w.m, w.dmin, x, off);
}

/// ggml_dot_groups_portable (kernels/linear_ggml.hpp) over decoded groups: the same bits.
inline void dot_groups(const ggml::IntBlocks& w, std::int64_t groups, const GgmlTokenActs& x, int offset, bool mins, GgmlLanes& lanes) {
    const __m256i shift = _mm256_set1_epi8(static_cast<char>(offset));
    __m256 even = _mm256_loadu_ps(lanes.acc), odd = _mm256_loadu_ps(lanes.acc + 8), off = _mm256_loadu_ps(lanes.off);
    Group grp;
    for (std::int64_t g = 0; g < groups; ++g) {
        load_group(w.at(8 * g), grp);
        const GgmlTokenActs xg = x.group(g);
        if (small_codes(offset)) {
            if (mins) add_group<true, true>(grp, xg, shift, even, odd, off);
            else add_group<false, true>(grp, xg, shift, even, odd, off);
        } else {
            if (mins) add_group<true, false>(grp, xg, shift, even, odd, off);
            else add_group<false, false>(grp, xg, shift, even, odd, off);
        }
    }
    _mm256_storeu_ps(lanes.acc, even);
    _mm256_storeu_ps(lanes.acc + 8, odd);
    _mm256_storeu_ps(lanes.off, off);
}

/// ggml_lanes_sum (kernels/linear_ggml.hpp) of lanes in registers: the same bits.
inline float lanes_sum(__m256 even, __m256 odd, __m256 off) {
    const auto sum8 = [](__m256 v) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
    };
    return sum8(_mm256_add_ps(even, odd)) - sum8(off);
}

/// One row of stored super-blocks times one token, each group decoded in registers.
template <Unpack U, std::int64_t Bytes, int Offset, bool Mins>
inline float dot_row_stored(const std::byte* row, std::int64_t groups, const GgmlTokenActs& x) {
    const __m256i shift = _mm256_set1_epi8(static_cast<char>(Offset));
    __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps(), off = _mm256_setzero_ps();
    Group grp;
    for (std::int64_t g = 0; g < groups; ++g) {
        U(row + g * Bytes, grp);
        add_group<Mins, small_codes(Offset)>(grp, x.group(g), shift, even, odd, off);
    }
    return lanes_sum(even, odd, off);
}

/// The same for `tokens` tokens (into y[t], with their lanes in `lanes`), each group decoded
/// once for all of them.
template <Unpack U, std::int64_t Bytes, int Offset, bool Mins>
inline void dot_row_stored_tokens(const std::byte* row, std::int64_t groups, const GgmlTokenActs* x, std::int64_t tokens, GgmlLanes* lanes,
                                  float* y) {
    const __m256i shift = _mm256_set1_epi8(static_cast<char>(Offset));
    Group grp;
    for (std::int64_t t = 0; t < tokens; ++t) lanes[t] = {};
    for (std::int64_t g = 0; g < groups; ++g) {
        U(row + g * Bytes, grp);
        for (std::int64_t t = 0; t < tokens; ++t) {
            __m256 even = _mm256_loadu_ps(lanes[t].acc), odd = _mm256_loadu_ps(lanes[t].acc + 8), off = _mm256_loadu_ps(lanes[t].off);
            add_group<Mins, small_codes(Offset)>(grp, x[t].group(g), shift, even, odd, off);
            if (g + 1 == groups) {
                y[t] = lanes_sum(even, odd, off);
                continue;
            }
            _mm256_storeu_ps(lanes[t].acc, even);
            _mm256_storeu_ps(lanes[t].acc + 8, odd);
            _mm256_storeu_ps(lanes[t].off, off);
        }
    }
}

using DotRowStored = float (*)(const std::byte*, std::int64_t, const GgmlTokenActs&);
using DotRowStoredTokens = void (*)(const std::byte*, std::int64_t, const GgmlTokenActs*, std::int64_t, GgmlLanes*, float*);

/// The row kernels of `t` that decode in registers (one token, several), or nullptr.
template <bool Tokens>
inline auto stored_row_kernel(GgmlType t) {
    using Kernel = std::conditional_t<Tokens, DotRowStoredTokens, DotRowStored>;
    const auto pick = [&]<Unpack U, std::int64_t Bytes, int Offset, bool Mins>() -> Kernel {
        if constexpr (Tokens) return dot_row_stored_tokens<U, Bytes, Offset, Mins>;
        else return dot_row_stored<U, Bytes, Offset, Mins>;
    };
    switch (t) {
        case GgmlType::Q4_K: return pick.template operator()<unpack_q45_k<false>, 144, 0, true>();
        case GgmlType::Q5_K: return pick.template operator()<unpack_q45_k<true>, 176, 0, true>();
        case GgmlType::Q6_K: return pick.template operator()<unpack_q6_k, 210, 32, false>();
        case GgmlType::IQ4_XS: return pick.template operator()<unpack_iq4_xs, 136, 128, false>();
        default: return Kernel{nullptr};
    }
}

}  // namespace gemma4::detail::ggml_avx2
GEMMA4_TARGET_END
