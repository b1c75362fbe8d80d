// gemma4 chat: an interactive conversation in the Gemma 4 turn format, replies streamed. The
// KV cache is kept between turns, so each turn prefills only its own tokens; --session keeps the
// conversation in a file across runs.
#include "../generation_args.hpp"
#include "../media_args.hpp"

#include <cstdio>
#include <iostream>

namespace cmd_chat {

using namespace gemma4;

int run(cli::Args& args) {
    const std::filesystem::path dir = args.require("model");
    const auto system = args.get("system");
    const bool think = args.flag("think");
    const auto session_file = args.get("session");
    const auto threads = args.number<unsigned>("threads", 0);
    const cli::SpeculativeArgs draft_args = cli::read_speculative_args(args);
    const std::optional<std::string> grammar = cli::read_constraint_grammar(args);
    const Model<float> model = Model<float>::load(dir, ModelOptions{threads}, LoadOptions{.mmproj = args.mmproj()});
    GenerateOptions options = cli::read_generate_options(args, dir, model.config());
    // --image / --audio are taken in order by the <|image|> / <|audio|> placeholders of the turns.
    const cli::Media<float> media = cli::read_media_files<float>(args, model.config());
    args.finish();
    const cli::Speculation speculation = cli::make_speculation(draft_args, model, threads);
    options.speculative = speculation.options;
    std::size_t next_image = 0, next_audio = 0;
    const auto tokenizer = cli::load_tokenizer_if_present(dir);
    if (!tokenizer) throw IoError(cli::tokenizer_location(dir) + ": not found");
    // A reply ends with <turn|> even when config.json lists only <eos>.
    if (const auto turn_end = tokenizer->token_to_id("<turn|>")) options.stop_ids.push_back(*turn_end);
    options.constraint = cli::make_constraint(grammar, *tokenizer);
    ChatSession<float> chat(model, *tokenizer, ChatOptions{.enable_thinking = think}, system);
    // --session: continue the conversation saved there (its system prompt and options come with
    // it), and save it again after every reply, so that a later run picks up where this one ends.
    if (session_file && std::filesystem::exists(*session_file)) {
        chat.load(*session_file);
        std::fprintf(stderr, "[resumed %lld tokens from %s]\n", static_cast<long long>(chat.session().history().size()),
                     session_file->c_str());
    }
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
        const auto count = [&](std::string_view placeholder) {
            std::size_t n = 0;
            for (auto at = line.find(placeholder); at != std::string::npos; at = line.find(placeholder, at + 1)) ++n;
            return n;
        };
        const std::size_t n_images = std::min(count("<|image|>"), media.images.size() - next_image);
        const std::size_t n_audios = std::min(count("<|audio|>"), media.audios.size() - next_audio);
        const GenerationResult r = chat.reply(line, options, std::span(media.images).subspan(next_image, n_images),
                                              std::span(media.audios).subspan(next_audio, n_audios));
        next_image += n_images;
        next_audio += n_audios;
        std::fputs("\n", stdout);
        cli::print_stats(r);
        if (session_file) chat.save(*session_file);
    }
    return 0;
}

const cli::Command reg{"chat", "interactive chat, replies streamed (the KV cache is kept between turns)",
                       cli::Options{
                           {"model", "PATH", "checkpoint directory (config.json, *.safetensors, tokenizer.json) or .gguf file", cli::kRequired},
                           {"system", "TEXT", "system prompt"},
                           {"think", "", "let the model think before it answers"},
                           {"session", "FILE", "resume the conversation saved in FILE if it exists; save it there after each reply"},
                       } + cli::generation_options() + cli::constraint_options() + cli::speculative_options() + cli::media_file_options() + cli::mmproj_option() + cli::threads_option(),
                       run};

}  // namespace cmd_chat
