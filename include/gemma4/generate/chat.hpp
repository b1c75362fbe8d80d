// The Gemma 4 chat format (spec §5), written out in C++ rather than run through a template
// engine:
//
//   <bos>[<|turn>system\n[<|think|>\n]{system}<turn|>\n]
//   <|turn>user\n{content}<turn|>\n
//   <|turn>model\n{content}<turn|>\n
//   ...
//   <|turn>model\n[<|channel>thought\n<channel|>]        ← generation prompt
//
// The system turn is written when the conversation opens with a system/developer message or
// thinking is on. Content is trimmed of whitespace the way Jinja's `trim` does (Python's
// str.strip: ASCII and Unicode white space). Placeholders such as <|image|> and <|audio|> are
// ordinary text here and pass through unchanged.
//
// Conversations that keep their KV cache between turns: render_chat() the first prompt, let the
// model reply, then append render_chat_continuation() for each later turn. The concatenation
// equals render_chat() of the whole history with one known difference: the cache keeps each
// earlier reply exactly as generated, thought channels included (also the empty
// `<|channel>thought\n<channel|>` that the generation prompt put there), while render_chat()
// strips them as the template does. We keep them on purpose: removing them would change the cache
// from the first reply onwards, i.e. a full re-prefill on every turn. The cached text is exactly
// render_chat(history, {.keep_thoughts = true}) when each model message is the text between
// `<|turn>model\n` and `<turn|>` and neither starts nor ends with white space (trimming would drop
// it). A caller who wants the reference context re-renders with render_chat() and prefills from
// scratch.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace gemma4 {
inline namespace GEMMA4_ABI {

struct ChatMessage {
    std::string role;  ///< system, developer, user, assistant or model
    std::string content;
};

struct ChatOptions {
    bool add_generation_prompt = true;  ///< end with the model's opening so it replies next
    bool enable_thinking = false;       ///< <|think|> in the system turn; no empty thought channel
    /// Render earlier model turns with their thought channels, as a cached conversation holds them.
    bool keep_thoughts = false;
};

inline constexpr std::string_view kChatBos = "<bos>";
inline constexpr std::string_view kTurnStart = "<|turn>";
inline constexpr std::string_view kTurnEnd = "<turn|>";
inline constexpr std::string_view kChannelStart = "<|channel>";
inline constexpr std::string_view kChannelEnd = "<channel|>";
inline constexpr std::string_view kThink = "<|think|>";
inline constexpr std::string_view kEmptyThought = "<|channel>thought\n<channel|>";

namespace detail {

/// Length of the code point starting at `text[i]` if it is white space for Python's
/// str.isspace (what Jinja's trim strips), else 0.
inline std::size_t python_space_length(std::string_view text, std::size_t i) {
    const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
    const unsigned char b0 = byte(i);
    if (b0 < 0x80) return (b0 >= 0x09 && b0 <= 0x0D) || (b0 >= 0x1C && b0 <= 0x20) ? 1 : 0;
    std::uint32_t cp = 0;
    std::size_t length = 0;
    if ((b0 & 0xE0) == 0xC0) {
        cp = b0 & 0x1Fu;
        length = 2;
    } else if ((b0 & 0xF0) == 0xE0) {
        cp = b0 & 0x0Fu;
        length = 3;
    } else {
        return 0;  // no 4-byte code point is white space; stray continuation bytes are not either
    }
    if (i + length > text.size()) return 0;
    for (std::size_t k = 1; k < length; ++k) {
        if ((byte(i + k) & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (byte(i + k) & 0x3Fu);
    }
    const bool space = cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
                       cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
    return space ? length : 0;
}

inline std::string_view trim(std::string_view text) {
    std::size_t begin = 0;
    while (begin < text.size()) {
        const std::size_t n = python_space_length(text, begin);
        if (n == 0) break;
        begin += n;
    }
    std::size_t end = text.size();
    while (end > begin) {
        std::size_t start = end - 1;  // back up to the lead byte of the last code point
        while (start > begin && end - start < 3 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80)
            --start;
        if (python_space_length(text, start) != end - start) break;
        end = start;
    }
    return text.substr(begin, end - begin);
}

enum class ChatRole { System, User, Model };

inline ChatRole chat_role(std::string_view role, std::size_t index, const char* caller) {
    if (role == "system" || role == "developer") return ChatRole::System;
    if (role == "user") return ChatRole::User;
    if (role == "assistant" || role == "model") return ChatRole::Model;
    throw InvalidArgument(std::string(caller) + ": message " + std::to_string(index) + " has role '" +
                          std::string(role) + "'; expected system, developer, user, assistant or model");
}

inline void append_turn(std::string& out, std::string_view role, std::string_view content) {
    out += kTurnStart;
    out += role;
    out += '\n';
    out += content;
    out += kTurnEnd;
    out += '\n';
}

inline void append_generation_prompt(std::string& out, const ChatOptions& options) {
    out += kTurnStart;
    out += "model\n";
    if (!options.enable_thinking) out += kEmptyThought;
}

}  // namespace detail

/// A model reply without its thought channels: every `<|channel>…<channel|>` span is removed
/// (an unclosed one runs to the end of the text), then the rest is trimmed.
inline std::string strip_thoughts(std::string_view reply) {
    std::string kept;
    kept.reserve(reply.size());
    std::size_t pos = 0;
    while (pos < reply.size()) {
        const std::size_t open = reply.find(kChannelStart, pos);
        if (open == std::string_view::npos) {
            kept.append(reply.substr(pos));
            break;
        }
        kept.append(reply.substr(pos, open - pos));
        const std::size_t close = reply.find(kChannelEnd, open + kChannelStart.size());
        if (close == std::string_view::npos) break;
        pos = close + kChannelEnd.size();
    }
    return std::string(detail::trim(kept));
}

namespace detail {

/// User and model turns; a system message here is an error because Gemma 4 has exactly one
/// system turn and it opens the conversation.
inline void append_turns(std::string& out, std::span<const ChatMessage> messages, std::size_t first_index,
                         const ChatOptions& options, const char* caller) {
    for (std::size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& message = messages[i];
        const std::size_t index = first_index + i;
        switch (chat_role(message.role, index, caller)) {
            case ChatRole::System:
                throw InvalidArgument(std::string(caller) + ": message " + std::to_string(index) +
                                      " has role '" + message.role +
                                      "'; a system or developer message must be the first message");
            case ChatRole::User:
                append_turn(out, "user", trim(message.content));
                break;
            case ChatRole::Model:
                if (options.keep_thoughts)
                    append_turn(out, "model", trim(message.content));
                else
                    append_turn(out, "model", strip_thoughts(message.content));
                break;
        }
    }
}

}  // namespace detail

/// The whole prompt for `messages`, starting with <bos>.
inline std::string render_chat(std::span<const ChatMessage> messages, ChatOptions options = {}) {
    std::string out(kChatBos);
    std::size_t first = 0;
    const bool has_system = !messages.empty() &&
                            detail::chat_role(messages[0].role, 0, "render_chat") == detail::ChatRole::System;
    if (has_system || options.enable_thinking) {
        out += kTurnStart;
        out += "system\n";
        if (options.enable_thinking) {
            out += kThink;
            out += '\n';
        }
        if (has_system) out += detail::trim(messages[0].content);
        out += kTurnEnd;
        out += '\n';
        first = has_system ? 1 : 0;
    }
    detail::append_turns(out, messages.subspan(first), first, options, "render_chat");
    if (options.add_generation_prompt) detail::append_generation_prompt(out, options);
    return out;
}

/// The text to append to a cached conversation after the model's reply, for `next_messages` (user
/// turns, possibly with model turns written by the caller) and, if asked, a new generation
/// prompt. `generated_reply` is the reply as it stands in the cache: when it ends with the
/// model's `<turn|>` the continuation starts with the newline that follows every turn;
/// otherwise (stopped by a length limit or a stop string) it first closes the model turn.
/// Only the generation prompt depends on options.enable_thinking: the system turn, and so the
/// thinking mode of the conversation, was fixed by the first render. The text starts right
/// after a special token, so tokenizing it on its own (no BOS) gives the same ids as the
/// matching part of a full render.
inline std::string render_chat_continuation(std::string_view generated_reply,
                                            std::span<const ChatMessage> next_messages,
                                            ChatOptions options = {}) {
    std::string out;
    if (!generated_reply.ends_with(kTurnEnd)) out += kTurnEnd;
    out += '\n';
    detail::append_turns(out, next_messages, 0, options, "render_chat_continuation");
    if (options.add_generation_prompt) detail::append_generation_prompt(out, options);
    return out;
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
