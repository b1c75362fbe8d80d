// Chat rendering with messages built from the input: byte 0 holds the options, then messages
// are separated by NUL bytes, each starting with a byte that picks its role (one in seven picks
// an invalid role). The rendered prompt must start with <bos> and hold every user message's
// trimmed text.
#include <gemma4/generate/chat.hpp>

#include "fuzz_support.hpp"

#include <vector>

namespace {
constexpr const char* kRoles[] = {"system", "developer", "user", "assistant", "model", "user", "tool"};
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::uint8_t flags = data[0];
    const gemma4::ChatOptions options{.add_generation_prompt = (flags & 1) != 0,
                                      .enable_thinking = (flags & 2) != 0,
                                      .keep_thoughts = (flags & 4) != 0};
    std::vector<gemma4::ChatMessage> messages;
    const std::string_view rest = gemma4::fuzz::as_text(data + 1, size - 1);
    for (std::size_t pos = 0; pos < rest.size();) {
        std::size_t end = rest.find('\0', pos);
        if (end == std::string_view::npos) end = rest.size();
        const std::string_view part = rest.substr(pos, end - pos);
        if (!part.empty())
            messages.push_back({kRoles[static_cast<unsigned char>(part[0]) % 7], std::string(part.substr(1))});
        pos = end + 1;
    }

    gemma4::fuzz::expect_ok_or_error([&] {
        const std::string prompt = gemma4::render_chat(messages, options);
        if (!prompt.starts_with(gemma4::kChatBos)) gemma4::fuzz::fail("render_chat does not start with <bos>");
        for (const auto& m : messages)
            if (m.role == "user" && prompt.find(gemma4::detail::trim(m.content)) == std::string::npos)
                gemma4::fuzz::fail("a user message is missing from the rendered prompt");
    });
    gemma4::fuzz::expect_ok_or_error([&] {
        const std::string reply = messages.empty() ? std::string() : messages.front().content;
        const std::span<const gemma4::ChatMessage> next =
            messages.empty() ? std::span<const gemma4::ChatMessage>() : std::span(messages).subspan(1);
        (void)gemma4::render_chat_continuation(reply, next, options);
        (void)gemma4::strip_thoughts(reply);
    });
    return 0;
}
