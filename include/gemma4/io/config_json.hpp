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
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <variant>

namespace gemma4 {
inline namespace GEMMA4_ABI {

namespace detail {

/// Reads typed fields from one JSON object, naming `file: path.field` in every error.
class ConfigReader {
public:
    /// `consulted`, if given, collects the path of every key looked up (ConfigFieldLog).
    ConfigReader(const nlohmann::json& obj, std::string where, std::set<std::string>* consulted = nullptr)
        : obj_(obj), where_(std::move(where)), consulted_(consulted) {}

    const nlohmann::json* find(const std::string& key) const {
        if (consulted_) consulted_->insert(field(key));
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
        return ConfigReader(*v, field(key), consulted_);
    }
    /// A reader of another object sharing this one's record of consulted keys.
    ConfigReader other(const nlohmann::json& obj, std::string where) const { return ConfigReader(obj, std::move(where), consulted_); }
    const nlohmann::json& json() const { return obj_; }
    const std::string& where() const { return where_; }

private:
    const nlohmann::json& obj_;
    std::string where_;
    std::set<std::string>* consulted_;
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

/// The JSON object of config.json a field lives in. TokenIds: the top level of the unified
/// layout (also written into text_config, as published) or the text config of a plain one.
enum class ConfigObject : std::uint8_t { Text, TokenIds, Top, Vision, Audio };

/// The member a field fills; its type is the field's JSON type (integers, numbers, booleans).
using ConfigMember = std::variant<std::int64_t*, std::int32_t*, double*, bool*>;
/// A field's value when absent (or null): monostate for a required field.
using ConfigValue = std::variant<std::monostate, std::int64_t, double, bool>;

/// One scalar field of config.json. parse_config and config_to_json both walk kConfigFields, so
/// a field cannot be read but not written or the other way round; the structured fields
/// (layer_types, rope_parameters, eos_token_id) are read and written next to the walk.
struct ConfigField {
    ConfigObject object;
    const char* key;
    ConfigMember (*member)(Gemma4Config&);
    ConfigValue (*fallback)(const Gemma4Config& parsed_so_far);
    double min = 1;                   ///< integers: smallest allowed; numbers: must exceed it (min 0)
    const char* alias = nullptr;      ///< an older key read when `key` is absent (never written)
    std::int64_t (*written)(const Gemma4Config&) = nullptr;  ///< an integer written other than as stored
    bool zero_as_null = false;        ///< 0 is written as null (and absent/null reads as the fallback 0)
    void (*check)(const ConfigReader&, const Gemma4Config&) = nullptr;  ///< right after reading
};

inline ConfigValue config_required(const Gemma4Config&) { return std::monostate{}; }

inline const ConfigField kConfigFields[] = {
    {ConfigObject::Text, "vocab_size", [](Gemma4Config& c) -> ConfigMember { return &c.vocab_size; }, config_required},
    {ConfigObject::Text, "hidden_size", [](Gemma4Config& c) -> ConfigMember { return &c.hidden_size; }, config_required},
    {ConfigObject::Text, "intermediate_size", [](Gemma4Config& c) -> ConfigMember { return &c.intermediate_size; }, config_required},
    {ConfigObject::Text, "num_hidden_layers", [](Gemma4Config& c) -> ConfigMember { return &c.num_hidden_layers; }, config_required, 1,
     nullptr, nullptr, false,
     [](const ConfigReader& t, const Gemma4Config& c) {
         if (c.num_hidden_layers > static_cast<std::int64_t>(Gemma4Config::kMaxLayers))
             t.fail("num_hidden_layers", "at most " + std::to_string(Gemma4Config::kMaxLayers) + " layers are supported");
     }},
    {ConfigObject::Text, "num_attention_heads", [](Gemma4Config& c) -> ConfigMember { return &c.num_attention_heads; }, config_required},
    {ConfigObject::Text, "num_key_value_heads", [](Gemma4Config& c) -> ConfigMember { return &c.num_key_value_heads; }, config_required},
    {ConfigObject::Text, "head_dim", [](Gemma4Config& c) -> ConfigMember { return &c.head_dim; }, config_required},
    {ConfigObject::Text, "global_head_dim", [](Gemma4Config& c) -> ConfigMember { return &c.global_head_dim; },
     [](const Gemma4Config& c) -> ConfigValue { return c.head_dim; }},
    {ConfigObject::Text, "attention_k_eq_v", [](Gemma4Config& c) -> ConfigMember { return &c.attention_k_eq_v; },
     [](const Gemma4Config&) -> ConfigValue { return false; }},
    {ConfigObject::Text, "num_global_key_value_heads", [](Gemma4Config& c) -> ConfigMember { return &c.num_global_key_value_heads; },
     [](const Gemma4Config& c) -> ConfigValue { return c.num_key_value_heads; }},
    {ConfigObject::Text, "sliding_window", [](Gemma4Config& c) -> ConfigMember { return &c.sliding_window; }, config_required},
    {ConfigObject::Text, "max_position_embeddings", [](Gemma4Config& c) -> ConfigMember { return &c.max_position_embeddings; },
     [](const Gemma4Config&) -> ConfigValue { return std::int64_t{131072}; }},
    {ConfigObject::Text, "rms_norm_eps", [](Gemma4Config& c) -> ConfigMember { return &c.rms_norm_eps; },
     [](const Gemma4Config&) -> ConfigValue { return 1e-6; }, 0},
    // No soft-cap (0) is written as null, as Hugging Face does; an explicit 0 is rejected.
    {ConfigObject::Text, "final_logit_softcapping", [](Gemma4Config& c) -> ConfigMember { return &c.final_logit_softcapping; },
     [](const Gemma4Config&) -> ConfigValue { return 0.0; }, 0, nullptr, nullptr, true},

    {ConfigObject::TokenIds, "pad_token_id", [](Gemma4Config& c) -> ConfigMember { return &c.tokens.pad; },
     [](const Gemma4Config&) -> ConfigValue { return std::int64_t{0}; }, 0},
    {ConfigObject::TokenIds, "bos_token_id", [](Gemma4Config& c) -> ConfigMember { return &c.tokens.bos; },
     [](const Gemma4Config&) -> ConfigValue { return std::int64_t{2}; }, 0},

    // Absent multimodal ids keep the published values (TokenIds' defaults).
    {ConfigObject::Top, "image_token_id", [](Gemma4Config& c) -> ConfigMember { return &c.tokens.image; },
     [](const Gemma4Config& c) -> ConfigValue { return std::int64_t{c.tokens.image}; }, 0},
    {ConfigObject::Top, "audio_token_id", [](Gemma4Config& c) -> ConfigMember { return &c.tokens.audio; },
     [](const Gemma4Config& c) -> ConfigValue { return std::int64_t{c.tokens.audio}; }, 0},
    {ConfigObject::Top, "video_token_id", [](Gemma4Config& c) -> ConfigMember { return &c.tokens.video; },
     [](const Gemma4Config& c) -> ConfigValue { return std::int64_t{c.tokens.video}; }, 0},
    {ConfigObject::Top, "boi_token_id", [](Gemma4Config& c) -> ConfigMember { return &c.tokens.boi; },
     [](const Gemma4Config& c) -> ConfigValue { return std::int64_t{c.tokens.boi}; }, 0},
    {ConfigObject::Top, "eoi_token_id", [](Gemma4Config& c) -> ConfigMember { return &c.tokens.eoi; },
     [](const Gemma4Config& c) -> ConfigValue { return std::int64_t{c.tokens.eoi}; }, 0},
    {ConfigObject::Top, "boa_token_id", [](Gemma4Config& c) -> ConfigMember { return &c.tokens.boa; },
     [](const Gemma4Config& c) -> ConfigValue { return std::int64_t{c.tokens.boa}; }, 0},
    // Published as eoa_token_index; eoa_token_id is the name some conversions use.
    {ConfigObject::Top, "eoa_token_index", [](Gemma4Config& c) -> ConfigMember { return &c.tokens.eoa; },
     [](const Gemma4Config& c) -> ConfigValue { return std::int64_t{c.tokens.eoa}; }, 0, "eoa_token_id"},

    {ConfigObject::Vision, "patch_size", [](Gemma4Config& c) -> ConfigMember { return &c.vision.patch_size; },
     [](const Gemma4Config&) -> ConfigValue { return std::int64_t{16}; }},
    {ConfigObject::Vision, "pooling_kernel_size", [](Gemma4Config& c) -> ConfigMember { return &c.vision.pooling_kernel_size; },
     [](const Gemma4Config&) -> ConfigValue { return std::int64_t{3}; }},
    {ConfigObject::Vision, "mm_posemb_size", [](Gemma4Config& c) -> ConfigMember { return &c.vision.mm_posemb_size; },
     [](const Gemma4Config&) -> ConfigValue { return std::int64_t{1120}; }},
    {ConfigObject::Vision, "rms_norm_eps", [](Gemma4Config& c) -> ConfigMember { return &c.vision.rms_norm_eps; },
     [](const Gemma4Config&) -> ConfigValue { return 1e-6; }, 0},
    // Stored 0 means "the text hidden size"; the file always names the width.
    {ConfigObject::Vision, "mm_embed_dim", [](Gemma4Config& c) -> ConfigMember { return &c.vision.mm_embed_dim; },
     [](const Gemma4Config& c) -> ConfigValue { return c.hidden_size; }, 1, nullptr,
     [](const Gemma4Config& c) { return c.vision_embed_dim(); }},

    {ConfigObject::Audio, "audio_embed_dim", [](Gemma4Config& c) -> ConfigMember { return &c.audio.audio_embed_dim; },
     [](const Gemma4Config&) -> ConfigValue { return std::int64_t{640}; }},
    {ConfigObject::Audio, "rms_norm_eps", [](Gemma4Config& c) -> ConfigMember { return &c.audio.rms_norm_eps; },
     [](const Gemma4Config&) -> ConfigValue { return 1e-6; }, 0},
};

/// Reads the fields of `object` from `r` into `c`, in table order.
inline void read_config_fields(ConfigObject object, const ConfigReader& r, Gemma4Config& c) {
    for (const ConfigField& f : kConfigFields) {
        if (f.object != object) continue;
        const ConfigValue fallback = f.fallback(c);
        std::visit([&](auto* m) {
            using M = std::remove_pointer_t<decltype(m)>;
            if constexpr (std::is_same_v<M, bool>) {
                *m = r.boolean(f.key, std::get<bool>(fallback));
            } else if constexpr (std::is_same_v<M, double>) {
                *m = r.number(f.key, std::holds_alternative<double>(fallback) ? std::optional<double>(std::get<double>(fallback)) : std::nullopt, f.min);
            } else {
                std::optional<std::int64_t> fb;
                if (std::holds_alternative<std::int64_t>(fallback)) fb = std::get<std::int64_t>(fallback);
                const auto min = static_cast<std::int64_t>(f.min);
                if (f.alias) fb = r.integer(f.alias, fb, min);
                *m = static_cast<M>(r.integer(f.key, fb, min));
            }
        }, f.member(c));
        if (f.check) f.check(r, c);
    }
}

/// Writes the fields of `object` of `c` into `out`.
inline void write_config_fields(ConfigObject object, const Gemma4Config& c, nlohmann::json& out) {
    Gemma4Config copy = c;  // members are reached through non-const accessors
    for (const ConfigField& f : kConfigFields) {
        if (f.object != object) continue;
        std::visit([&](auto* m) {
            using M = std::remove_pointer_t<decltype(m)>;
            if (f.written) out[f.key] = f.written(c);
            else if (f.zero_as_null && !(*m > M{})) out[f.key] = nullptr;
            else if constexpr (std::is_integral_v<M> && !std::is_same_v<M, bool>) out[f.key] = static_cast<std::int64_t>(*m);
            else out[f.key] = *m;
        }, f.member(copy));
    }
}

}  // namespace detail

namespace detail {

/// parse_config, collecting in `consulted` (if given) the path of every key it looks up.
inline Gemma4Config parse_config_fields(const nlohmann::json& root, const std::string& file, std::set<std::string>* consulted) {
    if (!root.is_object()) throw ConfigError(file + ": not a JSON object");
    const ConfigReader top(root, file, consulted);
    const bool unified = top.find("text_config") != nullptr;
    const ConfigReader t = unified ? top.object("text_config") : top;

    Gemma4Config c{};
    reject_unsupported(t);
    if (unified) reject_unsupported(top);  // top-level twins of the same flags
    read_config_fields(ConfigObject::Text, t, c);

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
        const ConfigReader r = t.other(*rp, t.field("rope_parameters"));
        if (r.find("sliding_attention")) c.rope_sliding = read_rope(r.object("sliding_attention"), AttentionKind::Sliding);
        if (r.find("full_attention")) c.rope_full = read_rope(r.object("full_attention"), AttentionKind::Full);
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
            const ConfigReader lr = t.other(*it, t.field(key));
            const LayerGeometry g = c.layer(layer);
            if (lr.integer("head_dim", g.head_dim) != g.head_dim || lr.integer("num_key_value_heads", g.num_kv_heads) != g.num_kv_heads)
                t.fail(key, "per-layer geometry differs from the one derived from layer_types; not supported");
        }
    }

    // Special tokens: top level for the unified layout, else the text config.
    const ConfigReader& ids = unified ? top : t;
    read_config_fields(ConfigObject::TokenIds, ids, c);
    read_eos(ids.find("eos_token_id") ? ids.find("eos_token_id") : t.find("eos_token_id"), c.tokens, ids.field("eos_token_id"));
    read_config_fields(ConfigObject::Top, top, c);

    c.has_vision = unified && top.find("vision_config") != nullptr;
    c.has_audio = unified && top.find("audio_config") != nullptr;
    if (c.has_vision) read_config_fields(ConfigObject::Vision, top.object("vision_config"), c);
    if (c.has_audio) read_config_fields(ConfigObject::Audio, top.object("audio_config"), c);
    return c;
}

}  // namespace detail

/// Parses config.json text. `file` names the source in error messages.
inline Gemma4Config parse_config(const nlohmann::json& root, const std::string& file = "config.json") {
    return detail::parse_config_fields(root, file, nullptr);
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
              {"hidden_activation", "gelu_pytorch_tanh"},
              {"layer_types", layer_types},
              {"rope_parameters", {{"sliding_attention", rope(c.rope_sliding)}, {"full_attention", rope(c.rope_full)}}},
              {"use_bidirectional_attention", "vision"},
              {"num_kv_shared_layers", 0},
              {"use_double_wide_mlp", false},
              {"attention_bias", false},
              {"attention_dropout", 0.0},
              {"hidden_size_per_layer_input", 0},
              {"enable_moe_block", false},
              {"eos_token_id", eos},
              {"tie_word_embeddings", c.tie_word_embeddings}};
    detail::write_config_fields(detail::ConfigObject::Text, c, text);
    detail::write_config_fields(detail::ConfigObject::TokenIds, c, text);
    json root{{"architectures", {"Gemma4UnifiedForConditionalGeneration"}},
              {"model_type", "gemma4_unified"},
              {"text_config", text},
              {"eos_token_id", eos},
              {"tie_word_embeddings", c.tie_word_embeddings},
              {"initializer_range", 0.02},
              {"dtype", "bfloat16"}};
    detail::write_config_fields(detail::ConfigObject::TokenIds, c, root);
    detail::write_config_fields(detail::ConfigObject::Top, c, root);
    if (c.has_vision) {
        json vision{{"model_type", "gemma4_unified_vision"}, {"output_proj_dims", c.hidden_size}};
        detail::write_config_fields(detail::ConfigObject::Vision, c, vision);
        root["vision_config"] = vision;
    }
    if (c.has_audio) {
        json audio{{"model_type", "gemma4_unified_audio"}};
        detail::write_config_fields(detail::ConfigObject::Audio, c, audio);
        root["audio_config"] = audio;
    }
    return root;
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
