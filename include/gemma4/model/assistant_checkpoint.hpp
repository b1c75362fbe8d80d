// The Gemma 4 assistant (multi-token-prediction drafter) checkpoint: its config.json (a
// `gemma4_unified_assistant` config around a Gemma 4 text config), its tensor table, loading in
// every weight format the target model supports (random checkpoints: model/random_checkpoint.hpp).
// The forward pass is model/assistant.hpp; docs/assistant.md describes both.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/error.hpp>
#include <gemma4/io/config_json.hpp>
#include <gemma4/io/json_file.hpp>
#include <gemma4/model/checkpoint.hpp>
#include <gemma4/model/quantize.hpp>
#include <gemma4/model/tensor_table.hpp>
#include <gemma4/tensor/weights.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// Hyper-parameters of an assistant: `text` describes its own decoder layers (hidden size,
/// heads, MLP, window, RoPE) and, through num_key_value_heads / head_dim and their global twins,
/// the K/V geometry it reads from the target's cache. Its final_logit_softcapping is not used:
/// the assistant's head has no soft-cap.
struct AssistantConfig {
    Gemma4Config text;
    /// Hidden size of the target model (the width of h, of the target embedding rows and of
    /// post_projection's output).
    std::int64_t backbone_hidden_size = 3840;
    /// true: a centroid-masked head (E2B/E4B assistants), which this library does not implement.
    bool use_ordered_embeddings = false;
    std::int64_t num_centroids = 2048;
    std::int64_t centroid_intermediate_top_k = 32;
};

/// The published google/gemma-4-12B assistant configuration (≈ 423M parameters).
inline AssistantConfig gemma4_12b_assistant_config() {
    AssistantConfig a;
    Gemma4Config& c = a.text;
    c = kGemma4_12B;
    c.hidden_size = 1024;
    c.intermediate_size = 8192;
    c.num_hidden_layers = 4;
    c.layer_types = Gemma4Config::default_layer_types(0);
    c.layer_types[3] = AttentionKind::Full;
    c.has_vision = c.has_audio = false;
    c.final_logit_softcapping = 0.0;
    a.backbone_hidden_size = kGemma4_12B.hidden_size;
    return a;
}

/// Every parameter of the assistant checkpoint: embedding (the tied head), layers without K/V
/// projections or k_norm, final norm, pre_projection and post_projection.
inline std::int64_t assistant_parameter_count(const AssistantConfig& a) {
    const Gemma4Config& c = a.text;
    const std::int64_t H = c.hidden_size, B = a.backbone_hidden_size;
    std::int64_t n = c.vocab_size * H + H + H * 2 * B + B * H;
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
        const LayerGeometry g = c.layer(i);
        n += 2 * g.q_dim() * H + g.head_dim + 4 * H + 1 + 3 * c.intermediate_size * H;
    }
    return n;
}

/// A small assistant matching `target` (its hidden size, vocabulary, special ids and the K/V
/// geometry, window and RoPE of its layers): half its width, four layers (three sliding and a
/// full one, as published; only the kinds the target has).
inline AssistantConfig assistant_config_for(const Gemma4Config& target) {
    AssistantConfig a;
    Gemma4Config c = target;
    c.hidden_size = std::max<std::int64_t>(8, target.hidden_size / 2);
    c.intermediate_size = std::max<std::int64_t>(8, target.intermediate_size / 2);
    c.num_hidden_layers = 4;
    const bool sliding = target.num_layers_of(AttentionKind::Sliding) > 0, full = target.num_layers_of(AttentionKind::Full) > 0;
    for (std::int64_t i = 0; i < 4; ++i)
        c.layer_types[static_cast<std::size_t>(i)] = (full && (i == 3 || !sliding)) ? AttentionKind::Full : AttentionKind::Sliding;
    for (std::size_t i = 4; i < Gemma4Config::kMaxLayers; ++i) c.layer_types[i] = AttentionKind::Sliding;
    c.has_vision = c.has_audio = false;
    c.final_logit_softcapping = 0.0;
    a.text = c;
    a.backbone_hidden_size = target.hidden_size;
    return a;
}

/// Parses an assistant's config.json; errors name `file.field` (text fields: `file.text_config.field`).
inline AssistantConfig parse_assistant_config(const nlohmann::json& root, const std::string& file = "config.json") {
    using detail::ConfigReader;
    if (!root.is_object()) throw ConfigError(file + ": not a JSON object");
    const ConfigReader top(root, file);
    if (auto type = top.string("model_type"); type && *type != "gemma4_unified_assistant" && *type != "gemma4_assistant")
        top.fail("model_type", "'" + *type + "' is not a Gemma 4 assistant (gemma4_unified_assistant)");
    AssistantConfig a;
    a.use_ordered_embeddings = top.boolean("use_ordered_embeddings", false);
    if (a.use_ordered_embeddings)
        top.fail("use_ordered_embeddings", "the centroid-masked head (ordered embeddings) is not supported; only the plain tied head is");
    a.backbone_hidden_size = top.integer("backbone_hidden_size", std::nullopt);
    a.num_centroids = top.integer("num_centroids", a.num_centroids);
    a.centroid_intermediate_top_k = top.integer("centroid_intermediate_top_k", a.centroid_intermediate_top_k);
    if (!top.boolean("tie_word_embeddings", true)) top.fail("tie_word_embeddings", "an untied LM head is not supported");
    const ConfigReader t = top.object("text_config");
    const std::int64_t layers = t.integer("num_hidden_layers", std::nullopt);
    // Every layer reads the target's cache (Hugging Face forces num_kv_shared_layers to the
    // layer count when it is unset): 0 or the layer count, nothing in between.
    if (const std::int64_t shared = t.integer("num_kv_shared_layers", 0, 0); shared != 0 && shared != layers)
        t.fail("num_kv_shared_layers", "must be num_hidden_layers (" + std::to_string(layers) + "): every assistant layer reads the target's cache, got " +
                                           std::to_string(shared));
    // The text part is a Gemma 4 text config, read by the target's parser.
    nlohmann::json unified = root;
    unified["text_config"].erase("num_kv_shared_layers");
    for (const char* key : {"vision_config", "audio_config"}) unified.erase(key);
    a.text = parse_config(unified, file);
    return a;
}

inline AssistantConfig load_assistant_config(const std::filesystem::path& path) {
    return parse_assistant_config(read_json_file<ConfigError>(path), path.string());
}

/// The official assistant config.json layout for `a`.
inline nlohmann::json assistant_config_to_json(const AssistantConfig& a) {
    Gemma4Config c = a.text;
    c.has_vision = c.has_audio = false;
    const nlohmann::json unified = config_to_json(c);
    nlohmann::json text = unified["text_config"];
    text["num_kv_shared_layers"] = c.num_hidden_layers;
    text["final_logit_softcapping"] = nullptr;
    nlohmann::json root{{"architectures", {"Gemma4UnifiedAssistantForCausalLM"}},
                        {"model_type", "gemma4_unified_assistant"},
                        {"backbone_hidden_size", a.backbone_hidden_size},
                        {"use_ordered_embeddings", a.use_ordered_embeddings},
                        {"num_centroids", a.num_centroids},
                        {"centroid_intermediate_top_k", a.centroid_intermediate_top_k},
                        {"tie_word_embeddings", true},
                        {"text_config", text},
                        {"dtype", "bfloat16"}};
    for (const char* key : {"pad_token_id", "bos_token_id", "eos_token_id"}) root[key] = unified[key];
    return root;
}

/// The assistant's tensors as views. Its layers use the LayerWeights fields of a target layer
/// without k_proj, v_proj and k_norm (it has no keys or values of its own).
struct AssistantWeights {
    WeightView embed_tokens;     ///< [vocab, H]: the tied LM head
    WeightView norm;             ///< [H]: final norm
    WeightView pre_projection;   ///< [H, 2 · backbone]
    WeightView post_projection;  ///< [backbone, H]
    std::vector<LayerWeights> layers;
    std::shared_ptr<const void> storage;
};

/// The matrices a weight format applies to.
inline std::vector<WeightView*> assistant_matrices(AssistantWeights& w) {
    std::vector<WeightView*> m{&w.embed_tokens, &w.pre_projection, &w.post_projection};
    for (LayerWeights& l : w.layers)
        for (WeightView* v : {&l.q_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj}) m.push_back(v);
    return m;
}

/// Every tensor of an assistant checkpoint (Hugging Face's Gemma4UnifiedAssistantForCausalLM:
/// the text model under "model.", the projections at the top level). Pointers refer to `w`.
inline std::vector<TensorSpec> assistant_tensor_table(const AssistantConfig& a, AssistantWeights& w) {
    const Gemma4Config& c = a.text;
    const std::int64_t H = c.hidden_size, B = a.backbone_hidden_size;
    std::vector<TensorSpec> t;
    auto global = [&](std::string name, std::vector<std::int64_t> shape, WeightView* field) {
        t.push_back(TensorSpec{{std::move(name)}, std::move(shape), TensorGroup::Text, true, -1, field});
    };
    global("model.embed_tokens.weight", {c.vocab_size, H}, &w.embed_tokens);
    global("model.norm.weight", {H}, &w.norm);
    global("pre_projection.weight", {H, 2 * B}, &w.pre_projection);
    global("post_projection.weight", {B, H}, &w.post_projection);
    w.layers.resize(static_cast<std::size_t>(c.num_hidden_layers));
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i)
        detail::add_layer_tensors(t, c, i, "model.layers." + std::to_string(i) + ".", w.layers[static_cast<std::size_t>(i)], false);
    return t;
}

/// A loaded assistant checkpoint: config, weights as views, the directory.
struct AssistantCheckpoint {
    AssistantConfig config;
    AssistantWeights weights;
    std::filesystem::path directory;
};

/// Loads an assistant checkpoint directory (config.json, model.safetensors or shards; a
/// checkpoint quantized by `gemma4 quantize`'s format is mapped as is), then re-encodes its
/// matrices in `options.format`.
inline AssistantCheckpoint load_assistant_checkpoint(const std::filesystem::path& dir, const LoadOptions& options = {}) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(dir, ec))
        throw IoError(dir.string() + ": an assistant is loaded from a checkpoint directory (config.json and .safetensors), not a single file");
    if (!std::filesystem::is_directory(dir)) throw IoError(dir.string() + ": assistant directory not found");
    AssistantCheckpoint ck;
    ck.directory = dir;
    ck.config = load_assistant_config(dir / "config.json");
    auto store = std::make_shared<TensorStore>(dir);
    const auto table = assistant_tensor_table(ck.config, ck.weights);
    detail::bind_tensors(*store, table, false, "the Gemma 4 assistant layout described by config.json");
    ck.weights.storage = store;
    if (options.format != WeightFormat::AsStored)
        quantize_matrices(assistant_matrices(ck.weights), ck.weights.storage, options.format, options.progress, *detail::LoadPool(options),
                          options.block);
    return ck;
}

/// Whether a config.json describes an assistant (model_type gemma4_unified_assistant).
inline bool is_assistant_config(const std::filesystem::path& path) {
    const nlohmann::json j = read_json_file<ConfigError>(path);
    if (!j.is_object()) return false;
    const auto it = j.find("model_type");
    return it != j.end() && it->is_string() && (*it == "gemma4_unified_assistant" || *it == "gemma4_assistant");
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
