// Concurrency contract (docs/thread-safety.md): one const Model and one const Tokenizer shared
// by several threads, each with its own Session (and so its own KVCache and Sampler), give
// exactly the results of running the same work one after another (also with int8 weights).
// Built under ThreadSanitizer in CI (GEMMA4_TSAN), where it also checks that the shared
// ThreadPool and the kernels' per-thread buffers are free of data races.
#include <catch2/catch.hpp>

#include <gemma4/generate/session.hpp>
#include <gemma4/model/random_checkpoint.hpp>
#include <gemma4/tokenizer/tiny_tokenizer.hpp>
#include <gemma4/tokenizer/tokenizer.hpp>

#include "support/temp_dir.hpp"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

using namespace gemma4;

namespace {

constexpr int kThreads = 4;

struct Fixture {
    std::filesystem::path dir;
    Tokenizer tokenizer;
    Model<float> model;
    Model<float> model_int8;  // the int8 kernels keep per-thread activation buffers
};

// Two pool threads, so that concurrent callers also contend for the model's ThreadPool.
const Fixture& fixture() {
    static const Fixture f = [] {
        const auto dir = test::temp_dir("threads_model");
        Gemma4Config c = tiny_config();
        c.max_position_embeddings = 256;
        write_random_checkpoint(dir, c, {.seed = 5});
        const TinyTokenizerInfo info = write_tiny_tokenizer(dir / "tokenizer");
        LoadOptions int8;
        int8.format = WeightFormat::Int8;
        return Fixture{dir, Tokenizer::from_file(info.tokenizer_json), Model<float>::load(dir, ModelOptions{2}),
                       Model<float>::load(dir, ModelOptions{2}, int8)};
    }();
    return f;
}

std::vector<std::int32_t> prompt_for(int worker) {
    std::vector<std::int32_t> ids = {2};
    for (int i = 0; i < 6 + 3 * worker; ++i) ids.push_back(static_cast<std::int32_t>(20 + 37 * worker + 11 * i) % 290);
    return ids;
}

GenerateOptions options_for(int worker) {
    GenerateOptions o;
    o.max_new_tokens = 10;
    o.end_ids = {511};  // an id the random model is unlikely to pick: fixed-length runs
    o.prefill_chunk = 4;  // several prefill steps, with the sliding window wrapping
    // Half the workers sample (seeded, so reproducible), half decode greedily.
    o.sampling = worker % 2 ? SamplingParams{.temperature = 0.9, .top_k = 40, .seed = 100u + static_cast<unsigned>(worker)}
                            : SamplingParams{.temperature = 0.0};
    return o;
}

// Two turns on one session: the second continues from the cached first.
std::vector<std::int32_t> run_ids(const Model<float>& model, int worker) {
    Session<float> session(model);
    const auto prompt = prompt_for(worker);
    const GenerationResult first = session.generate(std::span<const std::int32_t>(prompt), options_for(worker));
    const std::vector<std::int32_t> more = {40, 41, 42};
    const GenerationResult second = session.generate(std::span<const std::int32_t>(more), options_for(worker));
    std::vector<std::int32_t> out = first.ids;
    out.insert(out.end(), second.ids.begin(), second.ids.end());
    return out;
}

std::string run_text(const Model<float>& model, const Tokenizer& tokenizer, int worker) {
    Session<float> session(model, &tokenizer);
    std::string streamed;
    GenerateOptions o = options_for(worker);
    o.on_token = [&](std::int32_t, std::string_view text) {
        streamed += text;
        return true;
    };
    const std::string prompt = "The sky is blue because " + std::to_string(worker);
    const GenerationResult r = session.generate(prompt, o);
    // No Catch2 assertions here: they are not thread-safe. Mismatches show in the result.
    const std::string stream_check = streamed == r.text ? "" : "|streamed text differs: " + streamed;
    return r.text + "|" + tokenizer.decode(tokenizer.encode(prompt)) + stream_check;
}

template <class R, class F>
std::vector<R> run_concurrently(F&& work) {
    std::vector<R> results(kThreads);
    std::vector<std::thread> threads;
    std::atomic<int> ready{0};
    std::atomic<bool> failed{false};
    for (int w = 0; w < kThreads; ++w) {
        threads.emplace_back([&, w] {
            // Start together, so the threads really overlap.
            ready.fetch_add(1);
            while (ready.load() < kThreads) std::this_thread::yield();
            try {
                results[static_cast<std::size_t>(w)] = work(w);
            } catch (...) {
                failed = true;
            }
        });
    }
    for (auto& t : threads) t.join();
    REQUIRE_FALSE(failed.load());
    return results;
}

/// kThreads workers generating from `model` at once produce what each produces alone; returns
/// the serial results.
std::vector<std::vector<std::int32_t>> check_concurrent_ids(const Model<float>& model) {
    std::vector<std::vector<std::int32_t>> serial;
    for (int w = 0; w < kThreads; ++w) serial.push_back(run_ids(model, w));

    const auto concurrent = run_concurrently<std::vector<std::int32_t>>([&](int w) { return run_ids(model, w); });
    for (int w = 0; w < kThreads; ++w) {
        INFO("worker " << w);
        CHECK(concurrent[static_cast<std::size_t>(w)] == serial[static_cast<std::size_t>(w)]);
    }
    return serial;
}

}  // namespace

TEST_CASE("sessions on one shared model generate concurrently as they do serially", "[threads]") {
    for (const auto& ids : check_concurrent_ids(fixture().model)) REQUIRE(ids.size() == 20);  // fixed-length runs
}

TEST_CASE("sessions on one shared int8 model generate concurrently as they do serially", "[threads]") {
    check_concurrent_ids(fixture().model_int8);
}

TEST_CASE("text generation with one shared tokenizer is the same concurrently", "[threads]") {
    const Fixture& f = fixture();
    std::vector<std::string> serial;
    for (int w = 0; w < kThreads; ++w) serial.push_back(run_text(f.model, f.tokenizer, w));

    const auto concurrent = run_concurrently<std::string>([&](int w) { return run_text(f.model, f.tokenizer, w); });
    for (int w = 0; w < kThreads; ++w) {
        INFO("worker " << w);
        CHECK(concurrent[static_cast<std::size_t>(w)] == serial[static_cast<std::size_t>(w)]);
    }
}

TEST_CASE("uncached logits of a shared model are the same concurrently", "[threads]") {
    const Fixture& f = fixture();
    std::vector<std::vector<float>> serial;
    for (int w = 0; w < kThreads; ++w) serial.push_back(f.model.logits(prompt_for(w)).values);

    const auto concurrent =
        run_concurrently<std::vector<float>>([&](int w) { return f.model.logits(prompt_for(w)).values; });
    for (int w = 0; w < kThreads; ++w) {
        INFO("worker " << w);
        CHECK(concurrent[static_cast<std::size_t>(w)] == serial[static_cast<std::size_t>(w)]);  // bit-identical
    }
}
