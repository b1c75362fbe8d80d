// Every compute node against its formula in double (spec node table; decisions 1–6).
#include <catch2/catch.hpp>

#include <gemma4/kernels/linear.hpp>
#include <gemma4/kernels/ops.hpp>
#include <gemma4/layers/attention.hpp>
#include <gemma4/model/model.hpp>
#include <gemma4/model/random_checkpoint.hpp>

#include "support/temp_dir.hpp"

#include <cmath>

using namespace gemma4;
using Catch::Matchers::WithinRel;
using Catch::Matchers::WithinAbs;

namespace {
std::vector<double> ramp(std::int64_t n, double a, double b) {
    std::vector<double> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = a * std::sin(b * static_cast<double>(i) + 0.3) + 0.01 * static_cast<double>(i);
    return v;
}
}  // namespace

TEST_CASE("rmsnorm and rmsnormUnit", "[nodes]") {
    const std::int64_t n = 37;
    const auto x = ramp(n, 2.0, 0.7), w = ramp(n, 1.0, 0.2);
    std::vector<double> y(x.size()), u(x.size());
    kernels::rms_norm(x.data(), w.data(), 1e-6, n, y.data());
    kernels::rms_norm(x.data(), static_cast<const double*>(nullptr), 1e-6, n, u.data());
    double ss = 0;
    for (double v : x) ss += v * v;
    const double r = 1.0 / std::sqrt(ss / n + 1e-6);
    for (std::int64_t i = 0; i < n; ++i) {
        CHECK_THAT(y[i], WithinRel(x[i] * r * w[i], 1e-14));  // plain w, not 1 + w
        CHECK_THAT(u[i], WithinRel(x[i] * r, 1e-14));         // v_norm: no weight
    }
}

TEST_CASE("RoPE inverse frequencies: default, and proportional with its zero tail", "[nodes][rope]") {
    const LayerGeometry sliding = kGemma4_12B.layer(0), full = kGemma4_12B.layer(5);
    const auto fs = rope_inverse_frequencies<double>(sliding);
    const auto ff = rope_inverse_frequencies<double>(full);
    REQUIRE(fs.size() == 128);
    REQUIRE(ff.size() == 256);
    for (int i = 0; i < 128; ++i) CHECK_THAT(fs[i], WithinRel(std::pow(10000.0, -2.0 * i / 256.0), 1e-15));
    for (int i = 0; i < 64; ++i) CHECK_THAT(ff[i], WithinRel(std::pow(1e6, -2.0 * i / 512.0), 1e-15));  // denominator 512
    for (int i = 64; i < 256; ++i) CHECK(ff[i] == 0.0);
}

TEST_CASE("rope rotates pairs (i, i + d/2) and leaves zero-frequency pairs unchanged", "[nodes][rope]") {
    const std::int64_t d = 512;
    const LayerGeometry full = kGemma4_12B.layer(5);
    const auto inv = rope_inverse_frequencies<double>(full);
    const double pos = 1234;
    std::vector<double> cos(d / 2), sin(d / 2);
    for (std::int64_t i = 0; i < d / 2; ++i) cos[i] = std::cos(pos * inv[i]), sin[i] = std::sin(pos * inv[i]);
    const auto x = ramp(d, 1.5, 0.31);
    auto y = x;
    kernels::rope(y.data(), cos.data(), sin.data(), d);
    for (std::int64_t i = 0; i < d / 2; ++i) {
        const double a = pos * std::pow(1e6, -2.0 * static_cast<double>(i) / 512.0) * (i < 64);
        CHECK_THAT(y[i], WithinAbs(x[i] * std::cos(a) - x[i + 256] * std::sin(a), 1e-13));
        CHECK_THAT(y[i + 256], WithinAbs(x[i + 256] * std::cos(a) + x[i] * std::sin(a), 1e-13));
        if (i >= 64) {
            CHECK(y[i] == x[i]);
            CHECK(y[i + 256] == x[i + 256]);
        }
    }
}

TEST_CASE("sliding window boundary: q − W < k ≤ q", "[nodes][attention]") {
    Gemma4Config c = tiny_config();  // W = 8
    const auto dir = test::temp_dir("nodes_window");
    write_random_checkpoint(dir, c, {.seed = 3});
    const Checkpoint ck = load_checkpoint(dir);
    const Attention<Sliding, double> sliding(ck.config, 0, ck.weights.layers[0]);
    const Attention<Global, double> global(ck.config, 2, ck.weights.layers[2]);
    CHECK(sliding.first_visible(0) == 0);
    CHECK(sliding.first_visible(7) == 0);   // 8 keys: 0..7
    CHECK(sliding.first_visible(8) == 1);   // key 0 = q − W drops out
    CHECK(sliding.first_visible(100) == 93);
    CHECK(global.first_visible(100) == 0);
    using WrongKind = Attention<Global, double>;
    REQUIRE_THROWS_AS(WrongKind(ck.config, 0, ck.weights.layers[0]), InvalidArgument);
    REQUIRE_THROWS_WITH(WrongKind(ck.config, 0, ck.weights.layers[0]),
                        Catch::Contains("layer 0 is sliding_attention but was built as full_attention"));
}

TEST_CASE("geluMul and the soft-cap", "[nodes]") {
    for (double g : {-3.0, -0.5, 0.0, 0.7, 2.5}) {
        const double expected = 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g)));
        CHECK_THAT(kernels::gelu_tanh(g), WithinRel(expected, 1e-15));
        double y;
        const double up = 1.75;
        kernels::gelu_mul(&g, &up, 1, &y);
        CHECK_THAT(y, WithinRel(expected * up, 1e-15));
    }
    CHECK_THAT(kernels::gelu_tanh(1.0), WithinRel(0.8411919906082768, 1e-15));
    std::vector<double> z = {-100, -1, 0, 1, 29, 1000};
    auto capped = z;
    kernels::softcap(capped.data(), static_cast<std::int64_t>(z.size()), 30.0);
    for (std::size_t i = 0; i < z.size(); ++i) CHECK_THAT(capped[i], WithinAbs(30 * std::tanh(z[i] / 30), 1e-13));
    CHECK(capped.back() <= 30.0);
}

TEST_CASE("linear reads every storage dtype", "[nodes][linear]") {
    const std::int64_t N = 13, K = 37, T = 3;
    std::vector<double> wv = ramp(N * K, 0.5, 0.13), xv = ramp(T * K, 1.0, 0.41);
    ThreadPool pool(2);
    for (DType dtype : {DType::BF16, DType::F16, DType::F32, DType::F64}) {
        const auto bytes = encode_values(wv, dtype);
        const WeightView w{"w", dtype, {N, K}, bytes.data(), bytes.size()};
        std::vector<double> y(static_cast<std::size_t>(T * N));
        linear<double>(w, {xv.data(), K}, {y.data(), N}, T, pool);
        for (std::int64_t t = 0; t < T; ++t)
            for (std::int64_t n = 0; n < N; ++n) {
                double e = 0;
                for (std::int64_t k = 0; k < K; ++k) e += xv[t * K + k] * round_to_dtype(wv[n * K + k], dtype);
                CHECK_THAT(y[t * N + n], WithinAbs(e, 1e-13));
            }
    }
}

TEST_CASE("embedding scale is √H rounded to the table's dtype (decision 1)", "[nodes][embed]") {
    Gemma4Config c = tiny_config();
    c.hidden_size = 60;  // √60 = 7.7459666…, not exact in any short format
    const double exact = std::sqrt(60.0);
    CHECK(round_to_dtype(std::sqrt(3840.0), DType::BF16) == 62.0);
    for (DType dtype : {DType::BF16, DType::F16, DType::F32, DType::F64}) {
        const auto dir = test::temp_dir("nodes_embed_" + std::string(dtype_name(dtype)));
        write_random_checkpoint(dir, c, {.seed = 4, .dtype = dtype});
        const Model<double> model = Model<double>::load(dir);
        double expected = exact;
        if (dtype == DType::BF16) expected = 7.75;
        if (dtype == DType::F16) expected = 7.74609375;
        if (dtype == DType::F32) expected = static_cast<double>(static_cast<float>(exact));
        CHECK(model.embed_scale() == expected);
        // embed node: y = scale · E[id]
        std::vector<double> embed;
        auto obs = [&](const TapView<double>& v) {
            if (v.node == "embed") embed.assign(v.data, v.data + v.cols);
        };
        const std::vector<std::int32_t> id = {17};
        model.logits(id, obs);
        for (std::int64_t i = 0; i < 60; ++i) CHECK(embed[i] == expected * model.weights().embed_tokens.at<double>(17 * 60 + i));
    }
}
