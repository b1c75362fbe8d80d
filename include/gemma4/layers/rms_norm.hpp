// RMSNorm as a module: the weight converted once to T (a few KB), applied row by row.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/kernels/ops.hpp>
#include <gemma4/tensor/weight_view.hpp>

#include <cstdint>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

template <class T>
class RMSNorm {
public:
    RMSNorm() = default;
    /// Weighted norm (y = x̂ · w, plain w: spec §1.1).
    RMSNorm(const WeightView& w, double eps) : weight_(w.to_vector<T>()), eps_(static_cast<T>(eps)), dim_(w.numel()) {}
    /// Norm without weight (v_norm, the multimodal pre-projection norm).
    static RMSNorm unit(std::int64_t dim, double eps) {
        RMSNorm n;
        n.eps_ = static_cast<T>(eps);
        n.dim_ = dim;
        return n;
    }

    /// `rows` rows of dim() values at x (stride sx) → y (stride sy); y may alias x.
    void operator()(const T* x, std::int64_t sx, T* y, std::int64_t sy, std::int64_t rows) const {
        for (std::int64_t r = 0; r < rows; ++r) kernels::rms_norm(x + r * sx, weight_.empty() ? nullptr : weight_.data(), eps_, dim_, y + r * sy);
    }
    /// In place, each of `heads` dim()-wide heads of `rows` rows at x (row stride sx): the
    /// per-head norms of attention (one weight shared by all heads).
    void per_head(T* x, std::int64_t sx, std::int64_t rows, std::int64_t heads) const {
        for (std::int64_t r = 0; r < rows; ++r) (*this)(x + r * sx, dim_, x + r * sx, dim_, heads);
    }
    std::int64_t dim() const { return dim_; }

private:
    std::vector<T> weight_;
    T eps_ = T(1e-6);
    std::int64_t dim_ = 0;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
