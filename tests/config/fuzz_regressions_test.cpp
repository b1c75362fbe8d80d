// Inputs found by the fuzzers in fuzz/ (docs/fuzzing.md) that once misbehaved.
#include <catch2/catch.hpp>

#include <gemma4/io/config_json.hpp>
#include <gemma4/model/random_checkpoint.hpp>

#include <filesystem>
#include <fstream>
#include <string>

using namespace gemma4;
using nlohmann::json;

// fuzz_config_json: a config.json without final_logit_softcapping (no soft-cap) is accepted, but
// config_to_json wrote the cap as 0.0, which parse_config rejects ("must be > 0"): a checkpoint
// written by write_random_checkpoint or make-tiny for such a config could not be loaded back.
TEST_CASE("fuzz: a config without a final soft-cap survives config_to_json", "[config][fuzz]") {
    json text = config_to_json(tiny_config())["text_config"];
    text.erase("final_logit_softcapping");
    const Gemma4Config c = parse_config(text);
    REQUIRE(c.final_logit_softcapping == 0.0);

    const json written = config_to_json(c);
    CHECK(written["text_config"]["final_logit_softcapping"].is_null());
    const Gemma4Config again = parse_config(written);
    CHECK(again.final_logit_softcapping == 0.0);
    CHECK(config_to_json(again) == written);

    // An explicit 0 is still an error, with its field named.
    text["final_logit_softcapping"] = 0.0;
    REQUIRE_THROWS_AS(parse_config(text), ConfigError);
    REQUIRE_THROWS_WITH(parse_config(text), "config.json.final_logit_softcapping: must be > 0.000000, got 0.0");
}

// fuzz_safetensors / fuzz_config_json: a number too large for a double is reported by nlohmann
// as out_of_range, which load_config did not catch (only parse_error).
TEST_CASE("fuzz: config.json with a number overflowing a double", "[config][fuzz]") {
    const auto dir = std::filesystem::path(GEMMA4_TEST_TMP_DIR) / "fuzz_config_overflow";
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "config.json") << R"({"vocab_size": 1e400})";
    const std::string expected =
        (dir / "config.json").string() + ": not valid JSON: [json.exception.out_of_range.406] number overflow parsing '1e400'";
    REQUIRE_THROWS_AS(load_config(dir / "config.json"), ConfigError);
    REQUIRE_THROWS_WITH(load_config(dir / "config.json"), expected);
}
