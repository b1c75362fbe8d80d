// `gemma4 detokenize`: token ids as JSON on stdin → text (special tokens written as their strings).
#include "../cli.hpp"

#include <gemma4/tokenizer/tokenizer.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

namespace cmd_detokenize {

std::vector<std::int32_t> id_list(const nlohmann::json& value, const std::string& where) {
    if (!value.is_array()) throw gemma4::FormatError(where + ": expected a JSON array of token ids");
    std::vector<std::int32_t> ids;
    ids.reserve(value.size());
    for (std::size_t i = 0; i < value.size(); ++i) {
        const auto& v = value[i];
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > INT32_MAX)
            throw gemma4::FormatError(where + ": element " + std::to_string(i) + " is not a token id");
        ids.push_back(static_cast<std::int32_t>(v.get<std::int64_t>()));
    }
    return ids;
}

nlohmann::json parse(const std::string& text, const std::string& where) {
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        throw gemma4::FormatError(where + ": not valid JSON: " + e.what());
    }
}

int run(gemma4::cli::Args& args) {
    const std::string tokenizer_path = args.require("tokenizer");
    const bool jsonl = args.flag("jsonl");
    const bool skip_special = args.flag("skip-special");
    args.finish();
    const auto tokenizer = gemma4::Tokenizer::from_file(tokenizer_path);
    if (!jsonl) {
        const std::string input(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>{});
        std::cout << tokenizer.decode(id_list(parse(input, "stdin"), "stdin"), skip_special);
        return 0;
    }
    std::string line;
    for (std::size_t number = 1; std::getline(std::cin, line); ++number) {
        const std::string where = "stdin line " + std::to_string(number);
        const nlohmann::json request = parse(line, where);
        if (!request.is_object() || !request.contains("ids"))
            throw gemma4::FormatError(where + ": expected an object with \"ids\"");
        const std::string text = tokenizer.decode(id_list(request["ids"], where + ": ids"), skip_special);
        std::cout << nlohmann::json{{"text", text}}.dump() << '\n';
    }
    return 0;
}

const gemma4::cli::Command reg{"detokenize", "token ids (a JSON array) on stdin → text",
                               {
                                   {"tokenizer", "FILE", "tokenizer.json", gemma4::cli::kRequired},
                                   {"jsonl", "", "one {\"ids\": [...]} per line in, one {\"text\": ...} per line out"},
                                   {"skip-special", "", "leave out special tokens"},
                               },
                               run};

}  // namespace cmd_detokenize
