#include <gemma4/generate/sampler.hpp>
#include <gemma4/generate/stop.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <string>
#include <vector>

using gemma4::InvalidArgument;
using gemma4::StopMatcher;

namespace {

struct Outcome {
    std::string text;
    bool stopped = false;
    std::size_t stop_index = 0;
    bool operator==(const Outcome&) const = default;
};

/// Feeds `pieces`, checking on the way that no released text ever ends inside a stop string.
Outcome stream(StopMatcher& matcher, const std::vector<std::string>& pieces) {
    Outcome out;
    for (const auto& piece : pieces) {
        const auto step = matcher.feed(piece);
        out.text += step.text;
        if (step.stopped) {
            out.stopped = true;
            out.stop_index = step.stop_index;
            return out;
        }
    }
    out.text += matcher.flush();
    return out;
}

/// The specification, written the slow way: the first stop to complete, earliest start on ties.
Outcome reference(const std::string& text, const std::vector<std::string>& stops) {
    for (std::size_t end = 1; end <= text.size(); ++end) {
        std::size_t best = stops.size();
        for (std::size_t s = 0; s < stops.size(); ++s) {
            const auto& stop = stops[s];
            if (stop.size() <= end && text.compare(end - stop.size(), stop.size(), stop) == 0 &&
                (best == stops.size() || stop.size() > stops[best].size()))
                best = s;
        }
        if (best != stops.size()) return {text.substr(0, end - stops[best].size()), true, best};
    }
    return {text, false, 0};
}

}  // namespace

TEST_CASE("a stop string split across pieces is never shown", "[stop]") {
    StopMatcher matcher({"</answer>"});
    auto step = matcher.feed("The answer is 4.<");
    CHECK(step.text == "The answer is 4.");
    CHECK_FALSE(step.stopped);
    CHECK(matcher.held() == "<");
    step = matcher.feed("/ans");
    CHECK(step.text.empty());
    CHECK(matcher.held() == "</ans");
    step = matcher.feed("wer> trailing");
    CHECK(step.text.empty());
    CHECK(step.stopped);
    CHECK(step.stop_index == 0);
    CHECK(matcher.stopped());
    // Nothing more comes out once stopped, not even on flush.
    step = matcher.feed("more");
    CHECK(step.text.empty());
    CHECK(step.stopped);
    CHECK(matcher.flush().empty());
}

TEST_CASE("held text is released when it stops looking like a stop string", "[stop]") {
    StopMatcher matcher({"<end>", "STOP"});
    auto step = matcher.feed("a <e");
    CHECK(step.text == "a ");
    step = matcher.feed("nd");
    CHECK(step.text.empty());
    step = matcher.feed("x> ST");
    CHECK(step.text == "<endx> ");
    CHECK(matcher.held() == "ST");
    CHECK(matcher.flush() == "ST");  // generation ended by an end-of-sequence token
    CHECK(matcher.held().empty());

    matcher.reset();
    step = matcher.feed("go STOP now");
    CHECK(step.text == "go ");
    CHECK(step.stopped);
    CHECK(step.stop_index == 1);
}

TEST_CASE("the first stop to complete wins, on a tie the one starting earlier", "[stop]") {
    StopMatcher inner({"abcd", "c"});
    auto step = inner.feed("xxabcd");
    CHECK(step.text == "xxab");
    CHECK(step.stop_index == 1);

    StopMatcher same_end({"b", "ab"});
    step = same_end.feed("xab");
    CHECK(step.text == "x");
    CHECK(step.stop_index == 1);

    StopMatcher overlapping({"aab"});
    step = overlapping.feed("aa");
    CHECK(step.text.empty());
    step = overlapping.feed("aab");  // "aaaab": the match starts at the third a
    CHECK(step.text == "aa");
    CHECK(step.stopped);
}

TEST_CASE("multi-byte stop strings split inside a code point", "[stop]") {
    StopMatcher matcher({"\xE2\x80\x94 end"});  // "— end"
    auto step = matcher.feed("fin \xE2");
    CHECK(step.text == "fin ");
    step = matcher.feed("\x80\x94 e");
    CHECK(step.text.empty());
    step = matcher.feed("nd");
    CHECK(step.stopped);
    CHECK(step.text.empty());
}

TEST_CASE("the result does not depend on how the text is cut", "[stop]") {
    const std::vector<std::string> stops{"abc", "bca", "cc", "abab"};
    gemma4::detail::Xoshiro256 rng(77);
    const auto below = [&](std::size_t n) {
        return static_cast<std::size_t>(rng.uniform() * static_cast<double>(n));
    };
    int stopped = 0;
    for (int trial = 0; trial < 500; ++trial) {
        std::string text;
        const std::size_t length = 1 + below(30);
        for (std::size_t i = 0; i < length; ++i) text += static_cast<char>('a' + below(3));
        const Outcome expected = reference(text, stops);
        stopped += expected.stopped;

        std::vector<std::string> pieces;
        for (std::size_t pos = 0; pos < text.size();) {
            const std::size_t n = below(5);  // empty pieces too: tokens that decode to nothing
            pieces.push_back(text.substr(pos, n));
            pos += n;
        }
        StopMatcher matcher(stops);
        INFO("text " << text);
        REQUIRE(stream(matcher, pieces) == expected);

        std::vector<std::string> bytes;
        for (const char c : text) bytes.emplace_back(1, c);
        StopMatcher bytewise(stops);
        REQUIRE(stream(bytewise, bytes) == expected);
    }
    CHECK(stopped > 100);  // the alphabet is small enough that most texts hit a stop
    CHECK(stopped < 500);
}

TEST_CASE("without stop strings everything passes straight through", "[stop]") {
    StopMatcher matcher(std::vector<std::string>{});
    CHECK(matcher.feed("<turn").text == "<turn");
    CHECK(matcher.held().empty());
    CHECK(matcher.flush().empty());
}

TEST_CASE("an empty stop string is rejected", "[stop]") {
    REQUIRE_THROWS_AS(StopMatcher({"ok", ""}), InvalidArgument);
    REQUIRE_THROWS_WITH(StopMatcher({"ok", ""}), Catch::Contains("StopMatcher: stop string 1 is empty"));
}
