// A user's own attention for the full-attention layers: causal linear attention with the
// feature map φ(x) = elu(x) + 1, on the same projections, norms and RoPE as Gemma 4's.
//
//   o_t = Σ_{s ≤ t} (φ(q_t) · φ(k_s)) v_s / Σ_{s ≤ t} φ(q_t) · φ(k_s)
//
// It satisfies the Attn requirements of gemma4::DecoderLayer (a constructor from the config, the
// layer index and the layer's weights; forward over [tokens, H]) and reports the same spec nodes
// through the taps, so it can be compared with the standard layer node by node.
#pragma once

#include <gemma4/gemma4.hpp>

#include <cmath>
#include <cstring>
#include <vector>

namespace custom {

template <class T>
class LinearAttention {
public:
    LinearAttention(const gemma4::Gemma4Config& c, int layer, const gemma4::LayerWeights& w)
        : geom_(c.layer(layer)),
          w_(w),
          q_norm_(w.q_norm, c.rms_norm_eps),
          k_norm_(w.k_norm, c.rms_norm_eps),
          v_norm_(gemma4::RMSNorm<T>::unit(geom_.head_dim, c.rms_norm_eps)),
          inv_freq_(gemma4::rope_inverse_frequencies<T>(geom_)) {}

    static T feature(T x) { return x > 0 ? x + T(1) : std::exp(x); }  // elu(x) + 1

    template <class Obs>
    void forward(gemma4::LayerContext<T>& ctx, const T* x, T* out, Obs& obs) const {
        using gemma4::tap;
        const std::int64_t n = ctx.tokens.size(), H = w_.q_proj.cols(), d = geom_.head_dim;
        const std::int64_t qd = geom_.q_dim(), kvd = geom_.kv_dim(), width = qd + 2 * kvd;
        const int L = ctx.layer;
        std::vector<T> qkv(static_cast<std::size_t>(n * width));
        T *q = qkv.data(), *k = q + qd, *v = k + kvd;
        gemma4::linear<T>(w_.q_proj, {x, H}, {q, width}, n, ctx.pool);
        gemma4::linear<T>(w_.k_proj, {x, H}, {k, width}, n, ctx.pool);
        if (geom_.has_v_proj) gemma4::linear<T>(w_.v_proj, {x, H}, {v, width}, n, ctx.pool);
        else for (std::int64_t t = 0; t < n; ++t) std::memcpy(v + t * width, k + t * width, sizeof(T) * kvd);
        tap(obs, L, "attn.qkv_proj", q, n, geom_.qkv_dim(), width);
        for (std::int64_t t = 0; t < n; ++t) {
            q_norm_(q + t * width, d, q + t * width, d, geom_.num_heads);
            k_norm_(k + t * width, d, k + t * width, d, geom_.num_kv_heads);
            v_norm_(v + t * width, d, v + t * width, d, geom_.num_kv_heads);
        }
        tap(obs, L, "attn.qk_norm", q, n, qd + kvd, width);
        tap(obs, L, "attn.v_norm", v, n, kvd, width);
        std::vector<T> cos(inv_freq_.size()), sin(inv_freq_.size());
        for (std::int64_t t = 0; t < n; ++t) {
            const T p = static_cast<T>(ctx.tokens.pos[static_cast<std::size_t>(t)]);
            for (std::size_t i = 0; i < inv_freq_.size(); ++i) cos[i] = std::cos(p * inv_freq_[i]), sin[i] = std::sin(p * inv_freq_[i]);
            for (std::int64_t h = 0; h < geom_.num_heads; ++h) gemma4::kernels::rope(q + t * width + h * d, cos.data(), sin.data(), d);
            for (std::int64_t h = 0; h < geom_.num_kv_heads; ++h) gemma4::kernels::rope(k + t * width + h * d, cos.data(), sin.data(), d);
            const gemma4::SeqId s = ctx.tokens.seq[static_cast<std::size_t>(t)];
            const std::int64_t pos = ctx.tokens.pos[static_cast<std::size_t>(t)];
            std::memcpy(ctx.cache.key(L, s, pos), k + t * width, sizeof(T) * kvd);
            std::memcpy(ctx.cache.value(L, s, pos), v + t * width, sizeof(T) * kvd);
        }
        tap(obs, L, "attn.rope", q, n, qd + kvd, width);

        // attn.core, linear: the cache holds every earlier key and value of this layer.
        std::vector<T> o(static_cast<std::size_t>(n * qd), T(0));
        const std::int64_t group = geom_.num_heads / geom_.num_kv_heads;
        std::vector<T> fq(static_cast<std::size_t>(d));
        for (std::int64_t t = 0; t < n; ++t)
            for (std::int64_t h = 0; h < geom_.num_heads; ++h) {
                const gemma4::SeqId s = ctx.tokens.seq[static_cast<std::size_t>(t)];
                const std::int64_t p = ctx.tokens.pos[static_cast<std::size_t>(t)], g = h / group;
                for (std::int64_t i = 0; i < d; ++i) fq[static_cast<std::size_t>(i)] = feature(q[t * width + h * d + i]);
                T norm = 0;
                T* oh = o.data() + t * qd + h * d;
                for (std::int64_t j = 0; j <= p; ++j) {
                    const T* kj = ctx.cache.key(L, s, j) + g * d;
                    const T* vj = ctx.cache.value(L, s, j) + g * d;
                    T a = 0;
                    for (std::int64_t i = 0; i < d; ++i) a += fq[static_cast<std::size_t>(i)] * feature(kj[i]);
                    norm += a;
                    for (std::int64_t i = 0; i < d; ++i) oh[i] += a * vj[i];
                }
                for (std::int64_t i = 0; i < d; ++i) oh[i] /= norm;
            }
        tap(obs, L, "attn.core", o.data(), n, qd, qd);
        gemma4::linear<T>(w_.o_proj, {o.data(), qd}, {out, H}, n, ctx.pool);
        tap(obs, L, "attn.o_proj", out, n, H, H);
    }

private:
    gemma4::LayerGeometry geom_;
    gemma4::LayerWeights w_;
    gemma4::RMSNorm<T> q_norm_, k_norm_, v_norm_;
    std::vector<T> inv_freq_;
};

/// Gemma 4 with linear attention on its full-attention layers; the sliding layers are ours.
template <class T>
using LinearGlobalModel =
    gemma4::BasicModel<T, gemma4::StandardSlidingLayer<T>, gemma4::DecoderLayer<T, LinearAttention<T>, gemma4::GeGLU<T>>>;

}  // namespace custom
