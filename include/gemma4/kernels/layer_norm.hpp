// LayerNorm (torch.nn.LayerNorm): y = (x − mean) / sqrt(var + eps) · w + b, biased variance.
// Used only by the vision embedder.
#pragma once

#include <gemma4/abi.hpp>

#include <cmath>
#include <cstdint>

namespace gemma4::inline GEMMA4_ABI::kernels {

template <class T>
inline void layer_norm(const T* x, const T* w, const T* b, T eps, std::int64_t n, T* y) {
    T mean = 0;
    for (std::int64_t i = 0; i < n; ++i) mean += x[i];
    mean /= static_cast<T>(n);
    T var = 0;
    for (std::int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
    var /= static_cast<T>(n);
    const T inv = T(1) / std::sqrt(var + eps);
    for (std::int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv * w[i] + b[i];
}

}  // namespace gemma4::kernels
