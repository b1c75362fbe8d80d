#include <gemma4/generate/generation_config.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using gemma4::ConfigError;
using gemma4::FormatError;
using gemma4::generation_config_from_text;
using gemma4::GenerationConfig;

namespace {

// The instruction-tuned 12B checkpoint's file (spec §5).
constexpr const char* kGemma4ItConfig = R"({
  "bos_token_id": 2,
  "do_sample": true,
  "eos_token_id": [1, 106, 50],
  "pad_token_id": 0,
  "suppress_tokens": [258883, 258882],
  "temperature": 1.0,
  "top_k": 64,
  "top_p": 0.95,
  "transformers_version": "5.0.0"
})";

std::filesystem::path fresh_dir(const std::string& name) {
    const auto dir = std::filesystem::path(GEMMA4_TEST_TMP_DIR) / "generate" / name;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

void rejects(const std::string& json, const std::string& message) {
    INFO(json);
    REQUIRE_THROWS_AS(generation_config_from_text(json), ConfigError);
    REQUIRE_THROWS_WITH(generation_config_from_text(json), Catch::Contains(message));
}

}  // namespace

TEST_CASE("the instruction-tuned checkpoint's generation_config.json", "[generation_config]") {
    const GenerationConfig config = generation_config_from_text(kGemma4ItConfig);
    CHECK(config.eos_token_id == std::vector<std::int32_t>{1, 106, 50});
    CHECK(config.is_eos(106));
    CHECK(config.is_eos(50));
    CHECK_FALSE(config.is_eos(2));
    CHECK(config.pad_token_id == 0);
    CHECK(config.bos_token_id == 2);
    CHECK(config.do_sample);
    CHECK(config.temperature == 1.0);
    CHECK(config.top_k == 64);
    CHECK(config.top_p == 0.95);
    CHECK_FALSE(config.min_p.has_value());
    CHECK_FALSE(config.repetition_penalty.has_value());
    CHECK(config.suppress_tokens == std::vector<std::int32_t>{258883, 258882});
    CHECK_FALSE(config.max_new_tokens.has_value());
    CHECK_FALSE(config.max_length.has_value());

    const gemma4::SamplingParams params = apply_generation_config(config, {.min_p = 0.05, .seed = 9});
    CHECK(params.temperature == 1.0);
    CHECK(params.top_k == 64);
    CHECK(params.top_p == 0.95);
    CHECK(params.min_p == 0.05);  // not in the file: the caller's value stays
    CHECK(params.seed == 9);
    CHECK(params.suppress_tokens == std::vector<std::int32_t>{258883, 258882});
    CHECK_NOTHROW(gemma4::Sampler(params));
}

TEST_CASE("optional fields, single eos id, nulls and greedy files", "[generation_config]") {
    const auto config = generation_config_from_text(R"({
        "eos_token_id": 1, "do_sample": false, "temperature": 0.7, "top_k": null,
        "min_p": 0.1, "repetition_penalty": 1.1, "max_new_tokens": 256, "max_length": 8192,
        "cache_implementation": "hybrid"})");
    CHECK(config.eos_token_id == std::vector<std::int32_t>{1});
    CHECK_FALSE(config.top_k.has_value());
    CHECK(config.min_p == 0.1);
    CHECK(config.repetition_penalty == 1.1);
    CHECK(config.max_new_tokens == 256);
    CHECK(config.max_length == 8192);
    const auto params = apply_generation_config(config);
    CHECK(params.temperature == 0.0);  // do_sample false wins over the temperature
    CHECK(params.min_p == 0.1);
    CHECK(params.repetition_penalty == 1.1);

    SECTION("integers are accepted where numbers are expected") {
        const auto integral =
            generation_config_from_text(R"({"temperature": 1, "top_p": 1, "do_sample": true})");
        CHECK(integral.temperature == 1.0);
        CHECK(apply_generation_config(integral).temperature == 1.0);
    }
    SECTION("an empty file object is the defaults: greedy, no eos") {
        const auto defaults = generation_config_from_text("{}");
        CHECK(defaults.eos_token_id.empty());
        CHECK_FALSE(defaults.do_sample);
        CHECK(apply_generation_config(defaults, {.temperature = 0.8}).temperature == 0.0);
    }
}

TEST_CASE("wrong types and values name the file and the field", "[generation_config]") {
    rejects(R"({"top_k": "64"})", "generation_config.json: field 'top_k' must be an integer, got string");
    rejects(R"({"top_k": 64.5})", "field 'top_k' must be an integer, got number");
    rejects(R"({"top_k": -1})", "field 'top_k' is -1, out of range [0, 2147483647]");
    rejects(R"({"eos_token_id": "1"})",
            "field 'eos_token_id' must be an integer or a list of integers, got string");
    rejects(R"({"eos_token_id": [1, "106"]})", "field 'eos_token_id' must be an integer, got string");
    rejects(R"({"eos_token_id": [1, -5]})", "field 'eos_token_id' is -5, out of range");
    rejects(R"({"eos_token_id": 4294967296})", "field 'eos_token_id' is 4294967296, out of range");
    rejects(R"({"pad_token_id": true})", "field 'pad_token_id' must be an integer, got boolean");
    rejects(R"({"bos_token_id": [2]})", "field 'bos_token_id' must be an integer, got array");
    rejects(R"({"do_sample": 1})", "field 'do_sample' must be true or false, got number");
    rejects(R"({"temperature": "hot"})", "field 'temperature' must be a number, got string");
    rejects(R"({"temperature": -0.5})", "field 'temperature' is -0.5, out of range [0, inf]");
    rejects(R"({"top_p": 0})", "field 'top_p' is 0, out of range (0, 1]");
    rejects(R"({"top_p": 1.5})", "field 'top_p' is 1.5, out of range (0, 1]");
    rejects(R"({"min_p": 2})", "field 'min_p' is 2, out of range [0, 1]");
    rejects(R"({"repetition_penalty": 0})", "field 'repetition_penalty' is 0, out of range (0, inf]");
    rejects(R"({"suppress_tokens": 258883})",
            "field 'suppress_tokens' must be a list of integers, got number");
    rejects(R"({"suppress_tokens": [1.5]})", "field 'suppress_tokens' must be an integer, got number");
    rejects(R"({"max_new_tokens": -1})", "field 'max_new_tokens' is -1, out of range");
    rejects(R"({"max_length": "long"})", "field 'max_length' must be an integer, got string");
    rejects(R"([1, 2])", "generation_config.json: top level must be a JSON object, got array");

    REQUIRE_THROWS_AS(generation_config_from_text("{\"top_k\": 64,}"), FormatError);
    REQUIRE_THROWS_WITH(generation_config_from_text("{\"top_k\": 64,}"),
                        Catch::Contains("generation_config.json: invalid JSON"));
}

TEST_CASE("loading from a checkpoint directory", "[generation_config]") {
    SECTION("a missing file gives the defaults") {
        const auto dir = fresh_dir("missing");
        const auto config = gemma4::load_generation_config(dir);
        CHECK(config.eos_token_id.empty());
        CHECK_FALSE(config.do_sample);
        CHECK_FALSE(config.temperature.has_value());
        CHECK(apply_generation_config(config).temperature == 0.0);
    }
    SECTION("a path that does not exist is an error") {
        for (const auto& missing :
             {fresh_dir("gone") / "no_such_checkpoint", fresh_dir("gone") / "generation_config.json"}) {
            REQUIRE_THROWS_AS(gemma4::load_generation_config(missing), gemma4::IoError);
            REQUIRE_THROWS_WITH(gemma4::load_generation_config(missing),
                                Catch::Contains(missing.string() +
                                                ": no such checkpoint directory or generation_config.json"));
        }
    }
    SECTION("a present file is read, by directory or by path") {
        const auto dir = fresh_dir("present");
        std::ofstream(dir / "generation_config.json") << kGemma4ItConfig;
        CHECK(gemma4::load_generation_config(dir).top_k == 64);
        CHECK(gemma4::load_generation_config(dir / "generation_config.json").top_p == 0.95);
    }
    SECTION("errors name the file's path") {
        const auto dir = fresh_dir("broken");
        std::ofstream(dir / "generation_config.json") << R"({"top_p": "high"})";
        const std::string expected =
            (dir / "generation_config.json").string() + ": field 'top_p' must be a number";
        REQUIRE_THROWS_AS(gemma4::load_generation_config(dir), ConfigError);
        REQUIRE_THROWS_WITH(gemma4::load_generation_config(dir), Catch::Contains(expected));

        std::ofstream(dir / "generation_config.json") << "{";
        REQUIRE_THROWS_AS(gemma4::load_generation_config(dir), FormatError);
        REQUIRE_THROWS_WITH(gemma4::load_generation_config(dir),
                            Catch::Contains((dir / "generation_config.json").string() + ": invalid JSON"));
    }
}
