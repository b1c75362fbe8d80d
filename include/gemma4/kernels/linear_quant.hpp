// linear for Q8/Q4 weights held as panels of 16 rows (tensor/quant.hpp). The activations of a
// call are quantized once to int8 per 32-element block (scale max|x|/127), so each block's dot
// product is exact in int32 and every output is y = Σ_b isum_b · (w_scale_b · x_scale_b), summed
// over the blocks in order with one multiply-add per block. Both implementations below perform
// exactly that float sequence, so an output does not depend on the thread count, on which other
// tokens share its pass, or on whether its token came alone (decode) or with others (prefill,
// batches):
//  * a portable one (plain loops the compiler vectorises over each row), correct on any x86-64;
//  * an AVX-512 VNNI one (vpdpbusd, 64 int8 products per instruction). A panel interleaves its
//    16 rows in 4-byte words, so one 64-byte load holds 4 codes of each row: a block (32
//    columns) is 8 such vectors, loaded once and met by the broadcast activation words of up to
//    16 tokens, each token's block sum then taking one convert and one FMA, with no shuffles
//    and no horizontal sums. The weights stream once per pass, as one contiguous prefetched
//    sequence; more than 16 tokens make more passes over a panel, which is then in L2.
//    vpdpbusd multiplies unsigned by signed bytes, so weights enter as unsigned (Q8: code + 128
//    by flipping the sign bit; Q4: the stored nibble, code + 8) and each block's int32 sum
//    starts at −offset·Σx, which keeps it exact;
//  * an AMX one (kernels/amx.hpp) for passes of several tokens: per block, one tile multiply
//    of 16 tokens × 16 rows × 32 codes (tdpbssd: signed × signed, the Q4 nibbles unpacked to
//    code − 8 first) gives the same exact block sums, which then take the same convert and FMA.
//    The tiles of the next two blocks are computed while the vector units scale and add the
//    previous two, so the tile unit and the vector units work side by side.
#pragma once

#include <gemma4/error.hpp>
#include <gemma4/kernels/amx.hpp>
#include <gemma4/kernels/rows.hpp>
#include <gemma4/kernels/thread_pool.hpp>
#include <gemma4/tensor/quant.hpp>
#include <gemma4/tensor/weight_view.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
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

/// Groups of fewer tokens than this go to the VNNI pass even where AMX exists: it reads the
/// weights as fast and has no tile overhead.
inline constexpr int kAmxMinTokens = 8;

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

/// Sizes `a` for tokens × cols (the buffers are reused across calls: resize, not assign, as
/// quantize_activations writes every element).
inline void shape_activations(std::int64_t tokens, std::int64_t cols, QuantActs& a) {
    a.tokens = tokens;
    a.cols = cols;
    a.padded = quant::padded_cols(cols);
    a.blocks = a.padded / quant::kBlock;
    a.q.resize(static_cast<std::size_t>(tokens * a.padded));
    a.scale.resize(static_cast<std::size_t>(tokens * a.blocks));
    a.sum.resize(static_cast<std::size_t>(tokens * a.blocks));
}

/// Quantizes tokens [t0, t1) of x into `a` (shaped by shape_activations).
inline void quantize_activations(Rows<const float> x, std::int64_t t0, std::int64_t t1, QuantActs& a) {
    const std::int64_t cols = a.cols;
    for (std::int64_t t = t0; t < t1; ++t) {
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

/// Row n of a quantized view in the file layout (whatever its layout in memory), in buffers of
/// the calling thread that the next call overwrites.
struct FileRow {
    const std::byte* codes;
    const std::uint16_t* scales;
};
inline FileRow file_row(const WeightView& w, std::int64_t n) {
    thread_local std::vector<std::byte> codes;
    thread_local std::vector<std::uint16_t> scales;
    codes.resize(static_cast<std::size_t>(quant::row_bytes(w.dtype, w.cols())));
    scales.resize(static_cast<std::size_t>(quant::blocks_per_row(w.cols())));
    w.quant_row(n, codes.data(), scales.data());
    return {codes.data(), scales.data()};
}

/// Portable path: y[t0.., n] for one row n (any layout).
inline void quant_row_portable(const WeightView& w, std::int64_t n, const QuantActs& a, std::int64_t t0, std::int64_t t1,
                               Rows<float> y) {
    const FileRow row = file_row(w, n);
    thread_local std::vector<float> ws;
    ws.resize(static_cast<std::size_t>(a.blocks));
    for (std::int64_t b = 0; b < a.blocks; ++b) ws[static_cast<std::size_t>(b)] = f16_to_float(row.scales[b]);
    for (std::int64_t t = t0; t < t1; ++t) {
        const std::int8_t* xq = a.q_row(t);
        const float* xs = a.scale_row(t);
        float acc = 0;
        for (std::int64_t b = 0; b < a.blocks; ++b)
            acc += static_cast<float>(block_dot(w.dtype, row.codes, xq, b)) * (ws[static_cast<std::size_t>(b)] * xs[b]);
        y.row(t)[n] = acc;
    }
}

#ifdef GEMMA4_HAVE_VNNI512
// GCC 12 reports the intrinsics' own `_mm512_undefined_*` pass-through operands (PR 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
struct PanelVnni {
    static constexpr int P = static_cast<int>(quant::kPanelRows);  ///< rows per panel: the 16 int32 lanes of a zmm
    static constexpr int G = 16;  ///< tokens per pass over a panel: 16 float accumulators in registers
    static constexpr std::int64_t kAheadL2 = 8192;  ///< bytes of the weight stream prefetched into L2

    /// Activations of one call for the kernel, per group of up to G tokens (n in the group):
    /// for every block, its 8 words of 4 codes as [8][n] int32, then the n x scales and the n
    /// start values −offset·Σx — one contiguous record of 10·n words per block.
    struct GroupActs {
        std::vector<std::int32_t> data;  ///< group starting at token t0: at t0 · blocks · 10
    };

    /// Tokens [t0, t1) of `a` into `out` (sized for all of a's tokens beforehand).
    static void group_acts(const QuantActs& a, int offset, std::int64_t t0, std::int64_t t1, GroupActs& out) {
        for (std::int64_t t = t0; t < t1; ++t) {
            const std::int64_t g0 = t / G * G, n = std::min<std::int64_t>(G, a.tokens - g0), i = t - g0;
            std::int32_t* g = out.data.data() + g0 * a.blocks * 10;
            const std::int8_t* q = a.q_row(t);
            for (std::int64_t b = 0; b < a.blocks; ++b) {
                std::int32_t* rec = g + b * 10 * n;
                for (int s = 0; s < 8; ++s) std::memcpy(rec + s * n + i, q + b * quant::kBlock + 4 * s, 4);
                std::memcpy(rec + 8 * n + i, a.scale_row(t) + b, 4);
                rec[9 * n + i] = -offset * a.sum_row(t)[b];
            }
        }
    }

    /// The N tokens of one group over one panel: y[t][0 … 16) for the panel's rows (mask).
    /// Prefetches the weight stream `ahead` bytes in front (0: the panel is already cached).
    template <bool Q4, int N>
    static void pass(const std::byte* panel, const std::uint16_t* scales, std::int64_t blocks, const std::int32_t* act,
                     std::int64_t ahead, float* const y[N], __mmask16 mask) {
        constexpr std::int64_t block_bytes = Q4 ? 256 : 512;  // 16 rows × 32 codes
        const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80)), low4 = _mm512_set1_epi8(0x0f);
        __m512 acc[N];
        for (int t = 0; t < N; ++t) acc[t] = _mm512_setzero_ps();
        for (std::int64_t b = 0; b < blocks; ++b) {
            if (ahead) {
                const char* f = reinterpret_cast<const char*>(panel) + b * block_bytes + ahead;
                for (std::int64_t l = 0; l < block_bytes; l += 64) {
                    _mm_prefetch(f + l, _MM_HINT_T0);
                    _mm_prefetch(f + kAheadL2 + l, _MM_HINT_T1);
                }
                if (b % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(scales + P * (b + ahead / block_bytes)), _MM_HINT_T0);
            }
            __m512i wv[8];
            if constexpr (Q4) {
                // block k of a 128-column group: low (k < 2) or high nibbles of words (k % 2)·8 …
                const std::byte* base = panel + (b / 4) * 1024 + (b % 2) * 512;
                const bool high = b % 4 >= 2;
                for (int s = 0; s < 8; ++s) {
                    const __m512i v = _mm512_loadu_si512(base + 64 * s);
                    wv[s] = _mm512_and_si512(high ? _mm512_srli_epi16(v, 4) : v, low4);
                }
            } else {
                const std::byte* base = panel + b * 512;
                for (int s = 0; s < 8; ++s) wv[s] = _mm512_xor_si512(_mm512_loadu_si512(base + 64 * s), flip);
            }
            const __m512 ws = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + P * b)));
            const std::int32_t* words = act + b * 10 * N;
            const auto* xs = reinterpret_cast<const float*>(words + 8 * N);
            const std::int32_t* start = words + 9 * N;
            // Four tokens at a time: four independent vpdpbusd chains hide its latency, and every
            // accumulator stays in a register (the loops are unrolled fully).
#pragma GCC unroll 16
            for (int t0 = 0; t0 < N; t0 += 4) {
                constexpr int kChains = 4;
                __m512i isum[kChains];
#pragma GCC unroll 4
                for (int c = 0; c < kChains; ++c)
                    if (t0 + c < N) isum[c] = _mm512_set1_epi32(start[t0 + c]);
#pragma GCC unroll 8
                for (int s = 0; s < 8; ++s)
#pragma GCC unroll 4
                    for (int c = 0; c < kChains; ++c)
                        if (t0 + c < N) isum[c] = _mm512_dpbusd_epi32(isum[c], wv[s], _mm512_set1_epi32(words[s * N + t0 + c]));
#pragma GCC unroll 4
                for (int c = 0; c < kChains; ++c)
                    if (t0 + c < N)
                        acc[t0 + c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(ws, _mm512_set1_ps(xs[t0 + c])), acc[t0 + c]);
            }
        }
        for (int t = 0; t < N; ++t) _mm512_mask_storeu_ps(y[t], mask, acc[t]);
    }

    template <bool Q4, int N = G>
    static void dispatch(int n, const std::byte* panel, const std::uint16_t* scales, std::int64_t blocks, const std::int32_t* act,
                         std::int64_t ahead, float* const* y, __mmask16 mask) {
        if constexpr (N > 1)
            if (n < N) return dispatch<Q4, N - 1>(n, panel, scales, blocks, act, ahead, y, mask);
        pass<Q4, N>(panel, scales, blocks, act, ahead, y, mask);
    }
};

#ifdef GEMMA4_HAVE_AMX
struct PanelAmx {
    static constexpr int P = static_cast<int>(quant::kPanelRows);
    static constexpr int G = 16;  ///< tokens per pass: the rows of a tile

    /// Weight block b of a panel as a B tile source: Q8 in place; Q4 unpacked to code − 8 into
    /// `scratch` (a block's codes are the low or high nibbles of 512 bytes of its 128-group).
    template <bool Q4>
    static const std::byte* block_source(const std::byte* panel, std::int64_t b, std::int8_t* scratch) {
        if constexpr (!Q4) {
            return panel + b * 512;
        } else {
            const std::byte* base = panel + (b / 4) * 1024 + (b % 2) * 512;
            const bool high = b % 4 >= 2;
            const __m512i low4 = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
            for (int s = 0; s < 8; ++s) {
                const __m512i v = _mm512_loadu_si512(base + 64 * s);
                const __m512i nib = _mm512_and_si512(high ? _mm512_srli_epi16(v, 4) : v, low4);
                _mm512_store_si512(scratch + 64 * s, _mm512_sub_epi8(nib, eight));
            }
            return reinterpret_cast<const std::byte*>(scratch);
        }
    }

    /// A group's activations for the A tiles: block by block, the 16 tokens' 32 codes of each
    /// block together (512 bytes; rows past the last token zero), so that the pass reads them as
    /// one sequential stream.
    static constexpr std::int64_t kGroupBlockBytes = G * quant::kBlock;

    /// Tokens [t0, t1) of `a` into `tiles` (sized for all groups), and the zero rows that pad
    /// the last group when t1 is the last token.
    static void group_tiles(const QuantActs& a, std::int64_t t0, std::int64_t t1, std::vector<std::int8_t>& tiles) {
        const std::int64_t t_end = t1 == a.tokens ? (t1 + G - 1) / G * G : t1;
        for (std::int64_t t = t0; t < t_end; ++t) {
            std::int8_t* g = tiles.data() + t / G * a.blocks * kGroupBlockBytes + t % G * quant::kBlock;
            for (std::int64_t b = 0; b < a.blocks; ++b) {
                std::int8_t* dst = g + b * kGroupBlockBytes;
                if (t < a.tokens) std::memcpy(dst, a.q_row(t) + b * quant::kBlock, quant::kBlock);
                else std::memset(dst, 0, quant::kBlock);
            }
        }
    }

    /// Block sums of blocks b and b + 1 of the group whose tiles start at `acts` into sums[0],
    /// sums[1] (16 × 16 int32 each, token-major), in accumulator tiles 0, 1 (first set) or 2, 3
    /// (second set); A tiles 4, 5 and B tiles 6, 7 (AmxTiles). GCC's tile intrinsics paste their
    /// tile operands into the instruction text, so they are written as literals.
    template <bool Q4, bool SecondSet>
    static void block_pair(const std::byte* panel, std::int64_t b, const std::int8_t* acts, std::int8_t (*scratch)[512],
                           std::int32_t (*sums)[G * P]) {
        constexpr std::int64_t q_stride = quant::kBlock;
        const std::int8_t* a0 = acts + b * kGroupBlockBytes;
        const std::int8_t* a1 = a0 + kGroupBlockBytes;
        const std::byte* b0 = block_source<Q4>(panel, b, scratch[0]);
        const std::byte* b1 = block_source<Q4>(panel, b + 1, scratch[1]);
        if constexpr (!SecondSet) {
            _tile_zero(0);
            _tile_zero(1);
            _tile_loadd(4, a0, q_stride);
            _tile_loadd(6, b0, 64);
            _tile_dpbssd(0, 4, 6);
            _tile_loadd(5, a1, q_stride);
            _tile_loadd(7, b1, 64);
            _tile_dpbssd(1, 5, 7);
            _tile_stored(0, sums[0], 64);
            _tile_stored(1, sums[1], 64);
        } else {
            _tile_zero(2);
            _tile_zero(3);
            _tile_loadd(4, a0, q_stride);
            _tile_loadd(6, b0, 64);
            _tile_dpbssd(2, 4, 6);
            _tile_loadd(5, a1, q_stride);
            _tile_loadd(7, b1, 64);
            _tile_dpbssd(3, 5, 7);
            _tile_stored(2, sums[0], 64);
            _tile_stored(3, sums[1], 64);
        }
    }

    /// acc[t] += float(sum[t]) · (w_scale · x_scale[t]) for block b: the VNNI pass's float
    /// sequence exactly.
    template <int N>
    static void scale_add(const std::int32_t* sums, const std::uint16_t* scales, const float* xs, std::int64_t xs_stride,
                          std::int64_t b, __m512* acc) {
        const __m512 ws = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + P * b)));
#pragma GCC unroll 16
        for (int t = 0; t < N; ++t)
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums + P * t)),
                                     _mm512_mul_ps(ws, _mm512_set1_ps(xs[t * xs_stride + b])), acc[t]);
    }

    /// The N tokens of the group whose tiles start at `acts` over one panel, as
    /// PanelVnni::pass. Blocks go in pairs: pair i is multiplied in tile set i % 2 while pair
    /// i − 1 is scaled and added.
    template <bool Q4, int N>
    static void pass(const std::byte* panel, const std::uint16_t* scales, std::int64_t blocks, const std::int8_t* acts,
                     const float* xs, std::int64_t xs_stride, std::int64_t ahead, float* const y[N], __mmask16 mask) {
        constexpr std::int64_t block_bytes = Q4 ? 256 : 512;
        alignas(64) std::int32_t sums[2][2][G * P];
        alignas(64) std::int8_t scratch[2][2][512];
        __m512 acc[N];
        for (int t = 0; t < N; ++t) acc[t] = _mm512_setzero_ps();
        for (std::int64_t b = 0; b <= blocks; b += 2) {
            if (b < blocks) {
                if (ahead) {
                    const char* f = reinterpret_cast<const char*>(panel) + b * block_bytes + ahead;
                    for (std::int64_t l = 0; l < 2 * block_bytes; l += 64) {
                        _mm_prefetch(f + l, _MM_HINT_T0);
                        _mm_prefetch(f + PanelVnni::kAheadL2 + l, _MM_HINT_T1);
                    }
                    _mm_prefetch(reinterpret_cast<const char*>(scales + P * (b + ahead / block_bytes)), _MM_HINT_T0);
                }
                if (b / 2 % 2 == 0) block_pair<Q4, false>(panel, b, acts, scratch[0], sums[0]);
                else block_pair<Q4, true>(panel, b, acts, scratch[1], sums[1]);
            }
            if (b >= 2) {
                const int set = static_cast<int>((b - 2) / 2 % 2);
                scale_add<N>(sums[set][0], scales, xs, xs_stride, b - 2, acc);
                scale_add<N>(sums[set][1], scales, xs, xs_stride, b - 1, acc);
            }
        }
        for (int t = 0; t < N; ++t) _mm512_mask_storeu_ps(y[t], mask, acc[t]);
    }

    template <bool Q4, int N = G>
    static void dispatch(int n, const std::byte* panel, const std::uint16_t* scales, std::int64_t blocks, const std::int8_t* acts,
                         const float* xs, std::int64_t xs_stride, std::int64_t ahead, float* const* y, __mmask16 mask) {
        if constexpr (N > kAmxMinTokens)
            if (n < N) return dispatch<Q4, N - 1>(n, panel, scales, blocks, acts, xs, xs_stride, ahead, y, mask);
        pass<Q4, N>(panel, scales, blocks, acts, xs, xs_stride, ahead, y, mask);
    }
};
#endif

/// Panels [p0, p1) of w for all tokens: the groups of tokens before `vnni_from` take the AMX
/// pass (`tiles` holds their activations), the others the VNNI pass (`ga`).
inline void quant_panels(const WeightView& w, const QuantActs& a, const PanelVnni::GroupActs& ga,
                         const std::vector<std::int8_t>& tiles, std::int64_t vnni_from, std::int64_t p0, std::int64_t p1,
                         Rows<float> y) {
    constexpr int P = PanelVnni::P, G = PanelVnni::G;
    const bool q4 = w.dtype == DType::Q4;
    // Prefetch distance into L1 (the stream also goes to L2 kAheadL2 bytes ahead): longer when
    // few tokens make the pass fast.
    const std::int64_t ahead = a.tokens <= 4 ? 2048 : 1024;
#ifdef GEMMA4_HAVE_AMX
    std::optional<AmxTiles::TileScope> tile_scope;
    if (vnni_from > 0) tile_scope.emplace();
#endif
    float* yt[G];
    for (std::int64_t p = p0; p < p1; ++p) {
        const std::int64_t n0 = p * P, rows = std::min<std::int64_t>(P, w.rows() - n0);
        const auto mask = static_cast<__mmask16>((1u << rows) - 1u);
        for (std::int64_t t0 = 0; t0 < a.tokens; t0 += G) {
            const int n = static_cast<int>(std::min<std::int64_t>(G, a.tokens - t0));
            for (int t = 0; t < n; ++t) yt[t] = y.row(t0 + t) + n0;
            const std::int64_t pf = t0 == 0 ? ahead : 0;
#ifdef GEMMA4_HAVE_AMX
            if (t0 < vnni_from) {
                const std::int8_t* acts = tiles.data() + t0 * a.blocks * quant::kBlock;
                if (q4) PanelAmx::dispatch<true>(n, w.panel_codes(p), w.panel_scales(p), a.blocks, acts, a.scale_row(t0), a.blocks, pf, yt, mask);
                else PanelAmx::dispatch<false>(n, w.panel_codes(p), w.panel_scales(p), a.blocks, acts, a.scale_row(t0), a.blocks, pf, yt, mask);
                continue;
            }
#endif
            const std::int32_t* act = ga.data.data() + t0 * a.blocks * 10;
            if (q4) PanelVnni::dispatch<true>(n, w.panel_codes(p), w.panel_scales(p), a.blocks, act, pf, yt, mask);
            else PanelVnni::dispatch<false>(n, w.panel_codes(p), w.panel_scales(p), a.blocks, act, pf, yt, mask);
        }
    }
}
#pragma GCC diagnostic pop
#endif

/// Which kernel runs: the fastest this build and process have (AMX, else VNNI, else portable),
/// the AVX-512 VNNI one without AMX, or the portable one. The tests compare them.
enum class QuantPath : std::uint8_t { Best, Vnni, Portable };

/// One Q8/Q4 matrix of a linear_quant call and where its outputs go.
struct QuantTarget {
    const WeightView* w;
    Rows<float> y;
};

/// y_i[t, n] = Σ_k x[t, k] · w_i[n, k] for Q8/Q4 matrices w_i of one dtype and one column count
/// and float x: x is quantized once, and the matrices' panels (or rows) form one parallel region.
inline void linear_quant(std::span<const QuantTarget> targets, Rows<const float> x, std::int64_t tokens, ThreadPool& pool,
                         QuantPath path = QuantPath::Best) {
    const WeightView& w0 = *targets.front().w;
    const std::int64_t K = w0.cols();
    for (const QuantTarget& t : targets)
        if (t.w->dtype != w0.dtype || t.w->cols() != K)
            throw InvalidArgument("linear_quant: '" + t.w->name + "' does not share the dtype and columns of '" + w0.name + "'");
    thread_local QuantActs acts;
    QuantActs& a = acts;  // the caller's, also in the lambdas below
    shape_activations(tokens, K, a);
    // The activations are prepared by all threads when there are several tokens.
    auto prepare = [&](auto&& per_tokens) {
        if (tokens == 1) per_tokens(0, 1);
        else pool.parallel_for(tokens, [&](std::int64_t t0, std::int64_t t1) { per_tokens(t0, t1); });
    };
    // The matrices' units (panels or rows) as one index space: matrix i owns [first[i], first[i + 1]).
    auto run = [&](auto units_of, std::int64_t grain, auto&& body) {
        std::vector<std::int64_t> first{0};
        for (const QuantTarget& t : targets) first.push_back(first.back() + units_of(*t.w));
        pool.parallel_chunks(
            first.back(),
            [&](std::int64_t u0, std::int64_t u1) {
                for (std::size_t i = 0; i < targets.size(); ++i) {
                    const std::int64_t lo = std::max(u0, first[i]), hi = std::min(u1, first[i + 1]);
                    if (lo < hi) body(targets[i], lo - first[i], hi - first[i]);
                }
            },
            // chunks claimed by whichever thread is free: a fixed split makes the slower thread
            // (another process on its core) set the pace of every matrix
            std::max<std::int64_t>(grain, first.back() / (16 * pool.size())));
    };
#ifdef GEMMA4_HAVE_VNNI512
    const bool panels = std::all_of(targets.begin(), targets.end(), [](const QuantTarget& t) { return t.w->layout == WeightView::Layout::Panels; });
    if (path != QuantPath::Portable && panels) {
        constexpr std::int64_t G = PanelVnni::G;
        const bool amx = path == QuantPath::Best && tokens >= kAmxMinTokens && amx_usable();
        // The first token of the groups that the VNNI pass takes: all (no AMX), or those of a
        // last group too small for tiles. Tokens before it go through AMX tiles.
        const std::int64_t vnni_from = !amx ? 0 : tokens % G >= kAmxMinTokens ? tokens : tokens / G * G;
        thread_local PanelVnni::GroupActs groups;
        thread_local std::vector<std::int8_t> amx_tiles;
        // the caller's: lambdas on other threads see their own thread_locals
        PanelVnni::GroupActs& ga = groups;
        std::vector<std::int8_t>& tiles = amx_tiles;
        ga.data.resize(static_cast<std::size_t>(tokens * a.blocks * 10));
        if (amx) tiles.resize(static_cast<std::size_t>((tokens + G - 1) / G * a.blocks * G * quant::kBlock));
        const int offset = w0.dtype == DType::Q4 ? quant::kQ4Offset : 128;
        prepare([&](std::int64_t t0, std::int64_t t1) {
            quantize_activations(x, t0, t1, a);
#ifdef GEMMA4_HAVE_AMX
            if (t0 < vnni_from) PanelAmx::group_tiles(a, t0, std::min(t1, vnni_from), tiles);
#endif
            if (t1 > vnni_from) PanelVnni::group_acts(a, offset, std::max(t0, vnni_from), t1, ga);
        });
        run([](const WeightView& w) { return quant::panel_count(w.rows()); }, 1,
            [&](const QuantTarget& t, std::int64_t p0, std::int64_t p1) { quant_panels(*t.w, a, ga, tiles, vnni_from, p0, p1, t.y); });
        return;
    }
#endif
    prepare([&](std::int64_t t0, std::int64_t t1) { quantize_activations(x, t0, t1, a); });
    const std::int64_t tb = token_block(a.padded + 8 * a.blocks, 4);
    run([](const WeightView& w) { return w.rows(); }, 16, [&](const QuantTarget& t, std::int64_t n0, std::int64_t n1) {
        for (std::int64_t tb0 = 0; tb0 < tokens; tb0 += tb) {
            const std::int64_t tb1 = std::min(tokens, tb0 + tb);
            for (std::int64_t n = n0; n < n1; ++n) quant_row_portable(*t.w, n, a, tb0, tb1, t.y);
        }
    });
    (void)path;
}

/// y[t, n] = Σ_k x[t, k] · w[n, k] for Q8/Q4 w and float x.
inline void linear_quant(const WeightView& w, Rows<const float> x, Rows<float> y, std::int64_t tokens, ThreadPool& pool,
                         QuantPath path = QuantPath::Best) {
    const QuantTarget target{&w, y};
    linear_quant(std::span<const QuantTarget>(&target, 1), x, tokens, pool, path);
}

}  // namespace gemma4::detail

#undef GEMMA4_HAVE_VNNI512
