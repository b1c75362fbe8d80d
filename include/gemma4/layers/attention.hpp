// Attention<Sliding> and Attention<Full>: Gemma 4's two attention blocks (spec nodes attn.*).
// The kind decides the window. The geometry (heads, head_dim, whether V has its own projection,
// RoPE) is data read from the config; a type given a constexpr configuration
// (Attention<Sliding, float, kGemma4_12B>) refuses a layer of another geometry.
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
#include <gemma4/layers/rope.hpp>
#include <gemma4/tensor/weights.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

inline constexpr AttentionKind Sliding = AttentionKind::Sliding;
inline constexpr AttentionKind Full = AttentionKind::Full;
/// The spec calls the full-attention layers "global".
inline constexpr AttentionKind Global = AttentionKind::Full;

template <AttentionKind Kind, class T, const Gemma4Config& Fixed = kConfigFromCheckpoint>
class Attention {
public:
    static constexpr AttentionKind kind = Kind;
    /// The configuration this type is compiled for, or nullptr (read at load).
    static constexpr const Gemma4Config* fixed_config = is_fixed_config<Fixed> ? &Fixed : nullptr;
    static constexpr bool is_fixed = is_fixed_config<Fixed>;

    Attention(const Gemma4Config& c, int layer, const LayerWeights& w)
        : geom_(c.layer(layer)),
          q_proj_(w.q_proj),
          k_proj_(w.k_proj),
          v_proj_(w.v_proj),
          o_proj_(w.o_proj),
          q_norm_(w.q_norm, c.rms_norm_eps),
          k_norm_(w.k_norm, c.rms_norm_eps),
          v_norm_(RMSNorm<T>::unit(geom_.head_dim, c.rms_norm_eps)) {
        if (geom_.kind != Kind)
            throw InvalidArgument("layer " + std::to_string(layer) + " is " + std::string(attention_kind_name(geom_.kind)) +
                                  " but was built as " + std::string(attention_kind_name(Kind)));
        if constexpr (is_fixed)
            if (geom_ != kFixed)
                throw ConfigError("layer " + std::to_string(layer) + ": its " + std::string(attention_kind_name(Kind)) +
                                  " attention geometry differs from the one this model type is compiled for");
    }

    const LayerGeometry& geometry() const { return geom_; }

    /// Width of one token's row of project_qkv's output: q | k | v.
    std::int64_t qkv_width() const { return geom_.q_dim() + 2 * geom_.kv_dim(); }

    /// out[t, 0:H) = attention of the normalised stream x[t, 0:H) over the cache.
    template <class Obs>
    void forward(LayerContext<T>& ctx, const T* x, T* out, Obs& obs) const {
        const std::int64_t n = ctx.tokens.size(), qd = geom_.q_dim();
        T* const qkv = StepScratch<T>::values(ctx.scratch.qkv, n * qkv_width());
        T* const o = StepScratch<T>::values(ctx.scratch.heads, n * qd);
        project_qkv(ctx, x, qkv, obs);  // attn.qkv_proj, attn.qk_norm, attn.v_norm, attn.rope
        store_kv(ctx, qkv);
        core(ctx, qkv, o);
        tap(obs, ctx.layer, "attn.core", o, n, qd, qd);
        linear<T>(o_proj_, {o, qd}, {out, q_proj_.cols()}, n, ctx.pool);
        tap(obs, ctx.layer, "attn.o_proj", out, n, q_proj_.cols(), q_proj_.cols());
    }

    /// The front half, attn.qkv_proj → attn.qk_norm → attn.v_norm → attn.rope: rows of
    /// qkv_width() at qkv, q | k | v, ready for the cache and the core (custom attentions reuse it).
    template <class Obs>
    void project_qkv(const LayerContext<T>& ctx, const T* x, T* qkv, Obs& obs) const {
        const std::int64_t n = ctx.tokens.size(), H = q_proj_.cols(), qd = geom_.q_dim(), kvd = geom_.kv_dim(), width = qkv_width();
        const int L = ctx.layer;
        T* const q = qkv;
        T* const k = q + qd;
        T* const v = k + kvd;

        // attn.qkv_proj — with k_eq_v, V is the raw K projection (before k_norm and RoPE).
        const LinearOut<T> qkv_proj[] = {{&q_proj_, {q, width}}, {&k_proj_, {k, width}}, {&v_proj_, {v, width}}};
        linear<T>(std::span<const LinearOut<T>>(qkv_proj, geom_.has_v_proj ? 3 : 2), {x, H}, n, ctx.pool);
        if (!geom_.has_v_proj)
            for (std::int64_t t = 0; t < n; ++t) std::memcpy(v + t * width, k + t * width, sizeof(T) * kvd);
        tap(obs, L, "attn.qkv_proj", q, n, geom_.qkv_dim(), width);

        // attn.qk_norm — per head, one weight shared by all heads.
        q_norm_.per_head(q, width, n, geom_.num_heads);
        k_norm_.per_head(k, width, n, geom_.num_kv_heads);
        tap(obs, L, "attn.qk_norm", q, n, qd + kvd, width);

        // attn.v_norm — no weight.
        v_norm_.per_head(v, width, n, geom_.num_kv_heads);
        tap(obs, L, "attn.v_norm", v, n, kvd, width);

        // attn.rope — rotate-half on q and k at each token's position.
        ctx.rope[Kind].apply(q, width, geom_.num_heads);
        ctx.rope[Kind].apply(k, width, geom_.num_kv_heads);
        tap(obs, L, "attn.rope", q, n, qd + kvd, width);
    }

    /// The step's keys and values go into the cache before any query reads it, so a chunk
    /// attends to itself through the same path as to earlier positions.
    void store_kv(LayerContext<T>& ctx, const T* qkv) const {
        const std::int64_t width = qkv_width(), qd = geom_.q_dim(), kvd = geom_.kv_dim();
        for (std::int64_t t = 0; t < ctx.tokens.size(); ++t) {
            const T* k = qkv + t * width + qd;
            ctx.cache.store(ctx.layer, ctx.tokens.seq[static_cast<std::size_t>(t)], ctx.tokens.pos[static_cast<std::size_t>(t)], k, k + kvd);
        }
    }

    /// attn.core — softmax(q·kᵀ · 1) · v over each token's visible keys (scale 1: the norms set
    /// it); o gets q_dim() values per token.
    void core(LayerContext<T>& ctx, const T* qkv, T* o) const {
        const std::int64_t n = ctx.tokens.size();
        std::vector<kernels::CachedQuery>& rows = ctx.scratch.queries;
        rows.clear();
        for (std::int64_t t = 0; t < n; ++t)
            rows.push_back({ctx.tokens.seq[static_cast<std::size_t>(t)], first_visible(ctx.tokens.pos[static_cast<std::size_t>(t)]),
                            last_visible(ctx.tokens, t)});
        const KVCache<T>& cache = ctx.cache;
        kernels::attend_cache<T>(cache, ctx.layer, rows, qkv, qkv_width(), geom_.num_heads, geom_.num_kv_heads, geom_.head_dim, o,
                                 geom_.q_dim(), ctx.pool, ctx.scratch.attend);
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
    static constexpr LayerGeometry kFixed = Fixed.geometry(Kind);  // meaningful when is_fixed
    LayerGeometry geom_;
    WeightView q_proj_, k_proj_, v_proj_, o_proj_;
    RMSNorm<T> q_norm_, k_norm_, v_norm_;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
