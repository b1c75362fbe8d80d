// The real Gemma 3 tokenizer.json against ids produced by three independent implementations
// (tests/data/tokenizer/golden.jsonl). Skipped without the tokenizer (support/real_tokenizer.hpp).
#include "support/real_tokenizer.hpp"

#include <gemma4/tokenizer/tokenizer.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

namespace {

struct GoldenCase {
    std::string text;
    std::vector<std::int32_t> ids;
};

std::vector<GoldenCase> read_golden() {
    std::ifstream in(std::string(GEMMA4_TEST_DATA_DIR) + "/tokenizer/golden.jsonl");
    REQUIRE(in);
    std::vector<GoldenCase> cases;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        const auto j = nlohmann::json::parse(line);
        cases.push_back({j.at("text").get<std::string>(), j.at("ids").get<std::vector<std::int32_t>>()});
    }
    return cases;
}


}  // namespace

TEST_CASE("Gemma 3 tokenizer.json: every golden case encodes to the reference ids", "[tokenizer][golden]") {
    GEMMA4_SKIP_WITHOUT_REAL_TOKENIZER();
    const auto cases = read_golden();
    REQUIRE(cases.size() == 63);
    std::size_t matches = 0;
    for (const GoldenCase& c : cases) {
        INFO("text: " << c.text);
        const auto ids = gemma4::test::shared_real_tokenizer().encode(c.text);
        CHECK(ids == c.ids);
        matches += ids == c.ids;
    }
    CHECK(matches == 63);
}

TEST_CASE("Gemma 3 tokenizer.json: decode(encode(x)) gives x back", "[tokenizer][golden]") {
    GEMMA4_SKIP_WITHOUT_REAL_TOKENIZER();
    for (const GoldenCase& c : read_golden()) {
        INFO("text: " << c.text);
        const auto ids = gemma4::test::shared_real_tokenizer().encode(c.text, /*add_special=*/false);
        CHECK(gemma4::test::shared_real_tokenizer().decode(ids) == gemma4::test::metaspace_as_space(c.text));
        // The reference ids start with BOS, which only skip_special leaves out.
        const auto without_bos = std::vector<std::int32_t>(c.ids.begin() + 1, c.ids.end());
        CHECK(gemma4::test::shared_real_tokenizer().decode(c.ids) == "<bos>" + gemma4::test::metaspace_as_space(c.text));
        CHECK(gemma4::test::shared_real_tokenizer().decode(without_bos) == gemma4::test::metaspace_as_space(c.text));
    }
}

TEST_CASE("Gemma 3 tokenizer.json: lookups", "[tokenizer][golden]") {
    GEMMA4_SKIP_WITHOUT_REAL_TOKENIZER();
    const auto& t = gemma4::test::shared_real_tokenizer();
    CHECK(t.vocab_size() == 262145);
    CHECK(t.bos_id() == 2);
    CHECK(t.eos_id() == 1);
    CHECK(t.pad_id() == 0);
    CHECK(t.unk_id() == 3);
    CHECK(t.adds_bos());
    CHECK(t.special_id("<start_of_turn>") == 105);
    CHECK(t.special_id("<end_of_turn>") == 106);
    CHECK(t.special_id("<image_soft_token>") == 262144);
    CHECK(t.token_to_id("\n") == 107);
    CHECK(t.token_to_id("<0x41>") == 238 + 0x41);
    CHECK_FALSE(t.token_to_id("no such piece, surely").has_value());
    CHECK(t.id_to_token(105) == "<start_of_turn>");
    CHECK(t.is_special(2));
    CHECK_FALSE(t.is_special(107));
    CHECK_FALSE(t.is_special(4));  // <mask> is added but not special
    REQUIRE_THROWS_AS(t.special_id("<mask>"), gemma4::TokenizerError);
    REQUIRE_THROWS_AS(t.id_to_token(262145), gemma4::InvalidArgument);
    REQUIRE_THROWS_AS(t.id_to_token(-1), gemma4::InvalidArgument);
}
