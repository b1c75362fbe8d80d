// Log-probabilities (GenerateOptions::logprobs, Sampler::set_logprobs): the log-softmax, in
// double, of the logits after the penalties, biases, suppression and mask, before temperature
// and the top-k/top-p/min-p cuts. Checked against the formula computed here from the logits (the
// sampler's synthetic ones, and the model's own for a Session's reply), with the top
// alternatives sorted, distinct and equal to the sampled id's entry; greedy and sampled report
// the same numbers; a Session, the Engine and speculative decoding record the same ones.
#include <catch2/catch.hpp>

#include <gemma4/generate/engine.hpp>
#include <gemma4/generate/session.hpp>
#include <gemma4/grammar/constraint.hpp>

#include "support/tiny_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <vector>

using namespace gemma4;

namespace logprobs_test {

struct LogprobsFixture {
    test::TinyModelFiles files;
    Tokenizer tokenizer;
    Model<float> model;
};

const LogprobsFixture& logprobs_fixture() {
    static const LogprobsFixture f = [] {
        auto files = test::write_tiny_model("logprobs_model", 29, 512);
        Tokenizer tokenizer = Tokenizer::from_file(files.info.tokenizer_json);
        Model<float> model = Model<float>::load(files.dir, ModelOptions{2});
        return LogprobsFixture{std::move(files), std::move(tokenizer), std::move(model)};
    }();
    return f;
}

/// Logits from the library's generator, the same on every platform, with a few ties.
std::vector<float> logits_with_ties(std::size_t n, std::uint64_t seed) {
    detail::Xoshiro256 rng(seed);
    std::vector<float> logits(n);
    for (auto& x : logits) x = static_cast<float>(std::round((rng.uniform() * 2.0 - 1.0) * 64.0) / 8.0);
    return logits;
}

/// log p(i) for every i: log(exp(s_i − m) / Σ exp(s_j − m)), in double; −inf where s_i is.
std::vector<double> log_softmax(const std::vector<double>& scores) {
    const double m = *std::max_element(scores.begin(), scores.end());
    double total = 0;
    for (const double s : scores) total += std::exp(s - m);
    std::vector<double> out;
    for (const double s : scores) out.push_back(std::log(std::exp(s - m) / total));
    return out;
}

/// |a − b| within 1e-12: the same double computation up to summation order.
bool same_to_1e12(double a, double b) { return std::abs(a - b) <= 1e-12; }

/// The log-probabilities `lp` reports agree with `expected` (indexed by id): the sampled id's,
/// and `top` alternatives that are the most likely ids (lower ids first among equals), sorted,
/// distinct, finite, with the sampled id's value wherever it is among them.
void check_logprobs_against(const std::vector<double>& expected, std::int32_t sampled, double logprob, std::span<const IdLogprob> top, std::size_t n) {
    CHECK(same_to_1e12(logprob, expected[static_cast<std::size_t>(sampled)]));
    CHECK(logprob <= 0);
    std::vector<std::int32_t> ranked(expected.size());
    std::iota(ranked.begin(), ranked.end(), 0);
    std::stable_sort(ranked.begin(), ranked.end(), [&](std::int32_t a, std::int32_t b) { return expected[a] > expected[b]; });
    const auto finite = static_cast<std::size_t>(std::count_if(expected.begin(), expected.end(), [](double x) { return std::isfinite(x); }));
    REQUIRE(top.size() == std::min(n, finite));
    std::set<std::int32_t> distinct;
    for (std::size_t k = 0; k < top.size(); ++k) {
        INFO("alternative " << k);
        CHECK(top[k].id == ranked[k]);
        CHECK(same_to_1e12(top[k].logprob, expected[static_cast<std::size_t>(top[k].id)]));
        CHECK(std::isfinite(top[k].logprob));
        if (k > 0) CHECK(top[k].logprob <= top[k - 1].logprob);
        distinct.insert(top[k].id);
        if (top[k].id == sampled) CHECK(top[k].logprob == logprob);  // the same number, bit for bit
    }
    CHECK(distinct.size() == top.size());
}

/// Ids the tiny model may be fed and sampled: no image/audio markers.
std::vector<std::int32_t> plain_prompt(int seed, std::size_t n) {
    const Model<float>& model = logprobs_fixture().model;
    const TokenIds& t = model.config().tokens;
    const auto vocab = static_cast<std::int32_t>(model.config().vocab_size);
    std::vector<std::int32_t> ids = {logprobs_fixture().files.info.bos};
    for (std::int64_t i = 0; ids.size() < n; ++i) {
        const auto id = static_cast<std::int32_t>((5 + 13 * seed + 11 * i) % (vocab - 4)) + 4;
        if (!model.is_placeholder(id) && id != t.boi && id != t.eoi && id != t.boa && id != t.eoa) ids.push_back(id);
    }
    return ids;
}

GenerateOptions options_with_logprobs(double temperature, std::int32_t top, std::int64_t tokens = 24) {
    GenerateOptions o;
    o.max_new_tokens = tokens;
    o.sampling = {.temperature = temperature, .top_k = temperature > 0 ? 20 : 0, .top_p = 0.9, .seed = 11};
    o.end_ids = {-1};
    o.logprobs = top;
    return o;
}

/// A prompt that repeats itself, so that prompt lookup drafts ids the target accepts.
std::vector<std::int32_t> repeating_prompt() {
    std::vector<std::int32_t> p = {logprobs_fixture().files.info.bos};
    for (int i = 0; i < 6; ++i)
        for (std::int32_t id : {40, 41, 42, 43, 44, 45, 46}) p.push_back(id);
    return p;
}

void check_same_logprobs(const std::vector<TokenLogprob>& a, const std::vector<TokenLogprob>& b) {
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
        INFO("id " << i);
        CHECK(a[i].id == b[i].id);
        CHECK(a[i].logprob == b[i].logprob);
        REQUIRE(a[i].top.size() == b[i].top.size());
        for (std::size_t k = 0; k < a[i].top.size(); ++k) {
            CHECK(a[i].top[k].id == b[i].top[k].id);
            CHECK(a[i].top[k].logprob == b[i].top[k].logprob);
        }
    }
}

}  // namespace logprobs_test

TEST_CASE("the sampler's logprobs are the log-softmax after penalties, bias, suppression and mask, before temperature and the cuts", "[logprobs]") {
    using namespace logprobs_test;
    constexpr std::size_t kVocab = 300;
    const std::vector<float> logits = logits_with_ties(kVocab, 3);
    const std::vector<std::int32_t> context = {7, 7, 19, 250};
    const SamplingParams chain{.repetition_penalty = 1.25,
                               .presence_penalty = 0.5,
                               .frequency_penalty = 0.25,
                               .logit_bias = {{19, 2.0}, {150, -3.5}, {151, 4.0}},
                               .suppress_tokens = {3, 200}};
    // Everything but the ids of the words 1 and 4 (64–127, 256–299) is allowed; 33 is held back.
    const std::vector<std::uint64_t> mask = {~std::uint64_t{0}, 0, ~std::uint64_t{0}, ~std::uint64_t{0}, 0};
    const std::vector<std::int32_t> held_back = {33};
    const std::vector<std::int32_t> generated = {7, 19};

    // The same chain written out: repetition over context and reply (distinct ids), presence and
    // frequency over the reply, the biases, then −inf for the suppressed and masked-out ids.
    std::vector<double> scores(logits.begin(), logits.end());
    std::set<std::int32_t> seen(context.begin(), context.end());
    seen.insert(generated.begin(), generated.end());
    for (const std::int32_t id : seen) {
        const double s = scores[id];
        scores[id] = static_cast<float>(s < 0 ? s * 1.25 : s / 1.25);
    }
    scores[7] = static_cast<float>(scores[7] - 0.5 - 0.25);
    scores[19] = static_cast<float>(scores[19] - 0.5 - 0.25);
    scores[19] = static_cast<float>(scores[19] + 2.0);
    scores[150] = static_cast<float>(scores[150] - 3.5);
    scores[151] = static_cast<float>(scores[151] + 4.0);
    for (std::size_t i = 0; i < kVocab; ++i)
        if ((i >= 64 && i < 128) || i >= 256 || i == 3 || i == 200 || i == 33) scores[i] = -std::numeric_limits<double>::infinity();
    const std::vector<double> expected = log_softmax(scores);

    std::vector<std::vector<IdLogprob>> tops;
    for (const double temperature : {0.0, 0.6, 1.7}) {
        INFO("temperature " << temperature);
        SamplingParams p = chain;
        p.temperature = temperature, p.top_k = 3, p.top_p = 0.5, p.min_p = 0.2, p.seed = 5;
        Sampler sampler(p);
        sampler.set_logprobs(7);
        sampler.set_prompt(context);
        for (const std::int32_t id : generated) sampler.accept(id);
        sampler.allow_only_next(mask);
        sampler.suppress_next(held_back);
        const std::int32_t id = sampler.sample(logits);
        CHECK(std::isfinite(scores[id]));
        check_logprobs_against(expected, id, sampler.logprob(), sampler.top_logprobs(), 7);
        tops.emplace_back(sampler.top_logprobs().begin(), sampler.top_logprobs().end());
    }
    // Greedy and sampled requests see the same distribution.
    for (std::size_t t = 1; t < tops.size(); ++t)
        for (std::size_t k = 0; k < tops[0].size(); ++k) CHECK(tops[t][k].logprob == tops[0][k].logprob);
}

TEST_CASE("the sampler reports only the allowed ids when fewer than asked are left, and refuses a bad count", "[logprobs][errors]") {
    using namespace logprobs_test;
    const std::vector<float> logits = logits_with_ties(130, 8);
    Sampler sampler(SamplingParams{.temperature = 1.0, .seed = 2});
    sampler.set_logprobs(20);
    const std::vector<std::uint64_t> mask = {(std::uint64_t{1} << 5) | (std::uint64_t{1} << 40), 0, std::uint64_t{1} << 1};  // ids 5, 40, 129
    sampler.allow_only_next(mask);
    const std::int32_t id = sampler.sample(logits);
    std::vector<double> scores(logits.size(), -std::numeric_limits<double>::infinity());
    for (const std::int32_t allowed : {5, 40, 129}) scores[static_cast<std::size_t>(allowed)] = logits[static_cast<std::size_t>(allowed)];
    check_logprobs_against(log_softmax(scores), id, sampler.logprob(), sampler.top_logprobs(), 20);
    CHECK(sampler.top_logprobs().size() == 3);

    // Without a mask and with no top alternatives asked for: the sampled id's value alone.
    sampler.set_logprobs(0);
    const std::int32_t next = sampler.sample(logits);
    CHECK(sampler.top_logprobs().empty());
    CHECK(same_to_1e12(sampler.logprob(), log_softmax(std::vector<double>(logits.begin(), logits.end()))[static_cast<std::size_t>(next)]));

    CHECK_THROWS_MATCHES(sampler.set_logprobs(21), InvalidArgument, Catch::Message("Sampler: logprobs = 21 must be -1 (off), 0 (the sampled id's) or up to 20 top alternatives"));
    CHECK_THROWS_AS(sampler.set_logprobs(-2), InvalidArgument);
}

TEST_CASE("a Session's logprobs are the log-softmax of the model's logits at each sampled id, greedy and sampled", "[logprobs]") {
    using namespace logprobs_test;
    const Model<float>& model = logprobs_fixture().model;
    const TokenIds& t = model.config().tokens;
    const std::vector<std::int32_t> ids = plain_prompt(1, 20);
    for (const double temperature : {0.0, 0.9}) {
        INFO("temperature " << temperature);
        Session<float> session(model);
        const GenerationResult r = session.generate(std::span<const std::int32_t>(ids), options_with_logprobs(temperature, 5));
        REQUIRE(r.logprobs.size() == r.ids.size());
        // The decode the session ran, step by step: the prompt, then each sampled id.
        KVCache<float> cache = model.make_cache();
        const SeqId seq = cache.add_sequence();
        Logits<float> logits = model.forward(std::span<const std::int32_t>(ids), cache, seq, LogitsMode::Last);
        for (std::size_t i = 0; i < r.ids.size(); ++i) {
            INFO("sampled id " << i);
            std::vector<double> scores(logits.row(0).begin(), logits.row(0).end());
            for (const std::int32_t placeholder : {t.image, t.audio, t.video})  // never sampled: the core suppresses them
                scores[static_cast<std::size_t>(placeholder)] = -std::numeric_limits<double>::infinity();
            CHECK(r.logprobs[i].id == r.ids[i]);
            check_logprobs_against(log_softmax(scores), r.ids[i], r.logprobs[i].logprob, r.logprobs[i].top, 5);
            if (temperature == 0.0) CHECK(r.logprobs[i].top.front().id == r.ids[i]);
            logits = model.forward(std::span<const std::int32_t>(&r.ids[i], 1), cache, seq, LogitsMode::Last);
        }
    }
}

TEST_CASE("logprobs off records nothing, and on_logprob comes just before on_token with the recorded entry", "[logprobs]") {
    using namespace logprobs_test;
    const std::vector<std::int32_t> ids = plain_prompt(2, 12);
    Session<float> plain(logprobs_fixture().model, &logprobs_fixture().tokenizer);
    GenerateOptions off = options_with_logprobs(0.8, -1, 10);
    bool called = false;
    off.on_logprob = [&](const TokenLogprob&) { called = true; };
    const GenerationResult r0 = plain.generate(std::span<const std::int32_t>(ids), off);
    CHECK(r0.logprobs.empty());
    CHECK_FALSE(called);

    Session<float> session(logprobs_fixture().model, &logprobs_fixture().tokenizer);
    GenerateOptions on = options_with_logprobs(0.8, 3, 10);
    std::vector<std::string> events;
    std::vector<TokenLogprob> streamed;
    on.on_logprob = [&](const TokenLogprob& lp) {
        events.push_back("logprob " + std::to_string(lp.id));
        streamed.push_back(lp);
    };
    on.on_token = [&](std::int32_t id, std::string_view) {
        events.push_back("token " + std::to_string(id));
        return true;
    };
    const GenerationResult r = session.generate(std::span<const std::int32_t>(ids), on);
    CHECK(r.ids == r0.ids);  // asking for logprobs changes nothing sampled
    REQUIRE(r.logprobs.size() == r.ids.size());
    check_same_logprobs(streamed, r.logprobs);
    std::vector<std::string> expected;
    for (const std::int32_t id : r.ids) {
        expected.push_back("logprob " + std::to_string(id));
        expected.push_back("token " + std::to_string(id));
    }
    // A flush of held-back text at the end comes as on_token(-1, text), with no logprob.
    if (events.size() == expected.size() + 1) CHECK(events.back() == "token -1");
    events.resize(std::min(events.size(), expected.size()));
    CHECK(events == expected);
}

TEST_CASE("the Engine records the logprobs of a lone Session, alone and among other requests", "[logprobs][engine]") {
    using namespace logprobs_test;
    Engine<float> engine(logprobs_fixture().model, &logprobs_fixture().tokenizer, EngineOptions{.max_sequences = 4});
    std::vector<GenerateOptions> options = {options_with_logprobs(0.0, 4), options_with_logprobs(0.9, 20), options_with_logprobs(1.2, 0), options_with_logprobs(0.7, -1)};
    options[1].sampling.presence_penalty = 0.4;
    options[1].sampling.logit_bias = {{9, 1.5}};
    std::vector<RequestHandle> handles;
    for (std::size_t i = 0; i < options.size(); ++i) {
        EngineRequest<float> request;
        request.prompt = plain_prompt(static_cast<int>(i) + 3, 16 + 3 * i);
        request.options = options[i];
        handles.push_back(engine.submit(std::move(request)));
    }
    for (std::size_t i = 0; i < options.size(); ++i) {
        INFO("request " << i);
        const EngineResult r = handles[i].wait();
        REQUIRE_FALSE(r.error);
        Session<float> session(logprobs_fixture().model, &logprobs_fixture().tokenizer);
        const std::vector<std::int32_t> ids = plain_prompt(static_cast<int>(i) + 3, 16 + 3 * i);
        const GenerationResult expected = session.generate(std::span<const std::int32_t>(ids), options[i]);
        CHECK(r.ids == expected.ids);
        CHECK(r.logprobs.size() == (options[i].logprobs >= 0 ? r.ids.size() : 0));
        check_same_logprobs(r.logprobs, expected.logprobs);
    }
}

TEST_CASE("speculative decoding records the logprobs of plain decoding, greedy and sampled", "[logprobs][speculative]") {
    using namespace logprobs_test;
    const std::vector<std::int32_t> ids = repeating_prompt();
    for (const double temperature : {0.0, 0.8}) {
        INFO("temperature " << temperature);
        const GenerateOptions plain = options_with_logprobs(temperature, 6, 40);
        Session<float> s0(logprobs_fixture().model);
        const GenerationResult expected = s0.generate(std::span<const std::int32_t>(ids), plain);
        std::vector<std::int32_t> known = ids;
        known.insert(known.end(), expected.ids.begin(), expected.ids.end());
        // Drafts from the prompt, the known reply, and the known reply with wrong ids among them.
        PromptLookupDrafter lookup(3);
        OracleDrafter oracle(known), mostly_right(known, 0.6, 3);
        std::int64_t accepted = 0;
        for (Drafter* drafter : std::initializer_list<Drafter*>{&lookup, &oracle, &mostly_right})
            for (const std::int64_t k : {1, 4}) {
                INFO("drafter " << (drafter == &lookup ? "lookup" : drafter == &oracle ? "oracle" : "oracle with wrong ids") << ", draft length " << k);
                GenerateOptions o = plain;
                o.speculative = {.drafter = drafter, .draft_max = k};
                Session<float> s(logprobs_fixture().model);
                const GenerationResult r = s.generate(std::span<const std::int32_t>(ids), o);
                accepted += r.stats.accepted_tokens;
                CHECK(r.ids == expected.ids);
                check_same_logprobs(r.logprobs, expected.logprobs);
            }
        CHECK(accepted > 0);  // ids came from verified drafts
    }
}

TEST_CASE("under a grammar, the alternatives are the ids it allows, whose probabilities sum to 1", "[logprobs][constraint]") {
    using namespace logprobs_test;
    const auto vocabulary = TokenVocabulary::from_tokenizer(logprobs_fixture().tokenizer);
    GenerateOptions o = options_with_logprobs(0.9, 5, 40);
    o.end_ids = {};
    o.constraint = Constraint::from_gbnf("root ::= \"ok\"", vocabulary);
    Session<float> session(logprobs_fixture().model, &logprobs_fixture().tokenizer);
    const GenerationResult r = session.generate(std::span<const std::int32_t>(plain_prompt(4, 10)), o);
    REQUIRE(r.finish == FinishReason::EndToken);
    REQUIRE(r.logprobs.size() == r.ids.size());
    // Once "ok" is complete, only the end ids are allowed: the alternatives are those ids (fewer
    // than asked for), and their probabilities sum to 1.
    const TokenIds& t = logprobs_fixture().model.config().tokens;
    const TokenLogprob& last = r.logprobs.back();
    CHECK(last.id == r.ids.back());
    REQUIRE(last.top.size() == t.eos_count);
    double total = 0;
    for (const IdLogprob& alt : last.top) {
        const auto eos_end = t.eos.begin() + static_cast<std::ptrdiff_t>(t.eos_count);
        CHECK(std::find(t.eos.begin(), eos_end, alt.id) != eos_end);
        total += std::exp(alt.logprob);
    }
    CHECK(std::abs(total - 1.0) <= 1e-12);
    for (const TokenLogprob& lp : r.logprobs)
        for (const IdLogprob& alt : lp.top) CHECK(std::isfinite(alt.logprob));
}

TEST_CASE("GenerateOptions::logprobs outside -1..20 is refused by Session and Engine alike", "[logprobs][errors]") {
    using namespace logprobs_test;
    const std::vector<std::int32_t> ids = plain_prompt(5, 8);
    for (const std::int32_t bad : {-2, 21}) {
        INFO("logprobs " << bad);
        Session<float> session(logprobs_fixture().model);
        const std::string message = "GenerateOptions::logprobs must be -1 (off), 0 (the sampled ids') or at most 20 (top alternatives), not " +
                                    std::to_string(bad);
        CHECK_THROWS_MATCHES(session.generate(std::span<const std::int32_t>(ids), options_with_logprobs(0.0, bad)), InvalidArgument, Catch::Message(message));
        CHECK(session.history().empty());  // refused before anything changed
        Engine<float> engine(logprobs_fixture().model, nullptr);
        EngineRequest<float> request;
        request.prompt = ids;
        request.options = options_with_logprobs(0.0, bad);
        CHECK_THROWS_MATCHES(engine.submit(std::move(request)), InvalidArgument, Catch::Message(message));
    }
}
