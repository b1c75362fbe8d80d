// Element-wise and per-row kernels of the decoder: RMSNorm, rotate-half RoPE, GeGLU, soft-cap.
// One function per spec op; the layers call these and never loop over elements themselves.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/kernels/cpu.hpp>
#include <gemma4/kernels/isa/avx2.hpp>
#include <gemma4/kernels/isa/avx512.hpp>
#include <gemma4/kernels/simd.hpp>
#include <gemma4/kernels/thread_pool.hpp>

#include <xsimd/xsimd.hpp>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <type_traits>

namespace gemma4::inline GEMMA4_ABI::kernels {

/// rmsnorm / rmsnormUnit: y[i] = x[i] / sqrt(Σx²/n + eps) · w[i]   (w == nullptr: no weight).
/// In place is allowed (y == x).
template <class T>
inline void rms_norm(const T* x, const T* w, T eps, std::int64_t n, T* y) {
    const T ms = detail::sum_squares(x, n) / static_cast<T>(n);
    const T inv = T(1) / std::sqrt(ms + eps);
    if (w) {
        for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * w[i];
    } else {
        for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] * inv;
    }
}

/// rope (rotate-half): pairs (i, i + d/2) for i < d/2 rotated by angle[i]; cos/sin given per
/// pair (cos = 1, sin = 0 for the unrotated pairs of proportional RoPE).
template <class T>
inline void rope(T* x, const T* cos, const T* sin, std::int64_t d) {
    const std::int64_t h = d / 2;
    for (std::int64_t i = 0; i < h; ++i) {
        const T a = x[i], b = x[i + h];
        x[i] = a * cos[i] - b * sin[i];
        x[i + h] = b * cos[i] + a * sin[i];
    }
}

/// gelu_pytorch_tanh(x) = 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))
template <class T>
inline T gelu_tanh(T x) {
    const T k = static_cast<T>(0.79788456080286535587989211986876);  // √(2/π)
    return T(0.5) * x * (T(1) + std::tanh(k * (x + T(0.044715) * x * x * x)));
}

/// geluMul: y[i] = gelu_tanh(gate[i]) · up[i]. In float, whole vectors go through the kernel of
/// the process's level (kernels/isa/float_kernels-inl.hpp) or, at the baseline, xsimd's tanh at
/// the build's architecture (a scalar libm call, ≈ 50 ns per element, was ≈ 15 % of a prefill);
/// double keeps std::tanh, the reference.
template <class T>
inline void gelu_mul(const T* gate, const T* up, std::int64_t n, T* y, Isa isa = active_isa()) {
    std::int64_t i = 0;
    if constexpr (std::is_same_v<T, float>) {
        if (isa >= Isa::Avx512) i = detail::avx512::gelu_mul(gate, up, n, y);
        else if (isa == Isa::Avx2) i = detail::avx2::gelu_mul(gate, up, n, y);
        else {
            using B = xsimd::batch<float>;
            constexpr auto S = static_cast<std::int64_t>(B::size);
            const B k(0.79788456080286535587989211986876f), c(0.044715f), half(0.5f), one(1.0f);
            for (; i + S <= n; i += S) {
                const B g = B::load_unaligned(gate + i);
                const B t = xsimd::tanh(k * xsimd::fma(c * g, g * g, g));
                (half * g * (one + t) * B::load_unaligned(up + i)).store_unaligned(y + i);
            }
        }
        // the vector levels' form (float_kernels-inl.hpp), which keeps its relative accuracy
        // where 1 + tanh u cancels: g · up / (1 + e^(−2u))
        for (; i < n; ++i) {
            const float g = gate[i], u = 0.79788456080286535588f * (g + 0.044715f * g * g * g);
            y[i] = g * up[i] / (1.0f + std::exp(-2.0f * u));
        }
    }
    for (; i < n; ++i) y[i] = gelu_tanh(gate[i]) * up[i];
}

/// geluMul of n rows [gate | up] (2·I each) into n rows of I, the rows shared among the threads.
template <class T>
inline void gelu_mul_rows(const T* gate_up, std::int64_t n, std::int64_t I, T* y, ThreadPool& pool) {
    pool.parallel_for(n, [&](std::int64_t t0, std::int64_t t1) {
        for (std::int64_t t = t0; t < t1; ++t) gelu_mul(gate_up + t * 2 * I, gate_up + t * 2 * I + I, I, y + t * I);
    });
}

/// lmHead soft-cap: z ← cap · tanh(z / cap) (cap ≤ 0: unchanged). In float, whole vectors go
/// through the kernel of the process's level (kernels/isa/float_kernels-inl.hpp) or, at the
/// baseline, xsimd's tanh at the build's architecture; the tail and double take std::tanh.
template <class T>
inline void softcap(T* z, std::int64_t n, T cap, Isa isa = active_isa()) {
    if (cap <= T(0)) return;
    const T inv = T(1) / cap;
    std::int64_t i = 0;
    if constexpr (std::is_same_v<T, float>) {
        if (isa >= Isa::Avx512) i = detail::avx512::softcap(z, n, cap);
        else if (isa == Isa::Avx2) i = detail::avx2::softcap(z, n, cap);
        else {
            using B = xsimd::batch<float>;
            constexpr auto S = static_cast<std::int64_t>(B::size);
            const B vc(cap), vi(inv);
            for (; i + S <= n; i += S) (vc * xsimd::tanh(B::load_unaligned(z + i) * vi)).store_unaligned(z + i);
        }
    }
    for (; i < n; ++i) z[i] = cap * std::tanh(z[i] * inv);
}

/// The soft-cap of n rows of `width` logits, the rows shared among the threads. Each row by
/// itself: a row's vector part and tail round differently, so a logit's bits depend on its column
/// alone, never on how many rows share the call.
template <class T>
inline void softcap_rows(T* z, std::int64_t n, std::int64_t width, T cap, ThreadPool& pool) {
    pool.parallel_for(n, [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r) softcap(z + r * width, width, cap);
    });
}

/// attn_residual: x ← x + h
template <class T>
inline void residual_add(T* x, const T* h, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) x[i] += h[i];
}

/// mlp_residual: x ← s · (x + h)
template <class T>
inline void scaled_residual_add(T* x, const T* h, T s, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) x[i] = s * (x[i] + h[i]);
}

}  // namespace gemma4::kernels
