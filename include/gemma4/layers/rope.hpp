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
    RopeTable(std::span<const T> inv_freq, std::span<const std::int64_t> positions) { assign(inv_freq, positions); }

    /// The tables for `positions`, in this table's buffers (no allocation once they are large enough).
    void assign(std::span<const T> inv_freq, std::span<const std::int64_t> positions) {
        half_ = static_cast<std::int64_t>(inv_freq.size());
        cos_.resize(positions.size() * inv_freq.size());
        sin_.resize(positions.size() * inv_freq.size());
        for (std::size_t t = 0; t < positions.size(); ++t) {
            const T p = static_cast<T>(positions[t]);
            for (std::size_t i = 0; i < inv_freq.size(); ++i) {
                cos_[t * inv_freq.size() + i] = std::cos(p * inv_freq[i]);
                sin_[t * inv_freq.size() + i] = std::sin(p * inv_freq[i]);
            }
        }
    }
    void reserve(std::size_t values) {
        cos_.reserve(values);
        sin_.reserve(values);
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
    StepRope() = default;
    StepRope(const Gemma4Config& c, std::span<const std::int64_t> positions) { assign(c, positions); }

    /// The tables for `positions` of a model of configuration `c`, in this object's buffers.
    void assign(const Gemma4Config& c, std::span<const std::int64_t> positions) {
        prepare(c);
        if (c.num_layers_of(AttentionKind::Sliding) > 0) sliding_.assign(sliding_freq_, positions);
        if (c.num_layers_of(AttentionKind::Full) > 0) full_.assign(full_freq_, positions);
    }
    /// Room for steps of up to `tokens` positions.
    void reserve(const Gemma4Config& c, std::int64_t tokens) {
        prepare(c);
        sliding_.reserve(static_cast<std::size_t>(tokens) * sliding_freq_.size());
        full_.reserve(static_cast<std::size_t>(tokens) * full_freq_.size());
    }

    const RopeTable<T>& operator[](AttentionKind kind) const { return kind == AttentionKind::Sliding ? sliding_ : full_; }

private:
    /// The inverse frequencies of each kind, computed once per configuration.
    void prepare(const Gemma4Config& c) {
        const LayerGeometry sliding = c.geometry(AttentionKind::Sliding), full = c.geometry(AttentionKind::Full);
        if (prepared_ && sliding == sliding_geometry_ && full == full_geometry_) return;
        sliding_freq_ = rope_inverse_frequencies<T>(sliding);
        full_freq_ = rope_inverse_frequencies<T>(full);
        sliding_geometry_ = sliding;
        full_geometry_ = full;
        prepared_ = true;
    }

    RopeTable<T> sliding_, full_;
    std::vector<T> sliding_freq_, full_freq_;
    LayerGeometry sliding_geometry_{}, full_geometry_{};
    bool prepared_ = false;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
