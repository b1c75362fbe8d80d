// Engine: continuously batched requests give exactly what a lone Session gives each of them
// (greedy and seeded sampling, bf16 and int8 weights), whatever joins or leaves meanwhile;
// prefill is chunked between decode steps; prefixes are reused; admission waits for the KV
// budget and the queue is bounded; cancellation and shutdown free everything. A seeded request
// gives the same ids alone and among fifteen others; min_tokens holds the end ids back there too.
#include <catch2/catch.hpp>

#include <gemma4/generate/engine.hpp>
#include <gemma4/generate/mtp_drafter.hpp>
#include <gemma4/model/random_checkpoint.hpp>
#include <gemma4/tokenizer/tiny_tokenizer.hpp>

#include "support/temp_dir.hpp"
#include "support/tiny_model.hpp"

#include <atomic>
#include <fstream>
#include <iterator>
#include <mutex>
#include <stdexcept>
#include <thread>

using namespace gemma4;
using namespace std::chrono_literals;

namespace {

struct Fixture {
    std::filesystem::path dir;
    TinyTokenizerInfo info;
    Tokenizer tokenizer;
    Model<float> model;       // bf16 weights
    Model<float> model_int8;  // Q8 weights
};

const Fixture& fixture() {
    static const Fixture f = [] {
        const auto [dir, info] = test::write_tiny_model("engine_model", 23, 256);
        LoadOptions int8;
        int8.format = WeightFormat::Int8;
        return Fixture{dir, info, Tokenizer::from_file(info.tokenizer_json), Model<float>::load(dir, ModelOptions{2}),
                       Model<float>::load(dir, ModelOptions{2}, int8)};
    }();
    return f;
}

/// n ids from `seed`: plain tokens (no placeholders), starting with BOS.
std::vector<std::int32_t> prompt_ids(int seed, std::size_t n) {
    const Model<float>& model = fixture().model;
    const auto vocab = static_cast<std::int32_t>(model.config().vocab_size);
    std::vector<std::int32_t> ids = {fixture().info.bos};
    for (std::size_t i = 0; ids.size() < n; ++i) {
        const auto id = static_cast<std::int32_t>((7 + 31 * seed + 13 * static_cast<std::int64_t>(i) + static_cast<std::int64_t>(i * i)) % (vocab - 4)) + 4;
        if (!model.is_placeholder(id) && id != fixture().info.image_start && id != fixture().info.audio_start) ids.push_back(id);
    }
    return ids;
}

std::vector<std::int32_t> concat(std::vector<std::int32_t> a, const std::vector<std::int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

GenerateOptions greedy(std::int64_t max_new_tokens) {
    GenerateOptions o;
    o.max_new_tokens = max_new_tokens;
    o.sampling.temperature = 0.0;
    return o;
}

/// Greedy with no end id, so that the request runs to max_new_tokens (or the context).
GenerateOptions endless(std::int64_t max_new_tokens) {
    GenerateOptions o = greedy(max_new_tokens);
    o.end_ids = {-1};
    return o;
}

GenerateOptions seeded(std::int64_t max_new_tokens, std::uint64_t seed) {
    GenerateOptions o;
    o.max_new_tokens = max_new_tokens;
    o.sampling = SamplingParams{.temperature = 0.9, .top_k = 50, .seed = seed};
    return o;
}

/// What a lone Session produces for the request.
GenerationResult lone(const Model<float>& model, const std::vector<std::int32_t>& prompt, const GenerateOptions& o,
                      const SoftTokenPlan<float>* soft = nullptr) {
    Session<float> session(model, &fixture().tokenizer);
    return session.generate(std::span<const std::int32_t>(prompt), o, soft);
}

void check_same(const EngineResult& got, const GenerationResult& expected) {
    if (got.error) {
        try {
            std::rethrow_exception(got.error);
        } catch (const std::exception& e) {
            FAIL("request failed: " << e.what());
        }
    }
    CHECK(got.ids == expected.ids);
    CHECK(got.text == expected.text);
    CHECK(got.finish == expected.finish);
    CHECK(got.stats.generated_tokens == expected.stats.generated_tokens);
}

EngineRequest<float> request(std::vector<std::int32_t> prompt, GenerateOptions o) {
    EngineRequest<float> r;
    r.prompt = std::move(prompt);
    r.options = std::move(o);
    return r;
}

/// Waits until `pred` holds (polling), failing after a few seconds.
template <class F>
void wait_until(F&& pred) {
    const auto give_up = std::chrono::steady_clock::now() + 20s;
    while (!pred()) {
        REQUIRE(std::chrono::steady_clock::now() < give_up);
        std::this_thread::sleep_for(1ms);
    }
}

struct StepLog {
    std::mutex mutex;
    std::vector<EngineStepInfo> steps;
    std::function<void(const EngineStepInfo&)> hook() {
        return [this](const EngineStepInfo& s) {
            std::lock_guard lock(mutex);
            steps.push_back(s);
        };
    }
    std::vector<EngineStepInfo> get() {
        std::lock_guard lock(mutex);
        return steps;
    }
};

void check_sixteen_concurrent(const Model<float>& model) {
    struct Spec {
        std::vector<std::int32_t> prompt;
        GenerateOptions options;
    };
    std::vector<Spec> specs;
    for (int i = 0; i < 16; ++i) {
        const std::size_t length = 3 + static_cast<std::size_t>((i * 11) % 45);
        const std::int64_t max_new = 4 + (i * 7) % 17;
        specs.push_back({prompt_ids(i, length), i % 4 == 3 ? seeded(max_new, 1000 + static_cast<std::uint64_t>(i)) : greedy(max_new)});
        if (i % 5 == 2) specs.back().options.stop_strings = {"e"};  // text stops go through the engine's matcher
    }
    std::vector<GenerationResult> expected;
    for (const Spec& s : specs) expected.push_back(lone(model, s.prompt, s.options));

    // Fewer sequences than requests and a small step: requests queue, join and leave at
    // different steps, and prefill chunks share steps with decoding.
    Engine<float> engine(model, &fixture().tokenizer, {.max_sequences = 6, .step_tokens = 16});
    std::vector<RequestHandle> handles(16);
    std::vector<std::string> streamed(16);
    std::atomic<bool> failed{false};
    std::vector<std::thread> submitters;
    for (int t = 0; t < 4; ++t)
        submitters.emplace_back([&, t] {
            try {
                // The later threads wait until the first requests are generating.
                if (t >= 2)
                    while (engine.stats().generated_tokens < 4 * t) std::this_thread::sleep_for(100us);
                for (int k = 0; k < 4; ++k) {
                    const auto i = static_cast<std::size_t>(t * 4 + k);
                    GenerateOptions o = specs[i].options;
                    o.on_token = [&streamed, i](std::int32_t, std::string_view text) {
                        streamed[i] += text;
                        return true;
                    };
                    handles[i] = engine.submit(request(specs[i].prompt, o));
                }
            } catch (...) {
                failed = true;
            }
        });
    for (auto& t : submitters) t.join();
    REQUIRE_FALSE(failed.load());
    for (std::size_t i = 0; i < 16; ++i) {
        INFO("request " << i << " of prompt length " << specs[i].prompt.size());
        const EngineResult r = handles[i].wait();
        check_same(r, expected[i]);
        CHECK(streamed[i] == r.text);
        CHECK(r.stats.prompt_tokens == static_cast<std::int64_t>(specs[i].prompt.size()));
    }
    const EngineStats s = engine.stats();
    CHECK(s.requests_submitted == 16);
    CHECK(s.requests_finished == 16);
    CHECK(s.active_sequences == 0);
    CHECK(s.queue_depth == 0);
    CHECK(s.mixed_steps > 0);
    CHECK(s.kv_pages_in_use == s.prefix_cache_pages);  // only the prefix cache holds pages
}

}  // namespace

TEST_CASE("a batched forward step gives each chunk the logits it gets alone, bit for bit", "[engine][batch]") {
    // What the engine's exactness rests on: no kernel's output for a token depends on the other
    // tokens of its step (their number, sequences or positions).
    // f32 weights run the generic dense path (GGUF F32 files, K-quants held as F32).
    const auto f32_dir = test::temp_dir("engine_model_f32");
    write_random_checkpoint(f32_dir, fixture().model.config(), {.seed = 23, .dtype = DType::F32});
    const Model<float> model_f32 = Model<float>::load(f32_dir);
    for (const Model<float>* model : {&fixture().model, &fixture().model_int8, &model_f32}) {
        INFO((model == &fixture().model ? "bf16 weights" : model == &model_f32 ? "f32 weights" : "int8 weights"));
        const std::vector<std::vector<std::int32_t>> prefixes = {prompt_ids(1, 3), prompt_ids(2, 19), prompt_ids(3, 40), prompt_ids(4, 1)};
        const std::vector<std::vector<std::int32_t>> chunks = {prompt_ids(5, 1), prompt_ids(6, 7), prompt_ids(7, 1), prompt_ids(8, 33)};
        KVCache<float> together = model->make_cache();
        std::vector<SeqId> seqs;
        for (const auto& p : prefixes) {
            seqs.push_back(together.add_sequence());
            model->forward(p, together, seqs.back(), LogitsMode::Last);
        }
        std::vector<SequenceChunk> batch;
        for (std::size_t i = 0; i < chunks.size(); ++i) batch.push_back({seqs[i], chunks[i]});
        const Logits<float> all = model->forward(std::span<const SequenceChunk>(batch), together, LogitsMode::All);
        std::int64_t row = 0;
        for (std::size_t i = 0; i < chunks.size(); ++i) {
            KVCache<float> alone = model->make_cache();
            const SeqId s = alone.add_sequence();
            model->forward(prefixes[i], alone, s, LogitsMode::Last);
            const Logits<float> one = model->forward(chunks[i], alone, s, LogitsMode::All);
            const auto n = static_cast<std::size_t>(one.rows * one.vocab);
            CHECK(std::equal(one.values.begin(), one.values.end(), all.values.begin() + row * all.vocab,
                             all.values.begin() + row * all.vocab + static_cast<std::ptrdiff_t>(n)));
            row += one.rows;
        }
        CHECK(row == all.rows);
    }
}

TEST_CASE("16 concurrent requests each equal a lone session (bf16 weights)", "[engine]") {
    check_sixteen_concurrent(fixture().model);
}

TEST_CASE("16 concurrent requests each equal a lone session (int8 weights)", "[engine]") {
    check_sixteen_concurrent(fixture().model_int8);
}

TEST_CASE("a long prompt is prefilled in chunks between decode steps, exactly", "[engine]") {
    const Model<float>& model = fixture().model;
    StepLog log;
    Engine<float> engine(model, &fixture().tokenizer, {.step_tokens = 8, .prefix_cache_entries = 0, .on_step = log.hook()});
    std::vector<RequestHandle> shorts;
    std::vector<std::vector<std::int32_t>> prompts;
    for (int i = 0; i < 3; ++i) {
        prompts.push_back(prompt_ids(50 + i, 5));
        shorts.push_back(engine.submit(request(prompts.back(), greedy(60))));
    }
    wait_until([&] { return engine.stats().generated_tokens >= 3; });
    const auto long_prompt = prompt_ids(77, 150);
    const RequestHandle long_request = engine.submit(request(long_prompt, greedy(10)));
    const EngineResult long_result = long_request.wait();
    check_same(long_result, lone(model, long_prompt, greedy(10)));
    for (int i = 0; i < 3; ++i) check_same(shorts[static_cast<std::size_t>(i)].wait(), lone(model, prompts[static_cast<std::size_t>(i)], greedy(60)));

    const auto steps = log.get();
    std::int64_t mixed = 0, prefill = 0;
    for (const EngineStepInfo& s : steps) {
        CHECK(s.decode_tokens + s.prefill_tokens <= 8);  // three decoders leave 5 ids for prefill
        mixed += s.decode_tokens > 0 && s.prefill_tokens > 0;
        prefill += s.prefill_tokens;
    }
    CHECK(prefill == 150 + 3 * 5);
    CHECK(mixed >= 150 / 8);  // the long prompt went in pieces next to the decoding requests
    CHECK(engine.stats().mixed_steps == mixed);
    CHECK(engine.stats().prefilled_tokens == prefill);
    CHECK(engine.stats().steps == static_cast<std::int64_t>(steps.size()));
}

TEST_CASE("image blocks are never split across steps and image requests stay exact", "[engine]") {
    const Fixture& f = fixture();
    const Model<float>& model = f.model;
    const Gemma4Config& c = model.config();
    const std::int64_t P = c.vision.patch_values();
    auto fill = [](std::size_t n, double phase) {
        std::vector<float> v(n);
        for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(0.5 + 0.5 * std::sin(phase + 0.37 * static_cast<double>(i)));
        return v;
    };
    std::vector<ImageInput<float>> images_a = {{fill(static_cast<std::size_t>(4 * P), 0.1), {0, 0, 1, 0, 0, 1, 1, 1}}};
    std::vector<ImageInput<float>> images_b = {{fill(static_cast<std::size_t>(3 * P), 0.7), {0, 0, 1, 0, 2, 0}},
                                               {fill(static_cast<std::size_t>(4 * P), 1.9), {0, 0, 1, 0, 0, 1, 1, 1}}};
    const std::int64_t tokens_a[1] = {4}, tokens_b[2] = {3, 4};
    const auto& t = c.tokens;
    const auto ids_a = expand_placeholders(concat(prompt_ids(5, 4), {t.image, 60, 61, 62}), t, tokens_a, {});
    const auto ids_b = expand_placeholders(concat(concat(prompt_ids(6, 3), {t.image, 70}), {t.image, 71, 72, 73}), t, tokens_b, {});
    const SoftTokenPlan<float> plan_a = plan_soft_tokens<float>(model, ids_a, images_a, {});
    const SoftTokenPlan<float> plan_b = plan_soft_tokens<float>(model, ids_b, images_b, {});
    const auto expected_a = lone(model, ids_a, greedy(12), &plan_a);
    const auto expected_b = lone(model, ids_b, greedy(12), &plan_b);

    // A step of 5 ids: a chunk boundary would fall inside the 4- and 6-id blocks (with <|image>/<image|>).
    StepLog log;
    Engine<float> engine(model, &f.tokenizer, {.step_tokens = 5, .on_step = log.hook()});
    EngineRequest<float> a = request(ids_a, greedy(12)), b = request(ids_b, greedy(12));
    a.images = images_a;
    b.images = images_b;
    const RequestHandle ha = engine.submit(std::move(a)), hb = engine.submit(std::move(b));
    check_same(ha.wait(), expected_a);
    check_same(hb.wait(), expected_b);
    // Both prompts (and nothing else) were prefilled; a forward step would have rejected a split block.
    CHECK(engine.stats().prefilled_tokens == static_cast<std::int64_t>(ids_a.size() + ids_b.size()));
    CHECK(engine.stats().prefix_entries == 0);  // prompts with soft tokens are not kept for reuse

    EngineRequest<float> missing = request(ids_a, greedy(2));  // placeholders without images
    REQUIRE_THROWS_AS(engine.submit(std::move(missing)), InvalidArgument);
}

TEST_CASE("a request reuses a cached prompt prefix (longer than the window) exactly", "[engine][prefix]") {
    const Model<float>& model = fixture().model;
    REQUIRE(model.config().sliding_window == 8);
    Engine<float> engine(model, &fixture().tokenizer, {.step_tokens = 16, .prefix_cache_entries = 2});
    const auto system = prompt_ids(3, 45);  // several windows and a partial page
    const auto first = engine.submit(request(system, greedy(6))).wait();
    check_same(first, lone(model, system, greedy(6)));
    CHECK(first.stats.reused_tokens == 0);
    CHECK(engine.stats().prefix_entries == 1);
    CHECK(engine.stats().prefix_misses == 1);

    const auto question = concat(system, prompt_ids(9, 12));
    const std::int64_t prefilled_before = engine.stats().prefilled_tokens;
    const auto second = engine.submit(request(question, greedy(10))).wait();
    check_same(second, lone(model, question, greedy(10)));
    CHECK(second.stats.reused_tokens == 45);
    CHECK(engine.stats().prefilled_tokens - prefilled_before == 12);  // only the new ids
    // A seeded sampled request over the reused prefix draws exactly the lone session's tokens.
    const auto other = concat(system, prompt_ids(10, 20));
    const auto sampled = engine.submit(request(other, seeded(20, 7))).wait();
    check_same(sampled, lone(model, other, seeded(20, 7)));
    CHECK(sampled.stats.reused_tokens == 45);
    EngineStats s = engine.stats();
    CHECK(s.prefix_hits == 2);
    CHECK(s.prefix_reused_tokens == 90);
    CHECK(s.prefix_entries == 2);  // the bound
    CHECK(s.kv_pages_in_use == s.prefix_cache_pages);
    CHECK(s.kv_pages_in_use > 0);

    // Two more distinct prompts push `system` and `question` out (least recently used first).
    engine.submit(request(prompt_ids(11, 30), greedy(2))).wait();
    engine.submit(request(prompt_ids(12, 30), greedy(2))).wait();
    s = engine.stats();
    CHECK(s.prefix_entries == 2);
    const auto again = engine.submit(request(concat(system, {40, 41}), greedy(3))).wait();
    CHECK(again.stats.reused_tokens == 0);
    check_same(again, lone(model, concat(system, {40, 41}), greedy(3)));
    CHECK(engine.stats().prefix_entries == 2);
    CHECK(engine.stats().prefix_misses == s.prefix_misses + 1);
}

/// n ids from `seed` without the BOS that prompt_ids starts with: a prompt's continuation.
std::vector<std::int32_t> tail_ids(int seed, std::size_t n) {
    auto ids = prompt_ids(seed, n + 1);
    ids.erase(ids.begin());
    return ids;
}

TEST_CASE("a prompt sharing a page or more with a kept one reuses the shared ids, where the window is still held", "[engine][prefix]") {
    const Model<float>& model = fixture().model;
    const std::int64_t window = model.config().sliding_window;
    REQUIRE(window == 8);
    Engine<float> engine(model, &fixture().tokenizer, {.step_tokens = 16, .prefix_cache_entries = 8});
    const auto system = prompt_ids(40, 40);
    const auto q1 = tail_ids(41, 10), q2 = tail_ids(42, 10);
    REQUIRE(q1[0] != q2[0]);  // the two prompts part right after `system`
    const auto first = concat(system, q1), second = concat(system, q2);
    check_same(engine.submit(request(first, greedy(4))).wait(), lone(model, first, greedy(4)));
    CHECK(engine.stats().prefix_misses == 1);

    // 40 shared ids of a 50-id prompt: the fork is cut back to 40, whose window (positions
    // 33-39) the kept state still holds.
    std::int64_t prefilled = engine.stats().prefilled_tokens;
    const EngineResult r2 = engine.submit(request(second, greedy(6))).wait();
    check_same(r2, lone(model, second, greedy(6)));
    CHECK(r2.stats.reused_tokens == 40);
    CHECK(engine.stats().prefilled_tokens - prefilled == 10);
    // Seeded sampling over a cut-back prefix draws the lone session's tokens too.
    const auto third = concat(system, tail_ids(43, 25));
    const EngineResult r3 = engine.submit(request(third, seeded(12, 5))).wait();
    check_same(r3, lone(model, third, seeded(12, 5)));
    CHECK(r3.stats.reused_tokens == 40);

    // A kept state long past the point where a prompt parts from it no longer holds the window
    // there: not reused.
    const auto short_system = prompt_ids(44, 20);
    const auto long_prompt = concat(short_system, tail_ids(45, 60));
    check_same(engine.submit(request(long_prompt, greedy(2))).wait(), lone(model, long_prompt, greedy(2)));
    const auto parted = concat(short_system, tail_ids(46, 5));
    REQUIRE(parted[20] != long_prompt[20]);
    const EngineResult r4 = engine.submit(request(parted, greedy(3))).wait();
    check_same(r4, lone(model, parted, greedy(3)));
    CHECK(r4.stats.reused_tokens == 0);

    // Fewer shared ids than a page are not reused.
    const auto brief = concat(prompt_ids(40, 12), tail_ids(47, 30));
    REQUIRE(brief[12] != system[12]);
    CHECK(engine.submit(request(brief, greedy(2))).wait().stats.reused_tokens == 0);

    const EngineStats s = engine.stats();
    CHECK(s.prefix_hits == 2);
    CHECK(s.prefix_reused_tokens == 80);
    CHECK(s.kv_pages_in_use == s.prefix_cache_pages);
}

TEST_CASE("the next turn of a conversation reuses its history, the ids it generated included", "[engine][prefix]") {
    const Model<float>& model = fixture().model;
    Engine<float> engine(model, &fixture().tokenizer, {.step_tokens = 16, .prefix_cache_entries = 4});
    const auto turn1 = prompt_ids(50, 30);
    const EngineResult r1 = engine.submit(request(turn1, endless(12))).wait();
    check_same(r1, lone(model, turn1, endless(12)));
    REQUIRE(r1.ids.size() == 12);
    // Kept: the prompt, and the conversation (41 ids), which no longer holds the window page of
    // positions 16-31 that a prompt parting from it at 30 would need.
    CHECK(engine.stats().prefix_entries == 2);
    // The next prompt repeats the reply and adds a turn: all but the last generated id (never
    // fed) come from the cache.
    const auto turn2 = concat(concat(turn1, r1.ids), tail_ids(51, 9));
    const std::int64_t prefilled = engine.stats().prefilled_tokens;
    const EngineResult r2 = engine.submit(request(turn2, greedy(8))).wait();
    check_same(r2, lone(model, turn2, greedy(8)));
    CHECK(r2.stats.reused_tokens == 30 + 11);
    CHECK(engine.stats().prefilled_tokens - prefilled == 1 + 9);
    // The second prompt starts with the first conversation and holds the same window pages: it
    // replaces it. Kept: the first prompt, the second, and the second conversation.
    const EngineStats s = engine.stats();
    CHECK(s.prefix_entries == 3);
    CHECK(s.kv_pages_in_use == s.prefix_cache_pages);

    // A short conversation holds every page its prompt holds: it replaces the prompt's entry.
    Engine<float> short_turns(model, &fixture().tokenizer, {.step_tokens = 16, .prefix_cache_entries = 4});
    const auto brief = prompt_ids(52, 17);
    const EngineResult r3 = short_turns.submit(request(brief, endless(2))).wait();
    check_same(r3, lone(model, brief, endless(2)));
    CHECK(short_turns.stats().prefix_entries == 1);
    const auto next = concat(concat(brief, r3.ids), tail_ids(53, 4));
    CHECK(short_turns.submit(request(next, greedy(2))).wait().stats.reused_tokens == 17 + 1);
}

TEST_CASE("requests that arrive together with a shared prompt prefill it once", "[engine][prefix]") {
    const Model<float>& model = fixture().model;
    const auto system = prompt_ids(60, 40);
    std::vector<std::vector<std::int32_t>> prompts;
    for (int i = 0; i < 3; ++i) prompts.push_back(concat(system, tail_ids(61, 10)));  // the same prompt three times
    for (int i = 0; i < 3; ++i) prompts.push_back(concat(system, tail_ids(62 + i, 10)));
    std::vector<GenerationResult> expected;
    for (std::size_t i = 0; i < prompts.size(); ++i) expected.push_back(lone(model, prompts[i], i % 2 ? seeded(9, 3 + i) : greedy(9)));

    /// A running request that holds the scheduler in its callback until release(), so that the
    /// requests submitted meanwhile are admitted together, before any of their prompts is kept.
    struct SchedulerHold {
        std::atomic<bool> released{false};
        RequestHandle handle;
        explicit SchedulerHold(Engine<float>& engine) {
            GenerateOptions holder = endless(3);
            holder.on_token = [this](std::int32_t, std::string_view) {
                while (!released) std::this_thread::sleep_for(100us);
                return true;
            };
            handle = engine.submit(request(prompt_ids(69, 5), holder));
            wait_until([&] { return engine.stats().generated_tokens >= 1; });
        }
    };

    SECTION("the first is prefilled, the others wait for its state") {
        Engine<float> engine(model, &fixture().tokenizer, {.max_sequences = 8, .step_tokens = 16, .prefix_cache_entries = 8});
        SchedulerHold hold(engine);
        const std::int64_t prefilled = engine.stats().prefilled_tokens;
        std::vector<RequestHandle> handles;
        for (std::size_t i = 0; i < prompts.size(); ++i)
            handles.push_back(engine.submit(request(prompts[i], i % 2 ? seeded(9, 3 + i) : greedy(9))));
        hold.released = true;
        for (std::size_t i = 0; i < prompts.size(); ++i) {
            INFO("request " << i);
            const EngineResult r = handles[i].wait();
            check_same(r, expected[i]);
            CHECK(r.stats.reused_tokens == (i == 0 ? 0 : i < 3 ? 49 : 40));
        }
        hold.handle.wait();
        // 50 ids once, then one id of each repeat and ten of each other question.
        CHECK(engine.stats().prefilled_tokens - prefilled == 50 + 2 * 1 + 3 * 10);
        const EngineStats s = engine.stats();
        CHECK(s.prefix_hits == 5);
        CHECK(s.kv_pages_in_use == s.prefix_cache_pages);
    }

    SECTION("when the first is cancelled during its prefill, the others prefill their own") {
        std::atomic<bool> cancel_first{false};
        // The first step that holds more than the holder's chunk prefills the first one's first
        // chunk (the others wait for it) beside the holder's next id.
        Engine<float> engine(model, &fixture().tokenizer,
                             {.max_sequences = 8, .step_tokens = 16, .prefix_cache_entries = 8, .on_step = [&](const EngineStepInfo& step) {
                                  if (step.sequences > 1 && step.prefill_tokens > 0) cancel_first = true;
                              }});
        SchedulerHold hold(engine);
        std::vector<RequestHandle> handles;
        GenerateOptions first = greedy(9);
        first.cancel = &cancel_first;
        handles.push_back(engine.submit(request(prompts[0], first)));
        for (std::size_t i = 3; i < prompts.size(); ++i) handles.push_back(engine.submit(request(prompts[i], i % 2 ? seeded(9, 3 + i) : greedy(9))));
        hold.released = true;
        const EngineResult r0 = handles[0].wait();
        CHECK(r0.finish == FinishReason::Cancelled);
        CHECK(r0.ids.empty());
        for (std::size_t k = 1; k < handles.size(); ++k) {
            INFO("request " << k + 2);
            const EngineResult r = handles[k].wait();
            check_same(r, expected[k + 2]);
            CHECK(r.stats.reused_tokens == 0);  // nothing was kept to wait for
        }
        hold.handle.wait();
        const EngineStats s = engine.stats();
        CHECK(s.prefix_hits == 0);
        CHECK(s.requests_cancelled == 1);
        CHECK(s.active_sequences == 0);
        CHECK(s.kv_pages_in_use == s.prefix_cache_pages);
    }
}

TEST_CASE("requests that arrive together with the same prompt prefill it once, without a prefix cache too, whatever its length", "[engine][prefix]") {
    const Model<float>& model = fixture().model;
    const std::int64_t window = model.config().sliding_window;
    for (const std::int32_t entries : {0, 8}) {
        // Every length modulo a page around the window's edge: at one of them the sliding page the
        // last prompt id sees is dropped by the time the whole prompt is in the cache.
        for (std::int64_t length = 40; length < 40 + 16; ++length) {
            INFO("prefix cache entries: " << entries << ", prompt of " << length << " ids, sliding window " << window);
            const auto prompt = prompt_ids(80, static_cast<std::size_t>(length));
            Engine<float> engine(model, &fixture().tokenizer, {.max_sequences = 8, .step_tokens = 16, .prefix_cache_entries = entries});
            // A request that holds the scheduler in its callback, so that the three are admitted together.
            std::atomic<bool> released{false};
            GenerateOptions holder = endless(3);
            holder.on_token = [&](std::int32_t, std::string_view) {
                while (!released) std::this_thread::sleep_for(100us);
                return true;
            };
            const RequestHandle hold = engine.submit(request(prompt_ids(69, 5), holder));
            wait_until([&] { return engine.stats().generated_tokens >= 1; });
            const std::int64_t prefilled = engine.stats().prefilled_tokens;
            std::vector<GenerateOptions> options = {greedy(6), seeded(6, 11), seeded(6, 12)};
            std::vector<RequestHandle> handles;
            for (const GenerateOptions& o : options) handles.push_back(engine.submit(request(prompt, o)));
            released = true;
            for (std::size_t i = 0; i < handles.size(); ++i) {
                const EngineResult r = handles[i].wait();
                check_same(r, lone(model, prompt, options[i]));
                CHECK(r.stats.reused_tokens == (i == 0 ? 0 : length - 1));
            }
            hold.wait();
            CHECK(engine.stats().prefilled_tokens - prefilled == length + 2);  // once, then each other's last id
            const EngineStats s = engine.stats();
            CHECK(s.prefix_hits == (entries ? 2 : 0));
            CHECK(s.kv_pages_in_use == s.prefix_cache_pages);
            if (entries == 0) CHECK(s.kv_pages_in_use == 0);
        }
    }
    // Without a prefix cache, a request that arrives when another has already prefilled their
    // shared prompt (it is decoding now) forks that one's sequence at once.
    Engine<float> engine(model, &fixture().tokenizer, {.step_tokens = 16, .prefix_cache_entries = 0});
    const auto prompt = prompt_ids(81, 40);
    std::atomic<bool> released{false};
    GenerateOptions first = endless(4);
    first.on_token = [&](std::int32_t, std::string_view) {
        while (!released) std::this_thread::sleep_for(100us);
        return true;
    };
    const RequestHandle a = engine.submit(request(prompt, first));
    wait_until([&] { return engine.stats().generated_tokens >= 1; });  // its prompt is in, its first id sampled
    const RequestHandle b = engine.submit(request(prompt, seeded(5, 3)));
    released = true;
    const EngineResult rb = b.wait();
    check_same(rb, lone(model, prompt, seeded(5, 3)));
    CHECK(rb.stats.reused_tokens == 39);
    a.wait();
    CHECK(engine.stats().prefilled_tokens == 40 + 1);
    CHECK(engine.stats().kv_pages_in_use == 0);
}

TEST_CASE("cancellation by handle, flag and callback frees the request's pages", "[engine]") {
    const Model<float>& model = fixture().model;
    for (const std::int32_t entries : {0, 4}) {
        INFO("prefix cache entries: " << entries);
        Engine<float> engine(model, &fixture().tokenizer, {.step_tokens = 16, .prefix_cache_entries = entries});
        const auto prompt = prompt_ids(21, 40);

        // By handle, while generating.
        const RequestHandle h = engine.submit(request(prompt, endless(200)));
        wait_until([&] { return engine.stats().generated_tokens >= 5; });
        h.cancel();
        const EngineResult r = h.wait();
        CHECK(r.finish == FinishReason::Cancelled);
        CHECK(r.ids.size() < 200);
        EngineStats s = engine.stats();
        CHECK(s.kv_pages_in_use == s.prefix_cache_pages);
        if (entries == 0) CHECK(s.kv_pages_in_use == 0);
        CHECK(s.requests_cancelled == 1);

        // By the callback: the ids up to and including the refused one, as a Session gives.
        int calls = 0;
        GenerateOptions o = endless(50);
        o.on_token = [&calls](std::int32_t, std::string_view) { return ++calls < 5; };
        const EngineResult by_callback = engine.submit(request(prompt_ids(22, 30), o)).wait();
        int session_calls = 0;
        GenerateOptions lone_options = endless(50);
        lone_options.on_token = [&session_calls](std::int32_t, std::string_view) { return ++session_calls < 5; };
        check_same(by_callback, lone(model, prompt_ids(22, 30), lone_options));
        CHECK(by_callback.ids.size() == 5);

        // By the flag, before it starts.
        std::atomic<bool> cancel{true};
        GenerateOptions flagged = greedy(50);
        flagged.cancel = &cancel;
        const EngineResult by_flag = engine.submit(request(prompt_ids(23, 10), flagged)).wait();
        CHECK(by_flag.finish == FinishReason::Cancelled);
        CHECK(by_flag.ids.empty());

        s = engine.stats();
        CHECK(s.requests_cancelled == 3);
        CHECK(s.active_sequences == 0);
        CHECK(s.kv_pages_in_use == s.prefix_cache_pages);
        if (entries == 0) CHECK(s.kv_pages_in_use == 0);
        if (entries == 0) CHECK(s.kv_bytes_in_use == 0);
    }
}

TEST_CASE("a throwing callback fails its request only", "[engine]") {
    const Model<float>& model = fixture().model;
    Engine<float> engine(model, &fixture().tokenizer, {.step_tokens = 16, .prefix_cache_entries = 0});
    GenerateOptions bad = greedy(30);
    int calls = 0;
    bad.on_token = [&calls](std::int32_t, std::string_view) -> bool {
        if (++calls == 3) throw std::runtime_error("client went away");
        return true;
    };
    const auto good_prompt = prompt_ids(31, 20);
    const RequestHandle failing = engine.submit(request(prompt_ids(30, 20), bad));
    const RequestHandle fine = engine.submit(request(good_prompt, greedy(30)));
    const EngineResult r = failing.wait();
    REQUIRE(r.error);
    REQUIRE_THROWS_WITH(std::rethrow_exception(r.error), "client went away");
    CHECK(r.ids.size() == 3);
    check_same(fine.wait(), lone(model, good_prompt, greedy(30)));
    // The scheduler lives on.
    check_same(engine.submit(request(good_prompt, greedy(4))).wait(), lone(model, good_prompt, greedy(4)));
    CHECK(engine.stats().kv_pages_in_use == 0);
}

TEST_CASE("the queue bound rejects, the KV budget makes requests wait, the context is checked", "[engine][errors]") {
    const Fixture& f = fixture();
    const Model<float>& model = f.model;

    SECTION("queue bound") {
        Engine<float> engine(model, &f.tokenizer, {.max_sequences = 1, .max_queue = 2, .prefix_cache_entries = 0});
        std::atomic<bool> release{false}, blocked{false};
        GenerateOptions blocking = endless(5);
        blocking.on_token = [&](std::int32_t, std::string_view) {
            blocked = true;
            while (!release) std::this_thread::sleep_for(100us);
            return true;
        };
        const RequestHandle running = engine.submit(request(prompt_ids(40, 6), blocking));
        wait_until([&] { return blocked.load(); });  // admitted; the scheduler now waits in its callback
        const RequestHandle q1 = engine.submit(request(prompt_ids(41, 6), greedy(3)));
        const RequestHandle q2 = engine.submit(request(prompt_ids(42, 6), greedy(3)));
        CHECK(engine.stats().queue_depth == 2);
        REQUIRE_THROWS_AS(engine.submit(request(prompt_ids(43, 6), greedy(3))), QueueFullError);
        REQUIRE_THROWS_WITH(engine.submit(request(prompt_ids(43, 6), greedy(3))), Catch::Contains("2 requests are already waiting (max_queue)"));
        release = true;
        CHECK(running.wait().ids.size() == 5);
        check_same(q1.wait(), lone(model, prompt_ids(41, 6), greedy(3)));
        check_same(q2.wait(), lone(model, prompt_ids(42, 6), greedy(3)));
        CHECK(engine.stats().requests_rejected == 2);
        CHECK(engine.stats().requests_submitted == 3);
    }

    SECTION("KV budget") {
        std::size_t need = 0;
        {
            Engine<float> probe(model, nullptr);
            need = probe.kv_bytes_needed(30, 20);
        }
        REQUIRE(need > 0);
        StepLog log;
        // Room for one such request at a time, not two.
        const Engine<float>* self = nullptr;
        std::size_t most_in_use = 0, most_reserved = 0;
        auto hook = log.hook();
        Engine<float> engine(model, &f.tokenizer,
                             {.kv_bytes = need + need / 2, .prefix_cache_entries = 0, .on_step = [&](const EngineStepInfo& info) {
                                  hook(info);
                                  const EngineStats s = self->stats();
                                  most_in_use = std::max(most_in_use, s.kv_bytes_in_use);
                                  most_reserved = std::max(most_reserved, s.kv_bytes_reserved);
                              }});
        self = &engine;  // before the first submit, so before the first step
        std::vector<RequestHandle> handles;
        for (int i = 0; i < 3; ++i) handles.push_back(engine.submit(request(prompt_ids(60 + i, 30), greedy(20))));
        for (int i = 0; i < 3; ++i) {
            const EngineResult r = handles[static_cast<std::size_t>(i)].wait();
            check_same(r, lone(model, prompt_ids(60 + i, 30), greedy(20)));
            if (i > 0) CHECK(r.stats.queue_seconds > 0);
        }
        for (const EngineStepInfo& s : log.get()) CHECK(s.sequences == 1);  // one at a time
        engine.shutdown();  // joins the scheduler: its hook's maxima are final
        CHECK(most_in_use > 0);
        CHECK(most_in_use <= need);  // the reservation bounds what a request holds
        CHECK(most_reserved == need);
        CHECK(engine.stats().kv_bytes_in_use == 0);
        // A request that could never fit is refused at once.
        Engine<float> small(model, &f.tokenizer, {.kv_bytes = need});
        REQUIRE_THROWS_AS(small.submit(request(prompt_ids(70, 200), greedy(20))), ContextLengthError);
        REQUIRE_THROWS_WITH(small.submit(request(prompt_ids(70, 200), greedy(20))), Catch::Contains("(kv_bytes)"));
    }

    SECTION("KV budget shared with the prefix cache") {
        std::size_t need = 0;
        {
            Engine<float> probe(model, nullptr);
            need = probe.kv_bytes_needed(30, 20);
        }
        // Room for two running requests; kept prompts take what is left and are evicted before a request waits.
        const std::size_t budget = 2 * need + need / 4;
        Engine<float> engine(model, &f.tokenizer, {.kv_bytes = budget, .prefix_cache_entries = 8});
        for (int i = 0; i < 2; ++i)  // one at a time: each prompt is kept, and each conversation as the budget allows
            check_same(engine.submit(request(prompt_ids(100 + i, 30), greedy(20))).wait(), lone(model, prompt_ids(100 + i, 30), greedy(20)));
        EngineStats s = engine.stats();
        REQUIRE(s.prefix_entries >= 2);
        CHECK(s.kv_bytes_reserved <= budget);
        CHECK(s.kv_pages_in_use == s.prefix_cache_pages);
        CHECK(s.kv_bytes_reserved > 0);
        // Two at once need the whole budget but those two kept prompts' share: both are evicted.
        const RequestHandle c = engine.submit(request(prompt_ids(102, 30), greedy(20)));
        const RequestHandle d = engine.submit(request(prompt_ids(103, 30), greedy(20)));
        check_same(c.wait(), lone(model, prompt_ids(102, 30), greedy(20)));
        check_same(d.wait(), lone(model, prompt_ids(103, 30), greedy(20)));
        s = engine.stats();
        CHECK(s.kv_bytes_reserved <= budget);
        CHECK(s.kv_pages_in_use == s.prefix_cache_pages);
        const auto first_again = concat(prompt_ids(100, 30), {50, 51, 52});
        const EngineResult r = engine.submit(request(first_again, greedy(5))).wait();
        check_same(r, lone(model, first_again, greedy(5)));
        CHECK(r.stats.reused_tokens == 0);  // it was evicted
        // Alone again, a prompt is kept and a request extending it reuses it.
        check_same(engine.submit(request(prompt_ids(106, 30), greedy(20))).wait(), lone(model, prompt_ids(106, 30), greedy(20)));
        const auto last = concat(prompt_ids(106, 30), {50, 51, 52});
        const EngineResult reused = engine.submit(request(last, greedy(5))).wait();
        check_same(reused, lone(model, last, greedy(5)));
        CHECK(reused.stats.reused_tokens == 30);
    }
}

TEST_CASE("shutdown lets requests run for the grace period, then cancels the rest and joins", "[engine]") {
    const Model<float>& model = fixture().model;
    auto slow = [](std::int64_t n) {
        GenerateOptions o = endless(n);
        o.on_token = [](std::int32_t, std::string_view) {
            std::this_thread::sleep_for(5ms);
            return true;
        };
        return o;
    };
    Engine<float> engine(model, nullptr, {.max_sequences = 2});
    const RequestHandle quick = engine.submit(request(prompt_ids(90, 8), slow(3)));
    const RequestHandle long1 = engine.submit(request(prompt_ids(91, 8), slow(200)));
    const RequestHandle long2 = engine.submit(request(prompt_ids(92, 8), slow(200)));
    const RequestHandle queued = engine.submit(request(prompt_ids(93, 8), slow(200)));
    engine.shutdown(300ms);
    CHECK(quick.done());
    CHECK(long1.done());
    CHECK(long2.done());
    CHECK(queued.done());
    CHECK(quick.wait().finish == FinishReason::MaxTokens);  // finished within the grace period
    CHECK(long1.wait().finish == FinishReason::Cancelled);
    CHECK(long1.wait().ids.size() < 200);
    CHECK(long2.wait().finish == FinishReason::Cancelled);
    CHECK(queued.wait().finish == FinishReason::Cancelled);
    REQUIRE_THROWS_AS(engine.submit(request(prompt_ids(94, 8), greedy(2))), QueueFullError);
    REQUIRE_THROWS_WITH(engine.submit(request(prompt_ids(94, 8), greedy(2))), Catch::Contains("shutting down"));
    const EngineStats s = engine.stats();
    CHECK(s.requests_finished == 4);
    CHECK(s.requests_cancelled == 3);
    CHECK(s.kv_pages_in_use == 0);  // the prefix cache is emptied too
    engine.shutdown();              // idempotent
}

TEST_CASE("speculating requests verify their drafts together in one step and equal lone plain sessions", "[engine][speculative]") {
    const Model<float>& model = fixture().model;
    // Repetitive prompts so that prompt lookup finds matches; past the window (8).
    std::vector<std::vector<std::int32_t>> prompts;
    for (int i = 0; i < 6; ++i) {
        std::vector<std::int32_t> p = prompt_ids(i, 9);
        for (int repeat = 0; repeat < 3; ++repeat) p.insert(p.end(), p.begin() + 1, p.begin() + 9);
        prompts.push_back(p);
    }
    PromptLookupDrafter lookup_a(3), lookup_b(2);
    std::vector<GenerateOptions> plain, spec;
    for (int i = 0; i < 6; ++i) {
        GenerateOptions o = i % 3 == 2 ? seeded(30, 500 + static_cast<std::uint64_t>(i)) : endless(30);
        plain.push_back(o);
        o.speculative = {.drafter = i % 2 ? &lookup_a : &lookup_b, .draft_max = 1 + i};
        spec.push_back(o);
    }
    std::vector<GenerationResult> expected;
    for (int i = 0; i < 6; ++i) expected.push_back(lone(model, prompts[static_cast<std::size_t>(i)], plain[static_cast<std::size_t>(i)]));
    // The oracle replays the first request's plain output: all of its drafts are accepted.
    std::vector<std::int32_t> replay = concat(prompts[0], expected[0].ids);
    OracleDrafter oracle(replay);
    spec[0].speculative = {.drafter = &oracle, .draft_max = 4};
    // Two requests draft with an MTP assistant (reading the engine's cache and hidden states).
    const auto assistant_dir = test::temp_dir("engine_assistant");
    write_random_assistant_checkpoint(assistant_dir, assistant_config_for(model.config()), {.seed = 4});
    MtpDrafter<float> mtp(std::make_shared<const Assistant<float>>(Assistant<float>::load(assistant_dir, model, ModelOptions{2})));
    spec[4].speculative = {.drafter = &mtp, .draft_max = 3};
    spec[5].speculative = {.drafter = &mtp, .draft_max = 5};

    StepLog log;
    Engine<float> engine(model, &fixture().tokenizer, {.max_sequences = 6, .step_tokens = 24, .on_step = log.hook()});
    std::vector<RequestHandle> handles;
    for (int i = 0; i < 6; ++i) handles.push_back(engine.submit(request(prompts[static_cast<std::size_t>(i)], spec[static_cast<std::size_t>(i)])));
    std::int64_t drafted = 0, accepted = 0;
    for (int i = 0; i < 6; ++i) {
        const EngineResult r = handles[static_cast<std::size_t>(i)].wait();
        INFO("request " << i);
        check_same(r, expected[static_cast<std::size_t>(i)]);
        CHECK(r.stats.accepted_tokens <= r.stats.drafted_tokens);
        drafted += r.stats.drafted_tokens, accepted += r.stats.accepted_tokens;
        if (i == 0) {
            CHECK(r.stats.drafted_tokens > 0);
            CHECK(r.stats.accepted_tokens == r.stats.drafted_tokens);
        }
    }
    const EngineStats s = engine.stats();
    CHECK(s.drafted_tokens == drafted);
    CHECK(s.accepted_tokens == accepted);
    CHECK(accepted > 0);
    // Drafts of several requests went through one forward step.
    bool shared_step = false;
    for (const EngineStepInfo& step : log.get()) shared_step = shared_step || step.drafting_sequences >= 2;
    CHECK(shared_step);
    CHECK(s.kv_pages_in_use == s.prefix_cache_pages);  // the rolled back pages went back to the pool
}

TEST_CASE("a failing drafter fails its requests only", "[engine][speculative]") {
    struct Broken final : Drafter {
        void draft(std::span<const DraftRequest>, std::span<std::vector<std::int32_t>>) override { throw std::runtime_error("drafter broke"); }
    } broken;
    const Model<float>& model = fixture().model;
    Engine<float> engine(model, &fixture().tokenizer, {.max_sequences = 4});
    GenerateOptions bad = endless(8);
    bad.speculative = {.drafter = &broken};
    const auto h1 = engine.submit(request(prompt_ids(1, 12), bad));
    const auto h2 = engine.submit(request(prompt_ids(2, 12), endless(8)));
    const EngineResult r1 = h1.wait(), r2 = h2.wait();
    REQUIRE(r1.error);
    CHECK_THROWS_WITH(std::rethrow_exception(r1.error), Catch::Contains("drafter broke"));
    check_same(r2, lone(model, prompt_ids(2, 12), endless(8)));
}

namespace {

/// Fixed-length replies (no end id), greedy or seeded.
GenerateOptions turn_options(bool sampled, std::int64_t n) {
    GenerateOptions o = sampled ? seeded(n, 77) : greedy(n);
    o.end_ids = {-1};
    return o;
}

EngineRequest<float> resumed_request(std::vector<std::int32_t> prompt, GenerateOptions o, const std::filesystem::path& from,
                                     const std::filesystem::path& to = {}) {
    EngineRequest<float> r = request(std::move(prompt), std::move(o));
    r.resume_from = from;
    r.save_to = to;
    return r;
}

/// Requests that keep the engine busy alongside the one under test, and what they must give.
struct Bystanders {
    std::vector<RequestHandle> handles;
    std::vector<GenerationResult> expected;
    void submit(Engine<float>& engine, int seed) {
        for (int i = 0; i < 3; ++i) {
            const auto p = prompt_ids(seed + i, 5 + static_cast<std::size_t>(7 * i));
            const GenerateOptions o = i == 1 ? seeded(9, 5) : greedy(9);
            Session<float> alone(engine.model(), &fixture().tokenizer, {.kv_dtype = engine.options().kv_dtype});
            expected.push_back(alone.generate(std::span<const std::int32_t>(p), o));
            handles.push_back(engine.submit(request(p, o)));
        }
    }
    void check() {
        for (std::size_t i = 0; i < handles.size(); ++i) check_same(handles[i].wait(), expected[i]);
    }
};

void check_no_pages_left(const Engine<float>& engine) {
    const EngineStats s = engine.stats();
    CHECK(s.active_sequences == 0);
    CHECK(s.kv_pages_in_use == s.prefix_cache_pages);
    if (engine.options().prefix_cache_entries == 0) CHECK(s.kv_bytes_in_use == 0);
}

}  // namespace

TEST_CASE("a conversation saved by one engine resumes in another, and through sessions, with the tokens of never stopping",
          "[engine][engine-file]") {
    const Model<float>& model = fixture().model;
    const auto dir = test::temp_dir("engine_files");
    for (const bool sampled : {false, true})
        for (const KVDtype kv : {KVDtype::Float, KVDtype::Int8}) {
            INFO("sampled " << sampled << ", int8 KV " << (kv == KVDtype::Int8));
            const auto p1 = prompt_ids(40, 21), p2 = prompt_ids(41, 6), p3 = prompt_ids(42, 5), p4 = prompt_ids(43, 4);
            // The conversation of a session that never stops: four turns, well past the window of 8.
            Session<float> never(model, &fixture().tokenizer, {.kv_dtype = kv});
            std::vector<GenerationResult> turns;
            for (const auto* p : {&p1, &p2, &p3, &p4})
                turns.push_back(never.generate(std::span<const std::int32_t>(*p), turn_options(sampled, 11)));
            REQUIRE(never.cached_tokens() > 4 * model.config().sliding_window);

            const EngineOptions eo{.max_sequences = 3, .step_tokens = 8, .kv_dtype = kv, .prefix_cache_entries = 0};
            // Turn 1 in one engine, saved when it finishes, among other requests.
            {
                Engine<float> first(model, &fixture().tokenizer, eo);
                Bystanders others;
                others.submit(first, 50);
                EngineRequest<float> r = request(p1, turn_options(sampled, 11));
                r.save_to = dir / "turn1.g4s";
                const EngineResult got = first.submit(std::move(r)).wait();
                check_same(got, turns[0]);
                CHECK(got.saved);
                others.check();
                check_no_pages_left(first);
            }
            // Turn 2 resumes in a fresh engine (with other requests before and after it) and is saved again.
            Engine<float> second(model, &fixture().tokenizer, eo);
            Bystanders others;
            others.submit(second, 60);
            const RequestHandle h2 = second.submit(resumed_request(p2, turn_options(sampled, 11), dir / "turn1.g4s", dir / "turn2.g4s"));
            others.submit(second, 70);
            const EngineResult got2 = h2.wait();
            check_same(got2, turns[1]);
            CHECK(got2.saved);
            CHECK(got2.stats.reused_tokens == static_cast<std::int64_t>(p1.size() + turns[0].ids.size() - 1));
            CHECK(got2.stats.prompt_tokens == static_cast<std::int64_t>(p1.size() + turns[0].ids.size() + p2.size()));

            // Engine -> Session: turn 3 in a session loaded from the engine's file.
            Session<float> loaded(model, &fixture().tokenizer, {.kv_dtype = kv});
            loaded.load(dir / "turn2.g4s");
            const GenerationResult got3 = loaded.generate(std::span<const std::int32_t>(p3), turn_options(sampled, 11));
            CHECK(got3.ids == turns[2].ids);
            CHECK(got3.text == turns[2].text);
            loaded.save(dir / "turn3.g4s");

            // Session -> Engine: turn 4 in the engine, from the session's file.
            const EngineResult got4 = second.submit(resumed_request(p4, turn_options(sampled, 11), dir / "turn3.g4s")).wait();
            check_same(got4, turns[3]);
            CHECK_FALSE(got4.saved);
            others.check();
            second.shutdown();
            check_no_pages_left(second);
        }
}

namespace {
/// endless(40) whose callback cancels the request at its n-th token (`calls` counts them).
GenerateOptions cancelled_after(int n, int& calls) {
    GenerateOptions o = endless(40);
    o.on_token = [&calls, n](std::int32_t, std::string_view) { return ++calls < n; };
    return o;
}
}  // namespace

TEST_CASE("a request cancelled while generating saves where it stopped, and resumes with its pending id", "[engine][engine-file]") {
    const Model<float>& model = fixture().model;
    const auto dir = test::temp_dir("engine_files_cancel");
    const auto p1 = prompt_ids(44, 12), p2 = prompt_ids(45, 3);
    Engine<float> engine(model, &fixture().tokenizer, {.step_tokens = 8, .prefix_cache_entries = 4});
    int calls = 0;
    EngineRequest<float> r = request(p1, cancelled_after(7, calls));
    r.save_to = dir / "cancelled.g4s";
    const EngineResult stopped = engine.submit(std::move(r)).wait();
    REQUIRE(stopped.finish == FinishReason::Cancelled);
    REQUIRE(stopped.ids.size() == 7);
    CHECK(stopped.saved);
    CHECK_FALSE(stopped.error);

    // What a session that stopped the same way and continued gives.
    Session<float> never(model, &fixture().tokenizer);
    int session_calls = 0;
    never.generate(std::span<const std::int32_t>(p1), cancelled_after(7, session_calls));
    const GenerationResult next = never.generate(std::span<const std::int32_t>(p2), endless(9));
    check_same(engine.submit(resumed_request(p2, endless(9), dir / "cancelled.g4s")).wait(), next);
    // Its pending id alone is a prompt too.
    Session<float> loaded(model, &fixture().tokenizer);
    loaded.load(dir / "cancelled.g4s");
    const GenerationResult only_pending = loaded.generate(std::span<const std::int32_t>(), endless(5));
    check_same(engine.submit(resumed_request({}, endless(5), dir / "cancelled.g4s")).wait(), only_pending);
    engine.shutdown();
    check_no_pages_left(engine);
}

TEST_CASE("a request cancelled by shutdown is saved, and continues in a session and in another engine alike", "[engine][engine-file]") {
    const Model<float>& model = fixture().model;
    const auto dir = test::temp_dir("engine_files_shutdown");
    const auto p1 = prompt_ids(50, 9), p2 = prompt_ids(51, 3);
    Engine<float> engine(model, &fixture().tokenizer, {.step_tokens = 8, .prefix_cache_entries = 0});
    EngineRequest<float> r = request(p1, endless(200));
    r.save_to = dir / "parked.g4s";
    const RequestHandle h = engine.submit(std::move(r));
    wait_until([&] { return engine.stats().generated_tokens >= 5; });
    engine.shutdown();
    const EngineResult parked = h.wait();
    REQUIRE(parked.finish == FinishReason::Cancelled);
    CHECK(parked.saved);
    CHECK_FALSE(parked.error);
    check_no_pages_left(engine);

    Session<float> loaded(model, &fixture().tokenizer);
    loaded.load(dir / "parked.g4s");
    CHECK(loaded.history() == concat(p1, parked.ids));
    CHECK(loaded.cached_tokens() >= static_cast<std::int64_t>(loaded.history().size()) - 1);
    const GenerationResult next = loaded.generate(std::span<const std::int32_t>(p2), endless(6));
    Engine<float> other(model, &fixture().tokenizer, {.step_tokens = 8});
    check_same(other.submit(resumed_request(p2, endless(6), dir / "parked.g4s")).wait(), next);
}

TEST_CASE("bad session files and failed saves fail only their request, with typed errors", "[engine][engine-file][errors]") {
    const Model<float>& model = fixture().model;
    const auto dir = test::temp_dir("engine_files_bad");
    Session<float> s(model, &fixture().tokenizer);
    const auto p = prompt_ids(46, 14);
    s.generate(std::span<const std::int32_t>(p), endless(6));
    s.save(dir / "good.g4s");
    std::ifstream in(dir / "good.g4s", std::ios::binary);
    const std::string good((std::istreambuf_iterator<char>(in)), {});
    const auto write = [&](const std::string& name, const std::string& bytes) {
        std::ofstream(dir / name, std::ios::binary) << bytes;
        return dir / name;
    };
    const auto truncated = write("truncated.g4s", good.substr(0, good.size() - 9));
    std::string flipped = good;
    flipped[flipped.size() - 20] = static_cast<char>(flipped[flipped.size() - 20] ^ 0x10);
    const auto corrupted = write("corrupted.g4s", flipped);

    // Another model (another window), and this model with an Int8 cache.
    Gemma4Config other_config = model.config();
    other_config.sliding_window = 16;
    const auto other_dir = test::temp_dir("engine_files_other_model");
    write_random_checkpoint(other_dir, other_config, {.seed = 5});
    const Model<float> other = Model<float>::load(other_dir, ModelOptions{2});
    Session<float> o(other, nullptr);
    o.generate(std::span<const std::int32_t>(p), endless(2));
    o.save(dir / "other_model.g4s");
    Session<float> i8(model, nullptr, {.kv_dtype = KVDtype::Int8});
    i8.generate(std::span<const std::int32_t>(p), endless(2));
    i8.save(dir / "int8.g4s");
    Session<float> full(model, nullptr);
    full.generate(std::span<const std::int32_t>(p), endless(0));  // no pending id: the prompt must say something
    full.save(dir / "nothing_pending.g4s");

    Engine<float> engine(model, &fixture().tokenizer, {.step_tokens = 8, .context = 64, .prefix_cache_entries = 0});
    Bystanders others;
    others.submit(engine, 80);
    const auto submit_from = [&](const std::filesystem::path& f, std::vector<std::int32_t> prompt = prompt_ids(47, 3)) {
        engine.submit(resumed_request(std::move(prompt), greedy(4), f));
    };
    CHECK_THROWS_AS(submit_from(dir / "absent.g4s"), IoError);
    CHECK_THROWS_WITH(submit_from(truncated), Catch::StartsWith(truncated.string() + ": truncated"));
    CHECK_THROWS_AS(submit_from(truncated), FormatError);
    CHECK_THROWS_WITH(submit_from(corrupted), Catch::Contains("payload checksum mismatch"));
    CHECK_THROWS_AS(submit_from(corrupted), FormatError);
    CHECK_THROWS_WITH(submit_from(dir / "other_model.g4s"), Catch::Contains("text_config.sliding_window: 16 in the file, 8 in this model"));
    CHECK_THROWS_AS(submit_from(dir / "other_model.g4s"), ConfigError);
    CHECK_THROWS_WITH(submit_from(dir / "int8.g4s"), Catch::Contains("holds a Int8 KV cache"));
    CHECK_THROWS_AS(submit_from(dir / "int8.g4s"), InvalidArgument);
    CHECK_THROWS_AS(submit_from(dir / "nothing_pending.g4s", {}), InvalidArgument);
    CHECK_THROWS_AS(submit_from(dir / "good.g4s", prompt_ids(48, 50)), ContextLengthError);  // 20 resumed + 50 > 64

    // A save that cannot be written: the request's ids are still its own, its pages go back.
    EngineRequest<float> unsaved = request(p, endless(6));
    unsaved.save_to = dir / "no such dir" / "x.g4s";
    const EngineResult r = engine.submit(std::move(unsaved)).wait();
    CHECK_FALSE(r.saved);
    REQUIRE(r.error);
    CHECK_THROWS_AS(std::rethrow_exception(r.error), IoError);
    CHECK(r.ids == lone(model, p, endless(6)).ids);
    // A request cancelled before its prompt is in the cache has nothing to save.
    std::atomic<bool> cancel{true};
    GenerateOptions flagged = greedy(4);
    flagged.cancel = &cancel;
    EngineRequest<float> never_ran = request(p, flagged);
    never_ran.save_to = dir / "never.g4s";
    const EngineResult nr = engine.submit(std::move(never_ran)).wait();
    CHECK_FALSE(nr.saved);
    CHECK(nr.error);
    CHECK_FALSE(std::filesystem::exists(dir / "never.g4s"));

    // The engine goes on: the good file still resumes, the other requests are exact.
    const auto more = prompt_ids(49, 4);
    const GenerationResult expected = s.generate(std::span<const std::int32_t>(more), greedy(4));
    check_same(engine.submit(resumed_request(more, greedy(4), dir / "good.g4s")).wait(), expected);
    others.check();
    const EngineStats st = engine.stats();
    CHECK(st.requests_rejected == 11);
    engine.shutdown();
    check_no_pages_left(engine);
}

namespace {

/// The request the seed tests follow: sampled with every step of the chain on (penalties with a
/// window, logit biases, min_tokens), running to max_new_tokens.
GenerateOptions every_sampling_step(std::uint64_t seed) {
    GenerateOptions o;
    o.max_new_tokens = 24;
    o.min_tokens = 4;
    o.sampling = SamplingParams{.temperature = 0.9,
                                .top_k = 60,
                                .top_p = 0.95,
                                .repetition_penalty = 1.3,
                                .repeat_last_n = 8,
                                .presence_penalty = 0.4,
                                .frequency_penalty = 0.2,
                                .logit_bias = {{40, 2.0}, {41, -5.0}},
                                .seed = seed};
    o.end_ids = {-1};
    return o;
}

/// Fifteen other requests of all kinds: greedy and seeded, short and long prompts and replies.
std::vector<EngineRequest<float>> fifteen_others() {
    std::vector<EngineRequest<float>> others;
    for (int i = 0; i < 15; ++i) {
        const std::size_t length = 2 + static_cast<std::size_t>((i * 13) % 40);
        const std::int64_t max_new = 3 + (i * 5) % 29;
        others.push_back(request(prompt_ids(100 + i, length), i % 3 ? seeded(max_new, 77 + static_cast<std::uint64_t>(i)) : greedy(max_new)));
    }
    return others;
}

/// The target's ids when it is submitted at `place` among `others` (all at once).
std::vector<std::int32_t> ids_among(Engine<float>& engine, const EngineRequest<float>& target, std::vector<EngineRequest<float>> others,
                                    std::size_t place) {
    std::vector<RequestHandle> handles;
    for (std::size_t i = 0; i <= others.size(); ++i)
        handles.push_back(engine.submit(i == place ? target : std::move(others[i < place ? i : i - 1])));
    for (const RequestHandle& h : handles) REQUIRE_FALSE(h.wait().error);
    return handles[place].wait().ids;
}

void check_seed_across_batches(const Model<float>& model) {
    const auto prompt = prompt_ids(5, 20);
    const EngineRequest<float> target = request(prompt, every_sampling_step(4242));
    Engine<float> engine(model, &fixture().tokenizer, {.max_sequences = 16, .step_tokens = 24});
    const std::vector<std::int32_t> alone = engine.submit(target).wait().ids;
    REQUIRE(alone.size() == 24);
    CHECK(alone == lone(model, prompt, target.options).ids);
    for (const std::size_t place : {0, 7, 15}) {
        INFO("placed " << place << " of 16");
        CHECK(ids_among(engine, target, fifteen_others(), place) == alone);
    }
    // Two copies of it in one batch each draw from their own stream.
    std::vector<EngineRequest<float>> with_twin = fifteen_others();
    with_twin[3] = target;
    CHECK(ids_among(engine, target, std::move(with_twin), 9) == alone);
    // The seed decides: another one gives other ids (so the checks above can fail).
    EngineRequest<float> reseeded = target;
    reseeded.options.sampling.seed = 4243;
    CHECK(ids_among(engine, reseeded, fifteen_others(), 4) != alone);
}

}  // namespace

TEST_CASE("a seeded request gives the same ids alone and among 15 others, wherever it sits (bf16 weights)", "[engine][seed]") {
    check_seed_across_batches(fixture().model);
}

TEST_CASE("a seeded request gives the same ids alone and among 15 others, wherever it sits (int8 weights)", "[engine][seed]") {
    check_seed_across_batches(fixture().model_int8);
}

TEST_CASE("min_tokens in the Engine holds end and stop ids back as a lone session does", "[engine][min_tokens]") {
    const Model<float>& model = fixture().model;
    const auto prompt = prompt_ids(8, 10);
    const GenerationResult free_run = lone(model, prompt, endless(6));
    REQUIRE(free_run.ids.size() == 6);
    GenerateOptions ends_at_once = greedy(12);
    ends_at_once.end_ids = {free_run.ids[0]};
    ends_at_once.stop_ids = {free_run.ids[1]};
    REQUIRE(lone(model, prompt, ends_at_once).ids.size() <= 2);  // without min_tokens: one or two ids
    GenerateOptions held = ends_at_once;
    held.min_tokens = 5;
    const GenerationResult expected = lone(model, prompt, held);
    REQUIRE(expected.ids.size() >= 5);
    for (std::size_t i = 0; i < 5; ++i) CHECK((expected.ids[i] != free_run.ids[0] && expected.ids[i] != free_run.ids[1]));

    Engine<float> engine(model, &fixture().tokenizer, {.max_sequences = 4});
    std::vector<RequestHandle> handles;
    for (int i = 0; i < 3; ++i) handles.push_back(engine.submit(request(prompt_ids(60 + i, 6), seeded(10, 5 + static_cast<std::uint64_t>(i)))));
    const RequestHandle h = engine.submit(request(prompt, held));
    check_same(h.wait(), expected);
    for (const RequestHandle& other : handles) REQUIRE_FALSE(other.wait().error);

    GenerateOptions negative = greedy(4);
    negative.min_tokens = -2;
    REQUIRE_THROWS_AS(engine.submit(request(prompt, negative)), InvalidArgument);
    REQUIRE_THROWS_WITH(engine.submit(request(prompt, negative)), Catch::Contains("GenerateOptions::min_tokens must be >= 0, not -2"));
}
