// The AMX level: Intel AMX (Advanced Matrix Extensions) for the Q8/Q4 linear, a tile matrix
// multiply of 16 tokens × 16 weight rows × 32 int8 codes per instruction (tdpbssd), eight times the
// int8 products per instruction of AVX-512 VNNI, so that a step of 16 sequences costs well under
// twice a step of one (1.7× at 48 layers on the Xeon measured in docs/perf-log/). Per
// 32-column unit, one tile multiply gives exact int32 sums (a block of 64 adds its two units') (signed × signed: Q4 nibbles unpacked to code
// − 8 first), which then take the AVX-512 VNNI kernel's convert and FMA, so both give bit-identical
// outputs. The pass multiplies two units in one set of accumulator tiles, then scales and adds the
// two before from the other set. (On that Xeon the tile and vector work of a core do not overlap,
// so a block costs their sum; a deeper pipeline of one block at a time measured the same.)
//
// Linux makes each process request the tile state once (kernels/cpu.hpp); tiles are then
// configured per thread for the span of one call (TileScope).
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/detail/aligned.hpp>
#include <gemma4/kernels/isa/avx512.hpp>
#include <gemma4/kernels/quant_acts.hpp>
#include <gemma4/kernels/rows.hpp>
#include <gemma4/kernels/target.hpp>
#include <gemma4/tensor/quant.hpp>
#include <gemma4/tensor/weight_view.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

GEMMA4_TARGET_AMX_BEGIN
// GCC 12 reports the intrinsics' own `_mm512_undefined_*` pass-through operands (PR 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace gemma4::inline GEMMA4_ABI::detail::amx {

/// Groups of fewer tokens than this go to the AVX-512 VNNI pass even at this level: it reads
/// the weights as fast and has no tile overhead.
inline constexpr int kMinTokens = 8;

/// The tiles of the Q8/Q4 kernel, configured per thread for the span of one call (TileScope):
/// 0–3 accumulators (two sets of two, 16 tokens × 16 int32), 4–5 activations (16 tokens × 32
/// codes), 6–7 weights (8 rows of 4 codes × 16 weight rows: one 32-column unit of a panel as it
/// lies in memory).
struct AmxTiles {
    static constexpr int kAccumulators[] = {0, 1, 2, 3}, kActivations[] = {4, 5}, kWeights[] = {6, 7};

    struct alignas(64) Config {
        std::uint8_t palette = 1, start_row = 0;
        std::uint8_t reserved[14] = {};
        std::uint16_t colsb[16] = {};
        std::uint8_t rows[16] = {};
    };

    /// The kernel's configuration.
    static Config kernel_config() {
        Config c;
        for (int t : kAccumulators) c.rows[t] = 16, c.colsb[t] = 64;
        for (int t : kActivations) c.rows[t] = 16, c.colsb[t] = 32;
        for (int t : kWeights) c.rows[t] = 8, c.colsb[t] = 64;
        return c;
    }

    /// ldtilecfg for this thread, tilerelease when the scope ends (the OS then need not save the
    /// 8 KB of tile state on a context switch).
    struct TileScope {
        explicit TileScope(const Config& c = kernel_config()) {
            // Inline asm rather than _tile_loadconfig: GCC 12 does not see the intrinsic read its
            // operand and drops the stores that fill it.
            asm volatile("ldtilecfg %0" : : "m"(c));
        }
        ~TileScope() { _tile_release(); }
        TileScope(const TileScope&) = delete;
        TileScope& operator=(const TileScope&) = delete;
    };
};

/// The tile instructions, with the tile numbers as template arguments (GCC's intrinsics paste
/// theirs into the instruction text, so they take only literals) and a memory clobber on loads
/// and stores: GCC's `_tile_loadd` and `_tile_stored` do not tell the compiler that they read or
/// write memory, so it would be free to move the stores that fill a Q4 tile source below its
/// load, or the loads of stored sums above their store.
namespace tile {
template <int T>
inline void zero() {
    asm volatile("tilezero %%tmm%c0" : : "i"(T));
}
template <int T>
inline void load(const void* base, std::int64_t stride) {
    asm volatile("tileloadd (%0,%1,1), %%tmm%c2" : : "r"(base), "r"(stride), "i"(T) : "memory");
}
template <int T>
inline void store(void* base, std::int64_t stride) {
    asm volatile("tilestored %%tmm%c2, (%0,%1,1)" : : "r"(base), "r"(stride), "i"(T) : "memory");
}
/// C += A · B, signed int8 × signed int8 into int32.
template <int C, int A, int B>
inline void dpbssd() {
    asm volatile("tdpbssd %%tmm%c0, %%tmm%c1, %%tmm%c2" : : "i"(B), "i"(A), "i"(C));
}
}  // namespace tile

struct PanelAmx {
    static constexpr int P = static_cast<int>(quant::kPanelRows);
    static constexpr int G = static_cast<int>(kGroupTokens);  ///< tokens per pass: the rows of a tile

    /// Unit u (32 columns) of a panel of `block`-element blocks as a B tile source: Q8 in place;
    /// Q4 unpacked to code − 8 into `scratch` (a unit's codes are the low or high nibbles of 512
    /// bytes of its 128-group).
    template <bool Q4>
    static const std::byte* unit_source(const std::byte* panel, std::int64_t block, std::int64_t u, std::int8_t* scratch) {
        if constexpr (!Q4) {
            return panel + quant::unit_codes_offset(DType::Q8, block, u);
        } else {
            const std::byte* base = panel + quant::unit_codes_offset(DType::Q4, block, u);
            const bool high = quant::unit_high(u);
            const __m512i low4 = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
            for (int s = 0; s < 8; ++s) {
                const __m512i v = _mm512_loadu_si512(base + 64 * s);
                const __m512i nib = _mm512_and_si512(high ? _mm512_srli_epi16(v, 4) : v, low4);
                _mm512_store_si512(scratch + 64 * s, _mm512_sub_epi8(nib, eight));
            }
            return reinterpret_cast<const std::byte*>(scratch);
        }
    }

    /// A group's activations for the A tiles: unit by unit, the 16 tokens' 32 codes of each unit
    /// together (512 bytes; rows past the last token zero), so that the pass reads them as one
    /// sequential stream.
    static constexpr std::int64_t kGroupUnitBytes = G * quant::kUnit;

    /// The groups' activations, laid out by group_tiles: cache-line aligned, so that no 32-byte
    /// tile row straddles two lines.
    using TileActs = AlignedVector<std::int8_t>;

    /// Bytes of TileActs for all of a's tokens.
    static std::size_t tile_bytes(const QuantActs& a) { return static_cast<std::size_t>((a.tokens + G - 1) / G * G * a.padded); }

    /// Tokens [t0, t1) of `a` into `tiles` (sized by tile_bytes), and the zero rows that pad the
    /// last group when t1 is the last token.
    static void group_tiles(const QuantActs& a, std::int64_t t0, std::int64_t t1, TileActs& tiles) {
        const std::int64_t t_end = t1 == a.tokens ? (t1 + G - 1) / G * G : t1, units = a.padded / quant::kUnit;
        for (std::int64_t t = t0; t < t_end; ++t) {
            std::int8_t* g = tiles.data() + t / G * units * kGroupUnitBytes + t % G * quant::kUnit;
            for (std::int64_t u = 0; u < units; ++u) {
                std::int8_t* dst = g + u * kGroupUnitBytes;
                if (t < a.tokens) std::memcpy(dst, a.q_row(t) + u * quant::kUnit, quant::kUnit);
                else std::memset(dst, 0, quant::kUnit);
            }
        }
    }

    /// Unit sums of units u and u + 1 of the group whose tiles start at `acts` into sums[0],
    /// sums[1] (16 × 16 int32 each, token-major), in accumulator tiles 0, 1 (Set 0) or 2, 3
    /// (Set 1); A tiles 4, 5 and B tiles 6, 7 (AmxTiles).
    template <bool Q4, int Set>
    static void unit_pair(const std::byte* panel, std::int64_t block, std::int64_t u, const std::int8_t* acts, std::int8_t (*scratch)[512],
                          std::int32_t (*sums)[G * P]) {
        constexpr int c0 = 2 * Set, c1 = 2 * Set + 1;
        const std::int8_t* a0 = acts + u * kGroupUnitBytes;
        const std::int8_t* a1 = a0 + kGroupUnitBytes;
        const std::byte* b0 = unit_source<Q4>(panel, block, u, scratch[0]);
        const std::byte* b1 = unit_source<Q4>(panel, block, u + 1, scratch[1]);
        tile::zero<c0>();
        tile::zero<c1>();
        tile::load<4>(a0, quant::kUnit);
        tile::load<6>(b0, 64);
        tile::dpbssd<c0, 4, 6>();
        tile::load<5>(a1, quant::kUnit);
        tile::load<7>(b1, 64);
        tile::dpbssd<c1, 5, 7>();
        tile::store<c0>(sums[0], 64);
        tile::store<c1>(sums[1], 64);
    }

    /// acc[t] += float(sum[t]) · (w_scale · x_scale[t]) for block b of Block elements, its sum
    /// that of one unit (`more` null) or of two (`sums` + `more`, exact in int32): the VNNI
    /// pass's float sequence exactly.
    template <bool Q4, int N, int Block>
    static void scale_add(const std::int32_t* sums, const std::int32_t* more, const std::byte* panel, const float* xs, std::int64_t xs_stride,
                          std::int64_t b, __m512* acc) {
        const std::byte* scales = panel + quant::block_scales_offset(Q4 ? DType::Q4 : DType::Q8, Block, b);
        const __m512 ws = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
#pragma GCC unroll 16
        for (int t = 0; t < N; ++t) {
            __m512i sum = _mm512_load_si512(sums + P * t);
            if constexpr (Block == 64) sum = _mm512_add_epi32(sum, _mm512_load_si512(more + P * t));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(ws, _mm512_set1_ps(xs[t * xs_stride + b])), acc[t]);
        }
    }

    /// The N tokens of the group whose tiles start at `acts` over one panel of Block-element
    /// blocks, as PanelVnni::pass. Units go in pairs (two blocks of 32, or one of 64): pair i is
    /// multiplied in tile set i % 2 while pair i − 1 is scaled and added.
    template <bool Q4, int N, int Block>
    static void pass(const std::byte* panel, std::int64_t blocks, const std::int8_t* acts, const float* xs, std::int64_t xs_stride,
                     PanelPrefetch pf, float* const y[N], __mmask16 mask) {
        constexpr DType kType = Q4 ? DType::Q4 : DType::Q8;
        constexpr int U = Block / 32;
        const std::int64_t units = blocks * U;
        alignas(64) std::int32_t sums[2][2][G * P];
        alignas(64) std::int8_t scratch[2][2][512];
        __m512 acc[N];
        for (int t = 0; t < N; ++t) acc[t] = _mm512_setzero_ps();
        for (std::int64_t u = 0; u <= units; u += 2) {
            if (u < units) {
                if (pf) {
                    if constexpr (U == 1) {
                        prefetch_block<kType, Block>(panel, u, pf);
                        prefetch_block<kType, Block>(panel, u + 1, pf);
                    } else {
                        prefetch_block<kType, Block>(panel, u / 2, pf);
                    }
                }
                if (u / 2 % 2 == 0) unit_pair<Q4, 0>(panel, Block, u, acts, scratch[0], sums[0]);
                else unit_pair<Q4, 1>(panel, Block, u, acts, scratch[1], sums[1]);
            }
            if (u >= 2) {
                const int set = static_cast<int>((u - 2) / 2 % 2);
                if constexpr (U == 1) {
                    scale_add<Q4, N, Block>(sums[set][0], nullptr, panel, xs, xs_stride, u - 2, acc);
                    scale_add<Q4, N, Block>(sums[set][1], nullptr, panel, xs, xs_stride, u - 1, acc);
                } else {
                    scale_add<Q4, N, Block>(sums[set][0], sums[set][1], panel, xs, xs_stride, (u - 2) / 2, acc);
                }
            }
        }
        for (int t = 0; t < N; ++t) _mm512_mask_storeu_ps(y[t], mask, acc[t]);
    }

    template <bool Q4, int Block, int N = G>
    static void dispatch(int n, const std::byte* panel, std::int64_t blocks, const std::int8_t* acts, const float* xs,
                         std::int64_t xs_stride, PanelPrefetch pf, float* const* y, __mmask16 mask) {
        if constexpr (N > kMinTokens)
            if (n < N) return dispatch<Q4, Block, N - 1>(n, panel, blocks, acts, xs, xs_stride, pf, y, mask);
        pass<Q4, N, Block>(panel, blocks, acts, xs, xs_stride, pf, y, mask);
    }

    /// dispatch for the block size `block` of the weights.
    template <bool Q4>
    static void dispatch(std::int64_t block, int n, const std::byte* panel, std::int64_t blocks, const std::int8_t* acts, const float* xs,
                         std::int64_t xs_stride, PanelPrefetch pf, float* const* y, __mmask16 mask) {
        if (block == 64) dispatch<Q4, 64>(n, panel, blocks, acts, xs, xs_stride, pf, y, mask);
        else dispatch<Q4, 32>(n, panel, blocks, acts, xs, xs_stride, pf, y, mask);
    }
};

/// Panels [p0, p1) of w for all tokens: the groups of tokens before `vnni_from` take the AMX
/// pass (`tiles` holds their activations), the others the AVX-512 VNNI pass (`ga`).
#if GEMMA4_KERNEL_BODIES
GEMMA4_KERNEL_ENTRY void panels(const WeightView& w, const QuantActs& a, const GroupActs& ga, const PanelAmx::TileActs& tiles,
                   std::int64_t vnni_from, std::int64_t p0, std::int64_t p1, Rows<float> y) {
    constexpr int P = PanelAmx::P, G = PanelAmx::G;
    using avx512::PanelVnni;
    const bool q4 = w.dtype == DType::Q4;
    const PanelPrefetch plan = avx512_panel_prefetch(w.dtype, a.tokens, isa_report().features);  // as avx512::panels
    const AmxTiles::TileScope tile_scope;
    float* yt[G];
    for (std::int64_t p = p0; p < p1; ++p) {
        const std::int64_t n0 = p * P, rows = std::min<std::int64_t>(P, w.rows() - n0);
        const auto mask = static_cast<__mmask16>((1u << rows) - 1u);
        for (std::int64_t t0 = 0; t0 < a.tokens; t0 += G) {
            const int n = static_cast<int>(std::min<std::int64_t>(G, a.tokens - t0));
            for (int t = 0; t < n; ++t) yt[t] = y.row(t0 + t) + n0;
            const PanelPrefetch pf = t0 == 0 ? plan : PanelPrefetch{};
            if (t0 < vnni_from) {
                const std::int8_t* acts = tiles.data() + t0 * a.padded;
                if (q4) PanelAmx::dispatch<true>(w.block, n, w.panel(p), a.blocks, acts, a.scale_row(t0), a.blocks, pf, yt, mask);
                else PanelAmx::dispatch<false>(w.block, n, w.panel(p), a.blocks, acts, a.scale_row(t0), a.blocks, pf, yt, mask);
            } else if (q4) {
                PanelVnni::dispatch<true>(w.block, n, w.panel(p), a.blocks, ga.group(t0), pf, yt, mask);
            } else {
                PanelVnni::dispatch<false>(w.block, n, w.panel(p), a.blocks, ga.group(t0), pf, yt, mask);
            }
        }
    }
}
#else
GEMMA4_KERNEL_ENTRY void panels(const WeightView& w, const QuantActs& a, const GroupActs& ga, const PanelAmx::TileActs& tiles,
                   std::int64_t vnni_from, std::int64_t p0, std::int64_t p1, Rows<float> y);
#endif

}  // namespace gemma4::detail::amx

#pragma GCC diagnostic pop
GEMMA4_TARGET_END
