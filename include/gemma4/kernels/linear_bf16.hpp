// linear for bf16 weights and float activations. A bf16 pair read as one u32 gives the odd
// element by masking and the even one by shifting, so the activations are stored once per call
// split the same way (per chunk of 2·S: the S even elements, then the S odd ones) and the inner
// loop is two FMAs per u32 load, with no shuffles. The avx2 and avx512 levels run
// kernels/isa/float_kernels-inl.hpp; the baseline level this xsimd kernel at the build's own
// architecture.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/detail/aligned.hpp>
#include <gemma4/kernels/cpu.hpp>
#include <gemma4/kernels/isa/avx2.hpp>
#include <gemma4/kernels/isa/avx512.hpp>

#include <gemma4/kernels/rows.hpp>
#include <gemma4/kernels/thread_pool.hpp>
#include <gemma4/tensor/weight_view.hpp>

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace gemma4::inline GEMMA4_ABI::detail {

struct Bf16Kernel {
    using F = xsimd::batch<float>;
    using U = xsimd::batch<std::uint32_t>;
    static constexpr std::int64_t S = static_cast<std::int64_t>(F::size);
    /// Rows × tokens per register tile: 4 × 4 needs 26 vector registers (AVX-512 has 32).
    static constexpr int R = S >= 16 ? 4 : 2;
    static constexpr int TT = S >= 16 ? 4 : 2;

    /// x[t] split into even/odd halves per 2·S chunk over the first `main` columns.
    static void split(const float* x, std::int64_t main, float* out) {
        for (std::int64_t k = 0; k < main; k += 2 * S)
            for (std::int64_t i = 0; i < S; ++i) {
                out[k + i] = x[k + 2 * i];
                out[k + S + i] = x[k + 2 * i + 1];
            }
    }

    /// y[t0 + t][n0 + r] for r < RR, t < TTT.
    template <int RR, int TTT>
    static void tile(const std::uint16_t* w, std::int64_t K, std::int64_t main, std::int64_t n0, const float* xs,
                     Rows<const float> x, std::int64_t t0, Rows<float> y) {
        F acc[RR][TTT];
        for (auto& a : acc)
            for (auto& b : a) b = F(0.0f);
        const std::uint16_t* wr[RR];
        for (int r = 0; r < RR; ++r) wr[r] = w + (n0 + r) * K;
        const U high(0xffff0000u);
        for (std::int64_t k = 0; k < main; k += 2 * S) {
            F we[RR], wo[RR];
            for (int r = 0; r < RR; ++r) {
                U v;
                std::uint32_t tmp[S];
                std::memcpy(tmp, wr[r] + k, sizeof tmp);  // rows of odd K are not 4-byte aligned
                v = U::load_unaligned(tmp);
                we[r] = xsimd::bitwise_cast<F>(v << 16);
                wo[r] = xsimd::bitwise_cast<F>(v & high);
            }
            for (int t = 0; t < TTT; ++t) {
                const float* xt = xs + (t0 + t) * main + k;
                const F xe = F::load_unaligned(xt), xo = F::load_unaligned(xt + S);
                for (int r = 0; r < RR; ++r) {
                    acc[r][t] = xsimd::fma(we[r], xe, acc[r][t]);
                    acc[r][t] = xsimd::fma(wo[r], xo, acc[r][t]);
                }
            }
        }
        for (int r = 0; r < RR; ++r)
            for (int t = 0; t < TTT; ++t) {
                float s = xsimd::hadd(acc[r][t]);
                const float* xt = x.row(t0 + t);
                for (std::int64_t k = main; k < K; ++k) s += bf16_to_float(wr[r][k]) * xt[k];
                y.row(t0 + t)[n0 + r] = s;
            }
    }

    template <int RR>
    static void row_tile(const std::uint16_t* w, std::int64_t K, std::int64_t main, std::int64_t n0, const float* xs,
                         Rows<const float> x, std::int64_t t0, std::int64_t t1, Rows<float> y) {
        std::int64_t t = t0;
        for (; t + TT <= t1; t += TT) tile<RR, TT>(w, K, main, n0, xs, x, t, y);
        for (; t < t1; ++t) tile<RR, 1>(w, K, main, n0, xs, x, t, y);
    }
};

/// y[t, n] = Σ_k x[t, k] · w[n, k] for bf16 w, at level `isa`. Each output is computed by the
/// same sequence of operations whatever the tiling, so results do not depend on the thread count.
inline void linear_bf16(const WeightView& w, Rows<const float> x, Rows<float> y, std::int64_t tokens, ThreadPool& pool,
                        Isa isa = active_isa()) {
    using Kn = Bf16Kernel;
    const std::int64_t lanes = isa >= Isa::Avx512 ? avx512::kLanes : isa == Isa::Avx2 ? avx2::kLanes : Kn::S;
    const std::int64_t N = w.rows(), K = w.cols(), main = K / (2 * lanes) * (2 * lanes);
    // Each token's split row starts on a cache line (`main` is a multiple of 32 floats), so no
    // vector load of it straddles two lines: where the compiler takes those loads as operands of
    // every FMA (GCC tuned for Zen 4) instead of once per token, a split line in each made the
    // tiles 2.5 times slower.
    thread_local AlignedVector<float> xs;
    xs.resize(static_cast<std::size_t>(tokens * main));
    for (std::int64_t t = 0; t < tokens; ++t) {
        float* out = xs.data() + t * main;
        if (isa >= Isa::Avx512) avx512::bf16_split(x.row(t), main, out);
        else if (isa == Isa::Avx2) avx2::bf16_split(x.row(t), main, out);
        else Kn::split(x.row(t), main, out);
    }
    const auto* wp = reinterpret_cast<const std::uint16_t*>(w.data);
    const std::int64_t tb = token_block(4 * K, 4);
    const float* xsp = xs.data();
    // chunks claimed dynamically (see ThreadPool::parallel_chunks); a multiple of every row tile
    pool.parallel_chunks(
        N,
        [&](std::int64_t n0, std::int64_t n1) {
            for (std::int64_t tb0 = 0; tb0 < tokens; tb0 += tb) {
                const std::int64_t tb1 = std::min(tokens, tb0 + tb);
                if (isa >= Isa::Avx512) {
                    avx512::bf16_rows(wp, K, main, n0, n1, xsp, x, tb0, tb1, y);
                } else if (isa == Isa::Avx2) {
                    avx2::bf16_rows(wp, K, main, n0, n1, xsp, x, tb0, tb1, y);
                } else {
                    std::int64_t n = n0;
                    for (; n + Kn::R <= n1; n += Kn::R) Kn::row_tile<Kn::R>(wp, K, main, n, xsp, x, tb0, tb1, y);
                    for (; n < n1; ++n) Kn::row_tile<1>(wp, K, main, n, xsp, x, tb0, tb1, y);
                }
            }
        },
        std::max<std::int64_t>(16, N / (16 * pool.size()) / 4 * 4));
}

}  // namespace gemma4::detail
