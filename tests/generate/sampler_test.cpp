#include <gemma4/generate/sampler.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

using gemma4::InvalidArgument;
using gemma4::Sampler;
using gemma4::SamplingParams;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// Logits drawn from the library's own generator so the test data is the same everywhere.
std::vector<float> random_logits(std::size_t n, std::uint64_t seed, double scale = 4.0) {
    gemma4::detail::Xoshiro256 rng(seed);
    std::vector<float> logits(n);
    for (auto& x : logits) x = static_cast<float>((rng.uniform() * 2.0 - 1.0) * scale);
    return logits;
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature = 1.0) {
    const double max = *std::max_element(logits.begin(), logits.end());
    std::vector<double> p(logits.size());
    double total = 0.0;
    for (std::size_t i = 0; i < logits.size(); ++i) total += p[i] = std::exp((logits[i] - max) / temperature);
    for (auto& x : p) x /= total;
    return p;
}

/// Ids ordered most likely first, lower id first among equal logits.
std::vector<std::int32_t> ranked_ids(const std::vector<float>& logits) {
    std::vector<std::int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(),
                     [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b]; });
    return ids;
}

std::vector<std::int32_t> kept_ids(const std::vector<float>& logits, const SamplingParams& params) {
    std::vector<gemma4::detail::Candidate> candidates;
    gemma4::detail::filter_candidates(logits, params, candidates);
    std::vector<std::int32_t> ids;
    for (const auto& c : candidates) ids.push_back(c.id);
    return ids;
}

std::vector<float> log_probs(const std::vector<double>& probs) {
    std::vector<float> logits;
    for (const double p : probs) logits.push_back(static_cast<float>(std::log(p)));
    return logits;
}

}  // namespace

TEST_CASE("the generator is xoshiro256** seeded by splitmix64", "[sampler]") {
    gemma4::detail::Xoshiro256 zero(0);
    CHECK(zero.next() == 0x99ec5f36cb75f2b4ull);
    CHECK(zero.next() == 0xbf6e1f784956452aull);
    CHECK(zero.next() == 0x1a5f849d4933e6e0ull);
    gemma4::detail::Xoshiro256 forty_two(42);
    CHECK(forty_two.next() == 0x15780b2e0c2ec716ull);
}

TEST_CASE("uniform() is the top 53 bits of the next output over 2^53, spread evenly between 0 and 1", "[sampler]") {
    constexpr double kTwoTo53 = 9007199254740992.0;
    // The first outputs of seed 0 (above), as uniforms: exact, since 53 bits fit a double.
    gemma4::detail::Xoshiro256 zero(0);
    CHECK(zero.uniform() == static_cast<double>(0x99ec5f36cb75f2b4ull >> 11) / kTwoTo53);
    CHECK(zero.uniform() == static_cast<double>(0xbf6e1f784956452aull >> 11) / kTwoTo53);
    CHECK(zero.uniform() == static_cast<double>(0x1a5f849d4933e6e0ull >> 11) / kTwoTo53);
    // Further on, each uniform follows the same generator's output.
    gemma4::detail::Xoshiro256 draws(42), outputs(42);
    constexpr int kDraws = 100000, kBins = 10;
    std::array<int, kBins> bins{};
    double sum = 0;
    for (int i = 0; i < kDraws; ++i) {
        const double u = draws.uniform();
        const double expected = static_cast<double>(outputs.next() >> 11) / kTwoTo53;
        if (u != expected) FAIL("draw " << i << ": " << u << ", expected " << expected);
        if (!(u >= 0.0 && u < 1.0)) FAIL("draw " << i << ": " << u << " is outside [0, 1)");
        ++bins[static_cast<std::size_t>(u * kBins)];
        sum += u;
    }
    // Even spread: each tenth holds 10000 ± 5σ (σ = √(n·p·(1 − p)) ≈ 95) draws; the mean is
    // 1/2 ± 5σ (σ = 1/√(12 n) ≈ 0.0009). The seed is fixed, so these are exact outcomes.
    for (int b = 0; b < kBins; ++b) {
        INFO("bin " << b);
        CHECK(std::abs(bins[static_cast<std::size_t>(b)] - kDraws / kBins) <= 475);
    }
    CHECK(std::fabs(sum / kDraws - 0.5) <= 0.0046);
}

TEST_CASE("temperature 0 is argmax with the lowest id on ties", "[sampler]") {
    Sampler greedy({.temperature = 0.0});
    const std::vector<float> logits{1.0f, 5.0f, 3.0f, 5.0f, -2.0f};
    CHECK(greedy.sample(logits) == 1);
    const std::vector<float> with_inf{kNegInf, kNegInf, 0.5f, 0.5f};
    CHECK(greedy.sample(with_inf) == 2);
    const std::vector<float> all_equal(100, -3.0f);
    CHECK(greedy.sample(all_equal) == 0);

    // A subnormal temperature is valid and behaves as greedy, without NaN weights.
    const std::vector<float> unique_max{1.0f, 5.0f, 4.999f};
    Sampler cold({.temperature = 1e-320, .seed = 5});
    for (int i = 0; i < 20; ++i) REQUIRE(cold.sample(unique_max) == 1);
    Sampler cold_nucleus({.temperature = 1e-320, .top_p = 0.5, .min_p = 0.5});
    REQUIRE(cold_nucleus.sample(unique_max) == 1);

    const auto big = random_logits(262144, 7);
    const auto expected = std::max_element(big.begin(), big.end()) - big.begin();
    CHECK(greedy.sample(big) == expected);
}

TEST_CASE("a seed reproduces the same tokens, reset() replays them", "[sampler]") {
    const SamplingParams params{.temperature = 0.8, .top_k = 40, .top_p = 0.9, .seed = 1234};
    Sampler a(params);
    Sampler b(params);
    Sampler other({.temperature = 0.8, .top_k = 40, .top_p = 0.9, .seed = 1235});
    std::vector<std::int32_t> first;
    bool differs = false;
    for (std::uint64_t step = 0; step < 200; ++step) {
        const auto logits = random_logits(500, step, 2.0);
        const auto token = a.sample(logits);
        REQUIRE(b.sample(logits) == token);
        differs |= other.sample(logits) != token;
        first.push_back(token);
    }
    CHECK(differs);
    a.reset();
    for (std::uint64_t step = 0; step < 200; ++step)
        REQUIRE(a.sample(random_logits(500, step, 2.0)) == first[step]);
}

TEST_CASE("top-k never leaves the k most likely tokens", "[sampler]") {
    const auto logits = random_logits(1000, 99);
    const auto ranked = ranked_ids(logits);
    const std::set<std::int32_t> top10(ranked.begin(), ranked.begin() + 10);
    std::set<std::int32_t> drawn;
    for (std::uint64_t seed = 0; seed < 200; ++seed) {
        Sampler sampler({.temperature = 2.0, .top_k = 10, .seed = seed});
        for (int i = 0; i < 20; ++i) {
            const auto token = sampler.sample(logits);
            REQUIRE(top10.count(token) == 1);
            drawn.insert(token);
        }
    }
    CHECK(drawn.size() == 10);  // at temperature 2 every one of the ten shows up

    SECTION("exactly k candidates, ties broken by the lower id") {
        const std::vector<float> tied{1.0f, 3.0f, 2.0f, 3.0f, 2.0f, 2.0f, kNegInf};
        CHECK(kept_ids(tied, {.top_k = 3}) == std::vector<std::int32_t>{1, 3, 2});
        CHECK(kept_ids(tied, {.top_k = 1}) == std::vector<std::int32_t>{1});
        CHECK(kept_ids(tied, {.top_k = 6}) == std::vector<std::int32_t>{1, 3, 2, 4, 5, 0});
        CHECK(kept_ids(tied, {.top_k = 7}).size() == 6);  // -inf is never a candidate
    }
}

TEST_CASE("top-p keeps the smallest most-likely set with mass >= p", "[sampler]") {
    const auto logits = log_probs({0.1, 0.4, 0.2, 0.3});
    CHECK(kept_ids(logits, {.top_p = 0.35}) == std::vector<std::int32_t>{1});
    CHECK(kept_ids(logits, {.top_p = 0.5}) == std::vector<std::int32_t>{1, 3});
    CHECK(kept_ids(logits, {.top_p = 0.75}) == std::vector<std::int32_t>{1, 3, 2});
    CHECK(kept_ids(logits, {.top_p = 0.95}) == std::vector<std::int32_t>{1, 3, 2, 0});

    SECTION("with top-k, the nucleus is taken within the k renormalised") {
        // Within the top 2 (0.4, 0.3) the probabilities are 4/7 and 3/7.
        CHECK(kept_ids(logits, {.top_k = 2, .top_p = 0.55}) == std::vector<std::int32_t>{1});
        CHECK(kept_ids(logits, {.top_k = 2, .top_p = 0.6}) == std::vector<std::int32_t>{1, 3});
    }

    SECTION("temperature is applied before the nucleus") {
        // At T = 0.5 the probabilities become proportional to 0.01, 0.16, 0.04, 0.09.
        CHECK(kept_ids(logits, {.temperature = 0.5, .top_p = 0.5}) == std::vector<std::int32_t>{1});
        CHECK(kept_ids(logits, {.temperature = 0.5, .top_p = 0.6}) == std::vector<std::int32_t>{1, 3});
    }

    SECTION("property over large vocabularies, past several sort chunks") {
        for (std::uint64_t seed = 0; seed < 20; ++seed) {
            const auto vocab = 3000 + 977 * seed;
            const auto flat = random_logits(vocab, seed, 0.5 + 0.25 * static_cast<double>(seed));
            const double p = 0.05 + 0.045 * static_cast<double>(seed);
            const double temperature = 0.7 + 0.05 * static_cast<double>(seed);
            const auto kept = kept_ids(flat, {.temperature = temperature, .top_p = p});
            const auto probs = softmax(flat, temperature);
            const auto ranked = ranked_ids(flat);
            REQUIRE(std::equal(kept.begin(), kept.end(), ranked.begin()));
            double mass = 0.0;
            for (const auto id : kept) mass += probs[id];
            CHECK(mass >= p - 1e-12);
            CHECK(mass - probs[kept.back()] < p + 1e-12);
        }
    }
}

TEST_CASE("min-p drops tokens below min_p times the best probability", "[sampler]") {
    const auto logits = log_probs({0.05, 0.5, 0.15, 0.3});
    CHECK(kept_ids(logits, {.min_p = 0.25}) == std::vector<std::int32_t>{1, 2, 3});  // >= 0.125
    CHECK(kept_ids(logits, {.min_p = 0.7}) == std::vector<std::int32_t>{1});
    CHECK(kept_ids(logits, {.min_p = 1.0}) == std::vector<std::int32_t>{1});
    CHECK(kept_ids(logits, {.min_p = 0.05}).size() == 4);
    // After top-p the survivors are ranked; min-p then cuts the tail.
    CHECK(kept_ids(logits, {.top_p = 0.9, .min_p = 0.35}) == std::vector<std::int32_t>{1, 3});
    // Temperature sharpens before min-p: at T = 0.5, 0.3 becomes 0.09/0.25 = 0.36 of the best.
    CHECK(kept_ids(logits, {.temperature = 0.5, .min_p = 0.4}) == std::vector<std::int32_t>{1});
    CHECK(kept_ids(logits, {.temperature = 0.5, .min_p = 0.35}) == std::vector<std::int32_t>{1, 3});

    for (std::uint64_t seed = 0; seed < 100; ++seed) {
        Sampler sampler({.min_p = 0.25, .seed = seed});
        const auto token = sampler.sample(logits);
        REQUIRE(token != 0);
    }
}

TEST_CASE("penalties change exactly the logits they should", "[sampler]") {
    const std::vector<float> original{2.0f, -2.0f, 3.0f, -1.0f, 0.5f, 4.0f};
    gemma4::detail::TokenHistory history;
    history.see(0);  // prompt 0, 1; generated 2 (three times)
    history.see(1);
    for (int i = 0; i < 3; ++i) history.generate(2);

    SECTION("repetition penalty: positive divided, negative multiplied, prompt and reply alike") {
        auto scores = original;
        gemma4::detail::apply_penalties(scores, {.repetition_penalty = 2.0}, history);
        CHECK(scores == std::vector<float>{1.0f, -4.0f, 1.5f, -1.0f, 0.5f, 4.0f});
    }
    SECTION("presence and frequency: generated tokens only, frequency scaled by count") {
        auto scores = original;
        gemma4::detail::apply_penalties(scores, {.presence_penalty = 0.5, .frequency_penalty = 0.25},
                                        history);
        CHECK(scores == std::vector<float>{2.0f, -2.0f, 1.75f, -1.0f, 0.5f, 4.0f});
    }
    SECTION("repetition first, then presence/frequency") {
        auto scores = original;
        gemma4::detail::apply_penalties(scores, {.repetition_penalty = 2.0, .presence_penalty = 1.0},
                                        history);
        CHECK(scores == std::vector<float>{1.0f, -4.0f, 0.5f, -1.0f, 0.5f, 4.0f});
    }
    SECTION("neutral values leave every logit alone") {
        auto scores = original;
        gemma4::detail::apply_penalties(scores, {}, history);
        CHECK(scores == original);
    }
    SECTION("suppression sets -inf and skips ids past the vocabulary") {
        auto scores = original;
        const std::vector<std::int32_t> suppress{5, 1, 258883};
        gemma4::detail::apply_suppression(scores, suppress);
        CHECK(scores == std::vector<float>{2.0f, kNegInf, 3.0f, -1.0f, 0.5f, kNegInf});
    }
    SECTION("a history id outside the vocabulary is an error") {
        history.see(6);
        auto scores = original;
        REQUIRE_THROWS_AS(gemma4::detail::apply_penalties(scores, {.repetition_penalty = 1.5}, history),
                          InvalidArgument);
        REQUIRE_THROWS_WITH(gemma4::detail::apply_penalties(scores, {.repetition_penalty = 1.5}, history),
                            Catch::Contains("token id 6 is outside the vocabulary of 6 logits"));
    }
}

TEST_CASE("the sampler applies penalties to the history it was given", "[sampler]") {
    const std::vector<float> logits{1.0f, 0.9f, -5.0f};
    const std::vector<std::int32_t> prompt{0};

    SECTION("presence penalty ignores the prompt") {
        Sampler sampler({.temperature = 0.0, .presence_penalty = 0.5});
        sampler.set_prompt(prompt);
        CHECK(sampler.sample(logits) == 0);
        sampler.accept(0);
        CHECK(sampler.sample(logits) == 1);  // 1.0 - 0.5 < 0.9
        sampler.reset();
        CHECK(sampler.sample(logits) == 0);
    }
    SECTION("repetition penalty counts the prompt") {
        Sampler sampler({.temperature = 0.0, .repetition_penalty = 1.2});
        CHECK(sampler.sample(logits) == 0);
        sampler.set_prompt(prompt);
        CHECK(sampler.sample(logits) == 1);  // 1.0 / 1.2 < 0.9
    }
    SECTION("set_prompt forgets the previous reply") {
        Sampler sampler({.temperature = 0.0, .frequency_penalty = 1.0});
        sampler.accept(0);
        CHECK(sampler.sample(logits) == 1);
        sampler.set_prompt(prompt);
        CHECK(sampler.sample(logits) == 0);
    }
}

TEST_CASE("suppressed tokens are never sampled", "[sampler]") {
    std::vector<float> logits = random_logits(300, 5);
    logits[17] = 20.0f;  // would win almost every draw
    Sampler sampler({.seed = 3, .suppress_tokens = {17, 4, 1000000}});
    for (int i = 0; i < 2000; ++i) {
        const auto token = sampler.sample(logits);
        REQUIRE(token != 17);
        REQUIRE(token != 4);
    }
    Sampler greedy({.temperature = 0.0, .suppress_tokens = {17}});
    const auto ranked = ranked_ids(logits);
    CHECK(greedy.sample(logits) == ranked[1]);

    Sampler everything({.suppress_tokens = {0, 1}});
    const std::vector<float> two{1.0f, 2.0f};
    REQUIRE_THROWS_AS(everything.sample(two), InvalidArgument);
    REQUIRE_THROWS_WITH(everything.sample(two), Catch::Contains("every token is suppressed"));
}

TEST_CASE("sampling frequencies match the softmax probabilities", "[sampler]") {
    const std::vector<float> logits{0.0f, 1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
    constexpr int kDraws = 200000;
    const auto check_frequencies = [&](const SamplingParams& params, const std::vector<double>& expected) {
        Sampler sampler(params);
        std::vector<int> counts(logits.size(), 0);
        for (int i = 0; i < kDraws; ++i) ++counts[sampler.sample(logits)];
        for (std::size_t id = 0; id < logits.size(); ++id) {
            const double p = expected[id];
            const double frequency = static_cast<double>(counts[id]) / kDraws;
            // Five standard deviations of a binomial proportion: a false alarm is ~1e-6 per id.
            const double bound = 5.0 * std::sqrt(p * (1.0 - p) / kDraws) + 1e-9;
            INFO("id " << id << " expected " << p << " got " << frequency);
            CHECK(std::abs(frequency - p) <= bound);
        }
    };
    SECTION("temperature 1") {
        check_frequencies({.seed = 11}, softmax(logits));
    }
    SECTION("temperature 0.6") {
        check_frequencies({.temperature = 0.6, .seed = 12}, softmax(logits, 0.6));
    }
    SECTION("top-k 3 renormalises over the three best") {
        auto p = softmax(logits);
        const double kept = p[2] + p[5] + p[1];
        for (std::size_t id = 0; id < p.size(); ++id)
            p[id] = (id == 1 || id == 2 || id == 5) ? p[id] / kept : 0.0;
        check_frequencies({.top_k = 3, .seed = 13}, p);
    }
}

TEST_CASE("a full-size vocabulary with the checkpoint's defaults", "[sampler]") {
    const auto logits = random_logits(262144, 2024, 8.0);
    const auto ranked = ranked_ids(logits);
    const std::set<std::int32_t> top64(ranked.begin(), ranked.begin() + 64);
    Sampler sampler(
        {.temperature = 1.0, .top_k = 64, .top_p = 0.95, .seed = 1, .suppress_tokens = {258883, 258882}});
    for (int i = 0; i < 200; ++i) REQUIRE(top64.count(sampler.sample(logits)) == 1);
    // top-p alone: every sample lies in the smallest set of best ids holding half the mass (a
    // about 11,000 of the 262,144 at this spread of logits)
    const auto p = softmax(logits);
    std::set<std::int32_t> nucleus_ids;
    double mass = 0;
    for (std::int32_t id : ranked) {
        if (mass >= 0.5) break;
        nucleus_ids.insert(id);
        mass += p[static_cast<std::size_t>(id)];
    }
    REQUIRE(nucleus_ids.size() < 262144 / 10);
    Sampler nucleus({.top_p = 0.5, .seed = 2});
    for (int i = 0; i < 200; ++i) REQUIRE(nucleus_ids.count(nucleus.sample(logits)) == 1);
}

TEST_CASE("invalid sampling parameters name the parameter", "[sampler]") {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const auto rejects = [](const SamplingParams& params, const char* message) {
        INFO(message);
        REQUIRE_THROWS_AS(Sampler(params), InvalidArgument);
        REQUIRE_THROWS_WITH(Sampler(params), Catch::Contains(message));
    };
    rejects({.temperature = -0.1}, "temperature = -0.1 must be finite and >= 0");
    rejects({.temperature = nan}, "temperature = nan");
    rejects({.temperature = std::numeric_limits<double>::infinity()}, "temperature = inf");
    rejects({.top_k = -1}, "top_k = -1 must be >= 0");
    rejects({.top_p = 0.0}, "top_p = 0 must be in (0, 1]");
    rejects({.top_p = 1.5}, "top_p = 1.5 must be in (0, 1]");
    rejects({.top_p = nan}, "top_p = nan");
    rejects({.min_p = -0.5}, "min_p = -0.5 must be in [0, 1]");
    rejects({.min_p = nan}, "min_p = nan");
    rejects({.repetition_penalty = 0.0}, "repetition_penalty = 0 must be finite and > 0");
    rejects({.repetition_penalty = nan}, "repetition_penalty = nan");
    rejects({.presence_penalty = nan}, "presence_penalty = nan must be finite");
    rejects({.frequency_penalty = -std::numeric_limits<double>::infinity()},
            "frequency_penalty = -inf must be finite");
    rejects({.suppress_tokens = {3, -2}}, "suppress_tokens = -2 contains a negative token id");
}

TEST_CASE("bad logits and token ids are rejected", "[sampler]") {
    Sampler sampler;
    const std::vector<float> empty;
    REQUIRE_THROWS_AS(sampler.sample(empty), InvalidArgument);
    REQUIRE_THROWS_WITH(sampler.sample(empty), Catch::Contains("logits are empty"));

    const std::vector<float> with_nan{0.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f};
    REQUIRE_THROWS_AS(sampler.sample(with_nan), InvalidArgument);
    REQUIRE_THROWS_WITH(sampler.sample(with_nan), Catch::Contains("logit of token 1 is NaN"));
    Sampler greedy({.temperature = 0.0});
    const std::vector<float> with_inf{0.0f, std::numeric_limits<float>::infinity()};
    REQUIRE_THROWS_AS(greedy.sample(with_inf), InvalidArgument);
    REQUIRE_THROWS_WITH(greedy.sample(with_inf), Catch::Contains("logit of token 1 is +inf"));
    // after the maximum, where no new maximum is taken
    const std::vector<float> nan_after_max{5.0f, 1.0f, std::numeric_limits<float>::quiet_NaN(), 5.0f};
    REQUIRE_THROWS_WITH(greedy.sample(nan_after_max), Catch::Contains("logit of token 2 is NaN"));
    const std::vector<float> inf_after_max{5.0f, 1.0f, 2.0f, std::numeric_limits<float>::infinity()};
    REQUIRE_THROWS_WITH(greedy.sample(inf_after_max), Catch::Contains("logit of token 3 is +inf"));

    REQUIRE_THROWS_AS(sampler.accept(-1), InvalidArgument);
    REQUIRE_THROWS_WITH(sampler.accept(-1), Catch::Contains("token id -1 is negative"));
    const std::vector<std::int32_t> bad_prompt{2, -7};
    REQUIRE_THROWS_AS(sampler.set_prompt(bad_prompt), InvalidArgument);
    REQUIRE_THROWS_WITH(sampler.set_prompt(bad_prompt), Catch::Contains("token id -7 is negative"));

    Sampler penalised({.repetition_penalty = 1.3});
    penalised.accept(10);
    const std::vector<float> small{0.0f, 1.0f};
    REQUIRE_THROWS_AS(penalised.sample(small), InvalidArgument);
    REQUIRE_THROWS_WITH(penalised.sample(small),
                        Catch::Contains("token id 10 is outside the vocabulary of 2 logits"));
}

TEST_CASE("double logits are sampled as their float values", "[sampler]") {
    std::vector<double> logits(300);
    for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(0.37 * static_cast<double>(i)) * 4.0 + 1e-9 * static_cast<double>(i);
    const std::vector<float> as_float(logits.begin(), logits.end());
    for (const SamplingParams& p : {SamplingParams{.temperature = 0.0}, SamplingParams{.temperature = 0.9, .top_p = 0.95, .seed = 3},
                                    SamplingParams{.temperature = 1.3, .top_k = 20, .seed = 8, .suppress_tokens = {7, 11}}}) {
        Sampler from_double(p), from_float(p);
        for (int draw = 0; draw < 50; ++draw) {
            const std::int32_t a = from_double.sample(std::span<const double>(logits)), b = from_float.sample(as_float);
            REQUIRE(a == b);
            from_double.accept(a);
            from_float.accept(b);
        }
    }
}

namespace {

/// HF's RepetitionPenaltyLogitsProcessor on one logit, in double: divided when positive,
/// multiplied when negative.
float repetition_penalised(float logit, double penalty) {
    const double l = logit;
    return static_cast<float>(l < 0 ? l * penalty : l / penalty);
}

/// The scores after apply_penalties over `history`.
std::vector<float> penalised(const std::vector<float>& logits, const SamplingParams& params,
                             const gemma4::detail::TokenHistory& history) {
    auto scores = logits;
    gemma4::detail::apply_penalties(scores, params, history);
    return scores;
}

/// The distinct ids among the last `n` of `ids` (all of them for n = -1), by brute force.
std::set<std::int32_t> last_distinct(const std::vector<std::int32_t>& ids, std::int32_t n) {
    const std::size_t from = n < 0 || static_cast<std::size_t>(n) >= ids.size() ? 0 : ids.size() - static_cast<std::size_t>(n);
    return {ids.begin() + static_cast<std::ptrdiff_t>(from), ids.end()};
}

}  // namespace

TEST_CASE("repetition penalty: HF's formula, once per distinct id of prompt and reply", "[sampler][penalties]") {
    const auto logits = random_logits(64, 77);
    gemma4::detail::TokenHistory history;
    const std::vector<std::int32_t> prompt{3, 9, 3, 3, 40, 9}, reply{40, 12, 12, 3};
    for (const std::int32_t id : prompt) history.see(id);
    for (const std::int32_t id : reply) history.generate(id);
    const std::set<std::int32_t> repeated{3, 9, 40, 12};
    for (const double penalty : {1.3, 0.7, 2.0}) {
        INFO("penalty " << penalty);
        const auto scores = penalised(logits, {.repetition_penalty = penalty}, history);
        for (std::size_t id = 0; id < logits.size(); ++id) {
            INFO("id " << id << " logit " << logits[id]);
            // Applied once: an id seen three times is divided once, not three times.
            const float expected = repeated.count(static_cast<std::int32_t>(id)) ? repetition_penalised(logits[id], penalty) : logits[id];
            CHECK(scores[id] == expected);
        }
    }
}

TEST_CASE("repeat_last_n: the repetition penalty looks only at the last N ids of prompt and reply", "[sampler][penalties]") {
    const std::vector<float> logits{2.0f, -1.5f, 3.0f, 0.75f, -0.25f, 1.0f};
    const std::vector<std::int32_t> prompt{0, 1, 2, 3, 1}, reply{4, 1};  // whole sequence: 0 1 2 3 1 4 1
    const auto history_of = [&](std::int32_t window) {
        gemma4::detail::TokenHistory h;
        h.set_window(window);
        for (const std::int32_t id : prompt) h.see(id);
        for (const std::int32_t id : reply) h.generate(id);
        return h;
    };
    const auto expected = [&](const std::set<std::int32_t>& ids) {
        std::vector<float> out = logits;
        for (const std::int32_t id : ids) out[static_cast<std::size_t>(id)] = repetition_penalised(logits[static_cast<std::size_t>(id)], 2.0);
        return out;
    };
    const SamplingParams params{.repetition_penalty = 2.0};
    CHECK(penalised(logits, params, history_of(3)) == expected({1, 4}));  // 1 4 1: id 1 once
    CHECK(penalised(logits, params, history_of(4)) == expected({3, 1, 4}));
    CHECK(penalised(logits, params, history_of(1)) == expected({1}));
    CHECK(penalised(logits, params, history_of(7)) == expected({0, 1, 2, 3, 4}));
    CHECK(penalised(logits, params, history_of(100)) == expected({0, 1, 2, 3, 4}));  // longer than the sequence: all of it
    CHECK(penalised(logits, params, history_of(-1)) == expected({0, 1, 2, 3, 4}));   // the default: the whole context
    CHECK(penalised(logits, params, history_of(0)) == logits);                       // 0: no id, the penalty is off

    SECTION("presence and frequency keep counting the whole reply") {
        const SamplingParams both{.repeat_last_n = 1, .presence_penalty = 0.5, .frequency_penalty = 0.25};
        auto want = logits;
        want[4] = static_cast<float>(-0.25 - 0.5 - 0.25 * 1);  // generated once, outside the window
        want[1] = static_cast<float>(-1.5 - 0.5 - 0.25 * 1);
        CHECK(penalised(logits, both, history_of(1)) == want);
    }
}

TEST_CASE("repeat_last_n: the window slides, and equals a brute-force count, across clear()", "[sampler][penalties]") {
    gemma4::detail::Xoshiro256 rng(5);
    const auto logits = random_logits(40, 6);
    for (const std::int32_t window : {1, 2, 5, 16, 64}) {
        gemma4::detail::TokenHistory history;
        history.set_window(window);
        for (int round = 0; round < 3; ++round) {
            history.clear();
            std::vector<std::int32_t> ids;
            for (int step = 0; step < 120; ++step) {
                const auto id = static_cast<std::int32_t>(rng.next() % 40);
                ids.push_back(id);
                step % 3 ? history.generate(id) : history.see(id);
                std::vector<std::int32_t> visited;
                history.for_each_recent([&](std::int32_t recent) { visited.push_back(recent); });
                const std::set<std::int32_t> distinct(visited.begin(), visited.end());
                INFO("window " << window << " round " << round << " step " << step);
                REQUIRE(distinct.size() == visited.size());  // each id once
                REQUIRE(distinct == last_distinct(ids, window));
            }
            auto want = logits;
            for (const std::int32_t id : last_distinct(ids, window))
                want[static_cast<std::size_t>(id)] = repetition_penalised(logits[static_cast<std::size_t>(id)], 1.7);
            CHECK(penalised(logits, {.repetition_penalty = 1.7}, history) == want);
        }
    }
}

TEST_CASE("presence and frequency penalties: OpenAI's formula over the reply's ids", "[sampler][penalties]") {
    const auto logits = random_logits(32, 91);
    gemma4::detail::TokenHistory history;
    for (const std::int32_t id : {5, 6, 7, 5}) history.see(id);  // prompt ids never count
    const std::vector<std::int32_t> reply{7, 8, 8, 8, 9, 7, 8};
    for (const std::int32_t id : reply) history.generate(id);
    for (const auto& [presence, frequency] : std::vector<std::pair<double, double>>{{0.6, 0.0}, {0.0, 0.35}, {1.25, -0.5}, {-2.0, 2.0}}) {
        INFO("presence " << presence << " frequency " << frequency);
        const auto scores = penalised(logits, {.presence_penalty = presence, .frequency_penalty = frequency}, history);
        for (std::size_t id = 0; id < logits.size(); ++id) {
            // mu[j] - c[j] * alpha_frequency - float(c[j] > 0) * alpha_presence
            const double c = static_cast<double>(std::count(reply.begin(), reply.end(), static_cast<std::int32_t>(id)));
            const auto expected = static_cast<float>(static_cast<double>(logits[id]) - c * frequency - (c > 0 ? presence : 0.0));
            INFO("id " << id << " count " << c);
            CHECK(scores[id] == expected);
        }
    }
}

TEST_CASE("logit_bias adds to the logit after the penalties and before suppression", "[sampler][logit_bias]") {
    const auto logits = random_logits(16, 12);
    gemma4::detail::TokenHistory history;
    history.generate(3);
    SECTION("the formula: the biased ids' logits plus their biases, in double") {
        auto scores = logits;
        const std::vector<gemma4::TokenBias> bias{{3, 1.5}, {7, -0.25}, {3, -0.5}, {0, 100.0}};
        gemma4::detail::apply_logit_bias(scores, bias);
        for (std::size_t id = 0; id < logits.size(); ++id) {
            double b = 0;
            for (const auto& e : bias)
                if (static_cast<std::size_t>(e.id) == id) b += e.bias;
            const float expected = b == 0 ? logits[id] : static_cast<float>(static_cast<double>(logits[id]) + b);
            CHECK(scores[id] == expected);
        }
    }
    SECTION("the order: repetition penalty, presence, bias, then suppression, through the Sampler") {
        // Id 0 at 4 (repeated), id 1 at 0.9: repetition 4/2 = 2, presence 2 - 0.5 = 1.5, bias
        // 1.5 - 1 = 0.5 < 0.9. A bias before the penalties would give (4 - 1)/2 - 0.5 = 1 > 0.9;
        // presence before repetition, (4 - 0.5)/2 - 1 = 0.75 < 0.9 too, so see the next case.
        const std::vector<float> two{4.0f, 0.9f};
        Sampler chain({.temperature = 0.0, .repetition_penalty = 2.0, .presence_penalty = 0.5, .logit_bias = {{0, -1.0}}});
        chain.accept(0);
        CHECK(chain.sample(two) == 1);
        Sampler no_bias({.temperature = 0.0, .repetition_penalty = 2.0, .presence_penalty = 0.5});
        no_bias.accept(0);
        CHECK(no_bias.sample(two) == 0);  // 1.5 > 0.9: the bias decided it
        // Repetition then presence: 4/2 - 1.2 = 0.8 < 0.9; presence first: (4 - 1.2)/2 = 1.4.
        Sampler order({.temperature = 0.0, .repetition_penalty = 2.0, .presence_penalty = 1.2});
        order.accept(0);
        CHECK(order.sample(two) == 1);
        // Suppression comes last: a bias of +100 does not bring a suppressed id back.
        Sampler suppressed({.temperature = 0.0, .logit_bias = {{1, 100.0}}, .suppress_tokens = {1}});
        CHECK(suppressed.sample(two) == 0);
    }
    SECTION("+100 forces an id, -100 bans one, at temperature 1 over soft-capped logits") {
        std::vector<float> capped = random_logits(256, 4, 30.0);
        const auto ranked = ranked_ids(capped);
        const std::int32_t worst = ranked.back(), best = ranked.front();
        Sampler forced({.logit_bias = {{worst, 100.0}}, .seed = 9});
        Sampler banned({.logit_bias = {{best, -100.0}}, .seed = 9});
        Sampler plain({.seed = 9});
        int plain_best = 0;
        for (int i = 0; i < 2000; ++i) {
            REQUIRE(forced.sample(capped) == worst);
            REQUIRE(banned.sample(capped) != best);
            plain_best += plain.sample(capped) == best;
        }
        CHECK(plain_best > 0);  // without the ban the best id is drawn
    }
}

TEST_CASE("logit_bias, repeat_last_n and penalties are validated and name the value", "[sampler][errors]") {
    const auto rejects = [](const SamplingParams& params, const char* message) {
        INFO(message);
        REQUIRE_THROWS_AS(Sampler(params), InvalidArgument);
        REQUIRE_THROWS_WITH(Sampler(params), Catch::Contains(message));
    };
    rejects({.logit_bias = {{4, 100.5}}}, "logit_bias of token 4 = 100.5 must be in [-100, 100]");
    rejects({.logit_bias = {{2, 1.0}, {7, -101}}}, "logit_bias of token 7 = -101 must be in [-100, 100]");
    rejects({.logit_bias = {{7, std::numeric_limits<double>::quiet_NaN()}}}, "logit_bias of token 7 = nan");
    rejects({.logit_bias = {{-3, 1.0}}}, "logit_bias = -3 contains a negative token id");
    rejects({.repeat_last_n = -2}, "repeat_last_n = -2 must be -1 (every id), 0 (off) or a window of at most 1048576 ids");
    rejects({.repeat_last_n = gemma4::kMaxRepeatLastN + 1}, "repeat_last_n = 1.04858e+06 must be");
    Sampler edges({.repeat_last_n = gemma4::kMaxRepeatLastN, .logit_bias = {{0, -100.0}, {1, 100.0}}});
    CHECK(edges.params().logit_bias.size() == 2);

    // The vocabulary is known when logits arrive: an id beyond it fails there, naming the id.
    Sampler beyond({.logit_bias = {{1, 2.0}, {9, 2.0}}});
    const std::vector<float> eight(8, 0.0f);
    REQUIRE_THROWS_AS(beyond.sample(eight), InvalidArgument);
    REQUIRE_THROWS_WITH(beyond.sample(eight), Catch::Contains("logit_bias token id 9 is outside the vocabulary of 8 logits"));
    const std::vector<float> ten(10, 0.0f);
    CHECK(beyond.sample(ten) >= 0);
}

TEST_CASE("suppress_next holds ids back for one sample only", "[sampler]") {
    const std::vector<float> logits{0.0f, 3.0f, 2.0f, 1.0f};
    Sampler greedy({.temperature = 0.0});
    const std::vector<std::int32_t> held{1, 2, 99};  // ids beyond the vocabulary are skipped
    greedy.suppress_next(held);
    CHECK(greedy.sample(logits) == 3);
    CHECK(greedy.sample(logits) == 1);
    Sampler sampled({.seed = 4});
    for (int i = 0; i < 200; ++i) {
        sampled.suppress_next(held);
        const auto id = sampled.sample(logits);
        REQUIRE((id == 0 || id == 3));
    }
}
