// ggml's block formats (GGUF tensor data): every block type the library runs (Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1, Q2_K … Q6_K, IQ4_NL, IQ4_XS) decoded into one integer form (IntBlocks), from which
// both the exact dequantization and the int8 kernels read; and the lossless repacking of Q8_0 /
// Q4_0 rows into our Q8 / Q4 rows (tensor/quant.hpp). Layouts in docs/checkpoint-formats.md.
//
// Dequantized values are bit for bit those of ggml's reference (`dequantize_row_*`, gguf-py's
// `gguf.quants`): float32 arithmetic in the order (d·k)·c − (dmin·m), never fused into an FMA
// (int_block_value).
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/tensor/dtype.hpp>
#include <gemma4/tensor/ggml_type.hpp>
#include <gemma4/tensor/quant.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {
namespace ggml {

inline constexpr std::int64_t kQ4_0Bytes = 18, kQ8_0Bytes = 34;
inline constexpr std::int64_t kBlock32 = 32, kSuperBlock = 256;

inline std::uint16_t read_u16(const std::byte* p) {
    return static_cast<std::uint16_t>(std::to_integer<unsigned>(p[0]) | (std::to_integer<unsigned>(p[1]) << 8));
}
inline unsigned byte_at(const std::byte* p, std::int64_t i) { return std::to_integer<unsigned>(p[i]); }

/// Consecutive 32-value blocks in integer form, which is how every type here reads. Value i of
/// block b is
///
///     (d_b · k_{b,h}) · c_i − (dmin_b · m_{b,h}),   h = i / 16 (the block's two halves)
///
/// with each product and the difference rounded to float: ggml's dequantization, for every
/// type (Q4_0: c = nibble − 8, k = 1; Q4_1: c = nibble, k = 1, dmin = −m, m = 1; Q4_K: k and m
/// the 6-bit sub-block scale and min; Q6_K: k the int8 scale of each 16 values; IQ4: c from the
/// non-linear table; …). The code c is held as the unsigned byte u = c + offset, the type's
/// BlockDecoder::offset (Q4_0 8, Q6_K 32, IQ4 128, …): mostly the stored bits themselves, so a
/// decoder only moves bits, and what the unsigned-by-signed byte products of the vector levels
/// (vpdpbusd) take. The exact path (dequantize_row) and the int8 kernels
/// (kernels/linear_ggml.hpp) both read the blocks through this one decoding: there the sum over a
/// block is d·(k₀·Σc·x + k₁·Σc·x) − dmin·(m₀·Σx + m₁·Σx), exact in int32 but for the two floats.
struct IntBlocks {
    std::uint8_t* codes;  ///< 32 per block: c + offset
    std::int16_t* scale;  ///< 2 per block: k of values 0–15 and of 16–31
    std::int16_t* min;    ///< 2 per block
    float* d;             ///< 1 per block
    float* dmin;          ///< 1 per block

    IntBlocks at(std::int64_t b) const { return {codes + 32 * b, scale + 2 * b, min + 2 * b, d + b, dmin + b}; }
    void set(std::int64_t b, float db, int k0, int k1, float dminb, int m0, int m1) const {
        d[b] = db;
        dmin[b] = dminb;
        scale[2 * b] = static_cast<std::int16_t>(k0);
        scale[2 * b + 1] = static_cast<std::int16_t>(k1);
        min[2 * b] = static_cast<std::int16_t>(m0);
        min[2 * b + 1] = static_cast<std::int16_t>(m1);
    }
};

/// Storage for `blocks` 32-value blocks of IntBlocks, reused across calls (grows only).
struct IntBlockBuffer {
    std::vector<std::uint8_t> codes;
    std::vector<std::int16_t> scale, min;
    std::vector<float> d, dmin;

    IntBlocks view(std::int64_t blocks) {
        const auto n = static_cast<std::size_t>(blocks);
        if (d.size() < n) {
            codes.resize(32 * n);
            scale.resize(2 * n);
            min.resize(2 * n);
            d.resize(n);
            dmin.resize(n);
        }
        return {codes.data(), scale.data(), min.data(), d.data(), dmin.data()};
    }
};

/// Value i of block 0 of `q` (codes of `offset`), rounded as ggml rounds it. The products are
/// taken in double, where they are exact (a float times an integer of at most 8 bits), and rounded
/// to float once, as a float multiply rounds; the difference likewise (double rounding is harmless
/// for p = 24, q = 53). Written so, no FMA can fuse them, whatever the flags.
inline float int_block_value(const IntBlocks& q, int i, int offset) {
    const int h = i / 16;
    const auto a = static_cast<float>(static_cast<double>(*q.d) * q.scale[h]);
    const auto product = static_cast<float>(static_cast<double>(a) * (q.codes[i] - offset));
    if (q.min[h] == 0) return product;
    const auto shift = static_cast<float>(static_cast<double>(*q.dmin) * q.min[h]);
    return static_cast<float>(static_cast<double>(product) - static_cast<double>(shift));
}

/// IQ4_NL's and IQ4_XS's non-linear code table (kvalues_iq4nl).
inline constexpr std::array<std::int8_t, 16> kIq4Values = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
/// The same codes with IQ4's offset of 128, as IntBlocks holds them.
inline constexpr std::array<std::uint8_t, 16> kIq4Codes = {1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241};

/// Q4_K's and Q5_K's 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
inline void q4_k_scale_min(int j, const std::byte* s, unsigned& sc, unsigned& m) {
    if (j < 4) {
        sc = byte_at(s, j) & 63u;
        m = byte_at(s, j + 4) & 63u;
    } else {
        sc = quant::low_nibble(byte_at(s, j + 4)) | ((byte_at(s, j - 4) >> 6) << 4);
        m = quant::high_nibble(byte_at(s, j + 4)) | ((byte_at(s, j) >> 6) << 4);
    }
}

// One decoder per type: its block (32 values, or a super-block of 256 = 8 blocks) at `b` into
// block 0 of `out` and on, codes with the offset of the type's BlockDecoder. Layouts in
// docs/checkpoint-formats.md. The vector levels' decoders (kernels/isa/ggml_avx2.hpp) write the
// same bytes.

/// The 32 nibbles of a Q4_0-style 16-byte group (value j low, j + 16 high) through `code`.
template <class Code>
inline void nibbles32(const std::byte* qs, std::uint8_t* c, Code code) {
    for (int j = 0; j < 16; ++j) {
        c[j] = static_cast<std::uint8_t>(code(quant::low_nibble(byte_at(qs, j)), j));
        c[j + 16] = static_cast<std::uint8_t>(code(quant::high_nibble(byte_at(qs, j)), j + 16));
    }
}

/// Offset 128: u = c + 128, the byte with its sign bit flipped.
inline void decode_q8_0(const std::byte* b, const IntBlocks& out) {
    out.set(0, f16_to_float(read_u16(b)), 1, 1, 0.0f, 0, 0);
    for (int i = 0; i < 32; ++i) out.codes[i] = static_cast<std::uint8_t>(byte_at(b + 2, i) ^ 0x80u);
}

/// Offset 8: the nibble as stored.
inline void decode_q4_0(const std::byte* b, const IntBlocks& out) {
    out.set(0, f16_to_float(read_u16(b)), 1, 1, 0.0f, 0, 0);
    nibbles32(b + 2, out.codes, [](unsigned q, int) { return q; });
}

inline void decode_q4_1(const std::byte* b, const IntBlocks& out) {
    out.set(0, f16_to_float(read_u16(b)), 1, 1, -f16_to_float(read_u16(b + 2)), 1, 1);
    nibbles32(b + 4, out.codes, [](unsigned q, int) { return q; });
}

/// Q5_0 (offset 16) / Q5_1: the nibble plus the 5th bit of value j, bit j of the little-endian
/// word qh.
inline void decode_q5(const std::byte* qh_bytes, const std::byte* qs, std::uint8_t* c) {
    const std::uint32_t qh = byte_at(qh_bytes, 0) | (byte_at(qh_bytes, 1) << 8) | (byte_at(qh_bytes, 2) << 16) | (byte_at(qh_bytes, 3) << 24);
    nibbles32(qs, c, [&](unsigned q, int j) { return q | (((qh >> j) & 1u) << 4); });
}

inline void decode_q5_0(const std::byte* b, const IntBlocks& out) {
    out.set(0, f16_to_float(read_u16(b)), 1, 1, 0.0f, 0, 0);
    decode_q5(b + 2, b + 6, out.codes);
}

inline void decode_q5_1(const std::byte* b, const IntBlocks& out) {
    out.set(0, f16_to_float(read_u16(b)), 1, 1, -f16_to_float(read_u16(b + 2)), 1, 1);
    decode_q5(b + 4, b + 8, out.codes);
}

/// Offset 128.
inline void decode_iq4_nl(const std::byte* b, const IntBlocks& out) {
    out.set(0, f16_to_float(read_u16(b)), 1, 1, 0.0f, 0, 0);
    nibbles32(b + 2, out.codes, [](unsigned q, int) { return kIq4Codes[q]; });
}

/// Q2_K: scales (16 bytes: scale low, min high nibble per 16 values), qs (64), d, dmin.
inline void decode_q2_k(const std::byte* b, const IntBlocks& out) {
    const std::byte* scales = b;
    const std::byte* qs = b + 16;
    const float d = f16_to_float(read_u16(b + 80)), dmin = f16_to_float(read_u16(b + 82));
    for (int blk = 0; blk < 8; ++blk) {  // values 32·blk …: half h = blk / 4, shift 2·(blk % 4)
        const unsigned s0 = byte_at(scales, 2 * blk), s1 = byte_at(scales, 2 * blk + 1);
        out.set(blk, d, static_cast<int>(s0 & 15u), static_cast<int>(s1 & 15u), dmin, static_cast<int>(s0 >> 4), static_cast<int>(s1 >> 4));
        const int h = blk / 4, shift = 2 * (blk % 4);
        for (int l = 0; l < 32; ++l) out.codes[32 * blk + l] = static_cast<std::uint8_t>((byte_at(qs, 32 * h + l) >> shift) & 3u);
    }
}

/// Q3_K: hmask (32), qs (64), scales (12: 16 six-bit scales, offset 32), d. Code offset 4: the
/// value is the two low bits, less 4 where the hmask bit is clear.
inline void decode_q3_k(const std::byte* b, const IntBlocks& out) {
    const std::byte* hmask = b;
    const std::byte* qs = b + 32;
    const std::byte* s = b + 96;
    const float d = f16_to_float(read_u16(b + 108));
    const auto scale = [&](int j) {
        const unsigned low = j < 8 ? byte_at(s, j) & 15u : byte_at(s, j - 8) >> 4;
        const unsigned high = (byte_at(s, 8 + j % 4) >> (2 * (j / 4))) & 3u;
        return static_cast<int>(low | (high << 4)) - 32;
    };
    for (int blk = 0; blk < 8; ++blk) {
        out.set(blk, d, scale(2 * blk), scale(2 * blk + 1), 0.0f, 0, 0);
        const int h = blk / 4, shift = 2 * (blk % 4), bit = 4 * h + blk % 4;
        for (int l = 0; l < 32; ++l) {
            const unsigned low = (byte_at(qs, 32 * h + l) >> shift) & 3u;
            const unsigned high = (byte_at(hmask, l) >> bit) & 1u;
            out.codes[32 * blk + l] = static_cast<std::uint8_t>(low | (high << 2));
        }
    }
}

/// Q4_K (high = nullptr) and Q5_K (high = its qh bytes): d, dmin, scales (12), [qh (32)], qs (128).
inline void decode_q45_k(const std::byte* b, const std::byte* qh, const std::byte* qs, const IntBlocks& out) {
    const float d = f16_to_float(read_u16(b)), dmin = f16_to_float(read_u16(b + 2));
    for (int blk = 0; blk < 8; ++blk) {  // sub-block blk: chunk blk / 2, low nibbles when even
        unsigned sc, m;
        q4_k_scale_min(blk, b + 4, sc, m);
        out.set(blk, d, static_cast<int>(sc), static_cast<int>(sc), dmin, static_cast<int>(m), static_cast<int>(m));
        for (int l = 0; l < 32; ++l) {
            const unsigned byte = byte_at(qs, 32 * (blk / 2) + l);
            unsigned q = blk % 2 ? byte >> 4 : byte & 15u;
            if (qh) q |= ((byte_at(qh, l) >> blk) & 1u) << 4;
            out.codes[32 * blk + l] = static_cast<std::uint8_t>(q);
        }
    }
}

inline void decode_q4_k(const std::byte* b, const IntBlocks& out) { decode_q45_k(b, nullptr, b + 16, out); }
inline void decode_q5_k(const std::byte* b, const IntBlocks& out) { decode_q45_k(b, b + 16, b + 48, out); }

/// Q6_K: ql (128), qh (64), scales (16 int8, one per 16 values), d. Code offset 32.
inline void decode_q6_k(const std::byte* b, const IntBlocks& out) {
    const std::byte* ql = b;
    const std::byte* qh = b + 128;
    const std::byte* sc = b + 192;
    const float d = f16_to_float(read_u16(b + 208));
    for (int blk = 0; blk < 8; ++blk) {  // values 128h + 32s + l
        const int h = blk / 4, s = blk % 4;
        out.set(blk, d, static_cast<std::int8_t>(byte_at(sc, 2 * blk)), static_cast<std::int8_t>(byte_at(sc, 2 * blk + 1)), 0.0f, 0, 0);
        for (int l = 0; l < 32; ++l) {
            const unsigned lo = byte_at(ql, 64 * h + l + (s % 2) * 32);
            const unsigned low = s < 2 ? lo & 15u : lo >> 4;
            const unsigned high = (byte_at(qh, 32 * h + l) >> (2 * s)) & 3u;
            out.codes[32 * blk + l] = static_cast<std::uint8_t>(low | (high << 4));
        }
    }
}

/// IQ4_XS: d, scales_h (u16), scales_l (4), qs (128); sub-block j's scale is 6 bits, offset 32.
/// Code offset 128.
inline void decode_iq4_xs(const std::byte* b, const IntBlocks& out) {
    const float d = f16_to_float(read_u16(b));
    const unsigned scales_h = read_u16(b + 2);
    for (int blk = 0; blk < 8; ++blk) {
        const unsigned ls = ((byte_at(b + 4, blk / 2) >> (4 * (blk % 2))) & 15u) | (((scales_h >> (2 * blk)) & 3u) << 4);
        const int k = static_cast<int>(ls) - 32;
        out.set(blk, d, k, k, 0.0f, 0, 0);
        nibbles32(b + 8 + 16 * blk, out.codes + 32 * blk, [](unsigned q, int) { return kIq4Codes[q]; });
    }
}

/// Whether the library reads `t` (plain or block type).
inline bool can_dequantize(GgmlType t) {
    const auto tr = ggml_type_traits(static_cast<std::uint32_t>(t));
    return tr && tr->supported;
}

/// Whether `t` is a block type the library reads as IntBlocks.
inline bool is_block_type(GgmlType t) { return can_dequantize(t) && ggml_type_traits(static_cast<std::uint32_t>(t))->block > 1; }

/// Bytes of `n` values of `t` (n a multiple of its block size).
inline std::int64_t bytes_of(GgmlType t, std::int64_t n) {
    const auto tr = ggml_type_traits(static_cast<std::uint32_t>(t));
    return n / tr->block * tr->block_bytes;
}

/// The decoder of a block type, and its geometry.
struct BlockDecoder {
    void (*decode)(const std::byte*, const IntBlocks&);
    std::int64_t values;  ///< per stored block: 32 or 256
    std::int64_t bytes;   ///< per stored block
    /// Where the block keeps its f16 scales (d, then dmin or m), bytes from its start; −1: none.
    std::array<int, 2> f16_scales;
    int offset;  ///< of the codes: a value's c is its code − offset
};

inline BlockDecoder block_decoder(GgmlType t) {
    switch (t) {
        case GgmlType::Q8_0: return {decode_q8_0, 32, 34, {0, -1}, 128};
        case GgmlType::Q4_0: return {decode_q4_0, 32, 18, {0, -1}, 8};
        case GgmlType::Q4_1: return {decode_q4_1, 32, 20, {0, 2}, 0};
        case GgmlType::Q5_0: return {decode_q5_0, 32, 22, {0, -1}, 16};
        case GgmlType::Q5_1: return {decode_q5_1, 32, 24, {0, 2}, 0};
        case GgmlType::IQ4_NL: return {decode_iq4_nl, 32, 18, {0, -1}, 128};
        case GgmlType::Q2_K: return {decode_q2_k, 256, 84, {80, 82}, 0};
        case GgmlType::Q3_K: return {decode_q3_k, 256, 110, {108, -1}, 4};
        case GgmlType::Q4_K: return {decode_q4_k, 256, 144, {0, 2}, 0};
        case GgmlType::Q5_K: return {decode_q5_k, 256, 176, {0, 2}, 0};
        case GgmlType::Q6_K: return {decode_q6_k, 256, 210, {208, -1}, 32};
        case GgmlType::IQ4_XS: return {decode_iq4_xs, 256, 136, {0, -1}, 128};
        default: break;
    }
    throw ShapeError("ggml type " + std::string(ggml_type_name(t)) + " is not a block type the library runs (it runs " +
                     std::string(kSupportedGgmlTypes) + ")");
}

/// The first `n` values of a row of block type `t` (n a multiple of its block size) as
/// IntBlocks: n / 32 blocks into `out`.
inline void decode_row(const BlockDecoder& dec, const std::byte* src, std::int64_t n, const IntBlocks& out) {
    const std::int64_t per = dec.values / 32;
    for (std::int64_t b = 0; b < n / dec.values; ++b) dec.decode(src + b * dec.bytes, out.at(b * per));
}

/// The first `n` values stored at `src` as type `t` (n a multiple of the block size), exactly.
/// ShapeError naming `what` for a type the library does not read.
template <class T>
inline void dequantize_row(GgmlType t, const std::byte* src, std::int64_t n, T* out, const std::string& what = "tensor") {
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
        default: break;
    }
    if (!is_block_type(t))
        throw ShapeError(what + ": ggml type " + std::string(ggml_type_name(t)) + " is not supported (the library runs " +
                         std::string(kSupportedGgmlTypes) + ")");
    const BlockDecoder dec = block_decoder(t);
    std::uint8_t codes[256];
    std::int16_t scale[16], min[16];
    float d[8], dmin[8];
    const IntBlocks q{codes, scale, min, d, dmin};
    for (std::int64_t s = 0; s < n / dec.values; ++s) {
        dec.decode(src + s * dec.bytes, q);
        for (std::int64_t b = 0; b < dec.values / 32; ++b)
            for (int i = 0; i < 32; ++i) out[s * dec.values + 32 * b + i] = static_cast<T>(int_block_value(q.at(b), i, dec.offset));
    }
}

/// Whether every f16 scale of a row of `n` values (a NaN or infinite d, dmin or m would give
/// non-finite outputs from finite inputs) is finite: the scales are read in place, nothing decoded.
inline bool finite_scales(const BlockDecoder& dec, const std::byte* src, std::int64_t n) {
    for (std::int64_t b = 0; b < n / dec.values; ++b)
        for (const int at : dec.f16_scales)
            if (at >= 0 && (read_u16(src + b * dec.bytes + at) & 0x7c00u) == 0x7c00u) return false;
    return true;
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
