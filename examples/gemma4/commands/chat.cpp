// gemma4 chat: an interactive conversation in the Gemma 4 turn format, replies streamed. The
// KV cache is kept between turns, so each turn prefills only its own tokens.
#include "../generation_args.hpp"

#include <cstdio>
#include <iostream>

namespace {

using namespace gemma4;

int run(cli::Args& args) {
    const std::filesystem::path dir = args.require("model");
    const auto system = args.get("system");
    const bool think = args.flag("think");
    const auto threads = args.number<unsigned>("threads", 0);
    const Model<float> model = Model<float>::load(dir, ModelOptions{threads}, LoadOptions{.multimodal = false});
    GenerateOptions options = cli::read_generate_options(args, dir, model.config());
    args.finish();
    const auto tokenizer = cli::load_tokenizer_if_present(dir);
    if (!tokenizer) throw IoError((dir / "tokenizer.json").string() + ": not found");
    // A reply ends with <turn|> even when config.json lists only <eos>.
    if (const auto turn_end = tokenizer->token_to_id("<turn|>")) options.stop_ids.push_back(*turn_end);
    ChatSession<float> chat(model, *tokenizer, ChatOptions{.enable_thinking = think}, system);
    options.on_token = [&](std::int32_t id, std::string_view text) {
        if (id >= 0 && tokenizer->is_special(id)) return true;  // <turn|> and friends stay unprinted
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
        return true;
    };
    std::string line;
    while (true) {
        std::fputs("> ", stdout);
        std::fflush(stdout);
        if (!std::getline(std::cin, line)) break;
        if (line.empty()) continue;
        if (line == "/exit" || line == "/quit") break;
        const GenerationResult r = chat.reply(line, options);
        std::fputs("\n", stdout);
        cli::print_stats(r);
    }
    return 0;
}

const cli::Command reg{"chat", "interactive chat (--system TEXT, --think), replies streamed", run};

}  // namespace
