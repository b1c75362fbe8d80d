// What `generate`, `chat` and `demo` share: loading a checkpoint (a directory with its tokenizer
// and generation_config.json, or a GGUF file with its tokenizer keys), and the sampling options.
#pragma once

#include "cli.hpp"

#include <gemma4/generate/drafter.hpp>
#include <gemma4/generate/generation_config.hpp>
#include <gemma4/generate/mtp_drafter.hpp>
#include <gemma4/generate/session.hpp>
#include <gemma4/grammar/constraint.hpp>
#include <gemma4/grammar/gbnf.hpp>
#include <gemma4/grammar/json_schema.hpp>
#include <gemma4/model/model.hpp>
#include <gemma4/tokenizer/gguf_tokenizer.hpp>
#include <gemma4/tokenizer/tokenizer.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

namespace gemma4::cli {

/// The options `read_generate_options` reads.
inline Options generation_options() {
    return {
        {"max-new-tokens", "N", "stop after N new tokens (default: generation_config.json's, else the library's)"},
        {"temperature", "T", "sampling temperature; 0 = greedy (default: generation_config.json's, else 0)"},
        {"top-k", "K", "sample among the K most likely tokens; 0 = off"},
        {"top-p", "P", "sample among the most likely tokens holding probability mass P; 1 = off"},
        {"min-p", "P", "drop tokens less likely than P times the most likely one; 0 = off"},
        {"repetition-penalty", "R", "penalty on tokens already in the prompt or the reply; 1 = off"},
        {"seed", "N", "seed of the sampler (same seed, same tokens)"},
        {"stop", "TEXT", "end the reply before this text", kRepeatable},
    };
}

/// A checkpoint directory's generation_config.json; a GGUF file has none, so the library's
/// defaults (greedy).
inline GenerationConfig checkpoint_generation_config(const std::filesystem::path& model) {
    std::error_code ec;
    return std::filesystem::is_regular_file(model, ec) ? GenerationConfig{} : load_generation_config(model);
}

/// Sampling from generation_config.json, then the command line on top.
inline GenerateOptions read_generate_options(Args& args, const std::filesystem::path& model_dir, const Gemma4Config& config) {
    const GenerationConfig gc = checkpoint_generation_config(model_dir);
    GenerateOptions o;
    o.sampling = apply_generation_config(gc, SamplingParams{.temperature = 0.0});
    if (gc.max_new_tokens) o.max_new_tokens = *gc.max_new_tokens;
    o.max_new_tokens = args.number<std::int64_t>("max-new-tokens", o.max_new_tokens);
    o.sampling.temperature = args.number<double>("temperature", o.sampling.temperature);
    o.sampling.top_k = args.number<std::int32_t>("top-k", o.sampling.top_k);
    o.sampling.top_p = args.number<double>("top-p", o.sampling.top_p);
    o.sampling.min_p = args.number<double>("min-p", o.sampling.min_p);
    o.sampling.repetition_penalty = args.number<double>("repetition-penalty", o.sampling.repetition_penalty);
    o.sampling.seed = args.number<std::uint64_t>("seed", o.sampling.seed);
    if (o.max_new_tokens < 0) throw InvalidArgument(args.command() + ": --max-new-tokens must be >= 0");
    Sampler check(o.sampling);  // validates the parameters before any model work
    (void)check;
    // End ids: config.json's and generation_config.json's.
    for (std::size_t i = 0; i < config.tokens.eos_count; ++i) o.end_ids.push_back(config.tokens.eos[i]);
    for (auto id : gc.eos_token_id)
        if (std::find(o.end_ids.begin(), o.end_ids.end(), id) == o.end_ids.end()) o.end_ids.push_back(id);
    for (const auto& s : args.get_all("stop")) o.stop_strings.push_back(s);
    return o;
}

/// Where the tokenizer of a checkpoint is: its tokenizer.json, or a GGUF file's tokenizer keys.
inline std::string tokenizer_location(const std::filesystem::path& model) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(model, ec)) return model.string() + " (tokenizer.ggml.* keys)";
    return (model / "tokenizer.json").string();
}

inline std::optional<Tokenizer> load_tokenizer_if_present(const std::filesystem::path& model) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(model, ec)) {
        const GgufFile file(model);
        if (!gguf_has_tokenizer(file)) return std::nullopt;
        return tokenizer_from_gguf(file);
    }
    if (!std::filesystem::exists(model / "tokenizer.json")) return std::nullopt;
    return Tokenizer::from_file(model / "tokenizer.json");
}

/// The options `read_speculative` reads.
inline Options speculative_options() {
    return {
        {"draft-model", "DIR", "speculative decoding with this MTP assistant checkpoint (gemma-4-*-assistant)"},
        {"lookup", "N", "speculative decoding by prompt lookup: draft what followed the latest earlier match of the last N ids or fewer"},
        {"draft-max", "N", "ids drafted per step at most (default 3; needs --draft-model or --lookup)"},
        {"draft-min", "N", "verify a draft only when it has at least N ids (default 0)"},
        {"draft-p-min", "P", "drafters with probabilities stop where their top-1 probability falls below P (default 0)"},
    };
}

/// What --draft-model / --lookup and the draft lengths ask for, checked before any model loads.
/// --grammar / --json-schema: the reply is a sentence of a GBNF grammar, or JSON valid against a
/// schema (docs/structured-output.md).
inline Options constraint_options() {
    return {
        {"grammar", "FILE", "constrain the reply to this GBNF grammar (docs/structured-output.md)"},
        {"json-schema", "FILE", "constrain the reply to JSON that validates against this JSON Schema"},
    };
}

/// The grammar text of --grammar or --json-schema (compiled from the schema), read and checked
/// before the model loads; nothing when neither is given.
inline std::optional<std::string> read_constraint_grammar(Args& args) {
    const auto grammar = args.get("grammar");
    const auto schema = args.get("json-schema");
    if (grammar && schema) throw InvalidArgument(args.command() + ": give one of --grammar and --json-schema");
    if (!grammar && !schema) return std::nullopt;
    const std::string path = grammar ? *grammar : *schema;
    std::ifstream in(path, std::ios::binary);
    if (!in) throw IoError(path + ": cannot open");
    std::ostringstream text;
    text << in.rdbuf();
    if (grammar) {
        parse_gbnf(text.str());  // its errors before the model loads
        return text.str();
    }
    nlohmann::ordered_json parsed;  // properties are generated in the file's order
    try {
        parsed = nlohmann::ordered_json::parse(text.str());
    } catch (const nlohmann::json::parse_error& e) {
        throw GrammarError(path + ": not JSON: " + e.what());
    }
    try {
        return json_schema_to_gbnf(parsed);
    } catch (const GrammarError& e) {
        throw GrammarError(path + ": " + e.what());
    }
}

/// The constraint of that grammar over the tokenizer's vocabulary, or none.
inline std::shared_ptr<const Constraint> make_constraint(const std::optional<std::string>& grammar, const Tokenizer& tokenizer) {
    if (!grammar) return nullptr;
    return Constraint::from_gbnf(*grammar, TokenVocabulary::from_tokenizer(tokenizer));
}

struct SpeculativeArgs {
    std::optional<std::filesystem::path> draft_model;
    std::optional<std::int64_t> lookup;
    SpeculativeOptions options;  ///< without the drafter
};

/// A drafter chosen on the command line and the options that use it.
struct Speculation {
    std::unique_ptr<Drafter> drafter;
    SpeculativeOptions options;  ///< options.drafter is `drafter` (null: plain decoding)
};

/// The draft-length options without a drafter are errors, as are lengths out of range.
inline SpeculativeArgs read_speculative_args(Args& args) {
    SpeculativeArgs s;
    if (const auto m = args.get("draft-model")) s.draft_model = *m;
    if (args.get("lookup")) s.lookup = args.number<std::int64_t>("lookup", 3);
    if (s.lookup && s.draft_model) throw InvalidArgument(args.command() + ": give one drafter, --draft-model or --lookup");
    const bool lengths = args.get("draft-max") || args.get("draft-min") || args.get("draft-p-min");
    s.options.draft_max = args.number<std::int64_t>("draft-max", s.options.draft_max);
    s.options.draft_min = args.number<std::int64_t>("draft-min", s.options.draft_min);
    s.options.p_min = args.number<double>("draft-p-min", s.options.p_min);
    if (s.options.draft_max < 1) throw InvalidArgument(args.command() + ": --draft-max must be >= 1, got " + std::to_string(s.options.draft_max));
    if (s.options.draft_min < 0 || s.options.draft_min > s.options.draft_max)
        throw InvalidArgument(args.command() + ": --draft-min must be in [0, --draft-max], got " + std::to_string(s.options.draft_min));
    if (!(s.options.p_min >= 0 && s.options.p_min <= 1))
        throw InvalidArgument(args.command() + ": --draft-p-min must be in [0, 1], got " + std::to_string(s.options.p_min));
    if (s.lookup && *s.lookup < 1) throw InvalidArgument(args.command() + ": --lookup must be >= 1, got " + std::to_string(*s.lookup));
    if (!s.lookup && !s.draft_model && lengths)
        throw InvalidArgument(args.command() + ": --draft-max, --draft-min and --draft-p-min need a drafter (--draft-model or --lookup)");
    return s;
}

/// The drafter for `target`: prompt lookup, or the assistant in `draft_model` (weights as stored).
template <class T>
Speculation make_speculation(const SpeculativeArgs& a, const Model<T>& target, unsigned threads) {
    Speculation s;
    s.options = a.options;
    if (a.lookup) s.drafter = std::make_unique<PromptLookupDrafter>(*a.lookup);
    else if (a.draft_model)
        s.drafter = std::make_unique<MtpDrafter<T>>(std::make_shared<const Assistant<T>>(Assistant<T>::load(*a.draft_model, target, ModelOptions{threads})));
    s.options.drafter = s.drafter.get();
    return s;
}

inline void print_stats(const GenerationResult& r) {
    std::fprintf(stderr, "\n[%lld prompt tokens at %.1f tok/s, %lld generated at %.1f tok/s, first token after %.3f s; stopped: %s",
                 static_cast<long long>(r.stats.prompt_tokens), r.stats.prompt_tokens_per_s(),
                 static_cast<long long>(r.stats.generated_tokens), r.stats.generation_tokens_per_s(), r.stats.time_to_first_token,
                 std::string(finish_reason_name(r.finish)).c_str());
    if (r.stats.drafted_tokens)
        std::fprintf(stderr, "; %lld drafted, %lld accepted (%.0f %%), %lld steps", static_cast<long long>(r.stats.drafted_tokens),
                     static_cast<long long>(r.stats.accepted_tokens), 100 * r.stats.acceptance_rate(),
                     static_cast<long long>(r.stats.decode_steps));
    std::fprintf(stderr, "]\n");
}

}  // namespace gemma4::cli
