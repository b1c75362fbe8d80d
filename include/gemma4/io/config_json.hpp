// config.json ⇄ Gemma4Config. Reads the unified layout (`text_config`, `vision_config`,
// `audio_config`) and a plain text config; every field is validated and errors name it.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/error.hpp>
#include <gemma4/io/json_file.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace gemma4 {
inline namespace GEMMA4_ABI {

namespace detail {

/// Reads typed fields from one JSON object, naming `file: path.field` in every error.
class ConfigReader {
public:
    ConfigReader(const nlohmann::json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

    const nlohmann::json* find(const std::string& key) const {
        auto it = obj_.find(key);
        return (it == obj_.end() || it->is_null()) ? nullptr : &*it;
    }
    std::string field(const std::string& key) const { return where_ + "." + key; }

    [[noreturn]] void fail(const std::string& key, const std::string& what) const {
        throw ConfigError(field(key) + ": " + what);
    }

    std::int64_t integer(const std::string& key, std::optional<std::int64_t> fallback, std::int64_t min_value = 1) const {
        const auto* v = find(key);
        if (!v) {
            if (fallback) return *fallback;
            fail(key, "missing");
        }
        if (!v->is_number_integer()) fail(key, "expected an integer, got " + v->dump());
        const auto x = v->get<std::int64_t>();
        if (x < min_value) fail(key, "must be >= " + std::to_string(min_value) + ", got " + std::to_string(x));
        return x;
    }
    double number(const std::string& key, std::optional<double> fallback, double min_exclusive = 0.0) const {
        const auto* v = find(key);
        if (!v) {
            if (fallback) return *fallback;
            fail(key, "missing");
        }
        if (!v->is_number()) fail(key, "expected a number, got " + v->dump());
        const auto x = v->get<double>();
        if (!(x > min_exclusive)) fail(key, "must be > " + std::to_string(min_exclusive) + ", got " + v->dump());
        return x;
    }
    bool boolean(const std::string& key, bool fallback) const {
        const auto* v = find(key);
        if (!v) return fallback;
        if (!v->is_boolean()) fail(key, "expected true or false, got " + v->dump());
        return v->get<bool>();
    }
    std::optional<std::string> string(const std::string& key) const {
        const auto* v = find(key);
        if (!v) return std::nullopt;
        if (!v->is_string()) fail(key, "expected a string, got " + v->dump());
        return v->get<std::string>();
    }
    ConfigReader object(const std::string& key) const {
        const auto* v = find(key);
        if (!v) fail(key, "missing");
        if (!v->is_object()) fail(key, "expected an object");
        return ConfigReader(*v, field(key));
    }
    const nlohmann::json& json() const { return obj_; }
    const std::string& where() const { return where_; }

private:
    const nlohmann::json& obj_;
    std::string where_;
};

inline RopeParameters read_rope(const ConfigReader& r, AttentionKind kind) {
    RopeParameters p;
    const std::string type = r.string("rope_type").value_or("default");
    if (type == "default") p.rope_type = RopeType::Default;
    else if (type == "proportional") p.rope_type = RopeType::Proportional;
    else r.fail("rope_type", "unsupported RoPE type '" + type + "' (supported: default, proportional)");
    p.rope_theta = r.number("rope_theta", kind == AttentionKind::Sliding ? 10000.0 : 1000000.0);
    p.partial_rotary_factor = r.number("partial_rotary_factor", 1.0);
    if (p.partial_rotary_factor > 1.0) r.fail("partial_rotary_factor", "must be <= 1");
    if (const auto* f = r.find("factor"); f && (!f->is_number() || f->get<double>() != 1.0))
        r.fail("factor", "RoPE scaling factors other than 1 are not supported");
    return p;
}

inline void read_eos(const nlohmann::json* v, TokenIds& ids, const std::string& where) {
    if (!v) return;
    std::vector<std::int32_t> list;
    auto one = [&](const nlohmann::json& x) {
        if (!x.is_number_integer() || x.get<std::int64_t>() < 0 || x.get<std::int64_t>() > INT32_MAX)
            throw ConfigError(where + ": expected a token id, got " + x.dump());
        list.push_back(x.get<std::int32_t>());
    };
    if (v->is_array()) {
        for (const auto& x : *v) one(x);
    } else {
        one(*v);
    }
    if (list.empty() || list.size() > TokenIds::kMaxEos)
        throw ConfigError(where + ": expected 1 to " + std::to_string(TokenIds::kMaxEos) + " ids");
    ids.eos_count = list.size();
    for (std::size_t i = 0; i < list.size(); ++i) ids.eos[i] = list[i];
}

/// Features of other Gemma 4 sizes we do not implement: reject them by name (decision 7).
inline void reject_unsupported(const ConfigReader& t) {
    if (t.boolean("enable_moe_block", false)) t.fail("enable_moe_block", "mixture-of-experts layers are not supported");
    if (t.integer("hidden_size_per_layer_input", 0, 0) != 0)
        t.fail("hidden_size_per_layer_input", "per-layer input embeddings are not supported");
    if (t.integer("num_kv_shared_layers", 0, 0) != 0) t.fail("num_kv_shared_layers", "KV sharing is not supported");
    if (t.boolean("use_double_wide_mlp", false)) t.fail("use_double_wide_mlp", "the double-wide MLP is not supported");
    if (t.boolean("attention_bias", false)) t.fail("attention_bias", "attention biases are not supported");
    if (auto act = t.string("hidden_activation"); act && *act != "gelu_pytorch_tanh")
        t.fail("hidden_activation", "unsupported activation '" + *act + "' (expected gelu_pytorch_tanh)");
    if (!t.boolean("tie_word_embeddings", true)) t.fail("tie_word_embeddings", "an untied LM head is not supported");
}

}  // namespace detail

/// Parses config.json text. `file` names the source in error messages.
inline Gemma4Config parse_config(const nlohmann::json& root, const std::string& file = "config.json") {
    using detail::ConfigReader;
    if (!root.is_object()) throw ConfigError(file + ": not a JSON object");
    const ConfigReader top(root, file);
    const bool unified = top.find("text_config") != nullptr;
    const ConfigReader t = unified ? top.object("text_config") : top;

    Gemma4Config c{};
    detail::reject_unsupported(t);
    if (unified) detail::reject_unsupported(ConfigReader(root, file));  // top-level twins of the same flags
    c.vocab_size = t.integer("vocab_size", std::nullopt);
    c.hidden_size = t.integer("hidden_size", std::nullopt);
    c.intermediate_size = t.integer("intermediate_size", std::nullopt);
    c.num_hidden_layers = t.integer("num_hidden_layers", std::nullopt);
    if (c.num_hidden_layers > static_cast<std::int64_t>(Gemma4Config::kMaxLayers))
        t.fail("num_hidden_layers", "at most " + std::to_string(Gemma4Config::kMaxLayers) + " layers are supported");
    c.num_attention_heads = t.integer("num_attention_heads", std::nullopt);
    c.num_key_value_heads = t.integer("num_key_value_heads", std::nullopt);
    c.head_dim = t.integer("head_dim", std::nullopt);
    c.global_head_dim = t.integer("global_head_dim", c.head_dim);
    c.attention_k_eq_v = t.boolean("attention_k_eq_v", false);
    c.num_global_key_value_heads = t.integer("num_global_key_value_heads", c.num_key_value_heads);
    c.sliding_window = t.integer("sliding_window", std::nullopt);
    c.max_position_embeddings = t.integer("max_position_embeddings", 131072);
    c.rms_norm_eps = t.number("rms_norm_eps", 1e-6);
    if (t.find("final_logit_softcapping")) c.final_logit_softcapping = t.number("final_logit_softcapping", std::nullopt);
    else c.final_logit_softcapping = 0.0;  // absent or null: no soft-cap

    if (c.head_dim % 2 || c.global_head_dim % 2) t.fail("head_dim", "head dimensions must be even (RoPE pairs)");
    if (c.num_attention_heads % c.num_key_value_heads)
        t.fail("num_key_value_heads", "must divide num_attention_heads (" + std::to_string(c.num_attention_heads) + ")");
    if (c.attention_k_eq_v && c.num_attention_heads % c.num_global_key_value_heads)
        t.fail("num_global_key_value_heads", "must divide num_attention_heads (" + std::to_string(c.num_attention_heads) + ")");

    if (const auto* lt = t.find("layer_types")) {
        if (!lt->is_array()) t.fail("layer_types", "expected a list");
        if (static_cast<std::int64_t>(lt->size()) != c.num_hidden_layers)
            t.fail("layer_types", "has " + std::to_string(lt->size()) + " entries, num_hidden_layers is " +
                                      std::to_string(c.num_hidden_layers));
        for (std::size_t i = 0; i < lt->size(); ++i) {
            const auto& e = (*lt)[i];
            if (e == "sliding_attention") c.layer_types[i] = AttentionKind::Sliding;
            else if (e == "full_attention") c.layer_types[i] = AttentionKind::Full;
            else t.fail("layer_types[" + std::to_string(i) + "]", "unknown layer type " + e.dump());
        }
    } else {
        c.layer_types = Gemma4Config::default_layer_types(c.num_hidden_layers);
    }

    if (const auto* rp = t.find("rope_parameters")) {
        if (!rp->is_object()) t.fail("rope_parameters", "expected an object");
        const ConfigReader r(*rp, t.field("rope_parameters"));
        if (r.find("sliding_attention")) c.rope_sliding = detail::read_rope(r.object("sliding_attention"), AttentionKind::Sliding);
        if (r.find("full_attention")) c.rope_full = detail::read_rope(r.object("full_attention"), AttentionKind::Full);
    }
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
        const LayerGeometry g = c.layer(i);
        if (g.rope_pairs < 0 || g.rope_pairs > g.head_dim / 2)
            t.fail("rope_parameters", "rotated width does not fit head_dim " + std::to_string(g.head_dim));
    }
    if (const auto* plc = t.find("per_layer_config")) {
        if (!plc->is_object()) t.fail("per_layer_config", "expected an object");
        for (auto it = plc->begin(); it != plc->end(); ++it) {
            const std::string key = "per_layer_config." + it.key();
            std::int64_t layer = -1;
            try {
                layer = std::stoll(it.key());
            } catch (...) {
            }
            if (layer < 0 || layer >= c.num_hidden_layers) t.fail(key, "not a layer index");
            if (!it->is_object()) t.fail(key, "expected an object");
            const ConfigReader lr(*it, t.field(key));
            const LayerGeometry g = c.layer(layer);
            if (lr.integer("head_dim", g.head_dim) != g.head_dim || lr.integer("num_key_value_heads", g.num_kv_heads) != g.num_kv_heads)
                t.fail(key, "per-layer geometry differs from the one derived from layer_types; not supported");
        }
    }

    // Special tokens: top level for the unified layout, else the text config.
    const ConfigReader& ids = unified ? top : t;
    c.tokens.pad = static_cast<std::int32_t>(ids.integer("pad_token_id", 0, 0));
    c.tokens.bos = static_cast<std::int32_t>(ids.integer("bos_token_id", 2, 0));
    detail::read_eos(ids.find("eos_token_id") ? ids.find("eos_token_id") : t.find("eos_token_id"), c.tokens,
                     ids.field("eos_token_id"));
    c.tokens.image = static_cast<std::int32_t>(top.integer("image_token_id", c.tokens.image, 0));
    c.tokens.audio = static_cast<std::int32_t>(top.integer("audio_token_id", c.tokens.audio, 0));
    c.tokens.video = static_cast<std::int32_t>(top.integer("video_token_id", c.tokens.video, 0));
    c.tokens.boi = static_cast<std::int32_t>(top.integer("boi_token_id", c.tokens.boi, 0));
    c.tokens.eoi = static_cast<std::int32_t>(top.integer("eoi_token_id", c.tokens.eoi, 0));
    c.tokens.boa = static_cast<std::int32_t>(top.integer("boa_token_id", c.tokens.boa, 0));
    c.tokens.eoa = static_cast<std::int32_t>(top.integer("eoa_token_index", top.integer("eoa_token_id", c.tokens.eoa, 0), 0));

    c.has_vision = unified && top.find("vision_config") != nullptr;
    c.has_audio = unified && top.find("audio_config") != nullptr;
    if (c.has_vision) {
        const ConfigReader v = top.object("vision_config");
        c.vision.patch_size = v.integer("patch_size", 16);
        c.vision.pooling_kernel_size = v.integer("pooling_kernel_size", 3);
        c.vision.mm_posemb_size = v.integer("mm_posemb_size", 1120);
        c.vision.rms_norm_eps = v.number("rms_norm_eps", 1e-6);
        c.vision.mm_embed_dim = v.integer("mm_embed_dim", c.hidden_size, 1);
    }
    if (c.has_audio) {
        const ConfigReader a = top.object("audio_config");
        c.audio.audio_embed_dim = a.integer("audio_embed_dim", 640);
        c.audio.rms_norm_eps = a.number("rms_norm_eps", 1e-6);
    }
    return c;
}

inline Gemma4Config load_config(const std::filesystem::path& path) {
    return parse_config(read_json_file<ConfigError>(path), path.string());
}

/// The official unified config.json layout for `c`.
inline nlohmann::json config_to_json(const Gemma4Config& c) {
    using nlohmann::json;
    auto rope = [](const RopeParameters& r) {
        json j{{"rope_type", r.rope_type == RopeType::Default ? "default" : "proportional"}, {"rope_theta", r.rope_theta}};
        if (r.rope_type == RopeType::Proportional) j["partial_rotary_factor"] = r.partial_rotary_factor;
        return j;
    };
    json layer_types = json::array();
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) layer_types.push_back(attention_kind_name(c.layer_kind(i)));
    json eos = json::array();
    for (std::size_t i = 0; i < c.tokens.eos_count; ++i) eos.push_back(c.tokens.eos[i]);
    json text{{"model_type", "gemma4_unified_text"},
              {"vocab_size", c.vocab_size},
              {"hidden_size", c.hidden_size},
              {"intermediate_size", c.intermediate_size},
              {"num_hidden_layers", c.num_hidden_layers},
              {"num_attention_heads", c.num_attention_heads},
              {"num_key_value_heads", c.num_key_value_heads},
              {"head_dim", c.head_dim},
              {"global_head_dim", c.global_head_dim},
              {"num_global_key_value_heads", c.num_global_key_value_heads},
              {"attention_k_eq_v", c.attention_k_eq_v},
              {"hidden_activation", "gelu_pytorch_tanh"},
              {"max_position_embeddings", c.max_position_embeddings},
              {"rms_norm_eps", c.rms_norm_eps},
              {"sliding_window", c.sliding_window},
              {"layer_types", layer_types},
              {"rope_parameters", {{"sliding_attention", rope(c.rope_sliding)}, {"full_attention", rope(c.rope_full)}}},
              // No soft-cap (0) is written as null, as Hugging Face does; parse_config rejects 0.
              {"final_logit_softcapping", c.final_logit_softcapping > 0 ? json(c.final_logit_softcapping) : json(nullptr)},
              {"use_bidirectional_attention", "vision"},
              {"num_kv_shared_layers", 0},
              {"use_double_wide_mlp", false},
              {"attention_bias", false},
              {"attention_dropout", 0.0},
              {"hidden_size_per_layer_input", 0},
              {"enable_moe_block", false},
              {"pad_token_id", c.tokens.pad},
              {"bos_token_id", c.tokens.bos},
              {"eos_token_id", eos},
              {"tie_word_embeddings", c.tie_word_embeddings}};
    json root{{"architectures", {"Gemma4UnifiedForConditionalGeneration"}},
              {"model_type", "gemma4_unified"},
              {"text_config", text},
              {"boi_token_id", c.tokens.boi},
              {"eoi_token_id", c.tokens.eoi},
              {"image_token_id", c.tokens.image},
              {"video_token_id", c.tokens.video},
              {"boa_token_id", c.tokens.boa},
              {"eoa_token_index", c.tokens.eoa},
              {"audio_token_id", c.tokens.audio},
              {"pad_token_id", c.tokens.pad},
              {"bos_token_id", c.tokens.bos},
              {"eos_token_id", eos},
              {"tie_word_embeddings", c.tie_word_embeddings},
              {"initializer_range", 0.02},
              {"dtype", "bfloat16"}};
    if (c.has_vision)
        root["vision_config"] = {{"model_type", "gemma4_unified_vision"},
                                 {"patch_size", c.vision.patch_size},
                                 {"pooling_kernel_size", c.vision.pooling_kernel_size},
                                 {"mm_embed_dim", c.vision_embed_dim()},
                                 {"mm_posemb_size", c.vision.mm_posemb_size},
                                 {"output_proj_dims", c.hidden_size},
                                 {"rms_norm_eps", c.vision.rms_norm_eps}};
    if (c.has_audio)
        root["audio_config"] = {{"model_type", "gemma4_unified_audio"},
                                {"audio_embed_dim", c.audio.audio_embed_dim},
                                {"rms_norm_eps", c.audio.rms_norm_eps}};
    return root;
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
