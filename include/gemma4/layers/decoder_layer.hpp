// DecoderLayer: sandwich-normed attention and MLP with the per-layer scalar (spec §1.6), composed
// from an attention type and an MLP type so either can be replaced and tested against ours.
//
// An Attn or Mlp type provides: a constructor (const Gemma4Config&, int layer, const
// LayerWeights&) and `forward(LayerContext<T>&, const T* in, T* out, Obs&)` over [tokens, H].
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/layers/attention.hpp>
#include <gemma4/layers/context.hpp>
#include <gemma4/layers/mlp.hpp>
#include <gemma4/layers/observer.hpp>
#include <gemma4/layers/rms_norm.hpp>
#include <gemma4/tensor/weights.hpp>

#include <cstdint>

namespace gemma4 {
inline namespace GEMMA4_ABI {

template <class T, class Attn, class Mlp>
class DecoderLayer {
public:
    using scalar_type = T;
    using attention_type = Attn;
    using mlp_type = Mlp;

    DecoderLayer(const Gemma4Config& c, int layer, const LayerWeights& w)
        : layer_(layer),
          input_norm_(w.input_layernorm, c.rms_norm_eps),
          attn_(c, layer, w),
          post_mix_norm_(w.post_attention_layernorm, c.rms_norm_eps),
          post_attn_norm_(w.pre_feedforward_layernorm, c.rms_norm_eps),
          mlp_(c, layer, w),
          post_ffn_norm_(w.post_feedforward_layernorm, c.rms_norm_eps),
          layer_scalar_(w.layer_scalar.template at<T>(0)) {}

    /// The residual stream x[tokens, H] in, the layer's output out (in place).
    template <class Obs>
    void forward(LayerContext<T>& ctx, T* x, Obs& obs) const {
        const std::int64_t n = ctx.tokens.size(), H = input_norm_.dim(), size = n * H;
        T* const a = StepScratch<T>::values(ctx.scratch.normed, size);
        T* const h = StepScratch<T>::values(ctx.scratch.mixed, size);

        input_norm_(x, H, a, H, n);                                          tap(obs, layer_, "input_norm", a, n, H, H);
        attn_.forward(ctx, a, h, obs);                                       // attn.qkv_proj … attn.o_proj
        post_mix_norm_(h, H, h, H, n);                                       tap(obs, layer_, "post_mix_norm", h, n, H, H);
        kernels::residual_add(x, h, size);                                   tap(obs, layer_, "attn_residual", x, n, H, H);
        post_attn_norm_(x, H, a, H, n);                                      tap(obs, layer_, "post_attn_norm", a, n, H, H);
        mlp_.forward(ctx, a, h, obs);                                        // mlp.gate_up, mlp.act, mlp.down
        post_ffn_norm_(h, H, h, H, n);                                       tap(obs, layer_, "post_ffn_norm", h, n, H, H);
        kernels::scaled_residual_add(x, h, layer_scalar_, size);             tap(obs, layer_, "mlp_residual", x, n, H, H);
    }

    const Attn& attention() const { return attn_; }
    const Mlp& mlp() const { return mlp_; }
    T layer_scalar() const { return layer_scalar_; }

private:
    int layer_;
    RMSNorm<T> input_norm_;
    Attn attn_;
    RMSNorm<T> post_mix_norm_;
    RMSNorm<T> post_attn_norm_;
    Mlp mlp_;
    RMSNorm<T> post_ffn_norm_;
    T layer_scalar_;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
