// Session: greedy generation equals the step-by-step argmax of the model's logits; stops,
// cancellation and context errors.
#include <catch2/catch.hpp>

#include <gemma4/generate/session.hpp>
#include <gemma4/model/random_checkpoint.hpp>

#include "support/temp_dir.hpp"

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
