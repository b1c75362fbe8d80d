// grammar/json_schema.hpp with ValueSyntax::GemmaToolCall and a rule prefix. Each grammar is
// read by the independent recognizer of support/gbnf_reference.hpp and checked against the
// server's own writer and reader of Gemma 4's tool-call syntax: texts generated from the grammar
// read back (server::parse_tool_value) as JSON that the independent validator of
// support/json_schema_validator.hpp accepts, and the writer's spelling of valid instances
// (server::format_argument, keys as server::detail::call_key writes them) matches the grammar.
#include <catch2/catch.hpp>

#include <gemma4/grammar/constraint.hpp>
#include <gemma4/grammar/gbnf.hpp>
#include <gemma4/grammar/json_schema.hpp>

#include "support/gbnf_reference.hpp"
#include "support/json_schema_validator.hpp"

// By its path from here: the grammar tests are built without the server's include directory.
#include "../../examples/gemma4/server/tool_format.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <vector>

// A named namespace, test cases included: the files of tests/grammar are also compiled as one
// translation unit, where the other files' helpers must not meet these.
namespace json_schema_gemma_test {

using gemma4::test::ReferenceGrammar;
using nlohmann::json;
using nlohmann::ordered_json;

gemma4::JsonSchemaOptions gemma_options(std::string prefix = {}) {
    gemma4::JsonSchemaOptions options;
    options.syntax = gemma4::ValueSyntax::GemmaToolCall;
    options.rule_prefix = std::move(prefix);
    return options;
}

/// The grammar of a schema parsed as nlohmann::json, whose keys are sorted, as the server's
/// writer sorts them (the chat template's dictsort); checked by the library's parser too.
std::string gemma_grammar(const std::string& schema_text) {
    const std::string grammar = gemma4::json_schema_to_gbnf(json::parse(schema_text), gemma_options());
    CHECK_NOTHROW(gemma4::parse_gbnf(grammar));
    return grammar;
}

std::string gemma_error(const json& schema, const gemma4::JsonSchemaOptions& options = gemma_options()) {
    try {
        gemma4::json_schema_to_gbnf(schema, options);
        return "(no error)";
    } catch (const gemma4::GrammarError& e) {
        return e.what();
    }
}

/// `key` as the server writes it in a call.
std::string written_key(const std::string& key) { return gemma4::server::detail::call_key(key); }
std::string quoted(const std::string& text) { return "<|\"|>" + text + "<|\"|>"; }

struct GemmaCase {
    std::string name;
    std::string schema;
    std::vector<std::string> instances;  ///< valid JSON instances: the writer's text of each matches
    std::vector<std::string> accepted;   ///< Gemma texts that match and read back valid
    std::vector<std::string> rejected;   ///< Gemma texts that do not match
};

std::vector<GemmaCase> gemma_scalar_cases() {
    return {
        {"free string", R"({"type":"string"})",
         {R"("")", R"("abc")", R"("a\"b\\c\n\t")", R"("é😀")", R"("{x:1}")", R"("None")", R"("<|tool_call>")"},
         {R"(<|"|><|"|>)", R"(<|"|>a,b:c<|"|>)"},
         {R"("")", R"("abc")", R"(<|"|>abc)", "abc", R"(<|"|>a<|"|>b<|"|>)", R"( <|"|>a<|"|>)"}},
        {"string length in raw characters", R"({"type":"string","minLength":2,"maxLength":4})",
         {R"("ab")", R"("é😀")", R"("a\"\\b")", R"("\n\n")"},
         {},
         {R"(<|"|>a<|"|>)", R"(<|"|>abcde<|"|>)", R"(<|"|>😀<|"|>)", R"(<|"|><|"|>)"}},
        {"pattern over the raw text", R"({"type":"string","pattern":"^a\"b\\\\$"})",
         {R"("a\"b\\")"},
         {R"(<|"|>a"b\<|"|>)"},
         {R"(<|"|>a\"b\\<|"|>)", R"(<|"|>a"b<|"|>)", R"("a\"b\\")"}},
        {"anchored pattern with counts", R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3,4}$"})",
         {R"("AB-123")", R"("XY-1234")"}, {}, {R"(<|"|>ab-123<|"|>)", R"(<|"|>AB-12<|"|>)", R"(<|"|>\u0041B-123<|"|>)"}},
        {"format date", R"({"type":"string","format":"date"})",
         {R"("2024-02-29")", R"("2023-12-31")"}, {}, {R"(<|"|>2023-02-29<|"|>)", R"(<|"|>2023-1-01<|"|>)", R"("2024-02-29")"}},
        {"integer, boolean or null", R"({"type":["integer","null","boolean"],"minimum":1,"maximum":3})",
         {"1", "3", "null", "true", "false"},
         {"None", "2"},
         {"null", "0", "4", "True", "none", "nil", R"(<|"|>1<|"|>)"}},
        {"number", R"({"type":"number"})",
         {"0", "-1.5", "0.25", "1e10", "-3"},
         {"1E-5", "1.0e+2", "-0.0"},
         {".5", "1.", "+1", "NaN", R"(<|"|>1<|"|>)", "None"}},
    };
}

std::vector<GemmaCase> gemma_object_cases() {
    return {
        {"object with required and optional properties",
         R"({"type":"object","properties":{"age":{"type":"integer","minimum":0},"name":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}}},"required":["name"]})",
         {R"({"name":"Ann"})", R"({"age":3,"name":"A"})", R"({"name":"x","tags":["a","b"]})", R"({"age":0,"name":"","tags":[]})"},
         {R"({age:3,name:<|"|>Ann<|"|>})"},
         {R"({name:<|"|>Ann<|"|>,age:3})", R"({"name":"Ann"})", R"({<|"|>name<|"|>:<|"|>Ann<|"|>})", R"({name: <|"|>Ann<|"|>})",
          R"({ name:<|"|>Ann<|"|>})", R"({age:-1,name:<|"|>A<|"|>})", R"({name:<|"|>A<|"|>,x:1})", "{}", R"({name:<|"|>A<|"|>,})",
          R"({name:<|"|>A<|"|>,tags:[<|"|>a<|"|>, <|"|>b<|"|>]})"}},
        {"property names that cannot be bare",
         R"({"type":"object","properties":{"":{"type":"integer"}," lead":{"type":"integer"},"a,b":{"type":"integer"},"a b":{"type":"integer"},"trail ":{"type":"integer"},"\"q":{"type":"integer"},"x:y":{"type":"integer"},"é":{"type":"integer"},"<k>":{"type":"integer"},"tab\there":{"type":"integer"},"{}":{"type":"integer"},"q\"":{"type":"integer"}},"required":["","a,b","é"]})",
         {R"({"":1,"a,b":2,"é":3})", R"({"":0," lead":1,"\"q":2,"<k>":3,"a b":4,"a,b":5,"q\"":6,"tab\there":7,"trail ":8,"x:y":9,"{}":10,"é":11})"},
         {R"({<|"|><|"|>:1,<|"|>a,b<|"|>:2,é:3})"},
         {R"({:1,a,b:2,é:3})", R"({<|"|><|"|>:1,<|"|>a,b<|"|>:2,<|"|>é<|"|>:3})", R"({<|"|><|"|>:1, lead:1,<|"|>a,b<|"|>:2,é:3})"}},
        {"additional properties with a schema",
         R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],"additionalProperties":{"type":"string"}})",
         {R"({"id":1})", R"({"id":1,"x":"y"})", R"({"id":1,"j k":"a","x,y":"b","zz":"","ид":"c"})", R"({"id":2,"id2":"x"})"},
         {R"({id:1,<|"|>x<|"|>:<|"|>y<|"|>})", R"({id:1,<|"|><|"|>:<|"|><|"|>})", R"({id:1,<|"|> id<|"|>:<|"|>v<|"|>})", R"({id:1,i:<|"|>v<|"|>})"},
         {R"({id:1,id:<|"|>x<|"|>})", R"({id:1,<|"|>id<|"|>:<|"|>x<|"|>})", R"({id:1, id:<|"|>x<|"|>})", R"({id:1,id :<|"|>x<|"|>})",
          R"({id:1,x:2})", R"({id:1,x y :<|"|>v<|"|>})", R"({id:1,"x":<|"|>v<|"|>})", R"({id:1,x:<|"|>v<|"|>,})", R"({x:<|"|>v<|"|>})"}},
        {"map of integers", R"({"type":"object","additionalProperties":{"type":"integer"}})",
         {"{}", R"({"a":1,"b c":-2,"d:e":3})"},
         {R"({<|"|>a<|"|>:1,a b:2})"},
         {R"({a:<|"|>1<|"|>})", R"({a:1,})", R"({a:1 })", "[]"}},
        {"nested objects",
         R"({"type":"object","properties":{"user":{"type":"object","properties":{"address":{"type":"object","properties":{"city":{"type":"string"},"zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["city"]},"name":{"type":"string"}},"required":["name"]}},"required":["user"]})",
         {R"({"user":{"name":"A"}})", R"({"user":{"address":{"city":"B","zip":"12345"},"name":"A"}})"},
         {},
         {R"({user:{}})", R"({user:{address:{city:<|"|>B<|"|>,zip:<|"|>1234<|"|>},name:<|"|>A<|"|>}})"}},
    };
}

std::vector<GemmaCase> gemma_composite_cases() {
    return {
        {"any value", "{}",
         {R"({"a":[1,"x",null,true,{}],"b":{"c":-0.5}})", "[]", R"("s")", "null", "12", R"({"a b":{"":[]}})"},
         {R"({a:1,<|"|>b<|"|>:None})"},
         {"null", R"({a:1,})", "[1,]", R"({"a":1})", R"({a :1})", ""}},
        {"array length bounds", R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})",
         {"[1]", "[1,2,3]"}, {}, {"[]", "[1,2,3,4]", "[1, 2]", R"([<|"|>1<|"|>])"}},
        {"tuple", R"({"type":"array","prefixItems":[{"type":"string"},{"type":"null"}],"items":false})",
         {"[]", R"(["a"])", R"(["a",null])"}, {}, {R"([<|"|>a<|"|>,null])", R"([<|"|>a<|"|>,None,None])", "[None]"}},
        {"enum of mixed values", R"({"enum":["red","a\"b",null,1.5,{"k":[1,"x"],"a b":true},[]]})",
         {R"("red")", R"("a\"b")", "null", "1.5", R"({"k":[1,"x"],"a b":true})", "[]"},
         {},
         {R"(<|"|>blue<|"|>)", "null", R"({k:[1,"x"],a b:true})", R"({a b:true,k:[1,<|"|>x<|"|>]} )", "1.50"}},
        {"const object with a key that must be quoted", R"({"const":{"c,d":"x","a b":1}})",
         {R"({"a b":1,"c,d":"x"})"}, {}, {R"({a b:1,c,d:<|"|>x<|"|>})", R"({<|"|>a b<|"|>:1,<|"|>c,d<|"|>:<|"|>x<|"|>})"}},
        {"oneOf with a discriminator",
         R"({"oneOf":[{"type":"object","properties":{"kind":{"const":"circle"},"radius":{"type":"number"}},"required":["kind","radius"]},{"type":"object","properties":{"kind":{"const":"square"},"side":{"type":"number"}},"required":["kind","side"]}]})",
         {R"({"kind":"circle","radius":1.5})", R"({"kind":"square","side":2})"}, {},
         {R"({kind:<|"|>circle<|"|>,side:2})", R"({kind:<|"|>triangle<|"|>})"}},
        {"recursive tree",
         R"({"$defs":{"node":{"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#/$defs/node"}},"value":{"type":"integer"}},"required":["value"]}},"$ref":"#/$defs/node"})",
         {R"({"value":1})", R"({"children":[{"children":[{"value":3}],"value":2},{"value":4}],"value":1})"}, {},
         {R"({children:[{}],value:1})", R"({children:[]})"}},
        {"allOf merging object schemas",
         R"({"allOf":[{"type":"object","properties":{"age":{"type":"integer"}}},{"properties":{"name":{"type":"string"}},"required":["name"]}]})",
         {R"({"name":"a"})", R"({"age":3,"name":"a"})"}, {}, {R"({age:3})", R"({name:<|"|>a<|"|>,age:3})"}},
    };
}

std::vector<GemmaCase> all_gemma_cases() {
    std::vector<GemmaCase> all;
    for (auto group : {gemma_scalar_cases(), gemma_object_cases(), gemma_composite_cases()}) all.insert(all.end(), group.begin(), group.end());
    return all;
}

/// The writer's text of each instance matches, and the reader gives the instance back.
void check_instances(const GemmaCase& c, const ReferenceGrammar& reference, const json& schema) {
    for (const std::string& instance_text : c.instances) {
        INFO("instance: " << instance_text);
        const json instance = json::parse(instance_text);
        REQUIRE(gemma4::test::validates(instance, schema));
        const std::string text = gemma4::server::format_argument(instance, /*escape_keys=*/false);
        INFO("written: " << text);
        CHECK(reference.matches(text));
        CHECK(gemma4::server::parse_tool_value(text) == std::optional<json>(instance));
    }
}

/// The reader's JSON of a Gemma text, when the text reads back and validates.
bool reads_back_valid(const std::string& text, const json& schema, std::string* why = nullptr) {
    const std::optional<json> value = gemma4::server::parse_tool_value(text);
    if (!value) {
        if (why) *why = "the server's reader refuses it";
        return false;
    }
    return gemma4::test::validates(*value, schema, why);
}

void check_gemma_case(const GemmaCase& c) {
    INFO("schema: " << c.schema);
    const std::string grammar = gemma_grammar(c.schema);
    INFO("grammar:\n" << grammar);
    const ReferenceGrammar reference(grammar);
    const json schema = json::parse(c.schema);
    check_instances(c, reference, schema);
    for (const std::string& text : c.accepted) {
        INFO("accepted text: " << text);
        std::string why;
        const bool valid = reads_back_valid(text, schema, &why);
        INFO(why);
        CHECK(valid);
        CHECK(reference.matches(text));
    }
    for (const std::string& text : c.rejected) {
        INFO("rejected text: " << text);
        CHECK_FALSE(reference.matches(text));
    }
}

void check_generated_gemma_texts(const GemmaCase& c, int count) {
    INFO("schema: " << c.schema);
    const std::string grammar = gemma_grammar(c.schema);
    const ReferenceGrammar reference(grammar);
    const json schema = json::parse(c.schema);
    std::mt19937 rng(4242);
    for (int i = 0; i < count; ++i) {
        const std::string text = reference.generate(rng, 6);
        INFO("generated text: " << text);
        std::string why;
        const bool valid = reads_back_valid(text, schema, &why);
        INFO(why);
        REQUIRE(valid);
        REQUIRE(reference.matches(text));
    }
}

TEST_CASE("gemma tool-call grammars accept the writer's text of valid instances", "[grammar][json_schema]") {
    const auto cases = all_gemma_cases();
    REQUIRE(cases.size() >= 20);
    for (const GemmaCase& c : cases)
        DYNAMIC_SECTION(c.name) { check_gemma_case(c); }
}

TEST_CASE("texts generated from gemma tool-call grammars read back as valid JSON", "[grammar][json_schema]") {
    for (const GemmaCase& c : all_gemma_cases())
        DYNAMIC_SECTION(c.name) { check_generated_gemma_texts(c, 300); }
}

/// Short random keys over characters that matter to a bare key: ends, spaces, quotes.
std::vector<std::string> random_keys(std::mt19937& rng, int count) {
    const std::vector<std::string> alphabet = {"a", "b", " ", "\t", ",", ":", "\"", "<", "{", "]", "é", "\n"};
    std::vector<std::string> keys;
    for (int i = 0; i < count; ++i) {
        std::string key;
        for (int n = std::uniform_int_distribution<int>(0, 4)(rng); n > 0; --n)
            key += alphabet[std::uniform_int_distribution<std::size_t>(0, alphabet.size() - 1)(rng)];
        keys.push_back(key);
    }
    return keys;
}

TEST_CASE("gemma property names are bare exactly when the server writes them bare", "[grammar][json_schema]") {
    std::mt19937 rng(99);
    std::vector<std::string> keys = random_keys(rng, 150);
    keys.insert(keys.end(), {"", "a", " a", "a ", "a b", "\"a", "a\"", "a:b", "<a", "a>", "True", "None", "1", "é", "ид"});
    for (const std::string& key : keys) {
        INFO("key: " << json(key).dump());
        const json schema = {{"type", "object"}, {"properties", {{key, {{"type", "integer"}}}}}, {"required", json::array({key})}};
        const ReferenceGrammar reference(gemma4::json_schema_to_gbnf(schema, gemma_options()));
        const bool bare = written_key(key) == key;
        CHECK(reference.matches("{" + written_key(key) + ":1}"));
        CHECK_FALSE(reference.matches("{" + (bare ? quoted(key) : key) + ":1}"));
        CHECK(gemma4::server::parse_tool_value("{" + written_key(key) + ":1}") == std::optional<json>(json{{key, 1}}));
    }
}

TEST_CASE("a gemma additional key is any key but the declared ones, bare or quoted", "[grammar][json_schema]") {
    const std::vector<std::string> declared = {"a", "a b", "b,", " a", "\"", ""};
    json schema = {{"type", "object"}, {"properties", json::object()}, {"additionalProperties", {{"type", "string"}}}};
    for (const std::string& key : declared) schema["properties"][key] = {{"type", "integer"}};
    const std::string grammar = gemma4::json_schema_to_gbnf(schema, gemma_options());
    INFO("grammar:\n" << grammar);
    const ReferenceGrammar reference(grammar);
    std::mt19937 rng(5);
    std::vector<std::string> keys = random_keys(rng, 400);
    keys.insert(keys.end(), declared.begin(), declared.end());
    int bare_keys = 0;
    for (const std::string& key : keys) {
        INFO("key: " << json(key).dump());
        const bool is_declared = std::find(declared.begin(), declared.end(), key) != declared.end();
        const bool bare = written_key(key) == key;
        const std::string value = ":" + quoted("v");
        CHECK(reference.matches("{" + quoted(key) + value + "}") == !is_declared);
        CHECK(reference.matches("{" + key + value + "}") == (bare && !is_declared));
        const std::string text = "{" + written_key(key) + value + "}";
        CHECK(reads_back_valid(text, schema) == !is_declared);
        bare_keys += bare && !is_declared;
    }
    CHECK(bare_keys > 25);
}

TEST_CASE("gemma grammars refuse what the syntax cannot write", "[grammar][json_schema]") {
    CHECK(gemma_error(json{{"enum", json::array({"a", "x<|\"|>y"})}}) ==
          "json schema: /enum: a string holding <|\"|>, which Gemma's tool-call syntax cannot write");
    CHECK(gemma_error(json{{"const", {{"k", json::array({"<|\"|>"})}}}}) ==
          "json schema: /const: a string holding <|\"|>, which Gemma's tool-call syntax cannot write");
    CHECK(gemma_error(json{{"type", "object"}, {"properties", {{"a<|\"|>", {{"type", "integer"}}}}}}) ==
          "json schema: /properties/a<|\"|>: a property name holding <|\"|>, which Gemma's tool-call syntax cannot write");
    CHECK(gemma_error(json{{"const", {{"k<|\"|>", 1}}}}) ==
          "json schema: /const: a property name holding <|\"|>, which Gemma's tool-call syntax cannot write");
    // The same schemas in JSON, which escapes nothing of the quote's text, compile.
    CHECK(gemma_error(json{{"enum", json::array({"a", "x<|\"|>y"})}}, {}) == "(no error)");
    gemma4::JsonSchemaOptions spaced = gemma_options();
    spaced.max_whitespace = 2;
    CHECK(gemma_error(json{{"type", "string"}}, spaced) ==
          "json schema: max_whitespace must be 0 with ValueSyntax::GemmaToolCall (the syntax has no whitespace)");
}

TEST_CASE("a string's raw text cannot hold the quote token", "[grammar][json_schema]") {
    const ReferenceGrammar reference(gemma_grammar(R"({"type":"array","items":{"type":"string"}})"));
    CHECK(reference.matches(R"([<|"|>a<|"|>,<|"|>b<|"|>])"));
    // The reader ends a string at the quote's text, so the grammar must not take it as content.
    CHECK_FALSE(reference.matches(R"([<|"|>a<|"|>b<|"|>])"));
    // Text that only begins like the quote is content.
    CHECK(reference.matches(R"([<|"|><|"|<|"|>])"));
    CHECK(gemma4::server::parse_tool_value(R"([<|"|><|"|<|"|>])") == std::optional<json>(json::array({"<|\"|"})));
}

TEST_CASE("gemma grammars keep the order of properties given as ordered_json", "[grammar][json_schema]") {
    const std::string schema = R"({"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"integer"}},"required":["zeta","alpha"]})";
    const ReferenceGrammar ordered(gemma4::json_schema_to_gbnf(ordered_json::parse(schema), gemma_options()));
    CHECK(ordered.matches("{zeta:1,alpha:2}"));
    CHECK_FALSE(ordered.matches("{alpha:2,zeta:1}"));
    const ReferenceGrammar sorted(gemma4::json_schema_to_gbnf(json::parse(schema), gemma_options()));
    CHECK(sorted.matches("{alpha:2,zeta:1}"));
    CHECK(gemma4::json_object_gbnf(gemma_options()) == gemma4::json_schema_to_gbnf(json{{"type", "object"}}, gemma_options()));
}

TEST_CASE("the library's matcher takes the gemma quote as the special token only", "[grammar][json_schema]") {
    std::vector<std::string> bytes;
    for (char c = 32; c < 127; ++c) bytes.emplace_back(1, c);
    bytes.emplace_back("<|\"|>");
    std::vector<bool> is_text(bytes.size(), true);
    is_text.back() = false;
    const auto vocabulary = std::make_shared<const gemma4::TokenVocabulary>(std::move(bytes), std::move(is_text));
    const auto quote_id = static_cast<std::int32_t>(vocabulary->size() - 1);
    const json schema = json::parse(R"({"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city","days"]})");
    const auto constraint = gemma4::Constraint::from_json_schema(schema, vocabulary, gemma_options());
    gemma4::GrammarMatcher matcher(constraint, {});
    auto feed_text = [&](std::string_view text) {
        for (const char c : text) matcher.accept(static_cast<std::int32_t>(c - 32));
    };
    feed_text("{city:");
    CHECK_FALSE(matcher.allows('<' - 32));  // the quote spelled in text is not the quote
    matcher.accept(quote_id);
    feed_text("Par<is");
    matcher.accept(quote_id);
    feed_text(",days:3}");
    CHECK(matcher.can_end());
}

/// Whether every rule of `grammar` is named with `prefix` (a reference to an unprefixed rule
/// would then be to an undefined one, which ReferenceGrammar refuses).
bool every_rule_prefixed(const std::string& grammar, const std::string& prefix) {
    const std::regex line("(" + prefix + "[a-zA-Z0-9_-]+ ::= .*)|(    \\| .*)");
    std::size_t start = 0;
    while (start < grammar.size()) {
        const std::size_t end = grammar.find('\n', start);
        if (end == std::string::npos || !std::regex_match(grammar.substr(start, end - start), line)) return false;
        start = end + 1;
    }
    return true;
}

TEST_CASE("a rule prefix names every rule and keeps the language", "[grammar][json_schema]") {
    for (const GemmaCase& c : all_gemma_cases()) {
        INFO("schema: " << c.schema);
        for (const gemma4::ValueSyntax syntax : {gemma4::ValueSyntax::Json, gemma4::ValueSyntax::GemmaToolCall}) {
            gemma4::JsonSchemaOptions plain, prefixed;
            plain.syntax = prefixed.syntax = syntax;
            prefixed.rule_prefix = "p0-";
            const std::string grammar = gemma4::json_schema_to_gbnf(json::parse(c.schema), prefixed);
            INFO("grammar:\n" << grammar);
            CHECK(grammar.rfind("p0-root ::= ", 0) == 0);
            CHECK(every_rule_prefixed(grammar, "p0-"));
            const ReferenceGrammar with_prefix(grammar, "p0-root");
            const ReferenceGrammar without(gemma4::json_schema_to_gbnf(json::parse(c.schema), plain));
            std::mt19937 rng(3);
            for (int i = 0; i < 40; ++i) {
                const std::string text = without.generate(rng, 5);
                INFO("text: " << text);
                CHECK(with_prefix.matches(text));
                const std::string prefixed_text = with_prefix.generate(rng, 5);
                INFO("text of the prefixed grammar: " << prefixed_text);
                CHECK(without.matches(prefixed_text));
            }
        }
    }
}

TEST_CASE("grammars compiled with different prefixes join into one grammar", "[grammar][json_schema]") {
    const json weather = json::parse(R"({"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]})");
    const json search = json::parse(R"({"type":"object","properties":{"query":{"type":"string"},"tags":{}},"required":["query"]})");
    const std::string a = gemma4::json_schema_to_gbnf(weather, gemma_options("call0-"));
    const std::string b = gemma4::json_schema_to_gbnf(search, gemma_options("call1-"));
    const std::string joined = a + b + "root ::= \"call:weather\" call0-root | \"call:search\" call1-root\n";
    INFO("grammar:\n" << joined);
    CHECK_NOTHROW(gemma4::parse_gbnf(joined));
    // Without prefixes the shared rules (string, char, value, ...) would be defined twice.
    CHECK_THROWS_AS(gemma4::parse_gbnf(gemma4::json_schema_to_gbnf(weather, gemma_options()) + gemma4::json_schema_to_gbnf(search, gemma_options())),
                    gemma4::GrammarError);
    const ReferenceGrammar whole(joined), first(joined, "call0-root"), second(joined, "call1-root");
    const ReferenceGrammar alone_first(a, "call0-root"), alone_second(b, "call1-root");
    std::mt19937 rng(11);
    for (int i = 0; i < 100; ++i) {
        const std::string one = alone_first.generate(rng, 6), two = alone_second.generate(rng, 6);
        INFO("texts: " << one << " and " << two);
        CHECK(first.matches(one));
        CHECK_FALSE(first.matches(two));
        CHECK(second.matches(two));
        CHECK_FALSE(second.matches(one));
        CHECK(whole.matches("call:weather" + one));
        CHECK(whole.matches("call:search" + two));
        CHECK_FALSE(whole.matches("call:search" + one));
        CHECK(reads_back_valid(one, weather));
        CHECK(reads_back_valid(two, search));
    }
    CHECK(gemma_error(json{{"type", "string"}}, gemma_options("p 0")) ==
          R"(json schema: rule_prefix "p 0" may hold only letters, digits, '-' and '_')");
}

}  // namespace json_schema_gemma_test
