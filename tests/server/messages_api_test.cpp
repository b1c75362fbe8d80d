// Anthropic's Messages API and OpenAI's Responses API, their pure parts: each request maps to the
// chat request that renders the same prompt as its chat-endpoint twin, bad fields are 400s naming
// them as each API spells them, and the encoders' streams add up to their non-streamed bodies.
#include <catch2/catch.hpp>

#include "server/anthropic_encode.hpp"
#include "server/anthropic_request.hpp"
#include "server/auth.hpp"
#include "server/chat_request.hpp"
#include "server/reply_blocks.hpp"
#include "server/responses_api.hpp"

using namespace gemma4::server;
using nlohmann::json;

namespace {

const std::string quote(kQuote);

/// The param of the 400 that parsing `body` throws ("" when it is accepted).
template <class Parse>
std::string refused_param(const std::string& body, Parse parse) {
    try {
        parse(json::parse(body));
    } catch (const ApiError& e) {
        CHECK(e.status == 400);
        CHECK(std::string(e.what()).rfind(e.param + ": ", 0) == 0);  // the message names it too
        return e.param;
    }
    return "";
}

/// The events of an SSE body made of `event: TYPE\ndata: JSON` pairs, checking that each event's
/// name is its payload's type.
std::vector<json> typed_events(const std::string& sse) {
    std::vector<json> out;
    std::size_t pos = 0;
    while (pos < sse.size()) {
        const auto end = sse.find("\n\n", pos);
        REQUIRE(end != std::string::npos);
        const std::string event = sse.substr(pos, end - pos);
        REQUIRE(event.rfind("event: ", 0) == 0);
        const auto nl = event.find('\n');
        REQUIRE(event.compare(nl + 1, 6, "data: ") == 0);
        out.push_back(json::parse(event.substr(nl + 7)));
        CHECK(out.back()["type"] == event.substr(7, nl - 7));
        pos = end + 2;
    }
    return out;
}

/// A reply with a thought, text, and a call, as the parser reports it fed in pieces of `size`.
std::vector<ReplyEvent> reply_events(std::size_t size) {
    const std::string reply = "<|channel>thought\nhmm<channel|>Let me look.<|tool_call>call:get_weather{city:" + quote + "Paris" + quote +
                              ",days:2}<tool_call|><|tool_response>";
    ReplyParser parser(true);
    std::vector<ReplyEvent> events;
    for (std::size_t pos = 0; pos < reply.size(); pos += size)
        for (auto& e : parser.feed(std::string_view(reply).substr(pos, size))) events.push_back(std::move(e));
    for (auto& e : parser.finish()) events.push_back(std::move(e));
    return events;
}

}  // namespace

TEST_CASE("anthropic: a conversation with system, images, tool_use and tool_result renders as its chat twin", "[server][anthropic][request]") {
    const json anthropic = json::parse(R"({"model":"m","max_tokens":50,"system":[{"type":"text","text":"Be brief."}],
        "tools":[{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],
        "messages":[
          {"role":"user","content":[{"type":"text","text":"Weather in Paris?"},
            {"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]},
          {"role":"assistant","content":[{"type":"thinking","thinking":"use the tool","signature":"x"},
            {"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},
          {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"sunny"}]}]}]})");
    const json chat = json::parse(R"({"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather",
        "parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],
        "messages":[{"role":"system","content":"Be brief."},
          {"role":"user","content":[{"type":"text","text":"Weather in Paris?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]},
          {"role":"assistant","reasoning_content":"use the tool","tool_calls":[{"id":"toolu_1","function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},
          {"role":"tool","tool_call_id":"toolu_1","content":"sunny"}]})");
    const AnthropicRequest a = parse_anthropic_request(anthropic);
    const ChatRequest c = parse_chat_request(chat);
    CHECK(render_prompt(a) == render_prompt(c));
    CHECK(render_prompt(a).find("<|tool_response>response:get_weather{value:" + quote + "sunny" + quote + "}<tool_response|>") != std::string::npos);
    REQUIRE(a.chat.media.size() == 1);
    CHECK(a.chat.media[0].param == "messages[0].content[1].source");
    CHECK(a.chat.sampling.max_tokens == 50);
    CHECK(a.chat.sampling.model == "m");

    // A string system and string contents: as chat's; stop_sequences, temperature, top_p, top_k.
    const AnthropicRequest plain = parse_anthropic_request(json::parse(R"({"max_tokens":5,"system":"S","temperature":0.5,"top_p":0.9,
        "top_k":7,"stop_sequences":["x","yz"],"metadata":{"user_id":"u"},"stream":true,
        "messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]})"));
    CHECK(render_prompt(plain) == render_prompt(parse_chat_request(json::parse(
                                      R"({"messages":[{"role":"system","content":"S"},{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]})"))));
    CHECK(plain.chat.sampling.stop == std::vector<std::string>{"x", "yz"});
    CHECK(plain.chat.sampling.temperature == 0.5);
    CHECK(plain.chat.sampling.top_p == 0.9);
    CHECK(plain.chat.sampling.top_k == 7);
    CHECK(plain.chat.sampling.stream);
    CHECK(plain.prefill.empty());
}

TEST_CASE("anthropic: a last assistant message is a prefill the reply continues", "[server][anthropic][request]") {
    const AnthropicRequest a = parse_anthropic_request(
        json::parse(R"({"max_tokens":5,"messages":[{"role":"user","content":"Count"},{"role":"assistant","content":"One, two, "}]})"));
    CHECK(a.prefill == "One, two,");
    CHECK(render_prompt(a) == render_prompt(parse_chat_request(json::parse(R"({"messages":[{"role":"user","content":"Count"}]})"))) + "One, two,");
}

TEST_CASE("anthropic: tool_choice auto, any, tool and none map to chat's, thinking turns the thought channel on", "[server][anthropic][request]") {
    const std::string tools = R"("tools":[{"name":"f","input_schema":{"type":"object"}},{"name":"g","input_schema":{"type":"object"}}])";
    const auto parse = [&](const std::string& rest) {
        return parse_anthropic_request(json::parse(R"({"max_tokens":2000,"messages":[{"role":"user","content":"x"}],)" + tools + rest + "}"));
    };
    CHECK(parse("").chat.tool_choice == ToolChoice::Auto);
    CHECK(parse(R"(,"tool_choice":{"type":"auto"})").chat.tool_choice == ToolChoice::Auto);
    const AnthropicRequest any = parse(R"(,"tool_choice":{"type":"any","disable_parallel_tool_use":true})");
    CHECK(any.chat.tool_choice == ToolChoice::Required);
    CHECK_FALSE(any.parallel_tool_calls);
    CHECK(reply_prefill(any.chat) == "<|tool_call>");
    const AnthropicRequest named = parse(R"(,"tool_choice":{"type":"tool","name":"g"})");
    CHECK(named.chat.tool_choice == ToolChoice::Function);
    CHECK(named.parallel_tool_calls);
    CHECK(render_prompt(named).ends_with("<|tool_call>call:g{"));
    const AnthropicRequest none = parse(R"(,"tool_choice":{"type":"none"})");
    CHECK(none.chat.tools.empty());
    CHECK(render_prompt(none).find("<|tool>") == std::string::npos);

    // The forced call's grammar comes from input_schema, compiled as the chat endpoint's.
    const std::string body = R"({"max_tokens":50,"messages":[{"role":"user","content":"x"}],
        "tools":[{"name":"f","input_schema":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}}],"tool_choice":{"type":"any"}})";
    const auto grammar = anthropic_tool_grammar(parse_anthropic_request(json::parse(body)), nlohmann::ordered_json::parse(body));
    REQUIRE(grammar);
    CHECK(grammar->gbnf.find("\"f\"") != std::string::npos);
    const std::string bad_schema = R"({"max_tokens":50,"messages":[{"role":"user","content":"x"}],
        "tools":[{"name":"f","input_schema":{"type":"object","properties":{"n":{"type":"integer","multipleOf":3}}}}],"tool_choice":{"type":"any"}})";
    try {
        anthropic_tool_grammar(parse_anthropic_request(json::parse(bad_schema)), nlohmann::ordered_json::parse(bad_schema));
        FAIL("accepted");
    } catch (const ApiError& e) {
        CHECK(e.param == "tools[0].input_schema");
    }

    CHECK_FALSE(parse("").chat.thinking);
    CHECK(parse(R"(,"thinking":{"type":"enabled","budget_tokens":1024})").chat.thinking);
    CHECK_FALSE(parse(R"(,"thinking":{"type":"disabled"})").chat.thinking);
    CHECK(render_prompt(parse(R"(,"thinking":{"type":"enabled","budget_tokens":1024})")).find("<|think|>") != std::string::npos);
}

TEST_CASE("anthropic: bad fields are 400s naming them, and count_tokens needs no max_tokens", "[server][anthropic][request][errors]") {
    const auto messages = [](const json& b) { return parse_anthropic_request(b); };
    const std::string user = R"("messages":[{"role":"user","content":"x"}])";
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"{" + user + "}", "max_tokens"},
        {R"({"max_tokens":0,)" + user + "}", "max_tokens"},
        {R"({"max_tokens":"5",)" + user + "}", "max_tokens"},
        {R"({"max_tokens":5})", "messages"},
        {R"({"max_tokens":5,"messages":[]})", "messages"},
        {R"({"max_tokens":5,"messages":[{"role":"system","content":"x"}]})", "messages[0].role"},
        {R"({"max_tokens":5,"messages":[{"role":"user"}]})", "messages[0].content"},
        {R"({"max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{}}]}]})", "messages[0].content[0].type"},
        {R"({"max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]}]})", "messages[0].content[0].type"},
        {R"({"max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/gif","data":"R0lG"}}]}]})",
         "messages[0].content[0].source.media_type"},
        {R"({"max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"@@"}}]}]})",
         "messages[0].content[0].source.data"},
        {R"({"max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]}]})",
         "messages[0].content[0].source.url"},
        {R"({"max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","content":"r"}]}]})", "messages[0].content[0].tool_use_id"},
        {R"({"max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":[{"type":"image"}]}]}]})",
         "messages[0].content[0].content[0].type"},
        {R"({"max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":[]}]}]})", "messages[0].content[0].input"},
        {R"({"max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]}]})", "messages[0]"},
        {R"({"max_tokens":5,"system":5,)" + user + "}", "system"},
        {R"({"max_tokens":5,"system":[{"type":"image"}],)" + user + "}", "system[0].type"},
        {R"({"max_tokens":5,"temperature":1.5,)" + user + "}", "temperature"},
        {R"({"max_tokens":5,"top_p":0,)" + user + "}", "top_p"},
        {R"({"max_tokens":5,"top_k":-1,)" + user + "}", "top_k"},
        {R"({"max_tokens":5,"stop_sequences":"x",)" + user + "}", "stop_sequences"},
        {R"({"max_tokens":5,"stop_sequences":[""],)" + user + "}", "stop_sequences[0]"},
        {R"({"max_tokens":5,"stream":"yes",)" + user + "}", "stream"},
        {R"({"max_tokens":5,"metadata":"m",)" + user + "}", "metadata"},
        {R"({"max_tokens":5,"tools":[{"type":"web_search_20250305","name":"web_search"}],)" + user + "}", "tools[0].type"},
        {R"({"max_tokens":5,"tools":[{"name":"bad name","input_schema":{}}],)" + user + "}", "tools[0].name"},
        {R"({"max_tokens":5,"tools":[{"name":"f"}],)" + user + "}", "tools[0].input_schema"},
        {R"({"max_tokens":5,"tools":[{"name":"f","input_schema":{}}],"tool_choice":"any",)" + user + "}", "tool_choice"},
        {R"({"max_tokens":5,"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"sometimes"},)" + user + "}", "tool_choice.type"},
        {R"({"max_tokens":5,"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"tool","name":"g"},)" + user + "}", "tool_choice.name"},
        {R"({"max_tokens":5,"tool_choice":{"type":"any"},)" + user + "}", "tool_choice"},
        {R"({"max_tokens":5,"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"any","disable_parallel_tool_use":1},)" + user + "}",
         "tool_choice.disable_parallel_tool_use"},
        {R"({"max_tokens":2000,"thinking":{"type":"enabled"},)" + user + "}", "thinking.budget_tokens"},
        {R"({"max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":100},)" + user + "}", "thinking.budget_tokens"},
        {R"({"max_tokens":1500,"thinking":{"type":"enabled","budget_tokens":1500},)" + user + "}", "thinking.budget_tokens"},
        {R"({"max_tokens":2000,"thinking":{"type":"sometimes"},)" + user + "}", "thinking.type"},
    };
    for (const auto& [body, param] : bad) {
        INFO(body);
        CHECK(refused_param(body, messages) == param);
    }
    const auto count = [](const json& b) { return parse_anthropic_request(b, MessagesEndpoint::CountTokens); };
    CHECK(refused_param("{" + user + "}", count).empty());
    CHECK(refused_param(R"({"thinking":{"type":"enabled","budget_tokens":1024},)" + user + "}", count).empty());
    CHECK(refused_param(R"({"temperature":3,)" + user + "}", count) == "temperature");
}

TEST_CASE("anthropic errors: Anthropic's shape and types on its routes, OpenAI's elsewhere, and x-api-key or a bearer token", "[server][anthropic][errors]") {
    const ApiError e = bad_field("max_tokens", "missing");
    const json anthropic = error_body(e, ErrorShape::Anthropic);
    CHECK(anthropic == json::parse(R"({"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: missing"}})"));
    CHECK(error_body(e, ErrorShape::OpenAI)["error"]["param"] == "max_tokens");
    CHECK(anthropic_error_body(401, "k")["error"]["type"] == "authentication_error");
    CHECK(anthropic_error_body(404, "k")["error"]["type"] == "not_found_error");
    CHECK(anthropic_error_body(413, "k")["error"]["type"] == "request_too_large");
    CHECK(anthropic_error_body(429, "k")["error"]["type"] == "rate_limit_error");
    CHECK(anthropic_error_body(500, "k")["error"]["type"] == "api_error");
    CHECK(error_shape_for_path("/v1/messages") == ErrorShape::Anthropic);
    CHECK(error_shape_for_path("/v1/messages/count_tokens") == ErrorShape::Anthropic);
    CHECK(error_shape_for_path("/v1/messagesx") == ErrorShape::OpenAI);
    CHECK(error_shape_for_path("/v1/responses") == ErrorShape::OpenAI);
    CHECK(request_key_matches("", "secret", "secret"));
    CHECK(request_key_matches("Bearer secret", "", "secret"));
    CHECK(request_key_matches("Bearer wrong", "secret", "secret"));
    CHECK_FALSE(request_key_matches("Bearer wrong", "secre", "secret"));
    CHECK_FALSE(request_key_matches("", "", "secret"));
}

TEST_CASE("reply blocks: a thought, text and a call open and close in order, whatever the piece sizes", "[server][anthropic][responses][encode]") {
    for (std::size_t size : {1, 3, 7, 1000}) {
        INFO(size);
        ReplyBlocks blocks;
        std::vector<BlockStep> steps;
        for (const ReplyEvent& e : reply_events(size))
            for (auto& s : blocks.add(e)) steps.push_back(std::move(s));
        for (auto& s : blocks.finish()) steps.push_back(std::move(s));
        std::string thinking, text, arguments;
        std::vector<std::pair<BlockStep::Kind, BlockKind>> boundaries;
        for (const BlockStep& s : steps) {
            if (s.kind != BlockStep::Delta) boundaries.push_back({s.kind, s.block});
            else (s.block == BlockKind::Thinking ? thinking : s.block == BlockKind::Text ? text : arguments) += s.text;
        }
        CHECK(boundaries == std::vector<std::pair<BlockStep::Kind, BlockKind>>{{BlockStep::Start, BlockKind::Thinking},
                                                                              {BlockStep::Stop, BlockKind::Thinking},
                                                                              {BlockStep::Start, BlockKind::Text},
                                                                              {BlockStep::Stop, BlockKind::Text},
                                                                              {BlockStep::Start, BlockKind::ToolCall},
                                                                              {BlockStep::Stop, BlockKind::ToolCall}});
        CHECK(thinking == "hmm");
        CHECK(text == "Let me look.");
        CHECK(json::parse(arguments) == json({{"city", "Paris"}, {"days", 2}}));
    }
}

TEST_CASE("anthropic encoder: the stream's events add up to the message, with stop reasons and usage", "[server][anthropic][encode]") {
    AnthropicMessage m("msg_1", "tiny", 30);
    std::string sse = m.start();
    sse += m.add(reply_events(2));
    sse += m.finish(ReplyEnd{.finish = gemma4::FinishReason::StopId, .tool_call = true, .prompt_tokens = 30, .output_tokens = 12, .cached_tokens = 10});
    const std::vector<json> events = typed_events(sse);
    REQUIRE(events.size() >= 10);
    CHECK(events.front()["type"] == "message_start");
    CHECK(events.front()["message"]["usage"]["input_tokens"] == 30);
    CHECK(events.back()["type"] == "message_stop");
    const json& delta = events[events.size() - 2];
    CHECK(delta["type"] == "message_delta");
    CHECK(delta["delta"]["stop_reason"] == "tool_use");
    CHECK(delta["usage"] == json::parse(R"({"input_tokens":20,"cache_read_input_tokens":10,"cache_creation_input_tokens":0,"output_tokens":12})"));

    // Replaying the stream's blocks as a client does gives the message's content.
    json content = json::array();
    std::map<int, std::string> partial_json;
    for (const json& e : events) {
        if (e["type"] == "content_block_start") {
            CHECK(e["index"] == content.size());
            content.push_back(e["content_block"]);
        } else if (e["type"] == "content_block_delta") {
            json& block = content[e["index"].get<std::size_t>()];
            const json& d = e["delta"];
            if (d["type"] == "text_delta") block["text"] = block["text"].get<std::string>() + d["text"].get<std::string>();
            else if (d["type"] == "thinking_delta") block["thinking"] = block["thinking"].get<std::string>() + d["thinking"].get<std::string>();
            else partial_json[e["index"]] += d["partial_json"].get<std::string>();
        }
    }
    for (const auto& [index, text] : partial_json) content[index]["input"] = json::parse(text);
    const json message = m.message();
    for (json& block : content) block.erase("id");
    json expected = message["content"];
    REQUIRE(expected.size() == 3);
    CHECK(expected[2]["id"].get<std::string>().rfind("toolu_", 0) == 0);
    for (json& block : expected) block.erase("id");
    CHECK(content == expected);
    CHECK(expected[0] == json::parse(R"({"type":"thinking","thinking":"hmm","signature":""})"));
    CHECK(expected[1] == json::parse(R"({"type":"text","text":"Let me look."})"));
    CHECK(expected[2] == json::parse(R"({"type":"tool_use","name":"get_weather","input":{"city":"Paris","days":2}})"));
    CHECK(message["stop_reason"] == "tool_use");
    CHECK(message["type"] == "message");

    CHECK(anthropic_stop_reason({.finish = gemma4::FinishReason::MaxTokens, .tool_call = true}) == "max_tokens");
    CHECK(anthropic_stop_reason({.finish = gemma4::FinishReason::ContextFull}) == "max_tokens");
    CHECK(anthropic_stop_reason({.finish = gemma4::FinishReason::StopString, .stop_sequence = "##"}) == "stop_sequence");
    CHECK(anthropic_stop_reason({.finish = gemma4::FinishReason::EndToken}) == "end_turn");
    AnthropicMessage stopped("msg_2", "tiny", 5);
    stopped.add({ReplyEvent{ReplyEvent::Content, "abc"}});
    stopped.finish({.finish = gemma4::FinishReason::StopString, .stop_sequence = "##"});
    CHECK(stopped.message()["stop_sequence"] == "##");
    CHECK(stopped.message()["content"] == json::parse(R"([{"type":"text","text":"abc"}])"));
    CHECK(typed_events(AnthropicMessage::error("boom"))[0]["error"]["type"] == "api_error");
}

TEST_CASE("an abandoned call: its block ends in the stream, the message has no tool_use", "[server][anthropic][responses][encode]") {
    ReplyParser parser(true);
    std::vector<ReplyEvent> events = parser.feed("<|tool_call>call:f{a:" + quote + "open");
    for (auto& e : parser.finish()) events.push_back(std::move(e));
    AnthropicMessage m("msg", "tiny", 1);
    std::string sse = m.add(events);
    sse += m.finish({});
    const std::vector<json> stream = typed_events(sse);
    CHECK(stream[0]["content_block"]["type"] == "tool_use");
    REQUIRE(m.message()["content"].size() == 1);
    CHECK(m.message()["content"][0]["type"] == "text");
    CHECK(m.message()["content"][0]["text"] == "<|tool_call>call:f{a:" + quote + "open");
    ResponsesReply r("resp", "tiny", 0, json::object());
    r.add(events);
    r.finish({});
    REQUIRE(r.response()["output"].size() == 1);
    CHECK(r.response()["output"][0]["type"] == "message");
}

TEST_CASE("matched_stop finds the stop string that ended a reply, by the engine's rule", "[server][anthropic]") {
    CHECK(matched_stop("one two##three", {"three", "##"}) == "##");
    CHECK(matched_stop("abcd", {"cd", "bcd"}) == "bcd");  // ending at the same byte: the one starting earliest
    CHECK_FALSE(matched_stop("abcd", {"x"}));
    CHECK_FALSE(matched_stop("abcd", {}));
}

TEST_CASE("responses: input strings, messages, function calls and their outputs render as their chat twins", "[server][responses][request]") {
    const json responses = json::parse(R"({"model":"m","instructions":"Be brief.","max_output_tokens":9,"temperature":0.5,"top_p":0.8,
        "tools":[{"type":"function","name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}],
        "input":[{"role":"user","content":[{"type":"input_text","text":"Weather in Paris?"},{"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgo="}]},
          {"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
          {"type":"function_call_output","call_id":"call_1","output":"sunny"}]})");
    const json chat = json::parse(R"({"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather",
        "parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],
        "messages":[{"role":"system","content":"Be brief."},
          {"role":"user","content":[{"type":"text","text":"Weather in Paris?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]},
          {"role":"assistant","tool_calls":[{"id":"call_1","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
          {"role":"tool","tool_call_id":"call_1","content":"sunny"}]})");
    const ResponsesRequest q = parse_responses_request(responses);
    CHECK(render_prompt(q.chat) == render_prompt(parse_chat_request(chat)));
    CHECK(q.chat.sampling.max_tokens == 9);
    CHECK(q.chat.sampling.top_p == 0.8);
    REQUIRE(q.chat.media.size() == 1);
    CHECK(q.chat.media[0].param == "input[0].content[1].image_url");
    CHECK(q.echo["instructions"] == "Be brief.");
    CHECK(q.echo["tools"] == responses["tools"]);

    const ResponsesRequest text = parse_responses_request(json::parse(R"({"input":"Hi","reasoning":{"effort":"low"}})"));
    CHECK(render_prompt(text.chat) == render_prompt(parse_chat_request(json::parse(R"({"messages":[{"role":"user","content":"Hi"}],"reasoning_effort":"low"})"))));

    const std::string forced = R"({"input":"x","tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{"n":{"type":"integer"}}}}],
        "tool_choice":{"type":"function","name":"f"},"parallel_tool_calls":false})";
    const ResponsesRequest f = parse_responses_request(json::parse(forced));
    CHECK(render_prompt(f.chat).ends_with("<|tool_call>call:f{"));
    CHECK_FALSE(f.parallel_tool_calls);
    const auto grammar = responses_output_grammar(f, nlohmann::ordered_json::parse(forced));
    REQUIRE(grammar);
    CHECK(grammar->gbnf.find("call-forced") != std::string::npos);
    const std::string structured = R"({"input":"x","text":{"format":{"type":"json_schema","name":"w","schema":{"type":"object","properties":{"a":{"type":"integer"}}}}}})";
    const auto schema = responses_output_grammar(parse_responses_request(json::parse(structured)), nlohmann::ordered_json::parse(structured));
    REQUIRE(schema);
    CHECK(schema->param == "text.format.schema");
}

TEST_CASE("responses: bad fields are 400s naming them, and stored or chained responses are refused", "[server][responses][request][errors]") {
    const auto parse = [](const json& b) { return parse_responses_request(b); };
    const std::vector<std::pair<std::string, std::string>> bad = {
        {R"({})", "input"},
        {R"({"input":[]})", "input"},
        {R"({"input":5})", "input"},
        {R"({"input":"x","store":true})", "store"},
        {R"({"input":"x","previous_response_id":"resp_1"})", "previous_response_id"},
        {R"({"input":"x","background":true})", "background"},
        {R"({"input":"x","max_output_tokens":0})", "max_output_tokens"},
        {R"({"input":"x","temperature":2.5})", "temperature"},
        {R"({"input":"x","top_p":0})", "top_p"},
        {R"({"input":"x","instructions":5})", "instructions"},
        {R"({"input":[{"role":"wizard","content":"x"}]})", "input[0].role"},
        {R"({"input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]})", "input[0].content[0].type"},
        {R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"https://example.com/a.png"}]}]})", "input[0].content[0].image_url"},
        {R"({"input":[{"role":"user","content":[{"type":"input_image","file_id":"file_1"}]}]})", "input[0].content[0].file_id"},
        {R"({"input":[{"type":"item_reference","id":"x"}]})", "input[0].type"},
        {R"({"input":[{"type":"function_call","name":"f","arguments":"{}"}]})", "input[0].call_id"},
        {R"({"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{oops"}]})", "input[0].arguments"},
        {R"({"input":[{"type":"function_call_output","call_id":"c"}]})", "input[0].output"},
        {R"({"input":"x","tools":[{"type":"web_search"}]})", "tools[0].type"},
        {R"({"input":"x","tools":[{"type":"function","name":"bad name"}]})", "tools[0].name"},
        {R"({"input":"x","tools":[{"type":"function","name":"f","parameters":"p"}]})", "tools[0].parameters"},
        {R"({"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":"sometimes"})", "tool_choice"},
        {R"({"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"}})", "tool_choice.name"},
        {R"({"input":"x","tool_choice":"required"})", "tool_choice"},
        {R"({"input":"x","parallel_tool_calls":"no"})", "parallel_tool_calls"},
        {R"({"input":"x","reasoning":{"effort":"extreme"}})", "reasoning.effort"},
        {R"({"input":"x","text":{"format":{"type":"xml"}}})", "text.format.type"},
        {R"({"input":"x","text":{"format":{"type":"json_schema","name":"n"}}})", "text.format.schema"},
        {R"({"input":"x","metadata":[]})", "metadata"},
    };
    for (const auto& [body, param] : bad) {
        INFO(body);
        CHECK(refused_param(body, parse) == param);
    }
    CHECK(refused_param(R"({"input":"x","store":false})", parse).empty());
}

TEST_CASE("responses encoder: items with their events in sequence, the stream adds up to the response", "[server][responses][encode]") {
    ResponsesReply r("resp_1", "tiny", 7, json{{"instructions", "I"}, {"parallel_tool_calls", true}});
    std::string sse = r.start();
    sse += r.add(reply_events(3));
    sse += r.finish({.finish = gemma4::FinishReason::StopId, .tool_call = true, .prompt_tokens = 30, .output_tokens = 12, .cached_tokens = 10});
    const std::vector<json> events = typed_events(sse);
    for (std::size_t i = 0; i < events.size(); ++i) CHECK(events[i]["sequence_number"] == i);
    CHECK(events[0]["type"] == "response.created");
    CHECK(events[0]["response"]["status"] == "in_progress");
    CHECK(events[1]["type"] == "response.in_progress");
    CHECK(events.back()["type"] == "response.completed");
    const json response = r.response();
    CHECK(events.back()["response"] == response);
    CHECK(response["status"] == "completed");
    CHECK(response["instructions"] == "I");
    CHECK(response["usage"] == json::parse(R"({"input_tokens":30,"input_tokens_details":{"cached_tokens":10},"output_tokens":12,"total_tokens":42})"));
    const json& output = response["output"];
    REQUIRE(output.size() == 3);
    CHECK(output[0]["type"] == "reasoning");
    CHECK(output[0]["content"][0]["text"] == "hmm");
    CHECK(output[1]["type"] == "message");
    CHECK(output[1]["content"][0] == json::parse(R"({"type":"output_text","text":"Let me look.","annotations":[]})"));
    CHECK(output[2]["type"] == "function_call");
    CHECK(output[2]["name"] == "get_weather");
    CHECK(output[2]["call_id"].get<std::string>().rfind("call_", 0) == 0);
    CHECK(json::parse(output[2]["arguments"].get<std::string>()) == json({{"city", "Paris"}, {"days", 2}}));

    // Each output_item.done carries the item the response lists; the deltas add up to its text.
    std::vector<json> done;
    std::string text, arguments;
    for (const json& e : events) {
        if (e["type"] == "response.output_item.done") done.push_back(e["item"]);
        if (e["type"] == "response.output_text.delta") text += e["delta"].get<std::string>();
        if (e["type"] == "response.function_call_arguments.delta") arguments += e["delta"].get<std::string>();
    }
    CHECK(json(done) == output);
    CHECK(text == "Let me look.");
    CHECK(arguments == output[2]["arguments"]);

    ResponsesReply cut("resp_2", "tiny", 7, json::object());
    cut.add({ReplyEvent{ReplyEvent::Content, "abc"}});
    const std::vector<json> cut_events = typed_events(cut.finish({.finish = gemma4::FinishReason::MaxTokens}));
    CHECK(cut_events.back()["type"] == "response.incomplete");
    CHECK(cut.response()["incomplete_details"]["reason"] == "max_output_tokens");
}
