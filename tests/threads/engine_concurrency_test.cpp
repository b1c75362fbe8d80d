// Engine under concurrent use (docs/thread-safety.md): many threads submit, cancel (by handle
// and by flag) and read stats while the scheduler thread steps; every request that is not
// cancelled equals its lone Session run, a cancelled one stops at a prefix of it, and at the end
// no page is held beyond the prefix cache. Built under ThreadSanitizer in CI with the rest of
// test_threads.
#include <catch2/catch.hpp>

#include <gemma4/generate/engine.hpp>
#include <gemma4/model/random_checkpoint.hpp>
#include <gemma4/tokenizer/tiny_tokenizer.hpp>

#include "support/temp_dir.hpp"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

using namespace gemma4;

namespace {

struct EngineFixture {
    std::filesystem::path dir;
    Tokenizer tokenizer;
    Model<float> model;
};

const EngineFixture& engine_fixture() {
    static const EngineFixture f = [] {
        const auto dir = test::temp_dir("threads_engine_model");
        Gemma4Config c = tiny_config();
        c.max_position_embeddings = 256;
        write_random_checkpoint(dir, c, {.seed = 6});
        const TinyTokenizerInfo info = write_tiny_tokenizer(dir / "tokenizer");
        return EngineFixture{dir, Tokenizer::from_file(info.tokenizer_json), Model<float>::load(dir, ModelOptions{2})};
    }();
    return f;
}

constexpr int kSubmitters = 6;
constexpr int kPerThread = 5;

// The requests of one thread continue its first prompt, so they fork its cached pages while
// other threads' requests are admitted, stepped and stored.
std::vector<std::int32_t> engine_prompt(int thread, int k) {
    std::vector<std::int32_t> ids = {2};
    for (int i = 0; i < 17; ++i) ids.push_back(static_cast<std::int32_t>(20 + 7 * thread + 5 * i) % 290);  // a page and more: reused
    for (int i = 0; i < 3 * k; ++i) ids.push_back(static_cast<std::int32_t>(31 + 11 * k + 13 * i + thread) % 290);
    return ids;
}

GenerateOptions engine_options(int thread, int k) {
    GenerateOptions o;
    o.max_new_tokens = 6 + (thread + k) % 5;
    o.end_ids = {511};
    o.sampling = (thread + k) % 3 == 0 ? SamplingParams{.temperature = 0.8, .top_k = 30, .seed = 7u + static_cast<unsigned>(thread * 10 + k)}
                                       : SamplingParams{.temperature = 0.0};
    return o;
}

struct Outcome {
    EngineResult result;
    std::string streamed;
    bool cancel_requested = false;
};

}  // namespace

TEST_CASE("an engine serves many submitting, cancelling and stats-reading threads", "[threads][engine]") {
    const EngineFixture& f = engine_fixture();
    std::vector<std::vector<GenerationResult>> expected(kSubmitters);
    for (int t = 0; t < kSubmitters; ++t)
        for (int k = 0; k < kPerThread; ++k) {
            Session<float> session(f.model, &f.tokenizer);
            const auto prompt = engine_prompt(t, k);
            expected[static_cast<std::size_t>(t)].push_back(session.generate(std::span<const std::int32_t>(prompt), engine_options(t, k)));
        }

    Engine<float> engine(f.model, &f.tokenizer, {.max_sequences = 4, .step_tokens = 12, .max_queue = 1000, .prefix_cache_entries = 32});
    std::vector<std::vector<Outcome>> outcomes(kSubmitters, std::vector<Outcome>(kPerThread));
    std::vector<std::atomic<bool>> flags(kSubmitters * kPerThread);
    std::atomic<bool> failed{false}, done{false};
    std::atomic<int> ready{0};
    std::atomic<std::int64_t> stats_reads{0};
    std::atomic<bool> stats_ok{true};

    std::thread reader([&] {
        while (!done) {
            const EngineStats s = engine.stats();
            if (s.active_sequences > 4 || s.requests_finished > s.requests_submitted || s.queue_depth < 0) stats_ok = false;
            ++stats_reads;
            std::this_thread::yield();
        }
    });
    std::vector<std::thread> submitters;
    for (int t = 0; t < kSubmitters; ++t)
        submitters.emplace_back([&, t] {
            ready.fetch_add(1);
            while (ready.load() < kSubmitters) std::this_thread::yield();
            try {
                std::vector<RequestHandle> handles;
                for (int k = 0; k < kPerThread; ++k) {
                    Outcome& out = outcomes[static_cast<std::size_t>(t)][static_cast<std::size_t>(k)];
                    GenerateOptions o = engine_options(t, k);
                    o.on_token = [&out](std::int32_t, std::string_view text) {
                        out.streamed += text;
                        return true;
                    };
                    std::atomic<bool>& flag = flags[static_cast<std::size_t>(t * kPerThread + k)];
                    o.cancel = &flag;
                    EngineRequest<float> r;
                    r.prompt = engine_prompt(t, k);
                    r.options = o;
                    handles.push_back(engine.submit(std::move(r)));
                    if (k == 0) handles.back().wait();  // its prompt is now cached
                    // Every fifth request is cancelled by handle, another by its flag from this thread.
                    if ((t * kPerThread + k) % 5 == 1) {
                        out.cancel_requested = true;
                        handles.back().cancel();
                    } else if ((t * kPerThread + k) % 5 == 3) {
                        out.cancel_requested = true;
                        std::this_thread::yield();
                        flag = true;
                    }
                }
                for (int k = 0; k < kPerThread; ++k)
                    outcomes[static_cast<std::size_t>(t)][static_cast<std::size_t>(k)].result = handles[static_cast<std::size_t>(k)].wait();
            } catch (...) {
                failed = true;
            }
        });
    for (auto& th : submitters) th.join();
    done = true;
    reader.join();
    REQUIRE_FALSE(failed.load());
    CHECK(stats_ok.load());
    CHECK(stats_reads.load() > 0);

    int cancelled = 0;
    for (int t = 0; t < kSubmitters; ++t)
        for (int k = 0; k < kPerThread; ++k) {
            INFO("thread " << t << " request " << k);
            const Outcome& out = outcomes[static_cast<std::size_t>(t)][static_cast<std::size_t>(k)];
            const GenerationResult& want = expected[static_cast<std::size_t>(t)][static_cast<std::size_t>(k)];
            CHECK_FALSE(out.result.error);
            CHECK(out.streamed == out.result.text);
            if (out.result.finish == FinishReason::Cancelled) {
                CHECK(out.cancel_requested);
                ++cancelled;
                REQUIRE(out.result.ids.size() <= want.ids.size());
                CHECK(std::equal(out.result.ids.begin(), out.result.ids.end(), want.ids.begin()));
            } else {
                CHECK(out.result.ids == want.ids);  // a cancel that came too late changes nothing
                CHECK(out.result.text == want.text);
            }
        }
    const EngineStats s = engine.stats();
    CHECK(s.requests_submitted == kSubmitters * kPerThread);
    CHECK(s.requests_finished == kSubmitters * kPerThread);
    CHECK(s.requests_cancelled == cancelled);
    CHECK(s.active_sequences == 0);
    CHECK(s.queue_depth == 0);
    CHECK(s.kv_pages_in_use == s.prefix_cache_pages);
    CHECK(s.prefix_entries <= 32);
    CHECK(s.prefix_hits > 0);
    CHECK(s.prefix_reused_tokens >= 16 * s.prefix_hits);
}
