// gemma4::Tokenizer from a GGUF file's `tokenizer.ggml.*` keys (model "gemma4", as llama.cpp's
// converter writes the Gemma 4 vocabulary). The keys hold the vocabulary (tokens in id order,
// token types), the merges ("left right") and the special ids; the normalizer, pre-tokenizer,
// post-processor and decoder are those every Gemma 4 tokenizer.json has (" " → "▁", split after
// spaces, BOS + text, byte fallback). They are assembled into the equivalent tokenizer.json and
// loaded by the one BPE path, so both sources encode and decode identically.
//
// Token types (llama.cpp): 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
// Control tokens become special added tokens, user-defined ones non-special added tokens (both
// matched as whole units before BPE); the others are plain pieces (bytes are `<0xNN>` pieces for
// the byte fallback).
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/io/gguf.hpp>
#include <gemma4/tokenizer/tokenizer.hpp>
#include <gemma4/tokenizer/utf8.hpp>
#include <gemma4/tokenizer/tokenizer_config.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <string_view>

namespace gemma4 {
inline namespace GEMMA4_ABI {

namespace detail {
inline constexpr std::int64_t kGgufTokenControl = 3, kGgufTokenUserDefined = 4;
}

/// Whether `f` carries a tokenizer (a `tokenizer.ggml.model` key).
inline bool gguf_has_tokenizer(const GgufFile& f) { return f.contains("tokenizer.ggml.model"); }

/// The tokenizer.json text equivalent to the `tokenizer.ggml.*` keys of `f`. TokenizerError
/// names the key at fault.
inline std::string gguf_tokenizer_json(const GgufFile& f, TokenizerConfig& config) {
    const std::string file = f.path().string();
    const auto fail = [&](std::string_view key, const std::string& what) -> void {
        throw TokenizerError(file + ": metadata key '" + std::string(key) + "': " + what);
    };
    const GgufValue* model = f.find("tokenizer.ggml.model");
    if (!model) fail("tokenizer.ggml.model", "missing (the file has no tokenizer)");
    if (!model->is_string()) fail("tokenizer.ggml.model", "expected a STRING, got " + model->type_string());
    if (*model->as_string() != "gemma4")
        fail("tokenizer.ggml.model", "'" + std::string(*model->as_string()) + "' is not supported (only 'gemma4')");

    const auto string_array = [&](std::string_view key) -> const std::vector<std::string_view>& {
        const GgufValue* v = f.find(key);
        if (!v) fail(key, "missing");
        if (!v->is_array() || v->element_type() != GgufValueType::String) fail(key, "expected ARRAY[STRING], got " + v->type_string());
        // the pieces become JSON strings, which must be UTF-8
        const auto& strings = v->strings();
        for (std::size_t i = 0; i < strings.size(); ++i)
            if (const auto bad = detail::first_invalid_utf8(strings[i]))
                fail(key, "entry " + std::to_string(i) + " is not UTF-8 (byte " + std::to_string(*bad) + ")");
        return strings;
    };
    const auto& tokens = string_array("tokenizer.ggml.tokens");
    const auto& merges = string_array("tokenizer.ggml.merges");
    if (tokens.size() > static_cast<std::size_t>(Tokenizer::kMaxTokenId) + 1)
        fail("tokenizer.ggml.tokens", std::to_string(tokens.size()) + " tokens is more than supported");
    std::vector<std::int64_t> types(tokens.size(), 1);
    if (const GgufValue* tt = f.find("tokenizer.ggml.token_type")) {
        if (!tt->is_array() || tt->size() != tokens.size())
            fail("tokenizer.ggml.token_type", "expected an array of " + std::to_string(tokens.size()) + " integers (one per token)");
        for (std::size_t i = 0; i < tt->size(); ++i) {
            const auto x = tt->at(i).as_int();
            if (!x) fail("tokenizer.ggml.token_type", "expected integers, got " + tt->type_string());
            types[i] = *x;
        }
    }
    const auto id_of = [&](std::string_view key) -> std::optional<std::string> {
        const GgufValue* v = f.find(key);
        if (!v) return std::nullopt;
        const auto id = v->as_int();
        if (!id || *id < 0 || static_cast<std::size_t>(*id) >= tokens.size())
            fail(key, "expected a token id below " + std::to_string(tokens.size()));
        return std::string(tokens[static_cast<std::size_t>(*id)]);
    };
    const auto flag = [&](std::string_view key) -> std::optional<bool> {
        const GgufValue* v = f.find(key);
        if (!v) return std::nullopt;
        if (!v->is_bool()) fail(key, "expected a BOOL, got " + v->type_string());
        return *v->as_bool();
    };

    nlohmann::json j;
    j["version"] = "1.0";
    nlohmann::json vocab = nlohmann::json::object();
    nlohmann::json added = nlohmann::json::array();
    for (std::size_t id = 0; id < tokens.size(); ++id) {
        const std::string piece(tokens[id]);
        if (vocab.contains(piece)) fail("tokenizer.ggml.tokens", "token " + std::to_string(id) + " \"" + piece + "\" appears twice");
        vocab[piece] = id;
        if (types[id] == detail::kGgufTokenControl || types[id] == detail::kGgufTokenUserDefined)
            added.push_back({{"id", id},
                             {"content", piece},
                             {"single_word", false},
                             {"lstrip", false},
                             {"rstrip", false},
                             {"normalized", false},
                             {"special", types[id] == detail::kGgufTokenControl}});
    }
    nlohmann::json merge_pairs = nlohmann::json::array();
    for (std::size_t i = 0; i < merges.size(); ++i) {
        // As llama.cpp splits them: at the first space after the first byte.
        const std::string_view m = merges[i];
        const std::size_t space = m.find(' ', 1);
        if (space == std::string_view::npos)
            fail("tokenizer.ggml.merges", "entry " + std::to_string(i) + " \"" + std::string(m) + "\" is not \"left right\"");
        merge_pairs.push_back({std::string(m.substr(0, space)), std::string(m.substr(space + 1))});
    }
    j["added_tokens"] = std::move(added);
    j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xe2\x96\x81"}};
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"}, {"invert", false}};
    j["decoder"] = {{"type", "Sequence"},
                    {"decoders",
                     {{{"type", "Replace"}, {"pattern", {{"String", "\xe2\x96\x81"}}}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}}}}};
    nlohmann::json m{{"type", "BPE"}, {"fuse_unk", true}, {"byte_fallback", true}, {"ignore_merges", false}};
    if (const auto unk = id_of("tokenizer.ggml.unknown_token_id")) m["unk_token"] = *unk;
    m["vocab"] = std::move(vocab);
    m["merges"] = std::move(merge_pairs);
    j["model"] = std::move(m);

    config = TokenizerConfig{};
    config.bos_token = id_of("tokenizer.ggml.bos_token_id");
    config.eos_token = id_of("tokenizer.ggml.eos_token_id");
    config.pad_token = id_of("tokenizer.ggml.padding_token_id");
    config.add_bos_token = flag("tokenizer.ggml.add_bos_token");
    config.add_eos_token = flag("tokenizer.ggml.add_eos_token");
    // Markers are added by the config's add_bos_token / add_eos_token: an empty template.
    j["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single", {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                           {"pair", {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
                           {"special_tokens", nlohmann::json::object()}};
    return j.dump();
}

/// The tokenizer of a GGUF file (see above).
inline Tokenizer tokenizer_from_gguf(const GgufFile& f) {
    TokenizerConfig config;
    const std::string text = gguf_tokenizer_json(f, config);
    return Tokenizer::from_json_text(text, config, f.path().string() + " (tokenizer.ggml.*)");
}

inline Tokenizer load_gguf_tokenizer(const std::filesystem::path& path) { return tokenizer_from_gguf(GgufFile(path)); }

}  // namespace GEMMA4_ABI
}  // namespace gemma4
