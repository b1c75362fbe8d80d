// gemma4 bench --grammar FILE | --json-schema FILE --tokenizer tokenizer.json: what a constraint
// costs per token at a real vocabulary. Replies are sampled as a random-weight model samples them
// (random logits, temperature 1, the mask applied), so they wander through every state the
// grammar has; each step times the matcher's mask and the masking of the logits.
#pragma once

#include "../cli.hpp"
#include "../probes.hpp"

#include <gemma4/detail/random.hpp>
#include <gemma4/generate/sampler.hpp>
#include <gemma4/grammar/constraint.hpp>
#include <gemma4/grammar/json_schema.hpp>
#include <gemma4/tokenizer/tokenizer.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace cmd_bench {

using namespace gemma4;

inline cli::Options grammar_bench_options() {
    return {{"grammar", "FILE", "with --tokenizer: measure the token mask of this GBNF grammar"},
            {"json-schema", "FILE", "with --tokenizer: measure the token mask of this JSON Schema's grammar"},
            {"tokenizer", "PATH", "the tokenizer.json whose vocabulary the grammar bench masks (required with --grammar or --json-schema)", cli::kRequired},
            {"replies", "N", "grammar bench: sampled replies (default 20)"}};
}

/// Sorted durations in microseconds, and their median, p99 and worst.
struct Percentiles {
    std::vector<double> us;
    double at(double q) const { return us.empty() ? 0 : us[std::min(us.size() - 1, static_cast<std::size_t>(q * static_cast<double>(us.size())))]; }
    nlohmann::json summary() {
        std::sort(us.begin(), us.end());
        return {{"median_us", at(0.5)}, {"p99_us", at(0.99)}, {"max_us", us.empty() ? 0 : us.back()}, {"steps", us.size()}};
    }
};

inline std::string read_whole_file(const std::string& path, const char* what) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw IoError(path + ": cannot open " + what);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

/// One reply of at most `max_tokens` ids: the matcher's mask and its application to the logits
/// timed, appended to `mask` and `apply`.
inline std::int64_t sample_reply(const std::shared_ptr<const Constraint>& constraint, std::int32_t end_id, std::uint64_t seed,
                                 std::int64_t max_tokens, Percentiles& mask, Percentiles& apply) {
    const std::size_t vocab = constraint->vocabulary().size();
    GrammarMatcher matcher(constraint, {end_id});
    Sampler sampler(SamplingParams{.temperature = 1.0, .seed = seed});
    detail::Xoshiro256 rng(seed * 7919 + 1);
    std::vector<float> logits(vocab), masked(vocab);
    std::int64_t n = 0;
    for (; n < max_tokens; ++n) {
        for (auto& x : logits) x = static_cast<float>(rng.uniform() * 8.0);
        masked = logits;
        const auto t0 = std::chrono::steady_clock::now();
        const auto allowed = matcher.allowed();
        const auto t1 = std::chrono::steady_clock::now();
        detail::apply_allowed_mask(masked, allowed);  // what the sampler does with it
        const auto t2 = std::chrono::steady_clock::now();
        mask.us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        apply.us.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
        sampler.allow_only_next(allowed);
        const std::int32_t id = sampler.sample(logits);
        matcher.accept(id);
        if (id == end_id) break;
    }
    return n;
}

inline int run_grammar(cli::Args& args) {
    const auto grammar_path = args.get("grammar");
    const auto schema_path = args.get("json-schema");
    const std::string tokenizer_path = args.require("tokenizer");
    const auto replies = args.number<std::int64_t>("replies", 20);
    const auto max_tokens = args.number<std::int64_t>("gen-tokens", 256);
    const bool json = args.flag("json");
    args.finish();
    if (grammar_path.has_value() == schema_path.has_value()) throw InvalidArgument("bench: give exactly one of --grammar and --json-schema");

    auto start = std::chrono::steady_clock::now();
    const Tokenizer tokenizer = Tokenizer::from_file(tokenizer_path);
    const auto vocabulary = TokenVocabulary::from_tokenizer(tokenizer);
    const double vocabulary_s = probes::seconds_since(start);
    start = std::chrono::steady_clock::now();
    const std::string gbnf = grammar_path ? read_whole_file(*grammar_path, "grammar")
                                          : json_schema_to_gbnf(nlohmann::json::parse(read_whole_file(*schema_path, "JSON Schema")));
    const auto constraint = Constraint::from_gbnf(gbnf, vocabulary);
    const double compile_s = probes::seconds_since(start);

    const std::int32_t end_id = tokenizer.eos_id();
    Percentiles mask, apply, first_reply;
    std::int64_t tokens = 0;
    for (std::int64_t r = 0; r < replies; ++r) {
        Percentiles* target = r == 0 ? &first_reply : &mask;
        tokens += sample_reply(constraint, end_id, static_cast<std::uint64_t>(r + 1), max_tokens, *target, apply);
    }
    nlohmann::json j{{"vocabulary", vocabulary->size()},
                     {"trie_nodes", vocabulary->trie().nodes()},
                     {"vocabulary_s", vocabulary_s},
                     {"compile_s", compile_s},
                     {"grammar_bytes", gbnf.size()},
                     {"replies", replies},
                     {"tokens", tokens},
                     {"automaton_states", constraint->automaton().state_count()},
                     {"masks_computed", constraint->automaton().mask_count()},
                     {"first_reply_mask", first_reply.summary()},
                     {"mask", mask.summary()},
                     {"apply_mask", apply.summary()}};
    if (json) {
        std::printf("%s\n", j.dump().c_str());
        return 0;
    }
    std::printf("vocabulary %zu ids (%zu trie nodes) in %.0f ms; grammar of %zu bytes compiled in %.2f ms\n", vocabulary->size(),
                vocabulary->trie().nodes(), 1e3 * vocabulary_s, gbnf.size(), 1e3 * compile_s);
    std::printf("%lld replies, %lld tokens; %zu automaton states, %zu masks computed\n", static_cast<long long>(replies),
                static_cast<long long>(tokens), constraint->automaton().state_count(), constraint->automaton().mask_count());
    const auto line = [](const char* name, const nlohmann::json& s) {
        std::printf("%-28s median %8.1f us   p99 %8.1f us   worst %8.1f us   (%lld steps)\n", name, s["median_us"].get<double>(),
                    s["p99_us"].get<double>(), s["max_us"].get<double>(), static_cast<long long>(s["steps"].get<std::size_t>()));
    };
    line("mask, first reply", j["first_reply_mask"]);
    line("mask, later replies", j["mask"]);
    line("mask onto the logits", j["apply_mask"]);
    return 0;
}

}  // namespace cmd_bench
