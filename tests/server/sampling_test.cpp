// `gemma4 serve` end to end: the sampling fields beyond temperature and top-p reach the sampler
// (logit_bias forcing an id, min_tokens holding back the end of turn, frequency/presence and
// repetition penalties against forced ids, seeds), their bad values are 400s naming the field,
// and the model's names (--served-model-name, --alias, --accept-any-model).
#include <catch2/catch.hpp>

#include "server_process.hpp"
#include "support/skip.hpp"

using namespace gemma4::test;
using nlohmann::json;

namespace sampling_e2e {

/// The ids `text` tokenizes to (special-token spellings as their one id).
std::vector<std::int32_t> ids_of(int port, const std::string& text) {
    const auto r = http(port, "POST", "/tokenize", json{{"content", text}}.dump());
    REQUIRE(r.status == 200);
    return r.json()["tokens"].get<std::vector<std::int32_t>>();
}

/// The text of `id` repeated `n` times.
std::string repeated_text(int port, std::int32_t id, std::size_t n) {
    const auto r = http(port, "POST", "/detokenize", json{{"tokens", std::vector<std::int32_t>(n, id)}}.dump());
    REQUIRE(r.status == 200);
    return r.json()["content"];
}

json completion(int port, json body) {
    body["prompt"] = "Once upon";
    const auto r = http(port, "POST", "/v1/completions", body.dump());
    INFO(body.dump() << " -> " << r.body);
    REQUIRE(r.status == 200);
    return r.json();
}

std::string completion_text(int port, const json& body) { return completion(port, body)["choices"][0]["text"]; }

/// The concatenated text of a streamed completion.
std::string streamed_completion_text(int port, json body) {
    body["prompt"] = "Once upon";
    body["stream"] = true;
    const auto r = http(port, "POST", "/v1/completions", body.dump());
    REQUIRE(r.status == 200);
    const auto events = sse_data(r.body);
    REQUIRE(events.back() == "[DONE]");
    std::string text;
    for (std::size_t i = 0; i + 1 < events.size(); ++i) text += json::parse(events[i])["choices"][0]["text"].get<std::string>();
    return text;
}

json chat(int port, json body, const std::string& model = "") {
    body["messages"] = {{{"role", "user"}, {"content", "Hello there"}}};
    if (!model.empty()) body["model"] = model;
    const auto r = http(port, "POST", "/v1/chat/completions", body.dump());
    INFO(body.dump() << " -> " << r.body);
    REQUIRE(r.status == 200);
    return r.json();
}

}  // namespace sampling_e2e

TEST_CASE("serve: logit_bias, min_tokens, penalties and seeds reach the sampler, and bad values are 400s naming them", "[server][e2e][sampling]") {
#ifndef GEMMA4_HAVE_SERVE
    GEMMA4_SKIP("gemma4 was built without cpp-httplib (no serve command)");
#endif
    using namespace sampling_e2e;
    ServerProcess server({}, "sampling");
    const int port = server.port();
    INFO(server.log());
    const std::int32_t word = ids_of(port, "the").at(0);
    const std::vector<std::int32_t> end_ids = ids_of(port, "<turn|>");
    REQUIRE(end_ids.size() == 1);
    const std::int32_t end_of_turn = end_ids[0];
    json word_bias = json::object();  // logits are soft-capped to ±30: +100 leaves no other choice
    word_bias[std::to_string(word)] = 100;

    SECTION("+100 forces the id, sampled or greedy, streamed or not, on both endpoints") {
        const std::string expected = repeated_text(port, word, 5);
        CHECK(completion_text(port, {{"max_tokens", 5}, {"temperature", 1}, {"seed", 3}, {"logit_bias", word_bias}}) == expected);
        CHECK(streamed_completion_text(port, {{"max_tokens", 5}, {"temperature", 0}, {"logit_bias", word_bias}}) == expected);
        const json r = chat(port, {{"max_tokens", 5}, {"temperature", 1}, {"logit_bias", word_bias}});
        CHECK(r["choices"][0]["message"]["content"] == expected);
        CHECK(r["usage"]["completion_tokens"] == 5);
    }
    SECTION("min_tokens holds back the end of turn that a bias forces") {
        json end_bias = json::object();
        end_bias[std::to_string(end_of_turn)] = 100;
        const json at_once = chat(port, {{"max_tokens", 10}, {"temperature", 0}, {"logit_bias", end_bias}});
        CHECK(at_once["usage"]["completion_tokens"] == 1);
        CHECK(at_once["choices"][0]["finish_reason"] == "stop");
        const json held = chat(port, {{"max_tokens", 10}, {"temperature", 0}, {"logit_bias", end_bias}, {"min_tokens", 3}});
        CHECK(held["usage"]["completion_tokens"] == 4);  // three held, then the end of turn
        CHECK(held["choices"][0]["finish_reason"] == "stop");
        const json text = completion(port, {{"max_tokens", 10}, {"temperature", 1}, {"seed", 5}, {"logit_bias", end_bias}, {"min_tokens", 6}});
        CHECK(text["usage"]["completion_tokens"] == 7);
    }
    SECTION("frequency_penalty wears a forced id down; presence_penalty takes from it only once") {
        // l + 100 - 2c falls below the best other logit (both within ±30) after 20 to 80 ids.
        const std::string run_of_100 = repeated_text(port, word, 100), run_of_20 = repeated_text(port, word, 20);
        const std::string worn = completion_text(port, {{"max_tokens", 100}, {"temperature", 0}, {"logit_bias", word_bias}, {"frequency_penalty", 2}});
        CHECK(worn != run_of_100);
        CHECK(worn.rfind(run_of_20, 0) == 0);
        CHECK(completion_text(port, {{"max_tokens", 100}, {"temperature", 0}, {"logit_bias", word_bias}, {"presence_penalty", 2}}) == run_of_100);
        CHECK(completion_text(port, {{"max_tokens", 100}, {"temperature", 0}, {"logit_bias", word_bias}, {"frequency_penalty", -2}}) == run_of_100);
    }
    SECTION("repetition_penalty drops a forced id whose logit is negative once it is repeated, unless repeat_last_n is 0") {
        // A huge penalty multiplies a negative logit far below -100; a positive one becomes ~0
        // and the bias still forces it. Among a few ids, one has a negative logit at the second step.
        bool dropped = false;
        for (const std::int32_t id : ids_of(port, "the cat sat on a mat, and it is one of two")) {
            json bias = json::object();
            bias[std::to_string(id)] = 100;
            const std::string forced_run = repeated_text(port, id, 6);
            const json body = {{"max_tokens", 6}, {"temperature", 0}, {"logit_bias", bias}, {"repetition_penalty", 1e6}};
            if (completion_text(port, body) == forced_run) continue;
            dropped = true;
            json off = body, last_one = body;
            off["repeat_last_n"] = 0;
            CHECK(completion_text(port, off) == forced_run);
            last_one["repeat_last_n"] = 1;
            CHECK(completion_text(port, last_one) != forced_run);
            break;
        }
        CHECK(dropped);
    }
    SECTION("a seed gives the same reply, streamed or not; other seeds other replies") {
        const json body = {{"max_tokens", 8}, {"temperature", 1.5}, {"seed", 99}};
        const std::string first = completion_text(port, body);
        CHECK(completion_text(port, body) == first);
        CHECK(streamed_completion_text(port, body) == first);
        int differ = 0;
        for (int seed = 100; seed < 104; ++seed) {
            json other = body;
            other["seed"] = seed;
            differ += completion_text(port, other) != first;
        }
        CHECK(differ > 0);
    }
    SECTION("bad values are 400s naming the field, and the server goes on") {
        const std::vector<std::pair<json, std::string>> bad = {
            {{{"logit_bias", {{"99999", 1}}}}, "logit_bias"},  // beyond the vocabulary
            {{{"logit_bias", {{"x1", 1}}}}, "logit_bias"},
            {{{"logit_bias", {{std::to_string(word), 150}}}}, "logit_bias"},
            {{{"logit_bias", json::array({1})}}, "logit_bias"},
            {{{"frequency_penalty", 2.5}}, "frequency_penalty"},
            {{{"presence_penalty", -3}}, "presence_penalty"},
            {{{"repetition_penalty", 0}}, "repetition_penalty"},
            {{{"repeat_last_n", -5}}, "repeat_last_n"},
            {{{"min_tokens", -1}}, "min_tokens"},
            {{{"min_tokens", 9}, {"max_tokens", 2}}, "min_tokens"},
            {{{"seed", "abc"}}, "seed"},
        };
        for (const auto& [fields, param] : bad) {
            json body = fields;
            body["messages"] = {{{"role", "user"}, {"content", "x"}}};
            require_bad_param(http(port, "POST", "/v1/chat/completions", body.dump()), param);
            body.erase("messages");
            body["prompt"] = "x";
            require_bad_param(http(port, "POST", "/v1/completions", body.dump()), param);
        }
        CHECK(chat(port, {{"max_tokens", 2}})["object"] == "chat.completion");
    }
}

TEST_CASE("serve --served-model-name and --alias: /v1/models lists the names, other names are 404 unless --accept-any-model",
          "[server][e2e][models]") {
#ifndef GEMMA4_HAVE_SERVE
    GEMMA4_SKIP("gemma4 was built without cpp-httplib (no serve command)");
#endif
    using namespace sampling_e2e;
    {
        ServerProcess server({"--served-model-name", "gemma-tiny", "--alias", "tiny-latest", "--alias", "gpt-4o-mini", "--alias", "tiny-latest"},
                             "model_names");
        const int port = server.port();
        INFO(server.log());
        const json models = http(port, "GET", "/v1/models").json();
        std::vector<std::string> ids;
        for (const auto& m : models["data"]) ids.push_back(m["id"]);
        CHECK(ids == std::vector<std::string>{"gemma-tiny", "tiny-latest", "gpt-4o-mini"});  // each once, the served name first
        for (const std::string name : {"gemma-tiny", "tiny-latest", "gpt-4o-mini"}) {
            INFO(name);
            CHECK(chat(port, {{"max_tokens", 2}}, name)["model"] == "gemma-tiny");
            CHECK(http(port, "GET", "/v1/models/" + name).json()["id"] == name);
        }
        CHECK(chat(port, {{"max_tokens", 2}})["model"] == "gemma-tiny");  // no model named: the served one
        // The folder's name is replaced by --served-model-name.
        for (const std::string name : {"tiny", "gpt-4"}) {
            const auto r = http(port, "POST", "/v1/chat/completions",
                                json{{"model", name}, {"messages", {{{"role", "user"}, {"content", "x"}}}}}.dump());
            INFO(r.body);
            CHECK(r.status == 404);
            CHECK(r.json()["error"]["code"] == "model_not_found");
            CHECK(r.json()["error"]["param"] == "model");
            CHECK(http(port, "POST", "/v1/completions", json{{"model", name}, {"prompt", "x"}}.dump()).status == 404);
            CHECK(http(port, "GET", "/v1/models/" + name).status == 404);
        }
    }
    {
        ServerProcess server({"--alias", "tiny-latest", "--accept-any-model"}, "any_model");
        const int port = server.port();
        INFO(server.log());
        const json models = http(port, "GET", "/v1/models").json();
        REQUIRE(models["data"].size() == 2);
        CHECK(models["data"][0]["id"] == "tiny");  // the folder's name, then the alias
        CHECK(models["data"][1]["id"] == "tiny-latest");
        CHECK(chat(port, {{"max_tokens", 2}}, "gpt-4")["model"] == "tiny");
        CHECK(http(port, "POST", "/v1/completions", json{{"model", "anything"}, {"prompt", "x"}, {"max_tokens", 2}}.dump()).status == 200);
        CHECK(http(port, "GET", "/v1/models/gpt-4").status == 404);  // the listing knows only the served names
    }
    const auto empty = run_cli("serve --model " + tiny_model().string() + " --port 0 --alias ''");
    CHECK(empty.status == 1);
    CHECK(empty.err.find("--served-model-name and --alias need a non-empty name") != std::string::npos);
}
