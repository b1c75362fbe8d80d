// io/config_json.hpp: one field table serves parse_config and config_to_json. Every field of a
// config unlike the defaults survives the round trip, and the keys written are exactly the keys
// read, apart from two named lists (published metadata nothing reads; accepted aliases and
// rejected features nothing writes) — a field added in one direction only fails here.
#include <catch2/catch.hpp>

#include <gemma4/config.hpp>
#include <gemma4/io/config_json.hpp>
#include <gemma4/model/random_checkpoint.hpp>

#include <set>
#include <string>
#include <variant>

using namespace gemma4;
using nlohmann::json;

namespace {

/// A config with every field away from Gemma4Config{}'s defaults and parse_config's fallbacks.
Gemma4Config unusual_config() {
    Gemma4Config c{};
    c.vocab_size = 777;
    c.hidden_size = 96;
    c.intermediate_size = 200;
    c.num_hidden_layers = 5;
    c.num_attention_heads = 6;
    c.num_key_value_heads = 3;
    c.head_dim = 10;
    c.global_head_dim = 22;
    c.num_global_key_value_heads = 2;
    c.attention_k_eq_v = true;  // parse_config's fallback is false
    c.sliding_window = 7;
    c.max_position_embeddings = 999;
    c.rms_norm_eps = 3e-6;
    c.final_logit_softcapping = 12.5;
    c.rope_sliding = {RopeType::Proportional, 12345.0, 0.5};
    c.rope_full = {RopeType::Proportional, 54321.0, 0.75};
    c.layer_types = Gemma4Config::default_layer_types(5);
    c.layer_types[1] = c.layer_types[3] = AttentionKind::Full;
    c.has_vision = c.has_audio = true;
    c.vision = {5, 2, 9, 40, 2e-6};
    c.audio = {24, 4e-6};
    c.tokens.pad = 7;
    c.tokens.bos = 8;
    c.tokens.eos = {3, 4, 5};
    c.tokens.eos_count = 3;
    c.tokens.image = 401;
    c.tokens.audio = 402;
    c.tokens.video = 403;
    c.tokens.boi = 404;
    c.tokens.eoi = 405;
    c.tokens.boa = 406;
    c.tokens.eoa = 407;
    return c;
}

/// A table field's value as a double (all of them are small integers, numbers or booleans).
double field_value(const detail::ConfigField& f, Gemma4Config c) {
    return std::visit([](auto* m) { return static_cast<double>(*m); }, f.member(c));
}

/// The path of every key of `j` ("config.json.text_config.vocab_size"), objects and their keys.
void key_paths(const json& j, const std::string& where, std::set<std::string>& out) {
    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string path = where + "." + it.key();
        out.insert(path);
        if (it->is_object()) key_paths(*it, path, out);
    }
}

std::set<std::string> difference(const std::set<std::string>& a, const std::set<std::string>& b) {
    std::set<std::string> d;
    for (const auto& x : a)
        if (!b.count(x)) d.insert(x);
    return d;
}

}  // namespace

TEST_CASE("config.json: every field of an unusual config survives config_to_json -> parse_config", "[config][fields]") {
    const Gemma4Config c = unusual_config();
    Gemma4Config defaults{};
    for (const detail::ConfigField& f : detail::kConfigFields) {
        INFO(f.key);
        // the test config really is unusual: away from the defaults (booleans: from the fallback)
        if (!std::holds_alternative<bool*>(f.member(defaults))) CHECK(field_value(f, c) != field_value(f, defaults));
        const detail::ConfigValue fallback = f.fallback(defaults);
        if (const auto* v = std::get_if<std::int64_t>(&fallback)) CHECK(field_value(f, c) != static_cast<double>(*v));
        if (const auto* v = std::get_if<double>(&fallback)) CHECK(field_value(f, c) != *v);
        if (const auto* v = std::get_if<bool>(&fallback)) CHECK(field_value(f, c) != static_cast<double>(*v));
    }

    const Gemma4Config back = parse_config(config_to_json(c));
    for (const detail::ConfigField& f : detail::kConfigFields) {
        INFO(f.key);
        CHECK(field_value(f, back) == field_value(f, c));
    }
    // the structured fields, read and written next to the table
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) CHECK(back.layer_kind(i) == c.layer_kind(i));
    for (const auto& [a, b] : {std::pair{back.rope_sliding, c.rope_sliding}, std::pair{back.rope_full, c.rope_full}}) {
        CHECK(a.rope_type == b.rope_type);
        CHECK(a.rope_theta == b.rope_theta);
        CHECK(a.partial_rotary_factor == b.partial_rotary_factor);
    }
    CHECK(back.tokens.eos_count == c.tokens.eos_count);
    CHECK(back.tokens.eos == c.tokens.eos);
    CHECK(back.has_vision == c.has_vision);
    CHECK(back.has_audio == c.has_audio);
    CHECK(back.tie_word_embeddings == c.tie_word_embeddings);
    CHECK(config_to_json(back) == config_to_json(c));
}

TEST_CASE("config.json: the keys written are the keys read", "[config][fields]") {
    for (const Gemma4Config& c : {unusual_config(), kGemma4_12B, tiny_config()}) {
        const json j = config_to_json(c);
        std::set<std::string> written, read;
        key_paths(j, "config.json", written);
        detail::parse_config_fields(j, "config.json", &read);

        // Published metadata, and the text config's twins of the unified layout's top-level ids.
        std::set<std::string> written_only{"config.json.architectures", "config.json.model_type", "config.json.initializer_range",
                                           "config.json.dtype", "config.json.text_config.model_type",
                                           "config.json.text_config.use_bidirectional_attention", "config.json.text_config.attention_dropout",
                                           "config.json.text_config.pad_token_id", "config.json.text_config.bos_token_id",
                                           "config.json.text_config.eos_token_id"};
        // Accepted aliases, optional checks and top-level twins of rejected features.
        std::set<std::string> read_only{"config.json.eoa_token_id", "config.json.text_config.per_layer_config",
                                        "config.json.enable_moe_block", "config.json.hidden_size_per_layer_input",
                                        "config.json.num_kv_shared_layers", "config.json.use_double_wide_mlp",
                                        "config.json.attention_bias", "config.json.hidden_activation",
                                        "config.json.text_config.rope_parameters.sliding_attention.factor",
                                        "config.json.text_config.rope_parameters.full_attention.factor"};
        if (c.has_vision) written_only.insert({"config.json.vision_config.model_type", "config.json.vision_config.output_proj_dims"});
        if (c.has_audio) written_only.insert("config.json.audio_config.model_type");
        // partial_rotary_factor is written for proportional RoPE only (default RoPE rotates all)
        if (c.rope_sliding.rope_type == RopeType::Default) read_only.insert("config.json.text_config.rope_parameters.sliding_attention.partial_rotary_factor");
        if (c.rope_full.rope_type == RopeType::Default) read_only.insert("config.json.text_config.rope_parameters.full_attention.partial_rotary_factor");
        CHECK(difference(written, read) == written_only);
        CHECK(difference(read, written) == read_only);
    }
}

TEST_CASE("the vision LayerNorm eps is torch's default, not a config.json field", "[config][fields]") {
    STATIC_REQUIRE(VisionConfig::layer_norm_eps == 1e-5);
    const json j = config_to_json(kGemma4_12B);
    CHECK_FALSE(j["vision_config"].contains("layer_norm_eps"));
}
