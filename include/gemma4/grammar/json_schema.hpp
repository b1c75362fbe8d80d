// JSON Schema to GBNF: the grammar whose root accepts the JSON texts that validate against a
// schema, for constrained decoding (OpenAI's response_format json_schema and json_object, tool
// arguments). The coverage, its limits and the choices a caller can change (whitespace, absent
// additionalProperties, the syntax, a prefix for rule names) are in
// docs/structured-output-schema.md.
//
// The same schema can instead give the grammar of Gemma 4's tool-call arguments
// (ValueSyntax::GemmaToolCall), the syntax the model writes between <|tool_call>call:NAME and
// <tool_call|>: strings are the special token <|"|>, the raw text, <|"|> again (no escapes, so
// lengths and patterns apply to the characters themselves), null is None, a key is bare unless
// the server's reader could not read it back bare (then it is quoted like a string), and there
// is no whitespace; the rest is JSON's. A string or key that holds the text <|"|> cannot be
// written and is an error. A rule prefix lets several grammars (one per tool) share one text.
//
// The compiler builds each rule as an expression tree, then checks the whole grammar before
// printing it: rules that derive no finite text are pruned (a `false` subschema, an optional
// property whose schema can never be met), and a `$ref` cycle that consumes no input is an
// error naming the references (the matcher could never leave it). Strings are exact: free text
// accepts every JSON spelling of a character (`é`, `\u00e9`, `\u00E9`), and minLength,
// maxLength and pattern count decoded characters, a surrogate-pair escape being one. Fixed text
// (property names, enum and const values) is matched in its canonical spelling, nlohmann's
// compact dump.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/grammar/detail/rule_cycles.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// The text the grammar's values are written in.
enum class ValueSyntax : std::uint8_t {
    /// JSON text.
    Json,
    /// Gemma 4's tool-call arguments (docs/structured-output-schema.md): strings as
    /// <|"|>raw text<|"|> (the special token, no escapes), null as None, object keys bare unless
    /// a bare key would not read back, numbers, booleans and brackets as in JSON, no whitespace.
    GemmaToolCall,
};

/// How json_schema_to_gbnf reads a schema and shapes the JSON it allows.
struct JsonSchemaOptions {
    /// An object schema with `properties` or `required` but no `additionalProperties` allows no
    /// other key, as in OpenAI's strict mode: a key the schema does not name is one the caller
    /// does not read, and a model left free to add keys often does. false follows JSON Schema
    /// (any other key, any value). An object schema with neither `properties` nor `required`
    /// allows any keys either way: `{"type": "object"}` means any object.
    bool strict_additional_properties = true;
    /// Whitespace between JSON tokens. 0 (the default) allows none, so replies are compact, as
    /// OpenAI's structured outputs are, and no step of decoding spends a token on layout.
    /// N > 0 allows up to N characters of space, tab, newline and carriage return at each place
    /// JSON allows whitespace between tokens (never before or after the whole value).
    std::uint32_t max_whitespace = 0;
    /// Bounds for schemas that come from requests: how deep subschemas (and const values, and
    /// groups in a pattern) may nest, the largest count one repetition may have (minLength,
    /// maxItems, {m,n} in a pattern; GrammarLimits::max_repeat's default), and the size of the
    /// grammar text (GrammarLimits::max_text_bytes's default).
    std::uint32_t max_depth = 64;
    std::uint32_t max_repetition = 10000;
    std::size_t max_grammar_bytes = std::size_t{1} << 20;
    /// JSON, or Gemma's tool-call syntax (which has no whitespace: max_whitespace must be 0).
    ValueSyntax syntax = ValueSyntax::Json;
    /// Put before every rule name, so that grammars compiled with different prefixes can be
    /// joined into one text: with "p0-" the start rule is p0-root. Letters, digits, '-' and '_'.
    std::string rule_prefix;
};

namespace detail::schema_gbnf {

// ---------------------------------------------------------------------------------------------
// Sets of code points

inline constexpr char32_t kMaxCodePoint = 0x10FFFF;

/// A set of Unicode scalar values (surrogates are never members), as sorted, disjoint,
/// non-adjacent ranges.
class CodePointSet {
public:
    using Range = std::pair<char32_t, char32_t>;

    static CodePointSet of(char32_t c) { return range(c, c); }
    static CodePointSet range(char32_t lo, char32_t hi) {
        CodePointSet s;
        s.add(lo, hi);
        return s;
    }
    static CodePointSet scalars() { return range(0, kMaxCodePoint); }

    void add(char32_t lo, char32_t hi) {
        ranges_.emplace_back(lo, hi);
        normalize();
    }
    void add(const CodePointSet& other) {
        ranges_.insert(ranges_.end(), other.ranges_.begin(), other.ranges_.end());
        normalize();
    }

    CodePointSet complement() const {
        CodePointSet out;
        char32_t next = 0;
        for (const auto& [lo, hi] : ranges_) {
            if (lo > next) out.ranges_.emplace_back(next, lo - 1);
            next = hi + 1;
        }
        if (next <= kMaxCodePoint) out.ranges_.emplace_back(next, kMaxCodePoint);
        out.normalize();
        return out;
    }

    /// The set of possibly overlapping, unsorted ranges, normalized once.
    static CodePointSet of_ranges(std::vector<Range> ranges) {
        CodePointSet s;
        s.ranges_ = std::move(ranges);
        s.normalize();
        return s;
    }

    CodePointSet intersect(const CodePointSet& other) const {
        CodePointSet out;
        for (std::size_t i = 0, j = 0; i < ranges_.size() && j < other.ranges_.size();) {
            const auto& [lo, hi] = ranges_[i];
            const auto& [olo, ohi] = other.ranges_[j];
            if (olo <= hi && ohi >= lo) out.ranges_.emplace_back(std::max(lo, olo), std::min(hi, ohi));
            (hi < ohi) ? ++i : ++j;
        }
        return out;
    }

    CodePointSet minus(const CodePointSet& other) const { return intersect(other.complement()); }

    bool empty() const { return ranges_.empty(); }
    bool is_single() const { return ranges_.size() == 1 && ranges_[0].first == ranges_[0].second; }
    bool contains(char32_t c) const {
        return std::any_of(ranges_.begin(), ranges_.end(), [c](const Range& r) { return r.first <= c && c <= r.second; });
    }
    const std::vector<Range>& ranges() const { return ranges_; }

    friend bool operator==(const CodePointSet&, const CodePointSet&) = default;
    friend auto operator<=>(const CodePointSet&, const CodePointSet&) = default;

private:
    /// Sorts and merges the ranges and takes the surrogates out.
    void normalize() {
        std::sort(ranges_.begin(), ranges_.end());
        std::vector<Range> merged;
        for (const Range& r : ranges_) {
            if (!merged.empty() && r.first <= merged.back().second + 1)
                merged.back().second = std::max(merged.back().second, r.second);
            else
                merged.push_back(r);
        }
        ranges_.clear();
        for (const auto& [lo, hi] : merged) {
            if (lo < 0xD800) ranges_.emplace_back(lo, std::min<char32_t>(hi, 0xD7FF));
            if (hi > 0xDFFF) ranges_.emplace_back(std::max<char32_t>(lo, 0xE000), hi);
        }
    }

    std::vector<Range> ranges_;
};

/// What a regular expression's `.` matches: everything but the line terminators.
inline CodePointSet dot_set() {
    CodePointSet lines;
    for (const char32_t c : {U'\n', U'\r', U'\u2028', U'\u2029'}) lines.add(c, c);
    return CodePointSet::scalars().minus(lines);
}

// ---------------------------------------------------------------------------------------------
// The grammar as expressions

/// One rule body or a part of one. A Choice with no items derives nothing; a Sequence with no
/// items derives the empty text. Build them with the functions below, which keep them simple.
struct Expr {
    enum class Kind : std::uint8_t { Literal, Chars, Rule, Sequence, Choice, Repeat, Token };
    Kind kind = Kind::Sequence;
    std::u32string text;            ///< Literal: never empty; Token: the special token's text
    CodePointSet chars;             ///< Chars: never empty
    std::string rule;               ///< Rule: the name
    std::vector<Expr> items;        ///< Sequence, Choice; Repeat: the one item repeated
    std::uint32_t min = 0, max = 0; ///< Repeat
    bool unbounded = false;         ///< Repeat without a max
};

inline Expr empty() { return Expr{}; }
inline Expr nothing() {
    Expr e;
    e.kind = Expr::Kind::Choice;
    return e;
}
inline bool is_nothing(const Expr& e) { return e.kind == Expr::Kind::Choice && e.items.empty(); }
inline bool is_empty(const Expr& e) { return e.kind == Expr::Kind::Sequence && e.items.empty(); }

inline Expr literal(std::u32string text) {
    if (text.empty()) return empty();
    Expr e;
    e.kind = Expr::Kind::Literal;
    e.text = std::move(text);
    return e;
}
inline Expr token(std::string_view ascii) { return literal(std::u32string(ascii.begin(), ascii.end())); }

/// One special token, named by its text (ASCII, "<...>" without a '>' inside).
inline Expr special_token(std::string_view text) {
    Expr e;
    e.kind = Expr::Kind::Token;
    e.text.assign(text.begin(), text.end());
    return e;
}

inline Expr chars(CodePointSet set) {
    if (set.empty()) return nothing();
    if (set.is_single()) return literal(std::u32string(1, set.ranges()[0].first));
    Expr e;
    e.kind = Expr::Kind::Chars;
    e.chars = std::move(set);
    return e;
}

inline Expr rule(std::string name) {
    Expr e;
    e.kind = Expr::Kind::Rule;
    e.rule = std::move(name);
    return e;
}

/// The items in order; nested sequences are flattened and neighbouring literals joined.
inline Expr seq(std::vector<Expr> items) {
    Expr out;
    for (Expr& item : items) {
        if (is_nothing(item)) return nothing();
        std::vector<Expr> parts;
        if (item.kind == Expr::Kind::Sequence) parts = std::move(item.items);
        else parts.push_back(std::move(item));
        for (Expr& part : parts) {
            if (part.kind == Expr::Kind::Literal && !out.items.empty() && out.items.back().kind == Expr::Kind::Literal)
                out.items.back().text += part.text;
            else
                out.items.push_back(std::move(part));
        }
    }
    if (out.items.size() == 1) return std::move(out.items[0]);
    return out;
}

/// Any one of the items; items that derive nothing are dropped, nested choices flattened.
inline Expr choice(std::vector<Expr> items) {
    Expr out = nothing();
    for (Expr& item : items) {
        if (item.kind == Expr::Kind::Choice) {
            for (Expr& inner : item.items) out.items.push_back(std::move(inner));
        } else {
            out.items.push_back(std::move(item));
        }
    }
    if (out.items.size() == 1) return std::move(out.items[0]);
    return out;
}

/// `item` repeated min..max times (no max: any number of times).
inline Expr repeat(Expr item, std::uint32_t min, std::optional<std::uint32_t> max) {
    if (is_nothing(item)) return min == 0 ? empty() : nothing();
    if (is_empty(item) || (max && *max == 0)) return empty();
    if (min == 1 && max == 1u) return item;
    Expr e;
    e.kind = Expr::Kind::Repeat;
    e.items.push_back(std::move(item));
    e.min = min;
    e.max = max.value_or(0);
    e.unbounded = !max;
    return e;
}
inline Expr star(Expr item) { return repeat(std::move(item), 0, std::nullopt); }
inline Expr optional(Expr item) { return repeat(std::move(item), 0, 1); }

// ---------------------------------------------------------------------------------------------
// Printing as GBNF

inline void print_hex(std::string& out, std::uint32_t value, int digits) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (int i = digits - 1; i >= 0; --i) out += kHex[(value >> (4 * i)) & 0xF];
}

/// One code point inside "..." or [...]: the grammar text stays ASCII.
inline void print_code_point(std::string& out, char32_t c, bool in_class) {
    switch (c) {
        case '"': out += "\\\""; return;
        case '\\': out += "\\\\"; return;
        case '\n': out += "\\n"; return;
        case '\r': out += "\\r"; return;
        case '\t': out += "\\t"; return;
        default: break;
    }
    if (in_class && (c == ']' || c == '[' || c == '-' || c == '^')) {
        out += '\\';
        out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
        out += "\\x";
        print_hex(out, c, 2);
    } else if (c < 0x80) {
        out += static_cast<char>(c);
    } else if (c <= 0xFFFF) {
        out += "\\u";
        print_hex(out, c, 4);
    } else {
        out += "\\U";
        print_hex(out, c, 8);
    }
}

/// A class, written as its ranges or as the complement of its complement, whichever is
/// shorter. A negated class also holds the surrogates, which never occur in text.
inline void print_class(std::string& out, const CodePointSet& set) {
    if (set == CodePointSet::scalars()) {
        out += '.';
        return;
    }
    const CodePointSet complement = set.complement();
    const bool negated = complement.ranges().size() < set.ranges().size();
    out += negated ? "[^" : "[";
    for (const auto& [lo, hi] : (negated ? complement : set).ranges()) {
        print_code_point(out, lo, true);
        if (hi == lo) continue;
        if (hi > lo + 1) out += '-';
        print_code_point(out, hi, true);
    }
    out += ']';
}

/// Where an expression is printed: a whole rule body, an item of a sequence or choice, or the
/// operand of a repetition.
enum class Place { Body, Item, Operand };

inline void print_expr(std::string& out, const Expr& e, Place place);

inline void print_repeat_suffix(std::string& out, const Expr& e) {
    if (e.unbounded && e.min <= 1) {
        out += e.min == 0 ? '*' : '+';
    } else if (!e.unbounded && e.min == 0 && e.max == 1) {
        out += '?';
    } else {
        out += '{' + std::to_string(e.min);
        if (e.unbounded) out += ',';
        else if (e.max != e.min) out += ',' + std::to_string(e.max);
        out += '}';
    }
}

inline void print_expr(std::string& out, const Expr& e, Place place) {
    using K = Expr::Kind;
    const bool wrap = (e.kind == K::Choice && place != Place::Body) ||
                      (e.kind == K::Sequence && place == Place::Operand && e.items.size() > 1) ||
                      (e.kind == K::Literal && place == Place::Operand && e.text.size() > 1) ||
                      (e.kind == K::Repeat && place == Place::Operand);
    if (wrap) out += "( ";
    switch (e.kind) {
        case K::Literal:
            out += '"';
            for (const char32_t c : e.text) print_code_point(out, c, false);
            out += '"';
            break;
        case K::Chars: print_class(out, e.chars); break;
        case K::Token:
            for (const char32_t c : e.text) out += static_cast<char>(c);
            break;
        case K::Rule: out += e.rule; break;
        case K::Sequence:
            if (e.items.empty()) out += "\"\"";
            for (std::size_t i = 0; i < e.items.size(); ++i) {
                if (i) out += ' ';
                print_expr(out, e.items[i], Place::Item);
            }
            break;
        case K::Choice:
            for (std::size_t i = 0; i < e.items.size(); ++i) {
                if (i) out += " | ";
                print_expr(out, e.items[i], Place::Item);
            }
            break;
        case K::Repeat:
            print_expr(out, e.items[0], Place::Operand);
            print_repeat_suffix(out, e);
            break;
    }
    if (wrap) out += " )";
}

// ---------------------------------------------------------------------------------------------
// Digit strings: integer ranges and the hex digits of \u escapes

/// The grammar of one digit in [lo, hi].
using DigitClass = Expr (*)(int lo, int hi);

inline Expr decimal_digit(int lo, int hi) {
    return chars(CodePointSet::range(static_cast<char32_t>('0' + lo), static_cast<char32_t>('0' + hi)));
}

/// Hex digits, letters in either case (JSON's \u escapes take both).
inline Expr hex_digit(int lo, int hi) {
    CodePointSet set;
    if (lo <= 9) set.add(static_cast<char32_t>('0' + lo), static_cast<char32_t>('0' + std::min(hi, 9)));
    if (hi >= 10) {
        const int from = std::max(lo, 10) - 10, to = hi - 10;
        set.add(static_cast<char32_t>('a' + from), static_cast<char32_t>('a' + to));
        set.add(static_cast<char32_t>('A' + from), static_cast<char32_t>('A' + to));
    }
    return chars(std::move(set));
}

/// The digit strings of one length between lo and hi (inclusive, most significant digit first):
/// at the first digit where they differ, lo's digit followed by anything from lo's rest up, the
/// digits between followed by anything, hi's digit followed by anything up to hi's rest. The
/// alternatives start with different digits, so the grammar is unambiguous.
inline Expr fixed_width_range(const std::vector<int>& lo, const std::vector<int>& hi, std::size_t from, int base,
                              DigitClass digit) {
    if (from == lo.size()) return empty();
    if (lo[from] == hi[from]) return seq({digit(lo[from], lo[from]), fixed_width_range(lo, hi, from + 1, base, digit)});
    const auto rest = static_cast<std::uint32_t>(lo.size() - from - 1);
    const bool lo_rest_lowest = std::all_of(lo.begin() + static_cast<std::ptrdiff_t>(from) + 1, lo.end(), [](int d) { return d == 0; });
    const bool hi_rest_highest =
        std::all_of(hi.begin() + static_cast<std::ptrdiff_t>(from) + 1, hi.end(), [base](int d) { return d == base - 1; });
    std::vector<int> lowest(lo.size(), 0), highest(lo.size(), base - 1);
    std::vector<Expr> alternatives;
    if (!lo_rest_lowest) {
        std::copy(lo.begin(), lo.end(), highest.begin());
        std::fill(highest.begin() + static_cast<std::ptrdiff_t>(from) + 1, highest.end(), base - 1);
        alternatives.push_back(seq({digit(lo[from], lo[from]), fixed_width_range(lo, highest, from + 1, base, digit)}));
    }
    const int first_free = lo_rest_lowest ? lo[from] : lo[from] + 1;
    const int last_free = hi_rest_highest ? hi[from] : hi[from] - 1;
    if (first_free <= last_free)
        alternatives.push_back(seq({digit(first_free, last_free), repeat(digit(0, base - 1), rest, rest)}));
    if (!hi_rest_highest) {
        std::copy(hi.begin(), hi.end(), lowest.begin());
        std::fill(lowest.begin() + static_cast<std::ptrdiff_t>(from) + 1, lowest.end(), 0);
        alternatives.push_back(seq({digit(hi[from], hi[from]), fixed_width_range(lowest, hi, from + 1, base, digit)}));
    }
    return choice(std::move(alternatives));
}

inline std::vector<int> digits_of(std::uint64_t value, int base, std::size_t width = 0) {
    std::vector<int> digits;
    do {
        digits.push_back(static_cast<int>(value % static_cast<std::uint64_t>(base)));
        value /= static_cast<std::uint64_t>(base);
    } while (value > 0);
    while (digits.size() < width) digits.push_back(0);
    std::reverse(digits.begin(), digits.end());
    return digits;
}

inline std::uint64_t power_of_ten(std::size_t exponent) {
    std::uint64_t p = 1;
    for (std::size_t i = 0; i < exponent; ++i) p *= 10;
    return p;
}

/// Integers of at most this many digits: every integer the grammar allows, bounded or not.
/// llama.cpp draws the same line, and it keeps a model from running on with digits.
inline constexpr std::size_t kMaxIntegerDigits = 16;
inline constexpr std::int64_t kMaxIntegerMagnitude = 9'999'999'999'999'999;  // 16 nines
inline constexpr std::size_t kMaxFractionDigits = 16;
inline constexpr std::size_t kMaxExponentDigits = 2;  // with the above, every number is a finite double

/// Decimal numerals of the integers in [a, b], without leading zeros. Each digit count gets its
/// own range; runs of digit counts that are complete ([1-9] then n − 1 digits) merge into one.
inline Expr decimal_magnitudes(std::uint64_t a, std::uint64_t b) {
    const std::size_t len_a = digits_of(a, 10).size(), len_b = digits_of(b, 10).size();
    std::vector<Expr> alternatives;
    for (std::size_t d = len_a; d <= len_b;) {
        const std::uint64_t lo = d == len_a ? a : power_of_ten(d - 1);
        const std::uint64_t hi = d == len_b ? b : power_of_ten(d) - 1;
        if (d >= 2 && lo == power_of_ten(d - 1) && hi == power_of_ten(d) - 1) {
            std::size_t last = d;
            while (last + 1 < len_b || (last + 1 == len_b && b == power_of_ten(len_b) - 1)) ++last;
            alternatives.push_back(seq({decimal_digit(1, 9), repeat(decimal_digit(0, 9), static_cast<std::uint32_t>(d - 1),
                                                                    static_cast<std::uint32_t>(last - 1))}));
            d = last + 1;
            continue;
        }
        alternatives.push_back(fixed_width_range(digits_of(lo, 10), digits_of(hi, 10), 0, 10, decimal_digit));
        ++d;
    }
    return choice(std::move(alternatives));
}

/// The JSON integers in [lo, hi] (|lo|, |hi| ≤ kMaxIntegerMagnitude). "-0" is the integer 0, so
/// it is there when 0 is.
inline Expr integer_range(std::int64_t lo, std::int64_t hi) {
    std::vector<Expr> alternatives;
    if (hi >= 0) alternatives.push_back(decimal_magnitudes(static_cast<std::uint64_t>(std::max<std::int64_t>(lo, 0)),
                                                           static_cast<std::uint64_t>(hi)));
    if (lo <= 0)
        alternatives.push_back(seq({token("-"), decimal_magnitudes(static_cast<std::uint64_t>(hi >= 0 ? 0 : -hi),
                                                                   static_cast<std::uint64_t>(-lo))}));
    return choice(std::move(alternatives));
}

// ---------------------------------------------------------------------------------------------
// JSON string characters

/// The four hex digits of the code units in [lo, hi].
inline Expr hex4_range(std::uint32_t lo, std::uint32_t hi) {
    return fixed_width_range(digits_of(lo, 16, 4), digits_of(hi, 16, 4), 0, 16, hex_digit);
}

/// After "\u": the escapes of the astral code points in [a, b], as surrogate pairs grouped by
/// their high surrogate.
inline Expr surrogate_pair_escapes(char32_t a, char32_t b) {
    const std::uint32_t va = a - 0x10000, vb = b - 0x10000;
    const std::uint32_t ha = va >> 10, la = va & 0x3FF, hb = vb >> 10, lb = vb & 0x3FF;
    auto pairs = [](std::uint32_t h1, std::uint32_t h2, std::uint32_t l1, std::uint32_t l2) {
        return seq({hex4_range(0xD800 + h1, 0xD800 + h2), token("\\u"), hex4_range(0xDC00 + l1, 0xDC00 + l2)});
    };
    if (ha == hb) return pairs(ha, ha, la, lb);
    std::vector<Expr> alternatives;
    std::uint32_t full_from = ha, full_to = hb;
    if (la != 0) {
        alternatives.push_back(pairs(ha, ha, la, 0x3FF));
        ++full_from;
    }
    if (lb != 0x3FF) --full_to;
    if (full_from <= full_to) alternatives.push_back(pairs(full_from, full_to, 0, 0x3FF));
    if (lb != 0x3FF) alternatives.push_back(pairs(hb, hb, 0, lb));
    return choice(std::move(alternatives));
}

/// What may follow "\u" to spell one of `set`'s code points: four hex digits of a code point
/// outside the surrogates, or a surrogate pair.
inline Expr unicode_escapes(const CodePointSet& set) {
    std::vector<Expr> alternatives;
    for (const auto& [lo, hi] : set.ranges()) {
        if (lo <= 0xFFFF) alternatives.push_back(hex4_range(lo, std::min<char32_t>(hi, 0xFFFF)));
        if (hi >= 0x10000) alternatives.push_back(surrogate_pair_escapes(std::max<char32_t>(lo, 0x10000), hi));
    }
    return choice(std::move(alternatives));
}

/// One character of a JSON string's content whose decoded value is in `set`, in every
/// spelling JSON has for it: as itself (unless it is '"', '\' or a control character), as a
/// two-character escape, or as \uXXXX (a surrogate pair above U+FFFF).
inline Expr json_string_char(const CodePointSet& set) {
    CodePointSet specials = CodePointSet::range(0, 0x1F);  // the control characters, which JSON escapes
    specials.add('"', '"');
    specials.add('\\', '\\');
    CodePointSet short_escapes;
    static constexpr std::pair<char32_t, char32_t> kShort[] = {{'"', '"'},  {'\\', '\\'}, {'/', '/'}, {'b', 0x08},
                                                               {'f', 0x0C}, {'n', 0x0A},  {'r', 0x0D}, {'t', 0x09}};
    for (const auto& [letter, value] : kShort)
        if (set.contains(value)) short_escapes.add(letter, letter);
    std::vector<Expr> escapes;
    escapes.push_back(chars(short_escapes));
    escapes.push_back(seq({token("u"), unicode_escapes(set)}));
    return choice({chars(set.minus(specials)), seq({token("\\"), choice(std::move(escapes))})});
}

// ---------------------------------------------------------------------------------------------
// UTF-8

/// The code points of UTF-8 text; nullopt when it is not valid UTF-8.
inline std::optional<std::u32string> decode_utf8(std::string_view text) {
    std::u32string out;
    for (std::size_t i = 0; i < text.size();) {
        const auto lead = static_cast<unsigned char>(text[i]);
        const std::size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 0;
        if (length == 0 || i + length > text.size()) return std::nullopt;
        char32_t c = length == 1 ? lead : lead & (0x7Fu >> length);
        for (std::size_t k = 1; k < length; ++k) {
            const auto b = static_cast<unsigned char>(text[i + k]);
            if ((b & 0xC0) != 0x80) return std::nullopt;
            c = (c << 6) | (b & 0x3F);
        }
        static constexpr char32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
        if (c < kSmallest[length] || c > kMaxCodePoint || (c >= 0xD800 && c <= 0xDFFF)) return std::nullopt;
        out += c;
        i += length;
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// Rules: naming, the checks over the whole grammar, and the text

struct Rule {
    std::string name;
    std::optional<Expr> body;
    std::string origin;  ///< for a $ref target: "#/$defs/...", named in error messages
};

/// The rules in the order they were named (root first), each with a unique GBNF name.
class RuleTable {
public:
    /// Names taken by the shared rules, so that no property or definition takes one.
    explicit RuleTable(std::initializer_list<const char*> reserved) {
        for (const char* name : reserved) taken_.insert(name);
    }

    /// A new rule named after `hint` (characters GBNF does not take become '-'; a number is
    /// appended when the name is taken).
    std::string reserve(std::string_view hint, std::string origin = {}) {
        const std::string base = sanitize(hint);
        std::string name = base;
        while (taken_.count(name)) name = base + "-" + std::to_string(++suffix_[base]);
        return add(std::move(name), std::move(origin));
    }
    /// A rule with exactly this name (root and the shared rules).
    std::string reserve_exact(const std::string& name) { return add(name, {}); }

    void define(const std::string& name, Expr body) { rules_[index_.at(name)].body = std::move(body); }
    bool has(const std::string& name) const { return index_.count(name) != 0; }

    std::vector<Rule>& rules() { return rules_; }

private:
    std::string add(std::string name, std::string origin) {
        taken_.insert(name);
        index_.emplace(name, rules_.size());
        rules_.push_back({name, std::nullopt, std::move(origin)});
        return name;
    }

    static std::string sanitize(std::string_view hint) {
        std::string out;
        for (const char c : hint) {
            const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
            if (keep) out += c;
            else if (!out.empty() && out.back() != '-') out += '-';
            if (out.size() >= 48) break;
        }
        while (!out.empty() && out.back() == '-') out.pop_back();
        return out.empty() ? std::string("rule") : out;
    }

    std::vector<Rule> rules_;
    std::unordered_map<std::string, std::size_t> index_;
    std::unordered_set<std::string> taken_;
    std::unordered_map<std::string, unsigned> suffix_;
};

/// The analyses over finished rules, which refer to each other by index.
class GrammarCheck {
public:
    explicit GrammarCheck(const std::vector<Rule>& rules) : rules_(rules) {
        for (std::size_t i = 0; i < rules_.size(); ++i) index_.emplace(rules_[i].name, i);
    }

    /// Rules that derive some finite text (true) or the empty text (false), by a worklist: a
    /// rule is looked at again only when a rule it refers to changes.
    std::vector<bool> derives(bool text_not_empty) const {
        const std::size_t n = rules_.size();
        std::vector<std::vector<std::size_t>> users(n);
        for (std::size_t r = 0; r < n; ++r) {
            std::set<std::size_t> refs;
            collect_refs(*rules_[r].body, refs);
            for (const std::size_t used : refs) users[used].push_back(r);
        }
        std::vector<bool> flag(n, false), queued(n, true);
        std::vector<std::size_t> work(n);
        for (std::size_t r = 0; r < n; ++r) work[r] = n - 1 - r;
        while (!work.empty()) {
            const std::size_t r = work.back();
            work.pop_back();
            queued[r] = false;
            if (flag[r] || !holds(*rules_[r].body, flag, text_not_empty)) continue;
            flag[r] = true;
            for (const std::size_t u : users[r])
                if (!flag[u] && !queued[u]) {
                    queued[u] = true;
                    work.push_back(u);
                }
        }
        return flag;
    }

    /// Whether `e` derives a finite text (or the empty text) given the rules' flags: literals
    /// and classes derive text and never the empty text, a repetition of zero derives both.
    bool holds(const Expr& e, const std::vector<bool>& flag, bool text_not_empty) const {
        switch (e.kind) {
            case Expr::Kind::Literal:
            case Expr::Kind::Token:
            case Expr::Kind::Chars: return text_not_empty;
            case Expr::Kind::Rule: return flag[index_.at(e.rule)];
            case Expr::Kind::Sequence:
                return std::all_of(e.items.begin(), e.items.end(), [&](const Expr& i) { return holds(i, flag, text_not_empty); });
            case Expr::Kind::Choice:
                return std::any_of(e.items.begin(), e.items.end(), [&](const Expr& i) { return holds(i, flag, text_not_empty); });
            case Expr::Kind::Repeat: return e.min == 0 || holds(e.items[0], flag, text_not_empty);
        }
        return false;
    }

    /// References to rules that derive nothing become nothing, which the constructors fold.
    Expr prune(const Expr& e, const std::vector<bool>& productive) const {
        std::vector<Expr> items;
        for (const Expr& item : e.items) items.push_back(prune(item, productive));
        switch (e.kind) {
            case Expr::Kind::Rule: return productive[index_.at(e.rule)] ? e : nothing();
            case Expr::Kind::Sequence: return seq(std::move(items));
            case Expr::Kind::Choice: return choice(std::move(items));
            case Expr::Kind::Repeat: return repeat(std::move(items[0]), e.min, e.unbounded ? std::nullopt : std::optional(e.max));
            default: return e;
        }
    }

    /// The rules `e` can begin with before it has matched a character.
    void leading_rules(const Expr& e, const std::vector<bool>& nullable, std::vector<std::size_t>& out) const {
        switch (e.kind) {
            case Expr::Kind::Rule: out.push_back(index_.at(e.rule)); return;
            case Expr::Kind::Sequence:
                for (const Expr& item : e.items) {
                    leading_rules(item, nullable, out);
                    if (!holds(item, nullable, false)) return;
                }
                return;
            case Expr::Kind::Choice:
            case Expr::Kind::Repeat:
                for (const Expr& item : e.items) leading_rules(item, nullable, out);
                return;
            default: return;
        }
    }

    /// A cycle of rules that can each begin with the next (left recursion), or an empty list.
    std::vector<std::size_t> left_recursive_cycle() const;

    void collect_refs(const Expr& e, std::set<std::size_t>& out) const {
        if (e.kind == Expr::Kind::Rule) out.insert(index_.at(e.rule));
        for (const Expr& item : e.items) collect_refs(item, out);
    }

private:
    const std::vector<Rule>& rules_;
    std::unordered_map<std::string, std::size_t> index_;
};

inline std::vector<std::size_t> GrammarCheck::left_recursive_cycle() const {
    const std::vector<bool> nullable = derives(false);
    std::vector<std::vector<std::size_t>> starts(rules_.size());
    for (std::size_t r = 0; r < rules_.size(); ++r) leading_rules(*rules_[r].body, nullable, starts[r]);
    return find_rule_cycle(starts);
}

/// How deep parentheses may nest in one rule before a part moves to a rule of its own (the
/// GBNF parser takes 200).
inline constexpr std::uint32_t kMaxInlineNesting = 24;

/// Moves parts nested deeper than kMaxInlineNesting into rules named after `owner`.
inline Expr hoist_deep_parts(Expr e, std::uint32_t depth, const std::string& owner, RuleTable& table,
                             std::vector<std::pair<std::string, Expr>>& hoisted) {
    const bool compound = e.kind == Expr::Kind::Sequence || e.kind == Expr::Kind::Choice || e.kind == Expr::Kind::Repeat;
    if (!compound) return e;
    if (depth > kMaxInlineNesting) {
        const std::string name = table.reserve(owner + "-part");
        hoisted.emplace_back(name, hoist_deep_parts(std::move(e), 0, owner, table, hoisted));
        return rule(name);
    }
    for (Expr& item : e.items) item = hoist_deep_parts(std::move(item), depth + 1, owner, table, hoisted);
    return e;
}

/// One line per rule; a long choice puts each alternative on its own `|` line.
inline std::string print_rules(const std::vector<Rule>& rules) {
    std::string out;
    for (const Rule& r : rules) {
        const Expr& body = *r.body;
        std::string line = r.name + " ::= ";
        const std::size_t body_start = line.size();
        print_expr(line, body, Place::Body);
        if (body.kind == Expr::Kind::Choice && line.size() > 100) {
            line.resize(body_start);
            for (std::size_t i = 0; i < body.items.size(); ++i) {
                if (i) line += "\n    | ";
                print_expr(line, body.items[i], Place::Item);
            }
        }
        out += line;
        out += '\n';
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// Regular expressions (the `pattern` keyword and the formats)

/// A `pattern`, ECMA-262 syntax read as code points (the `u` flag), compiled to the grammar of
/// the string contents it matches. Without ^ (or $) a branch may have anything before (after)
/// it, as JSON Schema's patterns are searched for, not matched whole. `unit` gives the grammar
/// of one string character in a set. Supported: literals and escapes, `.`, classes with ranges
/// and negation, \d \w \s and their complements, groups (capturing, (?:...), (?<name>...)),
/// alternation, greedy and lazy quantifiers, ^ and $ at the ends of the top-level branches.
/// `part` makes a rule of an expression that several alternatives share.
template <class Unit, class Part>
class PatternCompiler {
public:
    PatternCompiler(std::u32string pattern, Unit unit, Part part, std::uint32_t max_depth, std::uint32_t max_repetition)
        : p_(std::move(pattern)), unit_(std::move(unit)), part_(std::move(part)), max_depth_(max_depth), max_repetition_(max_repetition) {}

    /// The grammar, or nothing with error() saying why the pattern is not supported.
    Expr compile() {
        std::vector<Expr> branches;
        do {
            const bool anchored_start = eat('^');
            Expr body = sequence(0, true);
            const bool anchored_end = eat('$');
            if (!error_.empty()) return nothing();
            if (anchored_end && !at_end() && peek() != '|') return fail("'$' is supported only at the end");
            branches.push_back(anchored(std::move(body), anchored_start, anchored_end));
        } while (eat('|'));
        if (!at_end()) return fail("unbalanced ')'");
        return choice(std::move(branches));
    }

    const std::string& error() const { return error_; }

private:
    /// A branch with anything allowed before and after it where it is not anchored (and so any
    /// text at all when the branch can match the empty text at an open end).
    Expr anchored(Expr body, bool at_start, bool at_end) {
        Expr anything = star(unit_(CodePointSet::scalars()));
        if (matches_empty(body) && !(at_start && at_end)) return anything;
        return seq({at_start ? empty() : anything, std::move(body), at_end ? empty() : anything});
    }

    bool at_end() const { return pos_ >= p_.size(); }
    char32_t peek(std::size_t ahead = 0) const { return pos_ + ahead < p_.size() ? p_[pos_ + ahead] : 0; }
    bool has(std::size_t ahead) const { return pos_ + ahead < p_.size(); }
    bool eat(char32_t c) {
        if (at_end() || p_[pos_] != c) return false;
        ++pos_;
        return true;
    }
    /// Records the first reason the pattern is refused; false, for the callers to return.
    bool reject(const std::string& what) {
        if (error_.empty()) error_ = what + " (at character " + std::to_string(pos_ + 1) + ")";
        return false;
    }
    Expr fail(const std::string& what) {
        reject(what);
        return nothing();
    }

    Expr alternation(std::uint32_t depth) {
        if (depth > max_depth_) return fail("groups nested deeper than " + std::to_string(max_depth_));
        std::vector<Expr> branches;
        do branches.push_back(sequence(depth, false));
        while (error_.empty() && eat('|'));
        return choice(std::move(branches));
    }

    /// Items up to '|', ')', the end, or (at the top level) a '$'.
    Expr sequence(std::uint32_t depth, bool top) {
        std::vector<Expr> items;
        while (error_.empty() && !at_end() && peek() != '|' && peek() != ')' && !(top && peek() == '$')) {
            Expr item = atom(depth);
            if (!error_.empty()) break;
            items.push_back(quantified(std::move(item)));
        }
        return seq(std::move(items));
    }

    Expr atom(std::uint32_t depth) {
        const char32_t c = peek();
        switch (c) {
            case '(': return group(depth);
            case '[': return unit_(char_class());
            case '.': ++pos_; return unit_(dot_set());
            case '\\': ++pos_; return atom_escape();
            case '^':
            case '$': return fail("anchors are supported only at the ends of the pattern");
            case '*':
            case '+':
            case '?':
            case '{': return fail("nothing to repeat");
            case ']':
            case '}': return fail(std::string("unescaped '") + static_cast<char>(c) + "'");
            default: ++pos_; return unit_(CodePointSet::of(c));
        }
    }

    Expr group(std::uint32_t depth) {
        ++pos_;  // '('
        if (eat('?')) {
            const bool named = peek() == '<' && peek(1) != '=' && peek(1) != '!';
            if (!named && !eat(':')) return fail("lookaround and other (? groups are not supported");
            if (named) {
                while (!at_end() && peek() != '>') ++pos_;
                if (!eat('>')) return fail("unterminated group name");
            }
        }
        Expr inner = alternation(depth + 1);
        if (!error_.empty()) return nothing();
        if (!eat(')')) return fail("missing ')'");
        return inner;
    }

    Expr quantified(Expr item) {
        std::uint32_t min = 0;
        std::optional<std::uint32_t> max;
        const char32_t c = peek();
        if (c == '*' || c == '+' || c == '?') {
            ++pos_;
            min = c == '+' ? 1 : 0;
            if (c == '?') max = 1;
        } else if (c == '{') {
            if (!bounds(min, max)) return nothing();
        } else {
            return item;
        }
        eat('?');  // lazy: the same strings match
        const char32_t next = peek();
        if (next == '*' || next == '+' || next == '?' || next == '{') return fail("nothing to repeat");
        return repeated(std::move(item), min, max);
    }

    /// GBNF's x* never ends when x can match the empty text (the parser refuses it as left
    /// recursion), so such a part is repeated without its empty match: (a?)* is (a)*, and
    /// (a?){2,3} is (a){0,3}.
    Expr repeated(Expr item, std::uint32_t min, std::optional<std::uint32_t> max) {
        if (!matches_empty(item)) return repeat(std::move(item), min, max);
        return repeat(without_empty(item), 0, max);
    }

    /// Whether `e` matches the empty text (the rules in a pattern are string characters).
    static bool matches_empty(const Expr& e) {
        switch (e.kind) {
            case Expr::Kind::Sequence: return std::all_of(e.items.begin(), e.items.end(), matches_empty);
            case Expr::Kind::Choice: return std::any_of(e.items.begin(), e.items.end(), matches_empty);
            case Expr::Kind::Repeat: return e.min == 0 || matches_empty(e.items[0]);
            default: return false;
        }
    }

    /// The texts of `e` but the empty one.
    Expr without_empty(const Expr& e) {
        switch (e.kind) {
            case Expr::Kind::Choice: {
                std::vector<Expr> alternatives;
                for (const Expr& item : e.items) alternatives.push_back(without_empty(item));
                return choice(std::move(alternatives));
            }
            case Expr::Kind::Repeat: {
                const Expr& item = e.items[0];
                const std::optional<std::uint32_t> max = e.unbounded ? std::nullopt : std::optional(e.max);
                if (matches_empty(item)) return repeat(without_empty(item), 1, max);
                return repeat(item, std::max<std::uint32_t>(e.min, 1), max);
            }
            case Expr::Kind::Sequence: return sequence_without_empty(e.items);
            default: return e;
        }
    }

    /// A non-empty text of a sequence begins with the first item that matches a non-empty text:
    /// the items before it match the empty text, those after it anything. The items after each
    /// candidate are a rule shared with the candidates before it, so the size stays linear.
    Expr sequence_without_empty(const std::vector<Expr>& items) {
        if (items.empty()) return nothing();
        std::size_t last = 0;  // the last item that can be the first non-empty one
        while (last + 1 < items.size() && matches_empty(items[last])) ++last;
        Expr after = seq(std::vector<Expr>(items.begin() + static_cast<std::ptrdiff_t>(last) + 1, items.end()));
        std::vector<Expr> alternatives;
        for (std::size_t i = last + 1; i-- > 0;) {
            alternatives.push_back(seq({without_empty(items[i]), after}));
            if (i > 0) after = part_(seq({items[i], std::move(after)}));
        }
        return choice(std::move(alternatives));
    }

    /// {m}, {m,} or {m,n}.
    bool bounds(std::uint32_t& min, std::optional<std::uint32_t>& max) {
        ++pos_;  // '{'
        if (!count(min)) return false;
        max = min;
        if (eat(',')) {
            max.reset();
            if (peek() != '}') {
                std::uint32_t m = 0;
                if (!count(m)) return false;
                max = m;
            }
        }
        if (!eat('}')) return reject("malformed {m,n} quantifier");
        if (max && *max < min) return reject("quantifier {" + std::to_string(min) + "," + std::to_string(*max) + "} has max below min");
        return true;
    }

    bool count(std::uint32_t& out) {
        const std::size_t start = pos_;
        std::uint64_t value = 0;
        while (peek() >= '0' && peek() <= '9') {
            value = value * 10 + (peek() - '0');
            if (value > max_repetition_) return reject("repetition count above the limit of " + std::to_string(max_repetition_));
            ++pos_;
        }
        if (pos_ == start) return reject("malformed {m,n} quantifier");
        out = static_cast<std::uint32_t>(value);
        return true;
    }

    Expr atom_escape() {
        if (const auto set = class_escape()) return unit_(*set);
        const auto c = char_escape(false);
        return c ? unit_(CodePointSet::of(*c)) : nothing();
    }

    /// \d \D \w \W \s \S, after the backslash (consumed when it is one of them).
    std::optional<CodePointSet> class_escape() {
        CodePointSet set;
        const char32_t c = peek();
        if (c == 'd' || c == 'D') {
            set.add('0', '9');
        } else if (c == 'w' || c == 'W') {
            for (const auto& [lo, hi] : {std::pair{U'a', U'z'}, {U'A', U'Z'}, {U'0', U'9'}, {U'_', U'_'}}) set.add(lo, hi);
        } else if (c == 's' || c == 'S') {
            for (const char32_t w : {U'\t', U'\n', U'\v', U'\f', U'\r', U' ', U'\u00A0', U'\u1680', U'\u2028', U'\u2029', U'\u202F',
                                     U'\u205F', U'\u3000', U'\uFEFF'})
                set.add(w, w);
            set.add(0x2000, 0x200A);
        } else {
            return std::nullopt;
        }
        ++pos_;
        return (c == 'D' || c == 'W' || c == 'S') ? set.complement() : set;
    }

    /// A character escape after the backslash; nullopt (with the error set) when unsupported.
    std::optional<char32_t> char_escape(bool in_class) {
        if (at_end()) {
            reject("the pattern ends with '\\'");
            return std::nullopt;
        }
        const char32_t c = p_[pos_++];
        switch (c) {
            case 't': return U'\t';
            case 'n': return U'\n';
            case 'r': return U'\r';
            case 'f': return U'\f';
            case 'v': return U'\v';
            case 'x': return hex_escape(2);
            case 'u': return unicode_escape();
            case '0':
                if (!(peek() >= '0' && peek() <= '9')) return U'\0';
                break;
            case 'b':
                if (in_class) return U'\b';
                break;
            default:
                if (std::u32string_view(U"^$\\.*+?()[]{}|/-").find(c) != std::u32string_view::npos) return c;
                break;
        }
        --pos_;
        std::string shown = "\\";
        if (c < 0x80) shown += static_cast<char>(c);
        reject("escape '" + shown + "' is not supported (backreferences, word boundaries, \\p{...} and \\c are not)");
        return std::nullopt;
    }

    std::optional<char32_t> hex_escape(int digits) {
        char32_t value = 0;
        for (int i = 0; i < digits; ++i, ++pos_) {
            const int d = hex_value(peek());
            if (d < 0) {
                reject("malformed hex escape");
                return std::nullopt;
            }
            value = value * 16 + static_cast<char32_t>(d);
        }
        return value;
    }

    /// \uHHHH (a surrogate pair as two of them) or \u{H...}.
    std::optional<char32_t> unicode_escape() {
        std::optional<char32_t> value;
        if (eat('{')) {
            char32_t v = 0;
            std::size_t digits = 0;
            for (int d; (d = hex_value(peek())) >= 0 && v <= kMaxCodePoint; ++pos_, ++digits) v = v * 16 + static_cast<char32_t>(d);
            if (digits > 0 && v <= kMaxCodePoint && eat('}')) value = v;
            else reject("malformed \\u{...} escape");
        } else {
            value = hex_escape(4);
        }
        if (!value) return std::nullopt;
        if (*value >= 0xD800 && *value <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
            pos_ += 2;
            const auto low = hex_escape(4);
            if (low && *low >= 0xDC00 && *low <= 0xDFFF) return 0x10000 + ((*value - 0xD800) << 10) + (*low - 0xDC00);
        }
        if (*value >= 0xD800 && *value <= 0xDFFF) {
            reject("unpaired surrogate escape");
            return std::nullopt;
        }
        return value;
    }

    static int hex_value(char32_t c) {
        if (c >= '0' && c <= '9') return static_cast<int>(c - '0');
        if (c >= 'a' && c <= 'f') return static_cast<int>(c - 'a' + 10);
        if (c >= 'A' && c <= 'F') return static_cast<int>(c - 'A' + 10);
        return -1;
    }

    /// [...] and [^...]; [] matches nothing and [^] anything, as in ECMA-262.
    CodePointSet char_class() {
        ++pos_;  // '['
        const bool negated = eat('^');
        std::vector<CodePointSet::Range> members;
        while (error_.empty() && !eat(']')) {
            if (at_end()) {
                reject("unterminated character class");
                break;
            }
            std::optional<CodePointSet> escaped;
            const std::optional<char32_t> lo = class_atom(escaped);
            const bool range = peek() == '-' && has(1) && peek(1) != ']';
            if (escaped && range) reject("a class escape cannot be the end of a range");
            if (escaped) members.insert(members.end(), escaped->ranges().begin(), escaped->ranges().end());
            if (!lo || !error_.empty()) continue;
            char32_t hi = *lo;
            if (range) {
                ++pos_;
                std::optional<CodePointSet> escaped_hi;
                const std::optional<char32_t> end = class_atom(escaped_hi);
                if (escaped_hi) reject("a class escape cannot be the end of a range");
                else if (end && *end < *lo) reject("character range out of order");
                if (!end || !error_.empty()) continue;
                hi = *end;
            }
            members.emplace_back(*lo, hi);
        }
        if (!error_.empty()) return CodePointSet{};
        const CodePointSet set = CodePointSet::of_ranges(std::move(members));
        return negated ? set.complement() : set;
    }

    /// One member of a class: a character, or (in `escaped`) the set of a class escape.
    std::optional<char32_t> class_atom(std::optional<CodePointSet>& escaped) {
        if (!eat('\\')) return p_[pos_++];
        if ((escaped = class_escape())) return std::nullopt;
        return char_escape(true);
    }

    std::u32string p_;
    Unit unit_;
    Part part_;
    std::uint32_t max_depth_, max_repetition_;
    std::size_t pos_ = 0;
    std::string error_;
};

/// The formats, as patterns (RFC 3339 dates and times, with the days of each month and leap
/// years; seconds 00-59, no leap second; RFC 4122 UUIDs in either case).
inline std::optional<std::string> format_pattern(std::string_view format) {
    static constexpr std::string_view kDate =
        R"((?:\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|02-(?:0[1-9]|1\d|2[0-8]))|)"
        R"((?:\d\d(?:0[48]|[2468][048]|[13579][26])|(?:0[048]|[2468][048]|[13579][26])00)-02-29))";
    static constexpr std::string_view kTime = R"((?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d+)?(?:[Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d))";
    const std::string date(kDate), time(kTime);
    if (format == "date") return "^" + date + "$";
    if (format == "time") return "^" + time + "$";
    if (format == "date-time") return "^" + date + "[Tt]" + time + "$";
    if (format == "uuid") return "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
    return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Keywords

inline bool is_one_of(std::string_view key, std::initializer_list<std::string_view> names) {
    return std::find(names.begin(), names.end(), key) != names.end();
}

/// Keywords that do not constrain the instance ($defs and definitions hold schemas that only a
/// $ref brings in; discriminator is OpenAPI's, which pydantic writes next to a oneOf).
inline bool is_annotation(std::string_view key) {
    return is_one_of(key, {"$comment", "$defs", "$id", "$schema", "default", "definitions", "deprecated", "description",
                           "discriminator", "examples", "readOnly", "title", "writeOnly"});
}

/// The instance type a keyword constrains, for the keywords that constrain one type.
enum class Family : std::uint8_t { None, Object, Array, String, Integer };

inline Family keyword_family(std::string_view key) {
    if (is_one_of(key, {"properties", "required", "additionalProperties"})) return Family::Object;
    if (is_one_of(key, {"items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems"})) return Family::Array;
    if (is_one_of(key, {"minLength", "maxLength", "pattern", "format"})) return Family::String;
    if (is_one_of(key, {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) return Family::Integer;
    return Family::None;
}

inline bool is_supported_keyword(std::string_view key) {
    return is_annotation(key) || keyword_family(key) != Family::None ||
           is_one_of(key, {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref"});
}

/// The JSON types, as bits of a TypeSet.
enum TypeBit : std::uint8_t {
    kNull = 1,
    kBoolean = 2,
    kInteger = 4,
    kNumber = 8,
    kString = 16,
    kArray = 32,
    kObject = 64,
};
using TypeSet = std::uint8_t;

inline std::optional<TypeBit> type_bit(std::string_view name) {
    static constexpr std::pair<std::string_view, TypeBit> kTypes[] = {{"null", kNull},     {"boolean", kBoolean}, {"integer", kInteger},
                                                                      {"number", kNumber}, {"string", kString},   {"array", kArray},
                                                                      {"object", kObject}};
    for (const auto& [n, bit] : kTypes)
        if (n == name) return bit;
    return std::nullopt;
}

inline TypeBit family_type(Family f) {
    switch (f) {
        case Family::Object: return kObject;
        case Family::Array: return kArray;
        case Family::String: return kString;
        default: return kInteger;
    }
}

inline const char* family_noun(Family f) {
    switch (f) {
        case Family::Object: return "objects";
        case Family::Array: return "arrays";
        case Family::String: return "strings";
        default: return "integers";
    }
}

/// A JSON pointer's reference token for a key.
inline std::string pointer_token(std::string_view key) {
    std::string out;
    for (const char c : key) {
        if (c == '~') out += "~0";
        else if (c == '/') out += "~1";
        else out += c;
    }
    return out;
}

/// `text` as a JSON string for a message: invalid UTF-8 replaced, long text cut.
inline std::string json_quoted(std::string_view text) {
    constexpr std::size_t kShown = 80;
    const bool cut = text.size() > kShown;
    std::string shown = nlohmann::json(std::string(text.substr(0, kShown))).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (cut) shown.insert(shown.size() - 1, "...");
    return shown;
}

// ---------------------------------------------------------------------------------------------
// Gemma 4's tool-call syntax (the server's writer and reader: examples/gemma4/server/tool_format.hpp)

/// The special token that opens and closes a string; the text between is raw.
inline constexpr std::string_view kGemmaQuote = "<|\"|>";
/// The characters that end a bare key when a call is read back.
inline constexpr std::string_view kBareKeyEnds = ":,{}[]<";
/// What the reader skips before a key and trims after a bare one (std::isspace in the C locale).
inline constexpr std::string_view kReaderSpace = " \t\n\v\f\r";

/// The set of the characters of an ASCII text.
inline CodePointSet letters(std::string_view ascii) {
    CodePointSet set;
    for (const char c : ascii) set.add(static_cast<char32_t>(c), static_cast<char32_t>(c));
    return set;
}

/// Whether a key reads back as itself written bare, which is when the writer writes it bare:
/// not empty, no character that ends a bare key, no '"' first (that starts a JSON-quoted key),
/// no space at either end (skipped before a key, trimmed after one).
inline bool writes_bare(const std::u32string& key) {
    const CodePointSet ends = letters(kBareKeyEnds), space = letters(kReaderSpace);
    return !key.empty() && std::none_of(key.begin(), key.end(), [&](char32_t c) { return ends.contains(c); }) && key.front() != '"' &&
           !space.contains(key.front()) && !space.contains(key.back());
}

/// The spellings of keys of one form, as a deterministic automaton: from each state, disjoint
/// sets of characters lead on; a key may end in an accepting state.
struct KeyForm {
    struct Edge {
        CodePointSet chars;
        std::size_t to;
    };
    std::string tail_hint;  ///< names the rules that spell the rest of a key from each state
    std::vector<std::vector<Edge>> edges;
    std::vector<bool> accepting;

    std::optional<std::size_t> step(std::size_t state, char32_t c) const {
        for (const Edge& e : edges[state])
            if (e.chars.contains(c)) return e.to;
        return std::nullopt;
    }
};

/// Bare keys, as writes_bare has them. States: 0 before the first character, 1 after a
/// character that is not a space, 2 after a space (a key cannot end there).
inline KeyForm bare_key_form() {
    const CodePointSet space = letters(kReaderSpace);
    const CodePointSet inner = CodePointSet::scalars().minus(letters(kBareKeyEnds)).minus(space);
    const CodePointSet first = inner.minus(CodePointSet::of('"'));
    return {"bare-key-tail", {{{first, 1}}, {{inner, 1}, {space, 2}}, {{inner, 1}, {space, 2}}}, {false, true, false}};
}

/// The raw text of a quoted key: any text.
inline KeyForm quoted_key_form() { return {"quoted-key-tail", {{{CodePointSet::scalars(), 0}}}, {true}}; }

/// A node of a trie of keys spelled in a KeyForm: the form's state after the node's prefix.
struct KeyTrieNode {
    std::size_t state = 0;
    std::map<char32_t, std::size_t> next;
    bool key_ends = false;
};

/// The trie of the keys that `form` can spell (the others need not be left out of it).
inline std::vector<KeyTrieNode> key_trie(const KeyForm& form, const std::vector<std::u32string>& keys) {
    std::vector<KeyTrieNode> trie(1);
    for (const std::u32string& key : keys) {
        std::size_t at = 0;
        bool spelled = true;
        for (const char32_t c : key) {
            const std::optional<std::size_t> state = form.step(trie[at].state, c);
            if (!state) {
                spelled = false;
                break;
            }
            const auto [it, added] = trie[at].next.try_emplace(c, trie.size());
            const std::size_t next = it->second;
            if (added) trie.push_back({*state, {}, false});
            at = next;
        }
        trie[at].key_ends |= spelled;
    }
    return trie;
}

// ---------------------------------------------------------------------------------------------
// The compiler

/// An object's properties and what else it allows, from one schema or merged from allOf.
template <class Json>
struct ObjectShape {
    struct Property {
        std::string key;
        const Json* schema;  ///< nullptr: any value
        std::string pointer;
        bool required = false;
    };
    enum class Additional : std::uint8_t { None, Any, Schema };

    std::vector<Property> properties;
    std::vector<std::string> required;  ///< in order, each once
    std::string required_pointer;
    bool names_properties = false;  ///< "properties" or "required" given: the strict default applies
    Additional additional = Additional::Any;
    const Json* additional_schema = nullptr;
    std::string additional_pointer;
    bool additional_given = false;
};

/// Compiles one schema document. Json is nlohmann::json or nlohmann::ordered_json (which keeps
/// the order of `properties`, and so the order of the keys in the output).
template <class Json>
class SchemaCompiler {
public:
    SchemaCompiler(const Json& root, const JsonSchemaOptions& options)
        : root_(root),
          options_(options),
          rules_({"root", "value", "object", "member", "array", "string", "char", "number", "integer", "boolean", "ws"}) {}

    std::string compile() {
        check_options();
        rules_.reserve_exact("root");
        rules_.rules().back().origin = "#";
        ref_rules_.emplace("", "root");
        rules_.define("root", schema(root_, "", "root", 0));
        // Definitions are compiled here rather than where they are referenced, so that a long
        // chain of them does not nest (the depth limit counts nesting within one definition).
        for (std::size_t i = 0; i < pending_refs_.size(); ++i) {
            const PendingRef ref = pending_refs_[i];
            rules_.define(ref.name, schema(*ref.target, ref.pointer, ref.name, 0));
        }
        return finish();
    }

private:
    using Shape = ObjectShape<Json>;

    [[noreturn]] static void fail(const std::string& pointer, const std::string& what) {
        throw GrammarError("json schema: " + (pointer.empty() ? std::string("top level") : pointer) + ": " + what);
    }

    /// The pointer of member `key`. A very long key is cut (for messages only), so that pointers
    /// stay short however long the schema's keys are.
    static std::string child(const std::string& pointer, std::string_view key) {
        constexpr std::size_t kShown = 64;
        return pointer + "/" + pointer_token(key.substr(0, kShown)) + (key.size() > kShown ? "..." : "");
    }
    /// The name hint of a part of the schema named by `hint`: rule names are cut to 48
    /// characters anyway, and a short hint keeps a long key from being copied for every rule.
    static std::string sub_hint(std::string_view hint, std::string_view part) {
        return std::string(hint.substr(0, 40)) + "-" + std::string(part.substr(0, 24));
    }
    static std::string child(const std::string& pointer, std::string_view key, std::size_t index) {
        return child(pointer, key) + "/" + std::to_string(index);
    }

    void check_options() const {
        if (gemma() && options_.max_whitespace > 0)
            throw GrammarError("json schema: max_whitespace must be 0 with ValueSyntax::GemmaToolCall (the syntax has no whitespace)");
        const std::string& prefix = options_.rule_prefix;
        const bool plain = std::all_of(prefix.begin(), prefix.end(), [](char c) {
            return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
        });
        if (!plain) throw GrammarError("json schema: rule_prefix " + json_quoted(prefix) + " may hold only letters, digits, '-' and '_'");
    }

    // --- shared rules -------------------------------------------------------------------------

    bool gemma() const { return options_.syntax == ValueSyntax::GemmaToolCall; }
    Expr ws() { return options_.max_whitespace > 0 ? builtin("ws") : empty(); }
    /// What opens and closes a string.
    Expr quote() const { return gemma() ? special_token(kGemmaQuote) : token("\""); }
    Expr null_value() const { return token(gemma() ? "None" : "null"); }

    /// A shared rule, defined the first time it is used.
    Expr builtin(const std::string& name) {
        if (!rules_.has(name)) {
            rules_.reserve_exact(name);
            rules_.define(name, builtin_body(name));
        }
        return rule(name);
    }

    Expr builtin_body(const std::string& name) {
        const Expr digits_1_to_9 = decimal_digit(1, 9), digit = decimal_digit(0, 9);
        const Expr integral = choice({token("0"), seq({digits_1_to_9, repeat(digit, 0, kMaxIntegerDigits - 1)})});
        if (name == "ws") return repeat(chars(whitespace_set()), 0, options_.max_whitespace);
        if (name == "value")
            return choice({builtin("object"), builtin("array"), builtin("string"), builtin("number"), builtin("boolean"), null_value()});
        if (name == "object")
            return seq({token("{"), ws(), optional(seq({builtin("member"), star(seq({token(","), ws(), builtin("member")}))})), token("}")});
        if (name == "member") {
            Expr key = gemma() ? gemma_other_key({}, "any") : builtin("string");
            return seq({std::move(key), ws(), token(":"), ws(), builtin("value"), ws()});
        }
        if (name == "array") {
            Expr element = seq({builtin("value"), ws()});
            return seq({token("["), ws(), optional(seq({element, star(seq({token(","), ws(), element}))})), token("]")});
        }
        if (name == "string") return seq({quote(), star(builtin("char")), quote()});
        if (name == "char") return gemma() ? chars(CodePointSet::scalars()) : json_string_char(CodePointSet::scalars());
        if (name == "number") {
            Expr fraction = seq({token("."), repeat(digit, 1, kMaxFractionDigits)});
            Expr exponent = seq({chars(letters("eE")), optional(chars(letters("+-"))), repeat(digit, 1, kMaxExponentDigits)});
            return seq({optional(token("-")), integral, optional(std::move(fraction)), optional(std::move(exponent))});
        }
        if (name == "integer") return seq({optional(token("-")), integral});
        return choice({token("true"), token("false")});  // boolean
    }

    static CodePointSet whitespace_set() { return letters(" \t\n\r"); }

    /// One string character in `set`, as a rule shared by every use of the same set.
    Expr string_char(const CodePointSet& set) {
        if (set.empty()) return nothing();
        if (set == CodePointSet::scalars()) return builtin("char");
        if (gemma() && set.is_single()) return chars(set);  // a raw character is only itself: nothing to share
        auto it = char_rules_.find(set);
        if (it == char_rules_.end()) {
            std::string hint = "char";
            if (set.is_single()) {
                hint += "-u";
                const char32_t c = set.ranges()[0].first;
                print_hex(hint, c, c > 0xFFFF ? 6 : c > 0xFF ? 4 : 2);
            }
            const std::string name = rules_.reserve(hint);
            rules_.define(name, gemma() ? chars(set) : json_string_char(set));
            it = char_rules_.emplace(set, name).first;
        }
        return rule(it->second);
    }

    // --- dispatch -----------------------------------------------------------------------------

    Expr schema(const Json& s, const std::string& pointer, const std::string& hint, std::uint32_t depth) {
        if (depth > options_.max_depth) fail(pointer, "schemas nested deeper than " + std::to_string(options_.max_depth) + " levels");
        if (s.is_boolean()) return s.template get<bool>() ? builtin("value") : nothing();
        if (!s.is_object()) fail(pointer, std::string("a schema must be an object or a boolean, got ") + s.type_name());
        for (const auto& [key, value] : s.items())
            if (!is_supported_keyword(key)) fail(pointer, "unsupported keyword " + json_quoted(key));
        if (s.contains("$ref")) return reference(s, pointer);
        if (s.contains("anyOf") || s.contains("oneOf")) return alternatives(s, pointer, hint, depth);
        if (s.contains("allOf")) return all_of(s, pointer, hint, depth);
        if (s.contains("enum") || s.contains("const")) return enumeration(s, pointer);
        return typed(s, pointer, hint, depth);
    }

    /// Fails when `s` has a constraining keyword besides `keyword` and `allowed`.
    static void only_with(const Json& s, const std::string& pointer, std::string_view keyword,
                          std::initializer_list<std::string_view> allowed) {
        for (const auto& [key, value] : s.items())
            if (key != keyword && !is_annotation(key) && !is_one_of(key, allowed))
                fail(child(pointer, key), json_quoted(key) + " cannot be combined with " + json_quoted(keyword));
    }

    /// The non-empty array of schemas of `keyword`.
    static const Json& schema_list(const Json& s, const char* keyword, const std::string& pointer) {
        const Json& list = *s.find(keyword);
        if (!list.is_array() || list.empty())
            fail(child(pointer, keyword), json_quoted(keyword) + " must be a non-empty array of schemas");
        return list;
    }

    Expr alternatives(const Json& s, const std::string& pointer, const std::string& hint, std::uint32_t depth) {
        const char* keyword = s.contains("anyOf") ? "anyOf" : "oneOf";
        only_with(s, pointer, keyword, {});
        const Json& list = schema_list(s, keyword, pointer);
        std::vector<Expr> branches;
        for (std::size_t i = 0; i < list.size(); ++i)
            branches.push_back(schema(list[i], child(pointer, keyword, i), sub_hint(hint, std::to_string(i)), depth + 1));
        return choice(std::move(branches));
    }

    // --- $ref ---------------------------------------------------------------------------------

    /// A rule for the target, compiled once (by compile()) however often it is referenced.
    Expr reference(const Json& s, const std::string& pointer) {
        only_with(s, pointer, "$ref", {});
        const auto [target, target_pointer] = resolve_ref(s, pointer);
        if (const auto it = ref_rules_.find(target_pointer); it != ref_rules_.end()) return rule(it->second);
        const std::size_t slash = target_pointer.rfind('/');
        const std::string name = rules_.reserve(target_pointer.substr(slash + 1), "#" + target_pointer);
        ref_rules_.emplace(target_pointer, name);
        pending_refs_.push_back({target, target_pointer, name});
        return rule(name);
    }

    /// The schema a `$ref` points to and its JSON pointer (percent-decoded).
    std::pair<const Json*, std::string> resolve_ref(const Json& s, const std::string& pointer) const {
        const std::string at = child(pointer, "$ref");
        const Json& ref = *s.find("$ref");
        if (!ref.is_string()) fail(at, std::string("\"$ref\" must be a string, got ") + ref.type_name());
        const std::string text = ref.template get<std::string>();
        if (text.empty() || text[0] != '#')
            fail(at, "\"$ref\" " + json_quoted(text) + ": only references inside the schema (\"#\", \"#/$defs/...\") are supported");
        const std::string target_pointer = percent_decode(text.substr(1), at, text);
        if (!target_pointer.empty() && target_pointer[0] != '/')
            fail(at, "\"$ref\" " + json_quoted(text) + ": anchors are not supported, only JSON pointers");
        const Json* target = &root_;
        for (std::size_t start = 1; start <= target_pointer.size() && !target_pointer.empty();) {
            const std::size_t end = std::min(target_pointer.find('/', start), target_pointer.size());
            target = step(*target, unescape_token(target_pointer.substr(start, end - start), at, text));
            if (!target) fail(at, "\"$ref\" " + json_quoted(text) + " points to nothing");
            start = end + 1;
        }
        return {target, target_pointer};
    }

    static std::string percent_decode(const std::string& text, const std::string& at, const std::string& ref) {
        std::string out;
        for (std::size_t i = 0; i < text.size(); ++i) {
            if (text[i] != '%') {
                out += text[i];
                continue;
            }
            unsigned value = 0;
            for (std::size_t k = 1; k <= 2; ++k) {
                const char c = i + k < text.size() ? text[i + k] : '\0';
                const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
                if (d < 0) fail(at, "\"$ref\" " + json_quoted(ref) + ": malformed percent escape");
                value = value * 16 + static_cast<unsigned>(d);
            }
            out += static_cast<char>(value);
            i += 2;
        }
        return out;
    }

    static std::string unescape_token(const std::string& token_text, const std::string& at, const std::string& ref) {
        std::string out;
        for (std::size_t i = 0; i < token_text.size(); ++i) {
            if (token_text[i] != '~') {
                out += token_text[i];
            } else if (i + 1 < token_text.size() && (token_text[i + 1] == '0' || token_text[i + 1] == '1')) {
                out += token_text[++i] == '0' ? '~' : '/';
            } else {
                fail(at, "\"$ref\" " + json_quoted(ref) + ": malformed JSON pointer (a '~' not followed by 0 or 1)");
            }
        }
        return out;
    }

    /// The member or element `key` of `node`, or nullptr.
    static const Json* step(const Json& node, const std::string& key) {
        if (node.is_object()) {
            const auto it = node.find(key);
            return it == node.end() ? nullptr : &*it;
        }
        if (!node.is_array() || key.empty() || key.size() > 9 || (key.size() > 1 && key[0] == '0') ||
            !std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; }))
            return nullptr;
        const std::size_t index = std::stoul(key);
        return index < node.size() ? &node[index] : nullptr;
    }

    // --- enum and const -----------------------------------------------------------------------

    Expr enumeration(const Json& s, const std::string& pointer) {
        const char* keyword = s.contains("enum") ? "enum" : "const";
        only_with(s, pointer, keyword, {"enum", "const", "type"});
        const std::optional<TypeSet> types = declared_types(s, pointer);
        std::vector<const Json*> values;
        if (const auto e = s.find("enum"); e != s.end()) {
            if (!e->is_array() || e->empty()) fail(child(pointer, "enum"), "\"enum\" must be a non-empty array");
            for (const Json& v : *e) values.push_back(&v);
        }
        const auto c = s.find("const");
        const bool too_deep = std::any_of(values.begin(), values.end(), [&](const Json* v) { return deeper_than(*v, options_.max_depth); });
        if (too_deep || (c != s.end() && deeper_than(*c, options_.max_depth)))  // before comparing them, which recurses
            fail(child(pointer, too_deep ? "enum" : "const"), "a value nested deeper than " + std::to_string(options_.max_depth) + " levels");
        if (c != s.end()) {
            if (values.empty()) values.push_back(&*c);
            else std::erase_if(values, [&](const Json* v) { return *v != *c; });
            if (values.empty()) fail(child(pointer, "const"), "no value of \"enum\" equals \"const\"");
        }
        if (types) std::erase_if(values, [&](const Json* v) { return !has_type(*v, *types); });
        if (values.empty()) fail(child(pointer, keyword), "no value of " + json_quoted(keyword) + " has the schema's \"type\"");
        std::vector<Expr> alternatives;
        for (const Json* v : values) alternatives.push_back(value_literal(*v, child(pointer, keyword), 0));
        return choice(std::move(alternatives));
    }

    /// Whether `v` nests more than `levels` arrays or objects deep (recursing at most that far).
    static bool deeper_than(const Json& v, std::uint32_t levels) {
        if (!v.is_array() && !v.is_object()) return false;
        if (levels == 0) return true;
        for (const auto& element : v) {
            if (deeper_than(element, levels - 1)) return true;
        }
        return false;
    }

    static bool has_type(const Json& v, TypeSet types) {
        if (v.is_null()) return types & kNull;
        if (v.is_boolean()) return types & kBoolean;
        if (v.is_number()) {
            const bool integral = v.is_number_integer() || std::trunc(v.template get<double>()) == v.template get<double>();
            return (types & kNumber) || ((types & kInteger) && integral);
        }
        if (v.is_string()) return types & kString;
        if (v.is_array()) return types & kArray;
        return types & kObject;
    }

    /// Exactly the text of `v` (nlohmann's compact dump, with the whitespace policy between
    /// tokens; object keys in the order the value holds them).
    Expr value_literal(const Json& v, const std::string& pointer, std::uint32_t depth) {
        if (depth > options_.max_depth) fail(pointer, "a value nested deeper than " + std::to_string(options_.max_depth) + " levels");
        if (v.is_array() || v.is_object()) {
            std::vector<Expr> items{token(v.is_array() ? "[" : "{"), ws()};
            bool first = true;
            for (const auto& [key, element] : v.items()) {
                if (!first) items.insert(items.end(), {token(","), ws()});
                first = false;
                if (v.is_object()) items.insert(items.end(), {key_text(key, pointer), ws(), token(":"), ws()});
                items.insert(items.end(), {value_literal(element, pointer, depth + 1), ws()});
            }
            items.push_back(token(v.is_array() ? "]" : "}"));
            return seq(std::move(items));
        }
        if (v.is_number_float() && !std::isfinite(v.template get<double>())) fail(pointer, "a number that is not finite");
        if (gemma() && v.is_string())
            return seq({quote(), literal(gemma_raw_text(v.template get<std::string>(), pointer, "a string")), quote()});
        if (gemma() && v.is_null()) return null_value();
        return json_text(v, pointer);
    }

    /// A property name: JSON's quoted string, or in Gemma's syntax the name bare when it reads
    /// back bare (as the writer does), else quoted.
    Expr key_text(const std::string& key, const std::string& pointer) const {
        if (!gemma()) return json_text(Json(key), pointer);
        const std::u32string text = gemma_raw_text(key, pointer, "a property name");
        return writes_bare(text) ? literal(text) : seq({quote(), literal(text), quote()});
    }

    /// The code points of a string Gemma's syntax writes between quotes: it has no escapes, so
    /// a string holding the quote's text cannot be written (it would read back cut there).
    static std::u32string gemma_raw_text(const std::string& text, const std::string& pointer, const std::string& what) {
        const auto code_points = decode_utf8(text);
        if (!code_points) fail(pointer, what + " that is not valid UTF-8");
        if (text.find(kGemmaQuote) != std::string::npos)
            fail(pointer, what + " holding " + std::string(kGemmaQuote) + ", which Gemma's tool-call syntax cannot write");
        return *code_points;
    }

    /// A scalar's compact JSON text as a literal.
    static Expr json_text(const Json& scalar, const std::string& pointer) {
        std::string text;
        try {
            text = scalar.dump();
        } catch (const nlohmann::json::exception&) {
            fail(pointer, "a string that is not valid UTF-8");
        }
        return literal(*decode_utf8(text));
    }

    // --- types --------------------------------------------------------------------------------

    /// The "type" keyword's set, or nullopt when absent.
    static std::optional<TypeSet> declared_types(const Json& s, const std::string& pointer) {
        const auto t = s.find("type");
        if (t == s.end()) return std::nullopt;
        const std::string at = child(pointer, "type");
        auto bit_of = [&](const Json& name) {
            if (!name.is_string()) fail(at, std::string("\"type\" must be a string or an array of strings, got ") + name.type_name());
            const auto bit = type_bit(name.template get<std::string>());
            if (!bit) fail(at, "unknown type " + json_quoted(name.template get<std::string>()));
            return *bit;
        };
        if (!t->is_array()) return bit_of(*t);
        if (t->empty()) fail(at, "\"type\" is an empty array");
        TypeSet set = 0;
        for (const Json& name : *t) set |= bit_of(name);
        return set;
    }

    /// The types a schema without combinators allows: its "type", or the one type its keywords
    /// are about (llama.cpp and OpenAI read `properties` alone as an object), or 0 for any value.
    static TypeSet schema_types(const Json& s, const std::string& pointer) {
        const std::optional<TypeSet> declared = declared_types(s, pointer);
        const std::string type_text = declared ? s.find("type")->dump() : std::string("no \"type\"");
        TypeSet inferred = 0;
        std::string first_key;
        for (const auto& [key, value] : s.items()) {
            const Family f = keyword_family(key);
            if (f == Family::None) continue;
            if (f == Family::Integer && (!declared || !(*declared & kInteger) || (*declared & kNumber)))
                fail(child(pointer, key), json_quoted(key) + " is only supported with \"type\": \"integer\", got " + type_text);
            if (declared && !(*declared & family_type(f)))
                fail(child(pointer, key), json_quoted(key) + " applies to " + family_noun(f) + ", and \"type\" is " + type_text);
            if (!declared && inferred && !(inferred & family_type(f)))
                fail(pointer, json_quoted(first_key) + " and " + json_quoted(key) + " are about different types: give a \"type\"");
            if (!declared && !inferred) first_key = key;
            inferred |= family_type(f);
        }
        return declared ? *declared : inferred;
    }

    Expr typed(const Json& s, const std::string& pointer, const std::string& hint, std::uint32_t depth) {
        const TypeSet types = schema_types(s, pointer);
        if (types == 0) return builtin("value");
        std::vector<Expr> alternatives;
        if (types & kNull) alternatives.push_back(null_value());
        if (types & kBoolean) alternatives.push_back(builtin("boolean"));
        if (types & kNumber) alternatives.push_back(builtin("number"));  // which holds the integers
        else if (types & kInteger) alternatives.push_back(integer(s, pointer));
        if (types & kString) alternatives.push_back(string_schema(s, pointer, hint));
        if (types & kArray) alternatives.push_back(array_schema(s, pointer, hint, depth));
        if (types & kObject) alternatives.push_back(object_schema(s, pointer, hint, depth));
        return choice(std::move(alternatives));
    }

    /// A count keyword (minLength, maxItems, ...): a non-negative integer within the limit.
    std::optional<std::uint32_t> count(const Json& s, const char* keyword, const std::string& pointer) const {
        const auto it = s.find(keyword);
        if (it == s.end()) return std::nullopt;
        const std::string at = child(pointer, keyword);
        const bool integral = it->is_number_integer() || (it->is_number_float() && std::trunc(it->template get<double>()) == it->template get<double>());
        if (!integral || (it->is_number_integer() && !it->is_number_unsigned() && it->template get<std::int64_t>() < 0) ||
            (it->is_number_float() && it->template get<double>() < 0))
            fail(at, json_quoted(keyword) + " must be a non-negative integer");
        const double value = it->template get<double>();
        if (value > options_.max_repetition)
            fail(at, json_quoted(keyword) + " " + it->dump() + " is above the limit of " + std::to_string(options_.max_repetition) +
                         " (JsonSchemaOptions::max_repetition)");
        return static_cast<std::uint32_t>(value);
    }

    /// Fails when the count `min_key` is above `max_key`.
    void check_order(const Json& s, const char* min_key, const char* max_key, const std::string& pointer,
                     std::optional<std::uint32_t> min, std::optional<std::uint32_t> max) const {
        if (min && max && *min > *max)
            fail(child(pointer, min_key), json_quoted(min_key) + " " + s.find(min_key)->dump() + " is greater than " + json_quoted(max_key) +
                                              " " + s.find(max_key)->dump());
    }

    // --- integers -----------------------------------------------------------------------------

    Expr integer(const Json& s, const std::string& pointer) {
        const bool bounded = s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum");
        if (!bounded) return builtin("integer");
        const auto [lo, hi] = integer_bounds(s, pointer);
        return integer_range(lo, hi);
    }

    /// A bound rounded to an integer, held within ±(kMaxIntegerMagnitude + 1) so that a bound
    /// beyond the digit limit stays recognisable without overflowing.
    static std::int64_t rounded_bound(const Json& v, bool up, const std::string& at, const char* keyword) {
        constexpr std::int64_t kBeyond = kMaxIntegerMagnitude + 1;
        if (!v.is_number()) fail(at, json_quoted(keyword) + " must be a number");
        if (v.is_number_unsigned()) return v.template get<std::uint64_t>() >= static_cast<std::uint64_t>(kBeyond) ? kBeyond : v.template get<std::int64_t>();
        if (v.is_number_integer()) return std::clamp(v.template get<std::int64_t>(), -kBeyond, kBeyond);
        const double d = v.template get<double>();
        if (!std::isfinite(d)) fail(at, json_quoted(keyword) + " must be finite");
        if (d >= 1e17) return kBeyond;
        if (d <= -1e17) return -kBeyond;
        return std::clamp(static_cast<std::int64_t>(up ? std::ceil(d) : std::floor(d)), -kBeyond, kBeyond);
    }

    /// [lo, hi] from minimum / maximum / exclusiveMinimum / exclusiveMaximum (a number, or
    /// draft 4's boolean that makes minimum or maximum exclusive).
    static std::pair<std::int64_t, std::int64_t> integer_bounds(const Json& s, const std::string& pointer) {
        const std::int64_t lo = bound(s, pointer, "minimum", "exclusiveMinimum", true);
        const std::int64_t hi = bound(s, pointer, "maximum", "exclusiveMaximum", false);
        if (lo > hi) fail(pointer, "no integer satisfies " + bounds_text(s));
        if (lo > kMaxIntegerMagnitude || hi < -kMaxIntegerMagnitude)
            fail(pointer, "no integer of at most 16 digits satisfies " + bounds_text(s) + " (integers are limited to 16 digits)");
        return {std::max(lo, -kMaxIntegerMagnitude), std::min(hi, kMaxIntegerMagnitude)};
    }

    /// The lowest (`lower`) or highest integer that `keyword` and `exclusive` allow, held within
    /// ±(kMaxIntegerMagnitude + 2).
    static std::int64_t bound(const Json& s, const std::string& pointer, const char* keyword, const char* exclusive, bool lower) {
        const std::int64_t sign = lower ? 1 : -1;
        std::int64_t best = -sign * (kMaxIntegerMagnitude + 1);
        const auto inclusive = s.find(keyword), strict = s.find(exclusive);
        const bool strict_flag = strict != s.end() && strict->is_boolean() && strict->template get<bool>();
        if (strict_flag && inclusive == s.end()) fail(child(pointer, exclusive), json_quoted(exclusive) + ": true needs " + json_quoted(keyword));
        if (strict != s.end() && !strict->is_boolean()) {
            // x < v for an integer x: x <= ceil(v) - 1; x > v: x >= floor(v) + 1.
            const std::int64_t b = rounded_bound(*strict, !lower, child(pointer, exclusive), exclusive) + sign;
            best = lower ? std::max(best, b) : std::min(best, b);
        }
        if (inclusive != s.end()) {
            const std::int64_t b = rounded_bound(*inclusive, lower, child(pointer, keyword), keyword);
            const bool whole = inclusive->is_number_integer() || std::trunc(inclusive->template get<double>()) == inclusive->template get<double>();
            const std::int64_t shifted = b + (strict_flag && whole ? sign : 0);
            best = lower ? std::max(best, shifted) : std::min(best, shifted);
        }
        return best;
    }

    static std::string bounds_text(const Json& s) {
        std::string out;
        for (const char* keyword : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"})
            if (const auto it = s.find(keyword); it != s.end()) out += (out.empty() ? "" : ", ") + json_quoted(keyword) + " " + it->dump();
        return out;
    }

    // --- strings ------------------------------------------------------------------------------

    Expr string_schema(const Json& s, const std::string& pointer, const std::string& hint) {
        const auto min = count(s, "minLength", pointer), max = count(s, "maxLength", pointer);
        check_order(s, "minLength", "maxLength", pointer, min, max);
        for (const char* keyword : {"pattern", "format"}) {
            if (!s.contains(keyword)) continue;
            for (const char* other : {"format", "minLength", "maxLength"})
                if (other != std::string_view(keyword) && s.contains(other))
                    fail(child(pointer, other), json_quoted(other) + " cannot be combined with " + json_quoted(keyword));
            const Json& value = *s.find(keyword);
            if (!value.is_string()) fail(child(pointer, keyword), json_quoted(keyword) + " must be a string");
            return keyword == std::string_view("pattern") ? pattern(value.template get<std::string>(), child(pointer, keyword), hint)
                                                          : format(value.template get<std::string>(), child(pointer, keyword));
        }
        if (!min && !max) return builtin("string");
        return seq({quote(), repeat(builtin("char"), min.value_or(0), max), quote()});
    }

    Expr format(const std::string& name, const std::string& at) {
        const auto regex = format_pattern(name);
        if (!regex) fail(at, "\"format\" " + json_quoted(name) + " is not supported (supported: date, time, date-time, uuid)");
        return pattern(*regex, at, name + "-string");
    }

    /// A string matching the regular expression, as a rule shared by every use of the pattern.
    Expr pattern(const std::string& text, const std::string& at, const std::string& hint) {
        auto it = pattern_rules_.find(text);
        if (it == pattern_rules_.end()) {
            const auto code_points = decode_utf8(text);
            if (!code_points) fail(at, "\"pattern\" is not valid UTF-8");
            auto unit = [this](const CodePointSet& set) { return string_char(set); };
            auto part = [this, &hint](Expr body) {
                const std::string name = rules_.reserve(hint + "-part");
                rules_.define(name, std::move(body));
                return rule(name);
            };
            PatternCompiler<decltype(unit), decltype(part)> compiler(*code_points, unit, part, options_.max_depth, options_.max_repetition);
            Expr body = compiler.compile();
            if (!compiler.error().empty()) fail(at, "unsupported regular expression " + json_quoted(text) + ": " + compiler.error());
            const std::string name = rules_.reserve(hint);
            rules_.define(name, seq({quote(), std::move(body), quote()}));
            it = pattern_rules_.emplace(text, name).first;
        }
        return rule(it->second);
    }

    // --- arrays -------------------------------------------------------------------------------

    /// The prefix schemas (prefixItems, or the older array form of items) and the schema of
    /// the items after them (nullptr: any value).
    struct ArrayItems {
        std::vector<const Json*> prefix;
        std::string prefix_pointer;
        const Json* rest = nullptr;
        std::string rest_pointer;
    };

    static ArrayItems array_items(const Json& s, const std::string& pointer) {
        ArrayItems out;
        const auto prefix = s.find("prefixItems"), items = s.find("items"), additional = s.find("additionalItems");
        const bool old_tuple = items != s.end() && items->is_array();
        if (prefix != s.end() && !prefix->is_array()) fail(child(pointer, "prefixItems"), "\"prefixItems\" must be an array of schemas");
        if (prefix != s.end() && old_tuple) fail(child(pointer, "items"), "\"items\" must be a schema when \"prefixItems\" is given");
        if (additional != s.end() && !old_tuple)
            fail(child(pointer, "additionalItems"), "\"additionalItems\" needs \"items\" as an array (or use prefixItems and items)");
        const auto tuple = old_tuple ? items : prefix;
        if (tuple != s.end()) {
            for (const Json& p : *tuple) out.prefix.push_back(&p);
            out.prefix_pointer = child(pointer, old_tuple ? "items" : "prefixItems");
        }
        const auto rest = old_tuple ? additional : items;
        if (rest != s.end()) {
            out.rest = &*rest;
            out.rest_pointer = child(pointer, old_tuple ? "additionalItems" : "items");
        }
        return out;
    }

    Expr array_schema(const Json& s, const std::string& pointer, const std::string& hint, std::uint32_t depth) {
        const auto min = count(s, "minItems", pointer), max = count(s, "maxItems", pointer);
        check_order(s, "minItems", "maxItems", pointer, min, max);
        if (const auto unique = s.find("uniqueItems"); unique != s.end() && !(unique->is_boolean() && !unique->template get<bool>()))
            fail(child(pointer, "uniqueItems"), "\"uniqueItems\": true is not supported");
        const ArrayItems items = array_items(s, pointer);
        if (items.prefix.empty() && !items.rest && !min && !max) return builtin("array");
        const std::string name = rules_.reserve(hint);
        std::vector<Expr> prefix;
        for (std::size_t i = 0; i < items.prefix.size(); ++i)
            prefix.push_back(schema(*items.prefix[i], items.prefix_pointer + "/" + std::to_string(i), sub_hint(hint, std::to_string(i)), depth + 1));
        Expr rest = items.rest ? schema(*items.rest, items.rest_pointer, sub_hint(hint, "item"), depth + 1) : builtin("value");
        rules_.define(name, array_body(prefix, rest, min.value_or(0), max, hint));
        return rule(name);
    }

    /// "[" items "]" with min..max items, the first ones from `prefix`. After i items, the rest
    /// of the array is a rule of its own (hint-tail-i) while prefix items remain, then a
    /// repetition of `rest`.
    Expr array_body(const std::vector<Expr>& prefix, const Expr& rest, std::uint32_t min, std::optional<std::uint32_t> max,
                    const std::string& hint) {
        std::uint32_t cap = is_nothing(rest) ? static_cast<std::uint32_t>(prefix.size()) : std::numeric_limits<std::uint32_t>::max();
        for (std::size_t i = 0; i < prefix.size(); ++i)
            if (is_nothing(prefix[i])) cap = std::min(cap, static_cast<std::uint32_t>(i));
        max = std::min(max.value_or(cap), cap);
        if (min > *max) return nothing();
        const auto k = static_cast<std::uint32_t>(std::min<std::size_t>(prefix.size(), *max));
        auto element = [&](std::uint32_t i) { return seq({i < prefix.size() ? prefix[i] : rest, ws()}); };
        std::vector<std::string> tails(k);
        for (std::uint32_t i = 1; i < k; ++i) tails[i] = rules_.reserve(hint + "-tail");
        auto after = [&](std::uint32_t i) {  // the rest of the array once i ≥ 1 items are written
            if (i >= *max) return empty();
            if (i >= k) return repeat(seq({token(","), ws(), element(i)}), min > i ? min - i : 0, *max == std::numeric_limits<std::uint32_t>::max() ? std::nullopt : std::optional(*max - i));
            return rule(tails[i]);
        };
        for (std::uint32_t i = k; i-- > 1;)
            rules_.define(tails[i], choice({i >= min ? empty() : nothing(), seq({token(","), ws(), element(i), after(i + 1)})}));
        Expr items = *max == 0 ? empty() : seq({element(0), after(1)});
        return seq({token("["), ws(), min == 0 ? optional(std::move(items)) : std::move(items), token("]")});
    }

    // --- objects ------------------------------------------------------------------------------

    Expr object_schema(const Json& s, const std::string& pointer, const std::string& hint, std::uint32_t depth) {
        Shape shape;
        add_to_shape(shape, s, pointer);
        shape = finish_shape(std::move(shape), pointer);
        if (shape.properties.empty() && shape.additional == Shape::Additional::Any && !shape.additional_schema) return builtin("object");
        return object_rule(shape, hint, depth);
    }

    /// Adds the properties, required names and additionalProperties of `s` to `shape`.
    static void add_to_shape(Shape& shape, const Json& s, const std::string& pointer) {
        if (const auto props = s.find("properties"); props != s.end()) {
            if (!props->is_object()) fail(child(pointer, "properties"), "\"properties\" must be an object");
            shape.names_properties = true;
            for (auto it = props->begin(); it != props->end(); ++it) {
                const std::string& key = it.key();
                const std::string at = child(child(pointer, "properties"), key);
                if (!decode_utf8(key)) fail(at, "a property name that is not valid UTF-8");
                if (std::any_of(shape.properties.begin(), shape.properties.end(), [&](const auto& p) { return p.key == key; }))
                    fail(at, "property " + json_quoted(key) + " is also defined by another \"allOf\" branch");
                shape.properties.push_back({key, &it.value(), at, false});
            }
        }
        if (const auto req = s.find("required"); req != s.end()) {
            shape.required_pointer = child(pointer, "required");
            shape.names_properties = true;
            if (!req->is_array()) fail(shape.required_pointer, "\"required\" must be an array of strings");
            for (const Json& name : *req) {
                if (!name.is_string()) fail(shape.required_pointer, "\"required\" must be an array of strings");
                const std::string key = name.template get<std::string>();
                if (!decode_utf8(key)) fail(shape.required_pointer, "a property name that is not valid UTF-8");
                if (std::find(shape.required.begin(), shape.required.end(), key) == shape.required.end()) shape.required.push_back(key);
            }
        }
        if (const auto extra = s.find("additionalProperties"); extra != s.end()) {
            shape.additional_given = true;
            shape.additional_pointer = child(pointer, "additionalProperties");
            if (extra->is_boolean()) shape.additional = extra->template get<bool>() ? Shape::Additional::Any : Shape::Additional::None;
            else if (extra->is_object()) shape.additional = Shape::Additional::Schema, shape.additional_schema = &*extra;
            else fail(shape.additional_pointer, "\"additionalProperties\" must be a boolean or a schema");
        }
    }

    /// Applies the strict default and marks the required properties; a required name that is
    /// not a property becomes one, with the additionalProperties schema.
    Shape finish_shape(Shape shape, const std::string& pointer) const {
        if (!shape.additional_given && options_.strict_additional_properties && shape.names_properties)
            shape.additional = Shape::Additional::None;
        for (const std::string& key : shape.required) {
            auto it = std::find_if(shape.properties.begin(), shape.properties.end(), [&](const auto& p) { return p.key == key; });
            if (it != shape.properties.end()) {
                it->required = true;
                continue;
            }
            if (shape.additional == Shape::Additional::None)
                fail(shape.required_pointer.empty() ? pointer : shape.required_pointer,
                     json_quoted(key) + " is required, but it is not in \"properties\" and additional properties are not allowed" +
                         (shape.additional_given ? "" : " (strict_additional_properties)"));
            shape.properties.push_back({key, shape.additional_schema, shape.additional_pointer, true});
        }
        return shape;
    }

    struct Member {
        Expr expr;  ///< "key" : value, and the whitespace after it
        bool required;
    };

    Expr object_rule(const Shape& shape, const std::string& hint, std::uint32_t depth) {
        const std::string name = rules_.reserve(hint);
        std::vector<Member> members;
        std::vector<std::string> keys;
        bool impossible = false;
        for (const auto& p : shape.properties) {
            keys.push_back(p.key);
            Expr value = p.schema ? schema(*p.schema, p.pointer, sub_hint(hint, p.key), depth + 1) : builtin("value");
            if (is_nothing(value)) {
                impossible |= p.required;  // an optional one is left out, and its key stays excluded below
                continue;
            }
            members.push_back({seq({key_text(p.key, p.pointer), ws(), token(":"), ws(), std::move(value), ws()}), p.required});
        }
        std::optional<Expr> additional;
        if (shape.additional != Shape::Additional::None) {
            Expr value = shape.additional_schema ? schema(*shape.additional_schema, shape.additional_pointer, sub_hint(hint, "additional"), depth + 1)
                                                 : builtin("value");
            if (!is_nothing(value)) {
                const std::string member = rules_.reserve(sub_hint(hint, "additional-member"));
                rules_.define(member, seq({other_key(keys, hint), ws(), token(":"), ws(), std::move(value), ws()}));
                additional = rule(member);
            }
        }
        rules_.define(name, impossible ? nothing() : seq({token("{"), ws(), object_members(members, additional, hint), token("}")}));
        return rule(name);
    }

    /// The members in order, commas between them. A run of required members is written inline;
    /// at an optional member the rest is a rule, one for "a member was written before" and one
    /// for "none yet" (no comma then), so that any optional member may be left out.
    Expr object_members(const std::vector<Member>& members, const std::optional<Expr>& additional, const std::string& hint) {
        std::map<std::pair<std::size_t, bool>, std::string> optional_rules;
        std::vector<std::pair<std::size_t, bool>> pending;
        auto rest = [&](std::size_t i, bool first) {
            std::vector<Expr> parts;
            for (; i < members.size() && members[i].required; ++i, first = false) {
                if (!first) parts.insert(parts.end(), {token(","), ws()});
                parts.push_back(members[i].expr);
            }
            if (i == members.size()) {
                parts.push_back(additional_members(additional, first));
            } else {
                auto [it, added] = optional_rules.try_emplace({i, first});
                if (added) {
                    it->second = rules_.reserve(hint + (first ? "-from" : "-rest"));
                    pending.push_back({i, first});
                }
                parts.push_back(rule(it->second));
            }
            return seq(std::move(parts));
        };
        Expr top = rest(0, true);
        while (!pending.empty()) {
            const auto [i, first] = pending.back();
            pending.pop_back();
            Expr with = seq({first ? empty() : seq({token(","), ws()}), members[i].expr, rest(i + 1, false)});
            rules_.define(optional_rules[{i, first}], choice({std::move(with), rest(i + 1, first)}));
        }
        return top;
    }

    Expr additional_members(const std::optional<Expr>& additional, bool first) {
        if (!additional) return empty();
        Expr more = star(seq({token(","), ws(), *additional}));
        return first ? optional(seq({*additional, std::move(more)})) : more;
    }

    /// A key that is none of `keys` (compared as decoded text, so "\u0061" is "a"): a trie of
    /// the keys, one rule per node. At a node, the key may end (unless a key ends there), go on
    /// with a character no key goes on with (then anything), or follow a branch.
    Expr other_key(const std::vector<std::string>& keys, const std::string& hint) {
        if (gemma()) return gemma_other_key(keys, hint);
        if (keys.empty()) return builtin("string");
        struct Node {
            std::map<char32_t, std::size_t> next;
            bool key_ends = false;
        };
        std::vector<Node> trie(1);
        for (const std::string& key : keys) {
            std::size_t at = 0;
            const std::u32string code_points = decode_utf8(key).value();  // checked when the properties were read
            for (const char32_t c : code_points) {
                auto [it, added] = trie[at].next.try_emplace(c, trie.size());
                if (added) trie.emplace_back();
                at = it->second;
            }
            trie[at].key_ends = true;
        }
        std::vector<std::string> names;
        for (std::size_t i = 0; i < trie.size(); ++i) names.push_back(rules_.reserve(hint + "-other-key"));
        for (std::size_t i = 0; i < trie.size(); ++i) {
            CodePointSet branches;
            std::vector<Expr> alternatives{trie[i].key_ends ? nothing() : token("\"")};
            for (const auto& [c, next] : trie[i].next) {
                branches.add(c, c);
                alternatives.push_back(seq({string_char(CodePointSet::of(c)), rule(names[next])}));
            }
            alternatives.push_back(seq({string_char(CodePointSet::scalars().minus(branches)), star(builtin("char")), token("\"")}));
            rules_.define(names[i], choice(std::move(alternatives)));
        }
        return seq({token("\""), rule(names[0])});
    }

    /// A key that is none of `keys` in Gemma's syntax: bare, or quoted (which reads back as well
    /// for any key), leaving the keys out of both forms.
    Expr gemma_other_key(const std::vector<std::string>& keys, const std::string& hint) {
        std::vector<std::u32string> code_points;
        for (const std::string& key : keys) code_points.push_back(decode_utf8(key).value());  // checked when the properties were read
        Expr quoted = keys.empty() ? builtin("string") : key_other_than(quoted_key_form(), code_points, quote(), hint + "-quoted-key");
        return choice({key_other_than(bare_key_form(), code_points, empty(), hint + "-bare-key"), std::move(quoted)});
    }

    /// A key in `form`, between two `delimiter`s, that is none of `keys`: other_key's trie, each
    /// node knowing the form's state. At a node the key may end (in an accepting state, unless a
    /// key ends there), follow a branch, or go on with a character no key goes on with, then
    /// with whatever the form allows from the state that character leads to.
    Expr key_other_than(const KeyForm& form, const std::vector<std::u32string>& keys, const Expr& delimiter, const std::string& hint) {
        const std::vector<std::string> tails = key_tails(form, delimiter);
        const std::vector<KeyTrieNode> trie = key_trie(form, keys);
        std::vector<std::string> names;
        for (std::size_t i = 0; i < trie.size(); ++i) names.push_back(rules_.reserve(hint));
        for (std::size_t i = 0; i < trie.size(); ++i) {
            const KeyTrieNode& node = trie[i];
            std::vector<Expr> alternatives{form.accepting[node.state] && !node.key_ends ? delimiter : nothing()};
            CodePointSet branches;
            for (const auto& [c, next] : node.next) {
                branches.add(c, c);
                alternatives.push_back(seq({literal(std::u32string(1, c)), rule(names[next])}));
            }
            for (const KeyForm::Edge& edge : form.edges[node.state])
                alternatives.push_back(seq({chars(edge.chars.minus(branches)), rule(tails[edge.to])}));
            rules_.define(names[i], choice(std::move(alternatives)));
        }
        return seq({delimiter, rule(names[0])});
    }

    /// For each state of `form`, a rule for the rest of any key from there and the closing
    /// `delimiter`; made once per form and shared.
    std::vector<std::string> key_tails(const KeyForm& form, const Expr& delimiter) {
        auto [it, added] = key_tail_rules_.try_emplace(form.tail_hint);
        if (!added) return it->second;
        std::vector<std::string> names;
        for (std::size_t s = 0; s < form.accepting.size(); ++s) names.push_back(rules_.reserve(form.tail_hint));
        for (std::size_t s = 0; s < form.accepting.size(); ++s) {
            std::vector<Expr> alternatives{form.accepting[s] ? delimiter : nothing()};
            for (const KeyForm::Edge& edge : form.edges[s]) alternatives.push_back(seq({chars(edge.chars), rule(names[edge.to])}));
            rules_.define(names[s], choice(std::move(alternatives)));
        }
        it->second = names;
        return names;
    }

    // --- allOf --------------------------------------------------------------------------------

    /// One subschema (with only annotations beside it), or object schemas merged into one: their
    /// properties in order, the union of their `required`. A branch may not have its own
    /// `additionalProperties` (in JSON Schema it would refuse the other branches' properties);
    /// the merged object follows the allOf's own, or the strict default.
    Expr all_of(const Json& s, const std::string& pointer, const std::string& hint, std::uint32_t depth) {
        const Json& list = schema_list(s, "allOf", pointer);
        bool alone = true;
        for (const auto& [key, value] : s.items()) alone &= key == "allOf" || is_annotation(key);
        if (list.size() == 1 && alone) return schema(list[0], child(pointer, "allOf", 0), hint, depth + 1);
        only_with(s, pointer, "allOf", {"type", "properties", "required", "additionalProperties"});
        if (const auto t = s.find("type"); t != s.end() && !(t->is_string() && *t == "object"))
            fail(child(pointer, "type"), "\"allOf\" merges object schemas only; \"type\" must be \"object\"");
        Shape shape;
        for (std::size_t i = 0; i < list.size(); ++i) {
            const auto [branch, at] = follow_refs(list[i], child(pointer, "allOf", i));
            if (branch->is_boolean() && !branch->template get<bool>()) return nothing();
            if (branch->is_boolean()) continue;
            check_merge_branch(*branch, at);
            add_to_shape(shape, *branch, at);
        }
        add_to_shape(shape, s, pointer);
        return object_rule(finish_shape(std::move(shape), pointer), hint, depth);
    }

    /// The schema at the end of a chain of $refs, and its pointer.
    std::pair<const Json*, std::string> follow_refs(const Json& s, std::string pointer) const {
        const Json* at = &s;
        for (std::uint32_t hops = 0; at->is_object() && at->contains("$ref"); ++hops) {
            if (hops > options_.max_depth) fail(pointer, "a chain of more than " + std::to_string(options_.max_depth) + " \"$ref\"s");
            only_with(*at, pointer, "$ref", {});
            auto [target, target_pointer] = resolve_ref(*at, pointer);
            at = target;
            pointer = target_pointer;
        }
        if (!at->is_object() && !at->is_boolean()) fail(pointer, std::string("a schema must be an object or a boolean, got ") + at->type_name());
        return {at, pointer};
    }

    static void check_merge_branch(const Json& branch, const std::string& pointer) {
        for (const auto& [key, value] : branch.items()) {
            if (!is_supported_keyword(key)) fail(pointer, "unsupported keyword " + json_quoted(key));
            if (is_annotation(key) || is_one_of(key, {"properties", "required"})) continue;
            if (key == "type" && value.is_string() && value == "object") continue;
            fail(child(pointer, key), "\"allOf\" merges object schemas with only \"type\": \"object\", \"properties\" and \"required\"; " +
                                          json_quoted(key) + " is not supported in a branch");
        }
    }

    // --- the whole grammar --------------------------------------------------------------------

    /// Prunes the rules that derive nothing, refuses left recursion, moves deep parts out and
    /// prints the rules still reachable from root.
    std::string finish() {
        std::vector<Rule>& rules = rules_.rules();
        GrammarCheck check(rules);
        const std::vector<bool> productive = check.derives(true);
        if (!productive[0]) fail("", "no JSON value validates against the schema (or none of finite size)");
        for (Rule& r : rules) r.body = check.prune(*r.body, productive);
        std::vector<Rule> kept = reachable(rules, check);
        if (const auto cycle = GrammarCheck(kept).left_recursive_cycle(); !cycle.empty()) fail_cycle(kept, cycle);
        kept = without_aliases(std::move(kept));
        std::vector<std::pair<std::string, Expr>> hoisted;
        for (Rule& r : kept) r.body = hoist_deep_parts(std::move(*r.body), 0, r.name, rules_, hoisted);
        for (auto& [name, body] : hoisted) kept.push_back({name, std::move(body), {}});
        add_rule_prefix(kept);
        std::string text = print_rules(kept);
        if (text.size() > options_.max_grammar_bytes)
            fail("", "the grammar would be " + std::to_string(text.size()) + " bytes, more than the limit of " +
                         std::to_string(options_.max_grammar_bytes) + " (JsonSchemaOptions::max_grammar_bytes)");
        return text;
    }

    /// Rules whose whole body is another rule (`root ::= root-1`, a $ref's rule for an object)
    /// merge with it: references use the target, and root takes over its target's body and name.
    /// Left recursion has been refused, so every chain of aliases ends.
    static std::vector<Rule> without_aliases(std::vector<Rule> rules) {
        std::unordered_map<std::string, std::string> alias;
        for (const Rule& r : rules)
            if (r.body->kind == Expr::Kind::Rule) alias.emplace(r.name, r.body->rule);
        auto target = [&](std::string name) {
            for (auto it = alias.find(name); it != alias.end(); it = alias.find(name)) name = it->second;
            return name;
        };
        const std::string root_target = target("root");
        std::unordered_map<std::string, std::string> renamed{{root_target, "root"}};
        for (const auto& [name, to] : alias) renamed.emplace(name, target(name) == root_target ? "root" : target(name));
        std::vector<Rule> out;
        for (Rule& r : rules) {
            if (alias.count(r.name)) continue;
            if (const auto it = renamed.find(r.name); it != renamed.end()) r.name = it->second;
            rename_refs(*r.body, renamed);
            (r.name == "root" ? out.insert(out.begin(), std::move(r)) : out.insert(out.end(), std::move(r)));
        }
        return out;
    }

    /// The prefix goes on last, so that the checks before name the rules as the schema does.
    void add_rule_prefix(std::vector<Rule>& rules) const {
        if (options_.rule_prefix.empty()) return;
        for (Rule& r : rules) {
            r.name.insert(0, options_.rule_prefix);
            prefix_refs(*r.body, options_.rule_prefix);
        }
    }

    static void prefix_refs(Expr& e, const std::string& prefix) {
        if (e.kind == Expr::Kind::Rule) e.rule.insert(0, prefix);
        for (Expr& item : e.items) prefix_refs(item, prefix);
    }

    static void rename_refs(Expr& e, const std::unordered_map<std::string, std::string>& renamed) {
        if (e.kind == Expr::Kind::Rule)
            if (const auto it = renamed.find(e.rule); it != renamed.end()) e.rule = it->second;
        for (Expr& item : e.items) rename_refs(item, renamed);
    }

    static std::vector<Rule> reachable(std::vector<Rule>& rules, const GrammarCheck& check) {
        std::vector<bool> seen(rules.size(), false);
        std::vector<std::size_t> work{0};
        seen[0] = true;
        while (!work.empty()) {
            std::set<std::size_t> refs;
            check.collect_refs(*rules[work.back()].body, refs);
            work.pop_back();
            for (const std::size_t r : refs)
                if (!seen[r]) seen[r] = true, work.push_back(r);
        }
        std::vector<Rule> kept;
        for (std::size_t r = 0; r < rules.size(); ++r)
            if (seen[r]) kept.push_back(std::move(rules[r]));
        return kept;
    }

    [[noreturn]] static void fail_cycle(const std::vector<Rule>& rules, const std::vector<std::size_t>& cycle) {
        std::string path, first;
        for (const std::size_t r : cycle) {
            const std::string& step = rules[r].origin.empty() ? rules[r].name : rules[r].origin;
            if (first.empty() && !rules[r].origin.empty()) first = rules[r].origin;
            path += step + " -> ";
        }
        if (first.empty()) first = rules[cycle[0]].name;
        fail(first.substr(first[0] == '#' ? 1 : first.size()), "\"$ref\" cycle that consumes no input: " + path + first);
    }

    const Json& root_;
    const JsonSchemaOptions& options_;
    RuleTable rules_;
    struct PendingRef {
        const Json* target;
        std::string pointer, name;
    };
    std::unordered_map<std::string, std::string> ref_rules_;  ///< target pointer -> rule
    std::vector<PendingRef> pending_refs_;
    std::map<CodePointSet, std::string> char_rules_;
    std::map<std::string, std::vector<std::string>> key_tail_rules_;  ///< KeyForm::tail_hint -> a rule per state
    std::unordered_map<std::string, std::string> pattern_rules_;
};

}  // namespace detail::schema_gbnf

/// GBNF text whose root rule accepts the JSON texts that validate against `schema` (draft
/// 2020-12, with draft 4-7 spellings of items and exclusiveMinimum), in canonical form: keys in
/// the order of `properties` (nlohmann::json sorts them; pass an ordered_json to keep the
/// schema's order), fixed values as nlohmann dumps them, integers without fraction or exponent,
/// whitespace as JsonSchemaOptions says. With ValueSyntax::GemmaToolCall the same values in
/// Gemma's tool-call syntax; with a rule_prefix the root rule is `<prefix>root`. Throws
/// GrammarError naming the keyword and its JSON pointer for anything it does not support,
/// rather than allow more than the schema does.
inline std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema, const JsonSchemaOptions& options = {}) {
    return detail::schema_gbnf::SchemaCompiler<nlohmann::ordered_json>(schema, options).compile();
}

inline std::string json_schema_to_gbnf(const nlohmann::json& schema, const JsonSchemaOptions& options = {}) {
    return detail::schema_gbnf::SchemaCompiler<nlohmann::json>(schema, options).compile();
}

/// The grammar for any JSON object (OpenAI's response_format {"type": "json_object"}).
inline std::string json_object_gbnf(const JsonSchemaOptions& options = {}) {
    return json_schema_to_gbnf(nlohmann::json{{"type", "object"}}, options);
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
