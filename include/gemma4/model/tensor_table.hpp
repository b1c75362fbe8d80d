// The one table of checkpoint tensors: name (with accepted aliases), expected shape as a function
// of the config, whether it is required, and which ModelWeights field it fills. Loading,
// validation, the checkpoint writer and the parameter-count test all walk this table.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/model/weights.hpp>

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

namespace detail {

/// The tensors of decoder layer i of `c` under `prefix` ("….layers.i."), bound to `lw`: those
/// of a target layer, or with `with_kv` false those of an assistant layer (q-only attention:
/// no k/v projections, no k_norm).
inline void add_layer_tensors(std::vector<TensorSpec>& t, const Gemma4Config& c, std::int64_t i, const std::string& prefix, LayerWeights& lw,
                              bool with_kv) {
    const LayerGeometry g = c.layer(i);
    const std::int64_t H = c.hidden_size, I = c.intermediate_size;
    auto layer = [&](const std::string& suffix, std::vector<std::int64_t> shape, WeightView LayerWeights::*field) {
        t.push_back(TensorSpec{{prefix + suffix}, std::move(shape), TensorGroup::Text, true, static_cast<int>(i), &(lw.*field)});
    };
    layer("input_layernorm.weight", {H}, &LayerWeights::input_layernorm);
    layer("self_attn.q_proj.weight", {g.q_dim(), H}, &LayerWeights::q_proj);
    if (with_kv) {
        layer("self_attn.k_proj.weight", {g.kv_dim(), H}, &LayerWeights::k_proj);
        if (g.has_v_proj) layer("self_attn.v_proj.weight", {g.kv_dim(), H}, &LayerWeights::v_proj);
    }
    layer("self_attn.q_norm.weight", {g.head_dim}, &LayerWeights::q_norm);
    if (with_kv) layer("self_attn.k_norm.weight", {g.head_dim}, &LayerWeights::k_norm);
    layer("self_attn.o_proj.weight", {H, g.q_dim()}, &LayerWeights::o_proj);
    layer("post_attention_layernorm.weight", {H}, &LayerWeights::post_attention_layernorm);
    layer("pre_feedforward_layernorm.weight", {H}, &LayerWeights::pre_feedforward_layernorm);
    layer("mlp.gate_proj.weight", {I, H}, &LayerWeights::gate_proj);
    layer("mlp.up_proj.weight", {I, H}, &LayerWeights::up_proj);
    layer("mlp.down_proj.weight", {H, I}, &LayerWeights::down_proj);
    layer("post_feedforward_layernorm.weight", {H}, &LayerWeights::post_feedforward_layernorm);
    layer("layer_scalar", {1}, &LayerWeights::layer_scalar);
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
