// GeGLU MLP (spec nodes mlp.*): down( gelu_tanh(gate(x)) · up(x) ).
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/kernels/linear.hpp>
#include <gemma4/kernels/ops.hpp>
#include <gemma4/layers/context.hpp>
#include <gemma4/layers/observer.hpp>
#include <gemma4/tensor/weights.hpp>

#include <cstdint>

namespace gemma4 {
inline namespace GEMMA4_ABI {

template <class T>
class GeGLU {
public:
    GeGLU(const Gemma4Config&, int, const LayerWeights& w) : gate_(w.gate_proj), up_(w.up_proj), down_(w.down_proj) {}

    template <class Obs>
    void forward(LayerContext<T>& ctx, const T* x, T* out, Obs& obs) const {
        const std::int64_t n = ctx.tokens.size(), H = gate_.cols(), I = gate_.rows();
        // mlp.gate_up — [gate | up], the spec's fused layout.
        T* const gate_up = StepScratch<T>::values(ctx.scratch.gate_up, n * 2 * I);
        const LinearOut<T> gate_up_proj[] = {{&gate_, {gate_up, 2 * I}}, {&up_, {gate_up + I, 2 * I}}};
        linear<T>(std::span<const LinearOut<T>>(gate_up_proj), {x, H}, n, ctx.pool);
        tap(obs, ctx.layer, "mlp.gate_up", gate_up, n, 2 * I, 2 * I);
        // mlp.act
        T* const act = StepScratch<T>::values(ctx.scratch.act, n * I);
        kernels::gelu_mul_rows(gate_up, n, I, act, ctx.pool);
        tap(obs, ctx.layer, "mlp.act", act, n, I, I);
        // mlp.down
        linear<T>(down_, {act, I}, {out, H}, n, ctx.pool);
        tap(obs, ctx.layer, "mlp.down", out, n, H, H);
    }

private:
    WeightView gate_, up_, down_;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
