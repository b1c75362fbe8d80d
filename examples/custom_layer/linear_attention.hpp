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
#include <vector>

namespace custom {

template <class T>
class LinearAttention {
public:
    LinearAttention(const gemma4::Gemma4Config& c, int layer, const gemma4::LayerWeights& w)
        : geom_(c.layer(layer)), front_(c, layer, w), o_proj_(w.o_proj) {}

    static T feature(T x) { return x > 0 ? x + T(1) : std::exp(x); }  // elu(x) + 1

    template <class Obs>
    void forward(gemma4::LayerContext<T>& ctx, const T* x, T* out, Obs& obs) const {
        using gemma4::tap;
        const std::int64_t n = ctx.tokens.size(), H = o_proj_.rows(), d = geom_.head_dim;
        const std::int64_t qd = geom_.q_dim(), width = front_.qkv_width();
        const int L = ctx.layer;

        // Gemma 4's own front half: attn.qkv_proj → attn.qk_norm → attn.v_norm → attn.rope.
        std::vector<T> qkv(static_cast<std::size_t>(n * width));
        front_.project_qkv(ctx, x, qkv.data(), obs);
        front_.store_kv(ctx, qkv.data());
        const T* q = qkv.data();

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
        gemma4::linear<T>(o_proj_, {o.data(), qd}, {out, H}, n, ctx.pool);
        tap(obs, L, "attn.o_proj", out, n, H, H);
    }

private:
    gemma4::LayerGeometry geom_;
    gemma4::Attention<gemma4::Full, T> front_;
    gemma4::WeightView o_proj_;
};

/// Gemma 4 with linear attention on its full-attention layers; the sliding layers are ours.
template <class T>
using LinearGlobalModel =
    gemma4::BasicModel<T, gemma4::StandardSlidingLayer<T>, gemma4::DecoderLayer<T, LinearAttention<T>, gemma4::GeGLU<T>>>;

}  // namespace custom
