// `gemma4 <command> --help`: every registered command prints its summary and the options it
// reads, and exits 0; options it does not declare are still errors.
#include <catch2/catch.hpp>

#include "support/run_cli.hpp"

#include <algorithm>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

using gemma4::test::run_cli;

namespace {

// What each command reads (args.get / flag / require / number / get_all in
// examples/gemma4/commands/*.cpp and the helpers they call), written out here on purpose: the help
// must list exactly these.
const std::set<std::string> kGeneration = {"max-new-tokens", "temperature", "top-k", "top-p", "min-p", "repetition-penalty", "seed", "stop"};
const std::set<std::string> kMediaFiles = {"image", "audio", "max-soft-tokens"};
const std::set<std::string> kSpeculative = {"draft-model", "lookup", "draft-max", "draft-min", "draft-p-min"};
const std::set<std::string> kConstraint = {"grammar", "json-schema"};
const std::set<std::string> kMediaArrays = {"image-patches", "image-positions", "audio-frames"};

std::set<std::string> operator+(std::set<std::string> a, const std::set<std::string>& b) {
    a.insert(b.begin(), b.end());
    return a;
}

const std::map<std::string, std::set<std::string>> kReads = {
    {"bench", {"config", "weights", "random-weights", "model", "layers", "prompt-tokens", "gen-tokens", "threads", "batch", "bandwidth-mb",
               "context", "kv", "json", "draft", "accept", "draft-max", "gguf-dir", "keep-gguf", "image-tokens", "repeat", "quant-block",
               "mmproj", "grammar", "json-schema", "tokenizer", "replies"}},
    {"chat", std::set<std::string>{"model", "system", "think", "session", "threads", "mmproj"} + kGeneration + kConstraint + kSpeculative + kMediaFiles},
    {"demo", {"out", "prompt", "threads", "max-new-tokens", "temperature", "seed"}},
    {"detokenize", {"tokenizer", "jsonl", "skip-special"}},
    {"info", {"json"}},
    {"generate", std::set<std::string>{"model", "prompt", "prompt-ids", "print-ids", "precision", "threads", "mmproj"} + kGeneration + kConstraint +
                     kSpeculative + kMediaFiles},
    {"logits", std::set<std::string>{"model", "tokens", "precision", "chunk", "out", "out-dir", "dump-taps", "threads", "weights", "mmproj"} +
                   kMediaArrays},
    {"make-tiny", {"out", "seed", "dtype", "shards", "text-only", "vocab-size", "hidden-size", "intermediate-size", "layers", "heads",
                   "kv-heads", "head-dim", "global-head-dim", "global-kv-heads", "sliding-window", "max-positions", "layer-types",
                   "no-tokenizer", "assistant", "target"}},
    {"preprocess-audio", {"audio", "frame-size", "out-frames"}},
    {"preprocess-image", {"image", "max-soft-tokens", "patch-size", "pooling-kernel-size", "ignore-exif-orientation", "pil-resize",
                          "out-patches", "out-positions"}},
    {"quantize", {"model", "out", "weights", "quant-block"}},
#ifdef GEMMA4_HAVE_SERVE  // built only with cpp-httplib
    {"loadgen", {"url", "api-key", "concurrency", "requests", "max-tokens", "prompt", "model", "json", "ignore-eos", "unique-prompts"}},
    {"serve", std::set<std::string>{"model", "host", "port", "parallel", "ctx-size", "queue", "kv-budget", "api-key", "weights", "quant-block", "max-body",
                                    "max-soft-tokens", "grace", "served-model-name", "alias", "accept-any-model", "threads", "mmproj", "max-n", "prefix-cache"} + kSpeculative},
#endif
    {"tokenize", {"tokenizer", "config", "jsonl"}},
    {"tokenizer-bench", {"tokenizer", "text", "loads"}},
};

/// The commands and summaries of `gemma4 --help`: the indented lines of its "commands:" list.
std::map<std::string, std::string> registered_commands() {
    const auto r = run_cli("--help");
    REQUIRE(r.status == 0);
    std::map<std::string, std::string> commands;
    std::istringstream lines(r.err);
    std::string line;
    const std::regex entry("^  (\\S+) +(.+)$");
    std::smatch m;
    while (std::getline(lines, line))
        if (std::regex_match(line, m, entry)) commands[m[1]] = m[2];
    return commands;
}

/// The option names of a command's help (lines "  --name ..."; -h/--help itself left out).
std::set<std::string> listed_options(const std::string& help) {
    std::set<std::string> names;
    std::istringstream lines(help);
    std::string line;
    const std::regex option("^  --([a-z0-9-]+)( |$).*");
    std::smatch m;
    while (std::getline(lines, line))
        if (std::regex_match(line, m, option)) names.insert(m[1]);
    return names;
}


}  // namespace

TEST_CASE("every command answers --help and -h with its summary and its options", "[cli][help]") {
    const auto commands = registered_commands();
    std::set<std::string> names, expected;
    for (const auto& [name, summary] : commands) names.insert(name);
    for (const auto& [name, reads] : kReads) expected.insert(name);
    CHECK(names == expected);  // a new command needs its line in kReads
    for (const auto& [name, summary] : commands) {
        for (const std::string flag : {"--help", "-h"}) {
            INFO("gemma4 " << name << " " << flag);
            const auto r = run_cli(name + " " + flag);
            CHECK(r.status == 0);
            CHECK(r.err.empty());
            CHECK(r.out.rfind("usage: gemma4 " + name + " [options]\n", 0) == 0);
            CHECK(r.out.find(summary) != std::string::npos);
            CHECK(r.out.find("  -h, --help ") != std::string::npos);
            if (kReads.count(name)) CHECK(listed_options(r.out) == kReads.at(name));
        }
    }
}

TEST_CASE("the --help option wins over the other options, even wrong ones", "[cli][help]") {
    for (const std::string args : {"generate --model /nonexistent --help", "generate --no-such-option --help",
                                   "logits -h --tokens", "make-tiny --out --help"}) {
        INFO(args);
        const auto r = run_cli(args);
        CHECK(r.status == 0);
        CHECK(r.out.rfind("usage: gemma4 ", 0) == 0);
    }
    // After an option that takes a value, "-h" is that value, not a request for help.
    const auto r = run_cli("tokenize --tokenizer -h", "x");
    CHECK(r.status == 1);
    CHECK(r.err.find("-h") != std::string::npos);
}

TEST_CASE("options a command does not declare are errors that name them", "[cli][help][errors]") {
    for (const auto& [name, reads] : kReads) {
        INFO(name);
        const auto r = run_cli(name + " --no-such-option 1");
        CHECK(r.status == 1);
        CHECK(r.err == "gemma4 " + name + ": error: " + name + ": unknown option --no-such-option\n");
        CHECK(r.out.empty());
    }
    // Another command's option, a repeated option, a flag with a value, a missing value, a stray word.
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"demo --top-k 3", "demo: unknown option --top-k"},
        {"quantize --model a --model b --out c --weights int8", "quantize: --model given more than once"},
        {"detokenize --tokenizer t.json --jsonl=1", "detokenize: --jsonl takes no value"},
        {"generate --model", "generate: --model needs a value"},
        {"tokenize stray", "tokenize: unexpected argument 'stray'"},
    };
    for (const auto& [args, message] : cases) {
        INFO(args);
        const auto r = run_cli(args);
        CHECK(r.status == 1);
        CHECK(r.err.find(message) != std::string::npos);
        CHECK(gemma4::test::line_count(r.err) == 1);
    }
}
