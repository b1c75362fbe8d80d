// Gemma4Config: the published 12B constant, per-layer geometry, config.json parsing and its errors.
#include <catch2/catch.hpp>

#include <gemma4/config.hpp>
#include <gemma4/io/config_json.hpp>
#include <gemma4/model/random_checkpoint.hpp>
#include <gemma4/model/tensor_table.hpp>

using namespace gemma4;
using nlohmann::json;

static_assert(text_parameter_count(kGemma4_12B) == 11'907'350'320);
static_assert(parameter_count(kGemma4_12B) == 11'959'730'224);

TEST_CASE("12B parameter counts", "[config]") {
    CHECK(text_parameter_count(kGemma4_12B) == 11'907'350'320);
    CHECK(parameter_count(kGemma4_12B) == 11'959'730'224);
    CHECK(vision_parameter_count(kGemma4_12B) + audio_parameter_count(kGemma4_12B) == 52'379'904);
}

TEST_CASE("the tensor table agrees with the parameter count", "[config]") {
    for (const Gemma4Config& c : {kGemma4_12B, tiny_config()}) {
        ModelWeights w;
        std::int64_t total = 0;
        std::size_t count = 0;
        for (const TensorSpec& t : tensor_table(c, "model.language_model.", w)) {
            std::int64_t n = 1;
            for (auto d : t.shape) n *= d;
            total += n;
            ++count;
        }
        CHECK(total == parameter_count(c));
        if (c.hidden_size == 3840) CHECK(count == 677);  // spec §2.1
    }
}

TEST_CASE("12B geometry of layers 0, 5 and 47", "[config]") {
    constexpr LayerGeometry l0 = kGemma4_12B.layer(0);
    static_assert(l0.kind == AttentionKind::Sliding && l0.head_dim == 256 && l0.num_kv_heads == 8 && l0.has_v_proj);
    CHECK(l0.num_heads == 16);
    CHECK(l0.rope.rope_theta == 10000.0);
    CHECK(l0.rope_pairs == 128);
    CHECK(l0.window == 1024);
    CHECK(l0.qkv_dim() == 8192);
    for (int i : {5, 47}) {
        const LayerGeometry g = kGemma4_12B.layer(i);
        CHECK(g.kind == AttentionKind::Full);
        CHECK(g.head_dim == 512);
        CHECK(g.num_kv_heads == 1);
        CHECK_FALSE(g.has_v_proj);
        CHECK(g.rope.rope_type == RopeType::Proportional);
        CHECK(g.rope.rope_theta == 1000000.0);
        CHECK(g.rope_pairs == 64);
        CHECK(g.window == 0);
        CHECK(g.qkv_dim() == 8704);
    }
    CHECK(kGemma4_12B.num_layers_of(AttentionKind::Sliding) == 40);
}

namespace {

json published_12b() {  // the published config.json, spec seed 000
    json j = config_to_json(kGemma4_12B);
    return j;
}

Gemma4Config parse(const json& j) { return parse_config(j, "config.json"); }

}  // namespace

TEST_CASE("config.json round trip: unified and plain layouts", "[config]") {
    const Gemma4Config c = parse(published_12b());
    CHECK(c.hidden_size == 3840);
    CHECK(c.num_hidden_layers == 48);
    CHECK(c.has_vision);
    CHECK(c.has_audio);
    CHECK(c.tokens.eos_count == 2);
    CHECK(c.tokens.is_eos(106));
    CHECK(text_parameter_count(c) == text_parameter_count(kGemma4_12B));
    for (int i = 0; i < 48; ++i) CHECK(c.layer_kind(i) == kGemma4_12B.layer_kind(i));

    const Gemma4Config plain = parse(published_12b()["text_config"]);
    CHECK_FALSE(plain.has_vision);
    CHECK(plain.layer(5).head_dim == 512);
    CHECK(text_parameter_count(plain) == 11'907'350'320);
}

TEST_CASE("config.json errors name the field", "[config][errors]") {
    auto expect = [](json j, const std::string& message) {
        INFO(message);
        REQUIRE_THROWS_AS(parse(j), ConfigError);
        REQUIRE_THROWS_WITH(parse(j), Catch::Contains(message));
    };
    json j = published_12b();
    SECTION("missing field") {
        j["text_config"].erase("hidden_size");
        expect(j, "config.json.text_config.hidden_size: missing");
    }
    SECTION("wrong type") {
        j["text_config"]["num_attention_heads"] = "sixteen";
        expect(j, "config.json.text_config.num_attention_heads: expected an integer");
    }
    SECTION("negative") {
        j["text_config"]["intermediate_size"] = -5;
        expect(j, "config.json.text_config.intermediate_size: must be >= 1, got -5");
    }
    SECTION("layer_types of the wrong length") {
        j["text_config"]["layer_types"].erase(0);
        expect(j, "layer_types: has 47 entries, num_hidden_layers is 48");
    }
    SECTION("unknown layer type") {
        j["text_config"]["layer_types"][3] = "chunked_attention";
        expect(j, "layer_types[3]: unknown layer type \"chunked_attention\"");
    }
    SECTION("heads not divisible") {
        j["text_config"]["num_key_value_heads"] = 3;
        expect(j, "num_key_value_heads: must divide num_attention_heads");
    }
    SECTION("unsupported features") {
        json a = j, b = j, c = j, d = j, e = j;
        a["text_config"]["enable_moe_block"] = true;
        expect(a, "enable_moe_block: mixture-of-experts layers are not supported");
        b["text_config"]["hidden_size_per_layer_input"] = 256;
        expect(b, "hidden_size_per_layer_input: per-layer input embeddings are not supported");
        c["text_config"]["num_kv_shared_layers"] = 20;
        expect(c, "num_kv_shared_layers: KV sharing is not supported");
        d["text_config"]["hidden_activation"] = "silu";
        expect(d, "hidden_activation: unsupported activation 'silu'");
        e["text_config"]["rope_parameters"]["full_attention"]["rope_type"] = "yarn";
        expect(e, "rope_type: unsupported RoPE type 'yarn'");
    }
    SECTION("not an object") { expect(json::array(), "config.json: not a JSON object"); }
    SECTION("bad eos") {
        j["eos_token_id"] = json::array({1, "x"});
        expect(j, "eos_token_id: expected a token id");
    }
}
