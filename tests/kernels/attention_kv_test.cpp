// Attention over the cache in spans (kernels/attention.hpp) against a direct softmax, and the
// int8 KV cache option: storage error, memory, copy on write, and logits against the float cache.
#include <catch2/catch.hpp>

#include <gemma4/kernels/attention.hpp>
#include <gemma4/model/model.hpp>
#include <gemma4/model/random_checkpoint.hpp>

#include "support/temp_dir.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "kernels/kernel_test_support.hpp"
#include "support/skip.hpp"

using namespace gemma4;
using gemma4::test::Rng;

namespace {


std::vector<std::int32_t> ids_for(std::int64_t n, std::int64_t vocab, std::uint32_t seed) {
    std::vector<std::int32_t> ids;
    for (std::int64_t j = 0; j < n; ++j) {
        seed = seed * 1664525u + 1013904223u;
        auto id = static_cast<std::int32_t>((seed >> 8) % static_cast<std::uint32_t>(vocab));
        if (id >= 300 && id <= 306) id -= 10;  // not the tiny config's placeholder ids
        ids.push_back(id);
    }
    return ids;
}

}  // namespace

namespace {

/// attend_span over fixed spans of `len` keys, then merge_spans, in T at level `isa`, against a
/// direct softmax in double; every output within `tol`.
template <class T>
void check_attention_spans(const std::vector<std::pair<std::int64_t, std::int64_t>>& shapes, Isa isa, double tol) {
  for (const auto& shape : shapes)
    for (std::int64_t len : std::vector<std::int64_t>{1, 7, kernels::kAttnSpan, kernels::kAttnSpan + 1, 2 * kernels::kAttnSpan + 333}) {
        const std::int64_t d = shape.first, group = shape.second;
        INFO("keys " << len << " d " << d << " group " << group << " level " << isa_name(isa));
        Rng rng{static_cast<std::uint64_t>(len)};
        std::vector<T> q(static_cast<std::size_t>(group * d)), k(static_cast<std::size_t>(len * d)), v(k.size());
        for (auto& x : q) x = static_cast<T>(2 * rng.uniform());
        for (auto& x : k) x = static_cast<T>(rng.uniform());
        for (auto& x : v) x = static_cast<T>(rng.uniform());
        // spans as attn.core cuts them: fixed absolute boundaries
        std::vector<T> parts, scores;
        std::int64_t count = 0;
        for (std::int64_t j0 = 0; j0 < len; ++count) {
            const std::int64_t j1 = std::min(len - 1, (j0 / kernels::kAttnSpan + 1) * kernels::kAttnSpan - 1);
            scores.resize(static_cast<std::size_t>(group * (j1 - j0 + 1)));
            parts.resize(static_cast<std::size_t>((count + 1) * group * (d + 2)));
            kernels::attend_span(
                q.data(), group, d, j0, j1, [&](std::int64_t j) { return static_cast<const T*>(k.data() + j * d); },
                [&](std::int64_t j) { return static_cast<const T*>(v.data() + j * d); }, scores.data(), parts.data() + count * group * (d + 2), isa);
            j0 = j1 + 1;
        }
        for (std::int64_t h = 0; h < group; ++h) {
            std::vector<T> out(static_cast<std::size_t>(d));
            std::vector<double> s(static_cast<std::size_t>(len)), ref(static_cast<std::size_t>(d), 0.0);
            kernels::merge_spans(parts.data() + h * (d + 2), count, group * (d + 2), d, out.data());
            double mx = -1e300, sum = 0;
            for (std::int64_t j = 0; j < len; ++j) {
                double dot = 0;
                for (std::int64_t i = 0; i < d; ++i)
                    dot += static_cast<double>(q[static_cast<std::size_t>(h * d + i)]) * static_cast<double>(k[static_cast<std::size_t>(j * d + i)]);
                s[static_cast<std::size_t>(j)] = dot;
                mx = std::max(mx, dot);
            }
            for (auto& x : s) sum += (x = std::exp(x - mx));
            for (std::int64_t j = 0; j < len; ++j)
                for (std::int64_t i = 0; i < d; ++i)
                    ref[static_cast<std::size_t>(i)] += s[static_cast<std::size_t>(j)] / sum * static_cast<double>(v[static_cast<std::size_t>(j * d + i)]);
            std::int64_t bad = 0;
            for (std::int64_t i = 0; i < d; ++i) bad += !(std::fabs(static_cast<double>(out[static_cast<std::size_t>(i)]) - ref[static_cast<std::size_t>(i)]) <= tol);
            CHECK(bad == 0);
        }
    }
}

/// Float shapes: (64, 2) the sliding layers' group of two (per-key value pass), (128, 16) the
/// full layers' (register-blocked value pass), (256, 4), (64, 5) a partial head block.
const std::vector<std::pair<std::int64_t, std::int64_t>> kFloatAttentionShapes{{64, 2}, {128, 16}, {256, 4}, {64, 5}};
constexpr double kFloatAttentionTol = 1e-4;

}  // namespace

TEST_CASE("attention in spans equals a direct softmax over all keys", "[kernels][attention]") {
    // (24, 3): the per-key value pass; (64, 5): the register-blocked one, with a partial head block;
    // (32, 2): score blocks of two heads (the sliding layers' group)
    check_attention_spans<double>({{24, 3}, {64, 5}, {32, 2}}, Isa::Baseline, 1e-13);
    check_attention_spans<float>(kFloatAttentionShapes, Isa::Baseline, kFloatAttentionTol);
}

// The float score and value passes of each vector level, one test case per level (ctest lists a
// level this machine cannot run as skipped).
TEST_CASE("avx2 path: float attention in spans equals a direct softmax", "[kernels][attention][isa][avx2]") {
    if (const auto why = test::level_unavailable(Isa::Avx2); !why.empty()) GEMMA4_SKIP(why);
    check_attention_spans<float>(kFloatAttentionShapes, Isa::Avx2, kFloatAttentionTol);
}

TEST_CASE("avx512 path: float attention in spans equals a direct softmax", "[kernels][attention][isa][avx512]") {
    if (const auto why = test::level_unavailable(Isa::Avx512); !why.empty()) GEMMA4_SKIP(why);
    check_attention_spans<float>(kFloatAttentionShapes, Isa::Avx512, kFloatAttentionTol);
}

TEST_CASE("int8 KV cache: values within half a step, a quarter of the float bytes, copy on write", "[kernels][cache][int8]") {
    const Gemma4Config c = test::small_model_config();
    KVCache<float> f(c), q(c, KVCacheOptions{.kv_dtype = KVDtype::Int8});
    CHECK_FALSE(f.int8());
    CHECK(q.int8());
    for (AttentionKind kind : {AttentionKind::Sliding, AttentionKind::Full}) {
        std::int64_t kvd = 0, heads = 0;
        for (std::int64_t l = 0; l < c.num_hidden_layers; ++l)
            if (c.layer(l).kind == kind) kvd = c.layer(l).kv_dim(), heads = c.layer(l).num_kv_heads;
        // per position and layer: K and V, float or int8 codes plus a float scale per head
        CHECK(f.bytes_per_position(kind) == static_cast<std::size_t>(2 * kvd * 4));
        CHECK(q.bytes_per_position(kind) == static_cast<std::size_t>(2 * (kvd + 4 * heads)));
    }
    const SeqId s = q.add_sequence();
    q.reserve(s, 3);
    const std::int64_t L = 3, kvd = c.layer(L).kv_dim(), hd = c.layer(L).head_dim;
    Rng rng{7};
    std::vector<std::vector<float>> ks, vs;
    for (std::int64_t p = 0; p < 3; ++p) {
        std::vector<float> k(static_cast<std::size_t>(kvd)), v(k.size());
        for (auto& x : k) x = static_cast<float>(3 * rng.symmetric());
        for (auto& x : v) x = static_cast<float>(rng.symmetric() * (p == 1 ? 1e-3 : 1.0));
        if (p == 2) std::fill(v.begin(), v.end(), 0.0f);  // an all-zero head stays exactly zero
        q.store(L, s, p, k.data(), v.data());
        ks.push_back(k);
        vs.push_back(v);
    }
    for (std::int64_t p = 0; p < 3; ++p)
        for (int kv = 0; kv < 2; ++kv) {
            const KVInt8Row row = kv ? q.value_int8(L, s, p) : q.key_int8(L, s, p);
            const auto& src = kv ? vs[static_cast<std::size_t>(p)] : ks[static_cast<std::size_t>(p)];
            for (std::int64_t i = 0; i < kvd; ++i) {
                const float scale = row.scales[i / hd];
                CHECK(std::fabs(static_cast<float>(row.codes[i]) * scale - src[static_cast<std::size_t>(i)]) <= 0.5f * scale * (1 + 1e-6f) + 1e-30f);
            }
        }
    q.advance(s, 3);
    REQUIRE_THROWS_AS(q.key(L, s, 0), InvalidArgument);
    REQUIRE_THROWS_WITH(q.key(L, s, 0), Catch::Contains("int8"));

    // fork shares the page; the next write copies it, codes and scales included
    const SeqId b = q.fork(s);
    const std::int32_t shared = q.page_of(s, AttentionKind::Full, 0);
    CHECK(q.page_refcount(AttentionKind::Full, shared) == 2);
    q.reserve(b, 1);
    CHECK(q.page_of(b, AttentionKind::Full, 0) != shared);
    for (std::int64_t p = 0; p < 3; ++p) {
        const KVInt8Row x = q.key_int8(L, s, p), y = q.key_int8(L, b, p);
        CHECK(std::equal(x.codes, x.codes + kvd, y.codes));
        CHECK(std::equal(x.scales, x.scales + kvd / hd, y.scales));
    }
    q.remove_sequence(s);
    q.remove_sequence(b);
    CHECK(q.bytes_in_use() == 0);
}

TEST_CASE("logits with the int8 KV cache stay close to the float cache", "[kernels][cache][int8]") {
    const auto dir = test::temp_dir("kv_int8_logits");
    const Gemma4Config c = test::small_model_config();
    write_random_checkpoint(dir, c, {.seed = 17, .dtype = DType::BF16});
    const Model<float> model = Model<float>::load(dir, ModelOptions{2});
    double worst = 0, scale = 0, kl = 0;
    std::int64_t rows = 0, agree = 0;
    std::size_t float_bytes = 0, int8_bytes = 0;
    for (std::uint32_t seed : {1u, 2u, 3u}) {
        const auto prompt = ids_for(40, c.vocab_size, seed);  // several windows of the sliding layers
        KVCache<float> fc = model.make_cache(), qc = model.make_cache({.kv_dtype = KVDtype::Int8});
        const SeqId fs = fc.add_sequence(), qs = qc.add_sequence();
        std::vector<Logits<float>> a, b;
        a.push_back(model.forward(std::span<const std::int32_t>(prompt).first(32), fc, fs));
        b.push_back(model.forward(std::span<const std::int32_t>(prompt).first(32), qc, qs));
        for (std::size_t t = 32; t < prompt.size(); ++t) {  // then decode token by token
            a.push_back(model.forward(std::span<const std::int32_t>(&prompt[t], 1), fc, fs));
            b.push_back(model.forward(std::span<const std::int32_t>(&prompt[t], 1), qc, qs));
        }
        float_bytes = fc.bytes_in_use();
        int8_bytes = qc.bytes_in_use();
        for (std::size_t i = 0; i < a.size(); ++i)
            for (std::int64_t r = 0; r < a[i].rows; ++r, ++rows) {
                const auto x = a[i].row(r), y = b[i].row(r);
                std::size_t ax = 0, ay = 0;
                double mx = -1e300, my = -1e300;
                for (std::size_t v = 0; v < x.size(); ++v) {
                    worst = std::max(worst, std::fabs(double(x[v]) - double(y[v])));
                    scale = std::max(scale, std::fabs(double(x[v])));
                    if (x[v] > x[ax]) ax = v;
                    if (y[v] > y[ay]) ay = v;
                    mx = std::max(mx, double(x[v]));
                    my = std::max(my, double(y[v]));
                }
                agree += ax == ay;
                double zx = 0, zy = 0;
                for (std::size_t v = 0; v < x.size(); ++v) zx += std::exp(double(x[v]) - mx), zy += std::exp(double(y[v]) - my);
                for (std::size_t v = 0; v < x.size(); ++v) {
                    const double px = std::exp(double(x[v]) - mx) / zx, py = std::exp(double(y[v]) - my) / zy;
                    if (px > 0) kl += px * std::log(px / std::max(py, 1e-300));
                }
            }
    }
    const double top1 = static_cast<double>(agree) / static_cast<double>(rows), mean_kl = kl / static_cast<double>(rows);
    std::printf("int8 KV cache: max |Δlogit| %.3e (max |logit| %.2f), top-1 agreement %.4f, mean KL %.3e, bytes %zu vs %zu\n", worst,
                scale, top1, mean_kl, int8_bytes, float_bytes);
    // Measured: max |Δ| 0.74 of max |logit| 5.0, top-1 0.958, mean KL 2.8e-3 (random weights give
    // keys with outlier channels, the hard case for one scale per head; int8 weights: KL 4e-3).
    CHECK(worst <= 0.25 * scale);
    CHECK(top1 >= 0.9);
    CHECK(mean_kl <= 1e-2);
    // codes are a quarter of the float bytes; the per-head scales add 4 / head_dim of that
    CHECK(static_cast<double>(int8_bytes) <= 0.27 * static_cast<double>(float_bytes));
    CHECK(static_cast<double>(int8_bytes) >= 0.25 * static_cast<double>(float_bytes));
}
