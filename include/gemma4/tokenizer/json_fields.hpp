// Typed access to tokenizer.json / tokenizer_config.json members with errors that name the file
// and the JSON path of the offending field ("tokenizer.json: decoder.decoders[2].type: ...").
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace gemma4::inline GEMMA4_ABI::detail {

using nlohmann::json;

inline std::string member_path(const std::string& parent, std::string_view key) {
    return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

inline std::string element_path(const std::string& parent, std::size_t index) {
    return parent + "[" + std::to_string(index) + "]";
}

/// Where a JSON document came from, for error messages.
struct JsonSource {
    std::string name;

    [[noreturn]] void fail(const std::string& path, const std::string& what) const {
        throw TokenizerError(name + ": " + (path.empty() ? std::string("top level") : path) + ": " + what);
    }

    void expect_object(const json& node, const std::string& path) const {
        if (!node.is_object()) fail(path, std::string("expected an object, got ") + node.type_name());
    }

    /// nullptr when absent; JSON null counts as absent, as in Hugging Face `tokenizers`.
    const json* find(const json& object, std::string_view key) const {
        const auto it = object.find(key);
        if (it == object.end() || it->is_null()) return nullptr;
        return &*it;
    }

    const json& require(const json& object, std::string_view key, const std::string& path) const {
        const json* v = find(object, key);
        if (!v) fail(member_path(path, key), "missing");
        return *v;
    }

    std::string require_string(const json& object, std::string_view key, const std::string& path) const {
        const json& v = require(object, key, path);
        if (!v.is_string()) fail(member_path(path, key), std::string("expected a string, got ") + v.type_name());
        return v.get<std::string>();
    }

    bool optional_bool(const json& object, std::string_view key, const std::string& path, bool fallback) const {
        const json* v = find(object, key);
        if (!v) return fallback;
        if (!v->is_boolean()) fail(member_path(path, key), std::string("expected a boolean, got ") + v->type_name());
        return v->get<bool>();
    }

    std::int64_t require_integer(const json& object, std::string_view key, const std::string& path) const {
        const json& v = require(object, key, path);
        if (!v.is_number_integer()) fail(member_path(path, key), std::string("expected an integer, got ") + v.type_name());
        return v.get<std::int64_t>();
    }

    const json& require_array(const json& object, std::string_view key, const std::string& path) const {
        const json& v = require(object, key, path);
        if (!v.is_array()) fail(member_path(path, key), std::string("expected an array, got ") + v.type_name());
        return v;
    }

    /// The `{"String": "..."}` pattern of Replace and Split; regex patterns are not supported.
    std::string string_pattern(const json& object, const std::string& path) const {
        const json& pattern = require(object, "pattern", path);
        const std::string pattern_path = member_path(path, "pattern");
        expect_object(pattern, pattern_path);
        if (pattern.contains("Regex"))
            fail(pattern_path, "Regex patterns are not supported (only {\"String\": ...})");
        const std::string s = require_string(pattern, "String", pattern_path);
        if (s.empty()) fail(member_path(pattern_path, "String"), "empty pattern");
        return s;
    }
};

}  // namespace gemma4::detail
