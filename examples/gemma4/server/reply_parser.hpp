// A model reply, as it streams out, split into what OpenAI's API returns separately:
// `reasoning_content` (the thought channel `<|channel>thought\n…<channel|>`), `content`, and
// `tool_calls` (each `<|tool_call>call:NAME{…}<tool_call|>`, arguments as JSON). Markers that end
// the reply (<turn|>, <eos>, <|tool_response>) are dropped. A call that does not parse stays in
// the content as the text the model wrote, markers included: never an error.
#pragma once

#include "tool_format.hpp"

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace gemma4::server {

inline constexpr std::string_view kChannelOpen = "<|channel>";
inline constexpr std::string_view kChannelClose = "<channel|>";

/// What became certain of a reply. A tool call streams as ToolCallBegin (its name, once
/// `call:NAME{` is read), ToolCallArguments (fragments of its JSON arguments as they become
/// certain; together exactly `call.arguments_text`), then ToolCall (the whole call, once closed).
/// A call that turns out malformed after its ToolCallBegin ends with its text as Content and no
/// ToolCall (ToolCallAbandoned marks that).
struct ReplyEvent {
    enum Kind { Content, Reasoning, ToolCallBegin, ToolCallArguments, ToolCall, ToolCallAbandoned } kind;
    std::string text;          ///< Content / Reasoning / ToolCallArguments
    ParsedToolCall call = {};  ///< ToolCall; ToolCallBegin: the name only
};

class ReplyParser {
public:
    /// `parse_tools`: false when the request declared no tools (a call is then plain text).
    explicit ReplyParser(bool parse_tools = true) : parse_tools_(parse_tools) {}

    /// Takes the next piece of text; returns what became certain. Text that may be the start of
    /// a marker is held back until the next piece decides.
    std::vector<ReplyEvent> feed(std::string_view piece) {
        buffer_ += piece;
        std::vector<ReplyEvent> events;
        run(events, false);
        return events;
    }

    /// The end of the reply: releases what was held back. An unclosed thought stays reasoning; an
    /// unclosed call becomes content.
    std::vector<ReplyEvent> finish() {
        std::vector<ReplyEvent> events;
        buffer_.insert(0, channel_name_);  // an undecided channel header: decided now, as reasoning
        channel_name_.clear();
        run(events, true);
        if (state_ == State::ToolCall) {
            abandon(events);
            emit(events, ReplyEvent::Content, std::string(kToolCallStart) + call_);
        }
        state_ = State::Text;
        call_.clear();
        return events;
    }

    bool saw_tool_call() const { return calls_ > 0; }

private:
    enum class State { Text, ChannelName, Channel, ToolCall };

    static constexpr std::size_t kMaxChannelName = 64;
    static constexpr std::array<std::string_view, 3> kDropped = {"<turn|>", "<eos>", kToolResponseStart};

    void emit(std::vector<ReplyEvent>& events, ReplyEvent::Kind kind, std::string text) {
        if (text.empty()) return;
        if (!events.empty() && events.back().kind == kind && (kind == ReplyEvent::Content || kind == ReplyEvent::Reasoning)) {
            events.back().text += text;
            return;
        }
        events.push_back(ReplyEvent{kind, std::move(text)});
    }

    /// Length of the longest suffix of buffer_ that is a proper prefix of one of `markers`.
    template <class Markers>
    static std::size_t partial_marker(std::string_view text, const Markers& markers) {
        std::size_t best = 0;
        for (std::string_view m : markers)
            for (std::size_t n = std::min(m.size() - 1, text.size()); n > best; --n)
                if (text.substr(text.size() - n) == m.substr(0, n)) {
                    best = n;
                    break;
                }
        return best;
    }

    void run(std::vector<ReplyEvent>& events, bool final) {
        while (!buffer_.empty()) {
            if (state_ == State::ChannelName) {
                // A header is a name of at most kMaxChannelName bytes and a newline ("thought\n");
                // it is not part of the reasoning. Decided on those bytes alone, so a reply
                // parses the same whole or in pieces; without a header everything is reasoning.
                buffer_.insert(0, channel_name_);
                channel_name_.clear();
                const auto nl = buffer_.find('\n');
                if (nl != std::string::npos && nl <= kMaxChannelName) {
                    buffer_.erase(0, nl + 1);
                } else if (nl == std::string::npos && buffer_.size() <= kMaxChannelName && !final) {
                    channel_name_ = std::move(buffer_);  // undecided: wait for more
                    buffer_.clear();
                    return;
                }
                state_ = State::Channel;
                continue;
            }
            if (state_ == State::ToolCall) {
                // The closing marker may straddle pieces: look for it in everything since the opening.
                const std::size_t searched = call_.size() >= kToolCallEnd.size() ? call_.size() - kToolCallEnd.size() + 1 : 0;
                call_ += buffer_;
                buffer_.clear();
                const auto end = call_.find(kToolCallEnd, searched);
                if (end == std::string::npos) {
                    stream_arguments(events);
                    return;
                }
                buffer_ = call_.substr(end + kToolCallEnd.size());
                call_.resize(end);
                if (auto call = parse_tool_call(call_)) {
                    ++calls_;
                    if (!call_begun_) events.push_back(ReplyEvent{ReplyEvent::ToolCallBegin, {}, ParsedToolCall{call->name, {}, {}}});
                    // By construction every streamed prefix is a prefix of the whole call's text.
                    if (call->arguments_text.size() > arguments_sent_)
                        events.push_back(ReplyEvent{ReplyEvent::ToolCallArguments, call->arguments_text.substr(arguments_sent_)});
                    events.push_back(ReplyEvent{ReplyEvent::ToolCall, {}, std::move(*call)});
                    call_begun_ = false;
                    arguments_sent_ = 0;
                } else {
                    abandon(events);
                    emit(events, ReplyEvent::Content, std::string(kToolCallStart) + call_ + std::string(kToolCallEnd));
                }
                call_.clear();
                state_ = State::Text;
                continue;
            }
            const bool in_channel = state_ == State::Channel;
            const auto kind = in_channel ? ReplyEvent::Reasoning : ReplyEvent::Content;
            // The earliest marker that changes state or is dropped.
            std::size_t at = std::string::npos, length = 0;
            int which = -1;  // 0 open channel, 1 close channel, 2 tool call, 3 dropped
            auto consider = [&](std::string_view marker, int id) {
                const auto p = buffer_.find(marker);
                if (p != std::string::npos && p < at) {
                    at = p;
                    length = marker.size();
                    which = id;
                }
            };
            if (in_channel) consider(kChannelClose, 1);
            else consider(kChannelOpen, 0);
            if (parse_tools_ && !in_channel) consider(kToolCallStart, 2);
            for (auto d : kDropped) consider(d, 3);
            if (which < 0) {
                std::size_t keep = 0;
                if (!final) {
                    std::array<std::string_view, 6> markers = {in_channel ? kChannelClose : kChannelOpen, kDropped[0], kDropped[1], kDropped[2],
                                                               parse_tools_ && !in_channel ? kToolCallStart : kDropped[0], kDropped[0]};
                    keep = partial_marker(buffer_, markers);
                }
                emit(events, kind, buffer_.substr(0, buffer_.size() - keep));
                buffer_.erase(0, buffer_.size() - keep);
                return;
            }
            emit(events, kind, buffer_.substr(0, at));
            buffer_.erase(0, at + length);
            if (which == 0) state_ = State::ChannelName;
            else if (which == 1) state_ = State::Text;
            else if (which == 2) state_ = State::ToolCall;
        }
    }

    /// An open call: its name once known, then the arguments' certain JSON prefix as it grows.
    void stream_arguments(std::vector<ReplyEvent>& events) {
        const auto partial = parse_partial_tool_call(call_);
        if (!partial) return;
        if (!call_begun_) {
            call_begun_ = true;
            events.push_back(ReplyEvent{ReplyEvent::ToolCallBegin, {}, ParsedToolCall{partial->name, {}, {}}});
        }
        if (partial->arguments_prefix.size() > arguments_sent_) {
            events.push_back(ReplyEvent{ReplyEvent::ToolCallArguments, partial->arguments_prefix.substr(arguments_sent_)});
            arguments_sent_ = partial->arguments_prefix.size();
        }
    }

    void abandon(std::vector<ReplyEvent>& events) {
        if (call_begun_) events.push_back(ReplyEvent{ReplyEvent::ToolCallAbandoned, {}});
        call_begun_ = false;
        arguments_sent_ = 0;
    }

    bool parse_tools_;
    bool call_begun_ = false;
    std::size_t arguments_sent_ = 0;
    State state_ = State::Text;
    std::string buffer_, channel_name_, call_;
    int calls_ = 0;
};

/// A whole reply at once (the non-streaming response).
struct ParsedReply {
    std::string content, reasoning;
    std::vector<ParsedToolCall> tool_calls;

    /// Appends what a ReplyParser reported.
    void add(std::vector<ReplyEvent> events) {
        for (auto& e : events) {
            if (e.kind == ReplyEvent::Content) content += e.text;
            else if (e.kind == ReplyEvent::Reasoning) reasoning += e.text;
            else if (e.kind == ReplyEvent::ToolCall) tool_calls.push_back(std::move(e.call));
        }
    }
};

inline ParsedReply parse_reply(std::string_view text, bool parse_tools = true) {
    ReplyParser parser(parse_tools);
    ParsedReply out;
    out.add(parser.feed(text));
    out.add(parser.finish());
    return out;
}

}  // namespace gemma4::server
