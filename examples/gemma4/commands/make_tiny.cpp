// gemma4 make-tiny: writes a random checkpoint of any shape in the official layout, or a random
// assistant (drafter) checkpoint matching a target checkpoint.
#include "../cli.hpp"

#include <gemma4/model/assistant.hpp>
#include <gemma4/model/random_checkpoint.hpp>
#include <gemma4/tokenizer/tiny_tokenizer.hpp>

#include <cstdio>

namespace cmd_make_tiny {

using namespace gemma4;

DType parse_dtype(const std::string& s) {
    if (s == "bf16") return DType::BF16;
    if (s == "f16") return DType::F16;
    if (s == "f32") return DType::F32;
    if (s == "f64") return DType::F64;
    throw InvalidArgument("make-tiny: --dtype must be bf16, f16, f32 or f64, got '" + s + "'");
}

}  // namespace cmd_make_tiny

namespace gemma4::cli {

/// Writes a random assistant checkpoint for the target checkpoint directory `target` (its hidden
/// size, vocabulary and the K/V geometry of its last sliding and full layers) to `out`.
int make_tiny_assistant(cli::Args& args, const std::string& out, const std::filesystem::path& target) {
    const Gemma4Config t = load_config(target / "config.json");
    AssistantConfig a = assistant_config_for(t);
    RandomCheckpointOptions o;
    o.seed = args.number<std::uint64_t>("seed", 1);
    o.dtype = cmd_make_tiny::parse_dtype(args.get("dtype").value_or("bf16"));
    o.shards = args.number<int>("shards", 1);
    a.text.hidden_size = args.number<std::int64_t>("hidden-size", a.text.hidden_size);
    a.text.intermediate_size = args.number<std::int64_t>("intermediate-size", a.text.intermediate_size);
    args.finish();
    // Validate through the same parser and checks that load it.
    check_assistant_fits(parse_assistant_config(assistant_config_to_json(a), "make-tiny"), t, "make-tiny");
    write_random_assistant_checkpoint(out, a, o);
    std::fprintf(stderr, "wrote %s: assistant of %lld parameters for %s\n", out.c_str(), static_cast<long long>(assistant_parameter_count(a)),
                 target.string().c_str());
    return 0;
}

/// Writes the tiny checkpoint described by the options (and, unless --no-tokenizer, a small
/// tokenizer.json of the official format) to `out`.
int make_tiny(cli::Args& args, const std::string& out) {
    Gemma4Config c = tiny_config();
    RandomCheckpointOptions o;
    o.seed = args.number<std::uint64_t>("seed", 1);
    o.dtype = cmd_make_tiny::parse_dtype(args.get("dtype").value_or("bf16"));
    o.shards = args.number<int>("shards", 1);
    o.text_only_layout = args.flag("text-only");
    c.vocab_size = args.number<std::int64_t>("vocab-size", c.vocab_size);
    c.hidden_size = args.number<std::int64_t>("hidden-size", c.hidden_size);
    c.intermediate_size = args.number<std::int64_t>("intermediate-size", c.intermediate_size);
    c.num_hidden_layers = args.number<std::int64_t>("layers", c.num_hidden_layers);
    c.num_attention_heads = args.number<std::int64_t>("heads", c.num_attention_heads);
    c.num_key_value_heads = args.number<std::int64_t>("kv-heads", c.num_key_value_heads);
    c.head_dim = args.number<std::int64_t>("head-dim", c.head_dim);
    c.global_head_dim = args.number<std::int64_t>("global-head-dim", c.global_head_dim);
    c.num_global_key_value_heads = args.number<std::int64_t>("global-kv-heads", c.num_global_key_value_heads);
    c.sliding_window = args.number<std::int64_t>("sliding-window", c.sliding_window);
    c.max_position_embeddings = args.number<std::int64_t>("max-positions", c.max_position_embeddings);
    if (c.num_hidden_layers < 1 || c.num_hidden_layers > static_cast<std::int64_t>(Gemma4Config::kMaxLayers))
        throw InvalidArgument("make-tiny: --layers must be in [1, 256]");
    if (auto types = args.get("layer-types")) {
        // e.g. "sssssf": s = sliding, f = full, one letter per layer
        if (static_cast<std::int64_t>(types->size()) != c.num_hidden_layers)
            throw InvalidArgument("make-tiny: --layer-types needs one letter (s/f) per layer");
        for (std::size_t i = 0; i < types->size(); ++i) {
            if ((*types)[i] != 's' && (*types)[i] != 'f') throw InvalidArgument("make-tiny: --layer-types letters are s or f");
            c.layer_types[i] = (*types)[i] == 's' ? AttentionKind::Sliding : AttentionKind::Full;
        }
    } else if (args.get("layers")) {
        c.layer_types = Gemma4Config::default_layer_types(c.num_hidden_layers);
    }
    const bool with_tokenizer = !args.flag("no-tokenizer");
    args.finish();
    if (with_tokenizer) adopt_tiny_tokenizer(c, write_tiny_tokenizer(out, false, 400, c.vocab_size));
    // Validate through the same parser that loads it.
    parse_config(config_to_json(c), "make-tiny");
    write_random_checkpoint(out, c, o);
    std::fprintf(stderr, "wrote %s: %lld parameters\n", out.c_str(), static_cast<long long>(parameter_count(c)));
    return 0;
}

}  // namespace gemma4::cli

namespace cmd_make_tiny {

int run(gemma4::cli::Args& args) {
    const std::string out = args.require("out");
    const bool assistant = args.flag("assistant");
    const auto target = args.get("target");
    if (assistant != target.has_value()) throw gemma4::InvalidArgument("make-tiny: --assistant and --target DIR go together");
    if (assistant) return gemma4::cli::make_tiny_assistant(args, out, *target);
    return gemma4::cli::make_tiny(args, out);
}

const gemma4::cli::Command reg{"make-tiny", "write a random checkpoint of any shape, or an assistant for one (official layout)",
                               {
                                   {"out", "DIR", "where to write config.json, the shards and tokenizer.json", gemma4::cli::kRequired},
                                   {"seed", "N", "seed of the random weights (default: 1)"},
                                   {"dtype", "TYPE", "bf16 (default), f16, f32 or f64"},
                                   {"shards", "N", "number of .safetensors shards (default: 1)"},
                                   {"text-only", "", "text decoder only, in the text-only checkpoint layout"},
                                   {"no-tokenizer", "", "write no tokenizer.json"},
                                   {"assistant", "", "write an assistant (drafter) checkpoint for the checkpoint given by --target"},
                                   {"target", "DIR", "with --assistant: the target checkpoint whose widths and KV geometry it matches"},
                                   {"vocab-size", "N", "vocabulary size (a larger one pads tokenizer.json with <unused_N> pieces)"},
                                   {"hidden-size", "N", "hidden size (with --assistant: the assistant's own, default half the target's)"},
                                   {"intermediate-size", "N", "MLP intermediate size (with --assistant: the assistant's own)"},
                                   {"layers", "N", "decoder layers, 1 to 256"},
                                   {"layer-types", "LETTERS", "one letter per layer: s = sliding, f = full (e.g. sssssf)"},
                                   {"heads", "N", "attention heads"},
                                   {"kv-heads", "N", "key/value heads of the sliding layers"},
                                   {"global-kv-heads", "N", "key/value heads of the full layers"},
                                   {"head-dim", "N", "head size of the sliding layers"},
                                   {"global-head-dim", "N", "head size of the full layers"},
                                   {"sliding-window", "N", "sliding window length"},
                                   {"max-positions", "N", "max_position_embeddings"},
                               },
                               run};

}  // namespace cmd_make_tiny
