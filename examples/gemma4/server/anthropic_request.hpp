// An Anthropic Messages request body (POST /v1/messages, /v1/messages/count_tokens) → the chat
// request the rest of the server runs (chat_request.hpp): its messages, tools and tool_choice in
// the chat endpoint's terms, so the prompt, the tool syntax, the forced-call grammar and the reply
// parser are the chat endpoint's. tool_use blocks become an assistant's calls, tool_result blocks
// the tool messages after them, thinking blocks its reasoning, base64 image blocks media. Wrong
// types and values are ApiErrors (400) that name the field as Anthropic's API spells it.
#pragma once

#include "api_error.hpp"
#include "chat_request.hpp"
#include "data_url.hpp"
#include "response_format.hpp"
#include "tool_grammar.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace gemma4::server {

struct AnthropicRequest {
    ChatRequest chat;
    /// tool_choice.disable_parallel_tool_use: false. With a forced call, one call only.
    bool parallel_tool_calls = true;
    /// A last assistant message's text: the reply continues it (Anthropic's prefill); the
    /// message is not in chat.messages.
    std::string prefill;
};

/// /v1/messages requires max_tokens; /v1/messages/count_tokens takes the same body without it.
enum class MessagesEndpoint { Messages, CountTokens };

/// Anthropic's bound on budget_tokens: a thinking request gives at least this many.
inline constexpr std::int64_t kMinThinkingBudget = 1024;

namespace detail {

/// `system`: a string, or an array of text blocks (concatenated, as a message's text parts are).
inline std::string parse_anthropic_system(const nlohmann::json& system) {
    if (system.is_string()) return message_text("system", system.get<std::string>());
    if (!system.is_array()) throw bad_field("system", "expected a string or an array of text blocks");
    std::string out;
    for (std::size_t i = 0; i < system.size(); ++i) {
        const std::string p = "system[" + std::to_string(i) + "]";
        const auto& block = system[i];
        if (!block.is_object()) throw bad_field(p, "expected a text block");
        const auto* type = field(block, "type");
        if (!type || string_field(*type, p + ".type") != "text") throw bad_field(p + ".type", "expected \"text\"");
        const auto* text = field(block, "text");
        if (!text) throw bad_field(p + ".text", "missing");
        out += message_text("system", string_field(*text, p + ".text"));
    }
    return out;
}

/// An image block's `source`: base64 PNG or JPEG, or a data: URL (a remote URL is refused).
inline MediaItem parse_anthropic_image(const nlohmann::json& block, const std::string& p) {
    const auto* source = field(block, "source");
    if (!source || !source->is_object()) throw bad_field(p + ".source", "expected {\"type\": \"base64\", \"media_type\", \"data\"}");
    const std::string sp = p + ".source";
    const auto* type = field(*source, "type");
    if (!type) throw bad_field(sp + ".type", "missing");
    const std::string t = string_field(*type, sp + ".type");
    if (t == "base64") {
        const auto* media_type = field(*source, "media_type");
        if (!media_type) throw bad_field(sp + ".media_type", "missing");
        check_image_type(string_field(*media_type, sp + ".media_type"), sp + ".media_type");
        const auto* data = field(*source, "data");
        if (!data) throw bad_field(sp + ".data", "missing");
        return {MediaItem::Image, require_base64(string_field(*data, sp + ".data"), sp + ".data"), sp};
    }
    if (t == "url") {
        const auto* url = field(*source, "url");
        if (!url) throw bad_field(sp + ".url", "missing");
        DataUrl d = parse_data_url(string_field(*url, sp + ".url"), sp + ".url");
        check_image_type(d.media_type, sp + ".url");
        return {MediaItem::Image, std::move(d.bytes), sp};
    }
    throw bad_field(sp + ".type", "unsupported source type '" + t + "' (base64, or url with a data: URL)");
}

/// A tool_result block's content: a string or text blocks (a tool's result is text in Gemma 4's
/// format).
inline std::string parse_tool_result_content(const nlohmann::json& block, const std::string& p) {
    const auto* content = field(block, "content");
    if (!content) return "";
    if (content->is_string()) return content->get<std::string>();
    if (!content->is_array()) throw bad_field(p + ".content", "expected a string or an array of text blocks");
    std::string out;
    for (std::size_t k = 0; k < content->size(); ++k) {
        const std::string cp = p + ".content[" + std::to_string(k) + "]";
        const auto& part = (*content)[k];
        const auto* type = part.is_object() ? field(part, "type") : nullptr;
        if (!type || string_field(*type, cp + ".type") != "text") throw bad_field(cp + ".type", "only text blocks are supported in a tool result");
        const auto* text = field(part, "text");
        if (!text) throw bad_field(cp + ".text", "missing");
        out += string_field(*text, cp + ".text");
    }
    return out;
}

/// One message of `messages` → chat's messages: a user message's tool_result blocks become tool
/// messages (first, as they answer the calls just before), its text and images a user message;
/// an assistant's text, tool_use and thinking blocks one assistant message.
inline void parse_anthropic_message(const nlohmann::json& m, const std::string& p, ChatRequest& r) {
    if (!m.is_object()) throw bad_field(p, "expected an object");
    const auto* role_field = field(m, "role");
    if (!role_field) throw bad_field(p + ".role", "missing");
    const std::string role = string_field(*role_field, p + ".role");
    if (role != "user" && role != "assistant") throw bad_field(p + ".role", "unknown role '" + role + "' (user, assistant)");
    const auto* content = field(m, "content");
    if (!content) throw bad_field(p + ".content", "missing");
    Message msg{.role = role};
    if (content->is_string()) {
        msg.content = message_text(role, content->get<std::string>());
        r.messages.push_back(std::move(msg));
        return;
    }
    if (!content->is_array()) throw bad_field(p + ".content", "expected a string or an array of content blocks");
    std::vector<Message> results;
    for (std::size_t i = 0; i < content->size(); ++i) {
        const auto& block = (*content)[i];
        const std::string bp = p + ".content[" + std::to_string(i) + "]";
        if (!block.is_object()) throw bad_field(bp, "expected a content block");
        const auto* type = field(block, "type");
        if (!type) throw bad_field(bp + ".type", "missing");
        const std::string t = string_field(*type, bp + ".type");
        auto only = [&](const char* allowed) {
            if (role != allowed) throw bad_field(bp + ".type", "a " + t + " block belongs in a " + allowed + " message");
        };
        if (t == "text") {
            const auto* text = field(block, "text");
            if (!text) throw bad_field(bp + ".text", "missing");
            msg.content += message_text(role, string_field(*text, bp + ".text"));
        } else if (t == "image") {
            only("user");
            r.media.push_back(parse_anthropic_image(block, bp));
            msg.content += "<|image|>";
        } else if (t == "tool_use") {
            only("assistant");
            ToolCallMessage call;
            const auto* id = field(block, "id");
            if (!id) throw bad_field(bp + ".id", "missing");
            call.id = string_field(*id, bp + ".id");
            const auto* name = field(block, "name");
            if (!name) throw bad_field(bp + ".name", "missing");
            call.name = string_field(*name, bp + ".name");
            if (!is_tool_name(call.name)) throw bad_field(bp + ".name", "invalid tool name");
            const auto* input = field(block, "input");
            if (input && !input->is_object()) throw bad_field(bp + ".input", "expected an object");
            call.arguments = input ? *input : nlohmann::json::object();
            msg.tool_calls.push_back(std::move(call));
        } else if (t == "tool_result") {
            only("user");
            Message result{.role = "tool"};
            const auto* id = field(block, "tool_use_id");
            if (!id) throw bad_field(bp + ".tool_use_id", "missing");
            result.tool_call_id = string_field(*id, bp + ".tool_use_id");
            if (auto e = field(block, "is_error")) bool_field(*e, bp + ".is_error");
            result.content = parse_tool_result_content(block, bp);
            results.push_back(std::move(result));
        } else if (t == "thinking") {
            only("assistant");
            const auto* thinking = field(block, "thinking");
            if (!thinking) throw bad_field(bp + ".thinking", "missing");
            msg.reasoning += string_field(*thinking, bp + ".thinking");
        } else if (t == "redacted_thinking") {
            only("assistant");  // encrypted by another service: nothing this model can read
        } else {
            throw bad_field(bp + ".type", "unsupported content block type '" + t + "' (text, image, tool_use, tool_result, thinking)");
        }
    }
    for (Message& result : results) r.messages.push_back(std::move(result));
    if (role == "assistant" || !msg.content.empty() || results.empty()) r.messages.push_back(std::move(msg));
}

/// `tools`: custom tools ({name, description, input_schema}) in chat's shape.
inline nlohmann::json parse_anthropic_tools(const nlohmann::json& tools) {
    if (!tools.is_array()) throw bad_field("tools", "expected an array");
    nlohmann::json out = nlohmann::json::array();
    for (std::size_t i = 0; i < tools.size(); ++i) {
        const auto& t = tools[i];
        const std::string p = "tools[" + std::to_string(i) + "]";
        if (!t.is_object()) throw bad_field(p, "expected an object");
        if (auto type = field(t, "type"); type && string_field(*type, p + ".type") != "custom")
            throw bad_field(p + ".type", "only custom tools are supported (the server runs no tools of its own)");
        const auto* name = field(t, "name");
        if (!name || !name->is_string() || !is_tool_name(name->get<std::string>())) throw bad_field(p + ".name", "missing or invalid");
        const auto* schema = field(t, "input_schema");
        if (!schema || !schema->is_object()) throw bad_field(p + ".input_schema", "expected a JSON schema object");
        nlohmann::json function = {{"name", *name}, {"parameters", *schema}};
        if (auto d = field(t, "description")) function["description"] = string_field(*d, p + ".description");
        if (auto s = field(t, "strict")) function["strict"] = bool_field(*s, p + ".strict");
        out.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    return out;
}

/// `tool_choice`: {type: auto | any | tool | none, name, disable_parallel_tool_use}.
inline void parse_anthropic_tool_choice(const nlohmann::json& choice, AnthropicRequest& a) {
    ChatRequest& r = a.chat;
    if (!choice.is_object()) throw bad_field("tool_choice", "expected an object ({\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"})");
    const auto* type = field(choice, "type");
    if (!type) throw bad_field("tool_choice.type", "missing");
    const std::string t = string_field(*type, "tool_choice.type");
    if (t == "auto") r.tool_choice = ToolChoice::Auto;
    else if (t == "any") r.tool_choice = ToolChoice::Required;
    else if (t == "none") r.tool_choice = ToolChoice::None;
    else if (t == "tool") {
        const auto* name = field(choice, "name");
        if (!name) throw bad_field("tool_choice.name", "missing");
        r.tool_choice_name = string_field(*name, "tool_choice.name");
        r.tool_choice = ToolChoice::Function;
        bool declared = false;
        for (const auto& tool : r.tools) declared |= tool["function"]["name"] == r.tool_choice_name;
        if (!declared && !r.tools.empty()) throw bad_field("tool_choice.name", "'" + r.tool_choice_name + "' is not one of the declared tools");
    } else {
        throw bad_field("tool_choice.type", "unknown value '" + t + "' (auto, any, tool, none)");
    }
    if (auto d = field(choice, "disable_parallel_tool_use")) a.parallel_tool_calls = !bool_field(*d, "tool_choice.disable_parallel_tool_use");
    if (r.tools.empty() && (r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Function))
        throw bad_field("tool_choice", "requires a tool in 'tools'");
    if (r.tool_choice == ToolChoice::None) r.tools = nlohmann::json::array();
}

/// `thinking`: {type: "enabled", budget_tokens} or {type: "disabled"}. The budget is checked as
/// Anthropic checks it; the thought and the answer share max_tokens.
inline bool parse_anthropic_thinking(const nlohmann::json& thinking, const std::optional<std::int64_t>& max_tokens) {
    if (!thinking.is_object()) throw bad_field("thinking", "expected {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": \"disabled\"}");
    const auto* type = field(thinking, "type");
    if (!type) throw bad_field("thinking.type", "missing");
    const std::string t = string_field(*type, "thinking.type");
    if (t == "disabled") return false;
    if (t != "enabled") throw bad_field("thinking.type", "unknown value '" + t + "' (enabled, disabled)");
    const auto* budget = field(thinking, "budget_tokens");
    if (!budget) throw bad_field("thinking.budget_tokens", "missing");
    const auto b = integer_field(*budget, "thinking.budget_tokens", kMinThinkingBudget, INT32_MAX);
    if (max_tokens && b >= *max_tokens) throw bad_field("thinking.budget_tokens", "must be less than max_tokens");
    return true;
}

}  // namespace detail

/// Parses a Messages body (already valid JSON).
inline AnthropicRequest parse_anthropic_request(const nlohmann::json& body, MessagesEndpoint endpoint = MessagesEndpoint::Messages) {
    using namespace detail;
    if (!body.is_object()) throw ApiError(400, "request body must be a JSON object");
    AnthropicRequest a;
    ChatRequest& r = a.chat;
    SamplingFields& s = r.sampling;
    if (auto v = field(body, "model")) s.model = string_field(*v, "model");
    if (endpoint == MessagesEndpoint::Messages) {
        const auto* max_tokens = field(body, "max_tokens");
        if (!max_tokens) throw bad_field("max_tokens", "missing (Anthropic's API requires it)");
        s.max_tokens = integer_field(*max_tokens, "max_tokens", 1, INT32_MAX);
        if (auto v = field(body, "stream")) s.stream = bool_field(*v, "stream");
    }
    if (auto v = field(body, "temperature")) s.temperature = number_field(*v, "temperature", 0, 1);
    if (auto v = field(body, "top_p")) s.top_p = number_field(*v, "top_p", 0, 1);
    if (s.top_p == 0.0) throw bad_field("top_p", "must be greater than 0");
    if (auto v = field(body, "top_k")) s.top_k = static_cast<std::int32_t>(integer_field(*v, "top_k", 0, INT32_MAX));
    if (auto v = field(body, "stop_sequences")) {
        if (!v->is_array()) throw bad_field("stop_sequences", "expected an array of strings");
        if (v->size() > 16) throw bad_field("stop_sequences", "at most 16 stop sequences");
        for (std::size_t i = 0; i < v->size(); ++i) {
            const std::string p = "stop_sequences[" + std::to_string(i) + "]";
            s.stop.push_back(string_field((*v)[i], p));
            if (s.stop.back().empty()) throw bad_field(p, "empty stop sequence");
        }
    }
    if (auto v = field(body, "metadata"); v && !v->is_object()) throw bad_field("metadata", "expected an object");

    if (auto system = field(body, "system")) r.messages.push_back({.role = "system", .content = parse_anthropic_system(*system)});
    const auto* messages = field(body, "messages");
    if (!messages) throw bad_field("messages", "missing");
    if (!messages->is_array() || messages->empty()) throw bad_field("messages", "expected a non-empty array");
    for (std::size_t i = 0; i < messages->size(); ++i) parse_anthropic_message((*messages)[i], "messages[" + std::to_string(i) + "]", r);

    if (auto tools = field(body, "tools")) r.tools = parse_anthropic_tools(*tools);
    if (auto choice = field(body, "tool_choice")) parse_anthropic_tool_choice(*choice, a);
    if (auto thinking = field(body, "thinking")) r.thinking = parse_anthropic_thinking(*thinking, s.max_tokens);

    // A last assistant message is the start of the reply, which the model continues (its text
    // trimmed, as the template trims an assistant's).
    const std::string last = "messages[" + std::to_string(messages->size() - 1) + "]";
    if (Message& m = r.messages.back(); m.role == "assistant") {
        if (!m.tool_calls.empty()) throw bad_field(last, "a tool_use block needs its tool_result in a user message after it");
        if (r.thinking) throw bad_field(last, "a last assistant message (a prefill) cannot be combined with thinking");
        if (r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Function)
            throw bad_field(last, "a last assistant message (a prefill) cannot be combined with a forced tool_choice");
        a.prefill = std::move(m.content);
        r.messages.pop_back();
    }
    return a;
}

/// The prompt the model continues: the conversation, then the forced call's opening or the
/// assistant's prefill.
inline std::string render_prompt(const AnthropicRequest& a) { return render_prompt(a.chat) + a.prefill; }

/// The grammar of a forced call (or of strict tools), from `body` as sent (schema keys in order).
inline std::optional<OutputGrammar> anthropic_tool_grammar(const AnthropicRequest& a, const nlohmann::ordered_json& body) {
    if (a.chat.tools.empty()) return std::nullopt;
    nlohmann::ordered_json tools = nlohmann::ordered_json::array();
    for (const auto& t : body["tools"]) {  // validated by parse_anthropic_request
        nlohmann::ordered_json function = {{"name", t["name"]}, {"parameters", t["input_schema"]}};
        if (const auto s = t.find("strict"); s != t.end()) function["strict"] = *s;
        tools.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    return tool_call_grammar(a.chat, tools, a.parallel_tool_calls, ".input_schema");
}

}  // namespace gemma4::server
