// The software prefetch of a Q8/Q4 panel's stream, shared by every level's panel pass
// (prefetch instructions are in the x86-64 baseline, so the body is the same whatever the
// flags of the translation unit).
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/kernels/cpu.hpp>
#include <gemma4/tensor/dtype.hpp>
#include <gemma4/tensor/quant.hpp>

#include <cstddef>
#include <cstdint>
#include <immintrin.h>

namespace gemma4::inline GEMMA4_ABI::detail {

/// Bytes past the L1 prefetch that the L2 prefetch reaches.
inline constexpr std::int64_t kAheadL2 = 8192;

/// Whether a pass prefetches into L2 too. Measured on a 2-thread AMD Zen 5 (docs/perf-log/):
/// without it the one-token Q8 pass (the least work per byte) read about 20 % faster, while the
/// Q4 pass, whose codes are unpacked, and a 16-token pass read slower.
constexpr bool prefetch_to_l2(DType t, std::int64_t tokens) { return t == DType::Q4 || tokens > 1; }

/// Where a panel pass prefetches its stream: `l1` bytes in front into L1 and `l2` bytes in front
/// into L2, 0 leaving that level to the hardware prefetchers.
struct PanelPrefetch {
    std::int64_t l1 = 0, l2 = 0;
    explicit operator bool() const { return l1 != 0 || l2 != 0; }
    bool operator==(const PanelPrefetch&) const = default;
};

/// The distances the passes were tuned with: fewer tokens make a faster pass, hence the longer
/// L1 distance, and the L2 prefetch (where prefetch_to_l2) reaches kAheadL2 further.
constexpr PanelPrefetch panel_prefetch(DType t, std::int64_t tokens) {
    const std::int64_t l1 = tokens <= 4 ? 2048 : 1024;
    return {l1, prefetch_to_l2(t, tokens) ? l1 + kAheadL2 : 0};
}

/// The Q8 passes of this many tokens or more on AMD CPUs prefetch into L2 only, this far in front.
inline constexpr std::int64_t kAmdQ8L2OnlyTokens = 4, kAmdQ8AheadL2 = 6144;

/// The one-token Q8 pass on Intel CPUs prefetches into L2 only, this far in front.
inline constexpr std::int64_t kIntelQ8OneTokenAheadL2 = 8192;

/// The AVX-512 passes' distances, measured on 2-thread machines (docs/perf-log/). On Intel
/// CPUs (a Sapphire Rapids-class Xeon) the one-token Q8 pass prefetches into L2 only: the bare pass
/// streamed about 14 % faster so (27.4–28.6 against 24.3–24.5 GB/s, any distance from 4 to 16 KiB;
/// the model decoded 2–4 % faster), the L1 lines then come from the hardware prefetcher; the rest
/// keep the distances they were tuned with. On AMD CPUs (a Zen 5) the one-token pass leaves the
/// stream to the hardware prefetchers (the model decoded 3–5 % (int8) and 7–8 % (int4) faster so,
/// while the AVX2 passes, which take longer per byte, need theirs), and a Q8 pass of 4 or more
/// tokens prefetches into L2 only: the bare passes streamed 4, 8 and 16 tokens 30, 22 and 11 %
/// faster so, the model's steps of 4, 8 and 16 sequences 6, 4 and 3–11 % (2 sequences: 9 % slower,
/// hence the bound). Q4, with half the lines per block, keeps both levels.
inline PanelPrefetch avx512_panel_prefetch(DType t, std::int64_t tokens, const CpuFeatures& cpu) {
    if (!cpu.amd) {
        if (t == DType::Q8 && tokens == 1) return {0, kIntelQ8OneTokenAheadL2};
        return panel_prefetch(t, tokens);
    }
    if (tokens == 1) return {};
    if (t == DType::Q8 && tokens >= kAmdQ8L2OnlyTokens) return {0, kAmdQ8AheadL2};
    return panel_prefetch(t, tokens);
}

/// Prefetches block b's share of a panel's stream of Block-element blocks (codes and scales,
/// tensor/quant.hpp) as `pf` says. Two blocks' shares are whole lines (block 32: Q8 17, Q4 9;
/// 64: Q8 33, Q4 17): the even block takes the first half rounded up and the odd one the rest,
/// so each line is asked for once.
/// Always inlined: GCC takes a function that only prefetches for one without effects and drops
/// the calls to it that it has not inlined early (a pass compiled for another target is inlined
/// late).
template <DType T, int Block>
[[gnu::always_inline]] inline void prefetch_block(const std::byte* panel, std::int64_t b, PanelPrefetch pf) {
    constexpr std::int64_t pair_bytes = 2 * quant::block_stream_bytes(T, Block), pair_lines = pair_bytes / 64, first = (pair_lines + 1) / 2;
    static_assert(pair_bytes % 64 == 0, "a pair of blocks is whole lines");
    const char* f = reinterpret_cast<const char*>(panel) + b / 2 * pair_bytes;
    const std::int64_t l0 = b % 2 == 0 ? 0 : first;  // the even block's lines [0, first), the odd one's the rest
#pragma GCC unroll 17
    for (std::int64_t i = 0; i < first; ++i) {
        const std::int64_t l = l0 + i;
        if (l >= pair_lines) break;  // the odd block has one line fewer when pair_lines is odd
        if (pf.l1) _mm_prefetch(f + pf.l1 + 64 * l, _MM_HINT_T0);
        if (pf.l2) _mm_prefetch(f + pf.l2 + 64 * l, _MM_HINT_T1);
    }
}

}  // namespace gemma4::detail
