// Storage dtypes of checkpoint tensors and their conversions to arithmetic types.
#pragma once

#include <gemma4/abi.hpp>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// How a tensor's elements are stored. BF16/F16/F32/F64 are the safetensors dtypes we read;
/// the quantized formats are produced by the library (see docs/checkpoint-formats.md).
/// I8/U8 are the byte tensors a quantized checkpoint stores its codes in. Ggml is a GGUF
/// tensor's blocks as stored, of the block type its view names (tensor/weight_view.hpp).
enum class DType : std::uint8_t { BF16, F16, F32, F64, I32, Q8, Q4, I8, U8, Ggml };

constexpr std::string_view dtype_name(DType t) {
    switch (t) {
        case DType::BF16: return "BF16";
        case DType::F16: return "F16";
        case DType::F32: return "F32";
        case DType::F64: return "F64";
        case DType::I32: return "I32";
        case DType::Q8: return "Q8";
        case DType::Q4: return "Q4";
        case DType::I8: return "I8";
        case DType::U8: return "U8";
        case DType::Ggml: return "GGML";
    }
    return "?";
}

/// The safetensors dtype strings we accept for model tensors.
constexpr std::optional<DType> parse_safetensors_dtype(std::string_view s) {
    if (s == "BF16") return DType::BF16;
    if (s == "F16") return DType::F16;
    if (s == "F32") return DType::F32;
    if (s == "F64") return DType::F64;
    if (s == "I32") return DType::I32;
    if (s == "I8") return DType::I8;
    if (s == "U8") return DType::U8;
    return std::nullopt;
}

/// Bytes per element for the plain dtypes (quantized formats have no per-element size).
constexpr std::size_t dtype_size(DType t) {
    switch (t) {
        case DType::BF16:
        case DType::F16: return 2;
        case DType::F32:
        case DType::I32: return 4;
        case DType::F64: return 8;
        case DType::I8:
        case DType::U8: return 1;
        case DType::Q8:
        case DType::Q4:
        case DType::Ggml: return 0;
    }
    return 0;
}

// ---- scalar conversions -------------------------------------------------------------------

constexpr float bf16_to_float(std::uint16_t h) {
    return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

/// Round to nearest even, NaN kept quiet.
constexpr std::uint16_t float_to_bf16(float f) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
    const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return static_cast<std::uint16_t>((u + rounding) >> 16);
}

constexpr float f16_to_float(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exp = (h >> 10) & 0x1fu;
    std::uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        if (mant == 0) return std::bit_cast<float>(sign);
        // subnormal: value = mant * 2^-24
        float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
    return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

/// Round to nearest even, with subnormals, overflow to infinity and NaN kept.
constexpr std::uint16_t float_to_f16(float f) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
    const std::uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);
    if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf
    if (abs < 0x38800000u) {  // below the smallest normal: subnormal or zero
        const float a = std::bit_cast<float>(abs);
        // a * 2^24 rounded to nearest even integer
        const float scaled = a * 16777216.0f;
        std::uint32_t m = static_cast<std::uint32_t>(scaled);
        const float rem = scaled - static_cast<float>(m);
        if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
        return static_cast<std::uint16_t>(sign | m);
    }
    const std::uint32_t rounding = 0xfffu + ((abs >> 13) & 1u);
    const std::uint32_t r = abs + rounding;
    return static_cast<std::uint16_t>(sign | (((r >> 23) - 112u) << 10) | ((r >> 13) & 0x3ffu));
}

/// Reads element `i` of a plain-dtype buffer as T (T = float or double).
template <class T>
inline T load_element(const std::byte* data, DType dtype, std::size_t i) {
    switch (dtype) {
        case DType::BF16: {
            std::uint16_t h;
            std::memcpy(&h, data + 2 * i, 2);
            return static_cast<T>(bf16_to_float(h));
        }
        case DType::F16: {
            std::uint16_t h;
            std::memcpy(&h, data + 2 * i, 2);
            return static_cast<T>(f16_to_float(h));
        }
        case DType::F32: {
            float v;
            std::memcpy(&v, data + 4 * i, 4);
            return static_cast<T>(v);
        }
        case DType::F64: {
            double v;
            std::memcpy(&v, data + 8 * i, 8);
            return static_cast<T>(v);
        }
        case DType::I32: {
            std::int32_t v;
            std::memcpy(&v, data + 4 * i, 4);
            return static_cast<T>(v);
        }
        case DType::I8: return static_cast<T>(static_cast<std::int8_t>(data[i]));
        case DType::U8: return static_cast<T>(std::to_integer<unsigned>(data[i]));
        default: return T(0);
    }
}

/// `x` rounded to what `dtype` can hold and read back as double (used for the embedding scale,
/// which the reference implementation rounds to the embedding table's dtype).
inline double round_to_dtype(double x, DType dtype) {
    switch (dtype) {
        case DType::BF16: return bf16_to_float(float_to_bf16(static_cast<float>(x)));
        case DType::F16: return f16_to_float(float_to_f16(static_cast<float>(x)));
        case DType::F32: return static_cast<float>(x);
        default: return x;
    }
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
