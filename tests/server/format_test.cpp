// The server's pure parts: Gemma 4's tool syntax both ways, the reply parser (thoughts, content,
// tool calls, streamed in arbitrary pieces), request parsing and prompt rendering, base64 and
// data: URLs, the API key check.
#include <catch2/catch.hpp>

#include "server/auth.hpp"
#include "server/chat_request.hpp"
#include "server/data_url.hpp"
#include "server/openai_encode.hpp"
#include "server/reply_parser.hpp"
#include "server/tool_format.hpp"

#include <gemma4/generate/chat.hpp>

#include <random>

using namespace gemma4::server;
using nlohmann::json;

namespace {
const std::string Q = "<|\"|>";

/// Feeds `text` to a parser in pieces of the given sizes (cycled) and collects the result.
ParsedReply parse_in_pieces(const std::string& text, const std::vector<std::size_t>& sizes, bool tools = true) {
    ReplyParser parser(tools);
    ParsedReply out;
    std::size_t pos = 0, k = 0;
    while (pos < text.size()) {
        const std::size_t n = std::min(sizes[k++ % sizes.size()], text.size() - pos);
        out.add(parser.feed(std::string_view(text).substr(pos, n)));
        pos += n;
    }
    out.add(parser.finish());
    return out;
}
}  // namespace

TEST_CASE("format_argument writes the template's syntax: quoted strings, sorted keys, bare scalars", "[server][tools]") {
    const json v = {{"zeta", 1}, {"alpha", "a,b}"}, {"list", {true, false, nullptr, 2.5}}, {"nested", {{"k", "v"}}}};
    CHECK(format_argument(v, false) == "{alpha:" + Q + "a,b}" + Q + ",list:[true,false,None,2.5],nested:{k:" + Q + "v" + Q + "},zeta:1}");
    CHECK(format_argument(v["nested"], true) == "{" + Q + "k" + Q + ":" + Q + "v" + Q + "}");
    CHECK(format_argument(json("x")) == Q + "x" + Q);
}

TEST_CASE("a tool declaration renders as the pinned Gemma 4 template does", "[server][tools]") {
    // The expected text is the template's output for this tool (OpenAI function shape).
    const json tool = json::parse(R"({"type":"function","function":{"name":"weather","description":"Weather",
        "parameters":{"type":"object","properties":{"city":{"type":"string","description":"City"}},"required":["city"]}}})");
    CHECK(render_tool_declaration(tool) == "<|tool>declaration:weather{description:" + Q + "Weather" + Q + ",parameters:{properties:{city:{description:" +
                                               Q + "City" + Q + ",type:" + Q + "STRING" + Q + "}},required:[" + Q + "city" + Q + "],type:" + Q +
                                               "OBJECT" + Q + "}}<tool|>");
    // Enums, arrays with item types, nested objects, nullable.
    const json rich = json::parse(R"({"function":{"name":"f","description":"d","parameters":{"type":"object","properties":{
        "unit":{"type":"string","enum":["c","f"]},
        "tags":{"type":"array","items":{"type":"string"}},
        "where":{"type":"object","properties":{"lat":{"type":"number"}},"required":["lat"]},
        "note":{"type":"string","nullable":true}}}}})");
    CHECK(render_tool_declaration(rich) ==
          "<|tool>declaration:f{description:" + Q + "d" + Q + ",parameters:{properties:{note:{nullable:true,type:" + Q + "STRING" + Q +
              "},tags:{items:{type:" + Q + "STRING" + Q + "},type:" + Q + "ARRAY" + Q + "},unit:{enum:[" + Q + "c" + Q + "," + Q + "f" + Q +
              "],type:" + Q + "STRING" + Q + "},where:{properties:{lat:{type:" + Q + "NUMBER" + Q + "}},required:[" + Q + "lat" + Q +
              "],type:" + Q + "OBJECT" + Q + "}},type:" + Q + "OBJECT" + Q + "}}<tool|>");
    // No parameters at all.
    CHECK(render_tool_declaration(json::parse(R"({"function":{"name":"now"}})")) == "<|tool>declaration:now{description:" + Q + Q + "}<tool|>");
}

TEST_CASE("tool calls round-trip through the Gemma syntax, escapes included", "[server][tools]") {
    const std::vector<json> cases = {
        json::object(),
        {{"city", "Paris"}},
        {{"text", "has , and } and { and : and \"quotes\" and \\ and\nnewline"}},
        {{"n", 42}, {"x", -1.5}, {"ok", true}, {"no", false}, {"none", nullptr}},
        {{"list", {1, "two", {{"three", 3}}, json::array()}}, {"obj", {{"a", {{"b", {{"c", "deep"}}}}}}}},
        {{"unicode", "café ☕ 日本"}},
        // keys that cannot stand bare are written between quotes, and read back the same
        {{"a,b", 1}, {"c:d", {{"{e}", "[f]"}}}, {"<g", true}, {" h", 2}, {"i ", 3}, {"\"j\"", 4}, {"", 5}},
    };
    // the template's bare keys where they read back
    CHECK(render_tool_call("f", {{"city", "Paris"}, {"max_count", 3}}) == std::string(kToolCallStart) + "call:f{city:" + Q + "Paris" + Q + ",max_count:3}" + std::string(kToolCallEnd));
    for (const json& args : cases) {
        INFO(args.dump());
        const std::string text = render_tool_call("get_weather", args);
        REQUIRE(text.starts_with("<|tool_call>call:get_weather{"));
        REQUIRE(text.ends_with("}<tool_call|>"));
        const auto body = text.substr(kToolCallStart.size(), text.size() - kToolCallStart.size() - kToolCallEnd.size());
        const auto parsed = parse_tool_call(body);
        REQUIRE(parsed);
        CHECK(parsed->name == "get_weather");
        CHECK(parsed->arguments == args);
    }
}

TEST_CASE("malformed tool calls are not calls", "[server][tools]") {
    for (const std::string& body : std::vector<std::string>{"", "call:", "call:f", "call:{a:1}", "call:f{", "call:f{a:1", "call:f{a:" + Q + "open}",
                                   "call:f{a:1}}", "call:f{a 1}", "call:f{:1}", "call:f{a:[1,2}", "cal:f{a:1}", "call:f g{a:1}",
                                   "call:f{a:1} trailing", "call:f{a:{b:{c:" + Q + "x}}}"}) {
        INFO(body);
        CHECK_FALSE(parse_tool_call(body));
    }
    // Deep nesting is refused, not a stack overflow.
    std::string deep = "call:f{a:";
    for (int i = 0; i < 10000; ++i) deep += "[";
    CHECK_FALSE(parse_tool_call(deep));
    // Lenient on what the model writes in practice: spaces, JSON-quoted keys, bare words.
    const auto lenient = parse_tool_call(" call:f{ \"a\" : 1 , b: word } ");
    REQUIRE(lenient);
    CHECK(lenient->arguments == json({{"a", 1}, {"b", "word"}}));
}

TEST_CASE("tool results render as response:NAME{value:...} or an object's fields", "[server][tools]") {
    CHECK(render_tool_response("weather", json("sunny")) == "<|tool_response>response:weather{value:" + Q + "sunny" + Q + "}<tool_response|>");
    CHECK(render_tool_response("weather", json{{"temp", 21}, {"sky", "clear"}}) ==
          "<|tool_response>response:weather{sky:" + Q + "clear" + Q + ",temp:21}<tool_response|>");
}

TEST_CASE("the reply parser splits thoughts, content and tool calls, whatever the piece sizes", "[server][reply]") {
    const std::string reply = "<|channel>thought\nLet me think <about> it.<channel|>The answer: <|tool_call>call:lookup{q:" + Q + "a,b" + Q +
                              ",n:3}<tool_call|>and done.<turn|>";
    const std::vector<std::vector<std::size_t>> sizings = {{reply.size()}, {1}, {2}, {3}, {5, 1, 7}, {11}};
    for (const auto& sizes : sizings) {
        INFO("piece size " << sizes[0]);
        const ParsedReply r = parse_in_pieces(reply, sizes);
        CHECK(r.reasoning == "Let me think <about> it.");
        CHECK(r.content == "The answer: and done.");
        REQUIRE(r.tool_calls.size() == 1);
        CHECK(r.tool_calls[0].name == "lookup");
        CHECK(r.tool_calls[0].arguments == json({{"q", "a,b"}, {"n", 3}}));
    }
    // Random splits agree with the whole.
    std::mt19937 rng(7);
    for (int i = 0; i < 50; ++i) {
        std::vector<std::size_t> sizes;
        for (int k = 0; k < 20; ++k) sizes.push_back(1 + rng() % 9);
        const ParsedReply r = parse_in_pieces(reply, sizes);
        CHECK(r.content == "The answer: and done.");
        CHECK(r.tool_calls.size() == 1);
    }
}

TEST_CASE("a malformed or unfinished call stays content, markers and all", "[server][reply]") {
    const std::string bad = "<|tool_call>call:f{a:1<tool_call|>";
    ParsedReply r = parse_reply("x " + bad + " y");
    CHECK(r.tool_calls.empty());
    CHECK(r.content == "x " + bad + " y");
    r = parse_reply("x <|tool_call>call:f{a:1}");  // cut off by max_tokens
    CHECK(r.tool_calls.empty());
    CHECK(r.content == "x <|tool_call>call:f{a:1}");
    // Without declared tools the syntax is plain text.
    r = parse_reply("<|tool_call>call:f{a:1}<tool_call|>", /*parse_tools=*/false);
    CHECK(r.tool_calls.empty());
    CHECK(r.content == "<|tool_call>call:f{a:1}<tool_call|>");
    // Text that only looks like the start of a marker is released at the end.
    r = parse_in_pieces("a <|tool", {1});
    CHECK(r.content == "a <|tool");
    r = parse_in_pieces("a <|channel>thought\nunfinished", {4});
    CHECK(r.reasoning == "unfinished");
    CHECK(r.content == "a ");
}

TEST_CASE("a channel header is a short name and a newline, without one the text is reasoning, whole or in pieces", "[server][reply]") {
    const std::string long_name(80, 'x');
    for (const std::string& text : std::vector<std::string>{"<|channel>thought\nhmm<channel|>yes", "<|channel>" + long_name + "\nhmm<channel|>yes",
                                                            "<|channel>no header<channel|>yes", "<|channel>unfinished"}) {
        const ParsedReply whole = parse_reply(text);
        for (const std::size_t piece : {1u, 3u, 7u, 64u}) {
            const ParsedReply streamed = parse_in_pieces(text, {piece});
            INFO(text << " in pieces of " << piece);
            CHECK(streamed.content == whole.content);
            CHECK(streamed.reasoning == whole.reasoning);
        }
    }
    CHECK(parse_reply("<|channel>thought\nhmm<channel|>yes").reasoning == "hmm");
    CHECK(parse_reply("<|channel>" + long_name + "\nhmm<channel|>yes").reasoning == long_name + "\nhmm");
    CHECK(parse_reply("<|channel>no header<channel|>yes").reasoning == "no header");
    CHECK(parse_reply("<|channel>no header<channel|>yes").content == "yes");
    CHECK(parse_reply("<|channel>unfinished").reasoning == "unfinished");
}

TEST_CASE("end markers are dropped from the content", "[server][reply]") {
    CHECK(parse_reply("Hello<turn|>").content == "Hello");
    CHECK(parse_reply("Hello<eos>").content == "Hello");
    CHECK(parse_reply("<|tool_call>call:f{}<tool_call|><|tool_response>").content.empty());
}

TEST_CASE("chat requests: fields, types and values are checked and named", "[server][request]") {
    const json ok = json::parse(R"({"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"temperature":0,
        "top_p":0.9,"top_k":4,"min_p":0.1,"seed":3,"stop":["a","b"],"stream":true,"stream_options":{"include_usage":true}})");
    const ChatRequest r = parse_chat_request(ok);
    CHECK(r.sampling.max_tokens == 5);
    CHECK(r.sampling.temperature == 0.0);
    CHECK(r.sampling.top_k == 4);
    CHECK(r.sampling.seed == 3u);
    CHECK(r.sampling.stop == std::vector<std::string>{"a", "b"});
    CHECK(r.sampling.stream);
    CHECK(r.sampling.include_usage);
    CHECK_FALSE(r.thinking);
    CHECK(parse_chat_request(json::parse(R"({"messages":[{"role":"user","content":"x"}],"stop":"s"})")).sampling.stop ==
          std::vector<std::string>{"s"});
    CHECK(parse_chat_request(json::parse(R"({"messages":[{"role":"user","content":"x"}],"max_completion_tokens":7})")).sampling.max_tokens == 7);

    const std::vector<std::pair<std::string, std::string>> bad = {
        {R"([1,2])", ""},
        {R"({})", "messages"},
        {R"({"messages":[]})", "messages"},
        {R"({"messages":"hi"})", "messages"},
        {R"({"messages":[{"content":"x"}]})", "messages[0].role"},
        {R"({"messages":[{"role":"wizard","content":"x"}]})", "messages[0].role"},
        {R"({"messages":[{"role":"user","content":5}]})", "messages[0].content"},
        {R"({"messages":[{"role":"user","content":[{"type":"video","video":1}]}]})", "messages[0].content[0].type"},
        {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":"5"})", "max_tokens"},
        {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":-1})", "max_tokens"},
        {R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})", "temperature"},
        {R"({"messages":[{"role":"user","content":"x"}],"temperature":3})", "temperature"},
        {R"({"messages":[{"role":"user","content":"x"}],"top_p":1.5})", "top_p"},
        {R"({"messages":[{"role":"user","content":"x"}],"top_p":0})", "top_p"},
        {R"({"messages":[{"role":"user","content":"x"}],"stop":[1]})", "stop[0]"},
        {R"({"messages":[{"role":"user","content":"x"}],"stop":5})", "stop"},
        {R"({"messages":[{"role":"user","content":"x"}],"n":0})", "n"},
        {R"({"messages":[{"role":"user","content":"x"}],"n":"2"})", "n"},
        {R"({"messages":[{"role":"user","content":"x"}],"stream":"yes"})", "stream"},
        {R"({"messages":[{"role":"user","content":"x"}],"tools":{}})", "tools"},
        {R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"bad name"}}]})", "tools[0].function.name"},
        {R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{not json"}}]}]})",
         "messages[0].tool_calls[0].function.arguments"},
        {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}]}]})",
         "messages[0].content[0].image_url.url"},
        {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,@@@"}}]}]})",
         "messages[0].content[0].image_url.url"},
        {R"({"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAAA","format":"mp3"}}]}]})",
         "messages[0].content[0].input_audio.format"},
        {R"({"messages":[{"role":"user","content":"x"}],"reasoning_effort":"extreme"})", "reasoning_effort"},
    };
    for (const auto& [body, param] : bad) {
        INFO(body);
        try {
            parse_chat_request(json::parse(body));
            FAIL("accepted");
        } catch (const ApiError& e) {
            CHECK(e.status == 400);
            CHECK(e.param == param);
        }
    }
    try {
        parse_chat_request(json::parse(R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/y.png"}}]}]})"));
    } catch (const ApiError& e) {
        CHECK(std::string(e.what()).find("not fetched") != std::string::npos);
        CHECK(e.code == "remote_url_not_supported");
    }
}

TEST_CASE("penalties, logit_bias, repeat_last_n, min_tokens and seed are read and checked, naming the field", "[server][request]") {
    const json ok = json::parse(R"({"prompt":"x","max_tokens":9,"presence_penalty":-2,"frequency_penalty":1.5,"repetition_penalty":1.2,
        "repeat_last_n":64,"min_tokens":9,"seed":18446744073709551615,"logit_bias":{"5":100,"17":-100,"300":0.25}})");
    const SamplingFields s = parse_sampling(ok);
    CHECK(s.presence_penalty == -2.0);
    CHECK(s.frequency_penalty == 1.5);
    CHECK(s.repetition_penalty == 1.2);
    CHECK(s.repeat_last_n == 64);
    CHECK(s.min_tokens == 9);
    CHECK(s.seed == 18446744073709551615u);
    REQUIRE(s.logit_bias.size() == 3);
    std::map<std::int32_t, double> bias;
    for (const auto& b : s.logit_bias) bias[b.id] = b.bias;
    CHECK(bias == std::map<std::int32_t, double>{{5, 100.0}, {17, -100.0}, {300, 0.25}});
    const SamplingFields defaults = parse_sampling(json::parse(R"({"prompt":"x"})"));
    CHECK_FALSE(defaults.presence_penalty);
    CHECK_FALSE(defaults.repetition_penalty);
    CHECK_FALSE(defaults.repeat_last_n);
    CHECK_FALSE(defaults.min_tokens);
    CHECK(defaults.logit_bias.empty());
    CHECK(parse_sampling(json::parse(R"({"repeat_last_n":-1})")).repeat_last_n == -1);
    CHECK(parse_sampling(json::parse(R"({"seed":-1})")).seed == 18446744073709551615u);  // as its 64 bits

    const std::vector<std::pair<std::string, std::string>> bad = {
        {R"({"presence_penalty":2.5})", "presence_penalty"},
        {R"({"presence_penalty":"high"})", "presence_penalty"},
        {R"({"frequency_penalty":-2.01})", "frequency_penalty"},
        {R"({"repetition_penalty":0})", "repetition_penalty"},
        {R"({"repetition_penalty":-1})", "repetition_penalty"},
        {R"({"repetition_penalty":"1"})", "repetition_penalty"},
        {R"({"repeat_last_n":-2})", "repeat_last_n"},
        {R"({"repeat_last_n":1.5})", "repeat_last_n"},
        {R"({"repeat_last_n":2000000})", "repeat_last_n"},
        {R"({"min_tokens":-1})", "min_tokens"},
        {R"({"min_tokens":5,"max_tokens":4})", "min_tokens"},
        {R"({"logit_bias":[1,2]})", "logit_bias"},
        {R"({"logit_bias":{"abc":1}})", "logit_bias"},
        {R"({"logit_bias":{"-5":1}})", "logit_bias"},
        {R"({"logit_bias":{"+5":1}})", "logit_bias"},
        {R"({"logit_bias":{"4.5":1}})", "logit_bias"},
        {R"({"logit_bias":{"":1}})", "logit_bias"},
        {R"({"logit_bias":{"99999999999":1}})", "logit_bias"},
        {R"({"logit_bias":{"5":100.5}})", "logit_bias"},
        {R"({"logit_bias":{"5":-101}})", "logit_bias"},
        {R"({"logit_bias":{"5":"up"}})", "logit_bias"},
        {R"({"seed":1.5})", "seed"},
    };
    for (const auto& [body, param] : bad) {
        INFO(body);
        try {
            parse_sampling(json::parse(body));
            FAIL("accepted");
        } catch (const ApiError& e) {
            CHECK(e.status == 400);
            CHECK(e.param == param);
            CHECK(std::string(e.what()).rfind(param + ": ", 0) == 0);
        }
    }
    // The chat endpoint reads the same fields.
    const ChatRequest chat = parse_chat_request(json::parse(R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"7":3},"min_tokens":2})"));
    CHECK(chat.sampling.min_tokens == 2);
    REQUIRE(chat.sampling.logit_bias.size() == 1);
    CHECK(chat.sampling.logit_bias[0].id == 7);
}

TEST_CASE("thinking is on only when asked", "[server][request]") {
    auto thinking = [](const std::string& extra) {
        return parse_chat_request(json::parse(R"({"messages":[{"role":"user","content":"x"}])" + extra + "}")).thinking;
    };
    CHECK_FALSE(thinking(""));
    CHECK_FALSE(thinking(R"(,"reasoning_effort":"none")"));
    CHECK(thinking(R"(,"reasoning_effort":"low")"));
    CHECK(thinking(R"(,"chat_template_kwargs":{"enable_thinking":true})"));
    CHECK_FALSE(thinking(R"(,"reasoning_effort":"high","chat_template_kwargs":{"enable_thinking":false})"));
}

TEST_CASE("plain conversations render exactly as the library's render_chat", "[server][render]") {
    for (bool think : {false, true}) {
        const json body = {{"messages", json::parse(R"([{"role":"system","content":" Be brief. "},{"role":"user","content":"Hi"},
            {"role":"assistant","content":"<|channel>thought\nhm<channel|>Hello!"},{"role":"user","content":[{"type":"text","text":"Again "}]}])")},
                           {"chat_template_kwargs", {{"enable_thinking", think}}}};
        const ChatRequest r = parse_chat_request(body);
        const std::vector<gemma4::ChatMessage> library = {{"system", " Be brief. "}, {"user", "Hi"}, {"assistant", "<|channel>thought\nhm<channel|>Hello!"},
                                                          {"user", "Again "}};
        CHECK(render_prompt(r) == gemma4::render_chat(library, gemma4::ChatOptions{.enable_thinking = think}));
    }
    const ChatRequest no_system = parse_chat_request(json::parse(R"({"messages":[{"role":"user","content":"Hi"}]})"));
    CHECK(render_prompt(no_system) == "<bos><|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
}

TEST_CASE("tools, calls and results render in Gemma 4's format", "[server][render]") {
    const json body = json::parse(R"({
        "messages":[{"role":"user","content":"Weather in Paris?"},
                    {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
                        "function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}}]},
                    {"role":"tool","tool_call_id":"call_1","content":"sunny"}],
        "tools":[{"type":"function","function":{"name":"weather","description":"Weather",
                  "parameters":{"type":"object","properties":{"city":{"type":"string","description":"City"}},"required":["city"]}}}]})");
    const ChatRequest r = parse_chat_request(body);
    // The model continues its own turn after the tool's result: no new turn, no generation prompt.
    CHECK(render_prompt(r) == "<bos><|turn>system\n" + render_tool_declaration(r.tools[0]) + "<turn|>\n<|turn>user\nWeather in Paris?<turn|>\n" +
                                  "<|turn>model\n<|tool_call>call:weather{city:" + Q + "Paris" + Q + "}<tool_call|>" +
                                  "<|tool_response>response:weather{value:" + Q + "sunny" + Q + "}<tool_response|>");
    // The final answer after the result continues the same model turn.
    json more = body;
    more["messages"].push_back({{"role", "assistant"}, {"content", "It is sunny."}});
    more["messages"].push_back({{"role", "user"}, {"content", "Thanks"}});
    CHECK(render_prompt(parse_chat_request(more)).ends_with("<tool_response|>It is sunny.<turn|>\n<|turn>user\nThanks<turn|>\n<|turn>model\n" +
                                                            std::string(gemma4::kEmptyThought)));
    // tool_choice "none" drops the declarations.
    json none = body;
    none["tool_choice"] = "none";
    CHECK(parse_chat_request(none).tools.empty());
}

TEST_CASE("media parts become placeholders in order", "[server][render]") {
    const std::string png = "data:image/png;base64," + encode_base64("\x89PNG fake");
    const json body = {{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Look "}}, {{"type", "image_url"}, {"image_url", {{"url", png}}}},
                                                                      {{"type", "input_audio"}, {"input_audio", {{"data", encode_base64("RIFF")}, {"format", "wav"}}}}}}}}}};
    const ChatRequest r = parse_chat_request(body);
    REQUIRE(r.media.size() == 2);
    CHECK(r.media[0].kind == MediaItem::Image);
    CHECK(r.media[1].kind == MediaItem::Audio);
    CHECK(render_prompt(r).find("<|turn>user\nLook<|image|><|audio|><turn|>") != std::string::npos);
}

TEST_CASE("base64 decodes RFC 4648 and rejects the rest", "[server][base64]") {
    auto text = [](const std::string& b64) {
        auto bytes = decode_base64(b64);
        REQUIRE(bytes);
        return std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size());
    };
    CHECK(text("") == "");
    CHECK(text("Zg==") == "f");
    CHECK(text("Zm8=") == "fo");
    CHECK(text("Zm9v") == "foo");
    CHECK(text("Zm9vYg") == "foob");
    CHECK(text("Zm9v\nYmFy") == "foobar");
    for (const std::string s : {"Z", "Zg=a", "Zg===", "Zm9v!", "Zg=\n=x", "Zm9vY"}) CHECK_FALSE(decode_base64(s));
    std::string all;
    for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
    for (std::size_t n = 0; n < 10; ++n) CHECK(text(encode_base64(all.substr(0, all.size() - n))) == all.substr(0, all.size() - n));
    CHECK(parse_data_url("data:image/png;base64,Zm9v", "p").media_type == "image/png");
    CHECK_THROWS_AS(parse_data_url("data:image/png,raw", "p"), ApiError);
    CHECK_THROWS_AS(parse_data_url("https://x/y.png", "p"), ApiError);
}

TEST_CASE("API keys: bearer scheme, exact match, loopback hosts", "[server][auth]") {
    CHECK(bearer_matches("Bearer secret", "secret"));
    CHECK(bearer_matches("bearer secret", "secret"));
    CHECK_FALSE(bearer_matches("Bearer secre", "secret"));
    CHECK_FALSE(bearer_matches("Bearer secrets", "secret"));
    CHECK_FALSE(bearer_matches("Bearer Secret", "secret"));
    CHECK_FALSE(bearer_matches("secret", "secret"));
    CHECK_FALSE(bearer_matches("", "secret"));
    CHECK_FALSE(bearer_matches("Basic c2VjcmV0", "secret"));
    CHECK(constant_time_equal("", ""));
    CHECK_FALSE(constant_time_equal("a", ""));
    for (const std::string h : {"127.0.0.1", "127.1.2.3", "localhost", "::1"}) CHECK(is_loopback_host(h));
    for (const std::string h : {"0.0.0.0", "192.168.1.2", "::", "127.0.0", "127.0.0.1.evil.com", "example.com"}) CHECK_FALSE(is_loopback_host(h));
}

TEST_CASE("SSE framing and response shapes", "[server][encode]") {
    CHECK(sse_event(json{{"a", 1}}) == "data: {\"a\":1}\n\n");
    CHECK(kSseDone == "data: [DONE]\n\n");
    ParsedReply reply;
    reply.tool_calls.push_back({"f", {{"x", 1}}, {}});
    const json r = chat_completion("id", "m", 1, reply, "tool_calls", Usage{3, 4, 1});
    CHECK(r["choices"][0]["message"]["content"].is_null());
    CHECK(r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == "{\"x\":1}");
    CHECK(r["usage"]["total_tokens"] == 7);
    CHECK(r["usage"]["prompt_tokens_details"]["cached_tokens"] == 1);
    CHECK(make_id("a-") != make_id("a-"));
}
