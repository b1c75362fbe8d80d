// Activation taps: an optional observer sees every spec node's output as (layer, node, values).
// With the default NoObserver the calls compile to nothing.
#pragma once

#include <gemma4/abi.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// A node output: `rows` tokens × `cols` values, row r at data + r · stride.
template <class T>
struct TapView {
    int layer;              ///< -1 for model-level nodes (embed, final_norm, lm_head)
    std::string_view node;  ///< spec node name: "input_norm", "attn.qkv_proj", ...
    const T* data;
    std::int64_t rows, cols, stride;

    T operator()(std::int64_t r, std::int64_t c) const { return data[r * stride + c]; }
    /// "layers.{i}.{node}" or "{node}", as in the spec and decisions.md §10.
    std::string full_name() const {
        return layer < 0 ? std::string(node) : "layers." + std::to_string(layer) + "." + std::string(node);
    }
};

/// The default observer: no taps, no cost.
struct NoObserver {};

template <class Obs, class T>
inline void tap(Obs& obs, int layer, std::string_view node, const T* data, std::int64_t rows, std::int64_t cols,
                std::int64_t stride) {
    if constexpr (!std::is_same_v<std::remove_cvref_t<Obs>, NoObserver>)
        obs(TapView<T>{layer, node, data, rows, cols, stride});
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
