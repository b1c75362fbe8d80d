// `gemma4 tokenizer-bench`: load time of a tokenizer.json and encode / decode throughput.
#include "../cli.hpp"

#include <gemma4/tokenizer/tokenizer.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace cmd_tokenizer_bench {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// Without --text: the texts of golden.jsonl next to the tokenizer (or a fixed English paragraph),
// repeated to 10 MB.
std::string default_text(const std::filesystem::path& tokenizer_path) {
    std::vector<std::string> parts;
    std::ifstream golden(tokenizer_path.parent_path() / "golden.jsonl");
    std::string line;
    while (std::getline(golden, line))
        if (!line.empty()) parts.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
    if (parts.empty())
        parts.push_back("The quick brown fox jumps over the lazy dog. Tokenizers split text into pieces; "
                        "a model sees only their ids.\n");
    std::string text;
    while (text.size() < 10u << 20)
        for (const std::string& p : parts) (text += p) += '\n';
    return text;
}

int run(gemma4::cli::Args& args) {
    const std::filesystem::path tokenizer_path = args.require("tokenizer");
    const auto text_path = args.get("text");
    const int loads = args.number<int>("loads", 3);
    args.finish();
    if (loads < 1) throw gemma4::InvalidArgument("tokenizer-bench: --loads must be at least 1");

    std::vector<double> load_seconds;
    std::optional<gemma4::Tokenizer> tokenizer;
    for (int i = 0; i < loads; ++i) {
        tokenizer.reset();
        const auto start = Clock::now();
        tokenizer.emplace(gemma4::Tokenizer::from_file(tokenizer_path));
        load_seconds.push_back(seconds_since(start));
    }
    const std::string text = text_path ? gemma4::detail::read_text_file(*text_path) : default_text(tokenizer_path);
    const double mb = static_cast<double>(text.size()) / 1e6;

    auto start = Clock::now();
    const std::vector<std::int32_t> ids = tokenizer->encode(text);
    const double encode_s = seconds_since(start);

    start = Clock::now();
    const std::string decoded = tokenizer->decode(ids);
    const double decode_s = seconds_since(start);

    const std::string word(100'000, 'x');
    start = Clock::now();
    const auto word_ids = tokenizer->encode(word, false);
    const double word_s = seconds_since(start);

    std::printf("tokenizer      %s (vocab %zu)\n", tokenizer_path.c_str(), tokenizer->vocab_size());
    std::printf("load           first %.1f ms, best of %d %.1f ms\n", load_seconds.front() * 1e3, loads,
                *std::min_element(load_seconds.begin(), load_seconds.end()) * 1e3);
    std::printf("text           %.2f MB, %zu tokens\n", mb, ids.size());
    std::printf("encode         %.1f ms, %.1f MB/s, %.2f M tokens/s\n", encode_s * 1e3, mb / encode_s,
                static_cast<double>(ids.size()) / encode_s / 1e6);
    std::printf("decode         %.1f ms, %.1f MB/s\n", decode_s * 1e3, static_cast<double>(decoded.size()) / 1e6 / decode_s);
    std::printf("100 KB word    %.1f ms, %zu tokens\n", word_s * 1e3, word_ids.size());
    return 0;
}

const gemma4::cli::Command reg{"tokenizer-bench", "load time and encode/decode speed of a tokenizer.json",
                               {
                                   {"tokenizer", "FILE", "tokenizer.json", gemma4::cli::kRequired},
                                   {"text", "FILE", "text to encode (default: golden.jsonl beside the tokenizer, repeated to 10 MB)"},
                                   {"loads", "N", "times the file is loaded; the best is reported (default: 3)"},
                               },
                               run};

}  // namespace cmd_tokenizer_bench
