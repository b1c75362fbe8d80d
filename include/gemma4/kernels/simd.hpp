// The few SIMD primitives the kernels share, written once with xsimd for the compile-time
// default architecture (scalar tails; correct on any x86-64, fast with -march=native).
#pragma once

#include <gemma4/abi.hpp>

#include <xsimd/xsimd.hpp>

#include <cstdint>

namespace gemma4::inline GEMMA4_ABI::detail {

/// Σ a[i]·b[i] in T, four independent accumulators.
template <class T>
inline T dot(const T* a, const T* b, std::int64_t n) {
    using B = xsimd::batch<T>;
    constexpr std::int64_t S = static_cast<std::int64_t>(B::size);
    std::int64_t i = 0;
    B acc0(T(0)), acc1(T(0)), acc2(T(0)), acc3(T(0));
    for (; i + 4 * S <= n; i += 4 * S) {
        acc0 = xsimd::fma(B::load_unaligned(a + i), B::load_unaligned(b + i), acc0);
        acc1 = xsimd::fma(B::load_unaligned(a + i + S), B::load_unaligned(b + i + S), acc1);
        acc2 = xsimd::fma(B::load_unaligned(a + i + 2 * S), B::load_unaligned(b + i + 2 * S), acc2);
        acc3 = xsimd::fma(B::load_unaligned(a + i + 3 * S), B::load_unaligned(b + i + 3 * S), acc3);
    }
    for (; i + S <= n; i += S) acc0 = xsimd::fma(B::load_unaligned(a + i), B::load_unaligned(b + i), acc0);
    T s = xsimd::hadd((acc0 + acc1) + (acc2 + acc3));
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}

/// y[i] += a · x[i]
template <class T>
inline void axpy(T a, const T* x, T* y, std::int64_t n) {
    using B = xsimd::batch<T>;
    constexpr std::int64_t S = static_cast<std::int64_t>(B::size);
    const B va(a);
    std::int64_t i = 0;
    for (; i + S <= n; i += S) xsimd::fma(va, B::load_unaligned(x + i), B::load_unaligned(y + i)).store_unaligned(y + i);
    for (; i < n; ++i) y[i] += a * x[i];
}

/// Σ x[i]²
template <class T>
inline T sum_squares(const T* x, std::int64_t n) { return dot(x, x, n); }

}  // namespace gemma4::detail
