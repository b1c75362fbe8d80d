// Many clients at once: 64 streaming chats from 16 concurrent clients, with clients that hang up
// mid-stream, malformed and oversized bodies and wrong keys mixed in. Every completed stream
// must equal the same prompt run alone (greedy), and afterwards no request may hold KV pages.
#include <catch2/catch.hpp>

#include "server_process.hpp"
#include "support/skip.hpp"

#include <atomic>
#include <mutex>

using namespace gemma4::test;
using nlohmann::json;

namespace {

const std::string kLoadKey = "load-key";

json chat(const std::string& text, int max_tokens, bool stream) {
    return {{"messages", {{{"role", "system"}, {"content", "You are terse."}}, {{"role", "user"}, {"content", text}}}},
            {"max_tokens", max_tokens},
            {"temperature", 0},
            {"stream", stream}};
}

}  // namespace

TEST_CASE("serve under load: concurrent streams equal serial runs, misbehaving clients change nothing", "[server][e2e][load]") {
#ifndef GEMMA4_HAVE_SERVE
    GEMMA4_SKIP("gemma4 was built without cpp-httplib (no serve command)");
#endif
    ServerProcess server({"--api-key", kLoadKey, "--parallel", "8", "--queue", "64", "--max-body", "65536"}, "load");
    const int port = server.port();
    constexpr int kPrompts = 16, kClients = 16, kPerClient = 4, kTokens = 8;
    auto prompt = [](int i) { return "Question number " + std::to_string(i) + ": what comes next after " + std::to_string(i * 7) + "?"; };

    // The reference: each prompt alone, one after the other, not streamed.
    std::vector<std::string> expected(kPrompts);
    for (int i = 0; i < kPrompts; ++i) {
        const auto r = http(port, "POST", "/v1/chat/completions", chat(prompt(i), kTokens, false).dump(), kLoadKey);
        REQUIRE(r.status == 200);
        expected[i] = r.json()["choices"][0]["message"]["content"];
    }

    std::atomic<int> completed{0}, mismatched{0}, failures{0};
    std::mutex report_mutex;
    std::string report;
    std::vector<std::thread> clients;
    for (int c = 0; c < kClients; ++c)
        clients.emplace_back([&, c] {
            for (int k = 0; k < kPerClient; ++k) {
                const int i = (c * kPerClient + k) % kPrompts;
                try {
                    const auto r = http(port, "POST", "/v1/chat/completions", chat(prompt(i), kTokens, true).dump(), kLoadKey);
                    if (r.status != 200) {
                        ++failures;
                        std::lock_guard lock(report_mutex);
                        report += "status " + std::to_string(r.status) + ": " + r.body + "\n";
                        continue;
                    }
                    const auto events = sse_data(r.body);
                    std::string content;
                    for (std::size_t e = 0; e + 1 < events.size(); ++e) {
                        const json delta = json::parse(events[e])["choices"][0]["delta"];
                        if (delta.contains("content") && delta["content"].is_string()) content += delta["content"].get<std::string>();
                    }
                    if (events.back() != "[DONE]" || content != expected[i]) {
                        ++mismatched;
                        std::lock_guard lock(report_mutex);
                        report += "prompt " + std::to_string(i) + ": got '" + content + "' expected '" + expected[i] + "'\n";
                    }
                    ++completed;
                } catch (...) {
                    ++failures;
                }
            }
        });
    // The misbehaving clients, at the same time.
    std::atomic<int> misbehaviour_ok{0};
    std::vector<std::thread> others;
    others.emplace_back([&] {  // hang up after the first event
        for (int k = 0; k < 6; ++k) {
            Connection conn(port);
            conn.send(request_text("POST", "/v1/chat/completions", chat("long story " + std::to_string(k), 200, true).dump(), kLoadKey));
            std::string got;
            while (got.find("data: ") == std::string::npos) {
                const auto part = conn.receive();
                if (part.empty()) break;
                got += part;
            }
            if (got.find("data: ") != std::string::npos) ++misbehaviour_ok;
        }
    });
    others.emplace_back([&] {  // malformed JSON, wrong types
        for (int k = 0; k < 6; ++k) {
            if (http(port, "POST", "/v1/chat/completions", "{\"messages\":[{", kLoadKey).status == 400) ++misbehaviour_ok;
            if (http(port, "POST", "/v1/chat/completions", R"({"messages":[{"role":"user","content":1}]})", kLoadKey).status == 400) ++misbehaviour_ok;
        }
    });
    others.emplace_back([&] {  // oversized bodies, wrong keys
        const std::string huge = chat(std::string(70000, 'x'), 2, false).dump();
        for (int k = 0; k < 6; ++k) {
            Connection conn(port);
            conn.send(request_text("POST", "/v1/chat/completions", huge, kLoadKey));  // may be cut short by the server's answer
            if (parse_response(conn.receive_all()).status == 413) ++misbehaviour_ok;
            if (http(port, "POST", "/v1/chat/completions", chat("x", 2, true).dump(), "wrong-key").status == 401) ++misbehaviour_ok;
        }
    });
    for (auto& t : clients) t.join();
    for (auto& t : others) t.join();
    INFO(report);
    CHECK(failures == 0);
    CHECK(mismatched == 0);
    CHECK(completed == kClients * kPerClient);
    CHECK(misbehaviour_ok == 6 + 12 + 12);

    // Nothing leaked: no running or queued request, no KV page beyond the prefix cache's, no
    // stream still open. A stream closes when its writer next runs after its request ends (it
    // polls every 50 ms), which can be after the engine has gone idle: wait for that too.
    const std::string m = poll_metrics(
        port, kLoadKey,
        [](const std::string& now) {
            return metric(now, "gemma4_active_sequences") == 0 && metric(now, "gemma4_kv_pages_in_use") == metric(now, "gemma4_prefix_cache_pages") &&
                   metric(now, "gemma4_http_streams_open") == 0;
        },
        std::chrono::milliseconds(20), std::chrono::seconds(60));
    INFO(m);
    CHECK(metric(m, "gemma4_active_sequences") == 0);
    CHECK(metric(m, "gemma4_queue_depth") == 0);
    CHECK(metric(m, "gemma4_kv_pages_in_use") == metric(m, "gemma4_prefix_cache_pages"));
    CHECK(metric(m, "gemma4_http_streams_open") == 0);
    CHECK(metric(m, "gemma4_requests_cancelled_total") >= 1);
    CHECK(metric(m, "gemma4_requests_submitted_total") == metric(m, "gemma4_requests_finished_total"));
    const auto health = http(port, "GET", "/health");
    CHECK(health.status == 200);
    CHECK(health.json()["status"] == "ok");
}

TEST_CASE("loadgen against serve: every request completes, and each level reports its rates and time to first token", "[server][e2e][load][loadgen]") {
#ifndef GEMMA4_HAVE_SERVE
    GEMMA4_SKIP("gemma4 was built without cpp-httplib (no serve command)");
#endif
    ServerProcess server({"--api-key", kLoadKey}, "loadgen");
    INFO(server.log());
    const std::string url = "http://127.0.0.1:" + std::to_string(server.port());
    const auto r = run_cli("loadgen --url " + url + " --api-key " + kLoadKey + " --concurrency 1,3 --requests 3 --max-tokens 6 --ignore-eos --json");
    INFO(r.err);
    REQUIRE(r.status == 0);
    const json levels = json::parse(r.out);
    REQUIRE(levels.size() == 2);
    for (std::size_t i = 0; i < 2; ++i) {
        const json& l = levels[i];
        CHECK(l["concurrency"] == (i == 0 ? 1 : 3));
        CHECK(l["requests"] == 3);
        CHECK(l["failed"] == 0);
        CHECK(l["requests_per_s"].get<double>() > 0);
        // The 5 ids after each reply's first arrive within the replies' decode spans, which lie
        // within the level's wall time over which its 6 ids per reply are counted.
        CHECK(l["decode_tokens_per_s"].get<double>() >= 5.0 / 6.0 * l["tokens_per_s"].get<double>() * (1 - 1e-9));
        CHECK(l["saturated_decode_tokens_per_s"].get<double>() >= 0);  // 0 if three 6-token replies never overlap
        if (i == 0) CHECK(l["saturated_decode_tokens_per_s"].get<double>() > 0);  // one client: its own decode rate
        CHECK(l["errors"] == json::object());
        // --ignore-eos: every reply is 6 tokens long, so tokens/s is 6 × requests/s.
        CHECK(l["tokens_per_s"].get<double>() == Approx(6 * l["requests_per_s"].get<double>()).epsilon(1e-9));
        CHECK(l["ttft_p50_s"].get<double>() > 0);
        CHECK(l["ttft_p50_s"].get<double>() <= l["ttft_p99_s"].get<double>());
    }
    // A wrong key: every request fails, and loadgen says so instead of reporting rates.
    const auto bad = run_cli("loadgen --url " + url + " --api-key wrong --concurrency 1 --requests 2 --max-tokens 2 --json");
    REQUIRE(bad.status == 0);
    const json failed = json::parse(bad.out);
    CHECK(failed[0]["failed"] == 2);
    CHECK(failed[0]["errors"] == json{{"HTTP 401", 2}});
    CHECK(bad.err.find("2 request(s) failed: HTTP 401") != std::string::npos);
    CHECK(failed[0]["tokens_per_s"] == 0.0);
}

TEST_CASE("loadgen --unique-prompts shares no prompt prefix, and one prompt sent by several clients is prefilled once", "[server][e2e][load][loadgen]") {
#ifndef GEMMA4_HAVE_SERVE
    GEMMA4_SKIP("gemma4 was built without cpp-httplib (no serve command)");
#endif
    ServerProcess server({}, "loadgen_prompts");
    INFO(server.log());
    const int port = server.port();
    const std::string url = "http://127.0.0.1:" + std::to_string(port);
    const auto unique = run_cli("loadgen --url " + url + " --concurrency 3 --requests 3 --max-tokens 4 --ignore-eos --unique-prompts --json");
    REQUIRE(unique.status == 0);
    CHECK(json::parse(unique.out)[0]["failed"] == 0);
    std::string m = http(port, "GET", "/metrics").body;
    CHECK(metric(m, "gemma4_prefix_cache_hits_total") == 0);
    CHECK(metric(m, "gemma4_prefix_cache_misses_total") == 3);
    // The same prompt from three clients: the first is prefilled, the other two take its state
    // (waiting for it, or from the cache), all but its last id.
    const auto same = run_cli("loadgen --url " + url + " --concurrency 3 --requests 3 --max-tokens 4 --ignore-eos --json");
    REQUIRE(same.status == 0);
    CHECK(json::parse(same.out)[0]["failed"] == 0);
    m = http(port, "GET", "/metrics").body;
    CHECK(metric(m, "gemma4_prefix_cache_hits_total") == 2);
    CHECK(metric(m, "gemma4_prefix_cache_misses_total") == 4);
    const json loadgen_chat = {{"messages", {{{"role", "user"}, {"content", "Write a short poem about the sea."}}}}, {"max_tokens", 1}};
    const auto one = http(port, "POST", "/v1/chat/completions", loadgen_chat.dump());  // loadgen's default prompt
    REQUIRE(one.status == 200);
    const double prompt_tokens = one.json()["usage"]["prompt_tokens"].get<double>();
    CHECK(prompt_tokens > 16);
    CHECK(metric(m, "gemma4_prefix_cache_reused_tokens_total") == 2 * (prompt_tokens - 1));
}

TEST_CASE("serve: ignore_eos runs a reply to max_tokens, and a non-boolean is a 400 naming it", "[server][e2e][load]") {
#ifndef GEMMA4_HAVE_SERVE
    GEMMA4_SKIP("gemma4 was built without cpp-httplib (no serve command)");
#endif
    ServerProcess server({}, "ignore_eos");
    INFO(server.log());
    const int port = server.port();
    for (int seed = 1; seed <= 8; ++seed) {  // sampled replies: some would end early on their own
        json body = chat("tell me", 24, false);
        body["temperature"] = 1.0;
        body["seed"] = seed;
        body["ignore_eos"] = true;
        const auto r = http(port, "POST", "/v1/chat/completions", body.dump());
        REQUIRE(r.status == 200);
        const json reply = json::parse(r.body);
        CHECK(reply["usage"]["completion_tokens"] == 24);
        CHECK(reply["choices"][0]["finish_reason"] == "length");
    }
    json bad = chat("tell me", 4, false);
    bad["ignore_eos"] = "yes";
    const auto r = http(port, "POST", "/v1/chat/completions", bad.dump());
    CHECK(r.status == 400);
    CHECK(json::parse(r.body)["error"]["param"] == "ignore_eos");
}
