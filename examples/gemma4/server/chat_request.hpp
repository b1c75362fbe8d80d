// An OpenAI chat/completions request body → what the engine needs: the Gemma 4 prompt text
// (rendered as the model's chat template does, tools and tool results included), the media in
// placeholder order, and the sampling fields. Wrong types and values are ApiErrors (400) that
// name the field.
#pragma once

#include "api_error.hpp"
#include "data_url.hpp"
#include "reply_parser.hpp"
#include "tool_format.hpp"

#include <gemma4/generate/chat.hpp>
#include <gemma4/generate/sampler.hpp>

#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gemma4::server {

struct ToolCallMessage {
    std::string id, name;
    nlohmann::json arguments;  ///< object
};

/// One message, its content already rendered the way the template writes it (text trimmed,
/// media parts as <|image|> / <|audio|>, thoughts stripped from assistant text).
struct Message {
    std::string role{};  ///< system, user, assistant, tool
    std::string content{};
    std::vector<ToolCallMessage> tool_calls{};  ///< assistant
    std::string tool_call_id{}, name{};         ///< tool
    std::string reasoning{};                    ///< assistant's reasoning_content, if sent back
};

struct MediaItem {
    enum Kind { Image, Audio } kind;
    std::vector<std::byte> bytes;  ///< PNG/JPEG or WAV
    std::string param;             ///< "messages[1].content[0].image_url" for errors
};

/// The sampling and stopping fields shared by chat and text completions.
struct SamplingFields {
    std::optional<std::int64_t> max_tokens;
    std::optional<double> temperature, top_p, min_p;
    std::optional<std::int32_t> top_k;
    std::optional<std::uint64_t> seed;
    std::optional<double> presence_penalty, frequency_penalty;  ///< OpenAI's, in [-2, 2]
    std::optional<double> repetition_penalty;                   ///< vLLM's and HF's, > 0
    std::optional<std::int32_t> repeat_last_n;                  ///< llama-server's window of it
    std::optional<std::int64_t> min_tokens;                     ///< vLLM's
    /// OpenAI's {"token id": bias}; whether the ids are in the vocabulary is checked by the server.
    std::vector<TokenBias> logit_bias;
    std::vector<std::string> stop;
    bool stream = false;
    bool include_usage = false;
    /// Not OpenAI's (llama-server's and vLLM's): end-of-turn ids do not end the reply, which then
    /// runs to max_tokens or a stop string — for measuring throughput at a fixed length.
    bool ignore_eos = false;
    std::string model;
    /// GenerateOptions::logprobs: -1 off, else the top alternatives per token (chat's
    /// logprobs + top_logprobs, the completions' logprobs).
    std::int32_t logprobs = -1;
    /// OpenAI's `n`: the choices to generate for the prompt (at least 1; the server bounds it
    /// with --max-n). Choice i samples with seed + i.
    std::int32_t n = 1;
};

/// OpenAI's tool_choice. None: no tools offered, no calls parsed. Auto: the model decides.
/// Required: the reply opens with a call (prefilled `<|tool_call>`). Function: the reply opens with
/// a call of `ChatRequest::tool_choice_name` (prefilled `<|tool_call>call:NAME{`).
enum class ToolChoice { Auto, None, Required, Function };

struct ChatRequest {
    SamplingFields sampling;
    std::vector<Message> messages;
    nlohmann::json tools = nlohmann::json::array();
    ToolChoice tool_choice = ToolChoice::Auto;
    std::string tool_choice_name;  ///< ToolChoice::Function
    bool thinking = false;
    std::vector<MediaItem> media;  ///< in the order of their placeholders in the prompt
};

namespace detail {

inline const nlohmann::json* field(const nlohmann::json& o, const char* name) {
    auto it = o.find(name);
    return it == o.end() || it->is_null() ? nullptr : &*it;
}

inline double number_field(const nlohmann::json& v, const std::string& param, double lo, double hi) {
    if (!v.is_number()) throw bad_field(param, "expected a number");
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
        throw bad_field(param, "must be between " + nlohmann::json(lo).dump() + " and " + nlohmann::json(hi).dump());
    return x;
}

inline std::int64_t integer_field(const nlohmann::json& v, const std::string& param, std::int64_t lo, std::int64_t hi) {
    if (!v.is_number_integer()) throw bad_field(param, "expected an integer");
    const bool negative = v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() < 0;
    if (!negative && v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi))
        throw bad_field(param, "must be at most " + std::to_string(hi));
    const std::int64_t x = v.get<std::int64_t>();
    if (x < lo || x > hi) throw bad_field(param, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    return x;
}

inline std::string string_field(const nlohmann::json& v, const std::string& param) {
    if (!v.is_string()) throw bad_field(param, "expected a string");
    return v.get<std::string>();
}

inline bool bool_field(const nlohmann::json& v, const std::string& param) {
    if (!v.is_boolean()) throw bad_field(param, "expected a boolean");
    return v.get<bool>();
}

/// OpenAI's logit_bias: {"token id": bias in [-100, 100]}. A key must be a token id written in
/// decimal digits ("42", not "+42" or "4.2"); the server checks that it is in the vocabulary.
inline std::vector<TokenBias> parse_logit_bias(const nlohmann::json& v) {
    if (!v.is_object()) throw bad_field("logit_bias", "expected an object mapping token ids to biases");
    std::vector<TokenBias> out;
    for (const auto& [key, bias] : v.items()) {
        std::int32_t id = -1;
        const char* end = key.data() + key.size();
        const auto [stop, error] = std::from_chars(key.data(), end, id);
        if (key.empty() || key[0] == '-' || error != std::errc() || stop != end)
            throw bad_field("logit_bias", "key '" + key + "' is not a token id");
        if (!bias.is_number()) throw bad_field("logit_bias", "the bias of token " + key + " is not a number");
        const double b = bias.get<double>();
        if (!(b >= -100 && b <= 100)) throw bad_field("logit_bias", "the bias of token " + key + " must be between -100 and 100");
        out.push_back({id, b});
    }
    return out;
}

/// The penalties, logit_bias and min_tokens into `s`. min_tokens above max_tokens is refused,
/// as vLLM does: the two cannot both hold.
inline void parse_penalties(const nlohmann::json& body, SamplingFields& s) {
    if (auto v = field(body, "presence_penalty")) s.presence_penalty = number_field(*v, "presence_penalty", -2, 2);
    if (auto v = field(body, "frequency_penalty")) s.frequency_penalty = number_field(*v, "frequency_penalty", -2, 2);
    if (auto v = field(body, "repetition_penalty")) {
        if (!v->is_number()) throw bad_field("repetition_penalty", "expected a number");
        s.repetition_penalty = v->get<double>();
        if (!(*s.repetition_penalty > 0) || !std::isfinite(*s.repetition_penalty)) throw bad_field("repetition_penalty", "must be greater than 0");
    }
    if (auto v = field(body, "repeat_last_n")) s.repeat_last_n = static_cast<std::int32_t>(integer_field(*v, "repeat_last_n", -1, kMaxRepeatLastN));
    if (auto v = field(body, "logit_bias")) s.logit_bias = parse_logit_bias(*v);
    if (auto v = field(body, "min_tokens")) {
        s.min_tokens = integer_field(*v, "min_tokens", 0, INT32_MAX);
        if (s.max_tokens && *s.min_tokens > *s.max_tokens) throw bad_field("min_tokens", "must not exceed max_tokens");
    }
}

}  // namespace detail

/// The fields common to /v1/chat/completions and /v1/completions.
inline SamplingFields parse_sampling(const nlohmann::json& body) {
    using namespace detail;
    SamplingFields s;
    if (auto v = field(body, "model")) s.model = string_field(*v, "model");
    if (auto v = field(body, "max_completion_tokens")) s.max_tokens = integer_field(*v, "max_completion_tokens", 0, INT32_MAX);
    else if (auto v2 = field(body, "max_tokens")) s.max_tokens = integer_field(*v2, "max_tokens", 0, INT32_MAX);
    if (auto v = field(body, "temperature")) s.temperature = number_field(*v, "temperature", 0, 2);
    if (auto v = field(body, "top_p")) s.top_p = number_field(*v, "top_p", 0, 1);
    if (s.top_p == 0.0) throw bad_field("top_p", "must be greater than 0");
    if (auto v = field(body, "min_p")) s.min_p = number_field(*v, "min_p", 0, 1);
    if (auto v = field(body, "top_k")) s.top_k = static_cast<std::int32_t>(integer_field(*v, "top_k", 0, INT32_MAX));
    if (auto v = field(body, "seed")) {
        if (!v->is_number_integer()) throw bad_field("seed", "expected an integer");
        s.seed = v->is_number_unsigned() ? v->get<std::uint64_t>() : static_cast<std::uint64_t>(v->get<std::int64_t>());
    }
    parse_penalties(body, s);
    if (auto v = field(body, "n")) s.n = static_cast<std::int32_t>(integer_field(*v, "n", 1, INT32_MAX));
    if (auto v = field(body, "stop")) {
        if (v->is_string()) {
            s.stop.push_back(v->get<std::string>());
        } else if (v->is_array()) {
            if (v->size() > 16) throw bad_field("stop", "at most 16 stop sequences");
            for (std::size_t i = 0; i < v->size(); ++i) s.stop.push_back(string_field((*v)[i], "stop[" + std::to_string(i) + "]"));
        } else {
            throw bad_field("stop", "expected a string or an array of strings");
        }
        for (const auto& stop : s.stop)
            if (stop.empty()) throw bad_field("stop", "empty stop sequence");
    }
    if (auto v = field(body, "stream")) s.stream = bool_field(*v, "stream");
    if (auto v = field(body, "ignore_eos")) s.ignore_eos = bool_field(*v, "ignore_eos");
    if (auto v = field(body, "stream_options")) {
        if (!v->is_object()) throw bad_field("stream_options", "expected an object");
        if (auto u = field(*v, "include_usage")) s.include_usage = bool_field(*u, "stream_options.include_usage");
    }
    return s;
}

/// The most top alternatives per token a request may ask for (OpenAI's chat bound; its legacy
/// completions allow 5).
inline constexpr std::int64_t kMaxTopLogprobsField = 20;

namespace detail {

/// Chat's `logprobs` (a boolean) and `top_logprobs` (0–20, only with `logprobs: true`).
inline std::int32_t parse_chat_logprobs(const nlohmann::json& body) {
    const bool on = field(body, "logprobs") && bool_field(*field(body, "logprobs"), "logprobs");
    const auto* top = field(body, "top_logprobs");
    if (!top) return on ? 0 : -1;
    const auto n = static_cast<std::int32_t>(integer_field(*top, "top_logprobs", 0, kMaxTopLogprobsField));
    if (!on) throw bad_field("top_logprobs", "requires logprobs: true");
    return n;
}

}  // namespace detail

/// The fields of /v1/completions: parse_sampling's, and `logprobs`, the number of top
/// alternatives per token (0–20). `echo` (the prompt's log-probabilities) is refused.
inline SamplingFields parse_completion_sampling(const nlohmann::json& body) {
    using namespace detail;
    SamplingFields s = parse_sampling(body);
    if (auto v = field(body, "logprobs")) s.logprobs = static_cast<std::int32_t>(integer_field(*v, "logprobs", 0, kMaxTopLogprobsField));
    if (auto v = field(body, "echo"); v && bool_field(*v, "echo")) throw bad_field("echo", "echoing the prompt is not supported");
    return s;
}

namespace detail {

/// A text part of a message as the template writes it: an assistant's without its thoughts,
/// anyone else's trimmed.
inline std::string message_text(const std::string& role, const std::string& text) {
    return role == "assistant" ? strip_thoughts(text) : std::string(gemma4::detail::trim(text));
}

/// An image's media type, as a request names it (empty: unnamed, left to the decoder): PNG or JPEG.
inline void check_image_type(const std::string& media_type, const std::string& param) {
    if (!media_type.empty() && media_type != "image/png" && media_type != "image/jpeg" && media_type != "image/jpg")
        throw bad_field(param, "unsupported image type '" + media_type + "' (PNG or JPEG)");
}

/// Content of one message: a string, or an array of parts (text, image_url, input_audio).
inline std::string parse_content(const nlohmann::json& content, const std::string& param, const std::string& role,
                                 std::vector<MediaItem>& media) {
    auto text_of = [&](const std::string& text) { return message_text(role, text); };
    if (content.is_string()) return text_of(content.get<std::string>());
    if (!content.is_array()) throw bad_field(param, "expected a string or an array of content parts");
    std::string out;
    for (std::size_t i = 0; i < content.size(); ++i) {
        const auto& part = content[i];
        const std::string p = param + "[" + std::to_string(i) + "]";
        if (!part.is_object()) throw bad_field(p, "expected an object");
        const auto* type = field(part, "type");
        if (!type) throw bad_field(p + ".type", "missing");
        const std::string t = string_field(*type, p + ".type");
        if (t == "text") {
            const auto* text = field(part, "text");
            if (!text) throw bad_field(p + ".text", "missing");
            out += text_of(string_field(*text, p + ".text"));
        } else if (t == "image_url") {
            if (role == "assistant" || role == "system") throw bad_field(p, "images are accepted in user messages only");
            const auto* image = field(part, "image_url");
            if (!image) throw bad_field(p + ".image_url", "missing");
            std::string url;
            if (image->is_string()) url = image->get<std::string>();
            else if (image->is_object() && field(*image, "url")) url = string_field((*image)["url"], p + ".image_url.url");
            else throw bad_field(p + ".image_url", "expected {\"url\": \"data:...\"}");
            DataUrl d = parse_data_url(url, p + ".image_url.url");
            check_image_type(d.media_type, p + ".image_url.url");
            media.push_back({MediaItem::Image, std::move(d.bytes), p + ".image_url"});
            out += "<|image|>";
        } else if (t == "input_audio") {
            if (role != "user") throw bad_field(p, "audio is accepted in user messages only");
            const auto* audio = field(part, "input_audio");
            if (!audio || !audio->is_object()) throw bad_field(p + ".input_audio", "expected {\"data\": base64, \"format\": \"wav\"}");
            if (auto f = field(*audio, "format"); f && string_field(*f, p + ".input_audio.format") != "wav")
                throw bad_field(p + ".input_audio.format", "only wav is supported");
            const auto* data = field(*audio, "data");
            if (!data) throw bad_field(p + ".input_audio.data", "missing");
            media.push_back({MediaItem::Audio, require_base64(string_field(*data, p + ".input_audio.data"), p + ".input_audio.data"),
                             p + ".input_audio"});
            out += "<|audio|>";
        } else {
            throw bad_field(p + ".type", "unsupported content part type '" + t + "' (text, image_url, input_audio)");
        }
    }
    return out;
}

inline nlohmann::json parse_arguments(const nlohmann::json& args, const std::string& param) {
    if (args.is_object()) return args;
    if (!args.is_string()) throw bad_field(param, "expected a JSON string");
    auto parsed = nlohmann::json::parse(args.get<std::string>(), nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object()) throw bad_field(param, "expected a JSON object encoded as a string");
    return parsed;
}

inline bool is_tool_name(const std::string& name) {
    if (name.empty() || name.size() > 64) return false;
    for (char c : name)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
    return true;
}

}  // namespace detail

/// Parses a /v1/chat/completions body (already valid JSON).
inline ChatRequest parse_chat_request(const nlohmann::json& body) {
    using namespace detail;
    if (!body.is_object()) throw ApiError(400, "request body must be a JSON object");
    ChatRequest r;
    r.sampling = parse_sampling(body);
    r.sampling.logprobs = parse_chat_logprobs(body);
    const auto* messages = field(body, "messages");
    if (!messages) throw bad_field("messages", "missing");
    if (!messages->is_array() || messages->empty()) throw bad_field("messages", "expected a non-empty array");
    for (std::size_t i = 0; i < messages->size(); ++i) {
        const auto& m = (*messages)[i];
        const std::string p = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) throw bad_field(p, "expected an object");
        const auto* role_field = field(m, "role");
        if (!role_field) throw bad_field(p + ".role", "missing");
        Message msg;
        msg.role = string_field(*role_field, p + ".role");
        if (msg.role == "developer") msg.role = "system";
        if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
            throw bad_field(p + ".role", "unknown role '" + msg.role + "' (system, developer, user, assistant, tool)");
        if (auto c = field(m, "content")) msg.content = parse_content(*c, p + ".content", msg.role, r.media);
        else if (msg.role != "assistant") throw bad_field(p + ".content", "missing");
        if (msg.role == "assistant") {
            for (const char* name : {"reasoning_content", "reasoning"})
                if (auto t = field(m, name)) msg.reasoning = string_field(*t, p + "." + name);
            if (auto calls = field(m, "tool_calls")) {
                if (!calls->is_array()) throw bad_field(p + ".tool_calls", "expected an array");
                for (std::size_t k = 0; k < calls->size(); ++k) {
                    const auto& c = (*calls)[k];
                    const std::string cp = p + ".tool_calls[" + std::to_string(k) + "]";
                    if (!c.is_object() || !field(c, "function") || !c["function"].is_object()) throw bad_field(cp + ".function", "missing");
                    ToolCallMessage call;
                    if (auto id = field(c, "id")) call.id = string_field(*id, cp + ".id");
                    const auto* name = field(c["function"], "name");
                    if (!name) throw bad_field(cp + ".function.name", "missing");
                    call.name = string_field(*name, cp + ".function.name");
                    if (!is_tool_name(call.name)) throw bad_field(cp + ".function.name", "invalid function name");
                    const auto* args = field(c["function"], "arguments");
                    call.arguments = args ? parse_arguments(*args, cp + ".function.arguments") : nlohmann::json::object();
                    msg.tool_calls.push_back(std::move(call));
                }
            }
        }
        if (msg.role == "tool") {
            if (auto id = field(m, "tool_call_id")) msg.tool_call_id = string_field(*id, p + ".tool_call_id");
            if (auto n = field(m, "name")) msg.name = string_field(*n, p + ".name");
        }
        r.messages.push_back(std::move(msg));
    }
    if (auto tools = field(body, "tools")) {
        if (!tools->is_array()) throw bad_field("tools", "expected an array");
        for (std::size_t i = 0; i < tools->size(); ++i) {
            const auto& t = (*tools)[i];
            const std::string p = "tools[" + std::to_string(i) + "]";
            if (!t.is_object() || !field(t, "function") || !t["function"].is_object()) throw bad_field(p + ".function", "missing");
            if (auto type = field(t, "type"); type && string_field(*type, p + ".type") != "function")
                throw bad_field(p + ".type", "only function tools are supported");
            const auto* name = field(t["function"], "name");
            if (!name || !name->is_string() || !is_tool_name(name->get<std::string>())) throw bad_field(p + ".function.name", "missing or invalid");
            if (auto params = field(t["function"], "parameters"); params && !params->is_object())
                throw bad_field(p + ".function.parameters", "expected a JSON schema object");
            if (auto d = field(t["function"], "description"); d && !d->is_string()) throw bad_field(p + ".function.description", "expected a string");
        }
        r.tools = *tools;
    }
    if (auto choice = field(body, "tool_choice")) {
        if (choice->is_string()) {
            const std::string c = choice->get<std::string>();
            if (c == "none") r.tool_choice = ToolChoice::None;
            else if (c == "auto") r.tool_choice = ToolChoice::Auto;
            else if (c == "required") r.tool_choice = ToolChoice::Required;
            else throw bad_field("tool_choice", "unknown value '" + c + "' (none, auto, required, or {\"type\":\"function\",\"function\":{\"name\":...}})");
        } else if (choice->is_object()) {
            if (auto type = field(*choice, "type"); !type || string_field(*type, "tool_choice.type") != "function")
                throw bad_field("tool_choice.type", "expected \"function\"");
            const auto* function = field(*choice, "function");
            if (!function || !function->is_object()) throw bad_field("tool_choice.function", "expected {\"name\": ...}");
            const auto* name = field(*function, "name");
            if (!name) throw bad_field("tool_choice.function.name", "missing");
            r.tool_choice_name = string_field(*name, "tool_choice.function.name");
            r.tool_choice = ToolChoice::Function;
            bool declared = false;
            for (const auto& t : r.tools) declared |= t["function"]["name"] == r.tool_choice_name;
            if (!declared && !r.tools.empty())
                throw bad_field("tool_choice.function.name", "'" + r.tool_choice_name + "' is not one of the declared tools");
        } else {
            throw bad_field("tool_choice", "expected a string or an object");
        }
        // "none" and "auto" are harmless without tools; a call cannot be required of no tools.
        if (r.tools.empty() && (r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Function))
            throw bad_field("tool_choice", "requires a tool in 'tools'");
        if (r.tool_choice == ToolChoice::None) r.tools = nlohmann::json::array();
    }
    // Thinking: on with reasoning_effort other than "none", or chat_template_kwargs.enable_thinking.
    if (auto effort = field(body, "reasoning_effort")) {
        const std::string e = string_field(*effort, "reasoning_effort");
        if (e != "none" && e != "minimal" && e != "low" && e != "medium" && e != "high")
            throw bad_field("reasoning_effort", "expected none, minimal, low, medium or high");
        r.thinking = e != "none";
    }
    if (auto kwargs = field(body, "chat_template_kwargs")) {
        if (!kwargs->is_object()) throw bad_field("chat_template_kwargs", "expected an object");
        if (auto t = field(*kwargs, "enable_thinking")) r.thinking = bool_field(*t, "chat_template_kwargs.enable_thinking");
    }
    return r;
}

/// The prompt text, as google/gemma-4's chat_template.jinja renders it (see docs/server.md):
/// system turn with <|think|>, the system text and the tool declarations; assistant tool calls
/// followed, inside the same model turn, by the results of the tool messages after them.
inline std::string render_prompt(const std::vector<Message>& messages, const nlohmann::json& tools, bool thinking,
                                 bool add_generation_prompt = true) {
    std::string out(kChatBos);
    std::size_t first = 0;
    enum class Last { None, Think, Tool, ToolCall, ToolResponse } last = Last::None;
    const bool has_system = !messages.empty() && messages[0].role == "system";
    if (thinking || !tools.empty() || has_system) {
        out += "<|turn>system\n";
        if (thinking) {
            out += kThink;
            out += '\n';
            last = Last::Think;
        }
        if (has_system) {
            out += messages[0].content;
            first = 1;
        }
        for (const auto& tool : tools) {
            out += render_tool_declaration(tool);
            last = Last::Tool;
        }
        out += "<turn|>\n";
    }
    std::size_t last_user = std::string::npos;
    for (std::size_t i = first; i < messages.size(); ++i)
        if (messages[i].role == "user") last_user = i;
    for (std::size_t i = first; i < messages.size(); ++i) {
        const Message& m = messages[i];
        if (m.role == "tool") continue;  // written with the assistant message that called it
        last = Last::None;
        const std::string role = m.role == "assistant" ? "model" : m.role;
        std::string previous_role;
        for (std::size_t j = i; j-- > first;)
            if (messages[j].role != "tool") {
                previous_role = messages[j].role;
                break;
            }
        if (!(role == "model" && previous_role == "assistant")) out += "<|turn>" + role + "\n";
        if (!m.reasoning.empty() && (last_user == std::string::npos || i > last_user) && !m.tool_calls.empty())
            out += std::string(kChannelStart) + "thought\n" + m.reasoning + "\n" + std::string(kChannelEnd);
        for (const auto& call : m.tool_calls) {
            out += render_tool_call(call.name, call.arguments);
            last = Last::ToolCall;
        }
        bool responses = false;
        if (!m.tool_calls.empty()) {
            for (std::size_t k = i + 1; k < messages.size() && messages[k].role == "tool"; ++k) {
                std::string name = messages[k].name.empty() ? "unknown" : messages[k].name;
                for (const auto& call : m.tool_calls)
                    if (!call.id.empty() && call.id == messages[k].tool_call_id) name = call.name;
                out += render_tool_response(name, messages[k].content);
                responses = true;
                last = Last::ToolResponse;
            }
        }
        out += m.content;
        if (last == Last::ToolCall && !responses) out += kToolResponseStart;
        else if (!(responses && m.content.empty())) out += "<turn|>\n";
    }
    if (add_generation_prompt && last != Last::ToolResponse && last != Last::ToolCall) {
        out += "<|turn>model\n";
        if (!thinking) out += kEmptyThought;
    }
    return out;
}

/// What the request's tool_choice writes after the generation prompt, as if the model had
/// written it: the opening of a call ("required"), with the function's name (a named choice).
/// The reply is parsed as this text followed by what the model generates.
inline std::string reply_prefill(const ChatRequest& r) {
    if (r.tool_choice == ToolChoice::Required) return std::string(kToolCallStart);
    if (r.tool_choice == ToolChoice::Function) return std::string(kToolCallStart) + "call:" + r.tool_choice_name + "{";
    return {};
}

/// The prompt the model continues: the conversation, then the tool_choice prefill.
inline std::string render_prompt(const ChatRequest& r) { return render_prompt(r.messages, r.tools, r.thinking) + reply_prefill(r); }

/// The reply parser for the request's reply: tool calls are parsed when tools are offered, and
/// the prefill is read first, so a forced call parses like one the model opened itself.
inline ReplyParser reply_parser_for(const ChatRequest& r, std::vector<ReplyEvent>* prefill_events = nullptr) {
    ReplyParser parser(!r.tools.empty());
    auto events = parser.feed(reply_prefill(r));
    if (prefill_events) *prefill_events = std::move(events);
    return parser;
}

/// A whole reply of the request (the non-streaming response).
inline ParsedReply parse_chat_reply(const ChatRequest& r, std::string_view generated) {
    ParsedReply out;
    std::vector<ReplyEvent> events;
    ReplyParser parser = reply_parser_for(r, &events);
    out.add(std::move(events));
    out.add(parser.feed(generated));
    out.add(parser.finish());
    return out;
}

}  // namespace gemma4::server
