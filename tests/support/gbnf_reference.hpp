// A small, slow, independent reading of GBNF for the tests: its own parser of the text, a
// recognizer that finds every way a rule can match from a position (memoized on the node and
// the position, so short inputs are cheap), and a generator of random texts of the grammar.
// It shares no code with include/gemma4/grammar/, so it checks the JSON Schema compiler's
// output and, later, the library's own parser and matcher.
//
// A token reference `<...>` (up to the first '>', as gbnf.hpp reads it) stands for one special
// token. Text has no tokens, so the recognizer reads every occurrence of a referenced token's
// text in its input as that token: one unit of the input that only the reference matches (no
// class, literal or `.` does). A generated text writes a token as its text.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gemma4::test {

class ReferenceGrammar {
public:
    /// Parses GBNF text whose texts start at rule `start`; std::runtime_error on a syntax error,
    /// an undefined rule or no `start` rule.
    explicit ReferenceGrammar(std::string_view text, std::string start = "root") : text_(text), start_(std::move(start)) {
        skip_blank_lines();
        while (pos_ < text_.size()) {
            parse_rule();
            skip_blank_lines();
        }
        for (const auto& [name, used_at] : uses_)
            if (!rules_.count(name)) throw std::runtime_error("gbnf reference: undefined rule " + name);
        if (!rules_.count(start_)) throw std::runtime_error("gbnf reference: no rule " + start_ + " to start at");
        compute_costs();
    }

    /// Whether the whole of `utf8` matches the start rule. std::runtime_error on left recursion.
    bool matches(std::string_view utf8) const {
        std::u32string input;
        if (!read_units(utf8, input)) return false;
        input_ = &input;
        memo_.clear();
        const std::vector<std::size_t>& ends = match(rules_.at(start_), 0);
        const bool whole = std::find(ends.begin(), ends.end(), input.size()) != ends.end();
        input_ = nullptr;
        return whole;
    }

    /// A random text of the start rule. Past `depth` rule references deep it takes the cheapest
    /// way out.
    std::string generate(std::mt19937& rng, int depth) const {
        std::string out;
        generate_node(rules_.at(start_), rng, depth, out);
        return out;
    }

    std::size_t rule_count() const { return rules_.size(); }

private:
    enum class Kind { Literal, Class, Ref, Sequence, Choice, Repeat };
    /// Input units from here up are tokens (kFirstToken + i is tokens_[i]): above every code
    /// point, so that no class holds one.
    static constexpr char32_t kFirstToken = 0x110000;
    struct Node {
        Kind kind = Kind::Sequence;
        std::u32string text;                                // Literal (a token reference: its one unit)
        std::vector<std::pair<char32_t, char32_t>> ranges;  // Class, the members (negation applied)
        std::string name;                                   // Ref
        std::vector<int> kids;                              // Sequence, Choice, Repeat (one)
        std::uint32_t min = 0, max = 0;
        bool unbounded = false;
    };

    // --- parsing ---------------------------------------------------------------------------

    [[noreturn]] void fail(const std::string& what) const {
        throw std::runtime_error("gbnf reference: at byte " + std::to_string(pos_) + ": " + what);
    }
    char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
    bool at_end() const { return pos_ >= text_.size(); }

    void skip_comment() {
        while (!at_end() && peek() != '\n') ++pos_;
    }
    void skip_blank_lines() {
        while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\r' || peek() == '\n' || peek() == '#'))
            peek() == '#' ? skip_comment() : void(++pos_);
    }
    /// Blanks; newlines too inside parentheses.
    void skip_space(int nesting) {
        while (!at_end()) {
            const char c = peek();
            if (c == '#') skip_comment();
            else if (c == ' ' || c == '\t' || c == '\r' || (nesting > 0 && c == '\n')) ++pos_;
            else break;
        }
    }
    /// At a newline ending a line of a rule: moves to a following line that starts with '|'.
    bool continuation() {
        std::size_t probe = pos_;
        while (probe < text_.size() && (text_[probe] == ' ' || text_[probe] == '\t' || text_[probe] == '\r' || text_[probe] == '\n'))
            ++probe;
        if (probe < text_.size() && text_[probe] == '|') {
            pos_ = probe;
            return true;
        }
        return false;
    }

    static bool name_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    }

    std::string parse_name() {
        const std::size_t start = pos_;
        while (!at_end() && name_char(peek())) ++pos_;
        if (pos_ == start) fail("expected a name");
        return std::string(text_.substr(start, pos_ - start));
    }

    void parse_rule() {
        const std::string name = parse_name();
        skip_space(0);
        if (text_.substr(pos_, 3) != "::=") fail("expected ::=");
        pos_ += 3;
        if (rules_.count(name)) fail("rule " + name + " defined twice");
        rules_[name] = parse_choice(0);
        skip_space(0);
        if (!at_end() && peek() != '\n') fail("junk after rule " + name);
    }

    int add(Node n) {
        nodes_.push_back(std::move(n));
        return static_cast<int>(nodes_.size() - 1);
    }

    int parse_choice(int nesting) {
        Node choice;
        choice.kind = Kind::Choice;
        choice.kids.push_back(parse_sequence(nesting));
        while (true) {
            skip_space(nesting);
            if (nesting == 0 && peek() == '\n' && !continuation()) break;
            if (peek() != '|') break;
            ++pos_;
            choice.kids.push_back(parse_sequence(nesting));
        }
        return choice.kids.size() == 1 ? choice.kids[0] : add(std::move(choice));
    }

    int parse_sequence(int nesting) {
        Node sequence;
        while (true) {
            skip_space(nesting);
            const char c = peek();
            if (at_end() || c == '|' || c == ')' || c == '\n') break;
            sequence.kids.push_back(parse_postfix(parse_primary(nesting)));
        }
        return add(std::move(sequence));
    }

    int parse_primary(int nesting) {
        const char c = peek();
        if (c == '"') return parse_literal();
        if (c == '[') return parse_class();
        if (c == '<') return parse_token();
        if (c == '.') {
            ++pos_;
            Node any;
            any.kind = Kind::Class;
            any.ranges = {{0, 0x10FFFF}};
            return add(std::move(any));
        }
        if (c == '(') {
            ++pos_;
            const int inner = parse_choice(nesting + 1);
            skip_space(nesting + 1);
            if (peek() != ')') fail("expected )");
            ++pos_;
            return inner;
        }
        Node ref;
        ref.kind = Kind::Ref;
        ref.name = parse_name();
        uses_.emplace(ref.name, pos_);
        return add(std::move(ref));
    }

    int parse_postfix(int item) {
        while (true) {
            const char c = peek();
            Node rep;
            rep.kind = Kind::Repeat;
            rep.kids = {item};
            if (c == '*' || c == '+' || c == '?') {
                ++pos_;
                rep.min = c == '+' ? 1 : 0;
                rep.max = 1;
                rep.unbounded = c != '?';
            } else if (c == '{') {
                ++pos_;
                rep.min = rep.max = parse_number();
                if (peek() == ',') {
                    ++pos_;
                    if (peek() == '}') rep.unbounded = true;
                    else rep.max = parse_number();
                }
                if (peek() != '}') fail("expected }");
                ++pos_;
            } else {
                return item;
            }
            item = add(std::move(rep));
        }
    }

    std::uint32_t parse_number() {
        const std::size_t start = pos_;
        std::uint32_t n = 0;
        while (peek() >= '0' && peek() <= '9') n = n * 10 + static_cast<std::uint32_t>(text_[pos_++] - '0');
        if (pos_ == start) fail("expected a number");
        return n;
    }

    int parse_literal() {
        ++pos_;
        Node lit;
        lit.kind = Kind::Literal;
        while (peek() != '"') {
            if (at_end() || peek() == '\n') fail("unterminated literal");
            lit.text += parse_char();
        }
        ++pos_;
        if (lit.text.empty()) return add(Node{});  // "" is the empty sequence
        return add(std::move(lit));
    }

    /// `<...>` up to the first '>' on the line, as a literal of the token's one unit.
    int parse_token() {
        const std::size_t end = text_.find_first_of(">\n", pos_);
        if (end == std::string_view::npos || text_[end] != '>') fail("unterminated token reference");
        const std::string token(text_.substr(pos_, end + 1 - pos_));
        pos_ = end + 1;
        auto it = std::find(tokens_.begin(), tokens_.end(), token);
        if (it == tokens_.end()) it = tokens_.insert(tokens_.end(), token);
        Node lit;
        lit.kind = Kind::Literal;
        lit.text = std::u32string(1, kFirstToken + static_cast<char32_t>(it - tokens_.begin()));
        return add(std::move(lit));
    }

    int parse_class() {
        ++pos_;
        const bool negated = peek() == '^';
        if (negated) ++pos_;
        std::vector<std::pair<char32_t, char32_t>> members;
        while (peek() != ']') {
            if (at_end()) fail("unterminated class");
            const char32_t lo = parse_char();
            char32_t hi = lo;
            if (peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
                ++pos_;
                hi = parse_char();
            }
            members.emplace_back(lo, hi);
        }
        ++pos_;
        Node cls;
        cls.kind = Kind::Class;
        cls.ranges = negated ? complement(members) : members;
        return add(std::move(cls));
    }

    static std::vector<std::pair<char32_t, char32_t>> complement(std::vector<std::pair<char32_t, char32_t>> ranges) {
        std::sort(ranges.begin(), ranges.end());
        std::vector<std::pair<char32_t, char32_t>> out;
        char32_t next = 0;
        for (const auto& [lo, hi] : ranges) {
            if (lo > next) out.emplace_back(next, lo - 1);
            next = std::max<char32_t>(next, hi + 1);
        }
        if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
        return out;
    }

    char32_t parse_char() {
        if (peek() != '\\') return parse_utf8();
        ++pos_;
        const char c = text_[pos_++];
        switch (c) {
            case 'n': return '\n';
            case 't': return '\t';
            case 'r': return '\r';
            case 'x': return parse_hex(2);
            case 'u': return parse_hex(4);
            case 'U': return parse_hex(8);
            case '\\': case '"': case '[': case ']': case '-': case '^': return static_cast<char32_t>(c);
            default: fail(std::string("unknown escape \\") + c);
        }
    }

    char32_t parse_hex(int digits) {
        char32_t v = 0;
        for (int i = 0; i < digits; ++i) {
            const char c = text_[pos_++];
            const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0) fail("bad hex escape");
            v = v * 16 + static_cast<char32_t>(d);
        }
        return v;
    }

    char32_t parse_utf8() {
        std::u32string one;
        const auto lead = static_cast<unsigned char>(peek());
        const std::size_t n = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
        if (!decode(text_.substr(pos_, n), one) || one.size() != 1) fail("bad UTF-8");
        pos_ += n;
        return one[0];
    }

    /// The input as units: each occurrence of a referenced token's text is that token (the
    /// longest when two start at one place), the rest of the text its code points. False on
    /// malformed UTF-8.
    bool read_units(std::string_view s, std::u32string& out) const {
        std::size_t text_start = 0;
        for (std::size_t i = 0; i < s.size();) {
            std::size_t best = tokens_.size();
            for (std::size_t t = 0; t < tokens_.size(); ++t)
                if (s.substr(i).starts_with(tokens_[t]) && (best == tokens_.size() || tokens_[t].size() > tokens_[best].size())) best = t;
            if (best == tokens_.size()) {
                ++i;
                continue;
            }
            if (!decode(s.substr(text_start, i - text_start), out)) return false;
            out += kFirstToken + static_cast<char32_t>(best);
            i += tokens_[best].size();
            text_start = i;
        }
        return decode(s.substr(text_start), out);
    }

    /// UTF-8 to code points; false on malformed text.
    static bool decode(std::string_view s, std::u32string& out) {
        for (std::size_t i = 0; i < s.size();) {
            const auto b0 = static_cast<unsigned char>(s[i]);
            const std::size_t n = b0 < 0x80 ? 1 : (b0 & 0xE0) == 0xC0 ? 2 : (b0 & 0xF0) == 0xE0 ? 3 : (b0 & 0xF8) == 0xF0 ? 4 : 0;
            if (n == 0 || i + n > s.size()) return false;
            char32_t c = n == 1 ? b0 : b0 & (0xFF >> (n + 1));
            for (std::size_t k = 1; k < n; ++k) {
                if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
                c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
            }
            const char32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
            if (c < smallest[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return false;
            out += c;
            i += n;
        }
        return true;
    }

    // --- recognizing -----------------------------------------------------------------------

    /// The positions where node `n` can end when it starts at `pos`, sorted.
    const std::vector<std::size_t>& match(int n, std::size_t pos) const {
        const auto key = std::make_pair(n, pos);
        if (const auto it = memo_.find(key); it != memo_.end()) {
            if (!it->second.first) throw std::runtime_error("gbnf reference: left recursion at node " + std::to_string(n));
            return it->second.second;
        }
        memo_[key] = {false, {}};
        std::vector<std::size_t> ends = compute(nodes_[static_cast<std::size_t>(n)], pos);
        auto& slot = memo_[key];
        slot = {true, std::move(ends)};
        return slot.second;
    }

    std::vector<std::size_t> step(int n, const std::set<std::size_t>& from) const {
        std::set<std::size_t> out;
        for (const std::size_t p : from) {
            const auto& ends = match(n, p);
            out.insert(ends.begin(), ends.end());
        }
        return {out.begin(), out.end()};
    }

    std::vector<std::size_t> compute(const Node& node, std::size_t pos) const {
        const std::u32string& in = *input_;
        switch (node.kind) {
            case Kind::Literal:
                if (in.compare(pos, node.text.size(), node.text) == 0 && pos + node.text.size() <= in.size()) return {pos + node.text.size()};
                return {};
            case Kind::Class:
                if (pos < in.size() && std::any_of(node.ranges.begin(), node.ranges.end(), [&](const auto& r) { return r.first <= in[pos] && in[pos] <= r.second; }))
                    return {pos + 1};
                return {};
            case Kind::Ref: return match(rules_.at(node.name), pos);
            case Kind::Sequence: {
                std::set<std::size_t> at{pos};
                for (const int kid : node.kids) {
                    const auto next = step(kid, at);
                    at = std::set<std::size_t>(next.begin(), next.end());
                    if (at.empty()) break;
                }
                return {at.begin(), at.end()};
            }
            case Kind::Choice: {
                std::set<std::size_t> out;
                for (const int kid : node.kids) {
                    const auto& ends = match(kid, pos);
                    out.insert(ends.begin(), ends.end());
                }
                return {out.begin(), out.end()};
            }
            case Kind::Repeat: return repeat(node, pos);
        }
        return {};
    }

    std::vector<std::size_t> repeat(const Node& node, std::size_t pos) const {
        std::set<std::size_t> result, seen, at{pos};
        if (node.min == 0) result.insert(pos), seen.insert(pos);
        for (std::uint32_t i = 1; node.unbounded || i <= node.max; ++i) {
            const auto next = step(node.kids[0], at);
            at.clear();
            for (const std::size_t p : next) {
                if (i < node.min) at.insert(p);
                else if (seen.insert(p).second || !node.unbounded) at.insert(p), result.insert(p);
            }
            if (at.empty()) break;
        }
        return {result.begin(), result.end()};
    }

    // --- generating ------------------------------------------------------------------------

    /// cost[n]: how many rule references deep the cheapest text of node n goes.
    void compute_costs() {
        constexpr int kInfinite = 1 << 20;
        cost_.assign(nodes_.size(), kInfinite);
        for (bool changed = true; changed;) {
            changed = false;
            for (std::size_t n = 0; n < nodes_.size(); ++n) {
                const int c = node_cost(nodes_[n]);
                if (c < cost_[n]) cost_[n] = c, changed = true;
            }
        }
    }

    int node_cost(const Node& node) const {
        constexpr int kInfinite = 1 << 20;
        switch (node.kind) {
            case Kind::Literal:
            case Kind::Class: return 0;
            case Kind::Ref: return std::min(kInfinite, 1 + cost_[static_cast<std::size_t>(rules_.at(node.name))]);
            case Kind::Sequence: {
                int c = 0;
                for (const int k : node.kids) c = std::max(c, cost_[static_cast<std::size_t>(k)]);
                return c;
            }
            case Kind::Choice: {
                int c = kInfinite;
                for (const int k : node.kids) c = std::min(c, cost_[static_cast<std::size_t>(k)]);
                return c;
            }
            case Kind::Repeat: return node.min == 0 ? 0 : cost_[static_cast<std::size_t>(node.kids[0])];
        }
        return kInfinite;
    }

    void generate_node(int n, std::mt19937& rng, int depth, std::string& out) const {
        const Node& node = nodes_[static_cast<std::size_t>(n)];
        switch (node.kind) {
            case Kind::Literal:
                for (const char32_t c : node.text) c >= kFirstToken ? void(out += tokens_[c - kFirstToken]) : encode(c, out);
                return;
            case Kind::Class: encode(random_member(node, rng), out); return;
            case Kind::Ref: generate_node(rules_.at(node.name), rng, depth - 1, out); return;
            case Kind::Sequence:
                for (const int k : node.kids) generate_node(k, rng, depth, out);
                return;
            case Kind::Choice: generate_node(pick(node, rng, depth), rng, depth, out); return;
            case Kind::Repeat: {
                const std::uint32_t extra_max = node.unbounded ? 3 : std::min<std::uint32_t>(node.max - node.min, 3);
                const std::uint32_t times = node.min + (depth > 0 ? std::uniform_int_distribution<std::uint32_t>(0, extra_max)(rng) : 0);
                for (std::uint32_t i = 0; i < times; ++i) generate_node(node.kids[0], rng, depth, out);
                return;
            }
        }
    }

    int pick(const Node& node, std::mt19937& rng, int depth) const {
        if (depth > 0) return node.kids[std::uniform_int_distribution<std::size_t>(0, node.kids.size() - 1)(rng)];
        return *std::min_element(node.kids.begin(), node.kids.end(),
                                 [&](int a, int b) { return cost_[static_cast<std::size_t>(a)] < cost_[static_cast<std::size_t>(b)]; });
    }

    /// A member of the class: a range at random, then often its first code point or one near
    /// it, sometimes anywhere in it; never a surrogate.
    static char32_t random_member(const Node& node, std::mt19937& rng) {
        for (int attempt = 0; attempt < 100; ++attempt) {
            const auto& [lo, hi] = node.ranges[std::uniform_int_distribution<std::size_t>(0, node.ranges.size() - 1)(rng)];
            const std::uint32_t span = hi - lo;
            const std::uint32_t offset = std::uniform_int_distribution<int>(0, 1)(rng)
                                             ? std::uniform_int_distribution<std::uint32_t>(0, std::min<std::uint32_t>(span, 40))(rng)
                                             : std::uniform_int_distribution<std::uint32_t>(0, span)(rng);
            const char32_t c = lo + offset;
            if (c < 0xD800 || c > 0xDFFF) return c;
        }
        throw std::runtime_error("gbnf reference: a class of surrogates only");
    }

    static void encode(char32_t c, std::string& out) {
        if (c < 0x80) {
            out += static_cast<char>(c);
        } else if (c < 0x800) {
            out += static_cast<char>(0xC0 | (c >> 6));
            out += static_cast<char>(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            out += static_cast<char>(0xE0 | (c >> 12));
            out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (c & 0x3F));
        } else {
            out += static_cast<char>(0xF0 | (c >> 18));
            out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
            out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (c & 0x3F));
        }
    }

    std::string text_;
    std::string start_;
    std::size_t pos_ = 0;
    std::vector<std::string> tokens_;  ///< the token references' texts, brackets included
    std::vector<Node> nodes_;
    std::map<std::string, int> rules_;
    std::map<std::string, std::size_t> uses_;
    std::vector<int> cost_;
    mutable const std::u32string* input_ = nullptr;
    mutable std::map<std::pair<int, std::size_t>, std::pair<bool, std::vector<std::size_t>>> memo_;
};

}  // namespace gemma4::test
