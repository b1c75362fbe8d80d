// WeightView: a non-owning view of one stored tensor (mmap'd checkpoint bytes or a quantized
// copy), in its storage dtype. Kernels read it row by row and convert on the fly, so the model
// is never converted up front.
#pragma once

#include <gemma4/tensor/dtype.hpp>

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

    explicit operator bool() const { return data != nullptr; }

    std::int64_t numel() const {
        std::int64_t n = 1;
        for (auto d : shape) n *= d;
        return n;
    }
    /// Matrices are [rows, cols] = [out, in] (PyTorch Linear layout).
    std::int64_t rows() const { return shape.empty() ? 0 : shape.front(); }
    std::int64_t cols() const { return rows() ? numel() / rows() : 0; }

    /// Element i (row-major), converted to T. For small tensors and reference code.
    template <class T>
    T at(std::int64_t i) const { return load_element<T>(data, dtype, static_cast<std::size_t>(i)); }

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
