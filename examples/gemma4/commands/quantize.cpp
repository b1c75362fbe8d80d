// gemma4 quantize: a checkpoint directory re-encoded as int8 or int4 (docs/checkpoint-formats.md),
// loadable by Model::load (or Assistant::load, for an assistant checkpoint) with mmap only.
#include "../cli.hpp"

#include <gemma4/model/assistant_checkpoint.hpp>
#include <gemma4/model/quantize.hpp>
#include <gemma4/model/save_checkpoint.hpp>

#include <filesystem>

#include <cstdio>
#include <string>

namespace cmd_quantize {

using namespace gemma4;

int run(cli::Args& args) {
    const std::string model_dir = args.require("model");
    const std::string out = args.require("out");
    const std::string weights = args.require("weights");
    const std::int64_t block = args.quant_block();
    args.finish();
    const auto format = parse_weight_format(weights);
    if (!format || (*format != WeightFormat::Int8 && *format != WeightFormat::Int4))
        throw InvalidArgument("quantize: --weights must be int8 or int4, got '" + weights + "'");
    LoadOptions load{.multimodal = true, .format = *format, .block = block};
    load.progress = [](std::size_t done, std::size_t total, const std::string&) {
        const int width = 40, filled = static_cast<int>(width * done / total);
        std::fprintf(stderr, "\rquantizing [%s%s] %zu/%zu", std::string(static_cast<std::size_t>(filled), '#').c_str(),
                     std::string(static_cast<std::size_t>(width - filled), ' ').c_str(), done, total);
        if (done == total) std::fprintf(stderr, "\n");
    };
    const auto config = std::filesystem::path(model_dir) / "config.json";
    if (std::filesystem::is_directory(model_dir) && std::filesystem::exists(config) && is_assistant_config(config)) {
        save_assistant_checkpoint(load_assistant_checkpoint(model_dir, load), out);
    } else {
        const Checkpoint ck = load_checkpoint_as(model_dir, load);
        save_checkpoint(ck, out);
    }
    std::fprintf(stderr, "wrote %s\n", out.c_str());
    return 0;
}

const cli::Command reg{"quantize", "write a checkpoint re-encoded as int8 or int4",
                       cli::Options{
                           {"model", "PATH", "checkpoint directory (a model or an assistant) or .gguf file to read", cli::kRequired},
                           {"weights", "int8|int4", "format to write", cli::kRequired},
                           {"out", "DIR", "directory to write", cli::kRequired},
                       } + cli::quant_block_option(),
                       run};

}  // namespace cmd_quantize
