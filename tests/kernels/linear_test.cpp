// linear for every weight format against a double-precision transcription of y = x·wᵀ, on odd
// shapes, with guard regions around every output row; quantization error bounds; each vector
// level's bf16 and Q8/Q4 kernels against the baseline ones (one test case per level, skipped
// where the level does not run); thread-count and token-count invariance.
#include <catch2/catch.hpp>

#include <gemma4/io/safetensors_writer.hpp>
#include <gemma4/kernels/isa/prefetch.hpp>
#include <gemma4/kernels/linear.hpp>
#include <gemma4/tensor/quant.hpp>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/kernel_test_support.hpp"
#include "support/message_matcher.hpp"
#include "support/skip.hpp"

using namespace gemma4;
using gemma4::test::Rng;

namespace {

/// A weight matrix in one storage format, owning its bytes, plus its exact values as stored.
struct TestWeight {
    std::vector<std::byte> bytes, scales;
    WeightView view;
    std::vector<double> values;  // [N, K], what the format holds (dequantized)
};

/// Q8/Q4 weights are made in the file layout (rows) in blocks of `block` and, unless `layout`
/// says Rows, re-laid as panels, as the model holds them.
TestWeight make_weight(DType dtype, std::int64_t N, std::int64_t K, std::uint64_t seed,
                       WeightView::Layout layout = WeightView::Layout::Panels, std::int64_t block = 32) {
    Rng rng{seed};
    std::vector<float> src(static_cast<std::size_t>(N * K));
    for (std::size_t i = 0; i < src.size(); ++i) {
        src[i] = static_cast<float>(rng.symmetric());
        if (i % 37 == 5) src[i] *= 8.0f;  // outliers, so block scales differ
    }
    TestWeight w;
    w.view.name = "w";
    w.view.dtype = dtype;
    w.view.shape = {N, K};
    w.view.block = block;
    if (is_quantized(dtype)) {
        const std::int64_t rb = quant::row_bytes(dtype, K), nb = quant::blocks_per_row(K, block);
        w.bytes.resize(static_cast<std::size_t>(N * rb));
        w.scales.resize(static_cast<std::size_t>(N * nb * 2));
        for (std::int64_t n = 0; n < N; ++n)
            quant::quantize_row(dtype, block, src.data() + n * K, K, w.bytes.data() + n * rb,
                                reinterpret_cast<std::uint16_t*>(w.scales.data()) + n * nb);
        w.view.scales = w.scales.data();
        w.view.layout = WeightView::Layout::Rows;
        if (layout == WeightView::Layout::Panels) {
            const std::int64_t np = quant::panel_count(N), pb = quant::panel_bytes(dtype, block, K);
            std::vector<std::byte> panels(static_cast<std::size_t>(np * pb));
            for (std::int64_t p = 0; p < np; ++p) quant::clear_panel(dtype, block, K, panels.data() + p * pb);
            for (std::int64_t n = 0; n < N; ++n)
                quant::row_to_panel(dtype, block, w.bytes.data() + n * rb, reinterpret_cast<const std::uint16_t*>(w.scales.data()) + n * nb, K,
                                    n % quant::kPanelRows, panels.data() + n / quant::kPanelRows * pb);
            w.bytes = std::move(panels);
            w.scales.clear();
            w.view.scales = nullptr;
            w.view.layout = WeightView::Layout::Panels;
        }
    } else {
        std::vector<double> d(src.begin(), src.end());
        w.bytes = encode_values(d, dtype);
    }
    w.view.data = w.bytes.data();
    w.view.size_bytes = w.bytes.size();
    w.values.resize(src.size());
    for (std::int64_t i = 0; i < N * K; ++i) w.values[static_cast<std::size_t>(i)] = w.view.at<double>(i);
    return w;
}

std::vector<float> make_x(std::int64_t tokens, std::int64_t stride, std::uint64_t seed) {
    Rng rng{seed};
    std::vector<float> x(static_cast<std::size_t>(tokens * stride));
    for (auto& v : x) v = static_cast<float>(rng.symmetric());
    return x;
}

constexpr std::int64_t kGuard = 5;
constexpr float kPoison = -12345.678f;

/// Output buffer: every row framed by kGuard poisoned values on both sides.
struct Guarded {
    std::int64_t tokens, N, stride;
    std::vector<float> buf;
    Guarded(std::int64_t t, std::int64_t n) : tokens(t), N(n), stride(n + 2 * kGuard), buf(static_cast<std::size_t>(t * stride + 2 * kGuard), kPoison) {}
    Rows<float> rows() { return {buf.data() + kGuard, stride}; }
    float at(std::int64_t t, std::int64_t n) const { return buf[static_cast<std::size_t>(kGuard + t * stride + n)]; }
    bool guards_intact() const {
        for (std::int64_t i = 0; i < static_cast<std::int64_t>(buf.size()); ++i) {
            const std::int64_t r = i - kGuard;
            const bool inside = r >= 0 && r < tokens * stride && (r % stride) < N;
            if (!inside && buf[static_cast<std::size_t>(i)] != kPoison) return false;
        }
        return true;
    }
};

std::string describe(DType d, std::int64_t N, std::int64_t K, std::int64_t T, std::int64_t block = 32) {
    std::ostringstream s;
    s << dtype_name(d) << " N=" << N << " K=" << K << " tokens=" << T;
    if (is_quantized(d)) s << " block=" << block;
    return s.str();
}

/// The block sizes of the Q8/Q4 formats.
constexpr std::int64_t kBlocks[] = {32, 64};

/// Bound on |y − y_ref| for one output. Float accumulation: K·ε·Σ|w·x| (a few ε per term).
/// Q8/Q4 additionally quantize x per block to int8: |Δx| ≤ amax_b/254 per element.
double bound(const TestWeight& w, std::int64_t n, const float* x, std::int64_t K) {
    const double eps = std::numeric_limits<float>::epsilon();
    double abs_sum = 0, quant = 0;
    for (std::int64_t k = 0; k < K; ++k) abs_sum += std::fabs(w.values[static_cast<std::size_t>(n * K + k)] * x[k]);
    const std::int64_t B = w.view.block;
    if (w.view.quantized())
        for (std::int64_t b = 0; b * B < K; ++b) {
            double amax = 0, wsum = 0;
            for (std::int64_t k = b * B; k < std::min(K, b * B + B); ++k) {
                amax = std::max(amax, std::fabs(static_cast<double>(x[k])));
                wsum += std::fabs(w.values[static_cast<std::size_t>(n * K + k)]);
            }
            quant += wsum * amax / 254.0 * (1 + 1e-5);
        }
    return 2.0 * (static_cast<double>(K) + 4) * eps * abs_sum + quant + 1e-30;
}

/// Two computations of the same products agree to 1e-6 of Σ|w·x| per output (the same exact
/// int32 block sums, in another float order).
void check_same_sums(const TestWeight& w, const std::vector<float>& x, const Guarded& a, const Guarded& b, std::int64_t T,
                     std::int64_t N, std::int64_t K) {
    for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t n = 0; n < N; ++n) {
            double mag = 0;
            for (std::int64_t k = 0; k < K; ++k) mag += std::fabs(w.values[static_cast<std::size_t>(n * K + k)] * x[static_cast<std::size_t>(t * K + k)]);
            CHECK(std::fabs(a.at(t, n) - b.at(t, n)) <= 1e-6 * mag);
        }
}

void check_linear(DType dtype, std::int64_t N, std::int64_t K, std::int64_t T, ThreadPool& pool, std::int64_t block = 32) {
    INFO(describe(dtype, N, K, T, block));
    const TestWeight w = make_weight(dtype, N, K, 1000 + static_cast<std::uint64_t>(N * 31 + K), WeightView::Layout::Panels, block);
    const std::int64_t xstride = K + 3;
    const auto x = make_x(T, xstride, 77 + static_cast<std::uint64_t>(T));
    Guarded y(T, N);
    linear<float>(w.view, {x.data(), xstride}, y.rows(), T, pool);
    REQUIRE(y.guards_intact());
    std::int64_t bad = 0;
    for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t n = 0; n < N; ++n) {
            double ref = 0;
            for (std::int64_t k = 0; k < K; ++k)
                ref += w.values[static_cast<std::size_t>(n * K + k)] * static_cast<double>(x[static_cast<std::size_t>(t * xstride + k)]);
            const double err = std::fabs(static_cast<double>(y.at(t, n)) - ref);
            const double tol = bound(w, n, x.data() + t * xstride, K);
            if (!(err <= tol)) {
                if (bad < 3) UNSCOPED_INFO("t=" << t << " n=" << n << " got " << y.at(t, n) << " ref " << ref << " tol " << tol);
                ++bad;
            }
        }
    CHECK(bad == 0);
}

}  // namespace

TEST_CASE("linear matches the double reference on odd shapes, guards intact", "[kernels][linear]") {
    ThreadPool pool(2);
    const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {{1, 1}, {3, 17}, {5, 31}, {13, 129}, {17, 200}, {9, 385}, {33, 64}};
    for (DType dtype : {DType::BF16, DType::F16, DType::F32, DType::Q8, DType::Q4})
        for (auto [N, K] : shapes)
            for (std::int64_t T : {1, 2, 3, 7, 33})
                for (std::int64_t block : kBlocks)
                    if (is_quantized(dtype) || block == 32) check_linear(dtype, N, K, T, pool, block);
}

TEST_CASE("linear in double uses the exact stored values", "[kernels][linear]") {
    ThreadPool pool(2);
    const std::pair<DType, std::int64_t> formats[] = {{DType::BF16, 32}, {DType::Q8, 32}, {DType::Q4, 32}, {DType::Q8, 64}, {DType::Q4, 64}};
    for (const auto& [dtype, block] : formats) {
        const std::int64_t N = 7, K = 45, T = 3;
        INFO(describe(dtype, N, K, T, block));
        const TestWeight w = make_weight(dtype, N, K, 5, WeightView::Layout::Panels, block);
        std::vector<double> x(static_cast<std::size_t>(T * K)), y(static_cast<std::size_t>(T * N));
        Rng rng{9};
        for (auto& v : x) v = rng.symmetric();
        linear<double>(w.view, {x.data(), K}, {y.data(), N}, T, pool);
        for (std::int64_t t = 0; t < T; ++t)
            for (std::int64_t n = 0; n < N; ++n) {
                double ref = 0, mag = 0;
                for (std::int64_t k = 0; k < K; ++k) {
                    ref += w.values[static_cast<std::size_t>(n * K + k)] * x[static_cast<std::size_t>(t * K + k)];
                    mag += std::fabs(w.values[static_cast<std::size_t>(n * K + k)] * x[static_cast<std::size_t>(t * K + k)]);
                }
                CHECK(std::fabs(y[static_cast<std::size_t>(t * N + n)] - ref) <= 4 * K * 1.2e-16 * mag);
            }
    }
}

TEST_CASE("quantize/dequantize error is within half a step of the block scale", "[kernels][quant]") {
    for (DType dtype : {DType::Q8, DType::Q4})
        for (std::int64_t B : kBlocks)
            for (std::int64_t K : {1, 31, 32, 33, 63, 64, 65, 127, 128, 129, 300}) {
                INFO(dtype_name(dtype) << " K=" << K << " block=" << B);
                Rng rng{static_cast<std::uint64_t>(K)};
                std::vector<float> src(static_cast<std::size_t>(K));
                for (std::int64_t i = 0; i < K; ++i) src[static_cast<std::size_t>(i)] = static_cast<float>(rng.symmetric() * (i % 32 == 3 ? 10 : 1));
                std::vector<std::byte> codes(static_cast<std::size_t>(quant::row_bytes(dtype, K)), std::byte{0xAB});
                std::vector<std::uint16_t> scales(static_cast<std::size_t>(quant::blocks_per_row(K, B)));
                quant::quantize_row(dtype, B, src.data(), K, codes.data(), scales.data());
                std::vector<float> back(static_cast<std::size_t>(K));
                quant::dequantize_row(dtype, B, codes.data(), scales.data(), K, back.data());
                for (std::int64_t b = 0; b < quant::blocks_per_row(K, B); ++b) {
                    float amax = 0;
                    for (std::int64_t i = b * B; i < std::min(K, b * B + B); ++i) amax = std::max(amax, std::fabs(src[static_cast<std::size_t>(i)]));
                    const double d = f16_to_float(scales[static_cast<std::size_t>(b)]);
                    // the f16 scale is max/127 (max/7) of its block to within f16 rounding (2^-11 relative)
                    CHECK(std::fabs(d - amax / quant::max_code(dtype)) <= amax / quant::max_code(dtype) * 0x1.0p-11);
                    for (std::int64_t i = b * B; i < std::min(K, b * B + B); ++i)
                        CHECK(std::fabs(static_cast<double>(back[static_cast<std::size_t>(i)]) - src[static_cast<std::size_t>(i)]) <= 0.5 * d * (1 + 1e-6));
                }
                for (std::int64_t i = K; i < quant::padded_cols(K); ++i) CHECK(quant::code_at(dtype, codes.data(), i) == 0);
            }
}

TEST_CASE("linear is bit-identical for any thread count and token grouping", "[kernels][linear][threads]") {
    ThreadPool one(1), two(2), three(3);
    const std::pair<DType, std::int64_t> formats[] = {{DType::BF16, 32}, {DType::Q8, 32}, {DType::Q4, 32}, {DType::Q8, 64}, {DType::Q4, 64}};
    for (const auto& [dtype, block] : formats) {
        INFO(dtype_name(dtype) << " block=" << block);
        const std::int64_t N = 67, K = 300, T = 37;  // several passes of 16 tokens and a partial one
        const TestWeight w = make_weight(dtype, N, K, 3, WeightView::Layout::Panels, block);
        const auto x = make_x(T, K, 4);
        std::vector<float> a(static_cast<std::size_t>(T * N)), b(a.size()), c(a.size()), d(a.size());
        linear<float>(w.view, {x.data(), K}, {a.data(), N}, T, one);
        linear<float>(w.view, {x.data(), K}, {b.data(), N}, T, two);
        linear<float>(w.view, {x.data(), K}, {c.data(), N}, T, three);
        for (std::int64_t t = 0; t < T; ++t)  // token by token, as in decode
            linear<float>(w.view, {x.data() + t * K, K}, {d.data() + t * N, N}, 1, two);
        CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
        CHECK(std::memcmp(a.data(), c.data(), a.size() * 4) == 0);
        CHECK(std::memcmp(a.data(), d.data(), a.size() * 4) == 0);
    }
}

TEST_CASE("panels hold the rows of the file layout, padding rows zero", "[kernels][quant][panels]") {
    for (DType dtype : {DType::Q8, DType::Q4})
        for (std::int64_t B : kBlocks)
            for (auto [N, K] : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 1}, {16, 128}, {19, 385}, {40, 64}}) {
                INFO(describe(dtype, N, K, 0, B));
                const TestWeight rows = make_weight(dtype, N, K, 21, WeightView::Layout::Rows, B);
                const TestWeight panels = make_weight(dtype, N, K, 21, WeightView::Layout::Panels, B);
                REQUIRE(panels.view.layout == WeightView::Layout::Panels);
                CHECK(panels.bytes.size() == static_cast<std::size_t>(quant::panel_count(N) * quant::panel_bytes(dtype, B, K)));
                CHECK(panels.view.scale_bytes() == 0);  // held in the panels
                CHECK(rows.view.scale_bytes() == static_cast<std::size_t>(N * quant::blocks_per_row(K, B) * 2));
                CHECK(rows.values == panels.values);  // at() reads both layouts alike
                const std::int64_t rb = quant::row_bytes(dtype, K), nb = quant::blocks_per_row(K, B);
                std::vector<std::byte> a(static_cast<std::size_t>(rb)), b(a.size());
                std::vector<std::uint16_t> sa(static_cast<std::size_t>(nb)), sb(sa.size());
                for (std::int64_t n = 0; n < N; ++n) {
                    rows.view.quant_row(n, a.data(), sa.data());
                    panels.view.quant_row(n, b.data(), sb.data());
                    CHECK(a == b);
                    CHECK(sa == sb);
                }
                // the rows past N in the last panel are zero values
                const std::int64_t last = quant::panel_count(N) - 1;
                for (std::int64_t r = N - last * quant::kPanelRows; r < quant::kPanelRows; ++r)
                    for (std::int64_t i = 0; i < K; ++i)
                        CHECK(quant::panel_value_at(dtype, B, panels.view.panel(last), r, i) == 0.0f);
                // Group g (128 columns) of a panel is its scales then its codes: scale k (of 128 / B)
                // of row r at g·group_bytes + 2·(16·k + r), and byte j of row r's codes at
                // g·group_bytes + group_scale_bytes + 64·(j' / 4) + 4·r + j' % 4 (j' = j within the group).
                const std::int64_t r = std::min<std::int64_t>(N, quant::kPanelRows) - 1, per_group = 128 / B;
                rows.view.quant_row(r, a.data(), sa.data());
                const std::int64_t gb = quant::row_bytes(dtype, quant::kRowAlign), group = quant::group_bytes(dtype, B);
                CHECK(group == (dtype == DType::Q8 ? 2048 : 1024) + 32 * per_group);
                for (std::int64_t j = 0; j < rb; ++j) {
                    const std::int64_t jj = j % gb;
                    CHECK(panels.bytes[static_cast<std::size_t>(j / gb * group + 32 * per_group + 64 * (jj / 4) + 4 * r + jj % 4)] ==
                          a[static_cast<std::size_t>(j)]);
                }
                for (std::int64_t b = 0; b < nb; ++b) {
                    const std::size_t at =
                        static_cast<std::size_t>(b / per_group * group + 2 * (16 * (b % per_group) + r));
                    std::uint16_t s;
                    std::memcpy(&s, panels.bytes.data() + at, 2);
                    CHECK(s == sa[static_cast<std::size_t>(b)]);
                }
                // unit u (32 columns) of a panel: Q8 at 512·(u % 4) of its group's codes, Q4 in the
                // low (u % 4 < 2) or high nibbles of the 512 bytes at 512·(u % 2); a block's units in turn
                for (std::int64_t u = 0; u < quant::padded_cols(K) / 32; ++u) {
                    const std::int64_t at = quant::unit_codes_offset(dtype, B, u);
                    CHECK(at == u / 4 * group + 32 * per_group + 512 * (dtype == DType::Q8 ? u % 4 : u % 2));
                    if (u % (B / 32) == 0) CHECK(quant::block_codes_offset(dtype, B, u / (B / 32)) == at);
                    const std::int64_t col = 32 * u;  // its first column, of row r: in the word at 4·r of its first 64 bytes
                    const int code = quant::code_in_byte(dtype, panels.bytes[static_cast<std::size_t>(at + 4 * r)], col);
                    CHECK(code == quant::code_at(dtype, a.data(), col));
                    if (dtype == DType::Q4) CHECK(quant::unit_high(u) == quant::q4_high(col));
                }
            }
}

TEST_CASE("linear on weights held as rows equals linear on panels", "[kernels][linear][panels]") {
    ThreadPool pool(2);
    for (DType dtype : {DType::Q8, DType::Q4})
        for (std::int64_t block : kBlocks) {
            const std::int64_t N = 21, K = 200, T = 5;
            INFO(describe(dtype, N, K, T, block));
            const TestWeight rows = make_weight(dtype, N, K, 4, WeightView::Layout::Rows, block),
                             panels = make_weight(dtype, N, K, 4, WeightView::Layout::Panels, block);
            const auto x = make_x(T, K, 5);
            Guarded a(T, N), b(T, N);
            linear<float>(rows.view, {x.data(), K}, a.rows(), T, pool);
            linear<float>(panels.view, {x.data(), K}, b.rows(), T, pool);
            REQUIRE(a.guards_intact());
            REQUIRE(b.guards_intact());
            check_same_sums(rows, x, a, b, T, N, K);
        }
}

namespace {

/// linear_quant with kernels a and b on Q8/Q4 weights of several shapes, for each token count;
/// `check(w, x, ya, yb, T, N, K)` judges the two outputs (guards are checked here).
template <class Check>
void compare_kernels(detail::QuantKernel a, detail::QuantKernel b, std::initializer_list<std::int64_t> token_counts, Check check) {
    ThreadPool pool(2);
    for (DType dtype : {DType::Q8, DType::Q4})
        for (std::int64_t block : kBlocks)
            for (auto [N, K] : std::vector<std::pair<std::int64_t, std::int64_t>>{{5, 31}, {19, 385}, {8, 3840}, {40, 256}})
                for (std::int64_t T : token_counts) {
                    INFO(describe(dtype, N, K, T, block) << " kernels " << detail::quant_kernel_name(a) << " vs " << detail::quant_kernel_name(b));
                    const TestWeight w = make_weight(dtype, N, K, 8, WeightView::Layout::Panels, block);
                    const auto x = make_x(T, K, 6);
                    Guarded ya(T, N), yb(T, N);
                    detail::linear_quant(w.view, {x.data(), K}, ya.rows(), T, pool, a);
                    detail::linear_quant(w.view, {x.data(), K}, yb.rows(), T, pool, b);
                    REQUIRE(ya.guards_intact());
                    REQUIRE(yb.guards_intact());
                    check(w, x, ya, yb, T, N, K);
                }
}

/// y = x·wᵀ for bf16 weights at `level` against the baseline (xsimd) kernel, on the shapes of
/// compare_kernels: the same products in another float order.
void compare_bf16(Isa level) {
    ThreadPool pool(2);
    for (auto [N, K] : std::vector<std::pair<std::int64_t, std::int64_t>>{{5, 31}, {19, 385}, {8, 3840}, {40, 256}})
        for (std::int64_t T : {1, 3, 7, 16, 17, 40}) {
            INFO(describe(DType::BF16, N, K, T) << " level " << isa_name(level) << " vs baseline");
            const TestWeight w = make_weight(DType::BF16, N, K, 9);
            const auto x = make_x(T, K, 10);
            Guarded ya(T, N), yb(T, N);
            detail::linear_bf16(w.view, {x.data(), K}, ya.rows(), T, pool, level);
            detail::linear_bf16(w.view, {x.data(), K}, yb.rows(), T, pool, Isa::Baseline);
            REQUIRE(ya.guards_intact());
            REQUIRE(yb.guards_intact());
            check_same_sums(w, x, ya, yb, T, N, K);
        }
}

void same_bits(const TestWeight& w, const std::vector<float>& x, const Guarded& a, const Guarded& b, std::int64_t T, std::int64_t N,
               std::int64_t K) {
    CHECK(std::memcmp(a.buf.data(), b.buf.data(), a.buf.size() * sizeof(float)) == 0);
    std::int64_t bad = 0;  // and against the exact products of the stored values
    for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t n = 0; n < N; ++n) {
            double ref = 0;
            for (std::int64_t k = 0; k < K; ++k)
                ref += w.values[static_cast<std::size_t>(n * K + k)] * static_cast<double>(x[static_cast<std::size_t>(t * K + k)]);
            bad += !(std::fabs(a.at(t, n) - ref) <= bound(w, n, x.data() + t * K, K));
        }
    CHECK(bad == 0);
}

}  // namespace

TEST_CASE("the level's Q8/Q4 kernel is the one named for it", "[kernels][linear][isa]") {
    const Isa isa = active_isa();
    const detail::QuantKernel k = detail::quant_kernel_for(isa, isa_report().features);
    CHECK(detail::quant_kernel_runs(k));
    CHECK(active_kernels().quant == detail::quant_kernel_name(k));
    if (isa == Isa::Baseline) CHECK(k == detail::QuantKernel::Portable);
    if (isa == Isa::Avx512) CHECK(k == detail::QuantKernel::Avx512);
    if (isa == Isa::Amx) CHECK(k == detail::QuantKernel::Amx);
    if (isa == Isa::Avx2) CHECK((k == detail::QuantKernel::Avx2 || k == detail::QuantKernel::AvxVnni));
    // nothing above the level runs, whatever the CPU has
    if (isa < Isa::Avx512) CHECK_FALSE(detail::quant_kernel_runs(detail::QuantKernel::Avx512));
    if (isa < Isa::Avx2) CHECK_FALSE(detail::quant_kernel_runs(detail::QuantKernel::Avx2));
}

TEST_CASE("the AVX-512 passes prefetch as tuned, but one Q8 token on Intel CPUs and 4+ on AMD ones into L2 only, one token on AMD not at all",
          "[kernels][linear][isa]") {
    using detail::PanelPrefetch;
    CpuFeatures intel, amd;
    amd.amd = true;
    // the tuned distances: one Q8 token into L1 only, Q4 and several tokens into L2 as well,
    // further in front for fewer tokens
    CHECK(detail::panel_prefetch(DType::Q8, 1).l1 > 0);
    CHECK(detail::panel_prefetch(DType::Q8, 1).l2 == 0);
    CHECK(detail::panel_prefetch(DType::Q4, 1).l2 > detail::panel_prefetch(DType::Q4, 1).l1);
    CHECK(detail::panel_prefetch(DType::Q8, 16).l2 > detail::panel_prefetch(DType::Q8, 16).l1);
    CHECK(detail::panel_prefetch(DType::Q8, 4).l1 > detail::panel_prefetch(DType::Q8, 16).l1);
    for (const DType t : {DType::Q8, DType::Q4})
        for (const std::int64_t tokens : {1, 2, 4, 5, 16}) {
            CAPTURE(static_cast<int>(t), tokens);
            const PanelPrefetch on_intel = detail::avx512_panel_prefetch(t, tokens, intel);
            if (t == DType::Q8 && tokens == 1) CHECK(on_intel == PanelPrefetch{0, detail::kIntelQ8OneTokenAheadL2});
            else CHECK(on_intel == detail::panel_prefetch(t, tokens));
            const PanelPrefetch on_amd = detail::avx512_panel_prefetch(t, tokens, amd);
            if (tokens == 1) CHECK_FALSE(on_amd);
            else if (t == DType::Q8 && tokens >= detail::kAmdQ8L2OnlyTokens) CHECK(on_amd == PanelPrefetch{0, detail::kAmdQ8AheadL2});
            else CHECK(on_amd == detail::panel_prefetch(t, tokens));
        }
}

// One test case per vector level, so that ctest lists a level this machine cannot run (the CPU
// lacks it, GEMMA4_ISA caps it) as skipped rather than passed. Every vector Q8/Q4 kernel gives
// the same bits as the AVX2 one, which runs wherever another does.

namespace {

/// Q8/Q4 kernel `k` against the portable one, then bit for bit against the AVX2 kernel: below, at
/// and above the AMX threshold; full and partial groups of 16 and of the AVX2 kernel's 4; a last
/// group small enough for the VNNI pass.
void check_vector_quant_kernel(detail::QuantKernel k) {
    REQUIRE(detail::quant_kernel_runs(k));
    compare_kernels(k, detail::QuantKernel::Portable, {1, 3, 7, 16, 17, 40}, check_same_sums);
    if (k != detail::QuantKernel::Avx2)
        compare_kernels(k, detail::QuantKernel::Avx2, {1, 2, 5, 7, 8, 9, 15, 16, 17, 23, 24, 35, 40}, same_bits);
}

}  // namespace

TEST_CASE("avx2 path: bf16 and Q8/Q4 linear agree with the baseline kernels", "[kernels][linear][isa][avx2]") {
    if (const auto why = test::level_unavailable(Isa::Avx2); !why.empty()) GEMMA4_SKIP(why);
    compare_bf16(Isa::Avx2);
    check_vector_quant_kernel(detail::QuantKernel::Avx2);
}

TEST_CASE("avx-vnni path: the Q8/Q4 kernel agrees with the portable one and equals avx2 bit for bit", "[kernels][linear][isa][avx2]") {
    if (const auto why = test::level_unavailable(Isa::Avx2); !why.empty()) GEMMA4_SKIP(why);
    if (!isa_report().features.avx_vnni)
        GEMMA4_SKIP("the avx-vnni path does not run here: " << (cpu_features().avx_vnni ? "GEMMA4_AVXVNNI=0 turns it off" : "this CPU lacks avx_vnni"));
    check_vector_quant_kernel(detail::QuantKernel::AvxVnni);
}

TEST_CASE("avx512 path: bf16 and Q8/Q4 linear agree with the baseline kernels, Q8/Q4 equals avx2 bit for bit", "[kernels][linear][isa][avx512]") {
    if (const auto why = test::level_unavailable(Isa::Avx512); !why.empty()) GEMMA4_SKIP(why);
    compare_bf16(Isa::Avx512);
    check_vector_quant_kernel(detail::QuantKernel::Avx512);
}

TEST_CASE("amx path: the Q8/Q4 kernel agrees with the portable one and equals avx2 bit for bit", "[kernels][linear][isa][amx]") {
    if (const auto why = test::level_unavailable(Isa::Amx); !why.empty()) GEMMA4_SKIP(why);
    check_vector_quant_kernel(detail::QuantKernel::Amx);
}

TEST_CASE("linear over several matrices sharing an input equals one call per matrix, bit for bit", "[kernels][linear][shared]") {
    ThreadPool pool(2);
    const std::pair<DType, std::int64_t> formats[] = {{DType::Q8, 32}, {DType::Q4, 32}, {DType::Q8, 64}, {DType::Q4, 64}, {DType::BF16, 32}, {DType::F32, 32}};
    for (const auto& [dtype, block] : formats)
        for (std::int64_t T : {1, 7, 20}) {
            INFO(describe(dtype, 0, 200, T, block));
            const std::int64_t K = 200;
            constexpr auto P = WeightView::Layout::Panels;
            const TestWeight a = make_weight(dtype, 19, K, 31, P, block), b = make_weight(dtype, 33, K, 32, P, block),
                             c = make_weight(dtype, 5, K, 33, P, block);
            const auto x = make_x(T, K, 34);
            const std::int64_t width = 19 + 33 + 5;
            Guarded fused(T, width), separate(T, width);
            Rows<float> f = fused.rows(), s = separate.rows();
            const LinearOut<float> outs[] = {{&a.view, {f.data, f.stride}}, {&b.view, {f.data + 19, f.stride}}, {&c.view, {f.data + 52, f.stride}}};
            linear<float>(std::span<const LinearOut<float>>(outs), {x.data(), K}, T, pool);
            linear<float>(a.view, {x.data(), K}, {s.data, s.stride}, T, pool);
            linear<float>(b.view, {x.data(), K}, {s.data + 19, s.stride}, T, pool);
            linear<float>(c.view, {x.data(), K}, {s.data + 52, s.stride}, T, pool);
            REQUIRE(fused.guards_intact());
            CHECK(std::memcmp(fused.buf.data(), separate.buf.data(), fused.buf.size() * sizeof(float)) == 0);
        }
    // matrices of different dtypes, block sizes or widths cannot share one quantized input
    const TestWeight q8 = make_weight(DType::Q8, 4, 64, 1), q4 = make_weight(DType::Q4, 4, 64, 2),
                     q8_64 = make_weight(DType::Q8, 4, 64, 3, WeightView::Layout::Panels, 64);
    std::vector<float> x(64, 0.5f), y(8);
    const detail::QuantTarget mixed[] = {{&q8.view, {y.data(), 8}}, {&q4.view, {y.data() + 4, 8}}};
    CHECK_THROWS_MATCHES(detail::linear_quant(std::span<const detail::QuantTarget>(mixed), {x.data(), 64}, 1, pool), InvalidArgument,
                         test::Has("does not share the dtype, block size and columns"));
    const detail::QuantTarget blocks[] = {{&q8.view, {y.data(), 8}}, {&q8_64.view, {y.data() + 4, 8}}};
    CHECK_THROWS_MATCHES(detail::linear_quant(std::span<const detail::QuantTarget>(blocks), {x.data(), 64}, 1, pool), InvalidArgument,
                         test::Has("does not share the dtype, block size and columns"));
    // and the shared-input linear runs matrices of two block sizes one after the other, each as alone
    const LinearOut<float> outs[] = {{&q8.view, {y.data(), 8}}, {&q8_64.view, {y.data() + 4, 8}}};
    std::vector<float> one(4), other(4);
    linear<float>(std::span<const LinearOut<float>>(outs), {x.data(), 64}, 1, pool);
    linear<float>(q8.view, {x.data(), 64}, {one.data(), 4}, 1, pool);
    linear<float>(q8_64.view, {x.data(), 64}, {other.data(), 4}, 1, pool);
    CHECK(std::memcmp(y.data(), one.data(), 16) == 0);
    CHECK(std::memcmp(y.data() + 4, other.data(), 16) == 0);
    // a view whose block size is neither 32 nor 64 is refused by name
    TestWeight odd = make_weight(DType::Q8, 4, 64, 4);
    odd.view.block = 48;
    CHECK_THROWS_MATCHES(detail::linear_quant(odd.view, {x.data(), 64}, {y.data(), 8}, 1, pool), InvalidArgument,
                         test::Has("'w' has blocks of 48 elements, not 32 or 64"));
}

TEST_CASE("linear_quant shares one input among 1 to kMaxQuantTargets matrices, and says so otherwise", "[kernels][linear][errors]") {
    const WeightView w{.name = "w", .dtype = DType::Q8, .shape = {32, 32}};
    std::vector<float> x(32), y(32);
    const std::vector<detail::QuantTarget> many(detail::kMaxQuantTargets + 1, detail::QuantTarget{&w, {y.data(), 32}});
    ThreadPool pool(1);
    REQUIRE_THROWS_AS(detail::linear_quant(many, {x.data(), 32}, 1, pool), InvalidArgument);
    REQUIRE_THROWS_WITH(detail::linear_quant(many, {x.data(), 32}, 1, pool), "linear_quant: 9 matrices in one call, not 1 to 8");
    REQUIRE_THROWS_WITH(detail::linear_quant(std::span<const detail::QuantTarget>(), {x.data(), 32}, 1, pool),
                        "linear_quant: 0 matrices in one call, not 1 to 8");
}
