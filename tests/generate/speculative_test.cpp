// Speculative decoding (generate/speculative.hpp): a session with a drafter emits exactly what
// plain decoding emits — greedy and sampled, for every draft length, past the sliding window so
// that rejected drafts are rolled back across pages the window had released — and sampled
// output has the target's distribution (a chi-square test that also rejects a biased rule).
#include <catch2/catch.hpp>

#include <gemma4/generate/mtp_drafter.hpp>
#include <gemma4/generate/session.hpp>
#include <gemma4/model/random_checkpoint.hpp>

#include "support/temp_dir.hpp"

#include <cmath>
#include <map>

using namespace gemma4;

namespace {

const std::filesystem::path& speculative_model_dir() {
    static const auto dir = [] {
        const auto d = test::temp_dir("speculative_model");
        Gemma4Config c = tiny_config();  // window 8: a 100-id sequence releases many sliding pages
        c.max_position_embeddings = 512;
        write_random_checkpoint(d, c, {.seed = 7});
        return d;
    }();
    return dir;
}

const Model<float>& speculative_model() {
    static const Model<float> model = Model<float>::load(speculative_model_dir(), ModelOptions{2});
    return model;
}

/// A random MTP assistant for speculative_model(), loaded for T.
template <class T>
std::shared_ptr<const Assistant<T>> assistant_for(const Model<T>& target) {
    static const auto dir = [] {
        const auto d = test::temp_dir("speculative_assistant");
        Gemma4Config c = tiny_config();
        c.max_position_embeddings = 512;
        write_random_assistant_checkpoint(d, assistant_config_for(c), {.seed = 8});
        return d;
    }();
    return std::make_shared<const Assistant<T>>(Assistant<T>::load(dir, target, ModelOptions{2}));
}

/// A vocabulary of 32 ids, so that sampled ids fall into few enough classes to count.
const Model<float>& small_vocab_model() {
    static const auto dir = [] {
        const auto d = test::temp_dir("speculative_small_vocab");
        Gemma4Config c = tiny_config();
        c.vocab_size = 32;
        c.tokens.eos = {1, 25};
        c.tokens.image = 26, c.tokens.audio = 27, c.tokens.video = 28;
        c.tokens.boi = 29, c.tokens.eoi = 30, c.tokens.boa = 31, c.tokens.eoa = 31;
        write_random_checkpoint(d, c, {.seed = 5});
        return d;
    }();
    // One thread: the many tiny steps of the sampling test would spend their time waking a pool.
    static const Model<float> model = Model<float>::load(dir, ModelOptions{1});
    return model;
}

/// A repetitive prompt (prompt lookup finds matches) that is longer than the window.
std::vector<std::int32_t> looping_prompt() {
    std::vector<std::int32_t> p = {2};
    for (int i = 0; i < 6; ++i)
        for (std::int32_t id : {40, 41, 42, 43, 44, 45, 46}) p.push_back(id);
    return p;
}

GenerationResult run(const Model<float>& model, std::span<const std::int32_t> prompt, GenerateOptions o) {
    Session<float> session(model);
    return session.generate(prompt, o);
}

}  // namespace

TEST_CASE("greedy with prompt lookup equals plain greedy for draft lengths 1 to 8", "[speculative]") {
    const Model<float>& model = speculative_model();
    const auto prompt = looping_prompt();
    const GenerateOptions plain{.max_new_tokens = 60, .sampling = {.temperature = 0.0}, .end_ids = {511}};
    const GenerationResult expected = run(model, prompt, plain);
    REQUIRE(expected.ids.size() == 60);
    std::int64_t accepted_somewhere = 0;
    for (std::int64_t k = 1; k <= 8; ++k) {
        PromptLookupDrafter lookup(3);
        GenerateOptions o = plain;
        o.speculative = {.drafter = &lookup, .draft_max = k};
        const GenerationResult r = run(model, prompt, o);
        INFO("draft length " << k << ": " << r.stats.accepted_tokens << " of " << r.stats.drafted_tokens << " drafts accepted");
        CHECK(r.ids == expected.ids);
        CHECK(r.finish == expected.finish);
        CHECK(r.stats.drafted_tokens > 0);
        CHECK(r.stats.accepted_tokens <= r.stats.drafted_tokens);
        // Every step emits one id plus its accepted drafts.
        CHECK(r.stats.decode_steps + 1 + r.stats.accepted_tokens == r.stats.generated_tokens);
        accepted_somewhere += r.stats.accepted_tokens;
    }
    CHECK(accepted_somewhere > 0);  // verification kept drafts, not only rejected them
}

TEST_CASE("greedy with the MTP assistant equals plain greedy for draft lengths 1 to 8 (float and double, Int8 KV)", "[speculative][assistant]") {
    const auto prompt = looping_prompt();
    auto check = [&](const auto& model, KVCacheOptions kv) {
        using T = typename std::decay_t<decltype(model)>::scalar_type;
        MtpDrafter<T> mtp(assistant_for(model));
        GenerateOptions plain{.max_new_tokens = 40, .sampling = {.temperature = 0.0}, .end_ids = {511}};
        Session<T> s0(model, nullptr, kv);
        const GenerationResult expected = s0.generate(std::span<const std::int32_t>(prompt), plain);
        REQUIRE(expected.ids.size() == 40);
        for (std::int64_t k = 1; k <= 8; ++k) {
            GenerateOptions o = plain;
            o.speculative = {.drafter = &mtp, .draft_max = k};
            Session<T> s(model, nullptr, kv);
            const GenerationResult r = s.generate(std::span<const std::int32_t>(prompt), o);
            INFO("draft length " << k << ", " << r.stats.accepted_tokens << " of " << r.stats.drafted_tokens << " accepted");
            CHECK(r.ids == expected.ids);
            CHECK(r.stats.drafted_tokens > 0);
            CHECK(s.cached_tokens() == s0.cached_tokens());
        }
        // p_min = 1: the assistant is never that sure, so nothing is drafted.
        GenerateOptions o = plain;
        o.speculative = {.drafter = &mtp, .draft_max = 4, .p_min = 1.0};
        Session<T> s(model, nullptr, kv);
        const GenerationResult r = s.generate(std::span<const std::int32_t>(prompt), o);
        CHECK(r.ids == expected.ids);
        CHECK(r.stats.drafted_tokens == 0);
    };
    check(speculative_model(), {});
    check(speculative_model(), {.kv_dtype = KVDtype::Int8});
    const Model<double> model64 = Model<double>::load(speculative_model_dir(), ModelOptions{2});
    check(model64, {});
}

TEST_CASE("the MTP drafter needs the target state of its own scalar type", "[speculative][assistant]") {
    MtpDrafter<float> mtp(assistant_for(speculative_model()));
    const std::vector<std::int32_t> ids = {2, 40, 41};
    std::vector<std::vector<std::int32_t>> drafts(1);
    const DraftRequest no_target{ids, 2};
    CHECK_THROWS_AS(mtp.draft(std::span<const DraftRequest>(&no_target, 1), drafts), InvalidArgument);
    const Model<double> model64 = Model<double>::load(speculative_model_dir(), ModelOptions{1});
    Session<double> session(model64);
    GenerateOptions o{.max_new_tokens = 4, .sampling = {.temperature = 0.0}};
    o.speculative = {.drafter = &mtp, .draft_max = 2};
    CHECK_THROWS_WITH(session.generate(std::span<const std::int32_t>(ids), o), Catch::Contains("float target state"));
    CHECK_THROWS_AS(MtpDrafter<float>(nullptr), InvalidArgument);
}

TEST_CASE("the oracle drafter's drafts are all accepted and the output is the plain decode", "[speculative]") {
    const Model<float>& model = speculative_model();
    const auto prompt = looping_prompt();
    for (const double temperature : {0.0, 1.0}) {
        const GenerateOptions plain{.max_new_tokens = 50, .sampling = {.temperature = temperature, .seed = 11}, .end_ids = {511}};
        const GenerationResult expected = run(model, prompt, plain);
        std::vector<std::int32_t> sequence = prompt;
        sequence.insert(sequence.end(), expected.ids.begin(), expected.ids.end());
        for (std::int64_t k : {1, 4, 8}) {
            OracleDrafter oracle(sequence);
            GenerateOptions o = plain;
            o.speculative = {.drafter = &oracle, .draft_max = k};
            const GenerationResult r = run(model, prompt, o);
            INFO("temperature " << temperature << ", draft length " << k);
            CHECK(r.ids == expected.ids);
            CHECK(r.stats.drafted_tokens > 0);
            CHECK(r.stats.accepted_tokens == r.stats.drafted_tokens);
            // k + 1 ids per step, the last steps shortened by max_new_tokens.
            CHECK(r.stats.decode_steps <= (50 + k) / (k + 1));
        }
    }
}

TEST_CASE("sampled output with speculation equals sampled plain output, seed for seed", "[speculative]") {
    const Model<float>& model = speculative_model();
    const auto prompt = looping_prompt();
    for (std::uint64_t seed : {1u, 2u, 3u}) {
        const GenerateOptions plain{.max_new_tokens = 40, .sampling = {.temperature = 0.8, .top_k = 20, .seed = seed}, .end_ids = {511}};
        const GenerationResult expected = run(model, prompt, plain);
        PromptLookupDrafter lookup(2);
        GenerateOptions o = plain;
        o.speculative = {.drafter = &lookup, .draft_max = 5};
        CHECK(run(model, prompt, o).ids == expected.ids);
    }
}

TEST_CASE("a speculative session continues like a plain one across calls and stops", "[speculative]") {
    const Model<float>& model = speculative_model();
    const auto prompt = looping_prompt();
    const std::vector<std::int32_t> more = {47, 48, 40, 41};
    GenerateOptions plain{.max_new_tokens = 25, .sampling = {.temperature = 0.0}, .end_ids = {511}};
    Session<float> a(model), b(model);
    PromptLookupDrafter lookup(3);
    GenerateOptions spec = plain;
    spec.speculative = {.drafter = &lookup, .draft_max = 6};
    CHECK(a.generate(std::span<const std::int32_t>(prompt), plain).ids == b.generate(std::span<const std::int32_t>(prompt), spec).ids);
    CHECK(a.cached_tokens() == b.cached_tokens());  // the rejected drafts are gone from the cache
    CHECK(a.generate(std::span<const std::int32_t>(more), plain).ids == b.generate(std::span<const std::int32_t>(more), spec).ids);
    CHECK(a.history() == b.history());
    // A stop id inside an accepted run of drafts ends generation there, as in plain decoding.
    const std::int32_t stop = a.history().back();
    plain.stop_ids = {stop};
    spec.stop_ids = {stop};
    const auto pa = a.generate(std::span<const std::int32_t>(more), plain), pb = b.generate(std::span<const std::int32_t>(more), spec);
    CHECK(pa.ids == pb.ids);
    CHECK(pa.finish == pb.finish);
    CHECK(a.cached_tokens() == b.cached_tokens());
}

TEST_CASE("speculative options are checked", "[speculative]") {
    const Model<float>& model = speculative_model();
    const std::vector<std::int32_t> prompt = {2, 40, 41};
    PromptLookupDrafter lookup(2);
    for (std::int64_t bad : {0, -1}) {
        GenerateOptions o{.max_new_tokens = 4};
        o.speculative = {.drafter = &lookup, .draft_max = bad};
        CHECK_THROWS_WITH(run(model, prompt, o), Catch::Contains("draft_max"));
    }
    GenerateOptions o{.max_new_tokens = 4};
    o.speculative = {.drafter = &lookup, .draft_max = 2, .draft_min = 3};
    CHECK_THROWS_WITH(run(model, prompt, o), Catch::Contains("draft_min"));
    o.speculative = {.drafter = &lookup, .draft_max = 2, .p_min = 1.5};
    CHECK_THROWS_WITH(run(model, prompt, o), Catch::Contains("p_min"));
    CHECK_THROWS_WITH(PromptLookupDrafter(0), Catch::Contains("--lookup"));

    // A drafter proposing an id outside the vocabulary is named.
    const std::int32_t first = run(model, prompt, GenerateOptions{.max_new_tokens = 1, .sampling = {.temperature = 0.0}}).ids.at(0);
    OracleDrafter wrong({2, 40, 41, first, 9999});
    o.sampling.temperature = 0.0;
    o.speculative = {.drafter = &wrong, .draft_max = 2};
    CHECK_THROWS_WITH(run(model, prompt, o), Catch::Contains("9999"));
}

TEST_CASE("prompt lookup proposes what followed the latest earlier match of the longest suffix", "[speculative]") {
    const PromptLookupDrafter lookup(3);
    using V = std::vector<std::int32_t>;
    CHECK(lookup.lookup(V{1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3}, 4) == V{7, 5, 1, 2});  // latest of two 3-gram matches
    CHECK(lookup.lookup(V{5, 6, 8, 4, 6}, 3) == V{8, 4, 6});                           // only a 1-gram matches
    CHECK(lookup.lookup(V{4, 2, 3, 8, 1, 2, 3}, 2) == V{8, 1});                        // the 3-gram "1 2 3" has no earlier match; "2 3" has
    CHECK(lookup.lookup(V{1, 2, 3}, 4).empty());                                       // nothing repeats
    CHECK(lookup.lookup(V{9, 3, 3, 3}, 4) == V{3, 3, 3, 3});                           // a repeat continues past the end
    CHECK(lookup.lookup(V{1, 2, 1, 2}, 5) == V{1, 2, 1, 2, 1});
    CHECK(lookup.lookup(V{7}, 4).empty());
}

namespace {

/// Chi-square statistic of two samples of one categorical variable (homogeneity), with the
/// classes whose pooled count is under 10 merged into one, and its critical value at
/// significance 0.001 (Wilson–Hilferty approximation of the chi-square quantile).
struct ChiSquare {
    double statistic = 0, critical = 0;
    int classes = 0;
};

ChiSquare chi_square(const std::map<std::int32_t, int>& a, const std::map<std::int32_t, int>& b) {
    std::map<std::int32_t, std::pair<double, double>> pooled;
    for (const auto& [k, n] : a) pooled[k].first += n;
    for (const auto& [k, n] : b) pooled[k].second += n;
    std::vector<std::pair<double, double>> cells;
    std::pair<double, double> rare{0, 0};
    for (const auto& [k, c] : pooled) {
        if (c.first + c.second < 10) rare.first += c.first, rare.second += c.second;
        else cells.push_back(c);
    }
    if (rare.first + rare.second > 0) cells.push_back(rare);
    ChiSquare r;
    for (const auto& [x, y] : cells) r.statistic += (x - y) * (x - y) / (x + y);  // equal sample sizes
    r.classes = static_cast<int>(cells.size());
    const double df = r.classes - 1, z = 3.0902;  // upper 0.001 quantile of the standard normal
    r.critical = df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3);
    return r;
}

/// Always proposes the id the target ranks first after the context (a strong, honest drafter).
class ArgmaxDrafter final : public Drafter {
public:
    explicit ArgmaxDrafter(const Model<float>& m) : model_(m) {}
    void draft(std::span<const DraftRequest> requests, std::span<std::vector<std::int32_t>> drafts) override {
        for (std::size_t i = 0; i < requests.size(); ++i) {
            std::vector<std::int32_t> ids(requests[i].context.begin(), requests[i].context.end());
            drafts[i].clear();
            for (std::int64_t j = 0; j < requests[i].max_tokens; ++j) {
                const Logits<float> l = model_.logits(ids);
                const auto last = l.row(l.rows - 1);
                std::int32_t best = 0;
                for (std::int32_t v = 0; v < static_cast<std::int32_t>(last.size()); ++v)
                    if (!model_.is_placeholder(v) && last[static_cast<std::size_t>(v)] > last[static_cast<std::size_t>(best)]) best = v;
                drafts[i].push_back(best);
                ids.push_back(best);
            }
        }
    }

private:
    const Model<float>& model_;
};

}  // namespace

TEST_CASE("sampled speculative output has the target's distribution (chi-square), a biased rule does not", "[speculative]") {
    const Model<float>& model = small_vocab_model();
    const std::vector<std::int32_t> prompt = {2, 5, 9, 14};
    constexpr int kRuns = 1200, kTokens = 3;
    const auto sampling = [](std::uint64_t seed) { return SamplingParams{.temperature = 0.7, .seed = seed}; };

    // Independent seeds on each side: the two samples must agree in distribution, not draw for draw.
    std::map<std::int32_t, int> plain[kTokens], spec[kTokens], biased[kTokens];
    std::int64_t drafted = 0, accepted = 0;
    ArgmaxDrafter argmax(model);
    for (int run_index = 0; run_index < kRuns; ++run_index) {
        // One id more than is counted, so that the first step drafts two.
        const GenerateOptions p{.max_new_tokens = kTokens + 1, .sampling = sampling(static_cast<std::uint64_t>(run_index)), .end_ids = {26}};  // a placeholder: never sampled
        const auto a = run(model, prompt, p);
        GenerateOptions s = p;
        s.sampling = sampling(static_cast<std::uint64_t>(run_index + kRuns));
        s.speculative = {.drafter = &argmax, .draft_max = 2};
        const auto b = run(model, prompt, s);
        drafted += b.stats.drafted_tokens, accepted += b.stats.accepted_tokens;
        REQUIRE(a.ids.size() == kTokens + 1);
        REQUIRE(b.ids.size() == kTokens + 1);
        for (int t = 0; t < kTokens; ++t) ++plain[t][a.ids[static_cast<std::size_t>(t)]], ++spec[t][b.ids[static_cast<std::size_t>(t)]];

        // A deliberately biased rule: keep the drafted argmax half of the time even when the
        // target sampled another id (so the second and third ids lean to the argmax).
        Sampler sampler(sampling(static_cast<std::uint64_t>(run_index + 2 * kRuns)));
        std::vector<std::int32_t> ids = prompt;
        detail::Xoshiro256 coin(static_cast<std::uint64_t>(run_index) + 77);
        for (int t = 0; t < kTokens; ++t) {
            const Logits<float> l = model.logits(ids);
            const auto last = l.row(l.rows - 1);
            std::vector<float> row(last.begin(), last.end());
            for (std::int32_t id : {26, 27, 28}) row[static_cast<std::size_t>(id)] = -INFINITY;
            std::int32_t id = sampler.sample(row);
            if (t > 0) {
                std::vector<std::int32_t> d(1);
                DraftRequest r{ids, 1};
                argmax.draft(std::span<const DraftRequest>(&r, 1), std::span<std::vector<std::int32_t>>(&d, 1));
                if (coin.uniform() < 0.5) id = d[0];
            }
            ++biased[t][id];
            ids.push_back(id);
        }
    }
    INFO(accepted << " of " << drafted << " drafts accepted");
    CHECK(accepted > drafted / 20);  // verification accepted and rejected drafts both
    CHECK(accepted < drafted);
    for (int t = 0; t < kTokens; ++t) {
        const ChiSquare same = chi_square(plain[t], spec[t]);
        INFO("id " << t + 1 << ": chi-square " << same.statistic << " over " << same.classes << " classes, critical " << same.critical);
        CHECK(same.classes >= 4);
        CHECK(same.statistic < same.critical);
        if (t > 0) {
            const ChiSquare skewed = chi_square(plain[t], biased[t]);
            INFO("biased rule: chi-square " << skewed.statistic << ", critical " << skewed.critical);
            CHECK(skewed.statistic > skewed.critical);
        }
    }
}
