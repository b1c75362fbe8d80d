// gemma4 generate: text (or ids) in, streamed text (or a JSON array of ids) out.
#include "../generation_args.hpp"
#include "../media_args.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

namespace cmd_generate {

using namespace gemma4;

template <class T>
int generate(cli::Args& args, const std::filesystem::path& dir, std::optional<std::string> prompt, std::optional<std::string> prompt_ids,
             bool print_ids, unsigned threads) {
    const cli::SpeculativeArgs draft_args = cli::read_speculative_args(args);
    const std::optional<std::string> grammar = cli::read_constraint_grammar(args);
    const Model<T> model = Model<T>::load(dir, ModelOptions{threads}, LoadOptions{.mmproj = args.mmproj()});
    GenerateOptions options = cli::read_generate_options(args, dir, model.config());
    const cli::Media<T> media = cli::read_media_files<T>(args, model.config());
    args.finish();
    const cli::Speculation speculation = cli::make_speculation(draft_args, model, threads);
    options.speculative = speculation.options;
    std::optional<Tokenizer> tokenizer;
    if (prompt || !print_ids || grammar) tokenizer = cli::load_tokenizer_if_present(dir);
    if (prompt && !tokenizer) throw IoError(cli::tokenizer_location(dir) + ": not found (use --prompt-ids without a tokenizer)");
    if (grammar && !tokenizer) throw IoError(cli::tokenizer_location(dir) + ": not found (--grammar and --json-schema need the vocabulary)");
    if (grammar) options.constraint = cli::make_constraint(grammar, *tokenizer);
    Session<T> session(model, tokenizer ? &*tokenizer : nullptr);
    if (!print_ids)
        options.on_token = [](std::int32_t, std::string_view text) {
            std::fwrite(text.data(), 1, text.size(), stdout);
            std::fflush(stdout);
            return true;
        };
    GenerationResult r;
    std::vector<std::int32_t> ids;
    if (prompt) {
        if (prompt->empty()) throw InvalidArgument("generate: empty prompt");
        ids = tokenizer->encode(*prompt);
    } else {
        ids = cli::parse_id_list(*prompt_ids, "generate: --prompt-ids");
    }
    // Each <|image|> / <|audio|> of the prompt takes the next --image / --audio, expanded to its
    // soft tokens.
    const auto image_tokens = media.image_tokens();
    const auto audio_tokens = media.audio_tokens(model.config().audio.audio_embed_dim);
    ids = expand_placeholders(ids, model.config().tokens, image_tokens, audio_tokens);
    if (tokenizer) session.check_vocab(ids);
    SoftTokenPlan<T> plan;
    if (!media.empty()) plan = plan_soft_tokens<T>(model, ids, media.images, media.audios);
    r = session.generate(std::span<const std::int32_t>(ids), options, media.empty() ? nullptr : &plan);
    if (print_ids) {
        std::cout << nlohmann::json(r.ids).dump() << "\n";
    } else {
        if (!tokenizer) std::cout << nlohmann::json(r.ids).dump();
        std::cout << "\n";
    }
    cli::print_stats(r);
    return 0;
}

int run(cli::Args& args) {
    const std::filesystem::path dir = args.require("model");
    const auto prompt = args.get("prompt");
    const auto prompt_ids = args.get("prompt-ids");
    const bool print_ids = args.flag("print-ids");
    const std::string precision = args.get("precision").value_or("f32");
    const auto threads = args.number<unsigned>("threads", 0);
    if (prompt.has_value() == prompt_ids.has_value()) throw InvalidArgument("generate: give exactly one of --prompt and --prompt-ids");
    if (precision == "f32") return generate<float>(args, dir, prompt, prompt_ids, print_ids, threads);
    if (precision == "f64") return generate<double>(args, dir, prompt, prompt_ids, print_ids, threads);
    throw InvalidArgument("generate: --precision must be f32 or f64, got '" + precision + "'");
}

const cli::Command reg{"generate", "generate text from --prompt (or ids from --prompt-ids), streaming",
                       cli::Options{
                           {"model", "PATH", "checkpoint directory (config.json, *.safetensors, tokenizer.json) or .gguf file", cli::kRequired},
                           {"prompt", "TEXT", "prompt text, special tokens included (\"<bos><|turn>user\\n...\")"},
                           {"prompt-ids", "IDS", "prompt as comma-separated token ids, instead of --prompt"},
                           {"print-ids", "", "print the generated ids as a JSON array instead of text"},
                           {"precision", "f32|f64", "arithmetic type (default: f32)"},
                       } + cli::generation_options() + cli::constraint_options() + cli::speculative_options() + cli::media_file_options() + cli::mmproj_option() + cli::threads_option(),
                       run};

}  // namespace cmd_generate
