// gemma4 demo: the main job without a download. Writes a small random-weight checkpoint and a
// small tokenizer.json of the official formats (once), loads them through the same code as a
// real checkpoint, and streams a generation with its speed.
#include "../generation_args.hpp"

#include <cstdio>
#include <filesystem>

namespace cmd_demo {

using namespace gemma4;

int run(cli::Args& args) {
    const std::filesystem::path exe_dir = std::filesystem::read_symlink("/proc/self/exe").parent_path();
    const std::filesystem::path dir = args.get("out").value_or((exe_dir / "demo-model").string());
    const std::string prompt = args.get("prompt").value_or("<bos>The quick brown fox");
    const auto threads = args.number<unsigned>("threads", 0);
    GenerateOptions options;
    options.max_new_tokens = args.number<std::int64_t>("max-new-tokens", 48);
    options.sampling = {.temperature = args.number<double>("temperature", 0.8), .top_k = 40, .seed = args.number<std::uint64_t>("seed", 1)};
    args.finish();

    if (!std::filesystem::exists(dir / "config.json")) {
        cli::Args defaults("make-tiny", cli::registry().at("make-tiny").options, {});
        cli::make_tiny(defaults, dir.string());
    }
    std::fprintf(stderr, "model: %s (random weights: the text is noise, the pipeline is real)\n", dir.string().c_str());
    const Model<float> model = Model<float>::load(dir, ModelOptions{threads});
    const Tokenizer tokenizer = Tokenizer::from_file(dir / "tokenizer.json");
    Session<float> session(model, &tokenizer);
    options.end_ids = {model.config().tokens.eos[0]};  // <eos> only: random weights emit <turn|> often
    options.on_token = [](std::int32_t, std::string_view text) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
        return true;
    };
    std::fputs(prompt.c_str(), stdout);
    const GenerationResult r = session.generate(prompt, options);
    std::fputs("\n", stdout);
    cli::print_stats(r);
    std::fprintf(stderr, "same command line for a real checkpoint: gemma4 generate --model DIR --prompt TEXT\n");
    return 0;
}

const cli::Command reg{"demo", "generate with a small self-made model (no download), streaming, with tok/s",
                       cli::Options{
                           {"out", "DIR", "where the small model is written once (default: demo-model next to the program)"},
                           {"prompt", "TEXT", "prompt (default: \"<bos>The quick brown fox\")"},
                           {"max-new-tokens", "N", "stop after N new tokens (default: 48)"},
                           {"temperature", "T", "sampling temperature; 0 = greedy (default: 0.8)"},
                           {"seed", "N", "seed of the sampler (default: 1)"},
                       } + cli::threads_option(),
                       run};

}  // namespace cmd_demo
