// `n` choices of chat and text completions end to end: indexed choices, each the reply of its own
// seed (seed + i), usage counting the prompt once; streams whose chunks carry their choice's index
// and add up, per choice, to the non-streamed reply (logprobs, tool calls and constrained output
// per choice too); the 400s naming `n` (not a positive integer, above --max-n, beyond the queue or
// the KV budget) after which the server goes on; and the prompt of an n = 4 request prefilled
// once, with the prefix cache and without it.
#include <catch2/catch.hpp>

#include "server/chat_request.hpp"
#include "server/openai_encode.hpp"
#include "server_process.hpp"
#include "support/skip.hpp"

#include <algorithm>
#include <set>

using namespace gemma4::test;
using nlohmann::json;

namespace choices_server {

json chat_with(json fields, const std::string& text = "Tell me about the hills") {
    fields["messages"] = {{{"role", "user"}, {"content", text}}};
    return fields;
}

json completion_with(json fields, const std::string& prompt = "When the sun rises") {
    fields["prompt"] = prompt;
    return fields;
}

json post_ok(int port, const std::string& path, const json& body) {
    const auto r = http(port, "POST", path, body.dump());
    INFO(path << " " << body.dump() << " -> " << r.body);
    REQUIRE(r.status == 200);
    return r.json();
}

/// The same body with `n` (or without it, for 1) and `seed` (none: left out).
json with_n(json body, int n, std::optional<int> seed) {
    if (n == 1) body.erase("n");
    else body["n"] = n;
    if (seed) body["seed"] = *seed;
    else body.erase("seed");
    return body;
}

/// Checks a response's choices are indexed 0..n-1 in order.
void check_indices(const json& reply, std::size_t n) {
    INFO(reply.dump());
    REQUIRE(reply["choices"].size() == n);
    for (std::size_t i = 0; i < n; ++i) CHECK(reply["choices"][i]["index"] == i);
}

/// Choice i of an n-choice request with `seed` equals the one-choice request with seed + i; the
/// usage counts the prompt once and the completion tokens of every choice. Returns the reply.
json check_seed_plus_i(int port, const std::string& path, const json& body, int n, int seed) {
    const json reply = post_ok(port, path, with_n(body, n, seed));
    check_indices(reply, static_cast<std::size_t>(n));
    std::int64_t completion_tokens = 0;
    for (int i = 0; i < n; ++i) {
        INFO("choice " << i << " against seed " << seed + i);
        const json one = post_ok(port, path, with_n(body, 1, seed + i));
        json expected = one["choices"][0];
        expected["index"] = i;
        if (path == "/v1/chat/completions" && expected["message"].contains("tool_calls")) {  // call ids are fresh in every response
            for (auto& call : expected["message"]["tool_calls"]) call.erase("id");
            json got = reply["choices"][i];
            for (auto& call : got["message"]["tool_calls"]) call.erase("id");
            CHECK(got == expected);
        } else {
            CHECK(reply["choices"][i] == expected);
        }
        completion_tokens += one["usage"]["completion_tokens"].get<std::int64_t>();
        CHECK(reply["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"]);
    }
    CHECK(reply["usage"]["completion_tokens"] == completion_tokens);
    CHECK(reply["usage"]["total_tokens"] == reply["usage"]["prompt_tokens"].get<std::int64_t>() + completion_tokens);
    return reply;
}

/// One choice of a stream, put together from its chunks.
struct StreamedChoice {
    std::string text;  ///< chat: the content deltas; completions: the text chunks
    json logprobs;     ///< chat: logprobs.content entries; completions: the parallel arrays
    json finish_reason;
    std::size_t finish_chunks = 0;
    json tool_calls = json::array();  ///< chat: {id, name, arguments} per call index, arguments concatenated
};

struct StreamedChoices {
    std::vector<StreamedChoice> choices;
    std::vector<std::size_t> order;  ///< the choice index of every chunk, in order
    json usage;
};

/// Reads an n-choice stream of chat (`chat`) or text completions, checking its framing: every
/// chunk holds exactly one choice with an index below n; a chat choice opens with the
/// assistant's role; no chunk of a choice after its finish_reason; the usage chunk (if any) last.
StreamedChoices read_choices(const HttpResponse& r, std::size_t n, bool chat) {
    INFO(r.body);
    REQUIRE(r.status == 200);
    const auto events = sse_data(r.body);
    REQUIRE(events.size() >= 2);
    REQUIRE(events.back() == "[DONE]");
    StreamedChoices out;
    out.choices.resize(n);
    for (auto& c : out.choices)
        c.logprobs = chat ? json::array()
                          : json{{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}, {"text_offset", json::array()}};
    std::vector<bool> opened(n, false);
    for (std::size_t e = 0; e + 1 < events.size(); ++e) {
        const json chunk = json::parse(events[e]);
        if (chunk["choices"].empty()) {
            CHECK(e + 2 == events.size());  // the usage chunk comes last
            out.usage = chunk["usage"];
            continue;
        }
        REQUIRE(chunk["choices"].size() == 1);
        const json& choice = chunk["choices"][0];
        const auto i = choice["index"].get<std::size_t>();
        REQUIRE(i < n);
        out.order.push_back(i);
        StreamedChoice& c = out.choices[i];
        CHECK(c.finish_chunks == 0);  // nothing after its end
        if (chat) {
            const json& delta = choice["delta"];
            if (!opened[i]) CHECK(delta["role"] == "assistant");
            opened[i] = true;
            if (delta.contains("content") && delta["content"].is_string()) c.text += delta["content"].get<std::string>();
            if (delta.contains("tool_calls"))
                for (const json& call : delta["tool_calls"]) {
                    const auto k = call["index"].get<std::size_t>();
                    while (c.tool_calls.size() <= k) c.tool_calls.push_back({{"arguments", ""}});
                    if (call.contains("id")) c.tool_calls[k]["id"] = call["id"];
                    if (call["function"].contains("name")) c.tool_calls[k]["name"] = call["function"]["name"];
                    c.tool_calls[k]["arguments"] = c.tool_calls[k]["arguments"].get<std::string>() + call["function"]["arguments"].get<std::string>();
                }
            if (!choice["logprobs"].is_null())
                for (const json& entry : choice["logprobs"]["content"]) c.logprobs.push_back(entry);
        } else {
            c.text += choice["text"].get<std::string>();
            if (!choice["logprobs"].is_null())
                for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
                    for (const json& v : choice["logprobs"][key]) c.logprobs[key].push_back(v);
        }
        if (!choice["finish_reason"].is_null()) {
            c.finish_reason = choice["finish_reason"];
            ++c.finish_chunks;
        }
    }
    for (std::size_t i = 0; i < n; ++i) {
        INFO("choice " << i);
        CHECK(out.choices[i].finish_chunks == 1);
        if (chat) CHECK(opened[i]);
    }
    return out;
}

/// A stream of `body` (with include_usage) against the same body not streamed: each choice's
/// chunks add up to its non-streamed text (and logprobs, and tool calls), finish reasons and
/// usage are the same. Returns the stream.
StreamedChoices check_stream_adds_up(int port, const std::string& path, json body, std::size_t n) {
    const bool chat = path == "/v1/chat/completions";
    const json whole = post_ok(port, path, body);
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    const StreamedChoices streamed = read_choices(http(port, "POST", path, body.dump()), n, chat);
    for (const char* count : {"prompt_tokens", "completion_tokens", "total_tokens"}) CHECK(streamed.usage[count] == whole["usage"][count]);  // the stream's prompt may come from the prefix cache
    for (std::size_t i = 0; i < n; ++i) {
        INFO("choice " << i << " of " << whole.dump());
        const json& choice = whole["choices"][i];
        const StreamedChoice& s = streamed.choices[i];
        CHECK(s.finish_reason == choice["finish_reason"]);
        if (chat) {
            const json& message = choice["message"];
            CHECK(s.text == (message["content"].is_string() ? message["content"].get<std::string>() : std::string()));
            if (!choice["logprobs"].is_null()) CHECK(s.logprobs == choice["logprobs"]["content"]);
            const json calls = message.value("tool_calls", json::array());
            REQUIRE(s.tool_calls.size() == calls.size());
            for (std::size_t k = 0; k < calls.size(); ++k) {
                CHECK(s.tool_calls[k]["name"] == calls[k]["function"]["name"]);
                CHECK(s.tool_calls[k]["arguments"] == calls[k]["function"]["arguments"]);
                CHECK(s.tool_calls[k]["id"].get<std::string>().rfind("call_", 0) == 0);
            }
        } else {
            CHECK(s.text == choice["text"]);
            if (!choice["logprobs"].is_null()) CHECK(s.logprobs == choice["logprobs"]);
        }
    }
    return streamed;
}

/// The distinct texts of a response's choices.
std::set<std::string> distinct_texts(const json& reply) {
    std::set<std::string> texts;
    for (const json& c : reply["choices"]) texts.insert(c.contains("text") ? c["text"].dump() : c["message"].dump());
    return texts;
}

const json kZoneTool = json::parse(R"({"type": "function", "function": {"name": "get_time", "description": "Time",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 10}}, "required": ["zone"],
    "additionalProperties": false}}})");

const json kPointSchema = json::parse(R"({"type": "object", "properties": {"x": {"type": "integer", "minimum": -9, "maximum": 9},
    "label": {"enum": ["a", "b"]}}, "required": ["x", "label"], "additionalProperties": false})");

void check_point(const std::string& text) {
    INFO(text);
    const json v = json::parse(text);
    REQUIRE(v.is_object());
    CHECK(v.size() == 2);
    REQUIRE(v["x"].is_number_integer());
    CHECK(v["x"].get<int>() >= -9);
    CHECK(v["x"].get<int>() <= 9);
    CHECK((v["label"] == "a" || v["label"] == "b"));
}

/// A prompt of about `words` words (the tiny tokenizer spells most of a word in a token or two).
std::string long_text(int words) {
    static const char* const kWords[] = {"the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "rain", "falls", "on", "hills"};
    std::string text;
    for (int i = 0; i < words; ++i) text += std::string(i ? " " : "") + kWords[(i * 7 + i / 14) % 14];
    return text;
}

}  // namespace choices_server

TEST_CASE("n is read as an integer of at least 1, and the encoders index their choices", "[server][request][choices]") {
    using namespace choices_server;
    using gemma4::server::parse_chat_request;
    using gemma4::server::parse_completion_sampling;
    CHECK(parse_chat_request(chat_with({})).sampling.n == 1);
    CHECK(parse_chat_request(chat_with({{"n", nullptr}})).sampling.n == 1);
    CHECK(parse_chat_request(chat_with({{"n", 3}})).sampling.n == 3);
    CHECK(parse_completion_sampling(completion_with({{"n", 5}})).n == 5);
    for (const json& n : {json(0), json(-3), json(1.5), json("2"), json(false), json(4294967296LL)}) {
        INFO(n.dump());
        for (const bool chat : {true, false}) {
            try {
                if (chat) parse_chat_request(chat_with({{"n", n}}));
                else parse_completion_sampling(completion_with({{"n", n}}));
                FAIL("accepted");
            } catch (const gemma4::server::ApiError& e) {
                CHECK(e.status == 400);
                CHECK(e.param == "n");
            }
        }
    }
    using namespace gemma4::server;
    ParsedReply a, b;
    a.content = "first";
    b.content = "second";
    const json reply = chat_completion("id", "m", 1, std::vector<ChatChoice>{{a, "stop"}, {b, "length"}}, Usage{5, 7, 2});
    REQUIRE(reply["choices"].size() == 2);
    CHECK(reply["choices"][1] == json{{"index", 1}, {"message", {{"role", "assistant"}, {"content", "second"}}}, {"logprobs", nullptr}, {"finish_reason", "length"}});
    CHECK(reply["usage"]["total_tokens"] == 12);
    CHECK(chat_chunk("id", "m", 1, {{"content", "x"}}, nullptr, nullptr, 3)["choices"][0]["index"] == 3);
    const auto text = text_completion("id", "m", 1, std::vector<TextChoice>{{"p", "stop"}, {"q", "length"}}, nullptr);
    CHECK(text["choices"][1]["index"] == 1);
    CHECK(text["choices"][1]["text"] == "q");
    CHECK(text_completion("id", "m", 1, "r", nullptr, nullptr, nullptr, 2)["choices"][0]["index"] == 2);
}

TEST_CASE("serve: n choices, not streamed, are indexed, choice i is the reply of seed + i, and usage counts the prompt once", "[server][e2e][choices]") {
#ifndef GEMMA4_HAVE_SERVE
    GEMMA4_SKIP("gemma4 was built without cpp-httplib (no serve command)");
#endif
    using namespace choices_server;
    ServerProcess server({}, "choices");
    const int port = server.port();
    INFO(server.log());
    SECTION("chat, sampled and greedy") {
        const json sampled = check_seed_plus_i(port, "/v1/chat/completions", chat_with({{"max_tokens", 12}, {"temperature", 1.0}}), 3, 7);
        CHECK(distinct_texts(sampled).size() > 1);  // three seeds, not one reply three times
        const json greedy = check_seed_plus_i(port, "/v1/chat/completions", chat_with({{"max_tokens", 12}, {"temperature", 0}}), 3, 7);
        CHECK(distinct_texts(greedy).size() == 1);
    }
    SECTION("completions, sampled") {
        const json sampled = check_seed_plus_i(port, "/v1/completions", completion_with({{"max_tokens", 12}, {"temperature", 1.0}}), 3, 11);
        CHECK(distinct_texts(sampled).size() > 1);
    }
    SECTION("logprobs per choice") {
        check_seed_plus_i(port, "/v1/chat/completions", chat_with({{"max_tokens", 8}, {"temperature", 0.8}, {"logprobs", true}, {"top_logprobs", 2}}), 2, 3);
        check_seed_plus_i(port, "/v1/completions", completion_with({{"max_tokens", 8}, {"temperature", 0.8}, {"logprobs", 2}}), 2, 5);
    }
    SECTION("without a seed each choice draws its own") {
        const json body = completion_with({{"max_tokens", 12}, {"temperature", 1.0}, {"n", 4}});
        const json first = post_ok(port, "/v1/completions", body);
        check_indices(first, 4);
        CHECK(distinct_texts(first).size() > 1);
        CHECK(distinct_texts(post_ok(port, "/v1/completions", body)) != distinct_texts(first));  // not the same four seeds again
        // n = 1 keeps its seed 0: it repeats.
        const json one = completion_with({{"max_tokens", 12}, {"temperature", 1.0}});
        CHECK(post_ok(port, "/v1/completions", one)["choices"] == post_ok(port, "/v1/completions", one)["choices"]);
    }
}

TEST_CASE("serve: n choices streamed: every chunk carries its choice's index, and each choice adds up to its non-streamed reply", "[server][e2e][choices]") {
#ifndef GEMMA4_HAVE_SERVE
    GEMMA4_SKIP("gemma4 was built without cpp-httplib (no serve command)");
#endif
    using namespace choices_server;
    ServerProcess server({}, "choices_stream");
    const int port = server.port();
    INFO(server.log());
    check_stream_adds_up(port, "/v1/chat/completions", chat_with({{"max_tokens", 16}, {"temperature", 1.0}, {"seed", 7}, {"n", 3}}), 3);
    check_stream_adds_up(port, "/v1/chat/completions",
                         chat_with({{"max_tokens", 10}, {"temperature", 0.7}, {"seed", 2}, {"n", 2}, {"logprobs", true}, {"top_logprobs", 3}}), 2);
    check_stream_adds_up(port, "/v1/completions", completion_with({{"max_tokens", 16}, {"temperature", 1.0}, {"seed", 11}, {"n", 3}, {"logprobs", 2}}), 3);
    // The stream of seed s and n = 3 holds, as choice i, the non-streamed reply of seed s + i.
    json body = chat_with({{"max_tokens", 16}, {"temperature", 1.0}, {"seed", 9}, {"n", 3}, {"stream", true}});
    const StreamedChoices streamed = read_choices(http(port, "POST", "/v1/chat/completions", body.dump()), 3, true);
    for (int i = 0; i < 3; ++i) {
        const json one = post_ok(port, "/v1/chat/completions", chat_with({{"max_tokens", 16}, {"temperature", 1.0}, {"seed", 9 + i}}));
        CHECK(streamed.choices[static_cast<std::size_t>(i)].text == one["choices"][0]["message"]["content"]);
    }
}

TEST_CASE("serve: n choices with a forced tool call or a JSON schema: every choice is constrained and parsed on its own", "[server][e2e][choices][constraint]") {
#ifndef GEMMA4_HAVE_SERVE
    GEMMA4_SKIP("gemma4 was built without cpp-httplib (no serve command)");
#endif
    using namespace choices_server;
    ServerProcess server({}, "choices_constrained");
    const int port = server.port();
    INFO(server.log());
    const json forced = chat_with({{"max_tokens", 120},
                                   {"temperature", 1.0},
                                   {"tools", {kZoneTool}},
                                   {"parallel_tool_calls", false},
                                   {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}},
                                  "What time is it in Tokyo?");
    const json calls = check_seed_plus_i(port, "/v1/chat/completions", forced, 3, 1);
    std::set<std::string> ids;
    for (const json& choice : calls["choices"]) {
        INFO(choice.dump());
        CHECK(choice["finish_reason"] == "tool_calls");
        REQUIRE(choice["message"]["tool_calls"].size() == 1);
        const json& call = choice["message"]["tool_calls"][0];
        CHECK(call["function"]["name"] == "get_time");
        const json args = json::parse(call["function"]["arguments"].get<std::string>());
        REQUIRE(args.contains("zone"));
        CHECK(args["zone"].is_string());
        ids.insert(call["id"].get<std::string>());
    }
    CHECK(ids.size() == 3);  // every call its own id
    json streamed_forced = forced;
    streamed_forced["n"] = 3;
    streamed_forced["seed"] = 1;
    check_stream_adds_up(port, "/v1/chat/completions", streamed_forced, 3);

    const json format = {{"type", "json_schema"}, {"json_schema", {{"name", "point"}, {"schema", kPointSchema}, {"strict", true}}}};
    const json schema_body = chat_with({{"max_tokens", 120}, {"temperature", 1.0}, {"seed", 4}, {"n", 3}, {"response_format", format}}, "A point as JSON.");
    const json points = post_ok(port, "/v1/chat/completions", schema_body);
    check_indices(points, 3);
    for (const json& choice : points["choices"]) {
        CHECK(choice["finish_reason"] == "stop");
        check_point(choice["message"]["content"].get<std::string>());
    }
    const StreamedChoices streamed_points = check_stream_adds_up(port, "/v1/chat/completions", schema_body, 3);
    for (const StreamedChoice& c : streamed_points.choices) check_point(c.text);
    const json completion_points =
        post_ok(port, "/v1/completions", completion_with({{"max_tokens", 120}, {"seed", 5}, {"temperature", 1.0}, {"n", 2}, {"json_schema", kPointSchema}}, "A point:"));
    check_indices(completion_points, 2);
    for (const json& choice : completion_points["choices"]) check_point(choice["text"].get<std::string>());
}

TEST_CASE("serve: n must be a positive integer within --max-n, the queue and the KV budget, else a 400 naming n, and the server goes on", "[server][e2e][choices][errors]") {
#ifndef GEMMA4_HAVE_SERVE
    GEMMA4_SKIP("gemma4 was built without cpp-httplib (no serve command)");
#endif
    using namespace choices_server;
    for (const char* bad : {"--max-n 0", "--max-n -2", "--max-n x", "--prefix-cache -1"}) {
        INFO(bad);
        const auto r = run_cli("serve --model " + tiny_model().string() + " --port 0 " + bad);
        CHECK(r.status == 1);
        CHECK(r.err.find(std::string(bad).substr(0, std::string(bad).find(' '))) != std::string::npos);
    }
    ServerProcess server({"--max-n", "4", "--queue", "3", "--kv-budget", "512K"}, "choices_errors");
    const int port = server.port();
    INFO(server.log());
    const auto still_serves = [&] {
        CHECK(post_ok(port, "/v1/chat/completions", chat_with({{"max_tokens", 2}, {"n", 2}}))["choices"].size() == 2);
    };
    for (const std::string path : {"/v1/chat/completions", "/v1/completions"}) {
        INFO(path);
        const auto body = [&](json n, json fields = json::object()) {
            fields["n"] = std::move(n);
            fields["max_tokens"] = fields.value("max_tokens", 4);
            return (path == "/v1/completions" ? completion_with(fields) : chat_with(fields)).dump();
        };
        for (const json& n : {json(0), json(-1), json("x"), json(1.5), json(true), json::array({2})}) {
            for (const bool stream : {false, true}) {
                require_bad_param(http(port, "POST", path, body(n, {{"stream", stream}})), "n", n.is_number_integer() ? "between 1 and" : "expected an integer");
                still_serves();
            }
        }
        require_bad_param(http(port, "POST", path, body(5)), "n", "at most 4 (this server's --max-n)");
        still_serves();
        // Four fit --max-n but not the queue of three, where they wait together.
        require_bad_param(http(port, "POST", path, body(4)), "n", "(--queue)");
        still_serves();
        // Two choices of up to 300 new tokens fit 512 KiB of KV pages; three do not.
        const json two = json::parse(http(port, "POST", path, body(2, {{"max_tokens", 300}, {"ignore_eos", true}})).body);
        REQUIRE(two["choices"].size() == 2);
        CHECK(two["usage"]["completion_tokens"] == 600);
        require_bad_param(http(port, "POST", path, body(3, {{"max_tokens", 300}})), "n", "more than the budget of 524288 (--kv-budget)");
        still_serves();
    }
    const std::string m = http(port, "GET", "/metrics").body;
    CHECK(metric(m, "gemma4_active_sequences") == 0);
    CHECK(metric(m, "gemma4_queue_depth") == 0);
}

TEST_CASE("serve: an n = 4 request prefills its prompt once, with the prefix cache and without it, and its choices stream together", "[server][e2e][choices][prefix]") {
#ifndef GEMMA4_HAVE_SERVE
    GEMMA4_SKIP("gemma4 was built without cpp-httplib (no serve command)");
#endif
    using namespace choices_server;
    for (const bool cache : {true, false}) {
        INFO((cache ? "prefix cache on" : "--prefix-cache 0"));
        // The slower model: its prefill of a long prompt outlasts the submission of four choices
        // by far, so the others are admitted while the first prefills.
        ServerProcess server(cache ? std::vector<std::string>{} : std::vector<std::string>{"--prefix-cache", "0"},
                             cache ? "choices_prefill" : "choices_prefill_nocache", slower_model());
        const int port = server.port();
        INFO(server.log());
        const auto prefilled = [&] { return metric(http(port, "GET", "/metrics").body, "gemma4_prefilled_tokens_total"); };

        // Completions, not streamed: a prompt of well over a thousand tokens.
        const double before = prefilled();
        const json reply = post_ok(port, "/v1/completions", completion_with({{"max_tokens", 4}, {"temperature", 1.0}, {"seed", 5}, {"n", 4}}, long_text(700)));
        check_indices(reply, 4);
        const auto prompt = reply["usage"]["prompt_tokens"].get<double>();
        REQUIRE(prompt > 1000);
        CHECK(reply["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);  // nothing was cached before
        const double once = prefilled() - before;
        // The prompt once, and at most the last prompt id of each other choice (it feeds that id
        // to sample its first token from its own fork): P + 3, where four prefills would be 4 P.
        CHECK(once >= prompt);
        CHECK(once <= prompt + 3);

        // Chat, streamed: another long prompt, once; the four choices decode together, so their
        // chunks interleave.
        const double before_chat = prefilled();
        const json chat = chat_with({{"max_tokens", 48}, {"ignore_eos", true}, {"temperature", 1.0}, {"seed", 8}, {"n", 4}}, long_text(600));
        json stream_body = chat;
        stream_body["stream"] = true;
        stream_body["stream_options"] = {{"include_usage", true}};
        const StreamedChoices streamed = read_choices(http(port, "POST", "/v1/chat/completions", stream_body.dump()), 4, true);
        const auto chat_prompt = streamed.usage["prompt_tokens"].get<double>();
        REQUIRE(chat_prompt > 900);
        CHECK(streamed.usage["completion_tokens"] == 4 * 48);
        const double chat_once = prefilled() - before_chat;
        CHECK(chat_once >= chat_prompt);
        CHECK(chat_once <= chat_prompt + 3);
        CHECK_FALSE(std::is_sorted(streamed.order.begin(), streamed.order.end()));  // not one choice after the other
        const std::string m = http(port, "GET", "/metrics").body;
        if (!cache) CHECK(metric(m, "gemma4_prefix_cache_hits_total") == 0);
        CHECK(metric(m, "gemma4_kv_pages_in_use") == metric(m, "gemma4_prefix_cache_pages"));
    }
}
