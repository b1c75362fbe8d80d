// Model<T, C>: a model type compiled for one constexpr configuration. It must give exactly the
// logits of the runtime-configured Model<T>, and refuse a checkpoint of any other configuration,
// naming the differing fields.
#include <catch2/catch.hpp>

#include <gemma4/model/model.hpp>
#include <gemma4/model/random_checkpoint.hpp>

#include "support/temp_dir.hpp"

#include <algorithm>
#include <string>
#include <vector>

using namespace gemma4;

namespace {
constexpr Gemma4Config kTiny = tiny_config();

static_assert(is_fixed_config<kTiny> && !is_fixed_config<kConfigFromCheckpoint>);
static_assert(Attention<Sliding, float, kTiny>::fixed_config == &kTiny);
static_assert(Attention<Sliding, float>::fixed_config == nullptr);

std::vector<std::int32_t> fixed_test_ids(std::size_t n) {
    std::vector<std::int32_t> v;
    for (std::size_t i = 0; i < n; ++i) v.push_back(static_cast<std::int32_t>((11 + 53 * i) % 290));
    return v;
}

/// Prefill `prompt` then decode `steps` ids one at a time (greedy); every step's logits in order.
template <class M>
std::vector<typename M::scalar_type> run(const M& model, const std::vector<std::int32_t>& prompt, int steps, KVDtype kv) {
    using T = typename M::scalar_type;
    KVCache<T> cache = model.make_cache({.kv_dtype = kv});
    const SeqId s = cache.add_sequence();
    Logits<T> out = model.forward(prompt, cache, s, LogitsMode::All);
    std::vector<T> all = out.values;
    for (int i = 0; i < steps; ++i) {
        const auto last = out.row(out.rows - 1);
        const auto next = static_cast<std::int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
        const std::int32_t id = next >= 300 && next <= 306 ? 7 : next;  // not a placeholder
        out = model.forward(std::vector<std::int32_t>{id}, cache, s, LogitsMode::Last);
        all.insert(all.end(), out.values.begin(), out.values.end());
    }
    return all;
}
}  // namespace

TEMPLATE_TEST_CASE("Model<T, C> gives exactly the logits of Model<T> past the window, cached and batched", "[model][fixed]", float, double) {
    const auto dir = test::temp_dir("fixed_config");
    write_random_checkpoint(dir, kTiny, {.seed = 17});
    const auto fixed = Model<TestType, kTiny>::load(dir, {.n_threads = 2});
    const auto runtime = Model<TestType>::load(dir, {.n_threads = 2});
    const auto prompt = fixed_test_ids(21);  // window 8: the sliding layers drop keys
    for (KVDtype kv : {KVDtype::Float, KVDtype::Int8}) {
        const auto a = run(fixed, prompt, 12, kv), b = run(runtime, prompt, 12, kv);
        REQUIRE(a.size() == b.size());
        CHECK(a == b);
    }
}

TEST_CASE("Model<T, C> refuses a checkpoint of another configuration, naming each differing field", "[model][fixed]") {
    Gemma4Config other = kTiny;
    other.sliding_window = 16;
    other.num_key_value_heads = 1;
    const auto dir = test::temp_dir("fixed_config_other");
    write_random_checkpoint(dir, other, {.seed = 5});
    try {
        (void)Model<float, kTiny>::load(dir);
        FAIL("loaded a checkpoint of another configuration");
    } catch (const ConfigError& e) {
        const std::string m = e.what();
        CHECK(m.find(dir.string()) != std::string::npos);
        CHECK(m.find("sliding_window: 16, compiled for 8") != std::string::npos);
        CHECK(m.find("num_key_value_heads: 1, compiled for 2") != std::string::npos);
        CHECK(m.find("hidden_size") == std::string::npos);  // equal fields are not listed
    }
    CHECK_NOTHROW(Model<float>::load(dir));  // the runtime-configured type takes it

    // The check itself, on configurations that differ in layers and RoPE.
    Gemma4Config fewer = with_layers(kTiny, 3);
    fewer.rope_full.rope_theta = 5e5;
    try {
        check_config_equals(kTiny, fewer, "here");
        FAIL("no difference found");
    } catch (const ConfigError& e) {
        const std::string m = e.what();
        CHECK(m.find("num_hidden_layers: 3, compiled for 6") != std::string::npos);
        CHECK(m.find("rope_theta: 500000") != std::string::npos);
    }
    CHECK_NOTHROW(check_config_equals(kTiny, tiny_config(), "here"));
}
