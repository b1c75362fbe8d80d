// A small tokenizer.json in the exact format of the Gemma checkpoints, for tests and the demo
// that must run without downloads: normalizer Replace " " → "▁", BPE with byte fallback, the
// Gemma 4 chat tokens as special added tokens, the 256 byte pieces, and merges learned by a few
// hundred steps of BPE training on a short built-in English text. It loads through the same
// gemma4::Tokenizer code as the real file.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// Where write_tiny_tokenizer put its files and the ids of the special tokens.
struct TinyTokenizerInfo {
    std::filesystem::path tokenizer_json;
    std::filesystem::path tokenizer_config_json;
    std::int32_t vocab_size = 0;
    std::int32_t pad = 0, eos = 1, bos = 2, unk = 3;
    std::int32_t turn_start = -1;     ///< <|turn>
    std::int32_t turn_end = -1;       ///< <turn|>
    std::int32_t think = -1;          ///< <|think|>
    std::int32_t channel_start = -1;  ///< <|channel>
    std::int32_t channel_end = -1;    ///< <channel|>
    std::int32_t image_start = -1;    ///< <|image>
    std::int32_t image = -1;          ///< <|image|>
    std::int32_t image_end = -1;      ///< <image|>
    std::int32_t audio_start = -1;    ///< <|audio>
    std::int32_t audio = -1;          ///< <|audio|>
    std::int32_t audio_end = -1;      ///< <audio|>
    std::int32_t video = -1;          ///< <|video|>
    std::int32_t tool_start = -1;     ///< <|tool>
    std::int32_t tool_end = -1;       ///< <tool|>
    std::int32_t tool_call_start = -1;
    std::int32_t tool_call_end = -1;
    std::int32_t tool_response_start = -1;
    std::int32_t tool_response_end = -1;
    std::int32_t string_escape = -1;  ///< <|"|>
    std::int32_t first_byte_piece = -1;  ///< id of <0x00>; <0xNN> is first_byte_piece + NN
};

namespace detail {

inline constexpr std::array<std::string_view, 19> kTinyChatTokens = {
    "<|turn>",  "<turn|>",  "<|think|>",      "<|channel>", "<channel|>",      "<|image>",
    "<|image|>", "<image|>", "<|audio>",      "<|audio|>",  "<audio|>",        "<|video|>",
    "<|tool>",  "<tool|>",  "<|tool_call>",  "<tool_call|>", "<|tool_response>", "<tool_response|>",
    "<|\"|>"};

inline constexpr std::string_view kTinyTrainingText =
    "The little model reads one token at a time and guesses the next one. "
    "A tokenizer cuts the text into pieces that the model knows, and every piece has a number. "
    "Common words such as the, and, of, to, in, is, it, that and with become single pieces, "
    "while rare words are built from smaller parts, and anything else falls back to raw bytes. "
    "When the sun rises over the hills the farmers walk to their fields, the children run to school, "
    "and the old dog sleeps in the warm light near the door. "
    "In the evening the wind turns cold, the lamps come on one by one, and the town grows quiet. "
    "She asked him what he wanted to eat, and he said that bread with cheese would be fine. "
    "They talked about the weather, the harvest, the price of wheat and the news from the city. "
    "Reading, writing and counting are the things that every student learns first. "
    "There is nothing more pleasant than a long walk along the river on a clear morning in spring. "
    "The user writes a question, the model thinks for a while, and then it answers the question. "
    "Good answers are short, correct and kind; bad answers are long, wrong or rude. "
    "Numbers like 1, 2, 3, 10, 42, 100 and 2024 appear in text as well as words do.\n"
    "Hello! How are you today? I am fine, thank you. What is your name? My name is Gemma.\n";

inline constexpr std::string_view kTinyMetaspace = "\xE2\x96\x81";

// One training step per merge: the most frequent adjacent pair over all words (ties broken by
// the pair's text, so the result is the same on every machine).
inline std::vector<std::pair<std::string, std::string>> train_tiny_merges(std::size_t steps) {
    std::map<std::string, std::int64_t> word_counts;
    {
        std::string word;
        const auto flush = [&] {
            if (!word.empty()) ++word_counts[word];
            word.clear();
        };
        for (const char c : kTinyTrainingText) {
            if (c == ' ') {
                flush();
                word = std::string(kTinyMetaspace);
            } else if (c == '\n') {
                flush();
            } else {
                word.push_back(c);
            }
        }
        flush();
    }
    std::vector<std::pair<std::vector<std::string>, std::int64_t>> words;
    for (const auto& [text, count] : word_counts) {
        std::vector<std::string> symbols;
        for (std::size_t i = 0; i < text.size();) {
            const std::size_t n = text.compare(i, kTinyMetaspace.size(), kTinyMetaspace) == 0 ? kTinyMetaspace.size() : 1;
            symbols.push_back(text.substr(i, n));
            i += n;
        }
        words.emplace_back(std::move(symbols), count);
    }
    std::vector<std::pair<std::string, std::string>> merges;
    for (std::size_t step = 0; step < steps; ++step) {
        std::map<std::pair<std::string, std::string>, std::int64_t> pairs;
        for (const auto& [symbols, count] : words)
            for (std::size_t i = 0; i + 1 < symbols.size(); ++i) pairs[{symbols[i], symbols[i + 1]}] += count;
        const std::pair<std::string, std::string>* best = nullptr;
        std::int64_t best_count = 1;  // a pair seen once teaches nothing
        for (const auto& [pair, count] : pairs)
            if (count > best_count) {
                best = &pair;
                best_count = count;
            }
        if (!best) break;
        const auto chosen = *best;
        merges.push_back(chosen);
        for (auto& [symbols, count] : words) {
            std::vector<std::string> merged;
            for (std::size_t i = 0; i < symbols.size(); ++i) {
                if (i + 1 < symbols.size() && symbols[i] == chosen.first && symbols[i + 1] == chosen.second) {
                    merged.push_back(chosen.first + chosen.second);
                    ++i;
                } else {
                    merged.push_back(symbols[i]);
                }
            }
            symbols = std::move(merged);
        }
    }
    return merges;
}

}  // namespace detail

/// Writes tokenizer.json and tokenizer_config.json into `dir` (created if needed). With
/// `add_bos_token` false (the default, as in the instruction-tuned Gemma 4 checkpoint) encode()
/// adds no BOS; the chat template writes "<bos>" itself. A `vocab_size` beyond the tokenizer's
/// own pads the vocabulary with "<unused_N>" pieces (Gemma's tokenizer has such), so every id of
/// a model of that vocabulary decodes — random-weight models of the 12B's shapes emit them all.
inline TinyTokenizerInfo write_tiny_tokenizer(const std::filesystem::path& dir, bool add_bos_token = false,
                                              std::size_t merge_steps = 400, std::int64_t vocab_size = 0) {
    using ordered = nlohmann::ordered_json;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw IoError(dir.string() + ": cannot create directory: " + ec.message());

    TinyTokenizerInfo info;
    ordered vocab = ordered::object();
    ordered added = ordered::array();
    std::int32_t next_id = 0;
    const auto add_piece = [&](const std::string& piece) {
        if (vocab.contains(piece)) return vocab[piece].get<std::int32_t>();
        vocab[piece] = next_id;
        return next_id++;
    };
    const auto add_special = [&](std::string_view token) {
        const std::int32_t id = add_piece(std::string(token));
        added.push_back(ordered{{"id", id},          {"content", token}, {"single_word", false}, {"lstrip", false},
                                {"rstrip", false},   {"normalized", false}, {"special", true}});
        return id;
    };
    info.pad = add_special("<pad>");
    info.eos = add_special("<eos>");
    info.bos = add_special("<bos>");
    info.unk = add_special("<unk>");
    std::vector<std::int32_t> chat;
    for (const std::string_view token : detail::kTinyChatTokens) chat.push_back(add_special(token));
    info.turn_start = chat[0];
    info.turn_end = chat[1];
    info.think = chat[2];
    info.channel_start = chat[3];
    info.channel_end = chat[4];
    info.image_start = chat[5];
    info.image = chat[6];
    info.image_end = chat[7];
    info.audio_start = chat[8];
    info.audio = chat[9];
    info.audio_end = chat[10];
    info.video = chat[11];
    info.tool_start = chat[12];
    info.tool_end = chat[13];
    info.tool_call_start = chat[14];
    info.tool_call_end = chat[15];
    info.tool_response_start = chat[16];
    info.tool_response_end = chat[17];
    info.string_escape = chat[18];

    static constexpr char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
        const std::int32_t id = add_piece(std::string{'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'});
        if (b == 0) info.first_byte_piece = id;
    }
    add_piece("\n");
    add_piece(std::string(detail::kTinyMetaspace));
    for (char c = 0x21; c < 0x7F; ++c) add_piece(std::string(1, c));

    ordered merges = ordered::array();
    for (const auto& [left, right] : detail::train_tiny_merges(merge_steps)) {
        add_piece(left + right);
        merges.push_back(ordered::array({left, right}));
    }
    std::int64_t unused = 0;
    while (next_id < vocab_size) add_piece("<unused_" + std::to_string(unused++) + ">");  // add_piece advances next_id
    info.vocab_size = next_id;

    const std::string metaspace(detail::kTinyMetaspace);
    ordered tokenizer{
        {"version", "1.0"},
        {"truncation", nullptr},
        {"padding", nullptr},
        {"added_tokens", added},
        {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", metaspace}}},
        {"pre_tokenizer",
         {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"}, {"invert", false}}},
        {"post_processor",
         {{"type", "TemplateProcessing"},
          {"single", ordered::array({ordered{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
                                     ordered{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
          {"pair", ordered::array({ordered{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
                                   ordered{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                   ordered{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 1}}}},
                                   ordered{{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
          {"special_tokens", {{"<bos>", {{"id", "<bos>"}, {"ids", {info.bos}}, {"tokens", {"<bos>"}}}}}}}},
        {"decoder",
         {{"type", "Sequence"},
          {"decoders", ordered::array({ordered{{"type", "Replace"}, {"pattern", {{"String", metaspace}}}, {"content", " "}},
                                       ordered{{"type", "ByteFallback"}}, ordered{{"type", "Fuse"}}})}}},
        {"model",
         {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", "<unk>"},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", true},
          {"byte_fallback", true},
          {"ignore_merges", false},
          {"vocab", vocab},
          {"merges", merges}}}};

    ordered config{{"add_bos_token", add_bos_token}, {"add_eos_token", false}, {"bos_token", "<bos>"},
                   {"eos_token", "<eos>"},           {"pad_token", "<pad>"},  {"unk_token", "<unk>"},
                   {"padding_side", "left"},         {"tokenizer_class", "GemmaTokenizer"}};

    info.tokenizer_json = dir / "tokenizer.json";
    info.tokenizer_config_json = dir / "tokenizer_config.json";
    const auto write = [](const std::filesystem::path& path, const ordered& value) {
        std::ofstream out(path, std::ios::binary);
        if (!out) throw IoError(path.string() + ": cannot open for writing");
        out << value.dump(1) << '\n';
        if (!out) throw IoError(path.string() + ": write failed");
    };
    write(info.tokenizer_json, tokenizer);
    write(info.tokenizer_config_json, config);
    return info;
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
