// The few tokenizer_config.json fields that change how text is encoded: whether BOS / EOS are
// added, and which strings are the BOS / EOS / pad tokens. Everything else in that file (chat
// template, added_tokens_decoder, ...) is ignored here.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/tokenizer/json_fields.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace gemma4 {
inline namespace GEMMA4_ABI {

namespace detail {

/// Whole file in memory; IoError when it cannot be opened or read.
inline std::string read_text_file(const std::filesystem::path& path) {
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
    if (!file) throw IoError(path.string() + ": cannot open file");
    std::string bytes;
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (!ec) bytes.resize(static_cast<std::size_t>(size));
    const std::size_t got = bytes.empty() ? 0 : std::fread(bytes.data(), 1, bytes.size(), file.get());
    if (got != bytes.size()) throw IoError(path.string() + ": read failed");
    // Files whose size is not known up front (pipes, /proc) are read to the end.
    char buffer[65536];
    while (const std::size_t n = std::fread(buffer, 1, sizeof buffer, file.get())) bytes.append(buffer, n);
    if (std::ferror(file.get())) throw IoError(path.string() + ": read failed");
    return bytes;
}

inline std::optional<std::string> token_string_field(const JsonSource& src, const json& root, std::string_view key) {
    const json* v = src.find(root, key);
    if (!v) return std::nullopt;
    if (v->is_string()) return v->get<std::string>();
    if (v->is_object()) return src.require_string(*v, "content", std::string(key));
    src.fail(std::string(key), std::string("expected a string or {\"content\": ...}, got ") + v->type_name());
}

}  // namespace detail

struct TokenizerConfig {
    std::optional<bool> add_bos_token;  ///< overrides the post-processor's BOS when set
    std::optional<bool> add_eos_token;  ///< appends EOS when true, removes it when false
    std::optional<std::string> bos_token;
    std::optional<std::string> eos_token;
    std::optional<std::string> pad_token;

    static TokenizerConfig from_json_text(std::string_view text, std::string source = "tokenizer_config.json") {
        const detail::JsonSource src{std::move(source)};
        detail::json root;
        try {
            root = detail::json::parse(text);
        } catch (const detail::json::exception& e) {  // parse_error, or out_of_range for a number overflow
            throw TokenizerError(src.name + ": not valid JSON: " + e.what());
        }
        src.expect_object(root, "");
        TokenizerConfig c;
        const auto flag = [&](std::string_view key) -> std::optional<bool> {
            if (!src.find(root, key)) return std::nullopt;
            return src.optional_bool(root, key, "", false);
        };
        c.add_bos_token = flag("add_bos_token");
        c.add_eos_token = flag("add_eos_token");
        c.bos_token = detail::token_string_field(src, root, "bos_token");
        c.eos_token = detail::token_string_field(src, root, "eos_token");
        c.pad_token = detail::token_string_field(src, root, "pad_token");
        return c;
    }

    static TokenizerConfig from_file(const std::filesystem::path& path) {
        return from_json_text(detail::read_text_file(path), path.string());
    }
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
