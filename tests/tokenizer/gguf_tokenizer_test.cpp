// The tokenizer of a GGUF file (tokenizer.ggml.* keys) against the tokenizer.json of the same
// vocabulary: same ids for every text, same decoding, same special ids; and malformed keys as
// TokenizerErrors naming the key.
#include <gemma4/detail/random.hpp>
#include <gemma4/io/gguf_writer.hpp>
#include <gemma4/tokenizer/gguf_tokenizer.hpp>

#include <catch2/catch.hpp>

#include "support/message_matcher.hpp"
#include "support/temp_dir.hpp"

#include <string>
#include <vector>

using namespace gemma4;

namespace {

std::filesystem::path data_dir() { return std::filesystem::path(GEMMA4_TEST_DATA_DIR) / "gguf"; }

std::vector<std::string> texts() {
    std::vector<std::string> t{
        "",
        " ",
        "the",
        "The quick brown fox jumps over the lazy dog.",
        "  leading and   inner   spaces, trailing  ",
        "semi;colons, commas. and dots...",
        "line one\nline two\n\nline four",
        "<|turn>user\nhello there<turn|>\n<|turn>model\n",
        "<bos><eos><pad><unk><mask> as text",
        "<|channel>thought<channel|> <|tool_call>call<tool_call|> <|\"|>q<|\"|> <|think|>",
        "bytes: \xc3\xa9\xc3\xa0 \xe6\xbc\xa2\xe5\xad\x97 \xf0\x9f\x98\x80 Z Q 0123456789 ~!@#",
        "\t tabs\tand CAPITALS",
        "<|tool_response>r<tool_response|><|tool>t<tool|>",
        "<|turn", "turn|>", "<<|turn>>",
    };
    // random strings over the pieces' alphabet and a few others
    gemma4::detail::SplitMix64 rng{5};
    const std::string alphabet = "abcdefghijklmnopqrstuvwxyz .,;\nAZ<|>";
    for (int i = 0; i < 200; ++i) {
        std::string s;
        const int n = static_cast<int>(rng.next() % 40);
        for (int k = 0; k < n; ++k) s += alphabet[rng.next() % alphabet.size()];
        t.push_back(s);
    }
    return t;
}

}  // namespace

TEST_CASE("gguf tokenizer encodes and decodes as the tokenizer.json of the same vocabulary", "[tokenizer][gguf]") {
    const Tokenizer json = Tokenizer::from_file(data_dir() / "tiny-tokenizer" / "tokenizer.json");
    for (const std::string file : {"tiny-gemma4-q8_0.gguf", "tiny-gemma4-q4_0-mixed.gguf"}) {
        const Tokenizer gguf = load_gguf_tokenizer(data_dir() / file);
        CHECK(gguf.vocab_size() == json.vocab_size());
        CHECK(gguf.bos_id() == json.bos_id());
        CHECK(gguf.eos_id() == json.eos_id());
        CHECK(gguf.pad_id() == json.pad_id());
        CHECK(gguf.unk_id() == json.unk_id());
        CHECK(gguf.adds_bos() == json.adds_bos());
        CHECK(gguf.adds_bos());
        CHECK(gguf.special_id("<|turn>") == 105);
        CHECK(gguf.token_to_id("<0x41>") == json.token_to_id("<0x41>"));
        for (const auto& text : texts()) {
            INFO("text: \"" << text << "\"");
            const auto ids = json.encode(text);
            REQUIRE(gguf.encode(text) == ids);
            REQUIRE(gguf.encode(text, false) == json.encode(text, false));
            CHECK(gguf.decode(ids) == json.decode(ids));
        }
        // Every id decodes the same (skip_special differs only for the user-defined tokens,
        // which llama.cpp's converter marks visible: not special).
        for (std::int32_t id = 0; id < static_cast<std::int32_t>(json.vocab_size()); ++id) {
            const std::vector<std::int32_t> one{id};
            REQUIRE(gguf.decode(one) == json.decode(one));
            REQUIRE(gguf.is_special(id) == (json.is_special(id) && !(id == 48 || id == 49 || id == 50 || id == 51 || id == 52 || id == 100 || id == 101)));
        }
    }
}

namespace {

std::filesystem::path edited(const std::string& label, const std::function<void(std::vector<GgufKv>&)>& edit) {
    const GgufFile f(data_dir() / "tiny-gemma4-q8_0.gguf");
    auto kvs = gguf_kvs_of(f);
    edit(kvs);
    const auto path = test::temp_dir("gguf_tok") / (label + ".gguf");
    write_gguf(path, kvs, {});
    return path;
}

GgufKv& key(std::vector<GgufKv>& kvs, const std::string& name) {
    for (auto& kv : kvs)
        if (kv.key == name) return kv;
    throw std::runtime_error("test: no key " + name);
}

}  // namespace

TEST_CASE("gguf tokenizer: malformed keys are TokenizerErrors naming the key", "[tokenizer][gguf]") {
    const auto expect = [](const std::string& label, const std::function<void(std::vector<GgufKv>&)>& edit, const std::string& needle) {
        INFO(label);
        const auto path = edited(label, edit);
        CHECK_THROWS_MATCHES(load_gguf_tokenizer(path), TokenizerError, test::Has(path.string()) && test::Has(needle));
    };
    CHECK_NOTHROW(load_gguf_tokenizer(edited("unchanged", [](auto&) {})));
    expect("model", [](auto& k) { key(k, "tokenizer.ggml.model") = gguf_string("tokenizer.ggml.model", "llama"); },
           "'tokenizer.ggml.model': 'llama' is not supported");
    expect("no_model", [](auto& k) { std::erase_if(k, [](const GgufKv& kv) { return kv.key == "tokenizer.ggml.model"; }); },
           "'tokenizer.ggml.model': missing");
    expect("no_merges", [](auto& k) { std::erase_if(k, [](const GgufKv& kv) { return kv.key == "tokenizer.ggml.merges"; }); },
           "'tokenizer.ggml.merges': missing");
    expect("merge_form", [](auto& k) { key(k, "tokenizer.ggml.merges") = gguf_string_array("tokenizer.ggml.merges", {"\xe2\x96\x81t"}); },
           "'tokenizer.ggml.merges': entry 0");
    expect("merge_unknown", [](auto& k) { key(k, "tokenizer.ggml.merges") = gguf_string_array("tokenizer.ggml.merges", {"x <q>"}); },
           "model.merges[0]: unknown piece \"<q>\"");
    expect("types", [](auto& k) { key(k, "tokenizer.ggml.token_type") = gguf_int32_array("tokenizer.ggml.token_type", {1, 2}); },
           "'tokenizer.ggml.token_type': expected an array of 384");
    expect("bos", [](auto& k) { key(k, "tokenizer.ggml.bos_token_id") = gguf_uint32("tokenizer.ggml.bos_token_id", 384); },
           "'tokenizer.ggml.bos_token_id': expected a token id below 384");
    expect("merge_utf8", [](auto& k) { key(k, "tokenizer.ggml.merges") = gguf_string_array("tokenizer.ggml.merges", {"a b", "x\x87 y"}); },
           "'tokenizer.ggml.merges': entry 1 is not UTF-8 (byte 1)");
    expect("tokens_type", [](auto& k) { key(k, "tokenizer.ggml.tokens") = gguf_int32_array("tokenizer.ggml.tokens", {1}); },
           "'tokenizer.ggml.tokens': expected ARRAY[STRING], got ARRAY[INT32]");
    expect("duplicate", [](auto& k) {
        const GgufFile f(data_dir() / "tiny-gemma4-q8_0.gguf");
        std::vector<std::string> tokens;
        for (auto s : f.get_array("tokenizer.ggml.tokens").strings()) tokens.emplace_back(s);
        tokens[10] = tokens[11];
        key(k, "tokenizer.ggml.tokens") = gguf_string_array("tokenizer.ggml.tokens", tokens);
    }, "appears twice");
    expect("add_bos", [](auto& k) { key(k, "tokenizer.ggml.add_bos_token") = gguf_uint32("tokenizer.ggml.add_bos_token", 1); },
           "'tokenizer.ggml.add_bos_token': expected a BOOL, got UINT32");
    // add_bos_token false: no BOS
    const Tokenizer no_bos = load_gguf_tokenizer(edited("no_bos", [](auto& k) {
        key(k, "tokenizer.ggml.add_bos_token") = gguf_bool("tokenizer.ggml.add_bos_token", false);
    }));
    CHECK_FALSE(no_bos.adds_bos());
    CHECK(no_bos.encode("the") == no_bos.encode("the", false));
}
