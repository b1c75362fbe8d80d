// Dense products of T matrices through Eigen: y[t, 0:n) = x[t, 0:K) · w[0:n, 0:K)ᵀ. This is what
// the double path (the conformance reference) runs: Eigen's blocked GEMM is faster than one dot
// product per (token, row) for a prefill, and the double path's accuracy does not depend on the
// order of the sums at the 1e-12 it is held to. (Float stays off it: see kernels/linear.hpp.)
//
// The thread pool splits the rows; each Eigen call runs on the thread that makes it, so Eigen
// must never start threads of its own (it would only do so under OpenMP).
#pragma once

#include <gemma4/abi.hpp>
#include <gemma4/kernels/rows.hpp>

#ifndef EIGEN_DONT_PARALLELIZE
#define EIGEN_DONT_PARALLELIZE
#endif
#include <Eigen/Core>

#include <cstdint>

namespace gemma4::inline GEMMA4_ABI::detail {

/// y.row(t)[0, n) = x.row(t)[0, K) · wᵀ for t < tokens, w row-major [n, K] with row stride `ldw`.
template <class T>
inline void dense_product(const T* w, std::int64_t ldw, std::int64_t n, std::int64_t K, Rows<const T> x, Rows<T> y,
                          std::int64_t tokens) {
    using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    using Stride = Eigen::OuterStride<>;
    const Eigen::Map<const Matrix, 0, Stride> X(x.data, tokens, K, Stride(x.stride));
    const Eigen::Map<const Matrix, 0, Stride> W(w, n, K, Stride(ldw));
    Eigen::Map<Matrix, 0, Stride> Y(y.data, tokens, n, Stride(y.stride));
    Y.noalias() = X * W.transpose();
}

}  // namespace gemma4::detail
