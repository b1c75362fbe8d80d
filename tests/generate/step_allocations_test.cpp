// A decode step allocates nothing once its buffers exist: every operator new of the program is
// counted, and the count must not move between two sampled ids of a Session (one forward step
// and one sample between two on_token calls) or between two steps of the Engine (on_step), at
// batch 1 and 16, with float and int8 KV, bf16 and int8 weights, with a plain sampler and with
// every step of its chain (windowed penalty, logit biases, min_tokens, log-probabilities with top
// alternatives and their callback). Warm-up is one earlier reply
// of the same length, after which the KV pages come back from the cache's free list.
//
// The sessions and the engine here decode ids only (no tokenizer): turning an id into text
// builds the piece's std::string, which is the tokenizer's business and not the step's.
#include <catch2/catch.hpp>

#include <gemma4/generate/engine.hpp>
#include <gemma4/generate/session.hpp>

#include "support/tiny_model.hpp"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

namespace {
std::atomic<std::int64_t> heap_allocations{0};

void* counted_alloc(std::size_t n, std::size_t align) {
    heap_allocations.fetch_add(1, std::memory_order_relaxed);
    n = n ? n : 1;
    void* p = align <= alignof(std::max_align_t) ? std::malloc(n) : std::aligned_alloc(align, (n + align - 1) / align * align);
    if (!p) throw std::bad_alloc();
    return p;
}
}  // namespace

void* operator new(std::size_t n) { return counted_alloc(n, alignof(std::max_align_t)); }
void* operator new[](std::size_t n) { return counted_alloc(n, alignof(std::max_align_t)); }
void* operator new(std::size_t n, std::align_val_t a) { return counted_alloc(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_alloc(n, static_cast<std::size_t>(a)); }
// The nothrow forms too: every form of new and delete in the program must be ours (under
// AddressSanitizer, its own nothrow new paired with our delete is an alloc-dealloc mismatch).
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    try {
        return counted_alloc(n, alignof(std::max_align_t));
    } catch (...) {
        return nullptr;
    }
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
    try {
        return counted_alloc(n, static_cast<std::size_t>(a));
    } catch (...) {
        return nullptr;
    }
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t& t) noexcept { return operator new(n, a, t); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

using namespace gemma4;

namespace step_allocations {

struct Models {
    Model<float> bf16;
    Model<float> int8;
};

const Models& models() {
    static const Models m = [] {
        const auto files = test::write_tiny_model("step_allocations_model", 41, 512);
        const auto& dir = files.dir;
        LoadOptions int8;
        int8.format = WeightFormat::Int8;
        return Models{Model<float>::load(dir, ModelOptions{2}), Model<float>::load(dir, ModelOptions{2}, int8)};
    }();
    return m;
}

/// n plain ids (no image/audio markers) from `seed`.
std::vector<std::int32_t> prompt(const Model<float>& model, int seed, std::size_t n) {
    const TokenIds& t = model.config().tokens;
    const auto vocab = static_cast<std::int32_t>(model.config().vocab_size);
    std::vector<std::int32_t> ids;
    for (std::int64_t i = 0; ids.size() < n; ++i) {
        const auto id = static_cast<std::int32_t>((11 + 17 * seed + 7 * i) % (vocab - 4)) + 4;
        if (!model.is_placeholder(id) && id != t.boi && id != t.eoi && id != t.boa && id != t.eoa) ids.push_back(id);
    }
    return ids;
}

/// Sampled, with every id allowed to end nothing, so each reply runs to max_new_tokens. With
/// `whole_chain`, every step of the sampler chain runs: the repetition penalty over a window
/// shorter than prompt + reply (its ring wraps), presence/frequency, logit biases, and end ids
/// held back by min_tokens for the whole reply, and log-probabilities with 20 alternatives, handed
/// to a callback.
GenerateOptions options(std::int64_t max_new_tokens, std::uint64_t seed, bool whole_chain = false) {
    GenerateOptions o;
    o.max_new_tokens = max_new_tokens;
    o.sampling.temperature = 0.8;
    o.sampling.top_k = 40;
    o.sampling.repetition_penalty = 1.1;
    o.sampling.seed = seed;
    o.end_ids = {-1};
    if (whole_chain) {
        o.sampling.repeat_last_n = 16;
        o.sampling.presence_penalty = 0.3;
        o.sampling.frequency_penalty = 0.1;
        o.sampling.logit_bias = {{5, 1.5}, {9, -2.0}};
        o.end_ids = {3, 4};
        o.min_tokens = max_new_tokens;
        o.logprobs = kMaxTopLogprobs;
        o.on_logprob = [](const TokenLogprob&) {};  // no Catch2 assertion here: it may allocate, and runs on the engine's thread
    }
    return o;
}

/// Allocations between consecutive marks.
struct Marks {
    std::mutex mutex;
    std::vector<std::int64_t> at;
    void mark() {
        const std::int64_t now = heap_allocations.load(std::memory_order_relaxed);
        std::lock_guard lock(mutex);
        at.push_back(now);
    }
    /// The allocations of each interval from the `skip`-th on.
    std::vector<std::int64_t> intervals(std::size_t skip) {
        std::lock_guard lock(mutex);
        std::vector<std::int64_t> d;
        for (std::size_t i = skip + 1; i < at.size(); ++i) d.push_back(at[i] - at[i - 1]);
        return d;
    }
};

constexpr std::int64_t kTokens = 48;  // three KV pages of decoding

}  // namespace step_allocations

TEST_CASE("a Session's decode step allocates nothing after warm-up", "[allocations]") {
    using namespace step_allocations;
    for (const Model<float>* model : {&models().bf16, &models().int8})
        for (const KVDtype kv : {KVDtype::Float, KVDtype::Int8})
            for (const bool chain : {false, true}) {
                INFO((model == &models().bf16 ? "bf16" : "int8") << " weights, " << (kv == KVDtype::Int8 ? "int8" : "float") << " KV"
                                                                  << (chain ? ", the whole sampler chain" : ""));
                Session<float> session(*model, nullptr, KVCacheOptions{.kv_dtype = kv});
                const auto ids = prompt(*model, 1, 20);
                session.generate(ids, options(kTokens, 5, chain));  // warm-up: buffers and pages
                session.reset();
                Marks marks;
                GenerateOptions o = options(kTokens, 5, chain);
                marks.at.reserve(kTokens + 1);
                o.on_token = [&](std::int32_t, std::string_view) {
                    marks.mark();
                    return true;
                };
                const GenerationResult r = session.generate(ids, o);
                REQUIRE(r.ids.size() == static_cast<std::size_t>(kTokens));
                const std::vector<std::int64_t> steps = marks.intervals(1);
                REQUIRE(steps.size() == static_cast<std::size_t>(kTokens - 2));
                CHECK(steps == std::vector<std::int64_t>(steps.size(), 0));
            }
}

TEST_CASE("the Engine's decode step allocates nothing after warm-up, at batch 1 and 16", "[allocations]") {
    using namespace step_allocations;
    for (const Model<float>* model : {&models().bf16, &models().int8})
        for (const KVDtype kv : {KVDtype::Float, KVDtype::Int8})
            for (const int batch : {1, 16})
                for (const bool chain : {false, true}) {
                    INFO((model == &models().bf16 ? "bf16" : "int8") << " weights, " << (kv == KVDtype::Int8 ? "int8" : "float") << " KV, batch "
                                                                      << batch << (chain ? ", the whole sampler chain" : ""));
                    Marks marks;
                    std::atomic<bool> measuring{false}, submitting{false};
                    marks.at.reserve(4 * kTokens);
                    Engine<float> engine(*model, nullptr,
                                         {.max_sequences = 16, .kv_dtype = kv, .prefix_cache_entries = 0, .on_step = [&](const EngineStepInfo& s) {
                                              if (measuring && s.prefill_tokens == 0 && s.sequences == batch) marks.mark();
                                              // The scheduler waits while requests are still being submitted,
                                              // so that all of them decode together (on a busy machine this
                                              // thread could otherwise submit the last after the first finished).
                                              while (submitting) std::this_thread::yield();
                                          }});
                    auto run = [&] {
                        // Everything this thread allocates comes before the first submit: it may
                        // otherwise run late, during the engine's steps (two cores, both busy).
                        std::vector<EngineRequest<float>> requests(static_cast<std::size_t>(batch));
                        for (int i = 0; i < batch; ++i) {
                            requests[static_cast<std::size_t>(i)].prompt = prompt(*model, i, 20);
                            requests[static_cast<std::size_t>(i)].options = options(kTokens, 7 + static_cast<std::uint64_t>(i), chain);
                        }
                        std::vector<RequestHandle> handles;
                        handles.reserve(requests.size());
                        submitting = true;
                        for (auto& request : requests) handles.push_back(engine.submit(std::move(request)));
                        submitting = false;
                        for (const RequestHandle& h : handles) REQUIRE(h.wait().ids.size() == static_cast<std::size_t>(kTokens));
                    };
                    run();  // warm-up
                    measuring = true;
                    run();
                    measuring = false;
                    // The steps in which every request decodes, after each one's first decode step;
                    // not the last, in which they finish and hand their results to this thread.
                    std::vector<std::int64_t> steps = marks.intervals(1);
                    if (!steps.empty()) steps.pop_back();
                    REQUIRE(steps.size() >= static_cast<std::size_t>(kTokens / 2));
                    CHECK(steps == std::vector<std::int64_t>(steps.size(), 0));
                }
}

TEST_CASE("a forward step into a reused scratch allocates nothing, and the scratch's size is the layout's", "[allocations]") {
    using namespace step_allocations;
    const Model<float>& model = models().int8;
    const Gemma4Config& c = model.config();
    StepScratch<float> scratch = model.make_scratch(4);
    const StepScratchLayout layout = step_scratch_layout(c, 4);
    CHECK(static_cast<std::int64_t>(scratch.x.size()) == layout.stream);
    CHECK(static_cast<std::int64_t>(scratch.gate_up.size()) == layout.gate_up);
    CHECK(static_cast<std::int64_t>(scratch.qkv.size()) == layout.qkv);
    // The 12B's layout is a compile-time value: 4 tokens of the residual stream, the qkv rows
    // of its widest kind, and the MLP's 2 × 15,360 + 15,360.
    static_assert(step_scratch_layout(kGemma4_12B, 1).gate_up == 2 * 15360);
    static_assert(step_scratch_layout(kGemma4_12B, 4).stream == 4 * 3840);

    KVCache<float> cache = model.make_cache();
    const SeqId a = cache.add_sequence(), b = cache.add_sequence();
    const std::vector<std::int32_t> ids = prompt(model, 3, 16);
    Logits<float> logits;
    const SequenceChunk warm[] = {{a, ids}, {b, ids}};
    model.forward_into(warm, cache, {}, LogitsMode::Last, logits, scratch);  // prompts of 16: one page each
    const std::int32_t next[] = {5, 6};
    const SequenceChunk step[] = {{a, std::span<const std::int32_t>(next, 1)}, {b, std::span<const std::int32_t>(next + 1, 1)}};
    model.forward_into(step, cache, {}, LogitsMode::Last, logits, scratch);  // the second page of each
    const std::int64_t before = heap_allocations.load();
    model.forward_into(step, cache, {}, LogitsMode::Last, logits, scratch);
    CHECK(heap_allocations.load() - before == 0);

    // The same step in a fresh scratch of its own allocates its buffers, and gives the same logits.
    KVCache<float> again = model.make_cache();
    const SeqId a2 = again.add_sequence(), b2 = again.add_sequence();
    const SequenceChunk warm2[] = {{a2, ids}, {b2, ids}};
    Logits<float> expected;
    model.forward_into(warm2, again, {}, LogitsMode::Last, expected);
    const SequenceChunk step2[] = {{a2, std::span<const std::int32_t>(next, 1)}, {b2, std::span<const std::int32_t>(next + 1, 1)}};
    model.forward_into(step2, again, {}, LogitsMode::Last, expected);
    model.forward_into(step2, again, {}, LogitsMode::Last, expected);
    CHECK(logits.values == expected.values);
}
