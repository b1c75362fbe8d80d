// WeightView: a non-owning view of one stored tensor (mmap'd checkpoint bytes or a quantized
// copy), in its storage dtype. Kernels read it row by row and convert on the fly, so the model
// is never converted up front.
#pragma once

#include <gemma4/tensor/dtype.hpp>
#include <gemma4/tensor/quant.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gemma4 {

struct WeightView {
    std::string name;              ///< checkpoint tensor name, for messages
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape;
    const std::byte* data = nullptr;
    std::size_t size_bytes = 0;
    /// Q8/Q4 only: one f16 scale per 32-element block, [rows, blocks_per_row(cols)]; `data` holds
    /// the codes, [rows, row_bytes(dtype, cols)] (tensor/quant.hpp).
    const std::byte* scales = nullptr;
    /// Q8/Q4 only: the dtype the values had before quantization (the embedding scale is
    /// rounded to it, as for the unquantized checkpoint).
    DType origin = DType::BF16;

    explicit operator bool() const { return data != nullptr; }

    std::int64_t numel() const {
        std::int64_t n = 1;
        for (auto d : shape) n *= d;
        return n;
    }
    /// Matrices are [rows, cols] = [out, in] (PyTorch Linear layout).
    std::int64_t rows() const { return shape.empty() ? 0 : shape.front(); }
    std::int64_t cols() const { return rows() ? numel() / rows() : 0; }

    bool quantized() const { return is_quantized(dtype); }
    /// The dtype whose rounding the values carry: `origin` for quantized views, else `dtype`.
    DType value_dtype() const { return quantized() ? origin : dtype; }

    /// Codes and scales of row r of a quantized view.
    const std::byte* codes_row(std::int64_t r) const { return data + r * quant::row_bytes(dtype, cols()); }
    const std::uint16_t* scales_row(std::int64_t r) const {
        return reinterpret_cast<const std::uint16_t*>(scales) + r * quant::blocks_per_row(cols());
    }

    /// Element i (row-major), converted to T. For small tensors and reference code.
    template <class T>
    T at(std::int64_t i) const {
        if (quantized()) {
            const std::int64_t c = cols(), r = i / c;
            return static_cast<T>(quant::dequantize_at(dtype, codes_row(r), scales_row(r), i % c));
        }
        return load_element<T>(data, dtype, static_cast<std::size_t>(i));
    }

    /// The whole tensor converted to T (norm weights, scalars: small tensors only).
    template <class T>
    std::vector<T> to_vector() const {
        std::vector<T> out(static_cast<std::size_t>(numel()));
        for (std::size_t i = 0; i < out.size(); ++i) out[i] = at<T>(static_cast<std::int64_t>(i));
        return out;
    }
};

inline std::string shape_string(std::span<const std::int64_t> shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(shape[i]);
    }
    return s + "]";
}

}  // namespace gemma4
