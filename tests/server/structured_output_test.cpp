// `gemma4 serve` end to end: response_format json_object and json_schema (chat and completions,
// streamed or not), llama-server's `grammar` and `json_schema` fields, the 400s for a schema or
// grammar that cannot be compiled (naming the field and the keyword) before any token.
#include <catch2/catch.hpp>

#include "server_process.hpp"
#include "support/skip.hpp"

using namespace gemma4::test;
using nlohmann::json;

namespace structured_e2e {

const json kPersonSchema = json::parse(R"({
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 16},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3}
    },
    "required": ["name", "age", "role"],
    "additionalProperties": false
})");

/// Checks `v` against kPersonSchema by hand (independently of the compiler).
void check_person(const json& v) {
    REQUIRE(v.is_object());
    for (const auto& [key, value] : v.items()) CHECK((key == "name" || key == "age" || key == "role" || key == "tags"));
    REQUIRE(v.contains("name"));
    REQUIRE(v.contains("age"));
    REQUIRE(v.contains("role"));
    const std::string name = v["name"];
    CHECK(!name.empty());
    CHECK(v["age"].is_number_integer());
    CHECK(v["age"].get<int>() >= 0);
    CHECK(v["age"].get<int>() <= 150);
    CHECK((v["role"] == "admin" || v["role"] == "user" || v["role"] == "guest"));
    if (v.contains("tags")) {
        REQUIRE(v["tags"].is_array());
        CHECK(v["tags"].size() <= 3);
        for (const auto& t : v["tags"]) CHECK(t.is_string());
    }
}

json post(int port, const std::string& path, const json& body) {
    const auto r = http(port, "POST", path, body.dump());
    INFO(body.dump() << " -> " << r.body);
    REQUIRE(r.status == 200);
    return r.json();
}

std::string streamed_chat_content(int port, json body) {
    body["stream"] = true;
    const auto r = http(port, "POST", "/v1/chat/completions", body.dump());
    REQUIRE(r.status == 200);
    const auto events = sse_data(r.body);
    REQUIRE(events.back() == "[DONE]");
    std::string text;
    for (std::size_t i = 0; i + 1 < events.size(); ++i) {
        const json delta = json::parse(events[i])["choices"][0]["delta"];
        if (delta.contains("content") && delta["content"].is_string()) text += delta["content"].get<std::string>();
    }
    return text;
}

}  // namespace structured_e2e

TEST_CASE("serve: response_format, grammar and json_schema constrain every reply, and bad ones are 400s", "[server][e2e][constraint]") {
#ifndef GEMMA4_HAVE_SERVE
    GEMMA4_SKIP("gemma4 was built without cpp-httplib (no serve command)");
#endif
    using namespace structured_e2e;
    ServerProcess server({}, "structured");
    const int port = server.port();
    INFO(server.log());
    const json messages = {{{"role", "user"}, {"content", "Describe a user as JSON."}}};
    const json schema_format = {{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"schema", kPersonSchema}, {"strict", true}}}};

    for (const int seed : {1, 2, 3, 4}) {
        const json body = {{"messages", messages}, {"max_tokens", 200}, {"temperature", 1.0}, {"seed", seed}, {"response_format", schema_format}};
        const json reply = post(port, "/v1/chat/completions", body);
        CHECK(reply["choices"][0]["finish_reason"] == "stop");
        check_person(json::parse(reply["choices"][0]["message"]["content"].get<std::string>()));
        check_person(json::parse(streamed_chat_content(port, body)));
    }
    const json any_object = post(port, "/v1/chat/completions",
                                 {{"messages", messages}, {"max_tokens", 200}, {"seed", 9}, {"response_format", {{"type", "json_object"}}}});
    // Any object: its strings are unbounded, so a random model may run to max_tokens inside one.
    const std::string object_text = any_object["choices"][0]["message"]["content"];
    if (any_object["choices"][0]["finish_reason"] == "stop") CHECK(json::parse(object_text).is_object());
    else CHECK(object_text.rfind('{', 0) == 0);

    // Completions: response_format, and llama-server's json_schema and grammar fields.
    const json completion = post(port, "/v1/completions", {{"prompt", "A user:"}, {"max_tokens", 200}, {"seed", 5}, {"json_schema", kPersonSchema}});
    check_person(json::parse(completion["choices"][0]["text"].get<std::string>()));
    const json formatted = post(port, "/v1/completions",
                                {{"prompt", "A user:"}, {"max_tokens", 200}, {"seed", 6}, {"response_format", schema_format}});
    check_person(json::parse(formatted["choices"][0]["text"].get<std::string>()));
    const json yes_no = post(port, "/v1/completions", {{"prompt", "Well?"}, {"max_tokens", 20}, {"grammar", "root ::= \"yes\" | \"no\""}});
    const std::string answer = yes_no["choices"][0]["text"];
    CHECK((answer == "yes" || answer == "no"));

    // Bad schemas and grammars: 400s that name the field and the problem, and the server goes on.
    json bad_schema = schema_format;
    bad_schema["json_schema"]["schema"]["properties"]["age"]["patternProperties"] = json::object();
    require_bad_param(http(port, "POST", "/v1/chat/completions", json{{"messages", messages}, {"response_format", bad_schema}}.dump()),
                      "response_format.json_schema.schema", "patternProperties");
    require_bad_param(http(port, "POST", "/v1/completions", json{{"prompt", "x"}, {"grammar", "root ::= nowhere"}}.dump()), "grammar",
                      "undefined rule \"nowhere\"");
    require_bad_param(http(port, "POST", "/v1/completions", json{{"prompt", "x"}, {"grammar", "root ::= <|nope|>"}}.dump()), "grammar",
                      "not a special token");
    require_bad_param(http(port, "POST", "/v1/chat/completions", json{{"messages", messages}, {"response_format", {{"type", "xml"}}}}.dump()),
                      "response_format.type", "unknown type 'xml'");
    require_bad_param(http(port, "POST", "/v1/completions",
                           json{{"prompt", "x"}, {"grammar", "root ::= \"a\""}, {"json_schema", {{"type", "string"}}}}.dump()),
                      "response_format", "give one of");
    require_bad_param(http(port, "POST", "/v1/completions", json{{"prompt", "x"}, {"grammar", "root ::= \"a\""}, {"ignore_eos", true}}.dump()),
                      "grammar", "ignore_eos");
    CHECK(post(port, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 3}})["choices"][0]["text"].is_string());
}

namespace structured_e2e {

const json kWeatherTool = json::parse(R"({"type": "function", "function": {"name": "get_weather", "description": "Weather",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 20},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "unit": {"enum": ["celsius", "fahrenheit"]}},
      "required": ["city", "days"], "additionalProperties": false}}})");

const json kTimeTool = json::parse(R"({"type": "function", "function": {"name": "get_time", "description": "Time",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 10}}, "required": ["zone"]}}})");

/// A call's arguments against its tool's schema, by hand.
void check_call(const json& call) {
    REQUIRE(call["type"] == "function");
    const std::string name = call["function"]["name"];
    const json args = json::parse(call["function"]["arguments"].get<std::string>());
    REQUIRE(args.is_object());
    if (name == "get_weather") {
        for (const auto& [key, value] : args.items()) CHECK((key == "city" || key == "days" || key == "unit"));
        REQUIRE(args.contains("city"));
        REQUIRE(args.contains("days"));
        CHECK(args["city"].is_string());
        CHECK(args["days"].get<int>() >= 1);
        CHECK(args["days"].get<int>() <= 14);
        if (args.contains("unit")) CHECK((args["unit"] == "celsius" || args["unit"] == "fahrenheit"));
    } else {
        REQUIRE(name == "get_time");
        REQUIRE(args.size() == 1);
        CHECK(args["zone"].is_string());
    }
}

}  // namespace structured_e2e

TEST_CASE("serve: forced and strict tool calls always come, in Gemma's syntax, with arguments that validate", "[server][e2e][constraint]") {
#ifndef GEMMA4_HAVE_SERVE
    GEMMA4_SKIP("gemma4 was built without cpp-httplib (no serve command)");
#endif
    using namespace structured_e2e;
    ServerProcess server({}, "structured_tools");
    const int port = server.port();
    INFO(server.log());
    const json messages = {{{"role", "user"}, {"content", "What is the weather in Paris?"}}};
    const json tools = {kWeatherTool, kTimeTool};
    for (const int seed : {1, 2, 3}) {
        const json required = post(port, "/v1/chat/completions",
                                   {{"messages", messages}, {"tools", tools}, {"tool_choice", "required"}, {"max_tokens", 300},
                                    {"temperature", 1.0}, {"seed", seed}, {"parallel_tool_calls", seed != 1}});
        // With parallel calls a random model may go on calling until max_tokens; the calls it
        // completed are there either way.
        const json calls_made = required["choices"][0]["message"].value("tool_calls", json::array());
        if (seed == 1) {
            CHECK(required["choices"][0]["finish_reason"] == "tool_calls");
            CHECK(calls_made.size() == 1);
        }
        for (const auto& call : calls_made) check_call(call);

        const json named = post(port, "/v1/chat/completions",
                                {{"messages", messages}, {"tools", tools}, {"max_tokens", 200}, {"temperature", 1.0}, {"seed", seed},
                                 {"parallel_tool_calls", false},
                                 {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}});
        const json calls = named["choices"][0]["message"]["tool_calls"];
        REQUIRE(calls.size() == 1);
        CHECK(calls[0]["function"]["name"] == "get_time");
        check_call(calls[0]);
    }
    json strict_tools = tools;
    strict_tools[0]["function"]["strict"] = true;
    const json strict = post(port, "/v1/chat/completions",
                             {{"messages", messages}, {"tools", strict_tools}, {"max_tokens", 60}, {"temperature", 1.0}, {"seed", 4}});
    for (const auto& call : strict["choices"][0]["message"].value("tool_calls", json::array())) check_call(call);

    json bad_tool = kWeatherTool;
    bad_tool["function"]["parameters"]["properties"]["contact"] = {{"type", "string"}, {"format", "email"}};
    require_bad_param(http(port, "POST", "/v1/chat/completions",
                           json{{"messages", messages}, {"tools", {bad_tool}}, {"tool_choice", "required"}}.dump()),
                      "tools[0].function.parameters", "email");
    require_bad_param(http(port, "POST", "/v1/chat/completions",
                           json{{"messages", messages}, {"tools", tools}, {"tool_choice", "required"}, {"response_format", {{"type", "json_object"}}}}.dump()),
                      "response_format", "cannot be combined");
}
