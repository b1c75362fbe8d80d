// layers/rope.hpp: the step's cos/sin tables and their application to rows of heads.
#include <gemma4/config.hpp>
#include <gemma4/layers/rope.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

using namespace gemma4;
using Catch::Matchers::WithinAbs;

TEST_CASE("RopeTable rotates every head of every token at that token's position", "[nodes][rope]") {
    const LayerGeometry full = kGemma4_12B.layer(5);  // d 512, 64 rotated pairs of 256
    const std::int64_t d = full.head_dim, heads = 3, stride = heads * d + 7;  // a row wider than its heads
    const std::vector<std::int64_t> positions = {0, 5, 4097, 131071};
    const RopeTable<double> table(rope_inverse_frequencies<double>(full), positions);
    REQUIRE(table.half() == d / 2);
    REQUIRE(table.tokens() == 4);

    std::vector<double> x(positions.size() * static_cast<std::size_t>(stride));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * static_cast<double>(i)) + 0.1;
    auto y = x;
    table.apply(y.data(), stride, heads);
    for (std::size_t t = 0; t < positions.size(); ++t)
        for (std::int64_t h = 0; h < heads; ++h)
            for (std::int64_t i = 0; i < d / 2; ++i) {
                const std::size_t a = t * stride + h * d + i, b = a + d / 2;
                const double angle = i < full.rope_pairs ? static_cast<double>(positions[t]) * std::pow(1e6, -2.0 * i / 512.0) : 0.0;
                CHECK_THAT(y[a], WithinAbs(x[a] * std::cos(angle) - x[b] * std::sin(angle), 1e-9));
                CHECK_THAT(y[b], WithinAbs(x[b] * std::cos(angle) + x[a] * std::sin(angle), 1e-9));
            }
    for (std::size_t t = 0; t < positions.size(); ++t)  // the row's tail past its heads is untouched
        for (std::int64_t j = heads * d; j < stride; ++j) CHECK(y[t * stride + j] == x[t * stride + j]);
}

TEST_CASE("StepRope holds one table per attention kind, each with that kind's frequencies", "[nodes][rope]") {
    const std::vector<std::int64_t> positions = {3, 9};
    const StepRope<double> rope(kGemma4_12B, positions);
    CHECK(rope[AttentionKind::Sliding].half() == kGemma4_12B.head_dim / 2);
    CHECK(rope[AttentionKind::Full].half() == kGemma4_12B.global_head_dim / 2);
    for (AttentionKind kind : {AttentionKind::Sliding, AttentionKind::Full}) {
        const LayerGeometry g = kind == AttentionKind::Sliding ? kGemma4_12B.layer(0) : kGemma4_12B.layer(5);
        const RopeTable<double> alone(rope_inverse_frequencies<double>(g), positions);
        // Same values as a table built for that layer alone: apply both to the same rows.
        std::vector<double> x(2 * static_cast<std::size_t>(g.head_dim));
        for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.01 * static_cast<double>(i) - 1.0;
        auto a = x, b = x;
        rope[kind].apply(a.data(), g.head_dim, 1);
        alone.apply(b.data(), g.head_dim, 1);
        CHECK(a == b);
        CHECK(a != x);  // position 9 rotates
    }
}
