// The server's parsers (examples/gemma4/server/): an OpenAI chat request body, and a model reply
// split into content, reasoning and tool calls. Byte 0 picks the piece sizes of the streaming
// run; the rest is both a request body and a reply.
// - A body either parses into a request that renders to a prompt starting with <bos>, or is
//   refused with the API's error (ApiError) or the library's (gemma4::Error).
// - A reply fed to the streaming parser in pieces gives exactly what the whole-text parser
//   gives, and every parsed tool call renders back into a call that parses to the same.
// - The argument fragments streamed for each call concatenate exactly to its `arguments` JSON
//   text, which parses to the same value; a request's tool_choice prefill parses as the start of
//   a call.
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
        if (!prompt.ends_with(reply_prefill(r))) gemma4::fuzz::fail("the prompt does not end with the tool_choice prefill");
        if (r.tool_choice == ToolChoice::Function) {
            const ParsedReply forced = parse_chat_reply(r, "}<tool_call|>");
            if (forced.tool_calls.size() != 1 || forced.tool_calls[0].name != r.tool_choice_name)
                gemma4::fuzz::fail("a forced call closed at once is not a call of the named function");
        }
    } catch (const ApiError& e) {
        if (e.status < 400 || e.status > 499) gemma4::fuzz::fail("a bad request body is not a 4xx error");
    } catch (const gemma4::Error&) {
    }
}

void check_reply(std::string_view text, std::uint8_t sizes, bool tools) {
    const ParsedReply whole = parse_reply(text, tools);
    ReplyParser parser(tools);
    ParsedReply pieces;
    // The arguments streamed for each call, from its ToolCallBegin to its ToolCall.
    std::vector<std::string> streamed_arguments;
    std::string open_call;
    bool call_open = false;
    auto take = [&](std::vector<ReplyEvent> events) {
        for (const auto& e : events) {
            if (e.kind == ReplyEvent::ToolCallBegin) {
                if (call_open) gemma4::fuzz::fail("a tool call begins inside another");
                call_open = true;
                open_call.clear();
            } else if (e.kind == ReplyEvent::ToolCallArguments) {
                if (!call_open) gemma4::fuzz::fail("argument fragments outside a call");
                open_call += e.text;
            } else if (e.kind == ReplyEvent::ToolCall) {
                if (!call_open) gemma4::fuzz::fail("a tool call that never began");
                streamed_arguments.push_back(open_call);
                call_open = false;
            } else if (e.kind == ReplyEvent::ToolCallAbandoned) {
                if (!call_open) gemma4::fuzz::fail("an abandoned call that never began");
                call_open = false;
            } else if (call_open) {
                gemma4::fuzz::fail("content or reasoning inside an open tool call");
            }
        }
        pieces.add(std::move(events));
    };
    const std::size_t step[2] = {1u + (sizes & 7u), 1u + ((sizes >> 3) & 31u)};
    for (std::size_t pos = 0, k = 0; pos < text.size(); ++k) {
        const std::size_t n = std::min(step[k % 2], text.size() - pos);
        take(parser.feed(text.substr(pos, n)));
        pos += n;
    }
    take(parser.finish());
    if (call_open) gemma4::fuzz::fail("a tool call left open after finish");
    if (pieces.content != whole.content || pieces.reasoning != whole.reasoning) gemma4::fuzz::fail("streamed reply text differs from the whole");
    if (pieces.tool_calls.size() != whole.tool_calls.size()) gemma4::fuzz::fail("streamed reply has another number of tool calls");
    for (std::size_t i = 0; i < whole.tool_calls.size(); ++i) {
        const ParsedToolCall& call = whole.tool_calls[i];
        if (pieces.tool_calls[i].name != call.name || pieces.tool_calls[i].arguments != call.arguments ||
            pieces.tool_calls[i].arguments_text != call.arguments_text)
            gemma4::fuzz::fail("a streamed tool call differs from the whole reply's");
        if (streamed_arguments[i] != call.arguments_text) gemma4::fuzz::fail("streamed argument fragments do not concatenate to the arguments");
        const auto reparsed = nlohmann::json::parse(call.arguments_text, nullptr, /*allow_exceptions=*/false);
        // (Text that is not UTF-8 passes through as the model wrote it, which a JSON parser refuses.)
        if (!reparsed.is_discarded() && !reparsed.is_object()) gemma4::fuzz::fail("a call's arguments text is not a JSON object");
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
