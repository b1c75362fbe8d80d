// Gemma 4's function-calling syntax (the model's published chat_template.jinja, see
// docs/server.md) and its mapping to and from JSON:
//
//   declaration (system turn)  <|tool>declaration:NAME{description:<|"|>…<|"|>,parameters:{…}}<tool|>
//   call (model output)        <|tool_call>call:NAME{key:value,…}<tool_call|>
//   result (after the call)    <|tool_response>response:NAME{value:<|"|>…<|"|>}<tool_response|>
//
// Values: strings between <|"|> quotes (no escaping inside), true/false, numbers, None, {k:v,…}
// with keys sorted (Jinja's dictsort), […]. Keys are bare in calls and results (quoted when a
// key could not be read back bare, e.g. one holding a comma).
#pragma once

#include <nlohmann/json.hpp>

#include <cctype>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

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

/// The characters that end a bare key of a call or result (the reader's `key`).
inline constexpr std::string_view kBareKeyEnds = ":,{}[]<";

/// A key of a call or result: bare, as the template writes it, unless it would not read back so
/// (empty, a character that ends a bare key, surrounding space, a leading '"'); then quoted.
inline std::string call_key(std::string_view key) {
    const bool bare = !key.empty() && key.find_first_of(kBareKeyEnds) == std::string_view::npos && key.front() != '"' &&
                      !std::isspace(static_cast<unsigned char>(key.front())) && !std::isspace(static_cast<unsigned char>(key.back()));
    return bare ? std::string(key) : gemma_quoted(key);
}

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
            out += escape_keys ? detail::gemma_quoted(key) : detail::call_key(key);
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

/// JSON string escaping that maps every byte on its own (bytes >= 0x80 pass as they are), so the
/// escape of a text equals the concatenated escapes of any split of it: streamed argument
/// fragments then concatenate exactly to the whole call's arguments.
inline void append_json_escaped(std::string& out, std::string_view s) {
    static constexpr char hex[] = "0123456789abcdef";
    for (char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
            if (c < 0x20) {
                out += "\\u00";
                out += hex[c >> 4];
                out += hex[c & 15];
            } else {
                out += ch;
            }
        }
    }
}

/// Bytes at the end of `s` that may be an incomplete UTF-8 sequence (held back while streaming:
/// a fragment cut inside a character would not be valid UTF-8 on its own).
inline std::size_t incomplete_utf8_tail(std::string_view s) {
    for (std::size_t back = 1; back <= 3 && back <= s.size(); ++back) {
        const auto c = static_cast<unsigned char>(s[s.size() - back]);
        if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
        const std::size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? back : 0;
    }
    return 0;
}

/// Reads the tool syntax back into JSON. Every failure (unbalanced brackets, an unterminated
/// string, a stray character) gives nothing: the caller then keeps the text as plain content.
///
/// With `json_text`, the reader also writes the value as JSON text, in the order the model wrote
/// it, appending only what the bytes read so far decide for good. A `partial` reader is given a
/// prefix of a call: it fails at the end of the text, and `json_text` then holds the JSON prefix
/// that no later byte can change (the part of an open string value included) — what a stream
/// sends as argument fragments.
class ToolSyntaxReader {
public:
    explicit ToolSyntaxReader(std::string_view text, std::string* json_text = nullptr, bool partial = false)
        : s_(text), json_(json_text), partial_(partial) {}

    std::optional<nlohmann::json> value(int depth = 0) {
        if (depth > 64) return std::nullopt;
        skip_space();
        if (at_end()) return std::nullopt;
        if (s_.substr(pos_).starts_with(kQuote)) {
            auto text = string(/*stream_text=*/true);
            if (!text) return std::nullopt;
            return nlohmann::json(std::move(*text));
        }
        const char c = s_[pos_];
        if (c == '{') return object(depth);
        if (c == '[') return array(depth);
        return scalar();
    }

    std::optional<nlohmann::json> object(int depth) {
        if (!eat('{')) return std::nullopt;
        write("{");
        nlohmann::json out = nlohmann::json::object();
        skip_space();
        if (eat('}')) return write("}"), out;
        for (bool first = true;; first = false) {
            auto k = key();
            if (!k) return std::nullopt;
            skip_space();
            if (!eat(':')) return std::nullopt;
            if (json_) {  // the key is certain once its ':' is read
                if (!first) *json_ += ',';
                *json_ += '"';
                append_json_escaped(*json_, *k);
                *json_ += "\":";
            }
            auto v = value(depth + 1);
            if (!v) return std::nullopt;
            out[*k] = std::move(*v);
            skip_space();
            if (eat('}')) return write("}"), out;
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

    void write(std::string_view text) {
        if (json_) *json_ += text;
    }

    /// A <|"|>-quoted string. A value's text is written as a JSON string; unterminated in a
    /// partial reader, what is certain of it is written before failing.
    std::optional<std::string> string(bool stream_text = false) {
        pos_ += kQuote.size();
        const auto end = s_.find(kQuote, pos_);
        if (stream_text) write("\"");
        if (end == std::string_view::npos) {
            if (stream_text && partial_ && json_) {
                std::string_view rest = s_.substr(pos_);
                for (std::size_t n = std::min(kQuote.size() - 1, rest.size()); n > 0; --n)  // may be the closing quote's start
                    if (rest.substr(rest.size() - n) == kQuote.substr(0, n)) {
                        rest.remove_suffix(n);
                        break;
                    }
                rest.remove_suffix(incomplete_utf8_tail(rest));
                append_json_escaped(*json_, rest);
            }
            return std::nullopt;
        }
        std::string out(s_.substr(pos_, end - pos_));
        pos_ = end + kQuote.size();
        if (stream_text && json_) {
            append_json_escaped(*json_, out);
            *json_ += '"';
        }
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
        while (!at_end() && kBareKeyEnds.find(s_[pos_]) == std::string_view::npos) ++pos_;
        std::string_view k = s_.substr(start, pos_ - start);
        while (!k.empty() && std::isspace(static_cast<unsigned char>(k.back()))) k.remove_suffix(1);
        if (k.empty()) return std::nullopt;
        return std::string(k);
    }

    std::optional<nlohmann::json> array(int depth) {
        if (!eat('[')) return std::nullopt;
        write("[");
        nlohmann::json out = nlohmann::json::array();
        skip_space();
        if (eat(']')) return write("]"), out;
        while (true) {
            auto v = value(depth + 1);
            if (!v) return std::nullopt;
            out.push_back(std::move(*v));
            skip_space();
            if (eat(']')) return write("]"), out;
            if (!eat(',')) return std::nullopt;
            write(",");
        }
    }

    /// true, false, None/null, a number; any other bare word is taken as a string (the model
    /// sometimes leaves a string unquoted). Written once its end is read (a partial reader's
    /// last word may still grow).
    std::optional<nlohmann::json> scalar() {
        const std::size_t start = pos_;
        while (!at_end() && s_[pos_] != ',' && s_[pos_] != '}' && s_[pos_] != ']' && s_[pos_] != '{' && s_[pos_] != '[' &&
               !s_.substr(pos_).starts_with(kQuote))
            ++pos_;
        if (partial_ && at_end()) return std::nullopt;
        std::string_view word = s_.substr(start, pos_ - start);
        while (!word.empty() && std::isspace(static_cast<unsigned char>(word.back()))) word.remove_suffix(1);
        if (word.empty()) return std::nullopt;
        nlohmann::json v;
        if (word == "true") v = true;
        else if (word == "false") v = false;
        else if (word == "None" || word == "null") v = nullptr;
        else {
            const char c = word.front();
            if (c == '-' || (c >= '0' && c <= '9')) {
                auto number = nlohmann::json::parse(word, nullptr, /*allow_exceptions=*/false);
                if (!number.is_discarded() && number.is_number()) v = std::move(number);
            }
            if (v.is_null()) v = std::string(word);
        }
        if (json_) {
            if (v.is_string()) {
                *json_ += '"';
                append_json_escaped(*json_, v.get_ref<const std::string&>());
                *json_ += '"';
            } else {
                *json_ += v.dump();
            }
        }
        return v;
    }

    std::string_view s_;
    std::string* json_;
    bool partial_;
    std::size_t pos_ = 0;
};

}  // namespace detail

struct ParsedToolCall {
    std::string name;
    nlohmann::json arguments;    ///< an object
    std::string arguments_text;  ///< the same as JSON text, members in the order the model wrote them
};

namespace detail {

/// `call:NAME{` at the start of a call's text (leading space skipped): the name and where the
/// arguments' '{' is, or nothing (not yet known, or not a call).
inline std::optional<std::pair<std::string_view, std::string_view>> split_tool_call(std::string_view body) {
    while (!body.empty() && std::isspace(static_cast<unsigned char>(body.front()))) body.remove_prefix(1);
    if (!body.starts_with("call:")) return std::nullopt;
    body.remove_prefix(5);
    const auto brace = body.find('{');
    if (brace == std::string_view::npos || brace == 0) return std::nullopt;
    std::string_view name = body.substr(0, brace);
    for (char c : name)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == ':')) return std::nullopt;
    return std::pair{name, body.substr(brace)};
}

}  // namespace detail

/// The text between <|tool_call> and <tool_call|>: `call:NAME{…}`. Nothing if malformed.
inline std::optional<ParsedToolCall> parse_tool_call(std::string_view body) {
    while (!body.empty() && std::isspace(static_cast<unsigned char>(body.back()))) body.remove_suffix(1);
    const auto parts = detail::split_tool_call(body);
    if (!parts) return std::nullopt;
    std::string text;
    detail::ToolSyntaxReader reader(parts->second, &text);
    auto args = reader.object(0);
    if (!args) return std::nullopt;
    reader.skip_space();
    if (!reader.at_end()) return std::nullopt;
    return ParsedToolCall{std::string(parts->first), std::move(*args), std::move(text)};
}

/// For a call still being generated (the text after <|tool_call> so far): its name, once
/// `call:NAME{` is complete, and the prefix of its JSON arguments that no later text can
/// change. If the whole call parses, its `arguments_text` starts with every such prefix.
struct PartialToolCall {
    std::string name, arguments_prefix;
};
inline std::optional<PartialToolCall> parse_partial_tool_call(std::string_view body) {
    const auto parts = detail::split_tool_call(body);
    if (!parts) return std::nullopt;
    PartialToolCall out{std::string(parts->first), {}};
    detail::ToolSyntaxReader reader(parts->second, &out.arguments_prefix, /*partial=*/true);
    (void)reader.object(0);  // fails at the end of the text, or reads all of it: either way the prefix is certain
    return out;
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
