// Replies in Anthropic's Messages shapes: the message ({"type": "message", content blocks,
// stop_reason, stop_sequence, usage}) and its stream (message_start, content_block_start /
// _delta / _stop, message_delta, message_stop). One encoder makes both from the reply's blocks
// (reply_blocks.hpp): a non-streamed message is what the stream's events add up to.
#pragma once

#include "api_error.hpp"
#include "openai_encode.hpp"
#include "reply_blocks.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace gemma4::server {

/// max_tokens (the limit or the context), stop_sequence, tool_use (the reply made a call), or
/// end_turn.
inline std::string anthropic_stop_reason(const ReplyEnd& end) {
    if (end.cut_short()) return "max_tokens";
    if (end.stop_sequence) return "stop_sequence";
    if (end.tool_call) return "tool_use";
    return "end_turn";
}

/// Anthropic's usage: input_tokens are the prompt's tokens not read from the prefix cache, those
/// are cache_read_input_tokens (the prompt is their sum, as Anthropic counts it).
inline nlohmann::json anthropic_usage(const ReplyEnd& end) {
    return {{"input_tokens", end.prompt_tokens - end.cached_tokens},
            {"cache_creation_input_tokens", 0},
            {"cache_read_input_tokens", end.cached_tokens},
            {"output_tokens", end.output_tokens}};
}

class AnthropicMessage {
public:
    /// `prompt_tokens`: the prompt's length, what message_start reports before the reply is known.
    AnthropicMessage(std::string id, std::string model, std::int64_t prompt_tokens)
        : id_(std::move(id)), model_(std::move(model)), prompt_tokens_(prompt_tokens) {}

    /// The stream's first event.
    std::string start() const {
        nlohmann::json message = envelope();
        message["usage"] = {{"input_tokens", prompt_tokens_}, {"output_tokens", 0}};
        return sse_typed_event({{"type", "message_start"}, {"message", std::move(message)}});
    }

    /// The events of the reply's next parser events.
    std::string add(const std::vector<ReplyEvent>& events) {
        std::string out;
        for (const ReplyEvent& e : events)
            for (const BlockStep& step : blocks_.add(e)) out += encode(step);
        return out;
    }

    /// The stream's last events: the open block's stop, the stop reason with the usage, the end.
    std::string finish(const ReplyEnd& end) {
        std::string out;
        for (const BlockStep& step : blocks_.finish()) out += encode(step);
        end_ = end;
        out += sse_typed_event({{"type", "message_delta"},
                                {"delta", {{"stop_reason", anthropic_stop_reason(end)}, {"stop_sequence", stop_sequence()}}},
                                {"usage", anthropic_usage(end)}});
        out += sse_typed_event({{"type", "message_stop"}});
        return out;
    }

    /// An error event of the stream (a failure after the message started).
    static std::string error(const std::string& message) {
        return "event: error\n" + sse_event(anthropic_error_body(500, message));
    }

    /// The whole message (after finish): the non-streamed response.
    nlohmann::json message() const {
        nlohmann::json m = envelope();
        m["content"] = content_;
        m["stop_reason"] = anthropic_stop_reason(end_);
        m["stop_sequence"] = stop_sequence();
        m["usage"] = anthropic_usage(end_);
        return m;
    }

private:
    nlohmann::json envelope() const {
        return {{"id", id_},          {"type", "message"},         {"role", "assistant"}, {"model", model_},
                {"content", nlohmann::json::array()}, {"stop_reason", nullptr}, {"stop_sequence", nullptr}};
    }

    nlohmann::json stop_sequence() const { return end_.stop_sequence ? nlohmann::json(*end_.stop_sequence) : nlohmann::json(nullptr); }

    std::string encode(const BlockStep& step) {
        switch (step.kind) {
        case BlockStep::Start: {
            nlohmann::json block;
            if (step.block == BlockKind::Text) block = {{"type", "text"}, {"text", ""}};
            else if (step.block == BlockKind::Thinking) block = {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}};
            else block = {{"type", "tool_use"}, {"id", make_id("toolu_")}, {"name", step.call.name}, {"input", nlohmann::json::object()}};
            content_.push_back(block);
            return sse_typed_event({{"type", "content_block_start"}, {"index", index_}, {"content_block", std::move(block)}});
        }
        case BlockStep::Delta: {
            nlohmann::json delta;
            if (step.block == BlockKind::Text) {
                content_.back()["text"] = content_.back()["text"].get<std::string>() + step.text;
                delta = {{"type", "text_delta"}, {"text", step.text}};
            } else if (step.block == BlockKind::Thinking) {
                content_.back()["thinking"] = content_.back()["thinking"].get<std::string>() + step.text;
                delta = {{"type", "thinking_delta"}, {"thinking", step.text}};
            } else {
                delta = {{"type", "input_json_delta"}, {"partial_json", step.text}};
            }
            return sse_typed_event({{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(delta)}});
        }
        case BlockStep::Stop:
            if (step.block == BlockKind::ToolCall) {
                if (step.abandoned) content_.erase(content_.size() - 1);  // no call: its text follows as a text block
                else content_.back()["input"] = step.call.arguments;
            }
            return sse_typed_event({{"type", "content_block_stop"}, {"index", index_++}});
        }
        return {};
    }

    std::string id_, model_;
    std::int64_t prompt_tokens_;
    ReplyBlocks blocks_;
    nlohmann::json content_ = nlohmann::json::array();  ///< the blocks so far (an abandoned call's removed)
    int index_ = 0;                                      ///< the stream's index of the open block
    ReplyEnd end_;
};

}  // namespace gemma4::server
