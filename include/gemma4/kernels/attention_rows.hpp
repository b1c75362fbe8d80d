// The rows attention reads from the KV cache, as the kernels of every level take them: a float
// row (`const T*`) or an int8 row with its scale.
#pragma once

#include <gemma4/abi.hpp>

#include <cstdint>

#if defined(__SSE__)
#include <immintrin.h>
#endif

namespace gemma4::inline GEMMA4_ABI::kernels {

/// One cached row of one kv head stored as int8 with its scale.
struct Int8HeadRow {
    const std::int8_t* codes;
    float scale;
};

namespace detail_attn {

/// Brings a cached row of d elements towards L1 (rows of one head are 1 of kv_heads slices of a
/// position, a stride the hardware prefetcher does not follow ahead).
template <class T>
inline void row_prefetch(const T* r, std::int64_t d) {
#if defined(__SSE__)
    const auto* p = reinterpret_cast<const char*>(r);
    for (std::int64_t b = 0; b < d * static_cast<std::int64_t>(sizeof(T)); b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
#else
    (void)r, (void)d;
#endif
}
inline void row_prefetch(Int8HeadRow r, std::int64_t d) { row_prefetch(r.codes, d / static_cast<std::int64_t>(sizeof(float))); }

}  // namespace detail_attn
}  // namespace gemma4::kernels
