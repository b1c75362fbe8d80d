// Inputs found by the fuzzers in fuzz/ (docs/fuzzing.md): nlohmann reports a number too large
// for a double as out_of_range rather than parse_error, and it escaped as a non-gemma4 error.
#include <catch2/catch.hpp>

#include <gemma4/tokenizer/tokenizer.hpp>
#include <gemma4/tokenizer/tokenizer_config.hpp>

using namespace gemma4;

TEST_CASE("fuzz: tokenizer_config.json with a number overflowing a double", "[tokenizer][fuzz]") {
    const std::string text = R"({"model_max_length": 1e400})";
    REQUIRE_THROWS_AS(TokenizerConfig::from_json_text(text), TokenizerError);
    REQUIRE_THROWS_WITH(TokenizerConfig::from_json_text(text),
                        "tokenizer_config.json: not valid JSON: [json.exception.out_of_range.406] number overflow parsing '1e400'");
}

// The tokenizer.json reader has its own SAX parser; the same number must be a TokenizerError.
TEST_CASE("fuzz: tokenizer.json with a number overflowing a double", "[tokenizer][fuzz]") {
    const std::string text = R"({"version": "1.0", "model": {"type": "BPE", "dropout": 1e400}})";
    REQUIRE_THROWS_AS(Tokenizer::from_json_text(text), TokenizerError);
    REQUIRE_THROWS_WITH(Tokenizer::from_json_text(text), Catch::Contains("number overflow parsing '1e400'"));
}
