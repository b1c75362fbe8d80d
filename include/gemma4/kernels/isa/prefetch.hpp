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

/// Whether a pass prefetches into L2 too. Measured on a 2-thread AMD Zen 5 (docs/performance.md):
/// without it the one-token Q8 pass (the least work per byte) read about 20 % faster, while the
/// Q4 pass, whose codes are unpacked, and a 16-token pass read slower.
constexpr bool prefetch_to_l2(DType t, int tokens) { return t == DType::Q4 || tokens > 1; }

/// How far ahead (bytes) a panel pass of `tokens` tokens prefetches its panel into L1: fewer
/// tokens make a faster pass, hence the longer distance.
constexpr std::int64_t prefetch_ahead(std::int64_t tokens) { return tokens <= 4 ? 2048 : 1024; }

/// The same for the AVX-512 passes, where on AMD CPUs the one-token pass (0: none) leaves the
/// stream to the hardware prefetchers: on a 2-thread Zen 5 the model decoded 3–5 % (int8) and
/// 7–8 % (int4) faster so, at 6 and 48 layers, while the AVX2 passes, which take longer per
/// byte, need theirs (int4 20 % slower without; docs/performance.md). Intel CPUs keep the
/// prefetch they were tuned with.
inline std::int64_t avx512_prefetch_ahead(std::int64_t tokens, const CpuFeatures& cpu) {
    return tokens == 1 && cpu.amd ? 0 : prefetch_ahead(tokens);
}

/// Prefetches block b's share of a panel's stream (codes and scales, tensor/quant.hpp) into L1,
/// `ahead` bytes in front of it, and with `ToL2` also into L2 kAheadL2 bytes further. Two
/// blocks' shares are whole lines (Q8 17, Q4 9): the even block takes the first half rounded up
/// and the odd one the rest, so each line is asked for once.
/// Always inlined: GCC takes a function that only prefetches for one without effects and drops
/// the calls to it that it has not inlined early (a pass compiled for another target is inlined
/// late).
template <DType T, bool ToL2>
[[gnu::always_inline]] inline void prefetch_block(const std::byte* panel, std::int64_t b, std::int64_t ahead) {
    constexpr std::int64_t pair_bytes = 2 * quant::block_stream_bytes(T), pair_lines = pair_bytes / 64, first = (pair_lines + 1) / 2;
    static_assert(pair_bytes % 64 == 0, "a pair of blocks is whole lines");
    const char* f = reinterpret_cast<const char*>(panel) + b / 2 * pair_bytes + ahead;
    const std::int64_t l0 = b % 2 == 0 ? 0 : first;  // the even block's lines [0, first), the odd one's the rest
#pragma GCC unroll 9
    for (std::int64_t i = 0; i < first; ++i) {
        const std::int64_t l = l0 + i;
        if (l >= pair_lines) break;  // the odd block has one line fewer when pair_lines is odd
        _mm_prefetch(f + 64 * l, _MM_HINT_T0);
        if constexpr (ToL2) _mm_prefetch(f + kAheadL2 + 64 * l, _MM_HINT_T1);
    }
}

}  // namespace gemma4::detail
