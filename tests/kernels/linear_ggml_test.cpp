// kernels/linear_ggml.hpp: GGUF block types run as stored. Each type's rows of random blocks
// (valid f16 scales) against the formula in double, the vector decoders against the portable
// ones byte for byte, every level's kernel against the portable loops bit for bit, and the
// outputs' independence of thread count and token grouping.
#include <catch2/catch.hpp>

#include <gemma4/kernels/linear.hpp>
#include <gemma4/kernels/quant_acts.hpp>
#include <gemma4/tensor/ggml_blocks.hpp>

#include "kernels/kernel_test_support.hpp"
#include "support/message_matcher.hpp"
#include "support/skip.hpp"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace gemma4;

namespace {

const GgmlType kTypes[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL,
                           GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS};

struct GgmlWeight {
    std::vector<std::byte> bytes;
    WeightView view;
};

/// N rows of K values of type t: random codes, random finite scales (dmin ≥ 0 as ggml writes it).
GgmlWeight make_ggml_weight(GgmlType t, std::int64_t N, std::int64_t K, std::uint64_t seed) {
    test::Rng rng(seed);
    const ggml::BlockDecoder dec = ggml::block_decoder(t);
    GgmlWeight w;
    w.bytes.resize(static_cast<std::size_t>(N * ggml::bytes_of(t, K)));
    for (auto& b : w.bytes) b = static_cast<std::byte>(rng.next() & 0xff);
    for (std::size_t at = 0; at < w.bytes.size(); at += static_cast<std::size_t>(dec.bytes))
        for (std::size_t f = 0; f < dec.f16_scales.size(); ++f) {
            if (dec.f16_scales[f] < 0) continue;
            const float v = 0.002f + 0.01f * static_cast<float>(rng.next() % 1000) / 1000.0f;
            const std::uint16_t h = float_to_f16(f == 0 && rng.next() % 2 ? -v : v);
            std::memcpy(w.bytes.data() + at + static_cast<std::size_t>(dec.f16_scales[f]), &h, 2);
        }
    w.view = WeightView{"w", DType::Ggml, {N, K}, w.bytes.data(), w.bytes.size()};
    w.view.ggml = t;
    w.view.layout = WeightView::Layout::Rows;
    w.view.origin = DType::F32;
    return w;
}

std::vector<float> make_ggml_x(std::int64_t T, std::int64_t K, std::uint64_t seed) {
    test::Rng rng(seed);
    std::vector<float> x(static_cast<std::size_t>(T * K));
    for (auto& v : x) v = static_cast<float>(rng.symmetric());
    return x;
}

std::vector<float> run_ggml(const WeightView& w, const std::vector<float>& x, std::int64_t T, ThreadPool& pool, Isa level) {
    std::vector<float> y(static_cast<std::size_t>(T * w.rows()));
    detail::linear_ggml(w, {x.data(), w.cols()}, {y.data(), w.rows()}, T, pool, level);
    return y;
}

/// The vector levels this CPU runs.
std::vector<Isa> vector_levels() {
    std::vector<Isa> levels;
    for (Isa level : {Isa::Avx2, Isa::Avx512})
        if (active_isa() >= level) levels.push_back(level);
    return levels;
}

}  // namespace

TEST_CASE("linear_ggml: every block type equals its formula on the int8 activations, in double", "[kernels][linear][ggml]") {
    ThreadPool pool(2);
    const std::int64_t N = 37, T = 5;  // N not a multiple of the row tile
    for (GgmlType t : kTypes) {
        INFO(ggml_type_name(t));
        // the 32-value types also with rows that end in a part of a group of 8 blocks
        const std::int64_t K = ggml::block_decoder(t).values == 32 ? 416 : 512;
        const GgmlWeight w = make_ggml_weight(t, N, K, 11);
        const auto x = make_ggml_x(T, K, 12);
        const auto y = run_ggml(w.view, x, T, pool, Isa::Baseline);
        // the reference: the exactly dequantized weights times the activations as the kernel
        // quantizes them (per 32, quant_acts.hpp), summed in double
        detail::QuantActs a;
        detail::shape_activations(T, K, 32, a);
        detail::quantize_activations({x.data(), K}, 0, T, a);
        std::vector<double> row(static_cast<std::size_t>(K));
        double worst = 0;
        for (std::int64_t n = 0; n < N; ++n) {
            ggml::dequantize_row(t, w.bytes.data() + n * w.view.ggml_row_bytes(), K, row.data());
            for (std::int64_t tok = 0; tok < T; ++tok) {
                double want = 0, scale = 0;
                for (std::int64_t k = 0; k < K; ++k) {
                    const double xk = static_cast<double>(a.q_row(tok)[k]) * a.scale_row(tok)[k / 32];
                    want += row[static_cast<std::size_t>(k)] * xk;
                    scale += std::abs(row[static_cast<std::size_t>(k)] * xk);
                }
                worst = std::max(worst, std::abs(y[static_cast<std::size_t>(tok * N + n)] - want) / scale);
            }
        }
        CHECK(worst < 1e-6);  // float rounding of a few products and the 8-lane sum only
        // and against the float activations: the error of int8 activations per 32 values
        std::vector<double> exact(static_cast<std::size_t>(T * N));
        std::vector<double> xd(x.begin(), x.end());
        linear<double>(w.view, {xd.data(), K}, {exact.data(), N}, T, pool);
        double err = 0, norm = 0;
        for (std::size_t i = 0; i < exact.size(); ++i) {
            err += (y[i] - exact[i]) * (y[i] - exact[i]);
            norm += exact[i] * exact[i];
        }
        CHECK(std::sqrt(err / norm) < 0.02);
    }
}

TEST_CASE("linear_ggml is bit-identical for any thread count and token grouping", "[kernels][linear][ggml][threads]") {
    ThreadPool one(1), two(2), three(3);
    const std::int64_t N = 67, K = 768, T = 19;
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q2_K, GgmlType::Q5_1, GgmlType::IQ4_XS}) {
        INFO(ggml_type_name(t));
        const GgmlWeight w = make_ggml_weight(t, N, K, 3);
        const auto x = make_ggml_x(T, K, 4);
        std::vector<Isa> levels = vector_levels();
        levels.push_back(Isa::Baseline);
        for (Isa level : levels) {
            INFO(isa_name(level));
            const auto a = run_ggml(w.view, x, T, one, level), b = run_ggml(w.view, x, T, two, level), c = run_ggml(w.view, x, T, three, level);
            std::vector<float> d(a.size());
            for (std::int64_t tok = 0; tok < T; ++tok)  // token by token, as in decode
                detail::linear_ggml(w.view, {x.data() + tok * K, K}, {d.data() + tok * N, N}, 1, two, level);
            CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
            CHECK(std::memcmp(a.data(), c.data(), a.size() * 4) == 0);
            CHECK(std::memcmp(a.data(), d.data(), a.size() * 4) == 0);
        }
    }
}

namespace {

/// Every type's decoder of `level` (where it has one) writes the portable decoder's bytes, and
/// its linear_ggml the portable loops' bits, one token (the streamed stretches) and several.
void check_level_equals_portable(Isa level) {
    ThreadPool pool(2);
    for (GgmlType t : kTypes) {
        INFO(ggml_type_name(t));
        const std::int64_t K = ggml::block_decoder(t).values == 32 ? 4192 : 4352;  // more than one stretch, the last partial
        const GgmlWeight w = make_ggml_weight(t, 45, K, 5);
        const detail::GgmlRows portable_rows(w.view, Isa::Baseline), vector_rows(w.view, level);
        ggml::IntBlockBuffer pb, vb;
        const ggml::IntBlocks p = pb.view(8 * portable_rows.groups), v = vb.view(8 * vector_rows.groups);
        for (std::int64_t r = 0; r < 3; ++r) {
            portable_rows.decode(r, 0, portable_rows.groups, p);
            vector_rows.decode(r, 0, vector_rows.groups, v);
            const auto n = static_cast<std::size_t>(8 * portable_rows.groups);
            CHECK(std::memcmp(p.codes, v.codes, 32 * n) == 0);
            CHECK(std::memcmp(p.scale, v.scale, 4 * n) == 0);
            CHECK(std::memcmp(p.min, v.min, 4 * n) == 0);
            CHECK(std::memcmp(p.d, v.d, 4 * n) == 0);
            CHECK(std::memcmp(p.dmin, v.dmin, 4 * n) == 0);
        }
        for (const std::int64_t T : {1, 7}) {
            const auto x = make_ggml_x(T, K, 6);
            const auto portable = run_ggml(w.view, x, T, pool, Isa::Baseline), vector = run_ggml(w.view, x, T, pool, level);
            CHECK(std::memcmp(portable.data(), vector.data(), portable.size() * 4) == 0);
        }
    }
}

}  // namespace

TEST_CASE("avx2 path: linear_ggml's decoders and kernel equal the portable ones bit for bit", "[kernels][linear][ggml][isa][avx2]") {
    if (const auto why = test::level_unavailable(Isa::Avx2); !why.empty()) GEMMA4_SKIP(why);
    check_level_equals_portable(Isa::Avx2);
}

TEST_CASE("avx512 path: linear_ggml's kernel equals the portable loops bit for bit", "[kernels][linear][ggml][isa][avx512]") {
    if (const auto why = test::level_unavailable(Isa::Avx512); !why.empty()) GEMMA4_SKIP(why);
    check_level_equals_portable(Isa::Avx512);
}

TEST_CASE("linear over block matrices sharing an input equals one call per matrix, bit for bit", "[kernels][linear][ggml][shared]") {
    ThreadPool pool(2);
    const std::int64_t K = 512, T = 6;
    // a mixed file's attention: q and k Q4_K, v Q6_K
    const GgmlWeight q = make_ggml_weight(GgmlType::Q4_K, 40, K, 1), k = make_ggml_weight(GgmlType::Q4_K, 24, K, 2),
                     v = make_ggml_weight(GgmlType::Q6_K, 24, K, 3);
    const auto x = make_ggml_x(T, K, 4);
    std::vector<float> yq(T * 40), yk(T * 24), yv(T * 24);
    const LinearOut<float> outs[] = {{&q.view, {yq.data(), 40}}, {&k.view, {yk.data(), 24}}, {&v.view, {yv.data(), 24}}};
    linear<float>(std::span<const LinearOut<float>>(outs), {x.data(), K}, T, pool);
    for (const auto& [w, y] : {std::pair{&q, &yq}, std::pair{&k, &yk}, std::pair{&v, &yv}}) {
        std::vector<float> alone(y->size());
        linear<float>(w->view, {x.data(), K}, {alone.data(), w->view.rows()}, T, pool);
        CHECK(std::memcmp(alone.data(), y->data(), alone.size() * 4) == 0);
    }
    const GgmlWeight narrow = make_ggml_weight(GgmlType::Q4_K, 8, 256, 5);
    const detail::QuantTarget mixed[] = {{&q.view, {yq.data(), 40}}, {&narrow.view, {yk.data(), 8}}};
    CHECK_THROWS_MATCHES(detail::linear_ggml(std::span<const detail::QuantTarget>(mixed), {x.data(), K}, T, pool), InvalidArgument,
                         test::Has("'w' does not share the columns of 'w'"));
}

TEST_CASE("linear_ggml refuses rows that are not whole blocks", "[kernels][linear][ggml][errors]") {
    ThreadPool pool(1);
    GgmlWeight w = make_ggml_weight(GgmlType::Q4_K, 2, 256, 1);
    w.view.shape = {4, 128};
    std::vector<float> x(128), y(4);
    CHECK_THROWS_AS(detail::linear_ggml(w.view, {x.data(), 128}, {y.data(), 4}, 1, pool), ShapeError);
}
