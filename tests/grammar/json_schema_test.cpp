// grammar/json_schema.hpp: for each schema, the compiled grammar (read by the independent
// recognizer of support/gbnf_reference.hpp) accepts a text exactly when the independent
// validator of support/json_schema_validator.hpp says it validates, for texts in the grammar's
// canonical form (keys in schema order, fixed values as nlohmann dumps them, integers without
// fraction or exponent, no whitespace unless allowed); texts outside that form are listed
// apart. Random texts of every grammar parse as JSON and validate, integer ranges are checked
// value by value around their bounds, and every refusal is a GrammarError naming the keyword
// and its JSON pointer.
#include <catch2/catch.hpp>

#include <gemma4/grammar/gbnf.hpp>
#include <gemma4/grammar/json_schema.hpp>

#include "support/gbnf_reference.hpp"
#include "support/json_schema_validator.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <vector>

namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using gemma4::JsonSchemaOptions;
using gemma4::test::ReferenceGrammar;

struct SchemaCase {
    std::string name;
    std::string schema;
    std::vector<std::string> accepted;            ///< valid, in canonical form
    std::vector<std::string> rejected;            ///< not JSON, or JSON that does not validate
    std::vector<std::string> canonical_only = {}; ///< valid, but not in the grammar's canonical form
    JsonSchemaOptions options = {};
};

std::string compile_schema_text(const std::string& schema, const JsonSchemaOptions& options = {}) {
    return gemma4::json_schema_to_gbnf(ordered_json::parse(schema), options);
}

/// The GrammarError message compiling `schema` gives ("(no error)" when it compiles).
std::string schema_error_message(const json& schema, const JsonSchemaOptions& options = {}) {
    try {
        gemma4::json_schema_to_gbnf(schema, options);
        return "(no error)";
    } catch (const gemma4::GrammarError& e) {
        return e.what();
    }
}

std::string text_schema_error(const std::string& schema_text) { return schema_error_message(json::parse(schema_text)); }

std::optional<json> parse_json_text(const std::string& text) {
    json value = json::parse(text, nullptr, false);
    if (value.is_discarded()) return std::nullopt;
    return value;
}

std::vector<SchemaCase> scalar_cases() {
    return {
        {"string", R"({"type":"string"})",
         {R"("")", R"("abc")", R"("caf\u00e9")", R"("café")", R"("a\"b\\c\/d\b\f\n\r\t")", R"("\ud83d\ude00")", R"("😀")",
          R"("\u0000")", R"("\u00E9\uFFFF")", "\"\x7f\""},
         {R"("abc)", "abc", R"("\x")", R"("\u12")", R"("\ud83d")", R"("\ude00")", R"("\ud83dx")", "\"a\tb\"", "\"a\nb\"", "1", "null",
          R"("a"b")"}},
        {"string length bounds", R"({"type":"string","minLength":2,"maxLength":4})",
         {R"("ab")", R"("abcd")", R"("\u00e9\u00e9")", R"("😀😀")", R"("\ud83d\ude00x")", R"("\n\t")"},
         {R"("a")", R"("abcde")", R"("😀")", R"("\ud83d\ude00")", R"("")"}},
        {"integer", R"({"type":"integer"})",
         {"0", "-0", "7", "-17", "9999999999999999", "-9999999999999999"},
         {"01", "1.5", R"("1")", "+1", "-", "1.", "true"},
         {"1.0", "1e2", "10000000000000000", " 1", "1\n"}},
        {"number", R"({"type":"number"})",
         {"0", "-1.5", "1e10", "1E-5", "0.25", "1.0e+2", "-0.0", "123.456e-07"},
         {".5", "1.", "01", "-", "+1", "1e", "NaN", "Infinity", R"("1")", "1e+", "0x10"},
         {"1e100", "12345678901234567", "0.12345678901234567"}},
        {"boolean or null", R"({"type":["boolean","null"]})", {"true", "false", "null"}, {"0", R"("true")", "nul", "True"}},
        {"integer or null with bounds", R"({"type":["integer","null"],"minimum":1,"maximum":3})",
         {"1", "3", "null"}, {"0", "4", R"("1")"}},
        {"string or integer with their own bounds", R"({"type":["string","integer"],"minLength":1,"maximum":5})",
         {R"("a")", "5", "-3"}, {R"("")", "6", "null"}},
        {"any value for the empty schema", R"({})",
         {"1", R"("x")", R"([1,{"a":null}])", "{}", R"({"a":{"b":[true,false]}})", "-0.5e-3", "[]"},
         {"[1,]", R"({"a"})", R"({"a":1,})", "tru", ""},
         {"[1, 2]"}},
        {"any value for the true schema", "true", {"null", "[]", R"({"k":"v"})"}, {"nil"}},
    };
}

std::vector<SchemaCase> integer_cases() {
    return {
        {"integer between 0 and 100", R"({"type":"integer","minimum":0,"maximum":100})",
         {"0", "5", "10", "99", "100", "-0"}, {"-1", "101", "1000", "00", "0100", "50.5"}},
        {"integer between -5 and 7", R"({"type":"integer","minimum":-5,"maximum":7})",
         {"-5", "-1", "0", "7"}, {"-6", "8", "-10", "--1"}},
        {"integer between 10 and 999", R"({"type":"integer","minimum":10,"maximum":999})",
         {"10", "11", "99", "100", "998", "999"}, {"9", "1000", "0", "-10"}},
        {"integer with a minimum only", R"({"type":"integer","minimum":-12})",
         {"-12", "-1", "0", "123456", "9999999999999999"}, {"-13", "-100"}, {"10000000000000000"}},
        {"integer with a maximum only", R"({"type":"integer","maximum":-3})",
         {"-3", "-4", "-100", "-9999999999999999"}, {"-2", "0", "5"}},
        {"integer with exclusive and fractional bounds", R"({"type":"integer","exclusiveMinimum":-2.5,"exclusiveMaximum":10})",
         {"-2", "0", "9"}, {"-3", "10"}},
        {"integer with draft 4 exclusive bounds", R"({"type":"integer","minimum":0,"exclusiveMinimum":true,"maximum":3,"exclusiveMaximum":true})",
         {"1", "2"}, {"0", "3"}},
    };
}

std::vector<SchemaCase> object_cases() {
    JsonSchemaOptions lenient;
    lenient.strict_additional_properties = false;
    return {
        {"object with every property required",
         R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0}},"required":["name","age"],"additionalProperties":false})",
         {R"({"name":"Ann","age":31})"},
         {R"({"name":"Ann"})", R"({"name":"Ann","age":-1})", R"({"name":"Ann","age":31,"x":1})", "{}", R"({"name":"Ann","age":31,})",
          R"({"name":"Ann" "age":31})"},
         {R"({"age":31,"name":"Ann"})", R"({"name": "Ann","age":31})"}},
        {"optional properties in several positions",
         R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"},"d":{"type":"integer"},"e":{"type":"integer"}},"required":["a","c"],"additionalProperties":false})",
         {R"({"a":1,"c":3})", R"({"a":1,"b":2,"c":3})", R"({"a":1,"c":3,"d":4})", R"({"a":1,"c":3,"e":5})", R"({"a":1,"b":2,"c":3,"d":4})",
          R"({"a":1,"b":2,"c":3,"e":5})", R"({"a":1,"c":3,"d":4,"e":5})", R"({"a":1,"b":2,"c":3,"d":4,"e":5})"},
         {R"({"a":1})", R"({"c":3})", R"({"b":2,"c":3})", R"({"a":1,,"c":3})", R"({"a":1,"c":3,})", R"({,"a":1,"c":3})",
          R"({"a":1,"c":3,"f":6})", R"({"a":1,"b":"x","c":3})"},
         {R"({"c":3,"a":1})", R"({"a":1,"c":3,"b":2})"}},
        {"every property optional",
         R"({"type":"object","properties":{"x":{"type":"string"},"y":{"type":"string"},"z":{"type":"string"}},"additionalProperties":false})",
         {"{}", R"({"x":""})", R"({"y":""})", R"({"z":""})", R"({"x":"","z":""})", R"({"x":"","y":"","z":""})"},
         {"{,}", R"({"w":""})", R"({"x":"",})", R"({,"y":""})", R"({"x":1})"}},
        {"declared and additional properties with JSON Schema defaults",
         R"({"type":"object","properties":{"p":{"type":"integer"},"q":{"type":"boolean"}}})",
         {"{}", R"({"p":1})", R"({"q":true})", R"({"p":1,"q":false})", R"({"other":[1,{"k":null}]})", R"({"p":1,"other":"x"})",
          R"({"q":true,"z":1,"zz":2})", R"({"pp":1})", R"({"":0})"},
         {R"({"p":"x"})", R"({"q":1})", R"({"p":1,"q":true,})", R"({"\u0070":"x"})"},
         {R"({"\u0070":1})", R"({"other":1,"p":1})"},
         lenient},
        {"additional properties with a schema",
         R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],"additionalProperties":{"type":"string"}})",
         {R"({"id":1})", R"({"id":1,"x":"y"})", R"({"id":1,"i":"a","idd":"b","":"c"})", R"({"id":2,"\u00e9":"x"})"},
         {R"({"id":1,"x":2})", R"({"x":"y"})", R"({"id":1,"id":"x"})", R"({"id":1,"\u0069d":"x"})"}},
        {"map of integers", R"({"type":"object","additionalProperties":{"type":"integer"}})",
         {"{}", R"({"a":1})", R"({"a":1,"b":-2})"}, {R"({"a":"1"})", R"({"a":1,})", "[]"}},
        {"nested objects",
         R"({"type":"object","properties":{"user":{"type":"object","properties":{"name":{"type":"string"},"address":{"type":"object","properties":{"city":{"type":"string"},"zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["city"],"additionalProperties":false}},"required":["name"],"additionalProperties":false}},"required":["user"],"additionalProperties":false})",
         {R"({"user":{"name":"A"}})", R"({"user":{"name":"A","address":{"city":"B"}}})", R"({"user":{"name":"A","address":{"city":"B","zip":"12345"}}})"},
         {R"({"user":{}})", R"({"user":{"name":"A","address":{}}})", R"({"user":{"name":"A","address":{"city":"B","zip":"1234"}}})", "{}"}},
        {"optional property that can never be valid",
         R"({"type":"object","properties":{"a":{"type":"integer"},"b":false},"additionalProperties":true})",
         {R"({"a":1})", R"({"c":1})", "{}", R"({"bb":1})"}, {R"({"b":1})", R"({"a":1,"b":null})"}},
        {"property names that need escapes",
         R"({"type":"object","properties":{"quote\"key":{"type":"integer"},"new\nline":{"type":"boolean"},"é":{"type":"null"},"tab\there":{"const":0}},"required":["quote\"key","new\nline","é","tab\there"],"additionalProperties":false})",
         {R"({"quote\"key":1,"new\nline":true,"é":null,"tab\there":0})"},
         {R"({"quote\"key":1,"new\nline":true,"é":null})"},
         {R"({"quote\"key":1,"new\nline":true,"\u00e9":null,"tab\there":0})"}},
        {"an object schema with no properties",
         R"({"type":"object","properties":{},"additionalProperties":false})", {"{}"}, {R"({"a":1})", "{"}, {"{ }"}},
    };
}

std::vector<SchemaCase> array_cases() {
    return {
        {"array of objects",
         R"({"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}}},"required":["id"],"additionalProperties":false},"minItems":1,"maxItems":3})",
         {R"([{"id":1}])", R"([{"id":1,"tags":[]},{"id":2,"tags":["a","b"]}])", R"([{"id":1},{"id":2},{"id":3}])"},
         {"[]", R"([{"id":1},{"id":2},{"id":3},{"id":4}])", R"([{"tags":[]}])", R"([{"id":1},])", R"([,{"id":1}])"}},
        {"array length bounds", R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":4})",
         {"[1,2]", "[1,2,3]", "[1,2,3,4]"}, {"[]", "[1]", "[1,2,3,4,5]", R"([1,"2"])"}},
        {"array with at most zero items", R"({"type":"array","maxItems":0})", {"[]"}, {"[1]", "[[]]"}},
        {"tuple of prefixItems and no more items",
         R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"},{"type":"boolean"}],"items":false,"minItems":1})",
         {R"(["a"])", R"(["a",1])", R"(["a",1,true])"}, {"[]", R"(["a",1,true,null])", "[1]", R"(["a","b"])"}},
        {"prefixItems followed by items", R"({"type":"array","prefixItems":[{"const":"op"}],"items":{"type":"integer"},"minItems":2,"maxItems":4})",
         {R"(["op",1])", R"(["op",1,2,3])"}, {R"(["op"])", R"(["op",1,2,3,4])", "[1,2]", R"(["op","x"])"}},
        {"tuple in the array form of items", R"({"type":"array","items":[{"type":"integer"},{"type":"string"}],"additionalItems":false})",
         {"[]", "[1]", R"([1,"a"])"}, {R"([1,"a",2])", R"(["a"])"}},
        {"prefixItems with any items after", R"({"type":"array","prefixItems":[{"type":"null"}]})",
         {"[]", "[null]", R"([null,1,"x",[{}]])"}, {"[1]"}},
    };
}

std::vector<SchemaCase> combinator_cases() {
    JsonSchemaOptions lenient;
    lenient.strict_additional_properties = false;
    return {
        {"enum of mixed types", R"({"enum":["red",1,2.5,null,true,{"k":[1,"x"]},[]]})",
         {R"("red")", "1", "2.5", "null", "true", R"({"k":[1,"x"]})", "[]"},
         {R"("blue")", "3", "false", R"({"k":[1]})", "[1]", R"("Red")"},
         {"1.0", "2.50", R"({"k": [1, "x"]})", R"("\u0072ed")"}},
        {"enum filtered by type", R"({"type":"string","enum":["a","b",1]})", {R"("a")", R"("b")"}, {"1", R"("c")"}},
        {"const object", R"({"const":{"a":[1,2],"b":null}})", {R"({"a":[1,2],"b":null})"},
         {R"({"a":[1,2]})", R"({"a":[2,1],"b":null})"}, {R"({"b":null,"a":[1,2]})"}},
        {"anyOf of a short string and a large integer", R"({"anyOf":[{"type":"string","maxLength":2},{"type":"integer","minimum":10}]})",
         {R"("ab")", R"("")", "10", "12345"}, {R"("abc")", "9", "null"}},
        {"oneOf with disjoint branches",
         R"({"oneOf":[{"type":"object","properties":{"kind":{"const":"circle"},"radius":{"type":"number"}},"required":["kind","radius"],"additionalProperties":false},{"type":"object","properties":{"kind":{"const":"square"},"side":{"type":"number"}},"required":["kind","side"],"additionalProperties":false}]})",
         {R"({"kind":"circle","radius":1.5})", R"({"kind":"square","side":2})"}, {R"({"kind":"circle","side":2})", R"({"kind":"triangle"})"}},
        {"allOf of one referenced schema",
         R"({"$defs":{"Point":{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"}},"required":["x","y"],"additionalProperties":false}},"allOf":[{"$ref":"#/$defs/Point"}],"description":"a point"})",
         {R"({"x":1,"y":2})"}, {R"({"x":1})", R"({"x":1,"y":2,"z":3})"}},
        {"allOf merging object schemas",
         R"({"$defs":{"Named":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}},"allOf":[{"$ref":"#/$defs/Named"},{"properties":{"age":{"type":"integer"}}}]})",
         {R"({"name":"a"})", R"({"name":"a","age":3})", R"({"name":"a","age":3,"x":null})"},
         {R"({"age":3})", R"({"name":"a","age":"3"})", R"({"name":1})"},
         {R"({"age":3,"name":"a"})"},
         lenient},
        {"refs into $defs and definitions",
         R"({"definitions":{"n":{"type":"integer"}},"$defs":{"s":{"type":"string","minLength":1}},"type":"object","properties":{"a":{"$ref":"#/definitions/n"},"b":{"$ref":"#/$defs/s"},"c":{"$ref":"#/definitions/n"}},"required":["a","b"],"additionalProperties":false})",
         {R"({"a":1,"b":"x"})", R"({"a":1,"b":"x","c":2})"}, {R"({"a":1,"b":""})", R"({"a":"1","b":"x"})"}},
        {"recursive tree through $defs",
         R"({"$defs":{"node":{"type":"object","properties":{"value":{"type":"integer"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["value"],"additionalProperties":false}},"$ref":"#/$defs/node"})",
         {R"({"value":1})", R"({"value":1,"children":[]})", R"({"value":1,"children":[{"value":2,"children":[{"value":3}]},{"value":4}]})"},
         {R"({"value":1,"children":[{}]})", R"({"children":[]})"}},
        {"recursive list through the root",
         R"({"type":"object","properties":{"head":{"type":"string"},"tail":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["head","tail"],"additionalProperties":false})",
         {R"({"head":"a","tail":null})", R"({"head":"a","tail":{"head":"b","tail":null}})"},
         {R"({"head":"a"})", R"({"head":"a","tail":{"head":"b"}})"}},
    };
}

std::vector<SchemaCase> string_pattern_cases() {
    return {
        {"anchored pattern", R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3,4}$"})",
         {R"("AB-123")", R"("XY-1234")", R"("\u0041B-123")", R"("A\u0042-1\u00323")"},
         {R"("ab-123")", R"("AB-12")", R"("AB-12345")", R"("AB123")", R"(" AB-123")"}},
        {"unanchored pattern", R"({"type":"string","pattern":"ab+c"})",
         {R"("abc")", R"("xxabbbcyy")", R"("abcabc")"}, {R"("")", R"("ac")", R"("ab")"}},
        {"pattern anchored at one end per branch", R"({"type":"string","pattern":"^id-|-end$"})",
         {R"("id-x")", R"("x-end")", R"("id-")", R"("-end")"}, {R"("x-id-")", R"("end")", R"("")"}},
        {"pattern with groups and alternation and quantifiers",
         R"({"type":"string","pattern":"^(?:foo|ba[rz])+(\\.[a-z]{2,})?(?<n>#\\d*)?$"})",
         {R"("foo")", R"("barbazfoo")", R"("foo.com")", R"("bar.co#")", R"("baz#123")", R"("foo.abc#9")"},
         {R"("fo")", R"("foo.c")", R"("foo#a")", R"("qux")"}},
        {"pattern with classes and escapes", R"({"type":"string","pattern":"^[^\\s\"\\\\]+\\s\\w*\\.?\\W$"})",
         {R"("ab c!")", R"("é\u00a0x.-")", R"("a\u2028 ")", R"("x\ty_.!")"},
         {R"("a\"b c!")", R"("ab c")", R"("ab\\ c!")"}},
        {"pattern repeating parts that can match the empty text", R"({"type":"string","pattern":"^(a?b?)*-(|)+(x?(y|)z*)+$"})",
         {R"("-")", R"("ab-")", R"("aab-")", R"("ba-xz")", R"("-yzz")", R"("-xyzxz")"}, {R"("abc-")", R"("a")", R"("-q")"}},
        {"unanchored pattern that can match the empty text", R"({"type":"string","pattern":"(a|)*"})",
         {R"("")", R"("xyz")", R"("a")"}, {"1"}},
        {"dot and counted repetition", R"({"type":"string","pattern":"^.{2,3}$"})",
         {R"("ab")", R"("abc")", R"("😀x")", R"("\u00e9\u00e9\u00e9")", R"("a\tb")"},
         {R"("a")", R"("abcd")", R"("a\nb")", R"("a\u2028b")", R"("\r\r")"}},
        {"format date", R"({"type":"string","format":"date"})",
         {R"("2024-02-29")", R"("2023-12-31")", R"("2000-02-29")", R"("1900-02-28")", R"("0000-02-29")", R"("2023-04-30")"},
         {R"("1900-02-29")", R"("2023-02-29")", R"("2023-04-31")", R"("2023-13-01")", R"("2023-1-01")", R"("2023-00-10")",
          R"("2023-01-00")", R"("2023-01-32")", R"("20231-01-01")"}},
        {"format time", R"({"type":"string","format":"time"})",
         {R"("23:59:59Z")", R"("00:00:00.123+05:30")", R"("12:30:00z")", R"("12:30:00-08:00")", R"("12:30:00.5Z")"},
         {R"("24:00:00Z")", R"("12:60:00Z")", R"("12:30:00")", R"("12:30:60Z")", R"("12:30:00.Z")", R"("12:30:00+5:30")", R"("1:30:00Z")"}},
        {"format date-time", R"({"type":"string","format":"date-time"})",
         {R"("2024-01-15T10:20:30Z")", R"("2024-01-15t10:20:30.5+01:00")"},
         {R"("2024-01-15 10:20:30Z")", R"("2024-02-30T10:20:30Z")", R"("2024-01-15T10:20Z")"}},
        {"format uuid", R"({"type":"string","format":"uuid"})",
         {R"("123e4567-e89b-12d3-a456-426614174000")", R"("123E4567-E89B-12D3-A456-426614174000")"},
         {R"("123e4567e89b12d3a456426614174000")", R"("123e4567-e89b-12d3-a456-42661417400g")", R"("123e4567-e89b-12d3-a456-4266141740000")"}},
    };
}

std::vector<SchemaCase> whitespace_cases() {
    JsonSchemaOptions spaced;
    spaced.max_whitespace = 2;
    return {
        {"bounded whitespace between tokens",
         R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}},"b":{"const":{"k":1}}},"required":["a"],"additionalProperties":false})",
         {R"({ "a" : [ 1 , 2 ] })", R"({"a":[]})", "{\n \"a\": [1]\n}", R"({"a":[ ],"b":{ "k" :1}})", "{\"a\":[1],\r\n\"b\":{\"k\":1}}"},
         {"{\"a\":[1\u00a0]}", R"({"a":[1],"b":{"k":2}})", R"({"a":[1],})"},
         {R"({   "a":[]})", R"( {"a":[]})", R"({"a":[]} )", R"({"a":[1]   })"},
         spaced},
    };
}

std::vector<SchemaCase> all_schema_cases() {
    std::vector<SchemaCase> all;
    for (auto group : {scalar_cases(), integer_cases(), object_cases(), array_cases(), combinator_cases(), string_pattern_cases(),
                       whitespace_cases()})
        all.insert(all.end(), group.begin(), group.end());
    return all;
}

/// The grammar of one case, checked by the library's own parser too.
std::string compiled_case_grammar(const SchemaCase& c) {
    const std::string grammar = compile_schema_text(c.schema, c.options);
    CHECK_NOTHROW(gemma4::parse_gbnf(grammar));
    return grammar;
}

void check_schema_case(const SchemaCase& c) {
    INFO("schema: " << c.schema);
    const std::string grammar = compiled_case_grammar(c);
    INFO("grammar:\n" << grammar);
    const ReferenceGrammar reference(grammar);
    const json schema = json::parse(c.schema);
    for (const std::string& text : c.accepted) {
        INFO("accepted text: " << text);
        const auto value = parse_json_text(text);
        REQUIRE(value);
        std::string why;
        const bool valid = gemma4::test::validates(*value, schema, &why);
        INFO("the validator refuses it: " << why);
        CHECK(valid);
        CHECK(reference.matches(text));
    }
    for (const std::string& text : c.rejected) {
        INFO("rejected text: " << text);
        if (const auto value = parse_json_text(text)) CHECK_FALSE(gemma4::test::validates(*value, schema));
        CHECK_FALSE(reference.matches(text));
    }
    for (const std::string& text : c.canonical_only) {
        INFO("valid text outside the canonical form: " << text);
        const auto value = parse_json_text(text);
        REQUIRE(value);
        std::string why;
        const bool valid = gemma4::test::validates(*value, schema, &why);
        INFO("the validator refuses it: " << why);
        CHECK(valid);
        CHECK_FALSE(reference.matches(text));
    }
}

void check_generated_texts(const SchemaCase& c, int count) {
    INFO("schema: " << c.schema);
    const std::string grammar = compiled_case_grammar(c);
    const ReferenceGrammar reference(grammar);
    const json schema = json::parse(c.schema);
    std::mt19937 rng(12345);
    for (int i = 0; i < count; ++i) {
        const std::string text = reference.generate(rng, 6);
        INFO("generated text: " << text);
        const auto value = parse_json_text(text);
        REQUIRE(value);
        std::string why;
        const bool valid = gemma4::test::validates(*value, schema, &why);
        INFO("the validator refuses it: " << why);
        REQUIRE(valid);
        REQUIRE(reference.matches(text));
    }
}

}  // namespace

TEST_CASE("each schema grammar accepts exactly the valid texts in canonical form", "[grammar][json_schema]") {
    const auto cases = all_schema_cases();
    REQUIRE(cases.size() >= 25);
    for (const SchemaCase& c : cases)
        DYNAMIC_SECTION(c.name) { check_schema_case(c); }
}

TEST_CASE("texts generated from each schema grammar are JSON that validates", "[grammar][json_schema]") {
    for (const SchemaCase& c : all_schema_cases())
        DYNAMIC_SECTION(c.name) { check_generated_texts(c, 300); }
}

namespace {

struct IntegerWindow {
    std::string schema;
    std::int64_t from, to;  ///< every integer in [from, to] is tried
};

/// Every integer in the window, and "-0", is accepted exactly when it validates.
void check_integer_window(const IntegerWindow& w) {
    INFO("schema: " << w.schema);
    const std::string grammar = compile_schema_text(w.schema);
    INFO("grammar:\n" << grammar);
    const ReferenceGrammar reference(grammar);
    const json schema = json::parse(w.schema);
    std::size_t accepted = 0;
    for (std::int64_t n = w.from; n <= w.to; ++n) {
        INFO("integer " << n);
        const bool valid = gemma4::test::validates(json(n), schema);
        REQUIRE(reference.matches(std::to_string(n)) == valid);
        accepted += valid;
    }
    CHECK(reference.matches("-0") == gemma4::test::validates(json(0), schema));
    CHECK(accepted > 0);
}

}  // namespace

TEST_CASE("integer ranges accept every integer in range and no other", "[grammar][json_schema]") {
    const std::vector<IntegerWindow> windows = {
        {R"({"type":"integer","minimum":0,"maximum":100})", -50, 1100},
        {R"({"type":"integer","minimum":-5,"maximum":7})", -200, 200},
        {R"({"type":"integer","minimum":10,"maximum":999})", -20, 1200},
        {R"({"type":"integer","minimum":-12})", -300, 1500},
        {R"({"type":"integer","maximum":-3})", -1500, 300},
        {R"({"type":"integer","minimum":-1000,"maximum":-10})", -1300, 20},
        {R"({"type":"integer","exclusiveMinimum":-2.5,"exclusiveMaximum":10.5})", -30, 30},
        {R"({"type":"integer","minimum":2.5,"maximum":7.5})", -10, 20},
        {R"({"type":"integer","minimum":42,"maximum":42})", 0, 100},
        {R"({"type":"integer","minimum":0,"maximum":0})", -20, 20},
        {R"({"type":"integer","minimum":0})", -20, 1200},
        {R"({"type":"integer","minimum":7,"maximum":123456})", 0, 1000},
        {R"({"type":"integer","minimum":7,"maximum":123456})", 122000, 124000},
        {R"({"type":"integer","minimum":1990,"maximum":2099})", 1000, 3000},
        {R"({"type":"integer","minimum":-9999999999999999,"maximum":9999999999999999})", -100, 100},
        {R"({"type":"integer","minimum":9999999999998990})", 9999999999998000, 9999999999999999},
    };
    for (const IntegerWindow& w : windows)
        DYNAMIC_SECTION(w.schema << " over " << w.from << " to " << w.to) { check_integer_window(w); }
}

TEST_CASE("random integer ranges accept exactly their integers around the bounds", "[grammar][json_schema]") {
    std::mt19937_64 rng(2024);
    auto random_bound = [&] {
        const int digits = std::uniform_int_distribution<int>(1, 7)(rng);
        std::int64_t magnitude = std::uniform_int_distribution<std::int64_t>(0, 9)(rng);
        for (int i = 1; i < digits; ++i) magnitude = magnitude * 10 + std::uniform_int_distribution<std::int64_t>(0, 9)(rng);
        return std::uniform_int_distribution<int>(0, 3)(rng) == 0 ? -magnitude : magnitude;
    };
    for (int trial = 0; trial < 60; ++trial) {
        std::int64_t lo = random_bound(), hi = random_bound();
        if (lo > hi) std::swap(lo, hi);
        const std::string schema = R"({"type":"integer","minimum":)" + std::to_string(lo) + R"(,"maximum":)" + std::to_string(hi) + "}";
        INFO("schema: " << schema);
        const ReferenceGrammar reference(compile_schema_text(schema));
        std::vector<std::int64_t> probes;
        for (const std::int64_t edge : {lo, hi})
            for (std::int64_t d = -30; d <= 30; ++d) probes.push_back(edge + d);
        for (std::int64_t p = 1; p <= 10'000'000; p *= 10)
            for (const std::int64_t q : {p - 1, p, p + 1, -p + 1, -p, -p - 1}) probes.push_back(q);
        for (int i = 0; i < 40; ++i) probes.push_back(std::uniform_int_distribution<std::int64_t>(lo, hi)(rng));
        for (const std::int64_t n : probes) {
            INFO("integer " << n);
            REQUIRE(reference.matches(std::to_string(n)) == (lo <= n && n <= hi));
        }
    }
}

TEST_CASE("absent additionalProperties follows the strict option", "[grammar][json_schema]") {
    const std::string base = R"({"type":"object","properties":{"a":{"type":"integer"}})";
    JsonSchemaOptions lenient;
    lenient.strict_additional_properties = false;
    CHECK(compile_schema_text(base + "}") == compile_schema_text(base + R"(,"additionalProperties":false})"));
    CHECK(compile_schema_text(base + "}", lenient) == compile_schema_text(base + R"(,"additionalProperties":true})", lenient));
    CHECK(compile_schema_text(base + "}") != compile_schema_text(base + "}", lenient));
    CHECK(compile_schema_text(R"({"type":"object","properties":{}})") ==
          compile_schema_text(R"({"type":"object","properties":{},"additionalProperties":false})"));
    // An object schema that names no property is any object either way.
    CHECK(compile_schema_text(R"({"type":"object"})") == gemma4::json_object_gbnf());
    CHECK(compile_schema_text(R"({"type":"object"})", lenient) == gemma4::json_object_gbnf());
    // required alone also makes the object strict.
    const ReferenceGrammar strict_required(compile_schema_text(R"({"type":"object","required":[],"additionalProperties":false})"));
    CHECK(compile_schema_text(R"({"type":"object","required":[]})") == compile_schema_text(R"({"type":"object","required":[],"additionalProperties":false})"));
    CHECK(strict_required.matches("{}"));
    CHECK_FALSE(strict_required.matches(R"({"a":1})"));
}

TEST_CASE("json_object_gbnf accepts any object and nothing else", "[grammar][json_schema]") {
    const std::string grammar = gemma4::json_object_gbnf();
    CHECK_NOTHROW(gemma4::parse_gbnf(grammar));
    const ReferenceGrammar reference(grammar);
    for (const char* text : {"{}", R"({"a":1})", R"({"a":{"b":[1,"x",null,true,{}]},"":-0.5e+3})", R"({"a":1,"a":2})"})
        CHECK(reference.matches(text));
    for (const char* text : {"[]", "1", R"("{}")", "{", R"({"a"})", R"({"a":1,})", R"({1:2})", "{ }"}) CHECK_FALSE(reference.matches(text));
    JsonSchemaOptions spaced;
    spaced.max_whitespace = 4;
    const ReferenceGrammar spaced_reference(gemma4::json_object_gbnf(spaced));
    CHECK(spaced_reference.matches("{ }"));
    CHECK(spaced_reference.matches("{\n  \"a\": [ 1, 2 ],\n  \"b\": {}\n}"));
    CHECK_FALSE(spaced_reference.matches("{\n      \"a\": 1}"));
}

TEST_CASE("keywords for one type imply it when type is absent", "[grammar][json_schema]") {
    CHECK(compile_schema_text(R"({"properties":{"a":{"type":"integer"}},"required":["a"]})") ==
          compile_schema_text(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})"));
    CHECK(compile_schema_text(R"({"items":{"type":"integer"}})") == compile_schema_text(R"({"type":"array","items":{"type":"integer"}})"));
    CHECK(compile_schema_text(R"({"maxLength":3})") == compile_schema_text(R"({"type":"string","maxLength":3})"));
    CHECK(compile_schema_text(R"({"description":"anything"})") == compile_schema_text("{}"));
}

TEST_CASE("properties keep the order of the schema given as ordered_json", "[grammar][json_schema]") {
    const std::string schema = R"({"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"integer"}},"required":["zeta","alpha"],"additionalProperties":false})";
    const ReferenceGrammar ordered(gemma4::json_schema_to_gbnf(ordered_json::parse(schema)));
    CHECK(ordered.matches(R"({"zeta":1,"alpha":2})"));
    CHECK_FALSE(ordered.matches(R"({"alpha":2,"zeta":1})"));
    // nlohmann::json keeps its keys sorted, and so does the grammar compiled from one.
    const ReferenceGrammar sorted(gemma4::json_schema_to_gbnf(json::parse(schema)));
    CHECK(sorted.matches(R"({"alpha":2,"zeta":1})"));
    CHECK_FALSE(sorted.matches(R"({"zeta":1,"alpha":2})"));
}

TEST_CASE("allOf merges object schemas as if written as one", "[grammar][json_schema]") {
    const std::string merged = compile_schema_text(
        R"({"$defs":{"Named":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}},)"
        R"("allOf":[{"$ref":"#/$defs/Named"},{"properties":{"age":{"type":"integer"}}}],"properties":{"id":{"type":"integer"}},"required":["id"]})");
    const std::string written = compile_schema_text(
        R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"id":{"type":"integer"}},"required":["name","id"]})");
    CHECK(merged == written);
}

TEST_CASE("grammar text uses plain rule names and one rule per line", "[grammar][json_schema]") {
    const std::regex line(R"(([a-zA-Z0-9-]+ ::= .*)|(    \| .*))");
    for (const SchemaCase& c : all_schema_cases()) {
        INFO("schema: " << c.schema);
        const std::string grammar = compile_schema_text(c.schema, c.options);
        CHECK(grammar.rfind("root ::= ", 0) == 0);
        std::size_t start = 0;
        while (start < grammar.size()) {
            const std::size_t end = grammar.find('\n', start);
            REQUIRE(end != std::string::npos);
            const std::string text = grammar.substr(start, end - start);
            INFO("line: " << text);
            CHECK(std::regex_match(text, line));
            CHECK(std::all_of(text.begin(), text.end(), [](char ch) { return ch >= 0x20 && ch < 0x7F; }));
            start = end + 1;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Refusals

TEST_CASE("unsupported keywords are named with their pointer", "[grammar][json_schema]") {
    for (const char* keyword : {"not", "if", "then", "else", "patternProperties", "propertyNames", "minProperties", "maxProperties",
                                "dependentRequired", "dependentSchemas", "dependencies", "contains", "minContains", "maxContains",
                                "unevaluatedProperties", "unevaluatedItems", "multipleOf", "$anchor", "$dynamicRef", "nullable",
                                "contentEncoding", "x-custom"}) {
        json schema = {{"type", "object"}, {"properties", {{"x", {{keyword, json::object()}}}}}};
        CHECK(schema_error_message(schema) == std::string("json schema: /properties/x: unsupported keyword \"") + keyword + "\"");
    }
    CHECK(text_schema_error(R"({"type":"array","items":{"anyOf":[{"type":"string"},{"not":{}}]}})") ==
          "json schema: /items/anyOf/1: unsupported keyword \"not\"");
    CHECK(text_schema_error(R"({"$defs":{"a/b":{"if":true}},"$ref":"#/$defs/a~1b"})") ==
          "json schema: /$defs/a~1b: unsupported keyword \"if\"");
    CHECK(text_schema_error(R"({"not":{}})") == "json schema: top level: unsupported keyword \"not\"");
}

TEST_CASE("keywords outside the supported cases are refused with their pointer", "[grammar][json_schema]") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {R"({"type":"object","properties":{"age":{"type":"number","minimum":0}}})",
         R"(json schema: /properties/age/minimum: "minimum" is only supported with "type": "integer", got "number")"},
        {R"({"minimum":0})", R"(json schema: /minimum: "minimum" is only supported with "type": "integer", got no "type")"},
        {R"({"type":["integer","number"],"maximum":3})",
         R"(json schema: /maximum: "maximum" is only supported with "type": "integer", got ["integer","number"])"},
        {R"({"type":"integer","minLength":1})", R"(json schema: /minLength: "minLength" applies to strings, and "type" is "integer")"},
        {R"({"type":"string","items":{}})", R"(json schema: /items: "items" applies to arrays, and "type" is "string")"},
        {R"({"properties":{},"items":{}})", R"(json schema: top level: "items" and "properties" are about different types: give a "type")"},
        {R"({"type":"array","uniqueItems":true})", R"(json schema: /uniqueItems: "uniqueItems": true is not supported)"},
        {R"({"type":"string","format":"email"})",
         R"(json schema: /format: "format" "email" is not supported (supported: date, time, date-time, uuid))"},
        {R"({"type":"string","pattern":"^a","minLength":1})", R"(json schema: /minLength: "minLength" cannot be combined with "pattern")"},
        {R"({"type":"string","format":"date","maxLength":10})", R"(json schema: /maxLength: "maxLength" cannot be combined with "format")"},
        {R"({"type":"string","anyOf":[{"maxLength":1}]})", R"(json schema: /type: "type" cannot be combined with "anyOf")"},
        {R"({"$ref":"#/$defs/a","type":"object","$defs":{"a":{}}})", R"(json schema: /type: "type" cannot be combined with "$ref")"},
        {R"({"anyOf":[{}],"oneOf":[{}]})", R"(json schema: /oneOf: "oneOf" cannot be combined with "anyOf")"},
        {R"({"enum":["a"],"minLength":1})", R"(json schema: /minLength: "minLength" cannot be combined with "enum")"},
        {R"({"allOf":[{"type":"object","properties":{"a":{}},"additionalProperties":false},{"properties":{"b":{}}}]})",
         R"(json schema: /allOf/0/additionalProperties: "allOf" merges object schemas with only "type": "object", "properties" and "required"; "additionalProperties" is not supported in a branch)"},
        {R"({"allOf":[{"properties":{"a":{}}},{"properties":{"a":{}}}]})",
         R"(json schema: /allOf/1/properties/a: property "a" is also defined by another "allOf" branch)"},
        {R"({"allOf":[{"type":"string"},{"maxLength":3}]})",
         R"(json schema: /allOf/0/type: "allOf" merges object schemas with only "type": "object", "properties" and "required"; "type" is not supported in a branch)"},
        {R"({"type":"object","properties":{"a":{}},"required":["a","b"]})",
         R"(json schema: /required: "b" is required, but it is not in "properties" and additional properties are not allowed (strict_additional_properties))"},
    };
    for (const auto& [schema, message] : cases) {
        INFO("schema: " << schema);
        CHECK(text_schema_error(schema) == message);
    }
}

TEST_CASE("unsupported regular expressions name the pattern and the reason", "[grammar][json_schema]") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {R"(a(?=b))", "lookaround and other (? groups are not supported (at character 4)"},
        {R"((a)\1)", "escape '\\1' is not supported (backreferences, word boundaries, \\p{...} and \\c are not) (at character 5)"},
        {R"(\bword)", "escape '\\b' is not supported (backreferences, word boundaries, \\p{...} and \\c are not) (at character 2)"},
        {R"(\p{L})", "escape '\\p' is not supported (backreferences, word boundaries, \\p{...} and \\c are not) (at character 2)"},
        {"a^b", "anchors are supported only at the ends of the pattern (at character 2)"},
        {"a$b", "'$' is supported only at the end (at character 3)"},
        {"(a$)", "anchors are supported only at the ends of the pattern (at character 3)"},
        {"*a", "nothing to repeat (at character 1)"},
        {"a**", "nothing to repeat (at character 3)"},
        {"a{3,1}", "quantifier {3,1} has max below min (at character 7)"},
        {"a{2", "malformed {m,n} quantifier (at character 4)"},
        {"a{20000}", "repetition count above the limit of 10000 (at character 7)"},
        {"(ab", "missing ')' (at character 4)"},
        {"ab)", "unbalanced ')' (at character 3)"},
        {"[z-a]", "character range out of order (at character 5)"},
        {"[ab", "unterminated character class (at character 4)"},
        {R"([\d-z])", "a class escape cannot be the end of a range (at character 4)"},
        {R"(\ud800)", "unpaired surrogate escape (at character 7)"},
        {"a]", "unescaped ']' (at character 2)"},
    };
    for (const auto& [pattern, reason] : cases) {
        INFO("pattern: " << pattern);
        const json schema = {{"type", "string"}, {"pattern", pattern}};
        CHECK(schema_error_message(schema) == "json schema: /pattern: unsupported regular expression " + json(pattern).dump() + ": " + reason);
    }
}

TEST_CASE("bad references are refused with their pointer", "[grammar][json_schema]") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {R"({"$ref":"http://example.com/s.json"})",
         R"(json schema: /$ref: "$ref" "http://example.com/s.json": only references inside the schema ("#", "#/$defs/...") are supported)"},
        {R"({"type":"object","properties":{"a":{"$ref":"#/$defs/missing"}}})", R"(json schema: /properties/a/$ref: "$ref" "#/$defs/missing" points to nothing)"},
        {R"({"$ref":"#node"})", R"(json schema: /$ref: "$ref" "#node": anchors are not supported, only JSON pointers)"},
        {R"({"$ref":5})", R"(json schema: /$ref: "$ref" must be a string, got number)"},
        {R"({"$ref":"#/a~2"})", R"(json schema: /$ref: "$ref" "#/a~2": malformed JSON pointer (a '~' not followed by 0 or 1))"},
        {R"({"$ref":"#/%zz"})", R"(json schema: /$ref: "$ref" "#/%zz": malformed percent escape)"},
        {R"({"$ref":"#/$defs/a","$defs":{"a":3}})", R"(json schema: /$defs/a: a schema must be an object or a boolean, got number)"},
        {R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/b"},{"type":"null"}]},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})",
         R"(json schema: /$defs/a: "$ref" cycle that consumes no input: #/$defs/a -> #/$defs/b -> #/$defs/a)"},
        {R"({"anyOf":[{"$ref":"#"},{"type":"null"}]})", R"(json schema: top level: "$ref" cycle that consumes no input: # -> #)"},
    };
    for (const auto& [schema, message] : cases) {
        INFO("schema: " << schema);
        CHECK(text_schema_error(schema) == message);
    }
    // A percent-encoded pointer names the same definition.
    CHECK(text_schema_error(R"({"$ref":"#/%24defs/a%20b","$defs":{"a b":{"type":"integer"}}})") == "(no error)");
}

TEST_CASE("keyword values of the wrong type are refused", "[grammar][json_schema]") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {R"({"type":"float"})", R"(json schema: /type: unknown type "float")"},
        {R"({"type":5})", R"(json schema: /type: "type" must be a string or an array of strings, got number)"},
        {R"({"type":[]})", R"(json schema: /type: "type" is an empty array)"},
        {R"({"type":"string","minLength":-1})", R"(json schema: /minLength: "minLength" must be a non-negative integer)"},
        {R"({"type":"string","maxLength":"3"})", R"(json schema: /maxLength: "maxLength" must be a non-negative integer)"},
        {R"({"type":"array","minItems":1.5})", R"(json schema: /minItems: "minItems" must be a non-negative integer)"},
        {R"({"type":"object","properties":[]})", R"(json schema: /properties: "properties" must be an object)"},
        {R"({"type":"object","required":"a"})", R"(json schema: /required: "required" must be an array of strings)"},
        {R"({"type":"object","additionalProperties":1})", R"(json schema: /additionalProperties: "additionalProperties" must be a boolean or a schema)"},
        {R"({"enum":[]})", R"(json schema: /enum: "enum" must be a non-empty array)"},
        {R"({"enum":5})", R"(json schema: /enum: "enum" must be a non-empty array)"},
        {R"({"type":"integer","enum":["a"]})", R"(json schema: /enum: no value of "enum" has the schema's "type")"},
        {R"({"enum":[1,2],"const":3})", R"(json schema: /const: no value of "enum" equals "const")"},
        {R"({"anyOf":[]})", R"(json schema: /anyOf: "anyOf" must be a non-empty array of schemas)"},
        {R"({"type":"array","items":5})", R"(json schema: /items: a schema must be an object or a boolean, got number)"},
        {R"({"type":"array","prefixItems":{}})", R"(json schema: /prefixItems: "prefixItems" must be an array of schemas)"},
        {R"({"type":"array","additionalItems":false})",
         R"(json schema: /additionalItems: "additionalItems" needs "items" as an array (or use prefixItems and items))"},
        {R"({"type":"string","pattern":5})", R"(json schema: /pattern: "pattern" must be a string)"},
        {R"({"type":"integer","minimum":"0"})", R"(json schema: /minimum: "minimum" must be a number)"},
        {R"({"type":"integer","exclusiveMinimum":true})", R"(json schema: /exclusiveMinimum: "exclusiveMinimum": true needs "minimum")"},
        {"3", "json schema: top level: a schema must be an object or a boolean, got number"},
    };
    for (const auto& [schema, message] : cases) {
        INFO("schema: " << schema);
        CHECK(text_schema_error(schema) == message);
    }
}

TEST_CASE("contradictory bounds are refused", "[grammar][json_schema]") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {R"({"type":"string","minLength":5,"maxLength":3})", R"(json schema: /minLength: "minLength" 5 is greater than "maxLength" 3)"},
        {R"({"type":"array","minItems":4,"maxItems":2})", R"(json schema: /minItems: "minItems" 4 is greater than "maxItems" 2)"},
        {R"({"type":"integer","minimum":10,"maximum":5})", R"(json schema: top level: no integer satisfies "minimum" 10, "maximum" 5)"},
        {R"({"type":"integer","exclusiveMinimum":1,"exclusiveMaximum":2})",
         R"(json schema: top level: no integer satisfies "exclusiveMinimum" 1, "exclusiveMaximum" 2)"},
        {R"({"type":"integer","minimum":1e20})",
         R"(json schema: top level: no integer of at most 16 digits satisfies "minimum" 1e+20 (integers are limited to 16 digits))"},
        {R"({"type":"object","properties":{"a":false},"required":["a"]})",
         "json schema: top level: no JSON value validates against the schema (or none of finite size)"},
        {R"({"$defs":{"a":{"type":"array","items":{"$ref":"#/$defs/a"},"minItems":1}},"$ref":"#/$defs/a"})",
         "json schema: top level: no JSON value validates against the schema (or none of finite size)"},
        {"false", "json schema: top level: no JSON value validates against the schema (or none of finite size)"},
        {R"({"type":"array","prefixItems":[{}],"items":false,"minItems":2})",
         "json schema: top level: no JSON value validates against the schema (or none of finite size)"},
    };
    for (const auto& [schema, message] : cases) {
        INFO("schema: " << schema);
        CHECK(text_schema_error(schema) == message);
    }
}

TEST_CASE("deep or large schemas are refused before they exhaust anything", "[grammar][json_schema]") {
    json deep = {{"type", "integer"}};
    std::string pointer;
    for (int i = 0; i < 100; ++i) deep = {{"type", "object"}, {"properties", {{"a", deep}}}};
    for (int i = 0; i < 65; ++i) pointer += "/properties/a";
    CHECK(schema_error_message(deep) == "json schema: " + pointer + ": schemas nested deeper than 64 levels");

    json chain = {{"$ref", "#/$defs/d0"}, {"$defs", json::object()}};
    for (int i = 0; i < 200; ++i) chain["$defs"]["d" + std::to_string(i)] = {{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
    chain["$defs"]["d200"] = {{"type", "integer"}};
    // A chain of definitions nests nothing: each is compiled on its own.
    CHECK(gemma4::json_schema_to_gbnf(chain) == gemma4::json_schema_to_gbnf(json{{"type", "integer"}}));
    json ring = {{"$ref", "#/$defs/d0"}, {"$defs", json::object()}};
    for (int i = 0; i < 500; ++i)
        ring["$defs"]["d" + std::to_string(i)] = {{"type", "array"}, {"items", {{"$ref", "#/$defs/d" + std::to_string((i + 1) % 500)}}}};
    const ReferenceGrammar ring_grammar(gemma4::json_schema_to_gbnf(ring));
    CHECK(ring_grammar.matches("[[[[]]]]"));
    CHECK_FALSE(ring_grammar.matches("[[1]]"));

    json value = 1;
    for (int i = 0; i < 100; ++i) value = json::array({value});
    CHECK(schema_error_message(json{{"const", value}}) == "json schema: /const: a value nested deeper than 64 levels");

    const std::string groups = std::string(100, '(') + "a" + std::string(100, ')');
    CHECK(schema_error_message(json{{"type", "string"}, {"pattern", groups}}) ==
          "json schema: /pattern: unsupported regular expression " + json(groups).dump().substr(0, 81) + "...\": groups nested deeper than 64 (at character 66)");

    CHECK(text_schema_error(R"({"type":"string","maxLength":20000})") ==
          R"(json schema: /maxLength: "maxLength" 20000 is above the limit of 10000 (JsonSchemaOptions::max_repetition))");

    json big_enum = json::array();
    for (int i = 0; i < 1100; ++i) big_enum.push_back(std::string(1000, 'a') + std::to_string(i));
    const std::string message = schema_error_message(json{{"enum", big_enum}});
    CHECK(message.rfind("json schema: top level: the grammar would be ", 0) == 0);
    CHECK(message.find("bytes, more than the limit of 1048576 (JsonSchemaOptions::max_grammar_bytes)") != std::string::npos);

    // Values nested far deeper than any limit are refused before anything recurses into them
    // (parsed, not built: copying such a value would recurse in nlohmann::json itself).
    const std::string deep_value = std::string(100000, '[') + std::string(100000, ']');
    CHECK(text_schema_error(R"({"enum":[1,)" + deep_value + "]}") == "json schema: /enum: a value nested deeper than 64 levels");
    CHECK(text_schema_error(R"({"enum":[1,2],"const":)" + deep_value + "}") == "json schema: /const: a value nested deeper than 64 levels");

    // A long key is cut in pointers, and is not copied for every rule under it.
    const std::string long_key(100000, 'k');
    json wide = {{"type", "object"}, {"properties", json::object()}};
    for (int i = 0; i < 2000; ++i) wide["properties"]["p" + std::to_string(i)] = {{"type", "integer"}};
    wide["properties"]["q"] = {{"not", true}};
    const json holder = {{"type", "object"}, {"properties", {{long_key, wide}}}};
    CHECK(schema_error_message(holder) == "json schema: /properties/" + std::string(64, 'k') + ".../properties/q: unsupported keyword \"not\"");
    wide["properties"].erase("q");
    CHECK_NOTHROW(gemma4::json_schema_to_gbnf(json{{"type", "object"}, {"properties", {{long_key, wide}}}}));

    // A class of many members is read in one pass.
    std::string members;
    for (char32_t c = 0x4E00; c < 0x4E00 + 20000; c += 2)  // three-byte UTF-8
        members += {static_cast<char>(0xE0 | (c >> 12)), static_cast<char>(0x80 | ((c >> 6) & 0x3F)), static_cast<char>(0x80 | (c & 0x3F))};
    CHECK_NOTHROW(gemma4::json_schema_to_gbnf(json{{"type", "string"}, {"pattern", "^[" + members + "]$"}}));

    JsonSchemaOptions small;
    small.max_depth = 2;
    CHECK(text_schema_error(R"({"type":"array","items":{"type":"array","items":{"type":"array"}}})") == "(no error)");
    CHECK(schema_error_message(json::parse(R"({"type":"array","items":{"type":"array","items":{"type":"array","items":{}}}})"), small) ==
          "json schema: /items/items/items: schemas nested deeper than 2 levels");
}

TEST_CASE("deeply nested parts of a grammar stay within the parser's nesting limit", "[grammar][json_schema]") {
    // (a(a(...|b)|b)|b): a choice in a sequence in a choice, 60 deep, which would print as 120
    // nested parentheses (the GBNF parser takes 200); parts move to rules of their own instead.
    std::string group;
    for (int i = 0; i < 60; ++i) group = "(a" + group + "|b)";
    const std::string grammar = gemma4::json_schema_to_gbnf(json{{"type", "string"}, {"pattern", "^" + group + "$"}});
    CHECK(grammar.find("-part ::= ") != std::string::npos);
    CHECK_NOTHROW(gemma4::parse_gbnf(grammar));
    const ReferenceGrammar reference(grammar);
    CHECK(reference.matches(R"("b")"));
    CHECK(reference.matches(R"("aaab")"));
    CHECK(reference.matches("\"" + std::string(60, 'a') + "\""));
    CHECK_FALSE(reference.matches("\"" + std::string(61, 'a') + "\""));
    CHECK_FALSE(reference.matches(R"("ba")"));
}

TEST_CASE("schemas built in code with bad strings or numbers are refused", "[grammar][json_schema]") {
    CHECK(schema_error_message(json{{"const", "\xff"}}) == "json schema: /const: a string that is not valid UTF-8");
    CHECK(schema_error_message(json{{"type", "object"}, {"properties", {{"\xfe", json::object()}}}}) ==
          "json schema: /properties/\xfe: a property name that is not valid UTF-8");
    CHECK(schema_error_message(json{{"type", "string"}, {"pattern", "a\xc0"}}) == "json schema: /pattern: \"pattern\" is not valid UTF-8");
    CHECK(schema_error_message(json{{"const", std::nan("")}}) == "json schema: /const: a number that is not finite");
    CHECK(schema_error_message(json{{"type", "integer"}, {"maximum", std::numeric_limits<double>::infinity()}}) ==
          "json schema: /maximum: \"maximum\" must be finite");
}

TEST_CASE("random schemas compile to a parseable grammar or a GrammarError", "[grammar][json_schema]") {
    // Schema-shaped values assembled from the keywords, some valid, most not: nothing but a
    // GrammarError may escape, and every grammar must parse.
    const std::vector<std::string> keys = {"type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
                                           "maxItems", "minLength", "maxLength", "pattern", "format", "enum", "const", "anyOf",
                                           "oneOf", "allOf", "$ref", "minimum", "maximum", "exclusiveMinimum", "$defs", "description"};
    const std::vector<json> leaves = {"string", "integer", "object", "array", "#", "#/$defs/a", "^a+$", "date", 0, 3, -2, 2.5, true,
                                      false, nullptr, json::array({"a", "b"}), json::array({"integer", "null"}), json::object()};
    std::mt19937 rng(7);
    std::function<json(int)> make = [&](int depth) -> json {
        const int pick = std::uniform_int_distribution<int>(0, 9)(rng);
        if (depth > 3 || pick < 3) return leaves[std::uniform_int_distribution<std::size_t>(0, leaves.size() - 1)(rng)];
        if (pick < 5) return json::array({make(depth + 1), make(depth + 1)});
        json object = json::object();
        for (int i = std::uniform_int_distribution<int>(1, 3)(rng); i > 0; --i)
            object[keys[std::uniform_int_distribution<std::size_t>(0, keys.size() - 1)(rng)]] = make(depth + 1);
        return object;
    };
    int compiled = 0;
    for (int i = 0; i < 3000; ++i) {
        const json schema = make(0);
        INFO("schema: " << schema.dump());
        try {
            const std::string grammar = gemma4::json_schema_to_gbnf(schema);
            CHECK_NOTHROW(gemma4::parse_gbnf(grammar));
            ++compiled;
        } catch (const gemma4::GrammarError&) {
        }
    }
    CHECK(compiled > 100);
}
