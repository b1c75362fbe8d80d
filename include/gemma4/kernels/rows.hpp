// Strided row-major activations, the operand type of the linear kernels.
#pragma once

#include <gemma4/abi.hpp>

#include <cstdint>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// Strided row-major activations: row t starts at data + t * stride.
template <class T>
struct Rows {
    T* data;
    std::int64_t stride;
    T* row(std::int64_t t) const { return data + t * stride; }
};

namespace detail {

/// Tokens per pass over a weight panel: as many as keep the prepared activations of one pass
/// (`bytes_per_token`) within about half of a 1 MB L2, a multiple of the token tile `tt`.
inline std::int64_t token_block(std::int64_t bytes_per_token, std::int64_t tt) {
    constexpr std::int64_t budget = 512 * 1024;
    const std::int64_t n = budget / (bytes_per_token > 0 ? bytes_per_token : 1);
    return n < tt ? tt : n / tt * tt;
}

}  // namespace detail
}  // namespace GEMMA4_ABI
}  // namespace gemma4
