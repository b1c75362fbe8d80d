// Responses in OpenAI's shapes: chat.completion / chat.completion.chunk, text_completion, and
// the Server-Sent Events framing of a stream (`data: {json}\n\n` ... `data: [DONE]\n\n`).
#pragma once

#include "reply_parser.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>

namespace gemma4::server {

inline std::string sse_event(const nlohmann::json& payload) {
    return "data: " + payload.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

inline std::int64_t unix_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// "chatcmpl-…" / "call_…": unique within the process and unpredictable across restarts.
inline std::string make_id(std::string_view prefix) {
    static std::atomic<std::uint64_t> counter{0};
    static const std::uint64_t salt = std::random_device{}() * 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(unix_seconds());
    const std::uint64_t n = (counter.fetch_add(1) + 1) * 0x100000001B3ull ^ salt;
    static constexpr char hex[] = "0123456789abcdef";
    std::string out(prefix);
    for (int s = 60; s >= 0; s -= 4) out += hex[(n >> s) & 15];
    return out;
}

struct Usage {
    std::int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
    nlohmann::json to_json() const {
        return {{"prompt_tokens", prompt_tokens},
                {"completion_tokens", completion_tokens},
                {"total_tokens", prompt_tokens + completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
    }
};

inline nlohmann::json tool_call_json(const ParsedToolCall& call, const std::string& id) {
    return {{"id", id},
            {"type", "function"},
            {"function", {{"name", call.name}, {"arguments", call.arguments.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)}}}};
}

/// The non-streaming chat response.
inline nlohmann::json chat_completion(const std::string& id, const std::string& model, std::int64_t created, const ParsedReply& reply,
                                      const std::string& finish_reason, const Usage& usage) {
    nlohmann::json message = {{"role", "assistant"}, {"content", reply.content}};
    if (!reply.reasoning.empty()) message["reasoning_content"] = reply.reasoning;
    if (!reply.tool_calls.empty()) {
        nlohmann::json calls = nlohmann::json::array();
        for (const auto& c : reply.tool_calls) calls.push_back(tool_call_json(c, make_id("call_")));
        message["tool_calls"] = calls;
        if (reply.content.empty()) message["content"] = nullptr;
    }
    return {{"id", id},
            {"object", "chat.completion"},
            {"created", created},
            {"model", model},
            {"choices", nlohmann::json::array({{{"index", 0}, {"message", message}, {"logprobs", nullptr}, {"finish_reason", finish_reason}}})},
            {"usage", usage.to_json()}};
}

/// One chunk of a chat stream; `delta` is {"role"}, {"content"}, {"reasoning_content"} or {"tool_calls"}.
inline nlohmann::json chat_chunk(const std::string& id, const std::string& model, std::int64_t created, nlohmann::json delta,
                                 const nlohmann::json& finish_reason = nullptr) {
    return {{"id", id},
            {"object", "chat.completion.chunk"},
            {"created", created},
            {"model", model},
            {"choices", nlohmann::json::array({{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", finish_reason}}})}};
}

/// The last chunk of a stream with stream_options.include_usage: no choices, only usage.
inline nlohmann::json usage_chunk(const std::string& id, const std::string& object, const std::string& model, std::int64_t created,
                                  const Usage& usage) {
    return {{"id", id}, {"object", object}, {"created", created}, {"model", model}, {"choices", nlohmann::json::array()}, {"usage", usage.to_json()}};
}

/// The delta for a parser event (tool calls get their index and a fresh id).
inline nlohmann::json delta_for(const ReplyEvent& e, int tool_index) {
    if (e.kind == ReplyEvent::Content) return {{"content", e.text}};
    if (e.kind == ReplyEvent::Reasoning) return {{"reasoning_content", e.text}};
    nlohmann::json call = tool_call_json(e.call, make_id("call_"));
    call["index"] = tool_index;
    return {{"tool_calls", nlohmann::json::array({call})}};
}

inline nlohmann::json text_completion(const std::string& id, const std::string& model, std::int64_t created, const std::string& text,
                                      const nlohmann::json& finish_reason, const Usage* usage) {
    nlohmann::json r = {{"id", id},
                        {"object", "text_completion"},
                        {"created", created},
                        {"model", model},
                        {"choices", nlohmann::json::array({{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish_reason}}})}};
    if (usage) r["usage"] = usage->to_json();
    return r;
}

}  // namespace gemma4::server
