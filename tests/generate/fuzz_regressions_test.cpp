// Inputs found by the fuzzers in fuzz/ (docs/fuzzing.md): nlohmann reports a number too large
// for a double as out_of_range rather than parse_error, and it escaped as a non-gemma4 error.
#include <catch2/catch.hpp>

#include <gemma4/generate/generation_config.hpp>

using namespace gemma4;

TEST_CASE("fuzz: generation_config.json with a number overflowing a double", "[generate][fuzz]") {
    const std::string text = R"({"temperature": 1e400})";
    REQUIRE_THROWS_AS(generation_config_from_text(text), FormatError);
    REQUIRE_THROWS_WITH(generation_config_from_text(text),
                        "generation_config.json: invalid JSON: [json.exception.out_of_range.406] number overflow parsing '1e400'");
}
