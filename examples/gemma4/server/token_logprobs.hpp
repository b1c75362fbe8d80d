// Log-probabilities of a reply in OpenAI's two shapes: chat's `logprobs.content`, one entry per
// token with its text, UTF-8 bytes and top alternatives, and the legacy completions'
// `{tokens, token_logprobs, top_logprobs, text_offset}`. The numbers are the library's
// (GenerateOptions::logprobs): the log-softmax of the logits after the penalties, logit_bias and
// suppression, before temperature and the top-k/top-p/min-p cuts.
#pragma once

#include <gemma4/generate/generate_options.hpp>
#include <gemma4/tokenizer/tokenizer.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gemma4::server {

/// One sampled token of a reply: its log-probabilities, and where its text starts in the reply's
/// text (characters, i.e. Unicode code points, of the text produced before it).
struct LogprobEntry {
    TokenLogprob logprob;
    std::int64_t text_offset = 0;
};

/// A token as logprobs spell it: `text` and the UTF-8 `bytes` it stands for. A byte-fallback
/// piece of a byte above 0x7F (`<0xE2>`, one byte of a character split over several tokens) has
/// no text of its own: its text is OpenAI's spelling of raw bytes, `bytes:\xe2` (a backslash,
/// `x`, two lowercase hex digits), and `bytes` holds the byte itself. Any other token's text is
/// its decoded text (`<0x0A>` is "\n"), and `bytes` that text's bytes.
struct TokenSpelling {
    std::string text;
    std::vector<int> bytes;
};

inline TokenSpelling spell_token(const Tokenizer& tokenizer, std::int32_t id) {
    if (tokenizer.decoder_has_byte_fallback()) {
        if (const int byte = gemma4::detail::Decoder::byte_of_piece(tokenizer.id_to_token(id)); byte >= 0x80) {
            static constexpr char hex[] = "0123456789abcdef";
            return {std::string("bytes:\\x") + hex[byte >> 4] + hex[byte & 15], {byte}};
        }
    }
    // As a continuation of text: a decoder step that applies only at the start of a text (a
    // leading space stripped) does not change one token's spelling.
    TokenSpelling s{tokenizer.decode_impl(std::span<const std::int32_t>(&id, 1), /*skip_special=*/false, /*at_text_start=*/false), {}};
    for (const char c : s.text) s.bytes.push_back(static_cast<unsigned char>(c));
    return s;
}

/// Unicode code points in `text` (its bytes that do not continue a UTF-8 sequence).
inline std::int64_t count_characters(std::string_view text) {
    std::int64_t n = 0;
    for (const char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return n;
}

/// Chat's `{token, logprob, bytes}` of one id.
inline nlohmann::json chat_token_json(const Tokenizer& tokenizer, std::int32_t id, double logprob) {
    TokenSpelling s = spell_token(tokenizer, id);
    return {{"token", std::move(s.text)}, {"logprob", logprob}, {"bytes", std::move(s.bytes)}};
}

/// Chat's `choices[i].logprobs`: `{"content": [{token, logprob, bytes, top_logprobs: [{token,
/// logprob, bytes}, …]}, …], "refusal": null}`, the alternatives most likely first.
inline nlohmann::json chat_logprobs(const Tokenizer& tokenizer, std::span<const LogprobEntry> entries) {
    nlohmann::json content = nlohmann::json::array();
    for (const LogprobEntry& e : entries) {
        nlohmann::json entry = chat_token_json(tokenizer, e.logprob.id, e.logprob.logprob);
        nlohmann::json top = nlohmann::json::array();
        for (const IdLogprob& alt : e.logprob.top) top.push_back(chat_token_json(tokenizer, alt.id, alt.logprob));
        entry["top_logprobs"] = std::move(top);
        content.push_back(std::move(entry));
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
}

/// The completions' `choices[i].logprobs`: parallel arrays `tokens`, `token_logprobs`,
/// `text_offset`, and `top_logprobs`, one object `{token: logprob}` per token with its
/// alternatives in order, most likely first (ordered_json keeps that order in the output). Two
/// alternatives with the same text keep the more likely one's value, as a JSON object has one
/// value per key.
inline nlohmann::ordered_json completion_logprobs(const Tokenizer& tokenizer, std::span<const LogprobEntry> entries) {
    nlohmann::ordered_json tokens = nlohmann::ordered_json::array(), values = nlohmann::ordered_json::array(),
                           tops = nlohmann::ordered_json::array(), offsets = nlohmann::ordered_json::array();
    for (const LogprobEntry& e : entries) {
        tokens.push_back(spell_token(tokenizer, e.logprob.id).text);
        values.push_back(e.logprob.logprob);
        offsets.push_back(e.text_offset);
        nlohmann::ordered_json top = nlohmann::ordered_json::object();
        for (const IdLogprob& alt : e.logprob.top) {
            std::string text = spell_token(tokenizer, alt.id).text;
            if (!top.contains(text)) top[std::move(text)] = alt.logprob;
        }
        tops.push_back(std::move(top));
    }
    return {{"tokens", std::move(tokens)}, {"token_logprobs", std::move(values)}, {"top_logprobs", std::move(tops)}, {"text_offset", std::move(offsets)}};
}

}  // namespace gemma4::server
