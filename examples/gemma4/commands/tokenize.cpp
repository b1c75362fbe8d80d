// `gemma4 tokenize`: text on stdin → token ids as JSON.
#include "../cli.hpp"

#include <gemma4/tokenizer/tokenizer.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

namespace cmd_tokenize {

std::string read_all_stdin() {
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

int run(gemma4::cli::Args& args) {
    const std::string tokenizer_path = args.require("tokenizer");
    const auto config_path = args.get("config");
    const bool jsonl = args.flag("jsonl");
    args.finish();
    const auto tokenizer = config_path ? gemma4::Tokenizer::from_file(tokenizer_path, *config_path)
                                       : gemma4::Tokenizer::from_file(tokenizer_path);
    if (!jsonl) {
        std::cout << nlohmann::json(tokenizer.encode(read_all_stdin())).dump() << '\n';
        return 0;
    }
    std::string line;
    for (std::size_t number = 1; std::getline(std::cin, line); ++number) {
        const std::string where = "stdin line " + std::to_string(number);
        nlohmann::json request;
        try {
            request = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {
            throw gemma4::FormatError(where + ": not valid JSON: " + e.what());
        }
        if (!request.is_object() || !request.contains("text") || !request["text"].is_string())
            throw gemma4::FormatError(where + ": expected an object with a string \"text\"");
        std::cout << nlohmann::json{{"ids", tokenizer.encode(request["text"].get<std::string>())}}.dump() << '\n';
    }
    return 0;
}

const gemma4::cli::Command reg{"tokenize", "text on stdin → token ids as a JSON array",
                               {
                                   {"tokenizer", "FILE", "tokenizer.json", gemma4::cli::kRequired},
                                   {"config", "FILE", "tokenizer_config.json (e.g. whether BOS is added)"},
                                   {"jsonl", "", "one {\"text\": ...} per line in, one {\"ids\": [...]} per line out"},
                               },
                               run};

}  // namespace cmd_tokenize
