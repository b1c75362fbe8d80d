// The server's parsers (examples/gemma4/server/): an OpenAI chat request body, and a model reply
// split into content, reasoning and tool calls. Byte 0 picks the piece sizes of the streaming
// run; the rest is both a request body and a reply.
// - A body either parses into a request that renders to a prompt starting with <bos>, or is
//   refused with the API's error (ApiError) or the library's (gemma4::Error).
// - A reply fed to the streaming parser in pieces gives exactly what the whole-text parser
//   gives, and every parsed tool call renders back into a call that parses to the same.
#include "../examples/gemma4/server/chat_request.hpp"
#include "../examples/gemma4/server/reply_parser.hpp"

#include "fuzz_support.hpp"

#include <nlohmann/json.hpp>

namespace {

using namespace gemma4::server;

void check_request(std::string_view body) {
    const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return;
    try {
        const ChatRequest r = parse_chat_request(j);
        const std::string prompt = render_prompt(r);
        if (!prompt.starts_with(gemma4::kChatBos)) gemma4::fuzz::fail("a parsed request renders without <bos>");
    } catch (const ApiError& e) {
        if (e.status < 400 || e.status > 499) gemma4::fuzz::fail("a bad request body is not a 4xx error");
    } catch (const gemma4::Error&) {
    }
}

void check_reply(std::string_view text, std::uint8_t sizes, bool tools) {
    const ParsedReply whole = parse_reply(text, tools);
    ReplyParser parser(tools);
    ParsedReply pieces;
    const std::size_t step[2] = {1u + (sizes & 7u), 1u + ((sizes >> 3) & 31u)};
    for (std::size_t pos = 0, k = 0; pos < text.size(); ++k) {
        const std::size_t n = std::min(step[k % 2], text.size() - pos);
        pieces.add(parser.feed(text.substr(pos, n)));
        pos += n;
    }
    pieces.add(parser.finish());
    if (pieces.content != whole.content || pieces.reasoning != whole.reasoning) gemma4::fuzz::fail("streamed reply text differs from the whole");
    if (pieces.tool_calls.size() != whole.tool_calls.size()) gemma4::fuzz::fail("streamed reply has another number of tool calls");
    for (std::size_t i = 0; i < whole.tool_calls.size(); ++i) {
        const ParsedToolCall& call = whole.tool_calls[i];
        if (pieces.tool_calls[i].name != call.name || pieces.tool_calls[i].arguments != call.arguments)
            gemma4::fuzz::fail("a streamed tool call differs from the whole reply's");
        const std::string rendered = render_tool_call(call.name, call.arguments);
        const std::string_view inner = std::string_view(rendered).substr(kToolCallStart.size(),
                                                                         rendered.size() - kToolCallStart.size() - kToolCallEnd.size());
        const auto again = parse_tool_call(inner);
        if (!again || again->name != call.name || again->arguments != call.arguments)
            gemma4::fuzz::fail("a parsed tool call does not survive rendering and parsing again");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::string_view text = gemma4::fuzz::as_text(data + 1, size - 1);
    check_request(text);
    check_reply(text, data[0], (data[0] & 0x80) == 0);
    return 0;
}
