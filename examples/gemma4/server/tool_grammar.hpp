// The grammar of a reply's tool calls, in Gemma 4's own call syntax (tool_format.hpp):
//   <|tool_call>call:NAME{key:value,…}<tool_call|>
// with each tool's arguments compiled from its `parameters` schema (json_schema.hpp's Gemma
// syntax), so that a forced call is always produced and its arguments always validate.
//   tool_choice "required"        one or more calls of the declared tools
//   tool_choice {function: X}     a call of X first, then (parallel calls) any others
//   "auto" with a `strict` tool   free text, then optionally calls as above
// `parallel_tool_calls: false` allows one call. The reply's end (the stop ids: <|tool_response>,
// <turn|>) comes after the last call.
#pragma once

#include "chat_request.hpp"
#include "response_format.hpp"
#include "tool_format.hpp"

#include <gemma4/grammar/json_schema.hpp>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace gemma4::server {

namespace detail {

/// Whether any declared tool asks for strict arguments.
inline bool any_strict_tool(const nlohmann::ordered_json& tools) {
    for (const auto& t : tools)
        if (const auto f = t.find("function"); f != t.end() && f->is_object())
            if (const auto s = f->find("strict"); s != f->end() && s->is_boolean() && s->get<bool>()) return true;
    return false;
}

/// The rules of tool i's arguments (start rule tool<i>-root), or "{}" for a tool without
/// parameters; a schema the compiler refuses is a 400 naming `tools[i]` + `schema_field`.
inline std::string arguments_rules(const nlohmann::ordered_json& function, std::size_t i, const std::string& schema_field, std::string& rules) {
    const std::string param = "tools[" + std::to_string(i) + "]" + schema_field;
    const auto p = function.find("parameters");
    if (p == function.end() || p->is_null() || (p->is_object() && p->empty())) return "\"{}\"";
    JsonSchemaOptions options;
    options.syntax = ValueSyntax::GemmaToolCall;
    options.rule_prefix = "tool" + std::to_string(i) + "-";
    try {
        rules += json_schema_to_gbnf(*p, options);
    } catch (const GrammarError& e) {
        throw bad_field(param, e.what());
    }
    return options.rule_prefix + "root";
}

/// `call ::= <|tool_call> "call:" (NAME args | …) <tool_call|>`, and `call-X` for a named choice.
inline std::string call_rules(const nlohmann::ordered_json& tools, const std::string& forced, const std::string& schema_field, std::string& rules) {
    std::string any, named;
    for (std::size_t i = 0; i < tools.size(); ++i) {
        const auto& function = tools[i]["function"];
        const std::string name = function["name"].get<std::string>();  // is_tool_name: plain characters
        const std::string alternative = "\"" + name + "\" " + arguments_rules(function, i, schema_field, rules);
        any += (any.empty() ? "" : " | ") + alternative;
        if (name == forced) named = alternative;
    }
    std::string out = "call ::= " + std::string(kToolCallStart) + " \"call:\" ( " + any + " ) " + std::string(kToolCallEnd) + "\n";
    if (!forced.empty()) out += "call-forced ::= " + std::string(kToolCallStart) + " \"call:\" " + named + " " + std::string(kToolCallEnd) + "\n";
    return out;
}

}  // namespace detail

/// The grammar that `r`'s tools and tool_choice ask for, or nothing (no tools, "none", or "auto"
/// without a strict tool). `tools` are r's in chat's shape ({"function": {name, parameters,
/// strict}}) with their keys in the order sent; `parallel`: more than one call may follow;
/// `schema_field`: where tool i's schema is in the request, after "tools[i]" (for errors).
inline std::optional<OutputGrammar> tool_call_grammar(const ChatRequest& r, const nlohmann::ordered_json& tools, bool parallel,
                                                      const std::string& schema_field) {
    if (r.tools.empty() || r.tool_choice == ToolChoice::None) return std::nullopt;
    const bool forced = r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Function;
    if (!forced && !detail::any_strict_tool(tools)) return std::nullopt;
    std::string rules;
    const std::string calls = detail::call_rules(tools, r.tool_choice == ToolChoice::Function ? r.tool_choice_name : "", schema_field, rules);
    const std::string first = r.tool_choice == ToolChoice::Function ? "call-forced" : "call";
    const std::string sequence = first + (parallel ? " call*" : "");
    const std::string root = forced ? "root ::= " + sequence + "\n" : "root ::= .* ( " + sequence + " )?\n";
    return OutputGrammar{root + calls + rules, "tools"};
}

/// The grammar of a /v1/chat/completions request; `body` is the request as sent (its keys in order).
inline std::optional<OutputGrammar> tool_call_grammar(const ChatRequest& r, const nlohmann::ordered_json& body) {
    if (r.tools.empty() || r.tool_choice == ToolChoice::None) return std::nullopt;
    bool parallel = true;
    if (const auto p = body.find("parallel_tool_calls"); p != body.end() && !p->is_null()) {
        if (!p->is_boolean()) throw bad_field("parallel_tool_calls", "expected a boolean");
        parallel = p->get<bool>();
    }
    return tool_call_grammar(r, body["tools"], parallel, ".function.parameters");
}

}  // namespace gemma4::server
