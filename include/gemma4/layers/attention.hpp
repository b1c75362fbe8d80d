// Attention<Sliding> and Attention<Full>: Gemma 4's two attention blocks (spec nodes attn.*).
// The kind is the only compile-time parameter: it decides the window; the geometry (heads,
// head_dim, whether V has its own projection, RoPE) is data read from the config.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/error.hpp>
#include <gemma4/kernels/attention.hpp>
#include <gemma4/kernels/linear.hpp>
#include <gemma4/kernels/ops.hpp>
#include <gemma4/layers/context.hpp>
#include <gemma4/layers/observer.hpp>
#include <gemma4/layers/rms_norm.hpp>
#include <gemma4/model/weights.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

inline constexpr AttentionKind Sliding = AttentionKind::Sliding;
inline constexpr AttentionKind Full = AttentionKind::Full;
/// The spec calls the full-attention layers "global".
inline constexpr AttentionKind Global = AttentionKind::Full;

/// inv_freq[i] = θ^(−2i/d) for the rotated pairs, 0 for the rest (decision 4).
template <class T>
std::vector<T> rope_inverse_frequencies(const LayerGeometry& g) {
    std::vector<T> f(static_cast<std::size_t>(g.head_dim / 2), T(0));
    for (std::int64_t i = 0; i < g.rope_pairs; ++i)
        f[static_cast<std::size_t>(i)] =
            std::pow(static_cast<T>(g.rope.rope_theta), -static_cast<T>(2 * i) / static_cast<T>(g.head_dim));
    return f;
}

template <AttentionKind Kind, class T>
class Attention {
public:
    static constexpr AttentionKind kind = Kind;

    Attention(const Gemma4Config& c, int layer, const LayerWeights& w)
        : geom_(c.layer(layer)),
          q_proj_(w.q_proj),
          k_proj_(w.k_proj),
          v_proj_(w.v_proj),
          o_proj_(w.o_proj),
          q_norm_(w.q_norm, c.rms_norm_eps),
          k_norm_(w.k_norm, c.rms_norm_eps),
          v_norm_(RMSNorm<T>::unit(geom_.head_dim, c.rms_norm_eps)),
          inv_freq_(rope_inverse_frequencies<T>(geom_)) {
        if (geom_.kind != Kind)
            throw InvalidArgument("layer " + std::to_string(layer) + " is " + std::string(attention_kind_name(geom_.kind)) +
                                  " but was built as " + std::string(attention_kind_name(Kind)));
    }

    const LayerGeometry& geometry() const { return geom_; }

    /// out[t, 0:H) = attention of the normalised stream x[t, 0:H) over the cache.
    template <class Obs>
    void forward(LayerContext<T>& ctx, const T* x, T* out, Obs& obs) const {
        const std::int64_t n = ctx.tokens.size(), H = q_proj_.cols(), d = geom_.head_dim;
        const std::int64_t qd = geom_.q_dim(), kvd = geom_.kv_dim(), width = qd + 2 * kvd;
        const int L = ctx.layer;
        std::vector<T> qkv(static_cast<std::size_t>(n * width));
        T* const q = qkv.data();
        T* const k = q + qd;
        T* const v = k + kvd;

        // attn.qkv_proj — with k_eq_v, V is the raw K projection (before k_norm and RoPE).
        const LinearOut<T> qkv_proj[] = {{&q_proj_, {q, width}}, {&k_proj_, {k, width}}, {&v_proj_, {v, width}}};
        linear<T>(std::span<const LinearOut<T>>(qkv_proj, geom_.has_v_proj ? 3 : 2), {x, H}, n, ctx.pool);
        if (!geom_.has_v_proj)
            for (std::int64_t t = 0; t < n; ++t) std::memcpy(v + t * width, k + t * width, sizeof(T) * kvd);
        tap(obs, L, "attn.qkv_proj", q, n, geom_.qkv_dim(), width);

        // attn.qk_norm — per head, one weight shared by all heads.
        for (std::int64_t t = 0; t < n; ++t) {
            q_norm_(q + t * width, d, q + t * width, d, geom_.num_heads);
            k_norm_(k + t * width, d, k + t * width, d, geom_.num_kv_heads);
        }
        tap(obs, L, "attn.qk_norm", q, n, qd + kvd, width);

        // attn.v_norm — no weight.
        for (std::int64_t t = 0; t < n; ++t) v_norm_(v + t * width, d, v + t * width, d, geom_.num_kv_heads);
        tap(obs, L, "attn.v_norm", v, n, kvd, width);

        // attn.rope — rotate-half on q and k at each token's position.
        std::vector<T> cos(inv_freq_.size()), sin(inv_freq_.size());
        for (std::int64_t t = 0; t < n; ++t) {
            const T p = static_cast<T>(ctx.tokens.pos[static_cast<std::size_t>(t)]);
            for (std::size_t i = 0; i < inv_freq_.size(); ++i) {
                cos[i] = std::cos(p * inv_freq_[i]);
                sin[i] = std::sin(p * inv_freq_[i]);
            }
            for (std::int64_t h = 0; h < geom_.num_heads; ++h) kernels::rope(q + t * width + h * d, cos.data(), sin.data(), d);
            for (std::int64_t h = 0; h < geom_.num_kv_heads; ++h) kernels::rope(k + t * width + h * d, cos.data(), sin.data(), d);
        }
        tap(obs, L, "attn.rope", q, n, qd + kvd, width);

        // The step's keys and values go into the cache before any query reads it, so a chunk
        // attends to itself through the same path as to earlier positions.
        for (std::int64_t t = 0; t < n; ++t)
            ctx.cache.store(L, ctx.tokens.seq[static_cast<std::size_t>(t)], ctx.tokens.pos[static_cast<std::size_t>(t)], k + t * width,
                            v + t * width);

        // attn.core — softmax(q·kᵀ · 1) · v over the visible keys (scale 1: the norms set it).
        std::vector<T> o(static_cast<std::size_t>(n * qd));
        std::vector<kernels::CachedQuery> rows(static_cast<std::size_t>(n));
        for (std::int64_t t = 0; t < n; ++t)
            rows[static_cast<std::size_t>(t)] = {ctx.tokens.seq[static_cast<std::size_t>(t)],
                                                 first_visible(ctx.tokens.pos[static_cast<std::size_t>(t)]), last_visible(ctx.tokens, t)};
        const KVCache<T>& cache = ctx.cache;
        kernels::attend_cache<T>(cache, L, rows, q, width, geom_.num_heads, geom_.num_kv_heads, d, o.data(), qd, ctx.pool);
        tap(obs, L, "attn.core", o.data(), n, qd, qd);

        // attn.o_proj
        linear<T>(o_proj_, {o.data(), qd}, {out, H}, n, ctx.pool);
        tap(obs, L, "attn.o_proj", out, n, H, H);
    }

    /// The first key position a query at position p sees: q − W < k ≤ q (decision 3).
    std::int64_t first_visible(std::int64_t p) const {
        if constexpr (Kind == AttentionKind::Sliding) return std::max<std::int64_t>(0, p - geom_.window + 1);
        else return 0;
    }

    /// The last key a token sees: itself, or the end of its image's block (decision 9).
    static std::int64_t last_visible(const StepTokens& tokens, std::int64_t t) {
        const std::int64_t p = tokens.pos[static_cast<std::size_t>(t)];
        if (tokens.last_key.empty()) return p;
        if (Kind == AttentionKind::Full && !tokens.blocks_on_full_layers) return p;
        return tokens.last_key[static_cast<std::size_t>(t)];
    }

private:
    LayerGeometry geom_;
    WeightView q_proj_, k_proj_, v_proj_, o_proj_;
    RMSNorm<T> q_norm_, k_norm_, v_norm_;
    std::vector<T> inv_freq_;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
