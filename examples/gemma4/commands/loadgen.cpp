// gemma4 loadgen: load on a running `gemma4 serve` (or any OpenAI-compatible server) at several
// concurrency levels: requests/s, generated tokens/s, decode tokens/s and time to first token
// (p50, p99), each request a streamed chat completion. Two decode rates (server/load_stats.hpp):
// over the time at least one reply was past its first token (with one client the per-stream
// speed), and over the time every client's reply was (the rate at full occupancy, without the
// stretches in which the server also reads new prompts). Failed requests are counted by reason.
#include "../cli.hpp"
#include "../server/load_stats.hpp"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

namespace cmd_loadgen {

using namespace gemma4;
using nlohmann::json;
using clock_type = std::chrono::steady_clock;

using server::LoadLevel;
using server::LoadSample;

/// One streamed request; reads the SSE events as they arrive.
LoadSample one_request(const std::string& url, const std::string& key, const std::string& body) {
    httplib::Client client(url);
    client.set_read_timeout(600);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = body;
    req.headers = {{"Content-Type", "application/json"}};
    if (!key.empty()) req.headers.emplace("Authorization", "Bearer " + key);
    LoadSample sample;
    std::string pending;
    const auto start = clock_type::now();
    req.content_receiver = [&](const char* data, std::size_t size, std::uint64_t, std::uint64_t) {
        pending.append(data, size);
        for (auto end = pending.find("\n\n"); end != std::string::npos; end = pending.find("\n\n")) {
            const std::string event = pending.substr(0, end);
            pending.erase(0, end + 2);
            if (!event.starts_with("data: ") || event == "data: [DONE]") continue;
            const json chunk = json::parse(event.substr(6), nullptr, false);
            if (chunk.is_discarded()) continue;
            if (chunk.contains("usage") && chunk["usage"].is_object()) sample.tokens = chunk["usage"].value("completion_tokens", 0);
            if (chunk.contains("choices") && chunk["choices"].is_array() && !chunk["choices"].empty()) {
                const json& delta = chunk["choices"][0]["delta"];
                bool text = false;
                for (const char* f : {"content", "reasoning_content"})
                    text = text || (delta.contains(f) && delta[f].is_string() && !delta[f].get<std::string>().empty());
                if (!text) continue;
                sample.deltas.push_back(clock_type::now());
                if (sample.ttft < 0) {
                    sample.first_at = sample.deltas.back();
                    sample.ttft = std::chrono::duration<double>(sample.first_at - start).count();
                }
            }
        }
        return true;
    };
    const auto result = client.send(req);
    sample.end_at = clock_type::now();
    sample.ok = result && result->status == 200;
    if (!result) sample.error = "connection: " + httplib::to_string(result.error());
    else if (result->status != 200) sample.error = "HTTP " + std::to_string(result->status);
    return sample;
}

int run(cli::Args& args) {
    const std::string url = args.get("url").value_or("http://127.0.0.1:8080");
    const std::string key = args.get("api-key").value_or("");
    const auto levels = cli::parse_id_list(args.get("concurrency").value_or("1,4,16"), "loadgen: --concurrency");
    const auto requests = args.number<int>("requests", 32);
    const auto max_tokens = args.number<int>("max-tokens", 32);
    const std::string prompt = args.get("prompt").value_or("Write a short poem about the sea.");
    const auto model = args.get("model");
    const bool as_json = args.flag("json");
    const bool ignore_eos = args.flag("ignore-eos");
    const bool unique = args.flag("unique-prompts");
    args.finish();
    if (requests < 1) throw InvalidArgument("loadgen: --requests must be at least 1");
    if (max_tokens < 1) throw InvalidArgument("loadgen: --max-tokens must be at least 1");
    json body = {{"messages", {{{"role", "user"}, {"content", prompt}}}},
                 {"max_tokens", max_tokens},
                 {"stream", true},
                 {"stream_options", {{"include_usage", true}}}};
    if (model) body["model"] = *model;
    if (ignore_eos) body["ignore_eos"] = true;
    // With --unique-prompts the message starts with the request's number, so that no two prompts
    // share the page of ids the server's prefix cache needs before it reuses anything.
    auto request_body = [&](int number) {
        if (!unique) return body.dump();
        json b = body;
        b["messages"][0]["content"] = std::to_string(number) + ". " + prompt;
        return b.dump();
    };

    json report = json::array();
    int numbered = 0;  // requests of earlier levels: --unique-prompts numbers never repeat across levels
    if (!as_json)
        std::printf("%11s %9s %10s %10s %10s %11s %11s %11s %8s\n", "concurrency", "requests", "req/s", "tokens/s", "decode/s",
                    "all busy/s", "ttft p50 s", "ttft p99 s", "failed");
    for (const std::int32_t c : levels) {
        if (c < 1) throw InvalidArgument("loadgen: --concurrency values must be at least 1");
        LoadLevel level;
        level.concurrency = c;
        std::atomic<int> next{0};
        std::mutex mutex;
        const auto start = clock_type::now();
        std::vector<std::thread> threads;
        for (int t = 0; t < c; ++t)
            threads.emplace_back([&] {
                for (int number = next.fetch_add(1); number < requests; number = next.fetch_add(1)) {
                    LoadSample s = one_request(url, key, request_body(numbered + number));
                    std::lock_guard lock(mutex);
                    level.samples.push_back(s);
                }
            });
        for (auto& t : threads) t.join();
        numbered += requests;
        level.seconds = std::chrono::duration<double>(clock_type::now() - start).count();
        const double rps = static_cast<double>(level.ok()) / level.seconds, tps = static_cast<double>(level.tokens()) / level.seconds;
        const auto failed = static_cast<std::int64_t>(level.samples.size()) - level.ok();
        const auto errors = level.errors();
        for (const auto& [reason, count] : errors)
            std::fprintf(stderr, "loadgen: concurrency %d: %lld request(s) failed: %s\n", c, static_cast<long long>(count), reason.c_str());
        if (as_json)
            report.push_back({{"concurrency", c}, {"requests", requests}, {"requests_per_s", rps}, {"tokens_per_s", tps},
                              {"decode_tokens_per_s", level.decode_tokens_per_s()},
                              {"saturated_decode_tokens_per_s", level.saturated_decode_tokens_per_s()},
                              {"ttft_p50_s", level.ttft_percentile(0.5)}, {"ttft_p99_s", level.ttft_percentile(0.99)},
                              {"failed", failed}, {"errors", errors}});
        else
            std::printf("%11d %9d %10.2f %10.1f %10.1f %11.1f %11.3f %11.3f %8lld\n", c, requests, rps, tps, level.decode_tokens_per_s(),
                        level.saturated_decode_tokens_per_s(), level.ttft_percentile(0.5), level.ttft_percentile(0.99),
                        static_cast<long long>(failed));
        std::fflush(stdout);
    }
    if (as_json) std::printf("%s\n", report.dump().c_str());
    return 0;
}

const cli::Command reg{"loadgen", "load on an OpenAI-compatible server: requests/s, tokens/s, time to first token at several concurrencies",
                       cli::Options{
                           {"url", "URL", "server (default: http://127.0.0.1:8080)"},
                           {"api-key", "KEY", "sent as 'Authorization: Bearer KEY'"},
                           {"concurrency", "LIST", "comma-separated client counts (default: 1,4,16)"},
                           {"requests", "N", "requests per concurrency level (default: 32)"},
                           {"max-tokens", "N", "max_tokens of each request (default: 32)"},
                           {"prompt", "TEXT", "the user message"},
                           {"model", "NAME", "the request's model field"},
                           {"json", "", "print one JSON array instead of a table"},
                           {"ignore-eos", "", "ask for replies of exactly --max-tokens (\"ignore_eos\": true, llama-server's and vLLM's field)"},
                           {"unique-prompts", "", "start each request's message with its own number (no prompt prefix shared between requests)"},
                       },
                       run};

}  // namespace cmd_loadgen
