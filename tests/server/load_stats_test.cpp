// The rates gemma4 loadgen reports, on hand-made time lines.
#include <catch2/catch.hpp>

#include "server/load_stats.hpp"

#include <initializer_list>

using gemma4::server::LoadLevel;
using gemma4::server::LoadSample;

namespace {

LoadSample::clock::time_point at(double seconds) {
    return LoadSample::clock::time_point{} + std::chrono::duration_cast<LoadSample::clock::duration>(std::chrono::duration<double>(seconds));
}

/// A completed reply of `tokens` tokens whose deltas arrived at `times` (the first is its first token).
LoadSample reply(std::int64_t tokens, std::initializer_list<double> times) {
    LoadSample s;
    s.ok = true;
    s.tokens = tokens;
    for (double t : times) s.deltas.push_back(at(t));
    s.first_at = s.deltas.front();
    s.end_at = s.deltas.back();
    s.ttft = *times.begin();  // submitted at 0
    return s;
}

}  // namespace

TEST_CASE("load stats: two overlapping replies give the union rate and the both-busy rate", "[server][loadgen]") {
    LoadLevel level;
    level.concurrency = 2;
    level.samples = {reply(5, {1, 2, 3, 4, 5}), reply(5, {3, 4, 5, 6, 7})};
    // 8 tokens after the firsts over [1, 7]
    CHECK(level.decode_tokens_per_s() == Approx(8.0 / 6.0));
    // both decoding over [3, 5]: the first's deltas at 3, 4 and 5, the second's at 4 and 5
    CHECK(level.saturated_decode_tokens_per_s() == Approx(5.0 / 2.0));
    CHECK(level.ok() == 2);
    CHECK(level.tokens() == 10);
    CHECK(level.ttft_percentile(0.5) == Approx(3.0));  // nearest rank of {1, 3}
    CHECK(level.ttft_percentile(0.0) == Approx(1.0));
    CHECK(level.errors().empty());
}

TEST_CASE("load stats: a reply's tokens are spread over its deltas", "[server][loadgen]") {
    LoadLevel level;
    level.concurrency = 2;
    // 9 tokens in 5 deltas: 2 tokens per delta after the first
    level.samples = {reply(9, {0, 1, 2, 3, 4}), reply(3, {2.5, 3.5, 4})};
    // both busy over [2.5, 4]: the first's deltas at 3 and 4 (2 tokens each), the second's at 3.5 and 4
    CHECK(level.saturated_decode_tokens_per_s() == Approx((2 + 2 + 1 + 1) / 1.5));
}

TEST_CASE("load stats: clients that never decode together have no saturated rate", "[server][loadgen]") {
    LoadLevel level;
    level.concurrency = 2;
    level.samples = {reply(3, {1, 1.5, 2}), reply(3, {3, 3.5, 4})};
    CHECK(level.saturated_decode_tokens_per_s() == 0.0);
    CHECK(level.decode_tokens_per_s() == Approx(4.0 / 2.0));
}

TEST_CASE("load stats: with one client both rates are the per-stream decode rate", "[server][loadgen]") {
    LoadLevel level;
    level.concurrency = 1;
    level.samples = {reply(5, {1, 2, 3, 4, 5}), reply(3, {6, 7, 8})};
    CHECK(level.decode_tokens_per_s() == Approx(6.0 / 6.0));
    CHECK(level.saturated_decode_tokens_per_s() == Approx(6.0 / 6.0));
}

TEST_CASE("load stats: failed requests are counted by reason and left out of every rate", "[server][loadgen]") {
    LoadLevel level;
    level.concurrency = 2;
    LoadSample refused;
    refused.error = "HTTP 401";
    LoadSample silent;
    silent.ok = true;  // a 200 whose stream carried no text
    level.samples = {reply(5, {1, 2, 3, 4, 5}), refused, refused, silent};
    CHECK(level.ok() == 2);
    const auto errors = level.errors();
    REQUIRE(errors.size() == 1);
    CHECK(errors.at("HTTP 401") == 2);
    CHECK(level.decode_tokens_per_s() == Approx(1.0));
    CHECK(level.saturated_decode_tokens_per_s() == 0.0);  // never two replies decoding
}

TEST_CASE("load stats: deltas read together still count, and a reply that came in one delta too", "[server][loadgen]") {
    LoadLevel level;
    level.concurrency = 1;
    // a fast server: six tokens in five deltas read at one instant, then the stream's end later
    LoadSample together = reply(6, {1, 1, 1, 1, 1});
    together.end_at = at(2);
    // everything in a single delta
    LoadSample single = reply(4, {3});
    single.end_at = at(4);
    level.samples = {together, single};
    // windows [1, 2] and [3, 4]; 5 + 3 tokens after the firsts
    CHECK(level.saturated_decode_tokens_per_s() == Approx(8.0 / 2.0));
    CHECK(level.decode_tokens_per_s() == Approx(8.0 / 2.0));
}
