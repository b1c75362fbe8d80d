// Testing a custom layer against ours through the taps: everything before attn.core must be
// bit-identical, attn.core must follow the linear-attention formula (checked in double from the
// tapped q, k, v), and the sliding layers below the first full layer must not move at all.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include "linear_attention.hpp"

#include <gemma4/model/random_checkpoint.hpp>

#include <filesystem>
#include <map>

#include <unistd.h>

namespace {

using Taps = std::map<std::string, std::vector<double>>;

struct Recorder {
    Taps* taps;
    void operator()(const gemma4::TapView<double>& v) const {
        auto& out = (*taps)[v.full_name()];
        for (std::int64_t r = 0; r < v.rows; ++r) out.insert(out.end(), v.data + r * v.stride, v.data + r * v.stride + v.cols);
    }
};

/// A small random checkpoint, private to this process (ctest runs the test cases in parallel
/// processes) and removed when it exits.
struct ScratchCheckpoint {
    std::filesystem::path dir = std::filesystem::temp_directory_path() / ("gemma4_custom_layer_test." + std::to_string(::getpid()));
    ScratchCheckpoint() { gemma4::write_random_checkpoint(dir, gemma4::tiny_config(), {.seed = 17}); }
    ~ScratchCheckpoint() {
        std::error_code ignored;
        std::filesystem::remove_all(dir, ignored);
    }
};

std::filesystem::path checkpoint() {
    static const ScratchCheckpoint scratch;
    return scratch.dir;
}

}  // namespace

TEST_CASE("the custom layer matches ours up to attn.core and follows its formula there") {
    const auto ours = gemma4::Model<double>::load(checkpoint());
    const auto custom = custom::LinearGlobalModel<double>::load(checkpoint());
    const std::vector<std::int32_t> ids = {2, 11, 23, 35, 47, 59, 71, 83, 95, 107, 119, 131};
    Taps a, b;
    ours.logits(ids, Recorder{&a});
    custom.logits(ids, Recorder{&b});

    const gemma4::Gemma4Config& c = ours.config();
    const int first_full = 2;  // tiny_config: full layers 2 and 5
    REQUIRE(c.layer_kind(first_full) == gemma4::AttentionKind::Full);
    for (const auto& [name, values] : a) {
        if (name.rfind("layers.0.", 0) == 0 || name.rfind("layers.1.", 0) == 0 || name == "embed") {
            INFO(name);
            CHECK(b.at(name) == values);  // below the first custom layer: untouched
        }
    }
    const std::string p = "layers.2.";
    for (const char* node : {"input_norm", "attn.qkv_proj", "attn.qk_norm", "attn.v_norm", "attn.rope"}) {
        INFO(node);
        CHECK(b.at(p + node) == a.at(p + node));  // same projections, norms and RoPE
    }
    CHECK(b.at(p + "attn.core") != a.at(p + "attn.core"));

    // attn.core in double from the tapped q, k (after RoPE) and v (after v_norm).
    const gemma4::LayerGeometry g = c.layer(first_full);
    const std::int64_t T = static_cast<std::int64_t>(ids.size()), d = g.head_dim, qd = g.q_dim(), kvd = g.kv_dim();
    const auto& rope = b.at(p + "attn.rope");
    const auto& v = b.at(p + "attn.v_norm");
    const auto& core = b.at(p + "attn.core");
    auto phi = [](double x) { return x > 0 ? x + 1 : std::exp(x); };
    double worst = 0;
    for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t h = 0; h < g.num_heads; ++h) {
            const std::int64_t kv = h / (g.num_heads / g.num_kv_heads);
            std::vector<double> o(static_cast<std::size_t>(d), 0.0);
            double norm = 0;
            for (std::int64_t s = 0; s <= t; ++s) {
                double a_ts = 0;
                for (std::int64_t i = 0; i < d; ++i) a_ts += phi(rope[t * (qd + kvd) + h * d + i]) * phi(rope[s * (qd + kvd) + qd + kv * d + i]);
                norm += a_ts;
                for (std::int64_t i = 0; i < d; ++i) o[i] += a_ts * v[s * kvd + kv * d + i];
            }
            for (std::int64_t i = 0; i < d; ++i) worst = std::max(worst, std::abs(o[i] / norm - core[t * qd + h * d + i]));
        }
    CHECK(worst <= 1e-12);
}

TEST_CASE("the custom layer decodes through the KV cache like the full pass") {
    const auto custom = custom::LinearGlobalModel<double>::load(checkpoint());
    const std::vector<std::int32_t> ids = {2, 5, 8, 13, 21, 34, 55, 89, 144, 233};
    const auto full = custom.logits(ids);
    auto cache = custom.make_cache();
    const auto s = cache.add_sequence();
    double worst = 0;
    for (std::size_t t = 0; t < ids.size(); ++t) {
        const auto step = custom.forward(std::span<const std::int32_t>(&ids[t], 1), cache, s);
        for (std::int64_t i = 0; i < step.vocab; ++i)
            worst = std::max(worst, std::abs(step.row(0)[i] - full.row(static_cast<std::int64_t>(t))[i]));
    }
    CHECK(worst <= 1e-12);
}
