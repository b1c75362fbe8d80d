// tool_choice (parsed, checked, enforced by prefilling the call's opening) and tool calls streamed
// as OpenAI streams them: a first delta with the name, then fragments of the JSON arguments that
// concatenate exactly to the non-streamed `arguments`.
#include <catch2/catch.hpp>

#include "server/chat_request.hpp"
#include "server/openai_encode.hpp"
#include "server/reply_parser.hpp"

#include <gemma4/generate/chat.hpp>

#include <map>

using namespace gemma4::server;
using nlohmann::json;

namespace {

const std::string kQ = "<|\"|>";

json weather_request(const json& tool_choice) {
    json body = json::parse(R"({"messages":[{"role":"user","content":"Weather in Paris?"}],
        "tools":[{"type":"function","function":{"name":"weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},
                 {"type":"function","function":{"name":"time","parameters":{"type":"object","properties":{}}}}]})");
    if (!tool_choice.is_null()) body["tool_choice"] = tool_choice;
    return body;
}

/// What a client accumulates from a stream's tool_calls deltas.
struct StreamedCall {
    std::string id, name, arguments;
    int deltas_with_arguments = 0;
};

/// Feeds `reply` in pieces of `piece` bytes through the request's parser and the stream's delta
/// encoder; checks the shape of every tool_calls delta and accumulates the calls by index.
std::vector<StreamedCall> stream_calls(const ChatRequest& r, const std::string& reply, std::size_t piece, std::string* content = nullptr) {
    std::vector<ReplyEvent> events;
    ReplyParser parser = reply_parser_for(r, &events);
    ChatDeltas deltas;
    std::map<int, StreamedCall> calls;
    auto take = [&](std::vector<ReplyEvent> got) {
        for (const auto& e : got) {
            const json d = deltas.delta_for(e);
            if (d.is_null()) continue;
            if (d.contains("content") && content) *content += d["content"].get<std::string>();
            if (!d.contains("tool_calls")) continue;
            REQUIRE(d["tool_calls"].size() == 1);
            const json& c = d["tool_calls"][0];
            const int index = c["index"];
            StreamedCall& call = calls[index];
            if (c.contains("id")) {  // the first delta of a call: id, type, name, empty arguments
                CHECK(call.id.empty());
                call.id = c["id"];
                CHECK(c["type"] == "function");
                call.name = c["function"]["name"];
                CHECK(c["function"]["arguments"] == "");
            } else {
                REQUIRE(!call.id.empty());  // fragments only after the opening delta
                CHECK_FALSE(c["function"].contains("name"));
                const std::string fragment = c["function"]["arguments"];
                CHECK(!fragment.empty());
                call.arguments += fragment;
                ++call.deltas_with_arguments;
            }
        }
    };
    take(std::move(events));
    for (std::size_t pos = 0; pos < reply.size(); pos += piece) take(parser.feed(std::string_view(reply).substr(pos, piece)));
    take(parser.finish());
    std::vector<StreamedCall> out;
    for (auto& [index, call] : calls) {
        CHECK(index == static_cast<int>(out.size()));
        out.push_back(call);
    }
    return out;
}

}  // namespace

TEST_CASE("tool_choice: none, auto, required and a named function are parsed, and errors name the field", "[server][request][tool_choice]") {
    CHECK(parse_chat_request(weather_request(nullptr)).tool_choice == ToolChoice::Auto);
    CHECK(parse_chat_request(weather_request("auto")).tool_choice == ToolChoice::Auto);
    CHECK(parse_chat_request(weather_request("required")).tool_choice == ToolChoice::Required);
    const ChatRequest none = parse_chat_request(weather_request("none"));
    CHECK(none.tool_choice == ToolChoice::None);
    CHECK(none.tools.empty());
    const ChatRequest named = parse_chat_request(weather_request({{"type", "function"}, {"function", {{"name", "time"}}}}));
    CHECK(named.tool_choice == ToolChoice::Function);
    CHECK(named.tool_choice_name == "time");
    // Harmless without tools: nothing to offer, nothing to force.
    CHECK(parse_chat_request(json::parse(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"none"})")).tools.empty());
    CHECK(parse_chat_request(json::parse(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"auto"})")).tool_choice == ToolChoice::Auto);

    json no_tools = weather_request(nullptr);
    no_tools.erase("tools");
    const std::vector<std::pair<json, std::string>> bad = {
        {weather_request("sometimes"), "tool_choice"},
        {weather_request(5), "tool_choice"},
        {weather_request(json::array({"required"})), "tool_choice"},
        {weather_request({{"type", "retrieval"}, {"function", {{"name", "time"}}}}), "tool_choice.type"},
        {weather_request({{"function", {{"name", "time"}}}}), "tool_choice.type"},
        {weather_request({{"type", "function"}}), "tool_choice.function"},
        {weather_request({{"type", "function"}, {"function", {{"name", 3}}}}), "tool_choice.function.name"},
        {weather_request({{"type", "function"}, {"function", json::object()}}), "tool_choice.function.name"},
        {weather_request({{"type", "function"}, {"function", {{"name", "stocks"}}}}), "tool_choice.function.name"},
        {[&] { json b = no_tools; b["tool_choice"] = "required"; return b; }(), "tool_choice"},
        {[&] { json b = no_tools; b["tool_choice"] = {{"type", "function"}, {"function", {{"name", "weather"}}}}; return b; }(), "tool_choice"},
    };
    for (const auto& [body, param] : bad) {
        INFO(body.dump());
        try {
            parse_chat_request(body);
            FAIL("accepted");
        } catch (const ApiError& e) {
            CHECK(e.status == 400);
            CHECK(e.param == param);
            CHECK(std::string(e.what()).find(param) != std::string::npos);
        }
    }
}

TEST_CASE("tool_choice: required and named prefill the call's opening after the generation prompt, none drops the tools",
          "[server][render][tool_choice]") {
    const ChatRequest automatic = parse_chat_request(weather_request("auto"));
    const std::string base = render_prompt(automatic);
    CHECK(base.ends_with("<|turn>model\n" + std::string(gemma4::kEmptyThought)));
    CHECK(base.find("<|tool>declaration:weather{") != std::string::npos);
    CHECK(render_prompt(parse_chat_request(weather_request(nullptr))) == base);
    CHECK(render_prompt(parse_chat_request(weather_request("required"))) == base + "<|tool_call>");
    CHECK(render_prompt(parse_chat_request(weather_request({{"type", "function"}, {"function", {{"name", "weather"}}}}))) ==
          base + "<|tool_call>call:weather{");
    const std::string none = render_prompt(parse_chat_request(weather_request("none")));
    CHECK(none.find("<|tool>") == std::string::npos);
    CHECK(none == "<bos><|turn>user\nWeather in Paris?<turn|>\n<|turn>model\n" + std::string(gemma4::kEmptyThought));
    // With thinking on the forced call still follows the generation prompt directly.
    json thinking = weather_request("required");
    thinking["reasoning_effort"] = "high";
    CHECK(render_prompt(parse_chat_request(thinking)).ends_with("<|turn>model\n<|tool_call>"));
}

TEST_CASE("tool_choice: the reply is parsed after the prefill, so a forced call parses like a spontaneous one", "[server][reply][tool_choice]") {
    const ChatRequest named = parse_chat_request(weather_request({{"type", "function"}, {"function", {{"name", "weather"}}}}));
    ParsedReply r = parse_chat_reply(named, "city:" + kQ + "Paris" + kQ + "}<tool_call|><|tool_response>");
    REQUIRE(r.tool_calls.size() == 1);
    CHECK(r.tool_calls[0].name == "weather");
    CHECK(r.tool_calls[0].arguments == json({{"city", "Paris"}}));
    CHECK(r.tool_calls[0].arguments_text == R"({"city":"Paris"})");
    CHECK(r.content.empty());
    // The same text as a whole reply of an "auto" request parses to the same call.
    const ParsedReply spontaneous =
        parse_chat_reply(parse_chat_request(weather_request("auto")), reply_prefill(named) + "city:" + kQ + "Paris" + kQ + "}<tool_call|>");
    REQUIRE(spontaneous.tool_calls.size() == 1);
    CHECK(spontaneous.tool_calls[0].arguments_text == r.tool_calls[0].arguments_text);

    const ChatRequest required = parse_chat_request(weather_request("required"));
    r = parse_chat_reply(required, "call:time{}<tool_call|>");
    REQUIRE(r.tool_calls.size() == 1);
    CHECK(r.tool_calls[0].name == "time");
    CHECK(r.tool_calls[0].arguments_text == "{}");
    // A forced call the model never closes (max_tokens) is no call: its text is the content.
    r = parse_chat_reply(named, "city:" + kQ + "Par");
    CHECK(r.tool_calls.empty());
    CHECK(r.content == "<|tool_call>call:weather{city:" + kQ + "Par");

    // "none": the call syntax is plain text, and no declaration was offered.
    const ChatRequest none = parse_chat_request(weather_request("none"));
    r = parse_chat_reply(none, "<|tool_call>call:weather{}<tool_call|>");
    CHECK(r.tool_calls.empty());
    CHECK(r.content == "<|tool_call>call:weather{}<tool_call|>");

    // Streamed: a named call's first delta (its name) is ready before the model wrote anything.
    std::vector<ReplyEvent> events;
    (void)reply_parser_for(named, &events);
    REQUIRE(!events.empty());
    CHECK(events[0].kind == ReplyEvent::ToolCallBegin);
    CHECK(events[0].call.name == "weather");
    std::vector<ReplyEvent> none_events;
    (void)reply_parser_for(parse_chat_request(weather_request("auto")), &none_events);
    CHECK(none_events.empty());
}

TEST_CASE("arguments keep the order the model wrote them in, as JSON text", "[server][tools]") {
    const auto call = parse_tool_call("call:f{zeta:1,alpha:" + kQ + "a\"b\\c\n" + kQ + ",n:{y:[1,2.5,None,true],x:word}}");
    REQUIRE(call);
    CHECK(call->arguments_text == R"({"zeta":1,"alpha":"a\"b\\c\n","n":{"y":[1,2.5,null,true],"x":"word"}})");
    CHECK(json::parse(call->arguments_text) == call->arguments);
}

TEST_CASE("streamed argument fragments concatenate exactly to the non-streamed arguments", "[server][reply][stream]") {
    const std::vector<std::string> replies = {
        // nested objects and arrays
        "Sure. <|tool_call>call:plan{steps:[{name:" + kQ + "a" + kQ + ",n:1},{name:" + kQ + "b" + kQ + ",n:-2.5e3}],opts:{deep:{x:None,y:false}}}<tool_call|>",
        // strings with JSON escapes, control characters, a backslash, non-ASCII text and an emoji
        "<|tool_call>call:say{text:" + kQ + "He said \"hi\"\\n\tand left\x01 — caf\xC3\xA9 \xF0\x9F\x98\x80 <b>" + kQ + ",lang:" + kQ + "fr" + kQ +
            "}<tool_call|>",
        // several calls, a spontaneous one after text, keys not sorted, a JSON-quoted key, spaces
        "<|tool_call>call:weather{city:" + kQ + "Paris" + kQ + "}<tool_call|><|tool_call>call:time{ \"zone\" : " + kQ + "CET" + kQ +
            " , b : 3 }<tool_call|> and <|tool_call>call:empty{}<tool_call|>",
        // a malformed call in between stays content; the calls around it still stream
        "<|tool_call>call:a{x:1}<tool_call|><|tool_call>call:bad{x:" + kQ + "open<tool_call|><|tool_call>call:c{y:[true]}<tool_call|>",
    };
    const ChatRequest r = parse_chat_request(weather_request("auto"));
    for (const auto& reply : replies) {
        const ParsedReply whole = parse_chat_reply(r, reply);
        REQUIRE(!whole.tool_calls.empty());
        for (std::size_t piece : {1, 2, 3, 5, 7, 13, 1000}) {
            INFO(reply << " in pieces of " << piece);
            std::string content;
            const auto streamed = stream_calls(r, reply, piece, &content);
            std::vector<StreamedCall> completed;
            for (const auto& c : streamed)
                if (c.name != "bad") completed.push_back(c);
            REQUIRE(completed.size() == whole.tool_calls.size());
            for (std::size_t i = 0; i < completed.size(); ++i) {
                CHECK(completed[i].name == whole.tool_calls[i].name);
                const json non_streamed = tool_call_json(whole.tool_calls[i], "call_x");
                CHECK(completed[i].arguments == non_streamed["function"]["arguments"].get<std::string>());
                CHECK(json::parse(completed[i].arguments) == whole.tool_calls[i].arguments);
            }
            CHECK(content == whole.content);
        }
    }
}

TEST_CASE("a long call streams its arguments in many deltas as they are generated", "[server][reply][stream]") {
    std::string story;
    for (int i = 0; i < 40; ++i) story += "line " + std::to_string(i) + " of the story, \"quoted\"\n";
    const std::string reply = "<|tool_call>call:write{title:" + kQ + "A tale" + kQ + ",body:" + kQ + story + kQ + ",pages:12}<tool_call|>";
    const ChatRequest r = parse_chat_request(weather_request("auto"));
    const auto streamed = stream_calls(r, reply, 4);  // about a token at a time
    REQUIRE(streamed.size() == 1);
    CHECK(streamed[0].deltas_with_arguments > 100);
    CHECK(streamed[0].arguments == parse_chat_reply(r, reply).tool_calls[0].arguments_text);

    // Fragments are sent before the call is closed: after the first half of the body, part of
    // the story is already out.
    ReplyParser parser(true);
    std::string sent;
    for (const auto& e : parser.feed(std::string_view(reply).substr(0, reply.size() / 2)))
        if (e.kind == ReplyEvent::ToolCallArguments) sent += e.text;
    CHECK(sent.starts_with(R"({"title":"A tale","body":"line 0 of the story, \"quoted\"\nline 1)"));
    // Nothing uncertain is sent: a number is held until its end, a half-read quote marker too.
    ReplyParser numbers(true);
    std::string partial;
    for (const auto& e : numbers.feed("<|tool_call>call:f{a:12")) partial += e.text;
    CHECK(partial == R"({"a":)");
    ReplyParser quotes(true);
    partial.clear();
    for (const auto& e : quotes.feed("<|tool_call>call:f{a:" + kQ + "xy<|\"")) partial += e.text;
    CHECK(partial == R"({"a":"xy)");
}
