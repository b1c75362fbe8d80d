// WeightView: a non-owning view of one stored tensor (mmap'd checkpoint bytes or a quantized
// copy), in its storage dtype. Kernels read it row by row and convert on the fly, so the model
// is never converted up front.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/tensor/dtype.hpp>
#include <gemma4/tensor/ggml_blocks.hpp>
#include <gemma4/tensor/ggml_type.hpp>
#include <gemma4/tensor/quant.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

struct WeightView {
    std::string name;              ///< checkpoint tensor name, for messages
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape;
    const std::byte* data = nullptr;
    std::size_t size_bytes = 0;
    /// Q8/Q4 only: one f16 scale per block of `block` elements (tensor/quant.hpp). In memory as panels of
    /// 16 rows (what the kernels read), `data` holds codes and scales together and `scales` is
    /// null; as rows of a file, `data` holds the codes and `scales` the scales.
    const std::byte* scales = nullptr;
    enum class Layout : std::uint8_t { Panels, Rows };
    Layout layout = Layout::Panels;
    /// Q8/Q4 only: the dtype the values had before quantization (the embedding scale is
    /// rounded to it, as for the unquantized checkpoint).
    DType origin = DType::BF16;
    /// Q8/Q4 only: elements per scale, 32 or 64 (quant::valid_block).
    std::int64_t block = 32;
    /// DType::Ggml only: the GGUF block type of the rows, which are as stored in the file (the
    /// int8 kernels and the exact path read them through tensor/ggml_blocks.hpp's IntBlocks).
    GgmlType ggml = GgmlType::F32;

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
    /// The dtype whose rounding the values carry: `origin` for quantized views, F32 for ggml
    /// blocks (ggml dequantizes in float32), else `dtype`.
    DType value_dtype() const { return quantized() ? origin : dtype == DType::Ggml ? DType::F32 : dtype; }

    /// DType::Ggml only: bytes of one row as stored.
    std::int64_t ggml_row_bytes() const { return ggml::bytes_of(ggml, cols()); }

    /// Bytes of the scales held apart from `data`: a quantized view in the Rows layout (0 for
    /// others; panels hold their scales in `data`).
    std::size_t scale_bytes() const {
        if (!quantized() || layout == Layout::Panels) return 0;
        return static_cast<std::size_t>(2 * rows() * quant::blocks_per_row(cols(), block));
    }

    /// Panel p of a quantized view in the Panels layout (codes and scales).
    const std::byte* panel(std::int64_t p) const { return data + p * quant::panel_bytes(dtype, block, cols()); }

    /// Row r of a quantized view in the file layout: row_bytes(dtype, cols) codes and
    /// blocks_per_row(cols, block) scales.
    void quant_row(std::int64_t r, std::byte* codes, std::uint16_t* row_scales) const {
        const std::int64_t c = cols(), rb = quant::row_bytes(dtype, c), nb = quant::blocks_per_row(c, block);
        if (layout == Layout::Rows) {
            std::memcpy(codes, data + r * rb, static_cast<std::size_t>(rb));
            std::memcpy(row_scales, reinterpret_cast<const std::uint16_t*>(scales) + r * nb, static_cast<std::size_t>(nb * 2));
            return;
        }
        const std::int64_t p = r / quant::kPanelRows;
        quant::panel_to_row(dtype, block, panel(p), c, r % quant::kPanelRows, codes, row_scales);
    }

    /// Element i (row-major), converted to T. For small tensors and reference code.
    template <class T>
    T at(std::int64_t i) const {
        if (quantized()) {
            const std::int64_t c = cols(), r = i / c;
            if (layout == Layout::Rows) {
                const auto* s = reinterpret_cast<const std::uint16_t*>(scales) + r * quant::blocks_per_row(c, block);
                return static_cast<T>(quant::dequantize_at(dtype, block, data + r * quant::row_bytes(dtype, c), s, i % c));
            }
            const std::int64_t p = r / quant::kPanelRows;
            return static_cast<T>(quant::panel_value_at(dtype, block, panel(p), r % quant::kPanelRows, i % c));
        }
        if (dtype == DType::Ggml) {  // the stored block that holds element i, decoded
            const std::int64_t c = cols(), r = i / c, j = i % c;
            const ggml::BlockDecoder dec = ggml::block_decoder(ggml);
            float values[256];
            ggml::dequantize_row(ggml, data + r * ggml_row_bytes() + j / dec.values * dec.bytes, dec.values, values, name);
            return static_cast<T>(values[j % dec.values]);
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

}  // namespace GEMMA4_ABI
}  // namespace gemma4
