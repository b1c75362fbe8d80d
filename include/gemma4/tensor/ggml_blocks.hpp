// ggml's block formats (GGUF tensor data): exact dequantization of F32, F16, BF16, Q8_0, Q4_0,
// Q4_K and Q6_K rows to float, and the lossless repacking of Q8_0 / Q4_0 rows into our Q8 / Q4
// rows (tensor/quant.hpp). Layouts in docs/checkpoint-formats.md.
//
// Dequantized values are those of ggml's reference (`dequantize_row_*`, gguf-py's
// `gguf.quants`): float32 arithmetic in the order Q4_0/Q8_0 d·q, Q4_K (d·sc)·q − (dmin·m),
// Q6_K (d·sc)·q. Q4_K's multiply-subtract must not be fused into an FMA (that changes the last
// bit): the product is rounded to float by an explicit conversion and the difference taken in
// double, whose rounding to float is the correctly rounded float difference.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/tensor/dtype.hpp>
#include <gemma4/tensor/ggml_type.hpp>
#include <gemma4/tensor/quant.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace gemma4 {
inline namespace GEMMA4_ABI {
namespace ggml {

inline constexpr std::int64_t kQ4_0Bytes = 18, kQ8_0Bytes = 34, kQ4_KBytes = 144, kQ6_KBytes = 210;
inline constexpr std::int64_t kBlock32 = 32, kSuperBlock = 256;

inline std::uint16_t read_u16(const std::byte* p) {
    return static_cast<std::uint16_t>(std::to_integer<unsigned>(p[0]) | (std::to_integer<unsigned>(p[1]) << 8));
}
inline unsigned byte_at(const std::byte* p, std::int64_t i) { return std::to_integer<unsigned>(p[i]); }

inline void dequantize_q8_0(const std::byte* b, float* y) {
    const float d = f16_to_float(read_u16(b));
    for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(static_cast<std::int8_t>(byte_at(b, 2 + j)));
}

inline void dequantize_q4_0(const std::byte* b, float* y) {
    const float d = f16_to_float(read_u16(b));
    for (int j = 0; j < 16; ++j) {
        const unsigned q = byte_at(b, 2 + j);
        y[j] = d * static_cast<float>(static_cast<int>(quant::low_nibble(q)) - 8);
        y[j + 16] = d * static_cast<float>(static_cast<int>(quant::high_nibble(q)) - 8);
    }
}

/// Q4_K's 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
inline void q4_k_scale_min(int j, const std::byte* s, unsigned& sc, unsigned& m) {
    if (j < 4) {
        sc = byte_at(s, j) & 63u;
        m = byte_at(s, j + 4) & 63u;
    } else {
        sc = quant::low_nibble(byte_at(s, j + 4)) | ((byte_at(s, j - 4) >> 6) << 4);
        m = quant::high_nibble(byte_at(s, j + 4)) | ((byte_at(s, j) >> 6) << 4);
    }
}

/// fl(fl(a·q) − b) with the product rounded before the subtraction (no FMA whatever the flags).
inline float mul_sub_unfused(float a, unsigned q, float b) {
    const auto product = static_cast<float>(static_cast<double>(a) * static_cast<double>(q));  // exact in double, then rounded
    return static_cast<float>(static_cast<double>(product) - static_cast<double>(b));
}

inline void dequantize_q4_k(const std::byte* b, float* y) {
    const float d = f16_to_float(read_u16(b)), dmin = f16_to_float(read_u16(b + 2));
    const std::byte* scales = b + 4;
    const std::byte* qs = b + 16;
    for (int c = 0; c < 4; ++c) {
        unsigned sc1, m1, sc2, m2;
        q4_k_scale_min(2 * c, scales, sc1, m1);
        q4_k_scale_min(2 * c + 1, scales, sc2, m2);
        const float d1 = d * static_cast<float>(sc1), min1 = dmin * static_cast<float>(m1);
        const float d2 = d * static_cast<float>(sc2), min2 = dmin * static_cast<float>(m2);
        for (int l = 0; l < 32; ++l) {
            const unsigned q = byte_at(qs, 32 * c + l);
            y[64 * c + l] = mul_sub_unfused(d1, quant::low_nibble(q), min1);
            y[64 * c + 32 + l] = mul_sub_unfused(d2, quant::high_nibble(q), min2);
        }
    }
}

inline void dequantize_q6_k(const std::byte* b, float* y) {
    const std::byte* ql = b;
    const std::byte* qh = b + 128;
    const std::byte* sc = b + 192;
    const float d = f16_to_float(read_u16(b + 208));
    for (int h = 0; h < 2; ++h) {
        const std::byte* QL = ql + 64 * h;
        const std::byte* QH = qh + 32 * h;
        const std::byte* S = sc + 8 * h;
        float* Y = y + 128 * h;
        for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const unsigned lo0 = byte_at(QL, l), lo1 = byte_at(QL, l + 32), hi = byte_at(QH, l);
            const int q1 = static_cast<int>(quant::low_nibble(lo0) | (((hi >> 0) & 3u) << 4)) - 32;
            const int q2 = static_cast<int>(quant::low_nibble(lo1) | (((hi >> 2) & 3u) << 4)) - 32;
            const int q3 = static_cast<int>(quant::high_nibble(lo0) | (((hi >> 4) & 3u) << 4)) - 32;
            const int q4 = static_cast<int>(quant::high_nibble(lo1) | (((hi >> 6) & 3u) << 4)) - 32;
            const auto scale = [&](int k) { return d * static_cast<float>(static_cast<std::int8_t>(byte_at(S, k))); };
            Y[l] = scale(is) * static_cast<float>(q1);
            Y[l + 32] = scale(is + 2) * static_cast<float>(q2);
            Y[l + 64] = scale(is + 4) * static_cast<float>(q3);
            Y[l + 96] = scale(is + 6) * static_cast<float>(q4);
        }
    }
}

/// Whether the library can dequantize `t`.
inline bool can_dequantize(GgmlType t) {
    const auto tr = ggml_type_traits(static_cast<std::uint32_t>(t));
    return tr && tr->supported;
}

/// Bytes of `n` values of `t` (n a multiple of its block size).
inline std::int64_t bytes_of(GgmlType t, std::int64_t n) {
    const auto tr = ggml_type_traits(static_cast<std::uint32_t>(t));
    return n / tr->block * tr->block_bytes;
}

/// The first `n` values stored at `src` as type `t` (n a multiple of the block size), exactly.
/// ShapeError naming `what` for a type the library does not dequantize.
template <class T>
inline void dequantize_row(GgmlType t, const std::byte* src, std::int64_t n, T* out, const std::string& what = "tensor") {
    float tmp[256];
    const auto blocks = [&](std::int64_t block, std::int64_t bytes, auto&& fn) {
        for (std::int64_t b = 0; b < n / block; ++b) {
            fn(src + b * bytes, tmp);
            for (std::int64_t j = 0; j < block; ++j) out[b * block + j] = static_cast<T>(tmp[j]);
        }
    };
    switch (t) {
        case GgmlType::F32:
            for (std::int64_t i = 0; i < n; ++i) out[i] = load_element<T>(src, DType::F32, static_cast<std::size_t>(i));
            return;
        case GgmlType::F16:
            for (std::int64_t i = 0; i < n; ++i) out[i] = load_element<T>(src, DType::F16, static_cast<std::size_t>(i));
            return;
        case GgmlType::BF16:
            for (std::int64_t i = 0; i < n; ++i) out[i] = load_element<T>(src, DType::BF16, static_cast<std::size_t>(i));
            return;
        case GgmlType::Q8_0: return blocks(kBlock32, kQ8_0Bytes, dequantize_q8_0);
        case GgmlType::Q4_0: return blocks(kBlock32, kQ4_0Bytes, dequantize_q4_0);
        case GgmlType::Q4_K: return blocks(kSuperBlock, kQ4_KBytes, dequantize_q4_k);
        case GgmlType::Q6_K: return blocks(kSuperBlock, kQ6_KBytes, dequantize_q6_k);
        default: break;
    }
    throw ShapeError(what + ": ggml type " + std::string(ggml_type_name(t)) + " is not supported");
}

/// A Q8_0 row of `cols` values (cols % 32 == 0) as one padded Q8 row: the same int8 codes and
/// f16 scales, zero codes and scales in the padding. Lossless.
inline void q8_0_to_q8_row(const std::byte* src, std::int64_t cols, std::byte* codes, std::uint16_t* scales) {
    const std::int64_t kp = quant::padded_cols(cols), nb = cols / kBlock32;
    std::memset(codes, 0, static_cast<std::size_t>(kp));
    std::memset(scales, 0, static_cast<std::size_t>(quant::blocks_per_row(cols, kBlock32) * 2));
    for (std::int64_t b = 0; b < nb; ++b) {
        const std::byte* blk = src + b * kQ8_0Bytes;
        scales[b] = read_u16(blk);
        std::memcpy(codes + b * kBlock32, blk + 2, kBlock32);
    }
}

/// A Q4_0 row as one padded Q4 row. Both hold element i as the nibble (code + 8) with one f16
/// scale per 32 elements: value (nibble − 8) · d. Only the nibble positions differ — Q4_0 puts
/// element j of a block in the low and j + 16 in the high nibble of byte j; Q4 puts element i of a
/// 128-group in byte i % 64, high nibble for i ≥ 64 — so the repacking moves nibbles unchanged.
/// Padding: nibble 8 (zero) and scale 0.
inline void q4_0_to_q4_row(const std::byte* src, std::int64_t cols, std::byte* codes, std::uint16_t* scales) {
    const std::int64_t kp = quant::padded_cols(cols), nb = cols / kBlock32;
    std::memset(codes, 0x88, static_cast<std::size_t>(kp / 2));
    std::memset(scales, 0, static_cast<std::size_t>(quant::blocks_per_row(cols, kBlock32) * 2));
    for (std::int64_t b = 0; b < nb; ++b) {
        const std::byte* blk = src + b * kQ4_0Bytes;
        scales[b] = read_u16(blk);
        // The block's 32 elements are bytes base … base + 31 of our 128-group, all in the low
        // (first half of the group) or all in the high nibbles (second half).
        const std::int64_t base = quant::q4_byte(b * kBlock32);
        const bool high = quant::q4_high(b * kBlock32);
        for (std::int64_t j = 0; j < 16; ++j) {
            const unsigned q = byte_at(blk, 2 + j);
            for (const auto& [at, nib] : {std::pair{base + j, quant::low_nibble(q)}, std::pair{base + j + 16, quant::high_nibble(q)}})
                codes[at] = static_cast<std::byte>(quant::with_nibble(std::to_integer<unsigned>(codes[at]), high, nib));
        }
    }
}

/// The inverse of q8_0_to_q8_row: the first `cols` values (cols % 32 == 0) of a padded Q8 row of
/// `block`-element blocks as Q8_0 blocks (f16 scale, then 32 int8 codes); a block of 64 becomes
/// two with its scale. Lossless; the padding is dropped.
inline void q8_row_to_q8_0(const std::byte* codes, const std::uint16_t* scales, std::int64_t block, std::int64_t cols, std::byte* dst) {
    for (std::int64_t b = 0; b < cols / kBlock32; ++b) {
        std::byte* blk = dst + b * kQ8_0Bytes;
        const std::uint16_t scale = scales[b * kBlock32 / block];
        blk[0] = static_cast<std::byte>(scale & 0xffu);
        blk[1] = static_cast<std::byte>(scale >> 8);
        std::memcpy(blk + 2, codes + b * kBlock32, kBlock32);
    }
}

/// The inverse of q4_0_to_q4_row: a padded Q4 row's (of `block`-element blocks) first `cols`
/// values as Q4_0 blocks, the nibbles moved unchanged; a block of 64 becomes two with its scale.
/// Lossless; the padding is dropped.
inline void q4_row_to_q4_0(const std::byte* codes, const std::uint16_t* scales, std::int64_t block, std::int64_t cols, std::byte* dst) {
    const auto nibble = [&](std::int64_t i) {
        const unsigned byte = std::to_integer<unsigned>(codes[quant::q4_byte(i)]);
        return quant::q4_high(i) ? byte >> 4 : byte & 15u;
    };
    for (std::int64_t b = 0; b < cols / kBlock32; ++b) {
        std::byte* blk = dst + b * kQ4_0Bytes;
        const std::uint16_t scale = scales[b * kBlock32 / block];
        blk[0] = static_cast<std::byte>(scale & 0xffu);
        blk[1] = static_cast<std::byte>(scale >> 8);
        for (std::int64_t j = 0; j < 16; ++j)
            blk[2 + j] = static_cast<std::byte>(nibble(b * kBlock32 + j) | (nibble(b * kBlock32 + j + 16) << 4));
    }
}

}  // namespace ggml
}  // namespace GEMMA4_ABI
}  // namespace gemma4
