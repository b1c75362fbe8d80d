// Gemma 4's function-calling syntax (the model's published chat_template.jinja, see
// docs/server.md) and its mapping to and from JSON:
//
//   declaration (system turn)  <|tool>declaration:NAME{description:<|"|>…<|"|>,parameters:{…}}<tool|>
//   call (model output)        <|tool_call>call:NAME{key:value,…}<tool_call|>
//   result (after the call)    <|tool_response>response:NAME{value:<|"|>…<|"|>}<tool_response|>
//
// Values: strings between <|"|> quotes (no escaping inside), true/false, numbers, None, {k:v,…}
// with keys sorted (Jinja's dictsort), […]. Keys are bare in calls and results.
#pragma once

#include <nlohmann/json.hpp>

#include <cctype>
#include <optional>
#include <string>
#include <string_view>

namespace gemma4::server {

inline constexpr std::string_view kQuote = "<|\"|>";
inline constexpr std::string_view kToolStart = "<|tool>";
inline constexpr std::string_view kToolEnd = "<tool|>";
inline constexpr std::string_view kToolCallStart = "<|tool_call>";
inline constexpr std::string_view kToolCallEnd = "<tool_call|>";
inline constexpr std::string_view kToolResponseStart = "<|tool_response>";
inline constexpr std::string_view kToolResponseEnd = "<tool_response|>";

namespace detail {

inline std::string upper(std::string s) {
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

/// The text Jinja prints for a value: strings as is, booleans as true/false... as Python does.
inline std::string scalar_text(const nlohmann::json& v) {
    if (v.is_null()) return "None";
    if (v.is_string()) return v.get<std::string>();
    return v.dump();
}

inline std::string gemma_quoted(std::string_view s) { return std::string(kQuote) + std::string(s) + std::string(kQuote); }

}  // namespace detail

/// The template's format_argument: a JSON value in the tool syntax.
inline std::string format_argument(const nlohmann::json& v, bool escape_keys = true) {
    if (v.is_string()) return detail::gemma_quoted(v.get<std::string>());
    if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
    if (v.is_object()) {
        std::string out = "{";
        bool first = true;
        for (const auto& [key, value] : v.items()) {  // nlohmann's object keeps keys sorted: dictsort
            if (!first) out += ',';
            first = false;
            out += escape_keys ? detail::gemma_quoted(key) : key;
            out += ':';
            out += format_argument(value, escape_keys);
        }
        return out + "}";
    }
    if (v.is_array()) {
        std::string out = "[";
        for (std::size_t i = 0; i < v.size(); ++i) {
            if (i) out += ',';
            out += format_argument(v[i], escape_keys);
        }
        return out + "]";
    }
    return detail::scalar_text(v);
}

namespace detail {

inline std::string string_list(const nlohmann::json& items) {
    std::string out = "[";
    bool first = true;
    for (const auto& item : items) {
        if (!first) out += ',';
        first = false;
        out += gemma_quoted(scalar_text(item));
    }
    return out + "]";
}

inline std::string type_of(const nlohmann::json& schema) {
    return schema.is_object() && schema.contains("type") && schema["type"].is_string() ? upper(schema["type"].get<std::string>()) : "";
}

/// The template's format_parameters: the properties of an object schema.
inline std::string format_parameters(const nlohmann::json& properties) {
    static const char* const standard_keys[] = {"description", "type", "properties", "required", "nullable"};
    std::string out;
    bool found_first = false;
    for (const auto& [key, value] : properties.items()) {
        bool standard = false;
        for (const char* s : standard_keys) standard |= key == s;
        if (standard || !value.is_object()) continue;
        if (found_first) out += ',';
        found_first = true;
        out += key + ":{";
        bool add_comma = false;
        auto comma = [&] {
            if (add_comma) out += ',';
            add_comma = true;
        };
        if (value.contains("description") && value["description"].is_string() && !value["description"].get<std::string>().empty()) {
            out += "description:" + gemma_quoted(value["description"].get<std::string>());
            add_comma = true;
        }
        const std::string type = type_of(value);
        if (type == "STRING") {
            if (value.contains("enum") && !value["enum"].empty()) {
                comma();
                out += "enum:" + format_argument(value["enum"]);
            }
        } else if (type == "ARRAY") {
            if (value.contains("items") && value["items"].is_object() && !value["items"].empty()) {
                comma();
                out += "items:{";
                bool items_first = true;
                for (const auto& [item_key, item_value] : value["items"].items()) {
                    if (item_value.is_null()) continue;
                    if (!items_first) out += ',';
                    items_first = false;
                    if (item_key == "properties") {
                        out += "properties:{" + (item_value.is_object() ? format_parameters(item_value) : "") + "}";
                    } else if (item_key == "required") {
                        out += "required:" + string_list(item_value);
                    } else if (item_key == "type") {
                        if (item_value.is_string()) {
                            out += "type:" + format_argument(upper(item_value.get<std::string>()));
                        } else {
                            nlohmann::json types = nlohmann::json::array();
                            for (const auto& t : item_value) types.push_back(upper(scalar_text(t)));
                            out += "type:" + format_argument(types);
                        }
                    } else {
                        out += item_key + ":" + format_argument(item_value);
                    }
                }
                out += "}";
            }
        }
        if (value.contains("nullable") && value["nullable"].is_boolean() && value["nullable"].get<bool>()) {
            comma();
            out += "nullable:true";
        }
        if (type == "OBJECT") {
            comma();
            const bool has_properties = value.contains("properties") && value["properties"].is_object();
            out += "properties:{" + format_parameters(has_properties ? value["properties"] : value) + "}";
            if (value.contains("required") && !value["required"].empty()) {
                comma();
                out += "required:" + string_list(value["required"]);
            }
        }
        comma();
        out += "type:" + gemma_quoted(type) + "}";
    }
    return out;
}

}  // namespace detail

/// One entry of the request's `tools` ({"type":"function","function":{name, description,
/// parameters}}) as the system turn declares it, markers included.
inline std::string render_tool_declaration(const nlohmann::json& tool) {
    const nlohmann::json& f = tool.at("function");
    std::string out(kToolStart);
    out += "declaration:" + f.at("name").get<std::string>() + "{description:" +
           detail::gemma_quoted(f.contains("description") && f["description"].is_string() ? f["description"].get<std::string>() : "");
    if (f.contains("parameters") && f["parameters"].is_object() && !f["parameters"].empty()) {
        const nlohmann::json& p = f["parameters"];
        out += ",parameters:{";
        std::string inner;
        if (p.contains("properties") && p["properties"].is_object() && !p["properties"].empty())
            inner += "properties:{" + detail::format_parameters(p["properties"]) + "},";
        if (p.contains("required") && p["required"].is_array() && !p["required"].empty()) inner += "required:" + detail::string_list(p["required"]) + ",";
        if (!detail::type_of(p).empty()) inner += "type:" + detail::gemma_quoted(detail::type_of(p));
        else if (!inner.empty()) inner.pop_back();  // the template leaves a dangling ',' and an unclosed '{' here; we close it
        out += inner + "}";
    }
    out += "}";
    out += kToolEnd;
    return out;
}

/// A call as the model writes it: `arguments` must be a JSON object.
inline std::string render_tool_call(std::string_view name, const nlohmann::json& arguments) {
    std::string out(kToolCallStart);
    out += "call:";
    out += name;
    const std::string args = format_argument(arguments, /*escape_keys=*/false);  // "{k:v,...}"
    out += args;
    out += kToolCallEnd;
    return out;
}

/// A tool's result: an object's fields as they are, anything else (the usual string) as `value`.
inline std::string render_tool_response(std::string_view name, const nlohmann::json& response) {
    std::string out(kToolResponseStart);
    out += "response:";
    out += name;
    if (response.is_object()) out += format_argument(response, /*escape_keys=*/false);
    else out += "{value:" + format_argument(response, false) + "}";
    out += kToolResponseEnd;
    return out;
}

namespace detail {

/// Reads the tool syntax back into JSON. Every failure (unbalanced brackets, an unterminated
/// string, a stray character) gives nothing: the caller then keeps the text as plain content.
class ToolSyntaxReader {
public:
    explicit ToolSyntaxReader(std::string_view text) : s_(text) {}

    std::optional<nlohmann::json> value(int depth = 0) {
        if (depth > 64) return std::nullopt;
        skip_space();
        if (at_end()) return std::nullopt;
        if (s_.substr(pos_).starts_with(kQuote)) return string();
        const char c = s_[pos_];
        if (c == '{') return object(depth);
        if (c == '[') return array(depth);
        return scalar();
    }

    std::optional<nlohmann::json> object(int depth) {
        if (!eat('{')) return std::nullopt;
        nlohmann::json out = nlohmann::json::object();
        skip_space();
        if (eat('}')) return out;
        while (true) {
            auto k = key();
            if (!k) return std::nullopt;
            skip_space();
            if (!eat(':')) return std::nullopt;
            auto v = value(depth + 1);
            if (!v) return std::nullopt;
            out[*k] = std::move(*v);
            skip_space();
            if (eat('}')) return out;
            if (!eat(',')) return std::nullopt;
            skip_space();
        }
    }

    bool at_end() const { return pos_ >= s_.size(); }
    std::size_t position() const { return pos_; }
    void skip_space() {
        while (!at_end() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    }

private:
    bool eat(char c) {
        if (at_end() || s_[pos_] != c) return false;
        ++pos_;
        return true;
    }

    std::optional<std::string> string() {
        pos_ += kQuote.size();
        const auto end = s_.find(kQuote, pos_);
        if (end == std::string_view::npos) return std::nullopt;
        std::string out(s_.substr(pos_, end - pos_));
        pos_ = end + kQuote.size();
        return out;
    }

    std::optional<std::string> key() {
        if (s_.substr(pos_).starts_with(kQuote)) return string();
        if (!at_end() && s_[pos_] == '"') {  // a JSON-quoted key, as some replies write them
            const auto end = s_.find('"', pos_ + 1);
            if (end == std::string_view::npos) return std::nullopt;
            std::string out(s_.substr(pos_ + 1, end - pos_ - 1));
            pos_ = end + 1;
            return out;
        }
        const std::size_t start = pos_;
        while (!at_end() && s_[pos_] != ':' && s_[pos_] != ',' && s_[pos_] != '{' && s_[pos_] != '}' && s_[pos_] != '[' &&
               s_[pos_] != ']' && s_[pos_] != '<')
            ++pos_;
        std::string_view k = s_.substr(start, pos_ - start);
        while (!k.empty() && std::isspace(static_cast<unsigned char>(k.back()))) k.remove_suffix(1);
        if (k.empty()) return std::nullopt;
        return std::string(k);
    }

    std::optional<nlohmann::json> array(int depth) {
        if (!eat('[')) return std::nullopt;
        nlohmann::json out = nlohmann::json::array();
        skip_space();
        if (eat(']')) return out;
        while (true) {
            auto v = value(depth + 1);
            if (!v) return std::nullopt;
            out.push_back(std::move(*v));
            skip_space();
            if (eat(']')) return out;
            if (!eat(',')) return std::nullopt;
        }
    }

    /// true, false, None/null, a number; any other bare word is taken as a string (the model
    /// sometimes leaves a string unquoted).
    std::optional<nlohmann::json> scalar() {
        const std::size_t start = pos_;
        while (!at_end() && s_[pos_] != ',' && s_[pos_] != '}' && s_[pos_] != ']' && s_[pos_] != '{' && s_[pos_] != '[' &&
               !s_.substr(pos_).starts_with(kQuote))
            ++pos_;
        std::string_view word = s_.substr(start, pos_ - start);
        while (!word.empty() && std::isspace(static_cast<unsigned char>(word.back()))) word.remove_suffix(1);
        if (word.empty()) return std::nullopt;
        if (word == "true") return true;
        if (word == "false") return false;
        if (word == "None" || word == "null") return nullptr;
        const char c = word.front();
        if (c == '-' || (c >= '0' && c <= '9')) {
            auto number = nlohmann::json::parse(word, nullptr, /*allow_exceptions=*/false);
            if (!number.is_discarded() && number.is_number()) return number;
        }
        return std::string(word);
    }

    std::string_view s_;
    std::size_t pos_ = 0;
};

}  // namespace detail

struct ParsedToolCall {
    std::string name;
    nlohmann::json arguments;  ///< an object
};

/// The text between <|tool_call> and <tool_call|>: `call:NAME{…}`. Nothing if malformed.
inline std::optional<ParsedToolCall> parse_tool_call(std::string_view body) {
    while (!body.empty() && std::isspace(static_cast<unsigned char>(body.front()))) body.remove_prefix(1);
    while (!body.empty() && std::isspace(static_cast<unsigned char>(body.back()))) body.remove_suffix(1);
    if (!body.starts_with("call:")) return std::nullopt;
    body.remove_prefix(5);
    const auto brace = body.find('{');
    if (brace == std::string_view::npos || brace == 0) return std::nullopt;
    std::string_view name = body.substr(0, brace);
    for (char c : name)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == ':')) return std::nullopt;
    detail::ToolSyntaxReader reader(body.substr(brace));
    auto args = reader.object(0);
    if (!args) return std::nullopt;
    reader.skip_space();
    if (!reader.at_end()) return std::nullopt;
    return ParsedToolCall{std::string(name), std::move(*args)};
}

/// Parses a value in the tool syntax on its own (tests, tool results). Nothing if malformed.
inline std::optional<nlohmann::json> parse_tool_value(std::string_view text) {
    detail::ToolSyntaxReader reader(text);
    auto v = reader.value();
    if (!v) return std::nullopt;
    reader.skip_space();
    if (!reader.at_end()) return std::nullopt;
    return v;
}

}  // namespace gemma4::server
