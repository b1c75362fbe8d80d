// A JSON Schema validator for the tests, written from the specification (draft 2020-12, with
// draft 4-7's array form of items plus additionalItems and boolean exclusiveMinimum /
// exclusiveMaximum) and sharing nothing with include/gemma4/grammar/json_schema.hpp. It covers
// the keywords the compiler supports and treats format as an assertion, with the formats the
// compiler documents: RFC 3339 date, time (seconds 00-59) and date-time, and RFC 4122 uuid.
// Patterns run on std::wregex (ECMAScript) over the code points, after \s and \S are spelled
// out as ECMA-262's set of white space and line terminators (std::wregex's \s is the locale's).
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>

namespace gemma4::test {

namespace schema_validator_detail {

using nlohmann::json;

/// Code points of UTF-8 text (the strings come from nlohmann, so they are valid).
inline std::u32string code_points(const std::string& s) {
    std::u32string out;
    for (std::size_t i = 0; i < s.size();) {
        const auto b = static_cast<unsigned char>(s[i]);
        const int n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        char32_t c = n == 1 ? b : b & (0xFF >> (n + 1));
        for (int k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]) & 0x3F);
        out += c;
        i += static_cast<std::size_t>(n);
    }
    return out;
}

/// ECMA-262's WhiteSpace and LineTerminator, as class members for std::wregex.
inline const std::wstring& ecma_space_members() {
    static const std::wstring members =
        L"\\t\\n\\v\\f\\r \\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000\\uFEFF";
    return members;
}

/// The pattern with \s and \S replaced by explicit classes (inside a class, \s by its members;
/// \S inside a class does not occur in the tests and is refused), and named groups unnamed.
inline std::wstring ecma_pattern(const std::u32string& pattern) {
    std::wstring out;
    bool in_class = false;
    for (std::size_t i = 0; i < pattern.size(); ++i) {
        const char32_t c = pattern[i];
        if (c == '\\' && i + 1 < pattern.size()) {
            const char32_t next = pattern[++i];
            if (next == 's') out += in_class ? ecma_space_members() : L"[" + ecma_space_members() + L"]";
            else if (next == 'S' && !in_class) out += L"[^" + ecma_space_members() + L"]";
            else if (next == 'S') throw std::runtime_error("validator: \\S inside a class");
            else out += L'\\', out += static_cast<wchar_t>(next);
            continue;
        }
        if (c == '(' && !in_class && pattern.compare(i, 3, U"(?<") == 0 && i + 3 < pattern.size() && pattern[i + 3] != '=' &&
            pattern[i + 3] != '!') {
            i = pattern.find('>', i);  // a named group: std::wregex has only plain groups, which match the same
            out += L'(';
            continue;
        }
        if (c == '[' && !in_class) in_class = true;
        else if (c == ']' && in_class) in_class = false;
        out += static_cast<wchar_t>(c);
    }
    return out;
}

inline bool digits(std::string_view s, std::size_t from, std::size_t count) {
    if (from + count > s.size()) return false;
    for (std::size_t i = from; i < from + count; ++i)
        if (s[i] < '0' || s[i] > '9') return false;
    return true;
}

inline int number_at(std::string_view s, std::size_t from, std::size_t count) {
    int v = 0;
    for (std::size_t i = from; i < from + count; ++i) v = v * 10 + (s[i] - '0');
    return v;
}

/// RFC 3339 full-date: YYYY-MM-DD, the day within its month (Gregorian leap years).
inline bool is_date(std::string_view s) {
    if (s.size() != 10 || !digits(s, 0, 4) || s[4] != '-' || !digits(s, 5, 2) || s[7] != '-' || !digits(s, 8, 2)) return false;
    const int year = number_at(s, 0, 4), month = number_at(s, 5, 2), day = number_at(s, 8, 2);
    if (month < 1 || month > 12 || day < 1) return false;
    const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    const int days[] = {31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return day <= days[month - 1];
}

/// HH:MM within 00:00-23:59 at `from`.
inline bool is_hour_minute(std::string_view s, std::size_t from) {
    return digits(s, from, 2) && s.size() > from + 2 && s[from + 2] == ':' && digits(s, from + 3, 2) && number_at(s, from, 2) <= 23 &&
           number_at(s, from + 3, 2) <= 59;
}

/// RFC 3339 full-time: HH:MM:SS, an optional fraction, then Z or a ±HH:MM offset; seconds
/// 00-59 (the compiler's documented rule: no leap second).
inline bool is_time(std::string_view s) {
    if (!is_hour_minute(s, 0) || s.size() < 8 || s[5] != ':' || !digits(s, 6, 2) || number_at(s, 6, 2) > 59) return false;
    std::size_t i = 8;
    if (i < s.size() && s[i] == '.') {
        const std::size_t start = ++i;
        while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
        if (i == start) return false;
    }
    if (i < s.size() && (s[i] == 'Z' || s[i] == 'z')) return i + 1 == s.size();
    return i < s.size() && (s[i] == '+' || s[i] == '-') && s.size() == i + 6 && is_hour_minute(s, i + 1);
}

inline bool is_uuid(std::string_view s) {
    if (s.size() != 36) return false;
    for (std::size_t i = 0; i < s.size(); ++i) {
        const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        const char c = s[i];
        const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
        if (dash ? c != '-' : !hex) return false;
    }
    return true;
}

inline bool format_holds(const std::string& format, const std::string& s) {
    if (format == "date") return is_date(s);
    if (format == "time") return is_time(s);
    if (format == "date-time") return s.size() > 11 && (s[10] == 'T' || s[10] == 't') && is_date(s.substr(0, 10)) && is_time(s.substr(11));
    if (format == "uuid") return is_uuid(s);
    throw std::runtime_error("validator: unknown format " + format);
}

inline bool is_integer(const json& v) {
    return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
}

inline bool has_type(const json& v, const std::string& type) {
    if (type == "null") return v.is_null();
    if (type == "boolean") return v.is_boolean();
    if (type == "integer") return is_integer(v);
    if (type == "number") return v.is_number();
    if (type == "string") return v.is_string();
    if (type == "array") return v.is_array();
    if (type == "object") return v.is_object();
    throw std::runtime_error("validator: unknown type " + type);
}

/// JSON Schema equality: numbers by value (1 equals 1.0), objects without regard to key order,
/// which is nlohmann's ==.
inline bool equal(const json& a, const json& b) { return a == b; }

class Validator {
public:
    explicit Validator(const json& root) : root_(root) {}

    bool check(const json& v, const json& schema, std::string& why, int depth = 0) const {
        if (depth > 200) throw std::runtime_error("validator: schema recursion without progress");
        if (schema.is_boolean()) return schema.get<bool>() || fail(why, "false schema");
        if (const auto ref = schema.find("$ref"); ref != schema.end() && !check(v, resolve(ref->get<std::string>()), why, depth + 1))
            return false;
        return check_generic(v, schema, why, depth) && check_combinators(v, schema, why, depth) &&
               (!v.is_number() || check_number(v, schema, why)) && (!v.is_string() || check_string(v, schema, why)) &&
               (!v.is_array() || check_array(v, schema, why, depth)) && (!v.is_object() || check_object(v, schema, why, depth));
    }

private:
    static bool fail(std::string& why, const std::string& what) {
        if (why.empty()) why = what;
        return false;
    }

    const json& resolve(const std::string& ref) const {
        if (ref.empty() || ref[0] != '#') throw std::runtime_error("validator: non-local $ref " + ref);
        return ref.size() == 1 ? root_ : root_.at(json::json_pointer(ref.substr(1)));
    }

    bool check_generic(const json& v, const json& schema, std::string& why, int) const {
        if (const auto t = schema.find("type"); t != schema.end()) {
            bool any = false;
            if (t->is_string()) any = has_type(v, t->get<std::string>());
            else for (const auto& name : *t) any |= has_type(v, name.get<std::string>());
            if (!any) return fail(why, "type " + t->dump());
        }
        if (const auto e = schema.find("enum"); e != schema.end()) {
            bool found = false;
            for (const auto& option : *e) found |= equal(v, option);
            if (!found) return fail(why, "not in enum");
        }
        if (const auto c = schema.find("const"); c != schema.end() && !equal(v, *c)) return fail(why, "not const");
        return true;
    }

    bool check_combinators(const json& v, const json& schema, std::string& why, int depth) const {
        std::string ignored;
        if (const auto all = schema.find("allOf"); all != schema.end())
            for (const auto& s : *all)
                if (!check(v, s, why, depth + 1)) return false;
        if (const auto any = schema.find("anyOf"); any != schema.end()) {
            bool ok = false;
            for (const auto& s : *any) ok |= check(v, s, ignored, depth + 1);
            if (!ok) return fail(why, "no anyOf branch");
        }
        if (const auto one = schema.find("oneOf"); one != schema.end()) {
            int count = 0;
            for (const auto& s : *one) count += check(v, s, ignored, depth + 1);
            if (count != 1) return fail(why, std::to_string(count) + " oneOf branches");
        }
        return true;
    }

    /// Bounds compared as nlohmann compares numbers: integers with integers exactly (a double
    /// would round near 10^16), anything else as doubles.
    static bool check_number(const json& v, const json& schema, std::string& why) {
        const auto flag = [&](const char* key) {
            const auto it = schema.find(key);
            return it != schema.end() && it->is_boolean() && it->get<bool>();
        };
        const auto number = [&](const char* key) {
            const auto it = schema.find(key);
            return it != schema.end() && it->is_number() ? &*it : nullptr;
        };
        if (const json* m = number("minimum"); m && (flag("exclusiveMinimum") ? !(v > *m) : !(v >= *m))) return fail(why, "below minimum");
        if (const json* m = number("maximum"); m && (flag("exclusiveMaximum") ? !(v < *m) : !(v <= *m))) return fail(why, "above maximum");
        if (const json* m = number("exclusiveMinimum"); m && !(v > *m)) return fail(why, "not above exclusiveMinimum");
        if (const json* m = number("exclusiveMaximum"); m && !(v < *m)) return fail(why, "not below exclusiveMaximum");
        return true;
    }

    static bool check_string(const json& v, const json& schema, std::string& why) {
        const std::string s = v.get<std::string>();
        const std::u32string cps = code_points(s);
        if (const auto m = schema.find("minLength"); m != schema.end() && cps.size() < m->get<std::size_t>()) return fail(why, "too short");
        if (const auto m = schema.find("maxLength"); m != schema.end() && cps.size() > m->get<std::size_t>()) return fail(why, "too long");
        if (const auto p = schema.find("pattern"); p != schema.end()) {
            const std::wregex re(ecma_pattern(code_points(p->get<std::string>())), std::regex::ECMAScript);
            if (!std::regex_search(std::wstring(cps.begin(), cps.end()), re)) return fail(why, "pattern " + p->dump());
        }
        if (const auto f = schema.find("format"); f != schema.end() && !format_holds(f->get<std::string>(), s))
            return fail(why, "format " + f->dump());
        return true;
    }

    bool check_array(const json& v, const json& schema, std::string& why, int depth) const {
        if (const auto m = schema.find("minItems"); m != schema.end() && v.size() < m->get<std::size_t>()) return fail(why, "too few items");
        if (const auto m = schema.find("maxItems"); m != schema.end() && v.size() > m->get<std::size_t>()) return fail(why, "too many items");
        const auto items = schema.find("items"), prefix = schema.find("prefixItems");
        const bool old_tuple = items != schema.end() && items->is_array();
        const json* tuple = old_tuple ? &*items : prefix != schema.end() ? &*prefix : nullptr;
        const json* rest = old_tuple ? (schema.contains("additionalItems") ? &schema.at("additionalItems") : nullptr)
                                     : (items != schema.end() ? &*items : nullptr);
        const std::size_t fixed = tuple ? tuple->size() : 0;
        for (std::size_t i = 0; i < v.size(); ++i) {
            const json* s = i < fixed ? &(*tuple)[i] : rest;
            if (s && !check(v[i], *s, why, depth + 1)) return fail(why, "item " + std::to_string(i));
        }
        if (const auto u = schema.find("uniqueItems"); u != schema.end() && u->get<bool>())
            for (std::size_t i = 0; i < v.size(); ++i)
                for (std::size_t j = i + 1; j < v.size(); ++j)
                    if (equal(v[i], v[j])) return fail(why, "items not unique");
        return true;
    }

    bool check_object(const json& v, const json& schema, std::string& why, int depth) const {
        if (const auto req = schema.find("required"); req != schema.end())
            for (const auto& name : *req)
                if (!v.contains(name.get<std::string>())) return fail(why, "missing " + name.dump());
        const auto props = schema.find("properties");
        const auto extra = schema.find("additionalProperties");
        for (const auto& [key, value] : v.items()) {
            const bool declared = props != schema.end() && props->contains(key);
            if (declared && !check(value, props->at(key), why, depth + 1)) return fail(why, "property " + key);
            if (!declared && extra != schema.end() && !check(value, *extra, why, depth + 1)) return fail(why, "additional property " + key);
        }
        return true;
    }

    const json& root_;
};

}  // namespace schema_validator_detail

/// Whether `instance` validates against `schema` (whose $refs are resolved within itself).
/// `why`, when given, receives the first reason it does not.
inline bool validates(const nlohmann::json& instance, const nlohmann::json& schema, std::string* why = nullptr) {
    std::string reason;
    const bool ok = schema_validator_detail::Validator(schema).check(instance, schema, reason);
    if (why) *why = reason;
    return ok;
}

}  // namespace gemma4::test
