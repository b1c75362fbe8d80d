// kernels/quant_acts.hpp: activations to int8 per block, the vector levels' quantize_row
// against the portable one, bit for bit, the vector passes' records and the AMX pass's tile
// layout of them.
#include <catch2/catch.hpp>

#include <gemma4/kernels/linear_quant.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/kernel_test_support.hpp"
#include "support/skip.hpp"

using namespace gemma4;

namespace {

struct Quantized {
    std::vector<std::int8_t> q;
    std::vector<float> scale;
    std::vector<std::int32_t> sum;
};

template <class RowFn>
Quantized quantize(const std::vector<float>& x, std::int64_t block, RowFn row) {
    const auto cols = static_cast<std::int64_t>(x.size()), blocks = quant::blocks_per_row(cols, block);
    Quantized out{std::vector<std::int8_t>(static_cast<std::size_t>(blocks * block), 99), std::vector<float>(static_cast<std::size_t>(blocks)),
                  std::vector<std::int32_t>(static_cast<std::size_t>(blocks))};
    row(x.data(), cols, block, blocks, out.q.data(), out.scale.data(), out.sum.data());
    return out;
}

/// Rows that reach every branch: random values, exact halves after scaling (ties to even), an
/// all-zero block, one huge value, denormals, and a partial last block.
std::vector<std::vector<float>> test_rows() {
    std::vector<std::vector<float>> rows;
    test::Rng rng{42};
    for (std::int64_t cols : {32, 96, 128, 200, 3840, 31, 33, 63, 65}) {
        std::vector<float> x(static_cast<std::size_t>(cols));
        for (auto& v : x) v = static_cast<float>(rng.symmetric() * 3.0);
        rows.push_back(x);
    }
    std::vector<float> ties(64);
    for (std::size_t i = 0; i < ties.size(); ++i) ties[i] = static_cast<float>(i % 32) - 15.5f;
    ties[0] = 127.0f;  // scale 1: every other value is an exact half
    rows.push_back(ties);
    std::vector<float> zeros(64, 0.0f);
    zeros[40] = -1e30f;
    zeros[41] = 1e-40f;
    rows.push_back(zeros);
    return rows;
}

/// `tokens` rows of 200 random activations (a partial last block), quantized in blocks of `block`.
detail::QuantActs random_activations(std::int64_t tokens, std::int64_t block, test::Rng& rng) {
    const std::int64_t cols = 200;
    std::vector<float> x(static_cast<std::size_t>(tokens * cols));
    for (auto& v : x) v = static_cast<float>(rng.symmetric());
    detail::QuantActs a;
    detail::shape_activations(tokens, cols, block, a);
    detail::quantize_activations({x.data(), cols}, 0, tokens, a);
    return a;
}

}  // namespace

TEST_CASE("a block of activations: scale max|x|/127, codes rounded to nearest, sum of codes", "[kernels][quant]") {
    const float x[5] = {1.0f, -2.0f, 0.5f, 127.0f / 254.0f * 2.0f, 0.0f};
    std::int8_t q[64];
    std::int32_t sum = 0;
    const float d = detail::quantize_block(x, 5, 64, q, sum);
    CHECK(d == 2.0f / 127.0f);
    // x · 127/2: 63.5 → 64 (ties to even), −127, 31.75 → 32, 63.5 → 64, 0
    CHECK(q[0] == 64);
    CHECK(q[1] == -127);
    CHECK(q[2] == 32);
    CHECK(q[3] == 64);
    CHECK(q[4] == 0);
    for (int i = 5; i < 64; ++i) CHECK(q[i] == 0);  // the rest of the block
    CHECK(sum == 64 - 127 + 32 + 64);
    const float zero[3] = {0, 0, 0};
    CHECK(detail::quantize_block(zero, 3, 32, q, sum) == 0.0f);
    CHECK(sum == 0);
}

namespace {

/// quantize_row of one level against the portable code on every test row, bit for bit.
template <class RowFn>
void check_same_as_portable(RowFn row) {
    for (std::int64_t block : {32, 64})
        for (const auto& x : test_rows()) {
            INFO("cols " << x.size() << " block " << block);
            const Quantized want = quantize(x, block, detail::quantize_row_portable), got = quantize(x, block, row);
            CHECK(got.q == want.q);
            CHECK(std::memcmp(got.scale.data(), want.scale.data(), want.scale.size() * sizeof(float)) == 0);
            CHECK(got.sum == want.sum);
        }
}

}  // namespace

// One test case per level, so that ctest lists a level this machine cannot run as skipped.
TEST_CASE("avx2 path: activations quantize as the portable code, bit for bit", "[kernels][quant][isa][avx2]") {
    if (const auto why = test::level_unavailable(Isa::Avx2); !why.empty()) GEMMA4_SKIP(why);
    check_same_as_portable(detail::avx2::quantize_row);
}

TEST_CASE("avx512 path: activations quantize as the portable code, bit for bit", "[kernels][quant][isa][avx512]") {
    if (const auto why = test::level_unavailable(Isa::Avx512); !why.empty()) GEMMA4_SKIP(why);
    check_same_as_portable(detail::avx512::quantize_row);
}

TEST_CASE("amx path: each group's activations lie unit by unit, 16 tokens of 32 codes, zero-padded and cache-line aligned", "[kernels][quant][isa][amx]") {
    if (const auto why = test::level_unavailable(Isa::Amx); !why.empty()) GEMMA4_SKIP(why);
    using Amx = detail::amx::PanelAmx;
    constexpr std::int64_t G = Amx::G, U = quant::kUnit;
    test::Rng rng{7};
    Amx::TileActs tiles;
    // Growing sizes reallocate the buffer: each must start on a line (a 32-byte tile row 16 bytes
    // into a line straddles two).
    for (std::int64_t block : {32, 64})
        for (std::int64_t tokens : {8, 21, 40}) {
            const detail::QuantActs a = random_activations(tokens, block, rng);
            const std::int64_t groups = (tokens + G - 1) / G, units = a.padded / U;
            tiles.assign(Amx::tile_bytes(a), std::int8_t{99});
            REQUIRE(tiles.size() == static_cast<std::size_t>(groups * units * G * U));
            REQUIRE(reinterpret_cast<std::uintptr_t>(tiles.data()) % detail::kCacheLine == 0);
            Amx::group_tiles(a, 0, tokens, tiles);
            for (std::int64_t t = 0; t < groups * G; ++t)
                for (std::int64_t u = 0; u < units; ++u) {
                    const std::int8_t* row = tiles.data() + (t / G * units + u) * Amx::kGroupUnitBytes + t % G * U;
                    INFO("block " << block << " tokens " << tokens << " token " << t << " unit " << u);
                    if (t < tokens) CHECK(std::memcmp(row, a.q_row(t) + u * U, U) == 0);
                    else CHECK(std::all_of(row, row + U, [](std::int8_t c) { return c == 0; }));
                }
        }
}

TEST_CASE("vector passes' records: per group and block, the code words as [word][token], then the scales and the start values, the same for any split of the blocks", "[kernels][quant]") {
    constexpr std::int64_t G = detail::kGroupTokens;
    constexpr int offset = 128;
    test::Rng rng{11};
    for (std::int64_t block : {32, 64})
        for (std::int64_t tokens : {1, 5, 16, 21, 40}) {
            const detail::QuantActs a = random_activations(tokens, block, rng);
            detail::GroupActs whole, split;
            detail::shape_group_acts(a, whole);
            detail::shape_group_acts(a, split);
            const std::int64_t W = block / 4;
            REQUIRE(whole.words == W + 2);
            REQUIRE(whole.data.size() == static_cast<std::size_t>(tokens * a.blocks * (W + 2)));
            std::fill(whole.data.begin(), whole.data.end(), 0x5a5a5a5a);
            std::fill(split.data.begin(), split.data.end(), 0x5a5a5a5a);
            detail::group_acts(a, offset, 0, 0, a.blocks, whole);
            for (std::int64_t b = 0; b < a.blocks; ++b) detail::group_acts(a, offset, 0, b, b + 1, split);  // a block per call
            CHECK(whole.data == split.data);
            for (std::int64_t g0 = 0; g0 < tokens; g0 += G) {
                const std::int64_t n = std::min(G, tokens - g0);
                for (std::int64_t b = 0; b < a.blocks; ++b) {
                    const std::int32_t* rec = whole.group(g0) + b * (W + 2) * n;
                    for (std::int64_t i = 0; i < n; ++i) {
                        const std::int64_t t = g0 + i;
                        INFO("block " << block << " tokens " << tokens << " token " << t << " block index " << b);
                        for (std::int64_t s = 0; s < W; ++s) {
                            std::int32_t word = 0;
                            std::memcpy(&word, a.q_row(t) + b * block + 4 * s, 4);
                            CHECK(rec[s * n + i] == word);
                        }
                        float scale = 0;
                        std::memcpy(&scale, rec + W * n + i, 4);
                        CHECK(scale == a.scale_row(t)[b]);
                        CHECK(rec[(W + 1) * n + i] == -offset * a.sum_row(t)[b]);
                    }
                }
            }
            // The groups from token 16 on only (as after AMX tiles took the first group): the
            // first group's records are left as they were.
            if (tokens > G) {
                detail::GroupActs tail;
                detail::shape_group_acts(a, tail);
                std::fill(tail.data.begin(), tail.data.end(), 0x5a5a5a5a);
                detail::group_acts(a, offset, G, 0, a.blocks, tail);
                const auto first_group = static_cast<std::ptrdiff_t>(G * a.blocks * (W + 2));
                CHECK(std::all_of(tail.data.begin(), tail.data.begin() + first_group, [](std::int32_t w) { return w == 0x5a5a5a5a; }));
                CHECK(std::equal(tail.data.begin() + first_group, tail.data.end(), whole.data.begin() + first_group));
            }
        }
}
