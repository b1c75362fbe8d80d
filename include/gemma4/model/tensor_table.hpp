// The one table of checkpoint tensors: name (with accepted aliases), expected shape as a function
// of the config, whether it is required, and which ModelWeights field it fills. Loading,
// validation, the checkpoint writer and the parameter-count test all walk this table.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/tensor/weights.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

enum class TensorGroup : std::uint8_t { Text, Vision, Audio };

struct TensorSpec {
    std::vector<std::string> names;  ///< on-disk name first, then accepted aliases
    std::vector<std::int64_t> shape;
    TensorGroup group = TensorGroup::Text;
    bool required = true;            ///< required for a text-only run
    int layer = -1;                  ///< -1 for non-layer tensors
    WeightView* field = nullptr;  ///< the ModelWeights member this tensor fills

    const std::string& name() const { return names.front(); }
};

/// The width of each axis of a decoder layer's tensor, in terms of its geometry.
enum class LayerTensorShape : std::uint8_t {
    Hidden,   ///< [H]
    HeadDim,  ///< [head_dim]
    Query,    ///< [q_dim, H]
    KeyValue, ///< [kv_dim, H]
    Value,    ///< [kv_dim, H], only in layers with their own V (has_v_proj)
    Output,   ///< [H, q_dim]
    MlpIn,    ///< [I, H]
    MlpOut,   ///< [H, I]
    Scalar,   ///< [1]
};

/// One tensor of a decoder layer: its name after "….layers.i.", the LayerWeights member it
/// fills, its shape, and whether only layers with their own K/V hold it (the assistant's q-only
/// attention has no k/v projections and no k_norm).
struct LayerTensor {
    const char* suffix;
    WeightView LayerWeights::*field;
    LayerTensorShape shape;
    bool own_kv = false;

    /// The big matrices, the ones a weight format re-encodes (model/quantize.hpp).
    constexpr bool matrix() const {
        return shape != LayerTensorShape::Hidden && shape != LayerTensorShape::HeadDim && shape != LayerTensorShape::Scalar;
    }
};

/// The tensors of a decoder layer, in checkpoint order: the one list that loading, validation,
/// the checkpoint writers, random weights and the weight formats' list of matrices walk.
inline constexpr LayerTensor kLayerTensors[] = {
    {"input_layernorm.weight", &LayerWeights::input_layernorm, LayerTensorShape::Hidden},
    {"self_attn.q_proj.weight", &LayerWeights::q_proj, LayerTensorShape::Query},
    {"self_attn.k_proj.weight", &LayerWeights::k_proj, LayerTensorShape::KeyValue, true},
    {"self_attn.v_proj.weight", &LayerWeights::v_proj, LayerTensorShape::Value, true},
    {"self_attn.q_norm.weight", &LayerWeights::q_norm, LayerTensorShape::HeadDim},
    {"self_attn.k_norm.weight", &LayerWeights::k_norm, LayerTensorShape::HeadDim, true},
    {"self_attn.o_proj.weight", &LayerWeights::o_proj, LayerTensorShape::Output},
    {"post_attention_layernorm.weight", &LayerWeights::post_attention_layernorm, LayerTensorShape::Hidden},
    {"pre_feedforward_layernorm.weight", &LayerWeights::pre_feedforward_layernorm, LayerTensorShape::Hidden},
    {"mlp.gate_proj.weight", &LayerWeights::gate_proj, LayerTensorShape::MlpIn},
    {"mlp.up_proj.weight", &LayerWeights::up_proj, LayerTensorShape::MlpIn},
    {"mlp.down_proj.weight", &LayerWeights::down_proj, LayerTensorShape::MlpOut},
    {"post_feedforward_layernorm.weight", &LayerWeights::post_feedforward_layernorm, LayerTensorShape::Hidden},
    {"layer_scalar", &LayerWeights::layer_scalar, LayerTensorShape::Scalar},
};

/// The shape of `t` in a layer of geometry g.
inline std::vector<std::int64_t> layer_tensor_shape(const LayerTensor& t, const Gemma4Config& c, const LayerGeometry& g) {
    const std::int64_t H = c.hidden_size, I = c.intermediate_size;
    switch (t.shape) {
        case LayerTensorShape::Hidden: return {H};
        case LayerTensorShape::HeadDim: return {g.head_dim};
        case LayerTensorShape::Query: return {g.q_dim(), H};
        case LayerTensorShape::KeyValue:
        case LayerTensorShape::Value: return {g.kv_dim(), H};
        case LayerTensorShape::Output: return {H, g.q_dim()};
        case LayerTensorShape::MlpIn: return {I, H};
        case LayerTensorShape::MlpOut: return {H, I};
        case LayerTensorShape::Scalar: return {1};
    }
    return {};
}

namespace detail {

/// The tensors of decoder layer i of `c` under `prefix` ("….layers.i."), bound to `lw`: those
/// of a target layer, or with `with_kv` false those of an assistant layer (kLayerTensors without
/// the own_kv ones).
inline void add_layer_tensors(std::vector<TensorSpec>& t, const Gemma4Config& c, std::int64_t i, const std::string& prefix, LayerWeights& lw,
                              bool with_kv) {
    const LayerGeometry g = c.layer(i);
    for (const LayerTensor& lt : kLayerTensors) {
        if (lt.own_kv && !with_kv) continue;
        if (lt.shape == LayerTensorShape::Value && !g.has_v_proj) continue;
        t.push_back(TensorSpec{{prefix + lt.suffix}, layer_tensor_shape(lt, c, g), TensorGroup::Text, true, static_cast<int>(i), &(lw.*lt.field)});
    }
}

}  // namespace detail

/// Every tensor a checkpoint of `c` may hold. `text_prefix` is "model.language_model." for the
/// unified layout or "model." for a text-only checkpoint. Pointers in the result refer to `w`.
inline std::vector<TensorSpec> tensor_table(const Gemma4Config& c, const std::string& text_prefix, ModelWeights& w) {
    std::vector<TensorSpec> t;
    const std::int64_t H = c.hidden_size;
    auto global = [&](std::string name, std::vector<std::int64_t> shape, WeightView* field) {
        t.push_back(TensorSpec{{std::move(name)}, std::move(shape), TensorGroup::Text, true, -1, field});
    };
    global(text_prefix + "embed_tokens.weight", {c.vocab_size, H}, &w.embed_tokens);
    global(text_prefix + "norm.weight", {H}, &w.norm);

    w.layers.resize(static_cast<std::size_t>(c.num_hidden_layers));
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i)
        detail::add_layer_tensors(t, c, i, text_prefix + "layers." + std::to_string(i) + ".", w.layers[static_cast<std::size_t>(i)], true);

    // Multimodal embedders: never required by a text-only run (decision 8); both name layouts.
    auto mm = [&](TensorGroup group, std::vector<std::string> names, std::vector<std::int64_t> shape, WeightView* field) {
        t.push_back(TensorSpec{std::move(names), std::move(shape), group, false, -1, field});
    };
    if (c.has_vision) {
        const std::int64_t P = c.vision.patch_values(), E = c.vision_embed_dim();
        auto vis = [&](const std::string& suffix, std::vector<std::int64_t> shape, WeightView* field) {
            mm(TensorGroup::Vision, {"model.vision_embedder." + suffix, "model.embed_vision." + suffix}, std::move(shape), field);
        };
        vis("patch_ln1.weight", {P}, &w.vision.patch_ln1_weight);
        vis("patch_ln1.bias", {P}, &w.vision.patch_ln1_bias);
        vis("patch_dense.weight", {E, P}, &w.vision.patch_dense_weight);
        vis("patch_dense.bias", {E}, &w.vision.patch_dense_bias);
        vis("patch_ln2.weight", {E}, &w.vision.patch_ln2_weight);
        vis("patch_ln2.bias", {E}, &w.vision.patch_ln2_bias);
        vis("pos_embedding", {c.vision.mm_posemb_size, 2, E}, &w.vision.pos_embedding);
        vis("pos_norm.weight", {E}, &w.vision.pos_norm_weight);
        vis("pos_norm.bias", {E}, &w.vision.pos_norm_bias);
        mm(TensorGroup::Vision,
           {"model.embed_vision.embedding_projection.weight", "model.embed_vision.multimodal_embedder.embedding_projection.weight"},
           {H, E}, &w.vision.embedding_projection);
    }
    if (c.has_audio) {
        mm(TensorGroup::Audio,
           {"model.embed_audio.embedding_projection.weight", "model.embed_audio.multimodal_embedder.embedding_projection.weight"},
           {H, c.audio.audio_embed_dim}, &w.audio.embedding_projection);
    }
    return t;
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
