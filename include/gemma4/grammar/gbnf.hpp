// GBNF, llama.cpp's grammar text, parsed into a Grammar: rules of alternatives of elements, where
// an element is a character class or a reference to a rule. Repetition and grouping become
// auxiliary rules here, so the matcher sees only classes, references and ends.
//
// The syntax (docs/structured-output.md):
//   name ::= alternative | alternative ...     one rule per line; a line that starts with `|`
//                                              continues the rule; `root` is where matching starts
//   "literal"  [a-z0-9_]  [^"\\]  .             text, a class of code points, its complement, any
//   <|tool_call>  <[106]>                       one token: a special token by its text, any by id
//   ( ... )  x*  x+  x?  x{m}  x{m,}  x{m,n}    grouping and repetition
//   # comment                                  to the end of the line
// Escapes in literals and classes: \n \t \r \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH. Characters are
// Unicode code points of UTF-8 text. Left recursion is an error (a rule that can begin with
// itself), as are undefined rules and a missing root.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/grammar/detail/rule_cycles.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// A set of code points: sorted, disjoint ranges (a complement is stored as its ranges), with the
/// ASCII part as a bitmap for the common case.
struct CharClass {
    std::vector<std::pair<char32_t, char32_t>> ranges;
    std::array<std::uint64_t, 2> ascii{};

    bool contains(char32_t c) const {
        if (c < 128) return (ascii[c >> 6] >> (c & 63)) & 1;
        const auto it = std::upper_bound(ranges.begin(), ranges.end(), std::pair{c, char32_t{0x10FFFF + 1}});
        return it != ranges.begin() && std::prev(it)->second >= c;
    }
    /// Whether some code point in [lo, hi] is in the class.
    bool intersects(char32_t lo, char32_t hi) const {
        return std::any_of(ranges.begin(), ranges.end(), [&](const auto& r) { return r.first <= hi && r.second >= lo; });
    }
    bool operator==(const CharClass& other) const { return ranges == other.ranges; }
};

/// A compiled grammar. Rule r's alternatives start at `alternatives[r][i]` in `elements`; each
/// runs to an End element. A Rule element's argument is a rule index, a Chars element's an index
/// into `classes`.
struct Grammar {
    enum class Op : std::uint8_t { Chars, Rule, Token, End };
    struct Element {
        Op op;
        std::uint32_t arg;
    };

    std::vector<Element> elements;
    std::vector<std::vector<std::uint32_t>> alternatives;
    std::vector<std::string> rule_names;  ///< auxiliary rules are named after their origin, e.g. "item_3"
    std::vector<CharClass> classes;
    /// The token references as written: "<|tool_call>" (a special token's text) or "<[106]>" (an id).
    std::vector<std::string> tokens;
    std::uint32_t root = 0;

    const CharClass& class_at(std::uint32_t position) const { return classes[elements[position].arg]; }
};

/// Limits on what one grammar text may ask for, so that a request cannot exhaust memory.
struct GrammarLimits {
    std::size_t max_text_bytes = 1 << 20;
    std::size_t max_elements = 1 << 20;
    std::uint32_t max_repeat = 10000;  ///< the m and n of x{m,n}
    std::uint32_t max_nesting = 200;   ///< parentheses inside parentheses
};

namespace detail {

inline constexpr char32_t kMaxCodePoint = 0x10FFFF;

/// Sorted, merged ranges and the ASCII bitmap of a class given as (possibly overlapping) ranges.
inline CharClass make_char_class(std::vector<std::pair<char32_t, char32_t>> ranges, bool negated) {
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<char32_t, char32_t>> merged;
    for (const auto& r : ranges) {
        if (!merged.empty() && r.first <= merged.back().second + 1)
            merged.back().second = std::max(merged.back().second, r.second);
        else
            merged.push_back(r);
    }
    if (negated) {
        std::vector<std::pair<char32_t, char32_t>> complement;
        char32_t next = 0;
        for (const auto& r : merged) {
            if (r.first > next) complement.emplace_back(next, r.first - 1);
            next = r.second + 1;
        }
        if (next <= kMaxCodePoint) complement.emplace_back(next, kMaxCodePoint);
        merged = std::move(complement);
    }
    // No UTF-8 text holds a surrogate: dropping them keeps CharClass::intersects exact for the
    // code points a split character may still become.
    CharClass out;
    for (const auto& [lo, hi] : merged) {
        if (lo < 0xD800) out.ranges.emplace_back(lo, std::min<char32_t>(hi, 0xD7FF));
        if (hi > 0xDFFF) out.ranges.emplace_back(std::max<char32_t>(lo, 0xE000), hi);
    }
    for (const auto& [lo, hi] : out.ranges)
        for (char32_t c = lo; c <= std::min<char32_t>(hi, 127); ++c) out.ascii[c >> 6] |= std::uint64_t{1} << (c & 63);
    return out;
}

/// The recursive-descent parser of GBNF text into a Grammar.
class GbnfParser {
public:
    GbnfParser(std::string_view text, const GrammarLimits& limits) : text_(text), limits_(limits) {
        if (text.size() > limits.max_text_bytes)
            throw GrammarError("grammar: the text is " + std::to_string(text.size()) + " bytes, more than the limit of " +
                               std::to_string(limits.max_text_bytes));
    }

    Grammar parse() {
        skip_space(true);
        while (pos_ < text_.size()) {
            parse_rule();
            skip_space(true);
        }
        return finish();
    }

private:
    /// A sequence being built: the elements of one alternative.
    using Sequence = std::vector<Grammar::Element>;

    [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }
    [[noreturn]] void fail_at(std::size_t at, const std::string& what) const {
        std::size_t line = 1, column = 1;
        for (std::size_t i = 0; i < at && i < text_.size(); ++i) {
            if (text_[i] == '\n') {
                ++line;
                column = 1;
            } else {
                ++column;
            }
        }
        throw GrammarError("grammar: line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + what);
    }

    bool at_end() const { return pos_ >= text_.size(); }
    char peek(std::size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }

    /// Skips blanks and comments; newlines too when `newlines` (between rules, inside groups).
    void skip_space(bool newlines) {
        while (!at_end()) {
            const char c = peek();
            if (c == '#') {
                while (!at_end() && peek() != '\n') ++pos_;
            } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
                ++pos_;
            } else {
                break;
            }
        }
    }

    /// At a newline outside parentheses: whether the next non-blank line continues the rule
    /// (starts with `|`). Consumes the blank lines when it does.
    bool continues_on_next_line() {
        const std::size_t line_end = pos_;
        skip_space(true);
        if (peek() == '|') return true;
        pos_ = line_end;
        return false;
    }

    static bool is_name_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    }

    std::string parse_name() {
        const std::size_t start = pos_;
        while (!at_end() && is_name_char(peek())) ++pos_;
        if (pos_ == start) fail(std::string("expected a rule name, got ") + describe_here());
        return std::string(text_.substr(start, pos_ - start));
    }

    std::string describe_here() const {
        if (at_end()) return "the end of the text";
        const char c = peek();
        if (c == '\n') return "a newline";
        return std::string("'") + c + "'";
    }

    void parse_rule() {
        const std::size_t start = pos_;
        const std::string name = parse_name();
        skip_space(false);
        if (!(peek() == ':' && peek(1) == ':' && peek(2) == '=')) fail("expected '::=' after rule name \"" + name + "\"");
        pos_ += 3;
        const std::uint32_t rule = rule_index(name);
        if (defined_[rule]) fail_at(start, "rule \"" + name + "\" is defined twice");
        defined_[rule] = true;
        definitions_[rule] = parse_alternatives(name, 0);
        if (!at_end() && peek() != '\n') fail(std::string("unexpected ") + describe_here() + " in rule \"" + name + "\"");
    }

    /// alternative ('|' alternative)*, up to the end of the rule (nesting 0) or the closing
    /// parenthesis (left for the caller).
    std::vector<Sequence> parse_alternatives(const std::string& rule, std::uint32_t nesting) {
        std::vector<Sequence> alternatives;
        alternatives.push_back(parse_sequence(rule, nesting));
        while (true) {
            skip_space(nesting > 0);
            if (nesting == 0 && peek() == '\n') continues_on_next_line();  // moves to a '|' that continues the rule
            if (peek() != '|') break;
            ++pos_;
            alternatives.push_back(parse_sequence(rule, nesting));
        }
        return alternatives;
    }

    Sequence parse_sequence(const std::string& rule, std::uint32_t nesting) {
        Sequence sequence;
        while (true) {
            skip_space(nesting > 0);
            const char c = peek();
            if (at_end() || c == '|' || c == ')' || c == '\n') break;
            const std::size_t item_start = sequence.size();
            parse_item(rule, nesting, sequence);
            parse_repetitions(rule, sequence, item_start);
            if (sequence.size() > limits_.max_elements)
                fail("the grammar has more than " + std::to_string(limits_.max_elements) + " elements");
        }
        return sequence;
    }

    /// One literal, class, `.`, rule name or group, appended to `sequence`.
    void parse_item(const std::string& rule, std::uint32_t nesting, Sequence& sequence) {
        const char c = peek();
        if (c == '"') {
            ++pos_;
            while (peek() != '"') {
                if (at_end() || peek() == '\n') fail("unterminated string literal");
                const char32_t ch = parse_char();
                sequence.push_back({Grammar::Op::Chars, class_index(make_char_class({{ch, ch}}, false))});
            }
            ++pos_;
        } else if (c == '[') {
            sequence.push_back({Grammar::Op::Chars, class_index(parse_class())});
        } else if (c == '.') {
            ++pos_;
            sequence.push_back({Grammar::Op::Chars, class_index(make_char_class({{0, kMaxCodePoint}}, false))});
        } else if (c == '(') {
            if (nesting + 1 > limits_.max_nesting) fail("parentheses nested deeper than " + std::to_string(limits_.max_nesting));
            ++pos_;
            auto alternatives = parse_alternatives(rule, nesting + 1);
            skip_space(true);
            if (peek() != ')') fail("expected ')', got " + describe_here());
            ++pos_;
            sequence.push_back({Grammar::Op::Rule, aux_rule(rule, std::move(alternatives))});
        } else if (c == '<') {
            sequence.push_back({Grammar::Op::Token, token_index(parse_token_reference())});
        } else if (is_name_char(c)) {
            sequence.push_back({Grammar::Op::Rule, rule_index(parse_name())});
        } else {
            fail(std::string("unexpected ") + describe_here());
        }
    }

    /// Postfix operators on the item that starts at `item_start` of `sequence`.
    void parse_repetitions(const std::string& rule, Sequence& sequence, std::size_t item_start) {
        while (true) {
            const char c = peek();
            if (c != '*' && c != '+' && c != '?' && c != '{') return;
            std::uint32_t min = 0, max = 0;
            bool unbounded = false;
            if (c == '{') {
                parse_bounds(min, max, unbounded);
            } else {
                ++pos_;
                min = c == '+' ? 1 : 0;
                max = c == '?' ? 1 : 0;
                unbounded = c != '?';
            }
            // The item as one element: a group rule when it spans several (a literal).
            Sequence item(sequence.begin() + static_cast<std::ptrdiff_t>(item_start), sequence.end());
            sequence.resize(item_start);
            const Grammar::Element one =
                item.size() == 1 ? item.front() : Grammar::Element{Grammar::Op::Rule, aux_rule(rule, {std::move(item)})};
            append_repetition(rule, one, min, max, unbounded, sequence);
            if (sequence.size() > limits_.max_elements)
                fail("the grammar has more than " + std::to_string(limits_.max_elements) + " elements");
        }
    }

    void parse_bounds(std::uint32_t& min, std::uint32_t& max, bool& unbounded) {
        ++pos_;  // '{'
        skip_space(false);
        min = parse_count();
        skip_space(false);
        unbounded = false;
        max = min;
        if (peek() == ',') {
            ++pos_;
            skip_space(false);
            if (peek() == '}') {
                unbounded = true;
            } else {
                max = parse_count();
                if (max < min) fail("repetition {" + std::to_string(min) + "," + std::to_string(max) + "}: max is below min");
            }
            skip_space(false);
        }
        if (peek() != '}') fail("expected '}' to close the repetition, got " + describe_here());
        ++pos_;
    }

    std::uint32_t parse_count() {
        const std::size_t start = pos_;
        std::uint64_t value = 0;
        while (peek() >= '0' && peek() <= '9') {
            value = value * 10 + static_cast<std::uint64_t>(peek() - '0');
            if (value > limits_.max_repeat) fail("repetition count above the limit of " + std::to_string(limits_.max_repeat));
            ++pos_;
        }
        if (pos_ == start) fail("expected a repetition count, got " + describe_here());
        return static_cast<std::uint32_t>(value);
    }

    /// x{min,max} as: min copies of x, then either x* (unbounded) or max − min nested optionals
    /// (x (x (x)?)?)?, which keeps the alternatives unambiguous.
    void append_repetition(const std::string& rule, Grammar::Element x, std::uint32_t min, std::uint32_t max, bool unbounded,
                           Sequence& sequence) {
        if (static_cast<std::uint64_t>(sequence.size()) + min + 1 > limits_.max_elements)
            fail("the grammar has more than " + std::to_string(limits_.max_elements) + " elements");
        for (std::uint32_t i = 0; i < min; ++i) sequence.push_back(x);
        if (unbounded) {
            const std::uint32_t star = aux_rule(rule, {});
            definitions_[star] = {{x, {Grammar::Op::Rule, star}}, {}};
            sequence.push_back({Grammar::Op::Rule, star});
            return;
        }
        if (max == min) return;
        std::uint32_t tail = aux_rule(rule, {{x}, {}});
        for (std::uint32_t i = min + 1; i < max; ++i) tail = aux_rule(rule, {{x, {Grammar::Op::Rule, tail}}, {}});
        sequence.push_back({Grammar::Op::Rule, tail});
    }

    /// `<…>` up to the first '>' on the line: a token's text, or `<[N]>` for id N.
    std::string parse_token_reference() {
        const std::size_t start = pos_;
        while (!at_end() && peek() != '>' && peek() != '\n') ++pos_;
        if (peek() != '>') fail_at(start, "unterminated token reference (a '<' needs its '>' on the same line)");
        ++pos_;
        std::string text(text_.substr(start, pos_ - start));
        if (text.size() > 2 && text[1] == '[') {
            const bool digits = text.size() > 4 && text[text.size() - 2] == ']' &&
                                std::all_of(text.begin() + 2, text.end() - 2, [](char d) { return d >= '0' && d <= '9'; }) && text.size() < 16;
            if (!digits) fail_at(start, "token id reference must be <[N]> with N a number, got " + text);
        }
        return text;
    }

    std::uint32_t token_index(std::string text) {
        const auto it = std::find(tokens_.begin(), tokens_.end(), text);
        if (it != tokens_.end()) return static_cast<std::uint32_t>(it - tokens_.begin());
        tokens_.push_back(std::move(text));
        return static_cast<std::uint32_t>(tokens_.size() - 1);
    }

    CharClass parse_class() {
        ++pos_;  // '['
        const bool negated = peek() == '^';
        if (negated) ++pos_;
        std::vector<std::pair<char32_t, char32_t>> ranges;
        while (peek() != ']') {
            if (at_end() || peek() == '\n') fail("unterminated character class");
            const char32_t lo = parse_char();
            char32_t hi = lo;
            if (peek() == '-' && peek(1) != ']') {
                ++pos_;
                hi = parse_char();
                if (hi < lo) fail("character range is reversed");
            }
            ranges.emplace_back(lo, hi);
        }
        ++pos_;
        CharClass out = make_char_class(std::move(ranges), negated);
        if (out.ranges.empty()) fail("character class matches nothing");
        return out;
    }

    /// One character of a literal or class: an escape or a UTF-8 sequence.
    char32_t parse_char() {
        const auto c = static_cast<unsigned char>(peek());
        if (c == '\\') {
            ++pos_;
            return parse_escape();
        }
        return parse_utf8();
    }

    char32_t parse_escape() {
        const char c = peek();
        ++pos_;
        switch (c) {
            case 'n': return '\n';
            case 't': return '\t';
            case 'r': return '\r';
            case '\\': case '"': case '[': case ']': case '-': case '^': case '/': return static_cast<char32_t>(c);
            case 'x': return parse_hex(2);
            case 'u': return parse_hex(4);
            case 'U': return parse_hex(8);
            default: fail_at(pos_ - 2, std::string("unknown escape '\\") + (c ? std::string(1, c) : std::string()) + "'");
        }
    }

    char32_t parse_hex(int digits) {
        std::uint32_t value = 0;
        for (int i = 0; i < digits; ++i) {
            const char c = peek();
            int d = -1;
            if (c >= '0' && c <= '9') d = c - '0';
            else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
            else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
            if (d < 0) fail("expected " + std::to_string(digits) + " hex digits");
            value = value * 16 + static_cast<std::uint32_t>(d);
            ++pos_;
        }
        if (value > kMaxCodePoint || (value >= 0xD800 && value <= 0xDFFF)) fail("escape is not a Unicode scalar value");
        return value;
    }

    char32_t parse_utf8() {
        const auto lead = static_cast<unsigned char>(peek());
        const int length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 0;
        if (length == 0 || pos_ + static_cast<std::size_t>(length) > text_.size()) fail("invalid UTF-8");
        char32_t value = length == 1 ? lead : lead & (0x7F >> length);
        for (int i = 1; i < length; ++i) {
            const auto b = static_cast<unsigned char>(text_[pos_ + static_cast<std::size_t>(i)]);
            if ((b & 0xC0) != 0x80) fail("invalid UTF-8");
            value = (value << 6) | (b & 0x3F);
        }
        static constexpr char32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
        if (value < kSmallest[length] || value > kMaxCodePoint || (value >= 0xD800 && value <= 0xDFFF)) fail("invalid UTF-8");
        pos_ += static_cast<std::size_t>(length);
        return value;
    }

    std::uint32_t rule_index(const std::string& name) {
        const auto [it, added] = names_.try_emplace(name, static_cast<std::uint32_t>(rule_names_.size()));
        if (added) {
            rule_names_.push_back(name);
            first_use_.push_back(pos_);
            definitions_.emplace_back();
            defined_.push_back(false);
        }
        return it->second;
    }

    /// A new rule named after `origin` ("origin_7"), defined by `alternatives`.
    std::uint32_t aux_rule(const std::string& origin, std::vector<Sequence> alternatives) {
        std::string name;
        do {
            name = origin + "_" + std::to_string(++aux_count_);
        } while (names_.count(name));
        const std::uint32_t index = rule_index(name);
        defined_[index] = true;
        definitions_[index] = std::move(alternatives);
        return index;
    }

    std::uint32_t class_index(CharClass c) {
        auto key = c.ranges;
        const auto [it, added] = class_ids_.try_emplace(std::move(key), static_cast<std::uint32_t>(classes_.size()));
        if (added) classes_.push_back(std::move(c));
        return it->second;
    }

    Grammar finish();

    std::string_view text_;
    GrammarLimits limits_;
    std::size_t pos_ = 0;
    std::map<std::string, std::uint32_t> names_;
    std::vector<std::string> rule_names_;
    std::vector<std::vector<Sequence>> definitions_;
    std::vector<bool> defined_;
    std::vector<std::size_t> first_use_;
    std::map<std::vector<std::pair<char32_t, char32_t>>, std::uint32_t> class_ids_;
    std::vector<CharClass> classes_;
    std::vector<std::string> tokens_;
    std::uint32_t aux_count_ = 0;
};

/// Rules that can match the empty text (a fixed point over the alternatives).
inline std::vector<bool> nullable_rules(const Grammar& g) {
    std::vector<bool> nullable(g.alternatives.size(), false);
    for (bool changed = true; changed;) {
        changed = false;
        for (std::size_t r = 0; r < g.alternatives.size(); ++r) {
            if (nullable[r]) continue;
            for (const std::uint32_t start : g.alternatives[r]) {
                std::uint32_t p = start;
                while (g.elements[p].op == Grammar::Op::Rule && nullable[g.elements[p].arg]) ++p;
                if (g.elements[p].op == Grammar::Op::End) {
                    nullable[r] = changed = true;
                    break;
                }
            }
        }
    }
    return nullable;
}

/// Throws when a rule can begin with itself without consuming a character: the matcher's
/// expansion of it would never end.
inline void check_left_recursion(const Grammar& g) {
    const std::vector<bool> nullable = nullable_rules(g);
    // starts[r]: the rules r can begin with.
    std::vector<std::vector<std::size_t>> starts(g.alternatives.size());
    for (std::size_t r = 0; r < g.alternatives.size(); ++r)
        for (const std::uint32_t start : g.alternatives[r])
            for (std::uint32_t p = start; g.elements[p].op == Grammar::Op::Rule; ++p) {
                starts[r].push_back(g.elements[p].arg);
                if (!nullable[g.elements[p].arg]) break;
            }
    if (const auto cycle = find_rule_cycle(starts); !cycle.empty())
        throw GrammarError("grammar: rule \"" + g.rule_names[cycle.front()] + "\" is left-recursive (it can begin with itself)");
}

inline Grammar GbnfParser::finish() {
    const auto root = names_.find("root");
    if (root == names_.end() || !defined_[root->second]) throw GrammarError("grammar: no rule named \"root\"");
    for (std::uint32_t r = 0; r < rule_names_.size(); ++r)
        if (!defined_[r]) fail_at(first_use_[r], "undefined rule \"" + rule_names_[r] + "\"");
    Grammar g;
    g.root = root->second;
    g.rule_names = std::move(rule_names_);
    g.classes = std::move(classes_);
    g.tokens = std::move(tokens_);
    g.alternatives.resize(definitions_.size());
    for (std::size_t r = 0; r < definitions_.size(); ++r)
        for (const Sequence& sequence : definitions_[r]) {
            g.alternatives[r].push_back(static_cast<std::uint32_t>(g.elements.size()));
            g.elements.insert(g.elements.end(), sequence.begin(), sequence.end());
            g.elements.push_back({Grammar::Op::End, 0});
        }
    if (g.elements.size() > limits_.max_elements)
        throw GrammarError("grammar: more than " + std::to_string(limits_.max_elements) + " elements");
    check_left_recursion(g);
    return g;
}

}  // namespace detail

/// Parses GBNF text (the syntax at the top of this header). GrammarError names the line and
/// column of a mistake.
inline Grammar parse_gbnf(std::string_view text, const GrammarLimits& limits = {}) {
    return detail::GbnfParser(text, limits).parse();
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
