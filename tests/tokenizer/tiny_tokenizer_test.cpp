// The generated small tokenizer: format, special ids, round trips, and BPE against a naive
// reference implementation.
#include "support/real_tokenizer.hpp"
#include "support/temp_dir.hpp"

#include <gemma4/detail/random.hpp>
#include <gemma4/tokenizer/tiny_tokenizer.hpp>
#include <gemma4/tokenizer/tokenizer.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <string>
#include <vector>

using gemma4::Tokenizer;

namespace {

std::filesystem::path tmp(const std::string& name) { return std::filesystem::path(GEMMA4_TEST_TMP_DIR) / name; }

// Textbook BPE: repeatedly merge the lowest-ranked adjacent pair, leftmost first. Quadratic, but
// obviously right; the tokenizer's heap-based merge must agree with it.
std::vector<std::int32_t> naive_bpe(const nlohmann::json& model, const std::string& word) {
    std::map<std::pair<std::string, std::string>, std::size_t> rank;
    for (std::size_t i = 0; i < model["merges"].size(); ++i)
        rank[{model["merges"][i][0].get<std::string>(), model["merges"][i][1].get<std::string>()}] = i;
    std::vector<std::string> symbols;
    for (std::size_t i = 0; i < word.size();) {
        const std::size_t n = gemma4::detail::next_utf8(word, i).length;
        symbols.push_back(word.substr(i, n));
        i += n;
    }
    while (true) {
        std::size_t best = symbols.size(), best_rank = SIZE_MAX;
        for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
            const auto it = rank.find({symbols[i], symbols[i + 1]});
            if (it != rank.end() && it->second < best_rank) {
                best = i;
                best_rank = it->second;
            }
        }
        if (best == symbols.size()) break;
        symbols[best] += symbols[best + 1];
        symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    std::vector<std::int32_t> ids;
    for (const std::string& s : symbols) ids.push_back(model["vocab"][s].get<std::int32_t>());
    return ids;
}

}  // namespace

TEST_CASE("tiny tokenizer: written files load and have the documented layout", "[tokenizer][tiny]") {
    const auto info = gemma4::write_tiny_tokenizer(tmp("tiny_layout"));
    const Tokenizer t = Tokenizer::from_file(info.tokenizer_json);
    CHECK(info.vocab_size >= 512);
    CHECK(info.vocab_size <= 2048);
    CHECK(t.vocab_size() == static_cast<std::size_t>(info.vocab_size));
    CHECK(t.pad_id() == 0);
    CHECK(t.eos_id() == 1);
    CHECK(t.bos_id() == 2);
    CHECK(t.unk_id() == 3);
    CHECK(t.special_id("<|turn>") == info.turn_start);
    CHECK(t.special_id("<turn|>") == info.turn_end);
    CHECK(t.special_id("<|think|>") == info.think);
    CHECK(t.special_id("<|channel>") == info.channel_start);
    CHECK(t.special_id("<channel|>") == info.channel_end);
    CHECK(t.special_id("<|image|>") == info.image);
    CHECK(t.special_id("<|audio|>") == info.audio);
    CHECK(t.special_id("<|video|>") == info.video);
    CHECK(t.special_id("<|tool_call>") == info.tool_call_start);
    CHECK(t.special_id("<|\"|>") == info.string_escape);
    CHECK(t.id_to_token(info.first_byte_piece + 0x41) == "<0x41>");
    // Like the instruction-tuned Gemma 4 tokenizer, BOS is not added unless asked for.
    CHECK_FALSE(t.adds_bos());
    CHECK(t.encode("hi").front() != t.bos_id());

    const auto with_bos = gemma4::write_tiny_tokenizer(tmp("tiny_layout_bos"), /*add_bos_token=*/true);
    const Tokenizer tb = Tokenizer::from_file(with_bos.tokenizer_json);
    CHECK(tb.adds_bos());
    CHECK(tb.encode("hi").front() == 2);
    CHECK(tb.encode("hi", false).front() != 2);

    // Writing twice gives the same bytes.
    const auto again = gemma4::write_tiny_tokenizer(tmp("tiny_layout_again"));
    const auto slurp = [](const std::filesystem::path& p) { return gemma4::detail::read_text_file(p); };
    CHECK(slurp(again.tokenizer_json) == slurp(info.tokenizer_json));
}

TEST_CASE("tiny tokenizer: round trips and special tokens inside words", "[tokenizer][tiny]") {
    const auto info = gemma4::write_tiny_tokenizer(tmp("tiny_roundtrip"));
    const Tokenizer t = Tokenizer::from_file(info.tokenizer_json);
    const std::vector<std::string> texts = {
        "",
        "The little model reads one token at a time.",
        "  leading, trailing  ",
        "<|turn>user\nWhat is 2+2?<turn|>\n<|turn>model\n<|channel>thought\n<channel|>4<turn|>\n",
        "日本語 emoji 😀 and ümlauts, tabs\tand \"quotes\"",
        "word<|image|>word<|audio|><|video|>x",
    };
    for (const std::string& text : texts) {
        INFO(text);
        CHECK(t.decode(t.encode(text)) == text);
    }
    const auto ids = t.encode("hello<|turn>world", false);
    REQUIRE(std::count(ids.begin(), ids.end(), info.turn_start) == 1);
    const auto at = std::find(ids.begin(), ids.end(), info.turn_start);
    CHECK(t.decode(std::vector<std::int32_t>(ids.begin(), at)) == "hello");
    CHECK(t.decode(std::vector<std::int32_t>(at + 1, ids.end())) == "world");
    CHECK(t.decode(ids, /*skip_special=*/true) == "helloworld");
    // A near miss is ordinary text.
    const auto near = t.encode("<|turn", false);
    CHECK(std::find(near.begin(), near.end(), info.turn_start) == near.end());
}

TEST_CASE("tiny tokenizer: BPE agrees with a naive reference", "[tokenizer][tiny]") {
    const auto info = gemma4::write_tiny_tokenizer(tmp("tiny_naive"));
    const Tokenizer t = Tokenizer::from_file(info.tokenizer_json);
    const auto model = nlohmann::json::parse(gemma4::detail::read_text_file(info.tokenizer_json))["model"];
    gemma4::detail::SplitMix64 rng{7};
    const std::string alphabet = "the andofisrwlkmpgyu";
    for (int round = 0; round < 200; ++round) {
        std::string text;
        const int length = 1 + static_cast<int>(rng.next() % 40);
        for (int i = 0; i < length; ++i) text.push_back(alphabet[rng.next() % alphabet.size()]);
        std::string normalized;
        for (const char c : text) normalized += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
        INFO(text);
        CHECK(t.encode(text, false) == naive_bpe(model, normalized));
    }
}

TEST_CASE("Gemma 3 tokenizer with a config that turns BOS off", "[tokenizer][config]") {
    GEMMA4_SKIP_WITHOUT_REAL_TOKENIZER();
    GEMMA4_SKIP_IF_MISSING(gemma4::test::real_tokenizer_config(), gemma4::test::kRealTokenizerHint);
    const std::string json = gemma4::detail::read_text_file(gemma4::test::real_tokenizer_json());
    gemma4::TokenizerConfig config;
    config.add_bos_token = false;
    const Tokenizer t = Tokenizer::from_json_text(json, config);
    CHECK_FALSE(t.adds_bos());
    CHECK(t.encode("Hello world") == std::vector<std::int32_t>{9259, 1902});
    CHECK(t.encode("<bos>Hello world") == std::vector<std::int32_t>{2, 9259, 1902});

    const auto from_file = Tokenizer::from_file(gemma4::test::real_tokenizer_json(), gemma4::test::real_tokenizer_config());
    CHECK(from_file.adds_bos());
    CHECK(from_file.encode("Hello world") == std::vector<std::int32_t>{2, 9259, 1902});
}

TEST_CASE("tiny tokenizer: a larger vocab_size pads with <unused_N> pieces that decode, and encodings do not change", "[tokenizer][tiny]") {
    const auto plain_dir = gemma4::test::temp_dir("tiny_tok_plain"), padded_dir = gemma4::test::temp_dir("tiny_tok_padded");
    const auto plain = gemma4::write_tiny_tokenizer(plain_dir);
    const auto padded = gemma4::write_tiny_tokenizer(padded_dir, false, 400, plain.vocab_size + 1000);
    CHECK(padded.vocab_size == plain.vocab_size + 1000);
    const auto a = gemma4::Tokenizer::from_file(plain.tokenizer_json), b = gemma4::Tokenizer::from_file(padded.tokenizer_json);
    CHECK(b.vocab_size() == static_cast<std::size_t>(plain.vocab_size) + 1000);
    CHECK(b.decode(std::vector<std::int32_t>{plain.vocab_size}) == "<unused_0>");
    CHECK(b.decode(std::vector<std::int32_t>{plain.vocab_size + 999}) == "<unused_999>");
    for (const std::string text : {"the cat sat on the mat", "Hello, world! 123", "ünïcödé"}) CHECK(a.encode(text, false) == b.encode(text, false));
    // A smaller or equal vocab_size changes nothing.
    CHECK(gemma4::write_tiny_tokenizer(gemma4::test::temp_dir("tiny_tok_small"), false, 400, 10).vocab_size == plain.vocab_size);
}
