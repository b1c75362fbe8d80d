#include <gemma4/grammar/gbnf.hpp>

#include <catch2/catch.hpp>

#include <string>

using gemma4::Grammar;
using gemma4::GrammarError;
using gemma4::parse_gbnf;

namespace {

std::string parse_error(const std::string& text) {
    try {
        parse_gbnf(text);
    } catch (const GrammarError& e) {
        return e.what();
    }
    return "(no error)";
}

std::size_t count_op(const Grammar& g, Grammar::Op op) {
    std::size_t n = 0;
    for (const auto& e : g.elements) n += e.op == op;
    return n;
}

}  // namespace

TEST_CASE("gbnf: a literal becomes one class per character and the root is found", "[grammar]") {
    const Grammar g = parse_gbnf("other ::= \"x\"\nroot ::= \"ab\" other\n");
    REQUIRE(g.rule_names[g.root] == "root");
    REQUIRE(g.alternatives[g.root].size() == 1);
    const auto start = g.alternatives[g.root][0];
    CHECK(g.elements[start].op == Grammar::Op::Chars);
    CHECK(g.class_at(start).contains(U'a'));
    CHECK_FALSE(g.class_at(start).contains(U'b'));
    CHECK(g.class_at(start + 1).contains(U'b'));
    CHECK(g.elements[start + 2].op == Grammar::Op::Rule);
    CHECK(g.rule_names[g.elements[start + 2].arg] == "other");
    CHECK(g.elements[start + 3].op == Grammar::Op::End);
}

TEST_CASE("gbnf: classes, negation, ranges, escapes and any character", "[grammar]") {
    const Grammar g = parse_gbnf(R"(root ::= [a-c0-9_] [^"\\] . "\x41\u00e9\U0001F600\n\t\"" [\]\-])");
    const auto p = g.alternatives[g.root][0];
    CHECK(g.class_at(p).contains(U'b'));
    CHECK(g.class_at(p).contains(U'7'));
    CHECK(g.class_at(p).contains(U'_'));
    CHECK_FALSE(g.class_at(p).contains(U'd'));
    CHECK_FALSE(g.class_at(p + 1).contains(U'"'));
    CHECK_FALSE(g.class_at(p + 1).contains(U'\\'));
    CHECK(g.class_at(p + 1).contains(U'é'));
    CHECK(g.class_at(p + 1).contains(char32_t{0x10FFFF}));
    CHECK(g.class_at(p + 2).contains(char32_t{0}));
    CHECK(g.class_at(p + 3).contains(U'A'));
    CHECK(g.class_at(p + 4).contains(char32_t{0xE9}));
    CHECK(g.class_at(p + 5).contains(char32_t{0x1F600}));
    CHECK(g.class_at(p + 6).contains(U'\n'));
    CHECK(g.class_at(p + 7).contains(U'\t'));
    CHECK(g.class_at(p + 8).contains(U'"'));
    CHECK(g.class_at(p + 9).contains(U']'));
    CHECK(g.class_at(p + 9).contains(U'-'));
    CHECK_FALSE(g.class_at(p + 9).contains(U'a'));
}

TEST_CASE("gbnf: UTF-8 in literals and classes is read as code points", "[grammar]") {
    const Grammar g = parse_gbnf("root ::= \"é\" [α-ω]");
    const auto p = g.alternatives[g.root][0];
    CHECK(g.class_at(p).contains(char32_t{0xE9}));
    CHECK(g.class_at(p + 1).contains(U'β'));
    CHECK_FALSE(g.class_at(p + 1).contains(U'a'));
}

TEST_CASE("gbnf: groups, alternatives, repetitions and continuation lines", "[grammar]") {
    const Grammar g = parse_gbnf(
        "# a comment line\n"
        "root ::= item+ (\",\" item)* \"!\"?   # trailing comment\n"
        "item ::= \"a\"\n"
        "       | \"b\"{2,4}\n"
        "       | (\n"
        "           \"c\" | \"d\"\n"
        "         ){3}\n");
    CHECK(g.alternatives[g.root].size() == 1);
    std::uint32_t item = 0;
    for (std::uint32_t r = 0; r < g.rule_names.size(); ++r)
        if (g.rule_names[r] == "item") item = r;
    CHECK(g.alternatives[item].size() == 3);
    CHECK(count_op(g, Grammar::Op::Rule) > 4);
}

TEST_CASE("gbnf: mistakes are errors that name the line and column", "[grammar]") {
    CHECK(parse_error("root ::= foo") == "grammar: line 1, column 13: undefined rule \"foo\"");
    CHECK(parse_error("start ::= \"a\"") == "grammar: no rule named \"root\"");
    CHECK(parse_error("root ::= \"a\"\nroot ::= \"b\"") == "grammar: line 2, column 1: rule \"root\" is defined twice");
    CHECK(parse_error("root ::= \"abc") == "grammar: line 1, column 14: unterminated string literal");
    CHECK(parse_error("root ::= [abc") == "grammar: line 1, column 14: unterminated character class");
    CHECK(parse_error("root ::= [z-a]") == "grammar: line 1, column 14: character range is reversed");
    CHECK(parse_error("root ::= \"a\"{3,2}") == "grammar: line 1, column 17: repetition {3,2}: max is below min");
    CHECK(parse_error("root ::= \"a\"{99999}").find("repetition count above the limit") != std::string::npos);
    CHECK(parse_error("root ::= (\"a\"") == "grammar: line 1, column 14: expected ')', got the end of the text");
    CHECK(parse_error("root ::= \"\\q\"") == "grammar: line 1, column 11: unknown escape '\\q'");
    CHECK(parse_error("root ::= \"\\uD800\"") == "grammar: line 1, column 17: escape is not a Unicode scalar value");
    CHECK(parse_error("root = \"a\"") == "grammar: line 1, column 6: expected '::=' after rule name \"root\"");
    CHECK(parse_error("root ::= \"a\" )") == "grammar: line 1, column 14: unexpected ')' in rule \"root\"");
    CHECK(parse_error("root ::= [^\\x00-\\U0010FFFF]") == "grammar: line 1, column 28: character class matches nothing");
    CHECK(parse_error(std::string("root ::= \"\xC3\"")) == "grammar: line 1, column 11: invalid UTF-8");
}

TEST_CASE("gbnf: left recursion is refused, right recursion is not", "[grammar]") {
    CHECK(parse_error("root ::= root \"a\" | \"a\"") == "grammar: rule \"root\" is left-recursive (it can begin with itself)");
    CHECK(parse_error("root ::= opt root \"a\" | \"b\"\nopt ::= \"x\"?") ==
          "grammar: rule \"root\" is left-recursive (it can begin with itself)");
    CHECK(parse_error("root ::= a\na ::= b \"x\"\nb ::= a | \"y\"").find("left-recursive") != std::string::npos);
    CHECK_NOTHROW(parse_gbnf("root ::= \"a\" root | \"a\""));
}

TEST_CASE("gbnf: the limits bound what a text may ask for", "[grammar]") {
    gemma4::GrammarLimits limits;
    limits.max_text_bytes = 16;
    CHECK_THROWS_AS(parse_gbnf("root ::= \"aaaaaaaaaaaaaa\"", limits), GrammarError);
    limits = {};
    limits.max_elements = 50;
    CHECK_THROWS_WITH(parse_gbnf("root ::= \"a\"{100}", limits), Catch::Contains("more than 50 elements"));
    limits = {};
    limits.max_nesting = 3;
    CHECK_THROWS_WITH(parse_gbnf("root ::= ((((\"a\"))))", limits), Catch::Contains("nested deeper than 3"));
}
