// Every way a tokenizer.json can be wrong gives a TokenizerError that names the field.
#include <gemma4/tokenizer/tokenizer.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

using gemma4::Tokenizer;
using gemma4::TokenizerError;
using nlohmann::json;

namespace {

json minimal() {
    return json{{"model",
                 {{"type", "BPE"},
                  {"unk_token", "<unk>"},
                  {"vocab", {{"<unk>", 0}, {"a", 1}, {"b", 2}, {"ab", 3}}},
                  {"merges", json::array({json::array({"a", "b"})})}}}};
}

Tokenizer load(const json& j) { return Tokenizer::from_json_text(j.dump()); }

}  // namespace

TEST_CASE("malformed tokenizer.json: the minimal document loads", "[tokenizer][malformed]") {
    const Tokenizer t = load(minimal());
    CHECK(t.encode("abba") == std::vector<std::int32_t>{3, 2, 1});
    CHECK(t.encode("ac") == std::vector<std::int32_t>{1, 0});
    json strings = minimal();
    strings["model"]["merges"] = json::array({"a b"});
    CHECK(load(strings).encode("ab") == std::vector<std::int32_t>{3});
}

TEST_CASE("malformed tokenizer.json: syntax and top-level structure", "[tokenizer][malformed]") {
    REQUIRE_THROWS_AS(Tokenizer::from_json_text("{\"model\": "), TokenizerError);
    REQUIRE_THROWS_WITH(Tokenizer::from_json_text("{\"model\": ", {}, "tok.json"), Catch::Contains("tok.json: not valid JSON"));
    REQUIRE_THROWS_WITH(Tokenizer::from_json_text(""), Catch::Contains("not valid JSON"));
    REQUIRE_THROWS_WITH(Tokenizer::from_json_text("[1, 2]"), Catch::Contains("top level: expected an object"));
    REQUIRE_THROWS_WITH(load(json{{"version", "1.0"}}), Catch::Contains("tokenizer.json: model: missing"));
    REQUIRE_THROWS_WITH(load(json{{"model", 3}}), Catch::Contains("model: expected an object"));
}

TEST_CASE("malformed tokenizer.json: vocab and merges", "[tokenizer][malformed]") {
    json j = minimal();
    j["model"].erase("vocab");
    REQUIRE_THROWS_AS(load(j), TokenizerError);
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("model.vocab: missing"));

    j = minimal();
    j["model"].erase("merges");
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("model.merges: missing"));

    j = minimal();
    j["model"]["vocab"] = json::array({"a", "b"});
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("model.vocab: expected an object"));

    j = minimal();
    j["model"]["vocab"]["c"] = "7";
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("model.vocab[\"c\"]: expected an integer id"));

    j = minimal();
    j["model"]["vocab"]["c"] = -4;
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("model.vocab[\"c\"]: id -4 out of range"));

    j = minimal();
    j["model"]["vocab"]["c"] = 2;
    REQUIRE_THROWS_AS(load(j), TokenizerError);
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("duplicate id 2"));

    j = minimal();
    j["model"]["merges"] = json{{"a", "b"}};
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("model.merges: expected an array"));

    j = minimal();
    j["model"]["merges"].push_back(5);
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("model.merges[1]: expected a pair of strings"));

    j = minimal();
    j["model"]["merges"].push_back(json::array({"a"}));
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("model.merges[1]: expected a pair of strings, got 1"));

    j = minimal();
    j["model"]["merges"].push_back("ab");
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("model.merges[1]: expected \"left right\""));

    j = minimal();
    j["model"]["merges"].push_back(json::array({"x", "y"}));
    REQUIRE_THROWS_AS(load(j), TokenizerError);
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("model.merges[1]: unknown piece \"x\""));

    j = minimal();
    j["model"]["merges"].push_back(json::array({"b", "a"}));
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("model.merges[1]: merged piece \"ba\" is not in the vocabulary"));

    j = minimal();
    j["model"]["unk_token"] = "<nope>";
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("model.unk_token: \"<nope>\" is not in model.vocab"));
}

TEST_CASE("malformed tokenizer.json: model options", "[tokenizer][malformed]") {
    json j = minimal();
    j["model"]["type"] = "Unigram";
    REQUIRE_THROWS_AS(load(j), TokenizerError);
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("model.type: unsupported model type \"Unigram\""));

    j = minimal();
    j["model"]["byte_fallback"] = "yes";
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("model.byte_fallback: expected a boolean"));

    j = minimal();
    j["model"]["dropout"] = 0.1;
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("model.dropout: BPE dropout is not supported"));

    j = minimal();
    j["model"]["continuing_subword_prefix"] = "##";
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("model.continuing_subword_prefix: not supported"));
}

TEST_CASE("malformed tokenizer.json: added tokens", "[tokenizer][malformed]") {
    json j = minimal();
    j["added_tokens"] = json::array({json{{"id", 0}, {"content", "<unk>"}, {"special", true}}, json{{"content", "<x>"}}});
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("added_tokens[1].id: missing"));

    j["added_tokens"][1] = json{{"id", "9"}, {"content", "<x>"}};
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("added_tokens[1].id: expected an integer"));

    j["added_tokens"][1] = json{{"id", 9}, {"content", "<x>"}, {"single_word", true}};
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("added_tokens[1].single_word: single_word added tokens are not supported"));

    j["added_tokens"] = json{{"id", 9}};
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("added_tokens: expected an array"));
}

TEST_CASE("malformed tokenizer.json: unsupported components name their type and path", "[tokenizer][malformed]") {
    json j = minimal();
    j["normalizer"] = json{{"type", "NFKC"}};
    REQUIRE_THROWS_AS(load(j), TokenizerError);
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("normalizer.type: unsupported normalizer type \"NFKC\""));

    j = minimal();
    j["pre_tokenizer"] = json{{"type", "Sequence"}, {"pretokenizers", json::array({json{{"type", "ByteLevel"}}})}};
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("pre_tokenizer.pretokenizers[0].type: unsupported pre_tokenizer type \"ByteLevel\""));

    j = minimal();
    j["decoder"] = json{{"type", "Sequence"},
                        {"decoders", json::array({json{{"type", "ByteFallback"}}, json{{"type", "Fuse"}},
                                                  json{{"type", "Metaspace"}}})}};
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("decoder.decoders[2].type: unsupported decoder type \"Metaspace\""));

    j = minimal();
    j["post_processor"] = json{{"type", "BertProcessing"}};
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("post_processor.type: unsupported post_processor type \"BertProcessing\""));

    j = minimal();
    j["normalizer"] = json{{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}};
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("normalizer.pattern: Regex patterns are not supported"));

    j = minimal();
    j["normalizer"] = json{{"pattern", {{"String", " "}}}};
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("normalizer.type: missing"));

    j = minimal();
    j["post_processor"] = json{{"type", "TemplateProcessing"},
                               {"single", json::array({json{{"SpecialToken", {{"id", "<s>"}}}},
                                                       json{{"Sequence", {{"id", "A"}}}}})},
                               {"special_tokens", json::object()}};
    REQUIRE_THROWS_WITH(load(j), Catch::Contains("post_processor.single[0].SpecialToken.id: \"<s>\" is not in post_processor.special_tokens"));
}

TEST_CASE("tokenizer files and configs that cannot be used", "[tokenizer][malformed]") {
    REQUIRE_THROWS_AS(Tokenizer::from_file("/nonexistent/tokenizer.json"), gemma4::IoError);
    REQUIRE_THROWS_WITH(Tokenizer::from_file("/nonexistent/tokenizer.json"), Catch::Contains("/nonexistent/tokenizer.json"));

    REQUIRE_THROWS_WITH(gemma4::TokenizerConfig::from_json_text("{\"add_bos_token\": \"yes\"}"),
                        Catch::Contains("tokenizer_config.json: add_bos_token: expected a boolean"));
    REQUIRE_THROWS_WITH(gemma4::TokenizerConfig::from_json_text("{"), Catch::Contains("tokenizer_config.json: not valid JSON"));

    const std::filesystem::path dir = std::filesystem::path(GEMMA4_TEST_TMP_DIR) / "tokenizer_malformed";
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "tokenizer.json") << minimal().dump();
    std::ofstream(dir / "tokenizer_config.json") << "{\"bos_token\": \"<s>\"}";
    REQUIRE_THROWS_WITH(Tokenizer::from_file(dir / "tokenizer.json"), Catch::Contains("bos_token: \"<s>\" is not in"));
}

TEST_CASE("invalid input to encode and decode", "[tokenizer][malformed]") {
    const Tokenizer t = load(minimal());
    REQUIRE_THROWS_AS(t.encode("ab\xC3("), TokenizerError);
    REQUIRE_THROWS_WITH(t.encode("ab\xC3("), Catch::Contains("not valid UTF-8 (byte offset 2)"));
    REQUIRE_THROWS_WITH(t.encode("\xED\xA0\x80"), Catch::Contains("byte offset 0"));   // a surrogate
    REQUIRE_THROWS_WITH(t.encode("ok\xC0\xAF"), Catch::Contains("byte offset 2"));     // an overlong '/'
    REQUIRE_THROWS_WITH(t.encode("abc\xF0\x9F\x98"), Catch::Contains("byte offset 3"));  // cut short
    const std::vector<std::int32_t> bad{1, 7};
    REQUIRE_THROWS_AS(t.decode(bad), gemma4::InvalidArgument);
    REQUIRE_THROWS_WITH(t.decode(bad), Catch::Contains("id 7 at position 1 is not in the vocabulary"));
}
