// A reply as a sequence of blocks, the shape of Anthropic's content blocks and of the Responses
// API's output items: thinking, text, or a tool call, each started, extended by deltas, then
// stopped. The reply parser's events (reply_parser.hpp) become these steps here, once, so both
// encoders open and close their blocks at the same places, streamed or not.
#pragma once

#include "reply_parser.hpp"

#include <gemma4/generate/generate_options.hpp>
#include <gemma4/generate/stop.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gemma4::server {

enum class BlockKind { Text, Thinking, ToolCall };

struct BlockStep {
    enum Kind { Start, Delta, Stop } kind;
    BlockKind block;
    std::string text{};     ///< Delta: text, thinking, or a fragment of the call's JSON arguments
    ParsedToolCall call{};  ///< ToolCall's Start: the name; its Stop: the whole call
    /// A ToolCall's Stop when the call turned out malformed: there is no call, and its text
    /// follows as a Text block (a stream cannot take back what it sent of it).
    bool abandoned = false;
};

class ReplyBlocks {
public:
    std::vector<BlockStep> add(const ReplyEvent& e) {
        std::vector<BlockStep> steps;
        switch (e.kind) {
        case ReplyEvent::Content: extend(steps, BlockKind::Text, e.text); break;
        case ReplyEvent::Reasoning: extend(steps, BlockKind::Thinking, e.text); break;
        case ReplyEvent::ToolCallBegin:
            stop(steps);
            steps.push_back({BlockStep::Start, BlockKind::ToolCall, {}, e.call});
            open_ = BlockKind::ToolCall;
            break;
        case ReplyEvent::ToolCallArguments: steps.push_back({BlockStep::Delta, BlockKind::ToolCall, e.text}); break;
        case ReplyEvent::ToolCall:
            steps.push_back({BlockStep::Stop, BlockKind::ToolCall, {}, e.call});
            open_.reset();
            break;
        case ReplyEvent::ToolCallAbandoned:
            steps.push_back({BlockStep::Stop, BlockKind::ToolCall, {}, {}, true});
            open_.reset();
            break;
        }
        return steps;
    }

    /// The end of the reply: stops the open block.
    std::vector<BlockStep> finish() {
        std::vector<BlockStep> steps;
        stop(steps);
        return steps;
    }

private:
    void extend(std::vector<BlockStep>& steps, BlockKind kind, const std::string& text) {
        if (open_ != kind) {
            stop(steps);
            steps.push_back({BlockStep::Start, kind});
            open_ = kind;
        }
        steps.push_back({BlockStep::Delta, kind, text});
    }

    void stop(std::vector<BlockStep>& steps) {
        if (open_) steps.push_back({BlockStep::Stop, *open_});
        open_.reset();
    }

    std::optional<BlockKind> open_;
};

/// How a reply ended, for the encoders' stop reasons and usage.
struct ReplyEnd {
    FinishReason finish = FinishReason::EndToken;
    bool tool_call = false;                    ///< the reply made a call
    std::optional<std::string> stop_sequence{};  ///< the stop string that ended it
    std::int64_t prompt_tokens = 0, output_tokens = 0, cached_tokens = 0;

    bool cut_short() const { return finish == FinishReason::MaxTokens || finish == FinishReason::ContextFull; }
};

/// Which of `stops` ended a reply whose generated text (its ids decoded, the stop string's
/// included) is `generated`: the engine's rule (StopMatcher's) run over the whole text.
inline std::optional<std::string> matched_stop(std::string_view generated, const std::vector<std::string>& stops) {
    if (stops.empty()) return std::nullopt;
    StopMatcher matcher(stops);
    const StopStep step = matcher.feed(generated);
    if (!step.stopped) return std::nullopt;
    return stops[step.stop_index];
}

}  // namespace gemma4::server
