// Responses in OpenAI's shapes: chat.completion / chat.completion.chunk, text_completion, and
// the Server-Sent Events framing of a stream (`data: {json}\n\n` ... `data: [DONE]\n\n`, or
// named events for the Anthropic and Responses streams).
#pragma once

#include "reply_parser.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace gemma4::server {

/// One event; `Json` is nlohmann::json or nlohmann::ordered_json (a completion, whose logprobs
/// objects keep their order).
template <class Json>
std::string sse_event(const Json& payload) {
    return "data: " + payload.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

/// An event named by its payload's `type`, `event: TYPE\ndata: {json}\n\n`: how Anthropic's
/// Messages stream and the Responses API stream frame theirs (no [DONE] at the end).
inline std::string sse_typed_event(const nlohmann::json& payload) {
    return "event: " + payload.at("type").get<std::string>() + "\n" + sse_event(payload);
}

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

/// A call's `arguments` are its JSON text as the model wrote it (what a stream sends in
/// fragments); a call made up without that text is dumped.
inline std::string arguments_text(const ParsedToolCall& call) {
    return call.arguments_text.empty() ? call.arguments.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) : call.arguments_text;
}

inline nlohmann::json tool_call_json(const ParsedToolCall& call, const std::string& id) {
    return {{"id", id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", arguments_text(call)}}}};
}

/// One choice of a chat response (a request's `n` gives several): its parsed reply, how it
/// ended, and chat_logprobs' entries (server/token_logprobs.hpp) or null.
struct ChatChoice {
    ParsedReply reply;
    std::string finish_reason;
    nlohmann::json logprobs = nullptr;
};

/// The non-streaming chat response, its choices indexed in order; `usage` counts the prompt
/// once and the completion tokens of every choice, as OpenAI's does.
inline nlohmann::json chat_completion(const std::string& id, const std::string& model, std::int64_t created, const std::vector<ChatChoice>& choices,
                                      const Usage& usage) {
    nlohmann::json out = nlohmann::json::array();
    for (std::size_t i = 0; i < choices.size(); ++i) {
        const ParsedReply& reply = choices[i].reply;
        nlohmann::json message = {{"role", "assistant"}, {"content", reply.content}};
        if (!reply.reasoning.empty()) message["reasoning_content"] = reply.reasoning;
        if (!reply.tool_calls.empty()) {
            nlohmann::json calls = nlohmann::json::array();
            for (const auto& c : reply.tool_calls) calls.push_back(tool_call_json(c, make_id("call_")));
            message["tool_calls"] = calls;
            if (reply.content.empty()) message["content"] = nullptr;
        }
        out.push_back({{"index", i}, {"message", message}, {"logprobs", choices[i].logprobs}, {"finish_reason", choices[i].finish_reason}});
    }
    return {{"id", id}, {"object", "chat.completion"}, {"created", created}, {"model", model}, {"choices", std::move(out)}, {"usage", usage.to_json()}};
}

/// A response of one choice.
inline nlohmann::json chat_completion(const std::string& id, const std::string& model, std::int64_t created, const ParsedReply& reply,
                                      const std::string& finish_reason, const Usage& usage, const nlohmann::json& logprobs = nullptr) {
    return chat_completion(id, model, created, std::vector<ChatChoice>{{reply, finish_reason, logprobs}}, usage);
}

/// One chunk of a chat stream, of choice `index`; `delta` is {"role"}, {"content"},
/// {"reasoning_content"} or {"tool_calls"}; `logprobs` the chat_logprobs of the tokens the
/// chunk carries, or null.
inline nlohmann::json chat_chunk(const std::string& id, const std::string& model, std::int64_t created, nlohmann::json delta,
                                 const nlohmann::json& finish_reason = nullptr, const nlohmann::json& logprobs = nullptr, std::size_t index = 0) {
    return {{"id", id},
            {"object", "chat.completion.chunk"},
            {"created", created},
            {"model", model},
            {"choices", nlohmann::json::array({{{"index", index}, {"delta", std::move(delta)}, {"logprobs", logprobs}, {"finish_reason", finish_reason}}})}};
}

/// The last chunk of a stream with stream_options.include_usage: no choices, only usage.
inline nlohmann::json usage_chunk(const std::string& id, const std::string& object, const std::string& model, std::int64_t created,
                                  const Usage& usage) {
    return {{"id", id}, {"object", object}, {"created", created}, {"model", model}, {"choices", nlohmann::json::array()}, {"usage", usage.to_json()}};
}

/// The deltas of a chat stream, one per parser event (null for an event that sends nothing). A
/// tool call is sent as OpenAI streams one: a first delta with its index, id, type, name and
/// empty arguments, then deltas with fragments of `function.arguments` as they are generated.
class ChatDeltas {
public:
    nlohmann::json delta_for(const ReplyEvent& e) {
        switch (e.kind) {
        case ReplyEvent::Content: return {{"content", e.text}};
        case ReplyEvent::Reasoning: return {{"reasoning_content", e.text}};
        case ReplyEvent::ToolCallBegin:
            return call_delta({{"index", index_},
                               {"id", make_id("call_")},
                               {"type", "function"},
                               {"function", {{"name", e.call.name}, {"arguments", ""}}}});
        case ReplyEvent::ToolCallArguments: return call_delta({{"index", index_}, {"function", {{"arguments", e.text}}}});
        case ReplyEvent::ToolCall:
        case ReplyEvent::ToolCallAbandoned: ++index_; return nullptr;  // the next call gets the next index
        }
        return nullptr;
    }

private:
    static nlohmann::json call_delta(nlohmann::json call) { return {{"tool_calls", nlohmann::json::array({std::move(call)})}}; }
    int index_ = 0;
};

/// One choice of a completion: its text, how it ended (null in a stream's text chunks), and
/// completion_logprobs' entries (server/token_logprobs.hpp) or null.
struct TextChoice {
    std::string text;
    nlohmann::json finish_reason = nullptr;
    nlohmann::ordered_json logprobs = nullptr;
};

/// A completion of several choices (indexed in order) or one chunk of its stream (one choice,
/// `first_index` its index). Ordered: the logprobs' `top_logprobs` objects list their tokens
/// most likely first.
inline nlohmann::ordered_json text_completion(const std::string& id, const std::string& model, std::int64_t created,
                                              const std::vector<TextChoice>& choices, const Usage* usage, std::size_t first_index = 0) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < choices.size(); ++i)
        out.push_back({{"index", first_index + i}, {"text", choices[i].text}, {"logprobs", choices[i].logprobs}, {"finish_reason", choices[i].finish_reason}});
    nlohmann::ordered_json r = {{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model}, {"choices", std::move(out)}};
    if (usage) r["usage"] = usage->to_json();
    return r;
}

/// A completion of one choice, or a chunk of choice `index`'s stream.
inline nlohmann::ordered_json text_completion(const std::string& id, const std::string& model, std::int64_t created, const std::string& text,
                                              const nlohmann::json& finish_reason, const Usage* usage,
                                              const nlohmann::ordered_json& logprobs = nullptr, std::size_t index = 0) {
    return text_completion(id, model, created, std::vector<TextChoice>{{text, finish_reason, logprobs}}, usage, index);
}

}  // namespace gemma4::server
