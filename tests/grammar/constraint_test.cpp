#include <gemma4/grammar/constraint.hpp>

#include <catch2/catch.hpp>

#include <gemma4/detail/random.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using gemma4::Constraint;
using gemma4::Grammar;
using gemma4::GrammarError;
using gemma4::GrammarMatcher;
using gemma4::TokenVocabulary;

namespace {

/// A reference for what the matcher decides, written without its automaton: a depth-first
/// search over the grammar's stacks for a parse of `text`. `text` may end inside a character
/// (the code point range its last bytes allow is `tail`).
class ReferenceParser {
public:
    explicit ReferenceParser(const Grammar& g) : g_(g) {}

    /// Whether some sentence of the grammar begins with `text`.
    bool viable(const std::string& text) const { return run(text, false); }
    /// Whether `text` is a sentence of the grammar.
    bool complete(const std::string& text) const { return run(text, true); }

private:
    struct Decoded {
        std::vector<char32_t> cps;
        std::optional<std::string> tail;  ///< the bytes of a character cut short
        bool valid = true;
    };

    static Decoded decode(const std::string& s) {
        Decoded d;
        for (std::size_t i = 0; i < s.size();) {
            const auto b = static_cast<unsigned char>(s[i]);
            const int n = b < 0x80 ? 1 : b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
            if (n == 0) return d.valid = false, d;
            char32_t v = n == 1 ? b : b & (0x7F >> n);
            int have = 1;
            for (; have < n && i + static_cast<std::size_t>(have) < s.size(); ++have) {
                const auto c = static_cast<unsigned char>(s[i + static_cast<std::size_t>(have)]);
                if ((c & 0xC0) != 0x80) return d.valid = false, d;
                v = (v << 6) | (c & 0x3F);
            }
            if (have < n) {
                d.tail = s.substr(i);
                return d;
            }
            static constexpr char32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
            if (v < kSmallest[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return d.valid = false, d;
            d.cps.push_back(v);
            i += static_cast<std::size_t>(n);
        }
        return d;
    }

    /// Whether a valid character that starts with `prefix` is in `c`: every completion is
    /// tried, the last two bytes of a four-byte character as one block of 4096 code points.
    static bool some_completion_in(const std::string& prefix, const gemma4::CharClass& c) {
        const auto lead = static_cast<unsigned char>(prefix[0]);
        const std::size_t n = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
        if (n == 4 && prefix.size() == 1) {
            for (int b = 0x80; b < 0xC0; ++b)
                if (some_completion_in(prefix + static_cast<char>(b), c)) return true;
            return false;
        }
        const std::size_t missing = n - prefix.size();
        if (n == 4 && missing == 2) {
            const char32_t lo = ((char32_t{lead} & 0x07) << 18) | ((static_cast<unsigned char>(prefix[1]) & 0x3Fu) << 12);
            return lo >= 0x10000 && lo <= 0x10FFFF && c.intersects(lo, lo + 0xFFF);
        }
        for (int k = 0; k < (missing == 2 ? 4096 : 64); ++k) {
            std::string full = prefix;
            if (missing == 2) full += static_cast<char>(0x80 | (k >> 6));
            full += static_cast<char>(0x80 | (k & 63));
            const Decoded d = decode(full);
            if (d.valid && !d.tail && d.cps.size() == 1 && c.contains(d.cps[0])) return true;
        }
        return false;
    }

    bool run(const std::string& text, bool need_complete) const {
        const Decoded d = decode(text);
        if (!d.valid || (need_complete && d.tail)) return false;
        for (const std::uint32_t alt : g_.alternatives[g_.root]) {
            std::vector<std::uint32_t> stack{alt};
            if (search(stack, 0, d, need_complete, 0)) return true;
        }
        return false;
    }

    /// `stack` holds, per open frame, the position of the next element (top last).
    bool search(std::vector<std::uint32_t> stack, std::size_t i, const Decoded& d, bool need_complete, int depth) const {
        if (depth > 20000) return false;
        while (true) {
            if (stack.empty()) return i == d.cps.size() && !d.tail;
            const std::uint32_t pos = stack.back();
            const auto& e = g_.elements[pos];
            if (e.op == Grammar::Op::End) {
                stack.pop_back();
                continue;
            }
            if (e.op == Grammar::Op::Chars) {
                if (i == d.cps.size()) {
                    if (need_complete) return false;
                    return !d.tail || some_completion_in(*d.tail, g_.classes[e.arg]);
                }
                if (!g_.classes[e.arg].contains(d.cps[i])) return false;
                stack.back() = pos + 1;
                ++i;
                continue;
            }
            stack.back() = pos + 1;
            for (const std::uint32_t alt : g_.alternatives[e.arg]) {
                auto next = stack;
                next.push_back(alt);
                if (search(std::move(next), i, d, need_complete, depth + 1)) return true;
            }
            return false;
        }
    }

    const Grammar& g_;
};

/// A small vocabulary: every printable ASCII character, some words, byte pieces that split a
/// character, whole multibyte characters, and one special id (never text).
std::shared_ptr<const TokenVocabulary> small_vocabulary() {
    std::vector<std::string> bytes;
    for (char c = 32; c < 127; ++c) bytes.emplace_back(1, c);
    for (const char* w : {"\n", "\t", "ab", "abc", "true", "false", "null", "\"a", "a\"", "\":", "\": ", ", \"", "{\"", "\"}", "12",
                          "-1", "0.5", "e+", "[]", "{}", "  ", "é", "\xC3", "\xA9", "\xE2\x82", "\xAC", "€", "ü\"", "aé", "\xF0\x9F", "\xE0", "\xF0", "\xED", "\xED\x9F", "\xF4\x8F", "\x80", "\xBF"})
        bytes.emplace_back(w);
    bytes.emplace_back("<special>");
    std::vector<bool> is_text(bytes.size(), true);
    is_text.back() = false;
    return std::make_shared<const TokenVocabulary>(std::move(bytes), std::move(is_text));
}

std::vector<bool> bits_of(std::span<const std::uint64_t> mask, std::size_t n) {
    std::vector<bool> out(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = (mask[i / 64] >> (i % 64)) & 1;
    return out;
}

constexpr const char* kJsonish = R"(
root   ::= value
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ( pair ( ", " pair )* )? "}"
pair   ::= string ": "? value
array  ::= "[" ( value ( "," value )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ["\\nt] )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]{0,3} ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
)";

/// Follows random allowed ids for `steps` steps, checking every mask against the reference.
void check_masks_against_reference(const std::string& gbnf, std::uint64_t seed, int steps) {
    const auto vocab = small_vocabulary();
    const std::int32_t end = static_cast<std::int32_t>(vocab->size() - 1);  // the special id ends
    const auto constraint = Constraint::from_gbnf(gbnf, vocab);
    const Grammar grammar = gemma4::parse_gbnf(gbnf);
    const ReferenceParser reference(grammar);
    GrammarMatcher matcher(constraint, {end});
    gemma4::detail::Xoshiro256 rng(seed);
    std::string text;
    for (int step = 0; step < steps; ++step) {
        const auto allowed = bits_of(matcher.allowed(), vocab->size());
        std::vector<std::int32_t> choices;
        for (std::int32_t id = 0; id < end; ++id) {
            INFO("text so far: \"" << text << "\", token \"" << vocab->bytes(id) << "\"");
            REQUIRE(allowed[static_cast<std::size_t>(id)] == reference.viable(text + vocab->bytes(id)));
            if (allowed[static_cast<std::size_t>(id)]) choices.push_back(id);
        }
        INFO("text so far: \"" << text << "\"");
        REQUIRE(allowed[static_cast<std::size_t>(end)] == reference.complete(text));
        REQUIRE(matcher.can_end() == reference.complete(text));
        if (choices.empty()) break;
        const std::int32_t id = choices[static_cast<std::size_t>(rng.uniform() * static_cast<double>(choices.size()))];
        matcher.accept(id);
        text += vocab->bytes(id);
    }
}

}  // namespace

TEST_CASE("constraint: masks equal a brute-force parse of every token's text", "[grammar]") {
    for (std::uint64_t seed = 1; seed <= 6; ++seed) check_masks_against_reference(kJsonish, seed, 40);
    check_masks_against_reference("root ::= [a-c]{2,5} \"!\" | \"true\" \" \"* | \"é\"+", 7, 12);
    check_masks_against_reference("root ::= (\"€\" | [^a-z]) root | \"z\"", 8, 30);
}

TEST_CASE("constraint: a split character is allowed only where a completion fits", "[grammar]") {
    const auto vocab = small_vocabulary();
    const auto id_of = [&](const std::string& s) {
        for (std::size_t i = 0; i < vocab->size(); ++i)
            if (vocab->bytes(static_cast<std::int32_t>(i)) == s) return static_cast<std::int32_t>(i);
        FAIL("no token " << s);
        return -1;
    };
    GrammarMatcher matcher(Constraint::from_gbnf("root ::= \"é\" \"!\"", vocab), {});
    CHECK(matcher.allows(id_of("\xC3")));
    CHECK_FALSE(matcher.allows(id_of("\xE2\x82")));
    matcher.accept(id_of("\xC3"));
    CHECK_FALSE(matcher.can_end());
    CHECK_FALSE(matcher.allows(id_of("!")));
    CHECK(matcher.allows(id_of("\xA9")));
    matcher.accept(id_of("\xA9"));
    CHECK(matcher.allows(id_of("!")));
}

TEST_CASE("constraint: rolling back equals never having advanced", "[grammar]") {
    const auto vocab = small_vocabulary();
    const auto constraint = Constraint::from_gbnf(kJsonish, vocab);
    const std::int32_t end = static_cast<std::int32_t>(vocab->size() - 1);
    GrammarMatcher matcher(constraint, {end});
    gemma4::detail::Xoshiro256 rng(11);
    std::vector<std::vector<bool>> masks;
    std::vector<std::int32_t> ids;
    for (int step = 0; step < 25; ++step) {
        masks.push_back(bits_of(matcher.allowed(), vocab->size()));
        std::vector<std::int32_t> choices;
        for (std::int32_t id = 0; id < end; ++id)
            if (masks.back()[static_cast<std::size_t>(id)]) choices.push_back(id);
        if (choices.empty()) break;
        ids.push_back(choices[static_cast<std::size_t>(rng.uniform() * static_cast<double>(choices.size()))]);
        matcher.accept(ids.back());
    }
    REQUIRE(ids.size() >= 10);
    for (const std::size_t back : {1u, 3u, 7u}) {
        GrammarMatcher copy(constraint, {end});
        for (const std::int32_t id : ids) copy.accept(id);
        copy.rollback(back);
        CHECK(copy.accepted() == ids.size() - back);
        CHECK(bits_of(copy.allowed(), vocab->size()) == masks[ids.size() - back]);
    }
    CHECK_THROWS_AS(matcher.rollback(ids.size() + 1), gemma4::InvalidArgument);
}

TEST_CASE("constraint: end ids only where the grammar is complete, nothing after them", "[grammar]") {
    const auto vocab = small_vocabulary();
    const std::int32_t end = static_cast<std::int32_t>(vocab->size() - 1);
    GrammarMatcher matcher(Constraint::from_gbnf("root ::= \"ab\" \"c\"?", vocab), {end});
    const auto id_of = [&](const std::string& s) {
        for (std::size_t i = 0; i < vocab->size(); ++i)
            if (vocab->bytes(static_cast<std::int32_t>(i)) == s) return static_cast<std::int32_t>(i);
        return -1;
    };
    CHECK_FALSE(matcher.allows(end));
    CHECK_THROWS_AS(matcher.accept(end), GrammarError);
    CHECK_THROWS_WITH(matcher.accept(id_of("b")), "grammar: token " + std::to_string(id_of("b")) + " is not allowed here");
    matcher.accept(id_of("ab"));
    CHECK(matcher.can_end());
    CHECK(matcher.allows(end));
    CHECK(matcher.allows(id_of("c")));
    matcher.accept(end);
    CHECK(matcher.ended());
    CHECK_FALSE(matcher.allows(id_of("c")));
    CHECK_THROWS_WITH(matcher.allowed(), "grammar: the reply has already ended");
    matcher.rollback(1);
    CHECK(matcher.allows(id_of("c")));
}

TEST_CASE("constraint: a grammar no token can spell is an error at the mask", "[grammar]") {
    const auto vocab = small_vocabulary();
    GrammarMatcher matcher(Constraint::from_gbnf("root ::= [\\u4e00-\\u4e01]", vocab), {});
    CHECK_THROWS_WITH(matcher.allowed(), "grammar: no token of the vocabulary can continue the text here");
}

TEST_CASE("constraint: the automaton's bounds turn an explosive grammar into an error", "[grammar]") {
    const auto vocab = small_vocabulary();
    gemma4::AutomatonLimits limits;
    limits.max_stacks_per_state = 8;
    // Every 'a' may start a new nested frame: the open parses grow with the text.
    const auto constraint = Constraint::from_gbnf("root ::= x\nx ::= \"a\" x \"b\"? | \"a\"", vocab, limits);
    GrammarMatcher matcher(constraint, {});
    const std::int32_t a = 'a' - 32;
    CHECK_THROWS_WITH(
        [&] {
            for (int i = 0; i < 64; ++i) matcher.accept(a);
        }(),
        Catch::Contains("the grammar is too ambiguous"));
}

TEST_CASE("constraint: the vocabulary's trie holds every text id once, in preorder", "[grammar]") {
    const auto vocab = small_vocabulary();
    const auto& trie = vocab->trie();
    std::vector<int> seen(vocab->size(), 0);
    std::vector<std::string> path(trie.max_depth + 1);
    for (std::size_t i = 1; i < trie.nodes(); ++i) {
        REQUIRE(trie.subtree_end[i] > i);
        path[trie.depth[i]] = path[trie.depth[i] - 1] + static_cast<char>(trie.label[i]);
        for (std::uint32_t k = trie.ids_begin[i]; k < trie.ids_begin[i + 1]; ++k) {
            CHECK(vocab->bytes(trie.ids[k]) == path[trie.depth[i]]);
            ++seen[static_cast<std::size_t>(trie.ids[k])];
        }
    }
    for (std::size_t id = 0; id + 1 < vocab->size(); ++id) CHECK(seen[id] == 1);
    CHECK(seen.back() == 0);  // the special id is not text
}

TEST_CASE("constraint: a grammar names special tokens by their text or any token by its id", "[grammar]") {
    const auto vocab = small_vocabulary();
    const std::int32_t special = static_cast<std::int32_t>(vocab->size() - 1);
    const std::int32_t a = 'a' - 32, b = 'b' - 32, x = 'x' - 32;
    GrammarMatcher matcher(Constraint::from_gbnf("root ::= \"a\" <special> ( \"b\" | <[" + std::to_string(x) + "]> )", vocab), {});
    CHECK_FALSE(matcher.allows(special));
    matcher.accept(a);
    const auto mask = bits_of(matcher.allowed(), vocab->size());
    CHECK(mask[static_cast<std::size_t>(special)]);
    CHECK(std::count(mask.begin(), mask.end(), true) == 1);
    matcher.accept(special);
    CHECK(matcher.allows(b));
    CHECK(matcher.allows(x));
    matcher.accept(x);
    CHECK(matcher.can_end());
    CHECK_THROWS_WITH(Constraint::from_gbnf("root ::= <nope>", vocab), "grammar: <nope> is not a special token of the vocabulary");
    CHECK_THROWS_WITH(Constraint::from_gbnf("root ::= <[99999]>", vocab), Catch::Contains("is outside the vocabulary"));
    CHECK_THROWS_WITH(gemma4::parse_gbnf("root ::= <abc"), Catch::Contains("unterminated token reference"));
    CHECK_THROWS_WITH(gemma4::parse_gbnf("root ::= <[1x]>"), Catch::Contains("token id reference must be <[N]>"));
}

TEST_CASE("constraint: a JSON Schema constrains through its grammar, properties in the order written", "[grammar]") {
    const auto vocab = small_vocabulary();
    const std::int32_t end = static_cast<std::int32_t>(vocab->size() - 1);
    const auto schema = nlohmann::ordered_json::parse(R"({"type": "object", "properties": {"z": {"type": "boolean"}, "a": {"type": "null"}},
                                                          "required": ["z", "a"]})");
    const auto constraint = Constraint::from_json_schema(schema, vocab);
    GrammarMatcher matcher(constraint, {end});
    for (const char c : std::string(R"({"z":true,"a":null})")) {
        INFO("at '" << c << "'");
        REQUIRE(matcher.allows(c - 32));
        matcher.accept(c - 32);
    }
    CHECK(matcher.can_end());
    GrammarMatcher sorted(constraint, {end});
    for (const char c : std::string("{\"")) sorted.accept(c - 32);
    CHECK_FALSE(sorted.allows('a' - 32));  // "z" comes first, as written
}
