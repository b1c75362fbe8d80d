// Inputs that make naive tokenizers quadratic or wrong, on the real Gemma 3 tokenizer (skipped
// without it). These assert results, not time; they finish in milliseconds because merging is
// O(n log n) in the word length.
#include "support/real_tokenizer.hpp"

#include <gemma4/detail/random.hpp>
#include <gemma4/tokenizer/tokenizer.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using gemma4::Tokenizer;

namespace {

void check_round_trip(const std::string& text) {
    const auto ids = gemma4::test::shared_real_tokenizer().encode(text, false);
    CHECK_FALSE(ids.empty());
    CHECK(gemma4::test::shared_real_tokenizer().decode(ids) == gemma4::test::metaspace_as_space(text));
}

}  // namespace

TEST_CASE("pathological: a 100 KB word without spaces", "[tokenizer][pathological]") {
    GEMMA4_SKIP_WITHOUT_REAL_TOKENIZER();
    const std::string same(100'000, 'x');
    const auto ids = gemma4::test::shared_real_tokenizer().encode(same, false);
    CHECK(gemma4::test::shared_real_tokenizer().decode(ids) == same);
    CHECK(ids.size() < same.size() / 4);

    gemma4::detail::SplitMix64 rng{1};
    std::string letters;
    for (int i = 0; i < 100'000; ++i) letters.push_back(static_cast<char>('a' + rng.next() % 26));
    check_round_trip(letters);

    std::string mixed;
    const std::vector<std::string> parts = {"ab", "日本", "😀", "<b", ">", "0x", "▁</", "ſ"};
    while (mixed.size() < 100'000) mixed += parts[rng.next() % parts.size()];
    check_round_trip(mixed);
}

TEST_CASE("pathological: long runs of spaces, newlines and tabs", "[tokenizer][pathological]") {
    GEMMA4_SKIP_WITHOUT_REAL_TOKENIZER();
    check_round_trip(std::string(50'000, ' '));
    check_round_trip(std::string(50'000, '\n'));
    check_round_trip(std::string(50'000, '\t'));
    std::string alternating;
    for (int i = 0; i < 20'000; ++i) alternating += i % 2 ? " \n" : "a ";
    check_round_trip(alternating);
    // Thirty-one newlines is the longest added token; a longer run is several of them.
    const auto ids = gemma4::test::shared_real_tokenizer().encode(std::string(62, '\n'), false);
    CHECK(ids.size() == 2);
    CHECK(ids[0] == ids[1]);
}

TEST_CASE("pathological: many added tokens and near misses", "[tokenizer][pathological]") {
    GEMMA4_SKIP_WITHOUT_REAL_TOKENIZER();
    std::string text;
    for (int i = 0; i < 20'000; ++i) text += i % 3 ? "<start_of_turn>" : "<start_of_tur";
    const auto ids = gemma4::test::shared_real_tokenizer().encode(text, false);
    CHECK(gemma4::test::shared_real_tokenizer().decode(ids) == text);
    CHECK(std::count(ids.begin(), ids.end(), 105) > 13'000);
}

TEST_CASE("added tokens inside words are still found", "[tokenizer]") {
    GEMMA4_SKIP_WITHOUT_REAL_TOKENIZER();
    const auto ids = gemma4::test::shared_real_tokenizer().encode("abc<start_of_turn>def", false);
    REQUIRE(std::count(ids.begin(), ids.end(), 105) == 1);
    CHECK(gemma4::test::shared_real_tokenizer().decode(ids) == "abc<start_of_turn>def");
    const auto html = gemma4::test::shared_real_tokenizer().encode("x<b>bold</b>y", false);
    CHECK(gemma4::test::shared_real_tokenizer().decode(html) == "x<b>bold</b>y");
    CHECK(gemma4::test::shared_real_tokenizer().decode(html, true) == "x<b>bold</b>y");  // HTML tags are added but not special
}
