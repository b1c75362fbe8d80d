// Session: greedy generation equals the step-by-step argmax of the model's logits; stops,
// cancellation and context errors; min_tokens against the same argmax with the end ids masked.
#include <catch2/catch.hpp>

#include <gemma4/generate/session.hpp>
#include <gemma4/model/random_checkpoint.hpp>

#include "support/temp_dir.hpp"

#include <algorithm>
#include <limits>

using namespace gemma4;

namespace {
const Model<float>& tiny_model() {
    static const auto dir = [] {
        const auto d = test::temp_dir("session_model");
        Gemma4Config c = tiny_config();
        c.max_position_embeddings = 64;
        write_random_checkpoint(d, c, {.seed = 99});
        return d;
    }();
    static const Model<float> model = Model<float>::load(dir, ModelOptions{2});
    return model;
}
}  // namespace

TEST_CASE("greedy generation equals the step-by-step argmax of logits", "[session]") {
    const Model<float>& model = tiny_model();
    const std::vector<std::int32_t> prompt = {2, 40, 41, 42, 43, 44, 45, 46, 47, 48};  // longer than the window
    Session<float> session(model);
    GenerateOptions o{.max_new_tokens = 20, .sampling = {.temperature = 0.0}, .end_ids = {511}};
    const GenerationResult r = session.generate(std::span<const std::int32_t>(prompt), o);

    std::vector<std::int32_t> ids = prompt, expected;
    for (int step = 0; step < 20; ++step) {
        const Logits<float> l = model.logits(ids);  // uncached, whole sequence
        const auto last = l.row(l.rows - 1);
        const auto best = static_cast<std::int32_t>(std::max_element(last.begin(), last.end()) - last.begin());  // lowest id on ties
        expected.push_back(best);
        ids.push_back(best);
        if (best == 511) break;
    }
    CHECK(r.ids == expected);
    CHECK(r.stats.generated_tokens == static_cast<std::int64_t>(expected.size()));
    CHECK(r.stats.prompt_tokens == 10);
}

TEST_CASE("a session feeds only new ids on the next call", "[session]") {
    const Model<float>& model = tiny_model();
    Session<float> session(model);
    GenerateOptions o{.max_new_tokens = 3, .sampling = {.temperature = 0.0}, .end_ids = {511}};
    const std::vector<std::int32_t> a = {2, 10, 11}, b = {12, 13};
    const auto r1 = session.generate(std::span<const std::int32_t>(a), o);
    const auto r2 = session.generate(std::span<const std::int32_t>(b), o);
    CHECK(r2.stats.prompt_tokens == 1 + 2);  // the last sampled id of r1, then b
    // Same as one session over the concatenation.
    std::vector<std::int32_t> all = a;
    all.insert(all.end(), r1.ids.begin(), r1.ids.end());
    all.insert(all.end(), b.begin(), b.end());
    Session<float> fresh(model);
    CHECK(fresh.generate(std::span<const std::int32_t>(all), o).ids == r2.ids);
    CHECK(session.history().size() == all.size() + r2.ids.size());
}

TEST_CASE("generation stops: end ids, stop ids, max tokens, cancellation, context", "[session]") {
    const Model<float>& model = tiny_model();
    const std::vector<std::int32_t> prompt = {2, 7};
    Session<float> probe(model);
    const auto free_run = probe.generate(std::span<const std::int32_t>(prompt), {.max_new_tokens = 6, .sampling = {.temperature = 0.0}, .end_ids = {511}});
    REQUIRE(free_run.ids.size() == 6);
    CHECK(free_run.finish == FinishReason::MaxTokens);

    Session<float> s1(model);
    const auto r1 = s1.generate(std::span<const std::int32_t>(prompt), {.max_new_tokens = 6, .sampling = {.temperature = 0.0}, .end_ids = {free_run.ids[2]}});
    CHECK(r1.finish == FinishReason::EndToken);
    const auto first_end = std::find(free_run.ids.begin(), free_run.ids.end(), free_run.ids[2]);
    CHECK(r1.ids == std::vector<std::int32_t>(free_run.ids.begin(), first_end + 1));  // end id included

    Session<float> s2(model);
    const auto r2 = s2.generate(std::span<const std::int32_t>(prompt),
                                {.max_new_tokens = 6, .sampling = {.temperature = 0.0}, .end_ids = {511}, .stop_ids = {free_run.ids[1]}});
    CHECK(r2.finish == FinishReason::StopId);
    CHECK(r2.ids.size() == static_cast<std::size_t>(std::find(free_run.ids.begin(), free_run.ids.end(), free_run.ids[1]) - free_run.ids.begin()) + 1);

    Session<float> s3(model);
    int calls = 0;
    const auto r3 = s3.generate(std::span<const std::int32_t>(prompt), {.max_new_tokens = 6,
                                                                        .sampling = {.temperature = 0.0},
                                                                        .end_ids = {511},
                                                                        .on_token = [&](std::int32_t, std::string_view) { return ++calls < 2; }});
    CHECK(r3.finish == FinishReason::Cancelled);
    CHECK(r3.ids.size() == 2);

    std::atomic<bool> cancel{true};
    Session<float> s4(model);
    const auto r4 = s4.generate(std::span<const std::int32_t>(prompt), {.max_new_tokens = 6, .end_ids = {511}, .cancel = &cancel});
    CHECK(r4.finish == FinishReason::Cancelled);
    CHECK(r4.ids.empty());

    Session<float> s5(model);  // context of 64
    const auto r5 = s5.generate(std::span<const std::int32_t>(prompt), {.max_new_tokens = 1000, .sampling = {.temperature = 0.0}, .end_ids = {511}});
    CHECK(r5.finish == FinishReason::ContextFull);
    CHECK(s5.cached_tokens() == 64);

    Session<float> s6(model);
    const std::vector<std::int32_t> too_long(65, 5);
    REQUIRE_THROWS_AS(s6.generate(std::span<const std::int32_t>(too_long), {}), ContextLengthError);
    REQUIRE_THROWS_WITH(s6.generate(std::span<const std::int32_t>(too_long), {}), Catch::Contains("exceeds the context of 64 tokens"));
    REQUIRE_THROWS_WITH(s6.generate(std::span<const std::int32_t>(), {}), Catch::Contains("empty prompt"));
    REQUIRE_THROWS_WITH(s6.generate(std::string_view("hello"), {}), Catch::Contains("no tokenizer"));
}

namespace {

/// Greedy by hand over the uncached logits: the ids of `ends` are masked while fewer than
/// `min_tokens` ids were chosen, and end the reply (included) once they may be chosen.
std::vector<std::int32_t> greedy_with_min_tokens(const Model<float>& model, std::vector<std::int32_t> ids, std::int64_t max_new_tokens,
                                                 std::int64_t min_tokens, const std::vector<std::int32_t>& ends) {
    std::vector<std::int32_t> reply;
    while (static_cast<std::int64_t>(reply.size()) < max_new_tokens) {
        const Logits<float> l = model.logits(ids);
        std::vector<float> last(l.row(l.rows - 1).begin(), l.row(l.rows - 1).end());
        const bool held = static_cast<std::int64_t>(reply.size()) < min_tokens;
        if (held)
            for (const std::int32_t e : ends) last[static_cast<std::size_t>(e)] = -std::numeric_limits<float>::infinity();
        const auto best = static_cast<std::int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
        reply.push_back(best);
        ids.push_back(best);
        if (std::find(ends.begin(), ends.end(), best) != ends.end()) break;
    }
    return reply;
}

}  // namespace

TEST_CASE("min_tokens holds the end ids and stop ids back until the reply has that many ids", "[session][min_tokens]") {
    const Model<float>& model = tiny_model();
    const std::vector<std::int32_t> prompt = {2, 7, 30, 31};
    const GenerateOptions free{.max_new_tokens = 8, .sampling = {.temperature = 0.0}, .end_ids = {-1}};
    const auto free_run = Session<float>(model).generate(std::span<const std::int32_t>(prompt), free);
    REQUIRE(free_run.ids.size() == 8);
    const std::int32_t first = free_run.ids[0], second = free_run.ids[1];

    SECTION("an end id") {
        GenerateOptions o = free;
        o.end_ids = {first};
        const auto unheld = Session<float>(model).generate(std::span<const std::int32_t>(prompt), o);
        CHECK(unheld.ids == std::vector<std::int32_t>{first});  // it ends at once without min_tokens
        CHECK(unheld.finish == FinishReason::EndToken);
        o.min_tokens = 3;
        const auto r = Session<float>(model).generate(std::span<const std::int32_t>(prompt), o);
        CHECK(r.ids == greedy_with_min_tokens(model, prompt, 8, 3, {first}));
        REQUIRE(r.ids.size() >= 3);
        for (std::size_t i = 0; i < 3; ++i) CHECK(r.ids[i] != first);
        CHECK(r.finish == (r.ids.back() == first ? FinishReason::EndToken : FinishReason::MaxTokens));
    }
    SECTION("a stop id, and an end id beside it") {
        GenerateOptions o = free;
        o.end_ids = {first};
        o.stop_ids = {second};
        o.min_tokens = 5;
        const auto r = Session<float>(model).generate(std::span<const std::int32_t>(prompt), o);
        CHECK(r.ids == greedy_with_min_tokens(model, prompt, 8, 5, {first, second}));
        REQUIRE(r.ids.size() >= 5);
        for (std::size_t i = 0; i < 5; ++i) CHECK((r.ids[i] != first && r.ids[i] != second));
    }
    SECTION("max_new_tokens below min_tokens still ends the reply") {
        GenerateOptions o = free;
        o.end_ids = {first};
        o.max_new_tokens = 2;
        o.min_tokens = 6;
        const auto r = Session<float>(model).generate(std::span<const std::int32_t>(prompt), o);
        CHECK(r.ids == greedy_with_min_tokens(model, prompt, 2, 6, {first}));
        CHECK(r.ids.size() == 2);
        CHECK(r.finish == FinishReason::MaxTokens);
    }
    SECTION("without end_ids the model's eos ids are held back, with the stop ids") {
        GenerateOptions o;
        o.stop_ids = {second, -1};
        CHECK(detail::ending_ids(o, model.config().tokens) == std::vector<std::int32_t>{1, 106, second});
        o.end_ids = {-1};
        CHECK(detail::ending_ids(o, model.config().tokens) == std::vector<std::int32_t>{second});
    }
    SECTION("a negative min_tokens is an error naming it") {
        GenerateOptions o = free;
        o.min_tokens = -1;
        Session<float> session(model);
        REQUIRE_THROWS_AS(session.generate(std::span<const std::int32_t>(prompt), o), InvalidArgument);
        REQUIRE_THROWS_WITH(Session<float>(model).generate(std::span<const std::int32_t>(prompt), o),
                            Catch::Contains("GenerateOptions::min_tokens must be >= 0, not -1"));
    }
}
