// Block-quantized weight formats Q8 and Q4 (layout in docs/checkpoint-formats.md): rows of a
// [rows, cols] matrix are cut into blocks of 32 or 64 elements (a property of each matrix), each
// with one f16 scale; rows are padded with zeros to a multiple of 128 elements so that kernels
// never need a partial block.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/tensor/dtype.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// How the big matrices are held in memory, chosen at load time. AsStored keeps the checkpoint's
/// dtype (bf16 as published, or Q8/Q4 from a quantized checkpoint).
enum class WeightFormat : std::uint8_t { AsStored, BF16, Int8, Int4 };

constexpr std::string_view weight_format_name(WeightFormat f) {
    switch (f) {
        case WeightFormat::AsStored: return "as-stored";
        case WeightFormat::BF16: return "bf16";
        case WeightFormat::Int8: return "int8";
        case WeightFormat::Int4: return "int4";
    }
    return "?";
}

constexpr std::optional<WeightFormat> parse_weight_format(std::string_view s) {
    if (s == "as-stored") return WeightFormat::AsStored;
    if (s == "bf16") return WeightFormat::BF16;
    if (s == "int8") return WeightFormat::Int8;
    if (s == "int4") return WeightFormat::Int4;
    return std::nullopt;
}

/// Called after each matrix re-encoded at load: (matrices done, matrices total, its name).
using QuantizeProgress = std::function<void(std::size_t, std::size_t, const std::string&)>;

constexpr bool is_quantized(DType t) { return t == DType::Q8 || t == DType::Q4; }

namespace quant {

/// Elements per scale: 32 (the default, and GGUF's Q8_0 / Q4_0) or 64. A 64-element block halves
/// the per-block work of a product — one int32 sum, one convert and two float operations per
/// token per 64 weights instead of per 32 — which bounds batched decode without AMX, for a scale
/// (of the weights and of the activations) that covers twice the values: measured in
/// docs/checkpoint-formats.md ("Q8 and Q4 blocks").
inline constexpr std::int64_t kUnit = 32;       ///< the smallest block, and the code layout's unit
inline constexpr std::int64_t kRowAlign = 128;  ///< rows padded to this many elements
constexpr bool valid_block(std::int64_t block) { return block == 32 || block == 64; }
/// The block the load-time quantizer uses when none is asked for: 32, the more accurate, for
/// both formats (blocks of 64 are asked for by name).
inline constexpr std::int64_t kDefaultBlock = 32;
inline constexpr int kQ8Max = 127;              ///< symmetric: codes in [-127, 127]
inline constexpr int kQ4Offset = 8;             ///< nibble q holds the value (q - 8) · scale
inline constexpr int kQ4Max = 7;                ///< scale = max|w| / 7, codes in [-7, 7] (+8)

constexpr std::int64_t padded_cols(std::int64_t cols) { return (cols + kRowAlign - 1) / kRowAlign * kRowAlign; }
constexpr std::int64_t blocks_per_row(std::int64_t cols, std::int64_t block) { return padded_cols(cols) / block; }
/// Bytes of codes per row (Q8: one byte per element, Q4: two elements per byte).
constexpr std::int64_t row_bytes(DType t, std::int64_t cols) {
    return t == DType::Q4 ? padded_cols(cols) / 2 : padded_cols(cols);
}
constexpr int max_code(DType t) { return t == DType::Q4 ? kQ4Max : kQ8Max; }

/// The largest magnitude among n values, each taken as T first. A NaN is passed over (std::max
/// keeps the running value), as the vector kernels' max instructions do.
template <class T, class S>
inline T max_magnitude(const S* x, std::int64_t n) {
    T m = 0;
    for (std::int64_t i = 0; i < n; ++i) m = std::max(m, static_cast<T>(std::fabs(static_cast<T>(x[i]))));
    return m;
}

/// The symmetric rounding rule of every quantizer in the library (weights, activations, K/V):
/// x · inv clamped to [−limit, limit], then rounded half to even (nearbyint in the default
/// rounding mode, as the vector kernels' conversions). Clamping first keeps the conversion to int
/// defined for any input; a NaN becomes −limit, as the vector kernels' max/min give.
template <class T>
inline int symmetric_code(T x, T inv, int limit) {
    const T lim = static_cast<T>(limit);
    return static_cast<int>(std::nearbyint(std::min(lim, std::max(-lim, x * inv))));
}

/// The symmetric quantizer: n values to codes in [−limit, limit] with the scale max|x|/limit,
/// codes symmetric_code(x, limit/max|x|) (an all-zero block: scale 0, codes 0). Returns the scale.
/// Activations (kernels/quant_acts.hpp) and the int8 KV cache (kv/kv_cache.hpp) are exactly
/// this; the stored weight formats differ only in taking codes against their f16-rounded scale
/// (quantize_row).
template <class T, class Code>
inline T quantize_symmetric(const T* x, std::int64_t n, int limit, Code* codes) {
    const T amax = max_magnitude<T>(x, n);
    const T inv = amax > 0 ? static_cast<T>(limit) / amax : T(0);
    for (std::int64_t i = 0; i < n; ++i) codes[i] = static_cast<Code>(symmetric_code(x[i], inv, limit));
    return amax / static_cast<T>(limit);
}

/// The f16 scale of a block whose largest magnitude is `amax`, saturated to the f16 range.
inline std::uint16_t block_scale(float amax, DType t) {
    const float d = std::min(amax / static_cast<float>(max_code(t)), 65504.0f);
    return float_to_f16(d);
}

/// Q4 codes are packed per 128-element group: byte j of the group's 64 holds element j in its
/// low nibble and element j + 64 in its high nibble, so one 64-byte load unpacks into two
/// contiguous 64-element halves.
constexpr std::int64_t q4_byte(std::int64_t i) { return (i / 128) * 64 + (i % 64); }
constexpr bool q4_high(std::int64_t i) { return (i % 128) >= 64; }

// Nibbles of a byte (0..255), for every scalar 4-bit decoder: our Q4 rows, and GGUF's Q4_0,
// Q4_K and Q6_K blocks (tensor/ggml_blocks.hpp). The vector kernels keep their own forms.
constexpr unsigned low_nibble(unsigned byte) { return byte & 0x0fu; }
constexpr unsigned high_nibble(unsigned byte) { return (byte >> 4) & 0x0fu; }
/// `byte` with its high or low nibble replaced by `nibble` (< 16).
constexpr unsigned with_nibble(unsigned byte, bool high, unsigned nibble) {
    return high ? (byte & 0x0fu) | (nibble << 4) : (byte & 0xf0u) | nibble;
}
/// The nibble of element i of a Q4 row in its byte (q4_byte(i)).
constexpr unsigned q4_nibble(unsigned byte, std::int64_t i) { return q4_high(i) ? high_nibble(byte) : low_nibble(byte); }

/// Quantizes `cols` values into one padded row: `codes` (row_bytes) and `scales` (f16 per block
/// of `block` elements).
template <class S>
inline void quantize_row(DType t, std::int64_t block, const S* src, std::int64_t cols, std::byte* codes, std::uint16_t* scales) {
    const std::int64_t kp = padded_cols(cols), nb = kp / block;
    if (t == DType::Q4) std::memset(codes, 0, static_cast<std::size_t>(kp / 2));
    for (std::int64_t b = 0; b < nb; ++b) {
        const std::int64_t i0 = b * block, i1 = std::min(cols, i0 + block);
        const float amax = max_magnitude<float>(src + i0, std::max<std::int64_t>(i1 - i0, 0));
        const std::uint16_t s = block_scale(amax, t);
        scales[b] = s;
        // quantize_symmetric's rule, except that the codes are taken against the scale the file
        // holds (f16, rounded) rather than max|x|/limit, so that code · stored scale is the nearest
        // value the format can hold. Every Q8/Q4 file written so far was made this way.
        const float d = f16_to_float(s);
        const float inv = d > 0 ? 1.0f / d : 0.0f;
        const int lim = max_code(t);
        for (std::int64_t i = i0; i < i0 + block; ++i) {
            int q = 0;
            if (i < i1) q = symmetric_code(static_cast<float>(src[i]), inv, lim);
            if (t == DType::Q8) {
                codes[i] = static_cast<std::byte>(static_cast<std::int8_t>(q));
            } else {
                std::byte& byte = codes[q4_byte(i)];
                byte = static_cast<std::byte>(with_nibble(std::to_integer<unsigned>(byte), q4_high(i), static_cast<unsigned>(q + kQ4Offset)));
            }
        }
    }
}

/// The integer code of element i of a quantized row (Q4: already minus the offset).
/// The byte of a row's codes that holds element i, and the code element i takes from it.
constexpr std::int64_t code_byte(DType t, std::int64_t i) { return t == DType::Q4 ? q4_byte(i) : i; }
inline int code_in_byte(DType t, std::byte b, std::int64_t i) {
    const auto byte = std::to_integer<unsigned>(b);
    if (t == DType::Q8) return static_cast<std::int8_t>(byte);
    return static_cast<int>(q4_nibble(byte, i)) - kQ4Offset;
}

inline int code_at(DType t, const std::byte* codes, std::int64_t i) { return code_in_byte(t, codes[code_byte(t, i)], i); }

/// Element i of a quantized row as float.
inline float dequantize_at(DType t, std::int64_t block, const std::byte* codes, const std::uint16_t* scales, std::int64_t i) {
    return static_cast<float>(code_at(t, codes, i)) * f16_to_float(scales[i / block]);
}

/// The first `cols` values of a quantized row.
template <class T>
inline void dequantize_row(DType t, std::int64_t block, const std::byte* codes, const std::uint16_t* scales, std::int64_t cols, T* out) {
    for (std::int64_t b = 0; b * block < cols; ++b) {
        const float d = f16_to_float(scales[b]);
        const std::int64_t i1 = std::min(cols, (b + 1) * block);
        for (std::int64_t i = b * block; i < i1; ++i) out[i] = static_cast<T>(static_cast<float>(code_at(t, codes, i)) * d);
    }
}

// ---- In memory: panels of 16 rows --------------------------------------------------------
// Files hold the rows above one after another. In memory a matrix is held as panels of
// kPanelRows rows (the last one padded with zero rows) that interleave their rows in 4-byte
// words. One 64-byte load then holds 4 consecutive bytes of each of the 16 rows — the operand of
// an int8 dot-product instruction. A panel is a sequence of 128-column groups (kRowAlign), each
// its scales followed by its codes, so that a panel, scales included, is one contiguous stream
// read in ascending order: a second stream of scales beside the codes cost a one-token product
// 15–20 % of its read speed, and scales after their codes, read before them, 10 % on an AMD Zen 4
// (docs/perf-log/). Within group g, scale k (of the group's 128 / block) of row r is at
// 2·(16·k + r), and byte j of row r's group bytes at group_scale_bytes + 64·(j / 4) + 4·r + j % 4.
// The bytes themselves are the file's (Q8 signed codes, Q4 nibble pairs), so a row moves
// between the layouts by whole words.
//
// The codes of a group are four 32-column units of 512 bytes (8 words × 16 rows): Q8 unit k at
// 512·k; Q4 unit k in the low (k < 2) or high nibbles of the 512 bytes at 512·(k % 2). A block
// of 64 is two consecutive units, so the codes lie alike for both block sizes; only the scales
// differ.

inline constexpr std::int64_t kPanelRows = 16;
inline constexpr std::int64_t kUnitBytes = 512;  ///< bytes (Q4: nibbles) of one unit of 16 rows
constexpr std::int64_t group_blocks(std::int64_t block) { return kRowAlign / block; }  ///< blocks per 128-column group
/// Bytes of a group's codes (Q8 2048, Q4 1024) and scales (block 32: 128, 64: 64), and of the group.
constexpr std::int64_t group_code_bytes(DType t) { return kPanelRows * row_bytes(t, kRowAlign); }
constexpr std::int64_t group_scale_bytes(std::int64_t block) { return kPanelRows * group_blocks(block) * 2; }
constexpr std::int64_t group_bytes(DType t, std::int64_t block) { return group_code_bytes(t) + group_scale_bytes(block); }
static_assert(group_bytes(DType::Q8, 32) % 64 == 0 && group_bytes(DType::Q4, 32) % 64 == 0 && group_bytes(DType::Q8, 64) % 64 == 0 &&
                  group_bytes(DType::Q4, 64) % 64 == 0,
              "groups keep panels line-aligned");

constexpr std::int64_t panel_count(std::int64_t rows) { return (rows + kPanelRows - 1) / kPanelRows; }
/// Bytes per panel, codes and scales.
constexpr std::int64_t panel_bytes(DType t, std::int64_t block, std::int64_t cols) {
    return padded_cols(cols) / kRowAlign * group_bytes(t, block);
}
/// Where in a panel unit u's 8 words of 16 rows start (Q4: 512 bytes whose low nibbles, for
/// u % 4 < 2, or high nibbles are the unit).
constexpr std::int64_t unit_codes_offset(DType t, std::int64_t block, std::int64_t u) {
    return u / 4 * group_bytes(t, block) + group_scale_bytes(block) + (t == DType::Q4 ? u % 2 : u % 4) * kUnitBytes;
}
/// Whether unit u of a Q4 panel is held in the high nibbles.
constexpr bool unit_high(std::int64_t u) { return u % 4 >= 2; }
/// Where in a panel block b's codes start: its units follow one another, kUnitBytes apart.
constexpr std::int64_t block_codes_offset(DType t, std::int64_t block, std::int64_t b) {
    return unit_codes_offset(t, block, b * (block / kUnit));
}
/// Where in a panel block b's 16 scales start.
constexpr std::int64_t block_scales_offset(DType t, std::int64_t block, std::int64_t b) {
    return b / group_blocks(block) * group_bytes(t, block) + b % group_blocks(block) * 2 * kPanelRows;
}
/// Where in a panel scale b of row r (f16 bits) is.
constexpr std::int64_t panel_scale_offset(DType t, std::int64_t block, std::int64_t b, std::int64_t r) {
    return block_scales_offset(t, block, b) + 2 * r;
}
/// The stream bytes per block (block 32: Q8 544, Q4 288; 64: Q8 1056, Q4 544): what a kernel
/// prefetches per block.
constexpr std::int64_t block_stream_bytes(DType t, std::int64_t block) { return group_bytes(t, block) / group_blocks(block); }
/// Where in a panel byte j of row r's codes (row_bytes layout) is.
constexpr std::int64_t panel_code_offset(DType t, std::int64_t block, std::int64_t j, std::int64_t r) {
    const std::int64_t gb = row_bytes(t, kRowAlign), jj = j % gb;
    return j / gb * group_bytes(t, block) + group_scale_bytes(block) + 64 * (jj / 4) + 4 * r + jj % 4;
}

/// Writes a row in the file layout (codes, scales) as row r of a panel.
inline void row_to_panel(DType t, std::int64_t block, const std::byte* codes, const std::uint16_t* scales, std::int64_t cols, std::int64_t r,
                         std::byte* panel) {
    const std::int64_t words = row_bytes(t, cols) / 4, nb = blocks_per_row(cols, block);
    for (std::int64_t w = 0; w < words; ++w) std::memcpy(panel + panel_code_offset(t, block, 4 * w, r), codes + 4 * w, 4);
    for (std::int64_t b = 0; b < nb; ++b) std::memcpy(panel + panel_scale_offset(t, block, b, r), scales + b, 2);
}

/// Row r of a panel in the file layout.
inline void panel_to_row(DType t, std::int64_t block, const std::byte* panel, std::int64_t cols, std::int64_t r, std::byte* codes,
                         std::uint16_t* scales) {
    const std::int64_t words = row_bytes(t, cols) / 4, nb = blocks_per_row(cols, block);
    for (std::int64_t w = 0; w < words; ++w) std::memcpy(codes + 4 * w, panel + panel_code_offset(t, block, 4 * w, r), 4);
    for (std::int64_t b = 0; b < nb; ++b) std::memcpy(scales + b, panel + panel_scale_offset(t, block, b, r), 2);
}

/// Makes every row of a panel zero: code 0 (Q4: nibble 8) and scale 0. Padding rows stay so.
inline void clear_panel(DType t, std::int64_t block, std::int64_t cols, std::byte* panel) {
    for (std::int64_t g = 0; g < padded_cols(cols) / kRowAlign; ++g) {
        std::byte* group = panel + g * group_bytes(t, block);
        std::memset(group, 0, static_cast<std::size_t>(group_scale_bytes(block)));
        std::memset(group + group_scale_bytes(block), t == DType::Q4 ? 0x88 : 0, static_cast<std::size_t>(group_code_bytes(t)));
    }
}

/// Scale of block b of row r of a panel (f16 bits).
inline std::uint16_t panel_scale(DType t, std::int64_t block, const std::byte* panel, std::int64_t r, std::int64_t b) {
    std::uint16_t s;
    std::memcpy(&s, panel + panel_scale_offset(t, block, b, r), 2);
    return s;
}

/// Element i of row r of a panel as float.
inline float panel_value_at(DType t, std::int64_t block, const std::byte* panel, std::int64_t r, std::int64_t i) {
    const int code = code_in_byte(t, panel[panel_code_offset(t, block, code_byte(t, i), r)], i);
    return static_cast<float>(code) * f16_to_float(panel_scale(t, block, panel, r, i / block));
}

}  // namespace quant
}  // namespace GEMMA4_ABI
}  // namespace gemma4
