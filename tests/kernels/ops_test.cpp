// kernels/ops.hpp: geluMul and the soft-cap in float at each level this process can run, against
// their formulas in double (tests/layers/nodes_test.cpp checks the double paths themselves).
#include <catch2/catch.hpp>

#include <gemma4/kernels/cpu.hpp>
#include <gemma4/kernels/ops.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/kernel_test_support.hpp"
#include "support/skip.hpp"

using namespace gemma4;

namespace {

/// gelu_tanh(g) · up in double as g · up / (1 + e^(−2u)), u = √(2/π) (g + 0.044715 g³): the same
/// function as the spec's 0.5 g (1 + tanh u) (nodes_test checks that form), without its
/// cancellation where tanh u → −1, so that relative errors mean something in the left tail.
double gelu_mul_reference(double g, double up) {
    const double u = 0.79788456080286535588 * (g + 0.044715 * g * g * g);
    return g * up / (1.0 + std::exp(-2.0 * u));
}

/// Gates over the whole range the activation meets (both tails, zero, tiny, and where e^(−2u)
/// overflows float), and ups of both signs; n leaves a tail past the vectors of every level.
/// The bound is a few float roundings relative, times the condition number 1 + |2u| of e^(−2u)
/// (u itself is computed in float), plus float's resolution of the result where e^(−2u) is
/// clamped (values below 1e-37). The baseline's xsimd tanh also loses the relative accuracy where
/// 1 + tanh u cancels, and is held to float's resolution of 0.5 g · up there.
void check_gelu_mul(Isa isa) {
    std::vector<float> gate, up;
    for (int i = -4000; i <= 4000; ++i) gate.push_back(static_cast<float>(i) * 0.0123f);  // ±49.2
    for (const float g : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-6f, -1e-6f, -9.5f, -10.0f, -12.0f, -20.0f, -60.0f, 60.0f, 200.0f, -200.0f})
        gate.push_back(g);
    for (std::size_t i = 0; i < gate.size(); ++i) up.push_back(i % 3 == 0 ? -1.5f : 0.75f + 0.001f * static_cast<float>(i % 97));
    const auto n = static_cast<std::int64_t>(gate.size());
    REQUIRE(n % 16 != 0);
    std::vector<float> y(gate.size());
    kernels::gelu_mul(gate.data(), up.data(), n, y.data(), isa);
    const double cancel = isa == Isa::Baseline ? 1e-7 : 1e-35;
    int bad = 0;
    double worst_central = 0;  // relative, over |g| ≤ 3
    for (std::size_t i = 0; i < gate.size(); ++i) {
        const double g = gate[i], u = up[i], expected = gelu_mul_reference(g, u);
        const double two_u = 2 * 0.79788456080286535588 * (g + 0.044715 * g * g * g);
        const double err = std::abs(static_cast<double>(y[i]) - expected);
        if (!(err <= 2e-7 * (2 + std::abs(two_u)) * std::abs(expected) + cancel * std::abs(g * u))) ++bad;
        if (std::abs(g) <= 3 && expected != 0) worst_central = std::max(worst_central, err / std::abs(expected));
    }
    INFO("level " << isa_name(isa) << ", worst relative error for |gate| <= 3: " << worst_central);
    CHECK(bad == 0);
    if (isa != Isa::Baseline) CHECK(worst_central < 1e-6);
}

/// cap · tanh(z / cap) over logits near 0 (where tanh's relative accuracy needs the polynomial),
/// around the polynomial's end (|z / cap| = 0.625), far out where tanh is ±1, ±∞ and NaN; n
/// leaves a tail past the vectors of every level, and one call takes many rows' worth. The bound
/// is a few float roundings relative (z / cap is itself rounded, and tanh's condition number is
/// at most 1).
void check_softcap(Isa isa) {
    const float cap = 30.0f;
    std::vector<float> z;
    for (int i = -3000; i <= 3000; ++i) z.push_back(static_cast<float>(i) * 0.0371f);  // ±111
    for (int i = -200; i <= 200; ++i) z.push_back(0.625f * cap * (1.0f + static_cast<float>(i) * 1e-4f));
    const std::size_t minus_zero = z.size() + 1;
    for (const float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-6f, -3e-4f, 400.0f, -2000.0f, 1e30f, -1e30f, 3.4e38f})
        z.push_back(v);
    REQUIRE(std::signbit(z[minus_zero]));
    const auto n = static_cast<std::int64_t>(z.size());
    REQUIRE(n % 16 != 0);
    std::vector<float> y = z;
    kernels::softcap(y.data(), n, cap, isa);
    int bad = 0;
    double worst = 0;
    for (std::size_t i = 0; i < z.size(); ++i) {
        const double expected = cap * std::tanh(static_cast<double>(z[i]) / cap);
        const double err = std::abs(static_cast<double>(y[i]) - expected);
        if (!(err <= 4e-7 * std::abs(expected) + 1e-45)) ++bad;
        if (expected != 0) worst = std::max(worst, err / std::abs(expected));
    }
    INFO("level " << isa_name(isa) << ", worst relative error: " << worst);
    CHECK(bad == 0);
    CHECK(std::signbit(y[minus_zero]));  // −0 stays −0
    // ±∞ to ±cap, NaN stays NaN, in a vector's lane as well as in the tail
    std::vector<float> special(35, 1.0f);
    special[3] = std::numeric_limits<float>::infinity();
    special[4] = -std::numeric_limits<float>::infinity();
    special[5] = std::numeric_limits<float>::quiet_NaN();
    special[34] = std::numeric_limits<float>::quiet_NaN();
    kernels::softcap(special.data(), 35, cap, isa);
    CHECK(special[3] == cap);
    CHECK(special[4] == -cap);
    CHECK(std::isnan(special[5]));
    CHECK(std::isnan(special[34]));
    CHECK(std::abs(special[0] - cap * std::tanh(1.0 / cap)) < 1e-7);
}

}  // namespace

TEST_CASE("the soft-cap in float at the baseline agrees with the formula in double", "[kernels][ops][isa]") {
    check_softcap(Isa::Baseline);
}

TEST_CASE("the soft-cap in float at avx2 agrees with the formula in double", "[kernels][ops][isa][avx2]") {
    if (const auto why = test::level_unavailable(Isa::Avx2); !why.empty()) GEMMA4_SKIP(why);
    check_softcap(Isa::Avx2);
}

TEST_CASE("the soft-cap in float at avx512 agrees with the formula in double", "[kernels][ops][isa][avx512]") {
    if (const auto why = test::level_unavailable(Isa::Avx512); !why.empty()) GEMMA4_SKIP(why);
    check_softcap(Isa::Avx512);
}

TEST_CASE("the soft-cap of rows shared among threads equals each row's own call, bit for bit", "[kernels][ops]") {
    const std::int64_t rows = 7, width = 1000 + 5;  // a tail past the vectors of every level
    std::vector<float> z(static_cast<std::size_t>(rows * width));
    for (std::size_t i = 0; i < z.size(); ++i) z[i] = 50.0f * std::sin(0.37f * static_cast<float>(i));
    std::vector<float> expected = z, got = z;
    for (std::int64_t r = 0; r < rows; ++r) kernels::softcap(expected.data() + r * width, width, 30.0f);
    ThreadPool pool(3);
    kernels::softcap_rows(got.data(), rows, width, 30.0f, pool);
    CHECK(got == expected);
}

TEST_CASE("geluMul in float at the baseline agrees with the formula in double", "[kernels][ops][isa]") {
    check_gelu_mul(Isa::Baseline);
}

TEST_CASE("geluMul in float at avx2 agrees with the formula in double", "[kernels][ops][isa][avx2]") {
    if (const auto why = test::level_unavailable(Isa::Avx2); !why.empty()) GEMMA4_SKIP(why);
    check_gelu_mul(Isa::Avx2);
}

TEST_CASE("geluMul in float at avx512 agrees with the formula in double", "[kernels][ops][isa][avx512]") {
    if (const auto why = test::level_unavailable(Isa::Avx512); !why.empty()) GEMMA4_SKIP(why);
    check_gelu_mul(Isa::Avx512);
}
