// OpenAI's Responses API (POST /v1/responses), stateless: the request body → the chat request
// the rest of the server runs (chat_request.hpp), and the reply → a `response` object with its
// `output` items (reasoning, message with output_text, function_call) or its stream of events
// (response.created … response.completed). `input` items map to chat's messages: a message to a
// message, a function_call to an assistant's call, a function_call_output to the tool message
// after it. One encoder makes both the stream and the object, from the reply's blocks
// (reply_blocks.hpp). Wrong types and values are ApiErrors (400) that name the field.
#pragma once

#include "api_error.hpp"
#include "chat_request.hpp"
#include "data_url.hpp"
#include "openai_encode.hpp"
#include "reply_blocks.hpp"
#include "response_format.hpp"
#include "tool_grammar.hpp"

#include <gemma4/grammar/json_schema.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gemma4::server {

struct ResponsesRequest {
    ChatRequest chat;
    bool parallel_tool_calls = true;
    /// The request's fields that a response object repeats (instructions, tools, tool_choice,
    /// temperature, top_p, max_output_tokens, metadata, text, reasoning).
    nlohmann::json echo = nlohmann::json::object();
};

namespace detail {

/// A message's content: a string, or parts (input_text / output_text, input_image with a data: URL).
inline std::string parse_responses_content(const nlohmann::json& content, const std::string& param, const std::string& role,
                                           std::vector<MediaItem>& media) {
    if (content.is_string()) return message_text(role, content.get<std::string>());
    if (!content.is_array()) throw bad_field(param, "expected a string or an array of content parts");
    std::string out;
    for (std::size_t i = 0; i < content.size(); ++i) {
        const std::string p = param + "[" + std::to_string(i) + "]";
        const auto& part = content[i];
        if (!part.is_object()) throw bad_field(p, "expected an object");
        const auto* type = field(part, "type");
        if (!type) throw bad_field(p + ".type", "missing");
        const std::string t = string_field(*type, p + ".type");
        if (t == "input_text" || t == "output_text") {
            const auto* text = field(part, "text");
            if (!text) throw bad_field(p + ".text", "missing");
            out += message_text(role, string_field(*text, p + ".text"));
        } else if (t == "input_image") {
            if (role != "user") throw bad_field(p, "images are accepted in user messages only");
            if (field(part, "file_id")) throw bad_field(p + ".file_id", "files are not stored by this server; send the image as a data: URL in image_url");
            const auto* url = field(part, "image_url");
            if (!url) throw bad_field(p + ".image_url", "missing");
            DataUrl d = parse_data_url(string_field(*url, p + ".image_url"), p + ".image_url");
            check_image_type(d.media_type, p + ".image_url");
            media.push_back({MediaItem::Image, std::move(d.bytes), p + ".image_url"});
            out += "<|image|>";
        } else {
            throw bad_field(p + ".type", "unsupported content part type '" + t + "' (input_text, output_text, input_image)");
        }
    }
    return out;
}

/// `input` as an array of items → chat's messages.
inline void parse_responses_input(const nlohmann::json& input, ChatRequest& r) {
    std::string reasoning;  ///< of a reasoning item, for the assistant message after it
    auto assistant = [&]() -> Message& {
        // Calls right after an assistant's message (or its other calls) belong to that message.
        if (r.messages.empty() || r.messages.back().role != "assistant") r.messages.push_back({.role = "assistant"});
        r.messages.back().reasoning += reasoning;
        reasoning.clear();
        return r.messages.back();
    };
    for (std::size_t i = 0; i < input.size(); ++i) {
        const auto& item = input[i];
        const std::string p = "input[" + std::to_string(i) + "]";
        if (!item.is_object()) throw bad_field(p, "expected an object");
        std::string type = "message";
        if (auto t = field(item, "type")) type = string_field(*t, p + ".type");
        if (type == "message") {
            const auto* role_field = field(item, "role");
            if (!role_field) throw bad_field(p + ".role", "missing");
            std::string role = string_field(*role_field, p + ".role");
            if (role == "developer") role = "system";
            if (role != "system" && role != "user" && role != "assistant")
                throw bad_field(p + ".role", "unknown role '" + role + "' (system, developer, user, assistant)");
            const auto* content = field(item, "content");
            if (!content) throw bad_field(p + ".content", "missing");
            std::string text = parse_responses_content(*content, p + ".content", role, r.media);
            if (role == "assistant") assistant().content += text;
            else r.messages.push_back({.role = role, .content = std::move(text)});
        } else if (type == "function_call") {
            ToolCallMessage call;
            const auto* id = field(item, "call_id");
            if (!id) throw bad_field(p + ".call_id", "missing");
            call.id = string_field(*id, p + ".call_id");
            const auto* name = field(item, "name");
            if (!name) throw bad_field(p + ".name", "missing");
            call.name = string_field(*name, p + ".name");
            if (!is_tool_name(call.name)) throw bad_field(p + ".name", "invalid function name");
            const auto* args = field(item, "arguments");
            call.arguments = args ? parse_arguments(*args, p + ".arguments") : nlohmann::json::object();
            assistant().tool_calls.push_back(std::move(call));
        } else if (type == "function_call_output") {
            Message result{.role = "tool"};
            const auto* id = field(item, "call_id");
            if (!id) throw bad_field(p + ".call_id", "missing");
            result.tool_call_id = string_field(*id, p + ".call_id");
            const auto* output = field(item, "output");
            if (!output) throw bad_field(p + ".output", "missing");
            std::vector<MediaItem> none;
            result.content = output->is_string() ? output->get<std::string>() : parse_responses_content(*output, p + ".output", "tool", none);
            if (!none.empty()) throw bad_field(p + ".output", "images are accepted in user messages only");
            r.messages.push_back(std::move(result));
        } else if (type == "reasoning") {
            if (auto content = field(item, "content"); content && content->is_array())
                for (const auto& part : *content)
                    if (part.is_object() && part.contains("text") && part["text"].is_string()) reasoning += part["text"].get<std::string>();
        } else {
            throw bad_field(p + ".type", "unsupported input item type '" + type + "' (message, function_call, function_call_output, reasoning)");
        }
    }
}

/// `tools`: function tools ({type: "function", name, description, parameters, strict}) in chat's shape.
template <class Json>
Json responses_tools(const Json& tools) {
    Json out = Json::array();
    for (const auto& t : tools) {
        Json function = Json::object();
        for (const char* key : {"name", "description", "parameters", "strict"})
            if (const auto v = t.find(key); v != t.end() && !v->is_null()) function[key] = *v;
        out.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    return out;
}

inline void check_responses_tools(const nlohmann::json& tools) {
    if (!tools.is_array()) throw bad_field("tools", "expected an array");
    for (std::size_t i = 0; i < tools.size(); ++i) {
        const auto& t = tools[i];
        const std::string p = "tools[" + std::to_string(i) + "]";
        if (!t.is_object()) throw bad_field(p, "expected an object");
        const auto* type = field(t, "type");
        if (!type || string_field(*type, p + ".type") != "function")
            throw bad_field(p + ".type", "only function tools are supported (the server runs no tools of its own)");
        const auto* name = field(t, "name");
        if (!name || !name->is_string() || !is_tool_name(name->get<std::string>())) throw bad_field(p + ".name", "missing or invalid");
        if (auto params = field(t, "parameters"); params && !params->is_object()) throw bad_field(p + ".parameters", "expected a JSON schema object");
        if (auto d = field(t, "description")) string_field(*d, p + ".description");
        if (auto s = field(t, "strict")) bool_field(*s, p + ".strict");
    }
}

inline void parse_responses_tool_choice(const nlohmann::json& choice, ChatRequest& r) {
    if (choice.is_string()) {
        const std::string c = choice.get<std::string>();
        if (c == "none") r.tool_choice = ToolChoice::None;
        else if (c == "auto") r.tool_choice = ToolChoice::Auto;
        else if (c == "required") r.tool_choice = ToolChoice::Required;
        else throw bad_field("tool_choice", "unknown value '" + c + "' (none, auto, required, or {\"type\":\"function\",\"name\":...})");
    } else if (choice.is_object()) {
        if (auto type = field(choice, "type"); !type || string_field(*type, "tool_choice.type") != "function")
            throw bad_field("tool_choice.type", "expected \"function\"");
        const auto* name = field(choice, "name");
        if (!name) throw bad_field("tool_choice.name", "missing");
        r.tool_choice_name = string_field(*name, "tool_choice.name");
        r.tool_choice = ToolChoice::Function;
        bool declared = false;
        for (const auto& t : r.tools) declared |= t["function"]["name"] == r.tool_choice_name;
        if (!declared && !r.tools.empty()) throw bad_field("tool_choice.name", "'" + r.tool_choice_name + "' is not one of the declared tools");
    } else {
        throw bad_field("tool_choice", "expected a string or an object");
    }
    if (r.tools.empty() && (r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Function))
        throw bad_field("tool_choice", "requires a tool in 'tools'");
    if (r.tool_choice == ToolChoice::None) r.tools = nlohmann::json::array();
}

/// `text.format`: {type: text | json_object | json_schema, name, schema, strict}.
inline void check_text_format(const nlohmann::json& text) {
    if (!text.is_object()) throw bad_field("text", "expected an object");
    const auto* format = field(text, "format");
    if (!format) return;
    if (!format->is_object()) throw bad_field("text.format", "expected an object");
    const auto* type = field(*format, "type");
    if (!type) throw bad_field("text.format.type", "missing (text, json_object or json_schema)");
    const std::string t = string_field(*type, "text.format.type");
    if (t != "text" && t != "json_object" && t != "json_schema")
        throw bad_field("text.format.type", "unknown type '" + t + "' (text, json_object or json_schema)");
    if (t == "json_schema" && !field(*format, "schema")) throw bad_field("text.format.schema", "missing");
    if (auto s = field(*format, "strict")) bool_field(*s, "text.format.strict");
}

}  // namespace detail

/// Parses a /v1/responses body (already valid JSON).
inline ResponsesRequest parse_responses_request(const nlohmann::json& body) {
    using namespace detail;
    if (!body.is_object()) throw ApiError(400, "request body must be a JSON object");
    ResponsesRequest q;
    ChatRequest& r = q.chat;
    SamplingFields& s = r.sampling;
    if (auto v = field(body, "store"); v && bool_field(*v, "store"))
        throw bad_field("store", "this server is stateless and stores no response: send store: false or leave it out");
    if (field(body, "previous_response_id"))
        throw bad_field("previous_response_id", "this server is stateless and keeps no response: send the whole conversation in 'input'");
    if (field(body, "conversation")) throw bad_field("conversation", "this server is stateless: send the whole conversation in 'input'");
    if (auto v = field(body, "background"); v && bool_field(*v, "background")) throw bad_field("background", "background responses are not supported");
    if (auto v = field(body, "model")) s.model = string_field(*v, "model");
    if (auto v = field(body, "max_output_tokens")) s.max_tokens = integer_field(*v, "max_output_tokens", 1, INT32_MAX);
    if (auto v = field(body, "temperature")) s.temperature = number_field(*v, "temperature", 0, 2);
    if (auto v = field(body, "top_p")) s.top_p = number_field(*v, "top_p", 0, 1);
    if (s.top_p == 0.0) throw bad_field("top_p", "must be greater than 0");
    if (auto v = field(body, "stream")) s.stream = bool_field(*v, "stream");
    if (auto v = field(body, "metadata"); v && !v->is_object()) throw bad_field("metadata", "expected an object");
    if (auto v = field(body, "parallel_tool_calls")) q.parallel_tool_calls = bool_field(*v, "parallel_tool_calls");
    if (auto v = field(body, "text")) check_text_format(*v);

    if (auto v = field(body, "instructions")) r.messages.push_back({.role = "system", .content = message_text("system", string_field(*v, "instructions"))});
    const auto* input = field(body, "input");
    if (!input) throw bad_field("input", "missing");
    if (input->is_string()) r.messages.push_back({.role = "user", .content = message_text("user", input->get<std::string>())});
    else if (input->is_array() && !input->empty()) parse_responses_input(*input, r);
    else throw bad_field("input", "expected a string or a non-empty array of input items");

    if (auto tools = field(body, "tools")) {
        check_responses_tools(*tools);
        r.tools = responses_tools(*tools);
    }
    if (auto choice = field(body, "tool_choice")) parse_responses_tool_choice(*choice, r);
    if (auto reasoning = field(body, "reasoning")) {
        if (!reasoning->is_object()) throw bad_field("reasoning", "expected an object");
        if (auto effort = field(*reasoning, "effort")) {
            const std::string e = string_field(*effort, "reasoning.effort");
            if (e != "none" && e != "minimal" && e != "low" && e != "medium" && e != "high")
                throw bad_field("reasoning.effort", "expected none, minimal, low, medium or high");
            r.thinking = e != "none";
        }
    }

    for (const char* key : {"instructions", "max_output_tokens", "temperature", "top_p", "tools", "tool_choice", "metadata", "text", "reasoning"})
        if (auto v = field(body, key)) q.echo[key] = *v;
    q.echo["parallel_tool_calls"] = q.parallel_tool_calls;
    return q;
}

/// The grammar `text.format` or the tools ask for; `body` is the request as sent (keys in order).
/// A structured answer cannot be combined with a forced call or a strict tool.
inline std::optional<OutputGrammar> responses_output_grammar(const ResponsesRequest& q, const nlohmann::ordered_json& body) {
    std::optional<OutputGrammar> grammar;
    if (const auto text = body.find("text"); text != body.end() && text->is_object())
        if (const auto format = text->find("format"); format != text->end() && format->is_object()) {
            const std::string type = (*format)["type"].get<std::string>();  // checked by parse_responses_request
            if (type == "json_object") grammar = OutputGrammar{json_object_gbnf(), "text.format"};
            if (type == "json_schema") grammar = OutputGrammar{detail::schema_grammar((*format)["schema"], "text.format.schema"), "text.format.schema"};
        }
    if (q.chat.tools.empty()) return grammar;
    auto calls = tool_call_grammar(q.chat, detail::responses_tools(body["tools"]), q.parallel_tool_calls, ".parameters");
    if (calls && grammar) throw bad_field(grammar->param, "cannot be combined with a forced tool call or a strict tool");
    return calls ? calls : grammar;
}

/// A response object and its stream of events, from the reply's parser events.
class ResponsesReply {
public:
    ResponsesReply(std::string id, std::string model, std::int64_t created_at, nlohmann::json echo)
        : id_(std::move(id)), model_(std::move(model)), created_at_(created_at), echo_(std::move(echo)) {}

    /// The stream's first events.
    std::string start() {
        const nlohmann::json snapshot = response("in_progress");
        std::string out = event({{"type", "response.created"}, {"response", snapshot}});
        out += event({{"type", "response.in_progress"}, {"response", snapshot}});
        return out;
    }

    std::string add(const std::vector<ReplyEvent>& events) {
        std::string out;
        for (const ReplyEvent& e : events)
            for (const BlockStep& step : blocks_.add(e)) out += encode(step);
        return out;
    }

    /// The open item's end, then response.completed (response.incomplete when max_output_tokens
    /// or the context cut the reply).
    std::string finish(const ReplyEnd& end) {
        std::string out;
        for (const BlockStep& step : blocks_.finish()) out += encode(step);
        end_ = end;
        out += event({{"type", end.cut_short() ? "response.incomplete" : "response.completed"}, {"response", response()}});
        return out;
    }

    /// An error event of the stream (a failure after the response started).
    std::string error(const std::string& message) {
        return event({{"type", "error"}, {"code", "server_error"}, {"message", message}, {"param", nullptr}});
    }

    /// The whole response (after finish): the non-streamed body.
    nlohmann::json response() const { return response(end_.cut_short() ? "incomplete" : "completed"); }

private:
    nlohmann::json response(const std::string& status) const {
        nlohmann::json r = {{"id", id_},
                            {"object", "response"},
                            {"created_at", created_at_},
                            {"status", status},
                            {"error", nullptr},
                            {"incomplete_details", nullptr},
                            {"model", model_},
                            {"output", status == "in_progress" ? nlohmann::json::array() : output_},
                            {"previous_response_id", nullptr},
                            {"store", false},
                            {"usage", nullptr},
                            {"instructions", nullptr},
                            {"tools", nlohmann::json::array()},
                            {"tool_choice", "auto"},
                            {"metadata", nlohmann::json::object()},
                            {"text", {{"format", {{"type", "text"}}}}},
                            {"truncation", "disabled"}};
        r.update(echo_);
        if (status == "in_progress") return r;
        if (status == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
        r["usage"] = {{"input_tokens", end_.prompt_tokens},
                      {"input_tokens_details", {{"cached_tokens", end_.cached_tokens}}},
                      {"output_tokens", end_.output_tokens},
                      {"total_tokens", end_.prompt_tokens + end_.output_tokens}};
        return r;
    }

    std::string event(nlohmann::json payload) {
        payload["sequence_number"] = sequence_++;
        return sse_typed_event(payload);
    }

    /// The content part of a message or reasoning item.
    static nlohmann::json part(BlockKind kind, const std::string& text) {
        if (kind == BlockKind::Text) return {{"type", "output_text"}, {"text", text}, {"annotations", nlohmann::json::array()}};
        return {{"type", "reasoning_text"}, {"text", text}};
    }

    std::string encode(const BlockStep& step) {
        const int index = static_cast<int>(index_);
        switch (step.kind) {
        case BlockStep::Start: {
            text_.clear();
            if (step.block == BlockKind::ToolCall)
                item_ = {{"type", "function_call"}, {"id", make_id("fc_")}, {"call_id", make_id("call_")}, {"name", step.call.name}, {"arguments", ""},
                         {"status", "in_progress"}};
            else if (step.block == BlockKind::Text)
                item_ = {{"type", "message"}, {"id", make_id("msg_")}, {"status", "in_progress"}, {"role", "assistant"}, {"content", nlohmann::json::array()}};
            else
                item_ = {{"type", "reasoning"}, {"id", make_id("rs_")}, {"summary", nlohmann::json::array()}, {"content", nlohmann::json::array()}};
            std::string out = event({{"type", "response.output_item.added"}, {"output_index", index}, {"item", item_}});
            if (step.block != BlockKind::ToolCall)
                out += event({{"type", "response.content_part.added"}, {"item_id", item_["id"]}, {"output_index", index}, {"content_index", 0},
                              {"part", part(step.block, "")}});
            return out;
        }
        case BlockStep::Delta: {
            text_ += step.text;
            const char* type = step.block == BlockKind::Text       ? "response.output_text.delta"
                               : step.block == BlockKind::Thinking ? "response.reasoning_text.delta"
                                                                   : "response.function_call_arguments.delta";
            nlohmann::json e = {{"type", type}, {"item_id", item_["id"]}, {"output_index", index}, {"delta", step.text}};
            if (step.block != BlockKind::ToolCall) e["content_index"] = 0;
            if (step.block == BlockKind::Text) e["logprobs"] = nlohmann::json::array();
            return event(std::move(e));
        }
        case BlockStep::Stop: {
            std::string out;
            ++index_;
            if (step.block == BlockKind::ToolCall) {
                if (step.abandoned) {  // no call: its text follows in a message item
                    item_["status"] = "incomplete";
                    return event({{"type", "response.output_item.done"}, {"output_index", index}, {"item", item_}});
                }
                item_["arguments"] = arguments_text(step.call);
                item_["status"] = "completed";
                out += event({{"type", "response.function_call_arguments.done"}, {"item_id", item_["id"]}, {"output_index", index},
                              {"arguments", item_["arguments"]}});
            } else {
                const nlohmann::json done = part(step.block, text_);
                nlohmann::json e = {{"type", step.block == BlockKind::Text ? "response.output_text.done" : "response.reasoning_text.done"},
                                    {"item_id", item_["id"]}, {"output_index", index}, {"content_index", 0}, {"text", text_}};
                if (step.block == BlockKind::Text) e["logprobs"] = nlohmann::json::array();
                out += event(std::move(e));
                out += event({{"type", "response.content_part.done"}, {"item_id", item_["id"]}, {"output_index", index}, {"content_index", 0}, {"part", done}});
                item_["content"] = nlohmann::json::array({done});
                if (step.block == BlockKind::Text) item_["status"] = "completed";
            }
            output_.push_back(item_);
            out += event({{"type", "response.output_item.done"}, {"output_index", index}, {"item", item_}});
            return out;
        }
        }
        return {};
    }

    std::string id_, model_;
    std::int64_t created_at_;
    nlohmann::json echo_;
    ReplyBlocks blocks_;
    nlohmann::json output_ = nlohmann::json::array();  ///< the finished items (an abandoned call's left out)
    nlohmann::json item_;                               ///< the open item
    std::string text_;                                  ///< the open item's text or arguments so far
    std::size_t index_ = 0;                             ///< the stream's output_index of the open item
    std::int64_t sequence_ = 0;
    ReplyEnd end_;
};

}  // namespace gemma4::server
