// tensor/quant.hpp: the one symmetric quantizer rule (quantize_symmetric, symmetric_code) and the
// nibble helpers. The three quantizers that use the rule — weights (Q8/Q4 rows), activations and
// the int8 KV cache — are checked bit for bit against the formulas each wrote out before they
// shared it, on random blocks, exact ties, all-zero blocks and tiny and huge magnitudes.
#include <catch2/catch.hpp>

#include <gemma4/kernels/quant_acts.hpp>
#include <gemma4/kv/kv_cache.hpp>
#include <gemma4/tensor/ggml_blocks.hpp>
#include <gemma4/tensor/quant.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/kernel_test_support.hpp"

using namespace gemma4;

namespace {

/// Blocks of n values that exercise the rule: random at several magnitudes, exact ties
/// (x · 127/max|x| = k + ½), zeros, one non-zero value, subnormals.
template <class T>
std::vector<std::vector<T>> rule_blocks(std::int64_t n) {
    std::vector<std::vector<T>> blocks;
    test::Rng rng{2024};
    for (const double magnitude : {1.0, 3.0, 1e-3, 1e-30, 1e6, 5e8})
        for (int r = 0; r < 20; ++r) {
            std::vector<T> b(static_cast<std::size_t>(n));
            for (auto& x : b) x = static_cast<T>(magnitude * rng.symmetric());
            blocks.push_back(b);
        }
    std::vector<T> ties(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) ties[static_cast<std::size_t>(i)] = static_cast<T>((i % 2 ? -1 : 1) * (0.5 + static_cast<double>(i % 120)));
    ties[0] = 127;  // max|x| = 127: codes are x rounded half to even
    blocks.push_back(ties);
    blocks.push_back(std::vector<T>(static_cast<std::size_t>(n), T(0)));
    std::vector<T> one(static_cast<std::size_t>(n), T(0));
    one[static_cast<std::size_t>(n / 2)] = T(-2.5);
    blocks.push_back(one);
    std::vector<T> tiny(static_cast<std::size_t>(n), std::numeric_limits<T>::denorm_min());
    tiny[static_cast<std::size_t>(n - 1)] = -3 * std::numeric_limits<T>::denorm_min();  // n may be 1
    blocks.push_back(tiny);
    return blocks;
}

// The activation quantizer as kernels/quant_acts.hpp wrote it out.
float activations_before(const float* x, std::int64_t n, std::int8_t* q) {
    float amax = 0;
    for (std::int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
    for (std::int64_t i = 0; i < n; ++i)
        q[i] = static_cast<std::int8_t>(static_cast<int>(std::nearbyint(std::min(127.0f, std::max(-127.0f, x[i] * inv)))));
    return d;
}

// The int8 KV cache's quantizer as kv/kv_cache.hpp wrote it out (T: the model's scalar).
template <class T>
float kv_before(const T* x, std::int64_t n, std::int8_t* codes) {
    T amax = 0;
    for (std::int64_t i = 0; i < n; ++i) amax = std::max(amax, static_cast<T>(std::fabs(x[i])));
    const float d = static_cast<float>(amax / T(127));
    const T inv = amax > 0 ? T(127) / amax : T(0);
    for (std::int64_t i = 0; i < n; ++i) codes[i] = static_cast<std::int8_t>(std::clamp(static_cast<int>(std::nearbyint(x[i] * inv)), -127, 127));
    return d;
}

// The weight quantizer as tensor/quant.hpp wrote it out, when every block was 32 elements.
void weights_before(DType t, const float* src, std::int64_t cols, std::byte* codes, std::uint16_t* scales) {
    constexpr std::int64_t kBlock = 32;
    const std::int64_t kp = quant::padded_cols(cols), nb = kp / kBlock;
    if (t == DType::Q4) std::memset(codes, 0, static_cast<std::size_t>(kp / 2));
    for (std::int64_t b = 0; b < nb; ++b) {
        const std::int64_t i0 = b * kBlock, i1 = std::min(cols, i0 + kBlock);
        float amax = 0;
        for (std::int64_t i = i0; i < i1; ++i) amax = std::max(amax, std::fabs(src[i]));
        const std::uint16_t s = quant::block_scale(amax, t);
        scales[b] = s;
        const float d = f16_to_float(s);
        const float inv = d > 0 ? 1.0f / d : 0.0f;
        const int lim = quant::max_code(t);
        for (std::int64_t i = i0; i < i0 + kBlock; ++i) {
            int q = 0;
            if (i < i1) q = std::clamp(static_cast<int>(std::nearbyint(src[i] * inv)), -lim, lim);
            if (t == DType::Q8) {
                codes[i] = static_cast<std::byte>(static_cast<std::int8_t>(q));
            } else {
                const auto nib = static_cast<unsigned>(q + quant::kQ4Offset);
                codes[quant::q4_byte(i)] |= static_cast<std::byte>(quant::q4_high(i) ? nib << 4 : nib);
            }
        }
    }
}

template <class T>
void check_kv_rule() {
    for (const std::vector<T>& x : rule_blocks<T>(64)) {
        std::vector<std::int8_t> a(64), b(64);
        const float da = static_cast<float>(quant::quantize_symmetric(x.data(), 64, quant::kQ8Max, a.data()));
        T amax = 0;
        for (const T v : x) amax = std::max(amax, std::fabs(v));
        if (amax > 0 && std::isinf(T(127) / amax)) {
            // 127/max|x| overflows (a block of subnormals): the former K/V code converted ±inf to
            // int (undefined; on x86 every code became -127). The shared rule clamps first, as
            // the activations always did, and keeps each code's sign.
            for (std::size_t i = 0; i < x.size(); ++i)
                CHECK(a[i] == (x[i] > 0 ? 127 : x[i] < 0 ? -127 : 0));
            continue;
        }
        const float db = kv_before(x.data(), 64, b.data());
        CHECK(std::memcmp(&da, &db, 4) == 0);
        CHECK(a == b);
    }
}

}  // namespace

TEST_CASE("activations: quantize_block is the shared rule and the same bits as before", "[kernels][quant][rule]") {
    for (const std::int64_t n : {std::int64_t{32}, std::int64_t{17}, std::int64_t{1}})
        for (const std::vector<float>& x : rule_blocks<float>(n)) {
            std::vector<std::int8_t> now(32, 99), before(32, 0), shared(static_cast<std::size_t>(n));
            std::int32_t sum = 0;
            const float d = detail::quantize_block(x.data(), n, 32, now.data(), sum);
            const float d_before = activations_before(x.data(), n, before.data());
            const float d_shared = quant::quantize_symmetric(x.data(), n, 127, shared.data());
            CHECK(std::memcmp(&d, &d_before, 4) == 0);
            CHECK(std::memcmp(&d, &d_shared, 4) == 0);
            CHECK(now == before);  // the padding of the block zero in both
            CHECK(std::equal(shared.begin(), shared.end(), now.begin()));
            std::int32_t expected_sum = 0;
            for (std::int64_t i = 0; i < n; ++i) expected_sum += before[static_cast<std::size_t>(i)];
            CHECK(sum == expected_sum);
        }
}

TEST_CASE("K/V: quantize_symmetric gives the bits the int8 cache gave before, float and double", "[kernels][quant][rule]") {
    check_kv_rule<float>();
    check_kv_rule<double>();
}

TEST_CASE("K/V: the int8 cache stores the shared rule's codes and scales", "[kernels][quant][rule][cache]") {
    const Gemma4Config c = test::small_model_config();
    KVCache<double> cache(c, KVCacheOptions{.kv_dtype = KVDtype::Int8});
    const SeqId s = cache.add_sequence();
    cache.reserve(s, 1);
    const std::int64_t L = 0, kvd = c.layer(L).kv_dim(), hd = c.layer(L).head_dim;
    test::Rng rng{5};
    std::vector<double> k(static_cast<std::size_t>(kvd)), v(k.size());
    for (std::size_t i = 0; i < k.size(); ++i) {
        k[i] = 4 * rng.symmetric();
        v[i] = i < static_cast<std::size_t>(hd) ? 0.0 : 1e-3 * rng.symmetric();  // head 0 of V all zero
    }
    cache.store(L, s, 0, k.data(), v.data());
    for (int kv = 0; kv < 2; ++kv) {
        const KVInt8Row row = kv ? cache.value_int8(L, s, 0) : cache.key_int8(L, s, 0);
        const std::vector<double>& x = kv ? v : k;
        for (std::int64_t h = 0; h * hd < kvd; ++h) {
            std::vector<std::int8_t> codes(static_cast<std::size_t>(hd));
            const float d = kv_before(x.data() + h * hd, hd, codes.data());
            CHECK(std::memcmp(&row.scales[h], &d, 4) == 0);
            CHECK(std::equal(codes.begin(), codes.end(), row.codes + h * hd));
        }
    }
}

TEST_CASE("weights: quantize_row in blocks of 32 gives the bits it gave before, Q8 and Q4", "[kernels][quant][rule]") {
    for (const DType t : {DType::Q8, DType::Q4})
        for (const std::int64_t cols : {std::int64_t{128}, std::int64_t{200}}) {
            const auto blocks = rule_blocks<float>(cols);
            for (const std::vector<float>& x : blocks) {
                std::vector<std::byte> a(static_cast<std::size_t>(quant::row_bytes(t, cols))), b(a.size());
                std::vector<std::uint16_t> sa(static_cast<std::size_t>(quant::blocks_per_row(cols, 32))), sb(sa.size());
                quant::quantize_row(t, 32, x.data(), cols, a.data(), sa.data());
                weights_before(t, x.data(), cols, b.data(), sb.data());
                CHECK(a == b);
                CHECK(sa == sb);
            }
        }
}

TEST_CASE("symmetric_code clamps, rounds half to even and maps NaN to -limit", "[kernels][quant][rule]") {
    CHECK(quant::symmetric_code(2.5f, 1.0f, 127) == 2);
    CHECK(quant::symmetric_code(3.5f, 1.0f, 127) == 4);
    CHECK(quant::symmetric_code(-2.5, 1.0, 127) == -2);
    CHECK(quant::symmetric_code(127.6f, 1.0f, 127) == 127);
    CHECK(quant::symmetric_code(1e30f, 1.0f, 7) == 7);
    CHECK(quant::symmetric_code(-1e300, 1.0, 7) == -7);
    CHECK(quant::symmetric_code(std::nan(""), 1.0, 127) == -127);
    CHECK(quant::max_magnitude<float>(std::vector<float>{1, -3, std::nanf(""), 2}.data(), 4) == 3.0f);
}

TEST_CASE("nibble helpers: every byte, and the Q4 group layout", "[kernels][quant][nibble]") {
    for (unsigned byte = 0; byte < 256; ++byte) {
        CHECK(quant::low_nibble(byte) == byte % 16);
        CHECK(quant::high_nibble(byte) == byte / 16);
        for (unsigned nib = 0; nib < 16; ++nib) {
            CHECK(quant::with_nibble(byte, false, nib) == (byte / 16) * 16 + nib);
            CHECK(quant::with_nibble(byte, true, nib) == nib * 16 + byte % 16);
        }
    }
    // element i of a 128-group: byte i % 64, high nibble for i ≥ 64
    std::vector<std::byte> codes(64);
    for (std::int64_t i = 0; i < 128; ++i) {
        auto& b = codes[static_cast<std::size_t>(quant::q4_byte(i))];
        b = static_cast<std::byte>(quant::with_nibble(std::to_integer<unsigned>(b), quant::q4_high(i), static_cast<unsigned>(i % 16)));
    }
    for (std::int64_t i = 0; i < 128; ++i) {
        CHECK(quant::q4_byte(i) == i % 64);
        CHECK(quant::q4_nibble(std::to_integer<unsigned>(codes[static_cast<std::size_t>(i % 64)]), i) == static_cast<unsigned>(i % 16));
        CHECK(quant::code_at(DType::Q4, codes.data(), i) == static_cast<int>(i % 16) - quant::kQ4Offset);
    }
}

TEST_CASE("a Q4_0 row decodes to the same values as GGUF and as our Q4 row", "[kernels][quant][nibble]") {
    constexpr std::int64_t cols = 96;  // 3 blocks: a partial group
    test::Rng rng{77};
    std::vector<std::byte> q4_0(static_cast<std::size_t>(cols / 32 * ggml::kQ4_0Bytes));
    for (std::int64_t b = 0; b < cols / 32; ++b) {
        const std::uint16_t d = float_to_f16(static_cast<float>(0.1 + std::fabs(rng.symmetric())));
        std::memcpy(q4_0.data() + b * ggml::kQ4_0Bytes, &d, 2);
        for (int j = 0; j < 16; ++j) q4_0[static_cast<std::size_t>(b * ggml::kQ4_0Bytes + 2 + j)] = static_cast<std::byte>(rng.next() & 0xff);
    }
    std::vector<float> gguf(static_cast<std::size_t>(cols)), ours(static_cast<std::size_t>(cols));
    ggml::dequantize_row(GgmlType::Q4_0, q4_0.data(), cols, gguf.data());
    std::vector<std::byte> codes(static_cast<std::size_t>(quant::row_bytes(DType::Q4, cols)));
    std::vector<std::uint16_t> scales(static_cast<std::size_t>(quant::blocks_per_row(cols, 32)));
    ggml::q4_0_to_q4_row(q4_0.data(), cols, codes.data(), scales.data());
    quant::dequantize_row(DType::Q4, 32, codes.data(), scales.data(), cols, ours.data());
    CHECK(gguf == ours);
    for (std::int64_t i = cols; i < quant::padded_cols(cols); ++i) CHECK(quant::code_at(DType::Q4, codes.data(), i) == 0);
}
