// GBNF grammars: the input is grammar text. An accepted grammar is compiled against a small
// vocabulary and walked for a few steps (masks, accepts, a rollback), so the automaton's bounds
// are fuzzed with the parser: the walk may throw GrammarError (a grammar too ambiguous), never
// crash, and the allowed ids must be accepted.
#include <gemma4/grammar/constraint.hpp>

#include "fuzz_support.hpp"

#include <memory>
#include <string>
#include <vector>

namespace {

std::shared_ptr<const gemma4::TokenVocabulary> vocabulary() {
    static const auto v = [] {
        std::vector<std::string> bytes;
        for (int c = 1; c < 128; ++c) bytes.emplace_back(1, static_cast<char>(c));
        for (const char* w : {"ab", "true", "null", "\"a", "\": ", "{\"", "12", "\xC3", "\xA9", "\xE2\x82\xAC", "\xF0\x9F"}) bytes.emplace_back(w);
        bytes.emplace_back("<end>");
        std::vector<bool> is_text(bytes.size(), true);
        is_text.back() = false;
        return std::make_shared<const gemma4::TokenVocabulary>(std::move(bytes), std::move(is_text));
    }();
    return v;
}

/// The first allowed id at or after `from` (wrapping), or -1.
std::int32_t allowed_id(std::span<const std::uint64_t> mask, std::size_t n, std::size_t from) {
    for (std::size_t k = 0; k < n; ++k) {
        const std::size_t i = (from + k) % n;
        if ((mask[i / 64] >> (i % 64)) & 1) return static_cast<std::int32_t>(i);
    }
    return -1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    gemma4::fuzz::expect_ok_or_error([&] {
        gemma4::AutomatonLimits limits;
        limits.max_states = 4096;
        limits.max_nodes = 1 << 16;
        const auto constraint = gemma4::Constraint::from_gbnf(text, vocabulary(), limits);
        const auto end = static_cast<std::int32_t>(vocabulary()->size() - 1);
        gemma4::GrammarMatcher matcher(constraint, {end});
        for (std::size_t step = 0; step < 16 && !matcher.ended(); ++step) {
            const std::int32_t id = allowed_id(matcher.allowed(), vocabulary()->size(), step * 37 + size);
            if (id < 0) gemma4::fuzz::fail("allowed() returned an empty mask without throwing");
            if (!matcher.allows(id)) gemma4::fuzz::fail("an id in the mask is not allowed");
            matcher.accept(id);
        }
        matcher.rollback(matcher.accepted() / 2);
    });
    return 0;
}
