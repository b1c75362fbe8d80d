// attn.rope's tables: cos and sin of every token's angles, built once per forward step for each
// attention kind and read by every layer of that kind (all layers of a kind share head_dim,
// θ and the rotated pairs, and the step's positions are the same for all of them).
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/kernels/ops.hpp>

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// inv_freq[i] = θ^(−2i/d) for the rotated pairs, 0 for the rest (decision 4).
template <class T>
std::vector<T> rope_inverse_frequencies(const LayerGeometry& g) {
    std::vector<T> f(static_cast<std::size_t>(g.head_dim / 2), T(0));
    for (std::int64_t i = 0; i < g.rope_pairs; ++i)
        f[static_cast<std::size_t>(i)] =
            std::pow(static_cast<T>(g.rope.rope_theta), -static_cast<T>(2 * i) / static_cast<T>(g.head_dim));
    return f;
}

/// cos(p_t · inv_freq[i]) and sin(…) for the tokens t of one step, d/2 pairs each.
template <class T>
class RopeTable {
public:
    RopeTable() = default;
    RopeTable(std::span<const T> inv_freq, std::span<const std::int64_t> positions)
        : half_(static_cast<std::int64_t>(inv_freq.size())),
          cos_(positions.size() * inv_freq.size()),
          sin_(positions.size() * inv_freq.size()) {
        for (std::size_t t = 0; t < positions.size(); ++t) {
            const T p = static_cast<T>(positions[t]);
            for (std::size_t i = 0; i < inv_freq.size(); ++i) {
                cos_[t * inv_freq.size() + i] = std::cos(p * inv_freq[i]);
                sin_[t * inv_freq.size() + i] = std::sin(p * inv_freq[i]);
            }
        }
    }

    /// Rotates `heads` heads of 2 · half() values, head h of token t at x + t · stride + h · 2 · half().
    void apply(T* x, std::int64_t stride, std::int64_t heads) const {
        const std::int64_t d = 2 * half_;
        for (std::int64_t t = 0; t < tokens(); ++t)
            for (std::int64_t h = 0; h < heads; ++h)
                kernels::rope(x + t * stride + h * d, cos_.data() + t * half_, sin_.data() + t * half_, d);
    }

    std::int64_t half() const { return half_; }
    std::int64_t tokens() const { return half_ > 0 ? static_cast<std::int64_t>(cos_.size()) / half_ : 0; }

private:
    std::int64_t half_ = 0;
    std::vector<T> cos_, sin_;
};

/// One step's tables, one per attention kind the model has.
template <class T>
class StepRope {
public:
    StepRope(const Gemma4Config& c, std::span<const std::int64_t> positions) {
        if (c.num_layers_of(AttentionKind::Sliding) > 0)
            sliding_ = RopeTable<T>(rope_inverse_frequencies<T>(c.geometry(AttentionKind::Sliding)), positions);
        if (c.num_layers_of(AttentionKind::Full) > 0)
            full_ = RopeTable<T>(rope_inverse_frequencies<T>(c.geometry(AttentionKind::Full)), positions);
    }

    const RopeTable<T>& operator[](AttentionKind kind) const { return kind == AttentionKind::Sliding ? sliding_ : full_; }

private:
    RopeTable<T> sliding_, full_;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
