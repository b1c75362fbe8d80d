// linear for Q8/Q4 weights (tensor/quant.hpp). The activations of a call are quantized once to
// int8 per 32-element block (scale max|x|/127), so each block's dot product is exact in int32 and
// every output is y = Σ_b isum_b · (w_scale_b · x_scale_b), summed over the blocks in order with
// one multiply-add per block. Both implementations below perform exactly that float sequence, so
// an output does not depend on the thread count, on which other rows or tokens share its tile,
// or on whether its token came alone (decode) or with others (prefill, batches).
//
//  * a portable one (plain loops the compiler vectorises), correct on any x86-64;
//  * an AVX-512 VNNI one (vpdpbusd, 64 int8 products per instruction) over packed panels: 16
//    weight rows are transposed so that one 64-byte vector holds 4 consecutive codes of each of
//    the 16 rows, and 4 activation bytes of one token are broadcast against it. A block is then
//    8 vpdpbusd per (16 rows, token) and a single convert + multiply + FMA, with no horizontal
//    reductions; a register tile of 16 rows × up to 12 tokens reuses each packed vector 12 times.
//    vpdpbusd multiplies unsigned by signed bytes, so weights enter as unsigned (Q8: code + 128
//    by flipping the sign bit; Q4: the stored nibble, code + 8) and each block's int32 sum starts
//    at −offset·Σx, which keeps it exact.
// The packing (a 16 × 16 transpose of 32-bit words per 64 bytes of 16 rows) costs a few
// instructions per weight vector: in decode that hides under the memory stream, in prefill it is
// amortised over all the tokens of a pass.
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

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
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
    // resize, not assign: the buffers are reused across calls and every element is written below
    a.q.resize(static_cast<std::size_t>(tokens * a.padded));
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
            // |x·inv| ≤ 127 up to rounding, so the clamp only guards the last ulp
            for (std::int64_t i = i0; i < i1; ++i) {
                const float r = std::nearbyint(std::min(127.0f, std::max(-127.0f, xr[i] * inv)));
                const auto v = static_cast<std::int8_t>(static_cast<int>(r));
                q[i] = v;
                s += v;
            }
            for (std::int64_t i = i1; i < i0 + quant::kBlock; ++i) q[i] = 0;
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
    if (static_cast<std::int64_t>(ws.size()) < a.blocks) ws.resize(static_cast<std::size_t>(a.blocks));
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
struct PackedVnni {
    static constexpr int P = 16;   ///< weight rows per panel: the 16 int32 lanes of a zmm
    static constexpr int TT = 12;  ///< tokens per register tile: 12 int32 + 12 float accumulators

    /// Activations re-laid per tile of TT tokens (the last tile may be shorter, n tokens): codes
    /// as [padded / 4][n] 32-bit words, then x scales and start values −offset·Σx as
    /// [blocks][n], so a tile's operands for one k step sit at fixed offsets from one pointer.
    struct Tiles {
        std::vector<std::int32_t> words;  ///< tile starting at token t0: at t0 · padded / 4
        std::vector<float> scale;         ///< at t0 · blocks
        std::vector<std::int32_t> start;  ///< at t0 · blocks
    };

    static void tile_acts(const QuantActs& a, int offset, Tiles& out) {
        const std::int64_t words = a.padded / 4;
        out.words.resize(static_cast<std::size_t>(a.tokens * words));
        out.scale.resize(static_cast<std::size_t>(a.tokens * a.blocks));
        out.start.resize(static_cast<std::size_t>(a.tokens * a.blocks));
        for (std::int64_t t0 = 0; t0 < a.tokens; t0 += TT) {
            const std::int64_t n = std::min<std::int64_t>(TT, a.tokens - t0);
            std::int32_t* wd = out.words.data() + t0 * words;
            float* sc = out.scale.data() + t0 * a.blocks;
            std::int32_t* st = out.start.data() + t0 * a.blocks;
            for (std::int64_t t = 0; t < n; ++t) {
                const std::int8_t* q = a.q_row(t0 + t);
                for (std::int64_t k = 0; k < words; ++k) std::memcpy(wd + k * n + t, q + 4 * k, 4);
                for (std::int64_t b = 0; b < a.blocks; ++b) {
                    sc[b * n + t] = a.scale_row(t0 + t)[b];
                    st[b * n + t] = -offset * a.sum_row(t0 + t)[b];
                }
            }
        }
    }

    /// In-register transpose of 16 rows of 16 32-bit words: r[j] lane i ← r[i] lane j.
    static void transpose16(__m512i r[16]) {
        __m512i t[16], u[16];
        for (int i = 0; i < 8; ++i) {
            t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
        }
        for (int i = 0; i < 4; ++i) {
            u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
            u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
            u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
            u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
        }
        // u[4q + c], 128-bit lane l: word 4l + c of rows 4q … 4q + 3
        for (int c = 0; c < 4; ++c) {
            const __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44), v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE);
            const __m512i v2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44), v3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
            r[c] = _mm512_shuffle_i32x4(v0, v2, 0x88);
            r[4 + c] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
            r[8 + c] = _mm512_shuffle_i32x4(v1, v3, 0x88);
            r[12 + c] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
        }
    }

    /// The 16 code rows of the panel at n0 (rows ≤ 16; missing rows repeat row n0 and are
    /// never stored).
    static void panel_rows(const WeightView& w, std::int64_t n0, std::int64_t rows, const std::uint8_t* src[P]) {
        for (int r = 0; r < P; ++r) src[r] = reinterpret_cast<const std::uint8_t*>(w.codes_row(n0 + (r < rows ? r : 0)));
    }

    /// Loads 64-byte chunk c of each panel row as unsigned codes and transposes it: v[j] lane r
    /// holds codes 4j … 4j + 3 of the chunk for row r. Q8 chunks are 64 columns; a Q4 group of
    /// 64 bytes holds two chunks (low nibbles: columns 0–63 of the group, high: 64–127).
    /// Prefetches a few chunks ahead: 16 rows stream at once, more than the hardware prefetcher
    /// follows well when rows are long.
    static void load_chunk(DType dtype, const std::uint8_t* const src[P], std::int64_t c, __m512i v[P]) {
        constexpr std::int64_t ahead = 8 * 64;
        if (dtype == DType::Q8) {
            const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
            for (int r = 0; r < P; ++r) {
                _mm_prefetch(reinterpret_cast<const char*>(src[r] + 64 * c + ahead), _MM_HINT_T0);
                v[r] = _mm512_xor_si512(_mm512_loadu_si512(src[r] + 64 * c), flip);
            }
        } else {
            const __m512i low4 = _mm512_set1_epi8(0x0f);
            const std::int64_t g = c / 2;
            for (int r = 0; r < P; ++r) {
                if (c % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(src[r] + 64 * g + ahead), _MM_HINT_T0);
                const __m512i b = _mm512_loadu_si512(src[r] + 64 * g);
                v[r] = _mm512_and_si512(c % 2 ? _mm512_srli_epi16(b, 4) : b, low4);
            }
        }
        transpose16(v);
    }

    /// The panel's block scales as float [blocks][16 rows].
    static void pack_scales(const WeightView& w, std::int64_t n0, std::int64_t rows, std::int64_t blocks, float* scales) {
        const std::uint16_t* ssrc[P];
        for (int r = 0; r < P; ++r) ssrc[r] = w.scales_row(n0 + (r < rows ? r : 0));
        __m512i v[P];
        for (std::int64_t b0 = 0; b0 < blocks; b0 += 16) {
            const int nb = static_cast<int>(std::min<std::int64_t>(16, blocks - b0));
            const auto m = static_cast<__mmask16>((1u << nb) - 1u);
            for (int r = 0; r < P; ++r) v[r] = _mm512_castps_si512(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, ssrc[r] + b0)));
            transpose16(v);
            for (int j = 0; j < nb; ++j) _mm512_storeu_si512(scales + (b0 + j) * P, v[j]);
        }
    }

    /// Packs the panel's codes as unsigned bytes [padded / 4][16 rows][4].
    static void pack(const WeightView& w, std::int64_t n0, std::int64_t rows, std::int64_t padded, std::uint8_t* codes) {
        const std::uint8_t* src[P];
        panel_rows(w, n0, rows, src);
        __m512i v[P];
        for (std::int64_t c = 0; c < padded / 64; ++c) {
            load_chunk(w.dtype, src, c, v);
            for (int j = 0; j < P; ++j) _mm512_store_si512(codes + (16 * c + j) * 64, v[j]);
        }
    }

    /// One block for TTT tokens: 8 packed vectors `wv`, then acc[t] += isum · (w_scale · x_scale).
    template <int TTT>
    static void block(const __m512i* wv, const float* scales, const std::int32_t* xw, const float* xs,
                      const std::int32_t* xstart, __m512 acc[TTT]) {
        __m512i isum[TTT];
        for (int t = 0; t < TTT; ++t) isum[t] = _mm512_set1_epi32(xstart[t]);
        for (int s = 0; s < quant::kBlock / 4; ++s)
            for (int t = 0; t < TTT; ++t) isum[t] = _mm512_dpbusd_epi32(isum[t], wv[s], _mm512_set1_epi32(xw[s * TTT + t]));
        const __m512 ws = _mm512_loadu_ps(scales);
        for (int t = 0; t < TTT; ++t)
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(ws, _mm512_set1_ps(xs[t])), acc[t]);
    }

    /// Sums each half (lanes 0–7, 8–15) of r[0 … 15]: b0 lane i = Σ of r[i] lanes 0–7, b1 lane i
    /// = Σ of r[i] lanes 8–15. Integer sums are exact, so the order of this tree is free.
    static void reduce16(const __m512i r[P], __m512i& b0, __m512i& b1) {
        __m512i a[8], b[4];
        for (int i = 0; i < 8; ++i)
            a[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]), _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]));
        // b[q], 128-bit lane l: the sums of words 4l … 4l + 3 of rows 4q … 4q + 3
        for (int q = 0; q < 4; ++q)
            b[q] = _mm512_add_epi32(_mm512_unpacklo_epi64(a[2 * q], a[2 * q + 1]), _mm512_unpackhi_epi64(a[2 * q], a[2 * q + 1]));
        const __m512i x01 = _mm512_add_epi32(_mm512_shuffle_i32x4(b[0], b[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                             _mm512_shuffle_i32x4(b[0], b[1], _MM_SHUFFLE(3, 1, 3, 1)));
        const __m512i x23 = _mm512_add_epi32(_mm512_shuffle_i32x4(b[2], b[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                             _mm512_shuffle_i32x4(b[2], b[3], _MM_SHUFFLE(3, 1, 3, 1)));
        b0 = _mm512_shuffle_i32x4(x01, x23, _MM_SHUFFLE(2, 0, 2, 0));
        b1 = _mm512_shuffle_i32x4(x01, x23, _MM_SHUFFLE(3, 1, 3, 1));
    }

    /// Few tokens (decode): no packing. Each row's 64-byte chunk meets the activations in one
    /// vpdpbusd (lanes 0–7: the chunk's first block, 8–15: its second), whose start values carry
    /// −offset·Σx / 8 per lane; the 16 rows' lanes are then summed into per-block totals with
    /// rows in lanes (reduce16), and the same float sequence as the packed kernel follows. Fewer
    /// shuffles than transposing the weights, which matters when decode is not purely memory
    /// bound (int4, or a loaded machine).
    template <int TTT>
    static void fused(const WeightView& w, std::int64_t n0, std::int64_t rows, std::int64_t next_end, const float* scales,
                      const QuantActs& a, const std::int32_t* starts, Rows<float> y) {
        const std::uint8_t* src[P];
        panel_rows(w, n0, rows, src);
        const std::int64_t chunks = a.padded / 64;
        const bool q8 = w.dtype == DType::Q8;
        const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80)), low4 = _mm512_set1_epi8(0x0f);
        // While this panel streams, the next one (codes and scales, contiguous rows) is
        // prefetched into L2 in one linear sweep spread over the chunks: a panel starts 16 row
        // streams at once, and their first lines would otherwise arrive at full memory latency.
        const std::int64_t next = n0 + P, next_rows = std::min<std::int64_t>(P, next_end - next);
        const auto* next_codes = next_rows > 0 ? reinterpret_cast<const char*>(w.codes_row(next)) : nullptr;
        const auto* next_scales = next_rows > 0 ? reinterpret_cast<const char*>(w.scales_row(next)) : nullptr;
        const std::int64_t code_lines = next_rows * quant::row_bytes(w.dtype, w.cols()) / 64,
                           scale_lines = (next_rows * quant::scale_row_bytes(w.cols()) + 63) / 64;
        const std::int64_t code_step = (code_lines + chunks - 1) / chunks, scale_step = (scale_lines + chunks - 1) / chunks;
        __m512 acc[TTT];
        for (int t = 0; t < TTT; ++t) acc[t] = _mm512_setzero_ps();
        __m512i wv[P], r[P];
        for (std::int64_t c = 0; c < chunks; ++c) {
            if (next_codes) {
                for (std::int64_t l = c * code_step; l < std::min(code_lines, (c + 1) * code_step); ++l)
                    _mm_prefetch(next_codes + 64 * l, _MM_HINT_T1);
                for (std::int64_t l = c * scale_step; l < std::min(scale_lines, (c + 1) * scale_step); ++l)
                    _mm_prefetch(next_scales + 64 * l, _MM_HINT_T1);
            }
            for (int i = 0; i < P; ++i) {
                if (q8) {
                    wv[i] = _mm512_xor_si512(_mm512_loadu_si512(src[i] + 64 * c), flip);
                } else {
                    const __m512i v = _mm512_loadu_si512(src[i] + 64 * (c / 2));
                    wv[i] = _mm512_and_si512(c % 2 ? _mm512_srli_epi16(v, 4) : v, low4);
                }
            }
            const __m512 ws0 = _mm512_loadu_ps(scales + 2 * c * P), ws1 = _mm512_loadu_ps(scales + (2 * c + 1) * P);
            for (int t = 0; t < TTT; ++t) {
                const __m512i xv = _mm512_loadu_si512(a.q_row(t) + 64 * c);
                const __m512i st = _mm512_loadu_si512(starts + (t * chunks + c) * 16);
                for (int i = 0; i < P; ++i) r[i] = _mm512_dpbusd_epi32(st, wv[i], xv);
                __m512i s0, s1;
                reduce16(r, s0, s1);
                const float* xs = a.scale_row(t) + 2 * c;
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(ws0, _mm512_set1_ps(xs[0])), acc[t]);
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(ws1, _mm512_set1_ps(xs[1])), acc[t]);
            }
        }
        const auto mask = static_cast<__mmask16>((1u << rows) - 1u);
        for (int t = 0; t < TTT; ++t) _mm512_mask_storeu_ps(y.row(t) + n0, mask, acc[t]);
    }

    /// Start values of fused's vpdpbusd: per token and 64-column chunk, lanes 0–7 −offset·Σx / 8
    /// of the chunk's first block, lanes 8–15 of its second (offset / 8 is an integer: 16 or 1).
    static void fused_starts(const QuantActs& a, int offset, std::vector<std::int32_t>& out) {
        const std::int64_t chunks = a.padded / 64;
        out.resize(static_cast<std::size_t>(a.tokens * chunks * 16));
        for (std::int64_t t = 0; t < a.tokens; ++t)
            for (std::int64_t c = 0; c < chunks; ++c)
                for (int l = 0; l < 16; ++l)
                    out[static_cast<std::size_t>((t * chunks + c) * 16 + l)] = -(offset / 8) * a.sum_row(t)[2 * c + l / 8];
    }

    /// y[t0 + t][n0 + r] for the TTT tokens of one activation tile over a packed panel.
    template <int TTT>
    static void tile(const std::uint8_t* codes, const float* scales, std::int64_t blocks, const std::int32_t* xw,
                     const float* xs, const std::int32_t* xstart, __m512 acc[TTT]) {
        for (int t = 0; t < TTT; ++t) acc[t] = _mm512_setzero_ps();
        for (std::int64_t b = 0; b < blocks; ++b) {
            block<TTT>(reinterpret_cast<const __m512i*>(codes), scales, xw, xs, xstart, acc);
            codes += quant::kBlock / 4 * 64;
            scales += P;
            xw += quant::kBlock / 4 * TTT;
            xs += TTT;
            xstart += TTT;
        }
    }

    template <int TTT>
    static void run_tile(const std::uint8_t* codes, const float* scales, const QuantActs& a, const Tiles& tl, std::int64_t t0,
                         std::int64_t n0, __mmask16 rows, Rows<float> y) {
        __m512 acc[TTT];
        tile<TTT>(codes, scales, a.blocks, tl.words.data() + t0 * (a.padded / 4), tl.scale.data() + t0 * a.blocks,
                  tl.start.data() + t0 * a.blocks, acc);
        for (int t = 0; t < TTT; ++t) _mm512_mask_storeu_ps(y.row(t0 + t) + n0, rows, acc[t]);
    }

    static void dispatch(int n, const std::uint8_t* codes, const float* scales, const QuantActs& a, const Tiles& tl,
                         std::int64_t t0, std::int64_t n0, __mmask16 rows, Rows<float> y) {
        switch (n) {
            case 1: return run_tile<1>(codes, scales, a, tl, t0, n0, rows, y);
            case 2: return run_tile<2>(codes, scales, a, tl, t0, n0, rows, y);
            case 3: return run_tile<3>(codes, scales, a, tl, t0, n0, rows, y);
            case 4: return run_tile<4>(codes, scales, a, tl, t0, n0, rows, y);
            case 5: return run_tile<5>(codes, scales, a, tl, t0, n0, rows, y);
            case 6: return run_tile<6>(codes, scales, a, tl, t0, n0, rows, y);
            case 7: return run_tile<7>(codes, scales, a, tl, t0, n0, rows, y);
            case 8: return run_tile<8>(codes, scales, a, tl, t0, n0, rows, y);
            case 9: return run_tile<9>(codes, scales, a, tl, t0, n0, rows, y);
            case 10: return run_tile<10>(codes, scales, a, tl, t0, n0, rows, y);
            case 11: return run_tile<11>(codes, scales, a, tl, t0, n0, rows, y);
            default: return run_tile<12>(codes, scales, a, tl, t0, n0, rows, y);
        }
    }

    /// Rows [n0, n1) for all tokens. Up to kFusedTokens tokens: one fused sweep per panel.
    /// More: each panel of 16 rows is packed once (it stays in L2) and swept by every token
    /// tile, whose activations come from L2/L3.
    static constexpr std::int64_t kFusedTokens = 4;

    static void rows(const WeightView& w, const QuantActs& a, const Tiles& tl, const std::int32_t* starts, std::int64_t n0,
                     std::int64_t n1, Rows<float> y) {
        struct alignas(64) Line {
            std::uint8_t bytes[64];
        };
        thread_local std::vector<Line> codes;  // 64-byte aligned: read as whole vectors
        thread_local std::vector<float> scales;
        if (static_cast<std::int64_t>(scales.size()) < P * a.blocks) scales.resize(static_cast<std::size_t>(P * a.blocks));
        if (a.tokens <= kFusedTokens) {
            for (std::int64_t p = n0; p < n1; p += P) {
                const std::int64_t r = std::min<std::int64_t>(P, n1 - p);
                pack_scales(w, p, r, a.blocks, scales.data());
                switch (a.tokens) {
                    case 1: fused<1>(w, p, r, n1, scales.data(), a, starts, y); break;
                    case 2: fused<2>(w, p, r, n1, scales.data(), a, starts, y); break;
                    case 3: fused<3>(w, p, r, n1, scales.data(), a, starts, y); break;
                    default: fused<4>(w, p, r, n1, scales.data(), a, starts, y); break;
                }
            }
            return;
        }
        if (static_cast<std::int64_t>(codes.size()) < a.padded / 4) codes.resize(static_cast<std::size_t>(a.padded / 4));
        auto* packed = reinterpret_cast<std::uint8_t*>(codes.data());
        // A pass's tiled activations should stay in L3 (they are re-read once per panel).
        const std::int64_t tb = std::max<std::int64_t>(TT, (8 << 20) / (a.padded + 8 * a.blocks) / TT * TT);
        for (std::int64_t tb0 = 0; tb0 < a.tokens; tb0 += tb) {
            const std::int64_t tb1 = std::min(a.tokens, tb0 + tb);
            for (std::int64_t p = n0; p < n1; p += P) {
                const std::int64_t r = std::min<std::int64_t>(P, n1 - p);
                pack(w, p, r, a.padded, packed);
                pack_scales(w, p, r, a.blocks, scales.data());
                const auto mask = static_cast<__mmask16>((1u << r) - 1u);
                for (std::int64_t t0 = tb0; t0 < tb1; t0 += TT)
                    dispatch(static_cast<int>(std::min<std::int64_t>(TT, tb1 - t0)), packed, scales.data(), a, tl, t0, p, mask, y);
            }
        }
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
#ifdef GEMMA4_HAVE_VNNI512
    if (path == QuantPath::Best) {
        thread_local PackedVnni::Tiles tiles;
        thread_local std::vector<std::int32_t> starts;
        const int offset = w.dtype == DType::Q4 ? quant::kQ4Offset : 128;
        if (tokens <= PackedVnni::kFusedTokens) PackedVnni::fused_starts(a, offset, starts);
        else PackedVnni::tile_acts(a, offset, tiles);
        const PackedVnni::Tiles& tl = tiles;
        const std::int32_t* st = starts.data();
        // Rows in chunks claimed by whichever thread is free: a fixed split makes the slower
        // thread (another process on its core) set the pace of every matrix.
        const std::int64_t chunk = std::max<std::int64_t>(PackedVnni::P, (N / (16 * pool.size()) + PackedVnni::P - 1) / PackedVnni::P * PackedVnni::P);
        pool.parallel_chunks(N, [&](std::int64_t n0, std::int64_t n1) { PackedVnni::rows(w, a, tl, st, n0, n1, y); }, chunk);
        return;
    }
#endif
    const std::int64_t tb = token_block(a.padded + 8 * a.blocks, 4);
    pool.parallel_chunks(
        N,
        [&](std::int64_t n0, std::int64_t n1) {
            for (std::int64_t tb0 = 0; tb0 < tokens; tb0 += tb) {
                const std::int64_t tb1 = std::min(tokens, tb0 + tb);
                for (std::int64_t n = n0; n < n1; ++n) quant_row_portable(w, n, a, tb0, tb1, y);
            }
        },
        std::max<std::int64_t>(16, N / (16 * pool.size())));
    (void)path;
}

}  // namespace gemma4::detail

#undef GEMMA4_HAVE_VNNI512
