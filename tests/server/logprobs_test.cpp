// Log-probabilities in the server: a token's spelling (its text, or `bytes:\xNN` for a byte of a
// split character) and bytes, chat's and the completions' shapes, the request fields and their
// 400s; end to end, chat and completions streamed and not: one entry per generated token but the
// dropped end of turn, logprobs <= 0, alternatives sorted, streams that carry the entries of the
// non-streamed reply.
#include <catch2/catch.hpp>

#include <gemma4/tokenizer/tiny_tokenizer.hpp>

#include "server/chat_request.hpp"
#include "server/openai_encode.hpp"
#include "server/token_logprobs.hpp"
#include "server_process.hpp"
#include "support/skip.hpp"

#include <functional>

using namespace gemma4::test;
using nlohmann::json;

namespace logprobs_server {

const gemma4::Tokenizer& tiny_tokenizer() {
    static const gemma4::Tokenizer t = [] {
        const auto info = gemma4::write_tiny_tokenizer(temp_dir("logprobs_tokenizer"));
        return gemma4::Tokenizer::from_file(info.tokenizer_json);
    }();
    return t;
}

std::int32_t id_of(const std::string& piece) { return tiny_tokenizer().token_to_id(piece).value(); }

/// A 400 in OpenAI's shape naming `param`.
void require_400_naming(const HttpResponse& r, const std::string& param) {
    INFO(r.body);
    REQUIRE(r.status == 400);
    CHECK(r.json()["error"]["type"] == "invalid_request_error");
    CHECK(r.json()["error"]["param"] == param);
}

void require_parse_error(const std::function<void()>& parse, const std::string& param) {
    try {
        parse();
        FAIL("no error for " << param);
    } catch (const gemma4::server::ApiError& e) {
        CHECK(e.status == 400);
        CHECK(e.param == param);
    }
}

json chat_body_with(json fields) {
    fields["messages"] = {{{"role", "user"}, {"content", "Tell me about the hills"}}};
    return fields;
}

json completion_body_with(json fields) {
    fields["prompt"] = "When the sun rises";
    return fields;
}

/// Checks one chat `logprobs.content` entry: a logprob <= 0, bytes that spell the token (its
/// text's bytes, or the byte of a `bytes:\xNN` spelling), `top` alternatives most likely first.
void check_chat_entry(const json& e, std::size_t top) {
    INFO(e.dump());
    CHECK(e["logprob"].get<double>() <= 0);
    const std::string token = e["token"];
    const auto bytes = e["bytes"].get<std::vector<int>>();
    if (token.rfind("bytes:\\x", 0) == 0) {
        REQUIRE(bytes.size() == 1);
        CHECK(std::stoi(token.substr(8), nullptr, 16) == bytes[0]);
        CHECK(bytes[0] >= 0x80);
    } else {
        CHECK(std::string(bytes.begin(), bytes.end()) == token);
    }
    REQUIRE(e["top_logprobs"].size() == top);
    for (std::size_t k = 1; k < top; ++k) CHECK(e["top_logprobs"][k]["logprob"].get<double>() <= e["top_logprobs"][k - 1]["logprob"].get<double>());
}

/// The chat chunks' logprobs.content entries of a stream, concatenated; and its usage.
std::pair<json, json> streamed_chat_entries(int port, json body) {
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    const auto r = http(port, "POST", "/v1/chat/completions", body.dump());
    REQUIRE(r.status == 200);
    json entries = json::array(), usage;
    for (const std::string& event : sse_data(r.body)) {
        if (event == "[DONE]") break;
        const json chunk = json::parse(event);
        if (chunk["choices"].empty()) {
            usage = chunk["usage"];
            continue;
        }
        const json& lp = chunk["choices"][0]["logprobs"];
        if (lp.is_null()) continue;
        for (const json& e : lp["content"]) entries.push_back(e);
    }
    return {entries, usage};
}

/// The completions chunks' logprobs, their parallel arrays concatenated.
json streamed_completion_logprobs(int port, json body) {
    body["stream"] = true;
    const auto r = http(port, "POST", "/v1/completions", body.dump());
    REQUIRE(r.status == 200);
    json out = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}, {"text_offset", json::array()}};
    for (const std::string& event : sse_data(r.body)) {
        if (event == "[DONE]") break;
        const json lp = json::parse(event)["choices"][0]["logprobs"];
        if (lp.is_null()) continue;
        for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
            for (const json& v : lp[key]) out[key].push_back(v);
    }
    return out;
}

}  // namespace logprobs_server

TEST_CASE("a token's logprob spelling: its text and bytes, or OpenAI's bytes: spelling for a byte of a split character", "[server][logprobs]") {
    using namespace logprobs_server;
    using gemma4::server::spell_token;
    const auto e2 = spell_token(tiny_tokenizer(), id_of("<0xE2>"));
    CHECK(e2.text == "bytes:\\xe2");
    CHECK(e2.bytes == std::vector<int>{0xE2});
    const auto newline = spell_token(tiny_tokenizer(), id_of("<0x0A>"));  // a whole character: its text
    CHECK(newline.text == "\n");
    CHECK(newline.bytes == std::vector<int>{10});
    const auto word = spell_token(tiny_tokenizer(), id_of("\u2581the"));
    CHECK(word.text == " the");
    CHECK(word.bytes == std::vector<int>{' ', 't', 'h', 'e'});
    CHECK(spell_token(tiny_tokenizer(), id_of("<turn|>")).text == "<turn|>");
    CHECK(gemma4::server::count_characters("a\xC3\xA9\xE2\x82\xAC") == 3);
}

TEST_CASE("chat's and the completions' logprobs shapes, the completions' alternatives in their order", "[server][logprobs]") {
    using namespace logprobs_server;
    using gemma4::IdLogprob;
    const std::int32_t the = id_of("\u2581the"), e2 = id_of("<0xE2>"), a = id_of("a");
    const std::vector<gemma4::server::LogprobEntry> entries = {
        {{the, -0.25, {IdLogprob{the, -0.25}, IdLogprob{e2, -1.5}, IdLogprob{a, -2.0}}}, 0},
        {{e2, -3.0, {IdLogprob{a, -0.5}, IdLogprob{e2, -3.0}, IdLogprob{e2, -4.0}}}, 4},  // a repeated text keeps its first value
    };
    const json chat = gemma4::server::chat_logprobs(tiny_tokenizer(), entries);
    REQUIRE(chat["content"].size() == 2);
    CHECK(chat["refusal"].is_null());
    CHECK(chat["content"][0] == json::parse(R"({"token":" the","logprob":-0.25,"bytes":[32,116,104,101],"top_logprobs":[
        {"token":" the","logprob":-0.25,"bytes":[32,116,104,101]},{"token":"bytes:\\xe2","logprob":-1.5,"bytes":[226]},
        {"token":"a","logprob":-2.0,"bytes":[97]}]})"));
    check_chat_entry(chat["content"][1], 3);

    const std::string text = gemma4::server::completion_logprobs(tiny_tokenizer(), entries).dump();
    CHECK(text == R"({"tokens":[" the","bytes:\\xe2"],"token_logprobs":[-0.25,-3.0],)"
                  R"("top_logprobs":[{" the":-0.25,"bytes:\\xe2":-1.5,"a":-2.0},{"a":-0.5,"bytes:\\xe2":-3.0}],"text_offset":[0,4]})");
}

TEST_CASE("logprobs request fields: chat's logprobs and top_logprobs, the completions' logprobs, echo refused", "[server][logprobs][errors]") {
    using namespace logprobs_server;
    using gemma4::server::parse_chat_request;
    using gemma4::server::parse_completion_sampling;
    CHECK(parse_chat_request(chat_body_with({})).sampling.logprobs == -1);
    CHECK(parse_chat_request(chat_body_with({{"logprobs", false}})).sampling.logprobs == -1);
    CHECK(parse_chat_request(chat_body_with({{"logprobs", true}})).sampling.logprobs == 0);
    CHECK(parse_chat_request(chat_body_with({{"logprobs", true}, {"top_logprobs", 20}})).sampling.logprobs == 20);
    CHECK(parse_completion_sampling(completion_body_with({})).logprobs == -1);
    CHECK(parse_completion_sampling(completion_body_with({{"logprobs", nullptr}})).logprobs == -1);
    CHECK(parse_completion_sampling(completion_body_with({{"logprobs", 0}, {"echo", false}})).logprobs == 0);
    CHECK(parse_completion_sampling(completion_body_with({{"logprobs", 5}})).logprobs == 5);
    const std::vector<std::pair<json, std::string>> bad_chat = {
        {{{"top_logprobs", 2}}, "top_logprobs"},  // without logprobs: true
        {{{"logprobs", false}, {"top_logprobs", 2}}, "top_logprobs"},
        {{{"logprobs", true}, {"top_logprobs", 21}}, "top_logprobs"},
        {{{"logprobs", true}, {"top_logprobs", -1}}, "top_logprobs"},
        {{{"logprobs", true}, {"top_logprobs", "3"}}, "top_logprobs"},
        {{{"logprobs", 1}}, "logprobs"},
    };
    for (const auto& [fields, param] : bad_chat) require_parse_error([&] { parse_chat_request(chat_body_with(fields)); }, param);
    const std::vector<std::pair<json, std::string>> bad_completion = {
        {{{"logprobs", 21}}, "logprobs"}, {{{"logprobs", -1}}, "logprobs"}, {{{"logprobs", true}}, "logprobs"},
        {{{"logprobs", 1.5}}, "logprobs"}, {{{"echo", true}}, "echo"},     {{{"echo", "yes"}}, "echo"},
    };
    for (const auto& [fields, param] : bad_completion) require_parse_error([&] { parse_completion_sampling(completion_body_with(fields)); }, param);
}

TEST_CASE("serve: chat logprobs, streamed and not, one entry per token but the end of turn", "[server][e2e][logprobs]") {
#ifndef GEMMA4_HAVE_SERVE
    GEMMA4_SKIP("gemma4 was built without cpp-httplib (no serve command)");
#endif
    using namespace logprobs_server;
    ServerProcess server({}, "logprobs_chat");
    const int port = server.port();
    INFO(server.log());
    SECTION("greedy: the sampled token is the first alternative; a stream carries the same entries") {
        const json body = chat_body_with({{"max_tokens", 12}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 3}});
        const auto r = http(port, "POST", "/v1/chat/completions", body.dump());
        REQUIRE(r.status == 200);
        const json reply = r.json();
        const json& content = reply["choices"][0]["logprobs"]["content"];
        const auto tokens = reply["usage"]["completion_tokens"].get<std::size_t>();
        const bool ended = reply["choices"][0]["finish_reason"] == "stop";
        CHECK(content.size() == tokens - (ended ? 1 : 0));
        REQUIRE(content.size() >= 2);
        for (const json& e : content) {
            check_chat_entry(e, 3);
            CHECK(e["top_logprobs"][0]["token"] == e["token"]);
            CHECK(e["top_logprobs"][0]["logprob"] == e["logprob"]);
        }
        const auto [streamed, usage] = streamed_chat_entries(port, body);
        CHECK(streamed == content);
        CHECK(usage["completion_tokens"] == tokens);
    }
    SECTION("a forced end of turn after min_tokens is not listed; without logprobs the field is null") {
        const std::int32_t end = id_of("<turn|>");
        json bias = json::object();
        bias[std::to_string(end)] = 100;
        const json body = chat_body_with({{"max_tokens", 10}, {"temperature", 1}, {"seed", 4}, {"logit_bias", bias}, {"min_tokens", 3}, {"logprobs", true}});
        const json reply = http(port, "POST", "/v1/chat/completions", body.dump()).json();
        CHECK(reply["usage"]["completion_tokens"] == 4);
        const json& content = reply["choices"][0]["logprobs"]["content"];
        REQUIRE(content.size() == 3);
        for (const json& e : content) {
            check_chat_entry(e, 0);
            CHECK(e["token"] != "<turn|>");
        }
        const auto [streamed, usage] = streamed_chat_entries(port, body);
        CHECK(streamed == content);
        json plain = body;
        plain.erase("logprobs");
        CHECK(http(port, "POST", "/v1/chat/completions", plain.dump()).json()["choices"][0]["logprobs"].is_null());
    }
    SECTION("a forced byte of a split character is spelled bytes:\\xe2") {
        json bias = json::object();
        bias[std::to_string(id_of("<0xE2>"))] = 100;
        const json body = chat_body_with({{"max_tokens", 2}, {"temperature", 0}, {"logit_bias", bias}, {"logprobs", true}, {"top_logprobs", 1}});
        const json content = http(port, "POST", "/v1/chat/completions", body.dump()).json()["choices"][0]["logprobs"]["content"];
        REQUIRE(content.size() == 2);
        for (const json& e : content) {
            CHECK(e["token"] == "bytes:\\xe2");
            CHECK(e["bytes"] == json::array({226}));
            CHECK(e["logprob"].get<double>() > -1e-6);  // +100 leaves no other choice
        }
    }
    SECTION("bad fields are 400s naming them, and the server goes on") {
        for (const auto& [fields, param] : std::vector<std::pair<json, std::string>>{{{{"top_logprobs", 2}}, "top_logprobs"},
                                                                                      {{{"logprobs", true}, {"top_logprobs", 21}}, "top_logprobs"},
                                                                                      {{{"logprobs", "yes"}}, "logprobs"}})
            require_400_naming(http(port, "POST", "/v1/chat/completions", chat_body_with(fields).dump()), param);
        CHECK(http(port, "POST", "/v1/chat/completions", chat_body_with({{"max_tokens", 2}}).dump()).status == 200);
    }
}

TEST_CASE("serve: completion logprobs, streamed and not: tokens, token_logprobs, top_logprobs in order, text_offset", "[server][e2e][logprobs]") {
#ifndef GEMMA4_HAVE_SERVE
    GEMMA4_SKIP("gemma4 was built without cpp-httplib (no serve command)");
#endif
    using namespace logprobs_server;
    ServerProcess server({}, "logprobs_completion");
    const int port = server.port();
    INFO(server.log());
    const json body = completion_body_with({{"max_tokens", 16}, {"temperature", 0.8}, {"seed", 21}, {"logprobs", 4}});
    const auto r = http(port, "POST", "/v1/completions", body.dump());
    REQUIRE(r.status == 200);
    const auto reply = nlohmann::ordered_json::parse(r.body);  // keeps the order of each top_logprobs object
    const auto& lp = reply["choices"][0]["logprobs"];
    const auto n = lp["tokens"].size();
    const bool ended = reply["choices"][0]["finish_reason"] == "stop";
    CHECK(n == reply["usage"]["completion_tokens"].get<std::size_t>() - (ended ? 1 : 0));
    REQUIRE(n >= 2);
    REQUIRE(lp["token_logprobs"].size() == n);
    REQUIRE(lp["top_logprobs"].size() == n);
    REQUIRE(lp["text_offset"].size() == n);
    const auto text = reply["choices"][0]["text"].get<std::string>();
    for (std::size_t i = 0; i < n; ++i) {
        INFO("token " << i << ": " << lp["tokens"][i].dump());
        CHECK(lp["token_logprobs"][i].get<double>() <= 0);
        const auto& top = lp["top_logprobs"][i];
        CHECK(top.size() >= 1);  // 4 alternatives, fewer where two share a text
        CHECK(top.size() <= 4);
        double previous = 0;
        for (const auto& [token, value] : top.items()) {
            CHECK(value.get<double>() <= previous);
            previous = value.get<double>();
        }
        const auto offset = lp["text_offset"][i].get<std::int64_t>();
        CHECK(offset <= gemma4::server::count_characters(text));
        if (i > 0) CHECK(offset >= lp["text_offset"][i - 1].get<std::int64_t>());
    }
    CHECK(lp["text_offset"][0] == 0);
    // A stream's chunks carry the same entries.
    const json streamed = streamed_completion_logprobs(port, body);
    CHECK(streamed == json::parse(lp.dump()));
    require_400_naming(http(port, "POST", "/v1/completions", completion_body_with({{"logprobs", 21}}).dump()), "logprobs");
    require_400_naming(http(port, "POST", "/v1/completions", completion_body_with({{"echo", true}}).dump()), "echo");
    CHECK(http(port, "POST", "/v1/completions", completion_body_with({{"max_tokens", 2}}).dump()).json()["choices"][0]["logprobs"].is_null());
}
