// linear: y[t, n] = Σ_k x[t, k] · w[n, k] for a stored weight matrix w (PyTorch [out, in]
// layout) in any supported dtype. Weight rows are converted to T just before use, a block at a
// time, so nothing is converted up front and each weight byte is read once per call.
#pragma once

#include <gemma4/abi.hpp>
#include <gemma4/kernels/cpu.hpp>
#include <gemma4/kernels/dense.hpp>
#include <gemma4/kernels/linear_bf16.hpp>
#include <gemma4/kernels/linear_ggml.hpp>
#include <gemma4/kernels/linear_quant.hpp>
#include <gemma4/kernels/rows.hpp>
#include <gemma4/kernels/simd.hpp>
#include <gemma4/kernels/thread_pool.hpp>
#include <gemma4/tensor/weight_view.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

namespace detail {

/// Row `r` of a [rows, cols] weight converted to T (cols elements).
template <class T>
inline void load_row(const WeightView& w, std::int64_t r, T* out) {
    const std::int64_t cols = w.cols();
    const std::byte* base = w.data;
    switch (w.dtype) {
        case DType::BF16: {
            const auto* src = reinterpret_cast<const std::uint16_t*>(base) + r * cols;
            for (std::int64_t i = 0; i < cols; ++i) {
                const std::uint32_t bits = static_cast<std::uint32_t>(src[i]) << 16;
                float f;
                std::memcpy(&f, &bits, 4);
                out[i] = static_cast<T>(f);
            }
            return;
        }
        case DType::F16: {
            const auto* src = reinterpret_cast<const std::uint16_t*>(base) + r * cols;
            for (std::int64_t i = 0; i < cols; ++i) out[i] = static_cast<T>(f16_to_float(src[i]));
            return;
        }
        case DType::F32: {
            const auto* src = reinterpret_cast<const float*>(base) + r * cols;
            for (std::int64_t i = 0; i < cols; ++i) out[i] = static_cast<T>(src[i]);
            return;
        }
        case DType::F64: {
            const auto* src = reinterpret_cast<const double*>(base) + r * cols;
            for (std::int64_t i = 0; i < cols; ++i) out[i] = static_cast<T>(src[i]);
            return;
        }
        case DType::Ggml:
            ggml::dequantize_row(w.ggml, w.data + r * w.ggml_row_bytes(), cols, out, w.name);
            return;
        case DType::Q8:
        case DType::Q4: {
            const FileRow row = file_row(w, r);
            quant::dequantize_row(w.dtype, w.block, row.codes, row.scales, cols, out);
            return;
        }
        default:
            for (std::int64_t i = 0; i < cols; ++i) out[i] = w.at<T>(r * cols + i);
            return;
    }
}

/// Whether rows of `w` can be used in place as T (no conversion).
template <class T>
inline bool stored_as(const WeightView& w) {
    return (std::is_same_v<T, float> && w.dtype == DType::F32) || (std::is_same_v<T, double> && w.dtype == DType::F64);
}

/// y = x · wᵀ by Eigen (kernels/dense.hpp), the row blocks split over the pool: the double
/// path's product, and the bench's Eigen side. Weights stored as T are used in place, in blocks of
/// 64 rows; others are converted, a block at a time, in blocks small enough to stay in L2.
template <class T>
void linear_eigen(const WeightView& w, Rows<const T> x, Rows<T> y, std::int64_t tokens, ThreadPool& pool) {
    const std::int64_t N = w.rows(), K = w.cols();
    const std::int64_t block = stored_as<T>(w) ? 64 : std::max<std::int64_t>(8, std::min<std::int64_t>(64, (256 * 1024) / (K * sizeof(T) + 1)));
    pool.parallel_for(
        N,
        [&](std::int64_t n0, std::int64_t n1) {
            thread_local std::vector<T> rows;
            for (std::int64_t nb = n0; nb < n1; nb += block) {
                const std::int64_t nr = std::min(block, n1 - nb);
                const T* wb;
                if (stored_as<T>(w)) {
                    wb = reinterpret_cast<const T*>(w.data) + nb * K;
                } else {
                    if (static_cast<std::int64_t>(rows.size()) < nr * K) rows.resize(static_cast<std::size_t>(nr * K));
                    for (std::int64_t r = 0; r < nr; ++r) load_row(w, nb + r, rows.data() + r * K);
                    wb = rows.data();
                }
                dense_product(wb, K, nr, K, x, Rows<T>{y.data + nb, y.stride}, tokens);
            }
        },
        16);
}

}  // namespace detail

/// y[t, 0:N) = x[t, 0:K) · wᵀ for t < tokens. N = w.rows(), K = w.cols().
/// In float, bf16 and Q8/Q4 weights take the tiled kernels (Q8/Q4 quantize x to int8 per block,
/// see kernels/linear_quant.hpp), GGUF block types theirs (kernels/linear_ggml.hpp), and other dtypes one dot product per (token, row). The double
/// path converts weight rows to double exactly, a block of rows at a time, and multiplies with
/// Eigen (kernels/dense.hpp), so it stays a reference.
///
/// Why not Eigen in float too: every float path gives a token the same bits whatever else is in
/// its step (the batching engine's exactness rests on it), and Eigen's GEMM does not — its sums
/// are blocked by the product's size, and one token is a matrix-vector product.
template <class T>
void linear(const WeightView& w, Rows<const T> x, Rows<T> y, std::int64_t tokens, ThreadPool& pool) {
    const std::int64_t N = w.rows(), K = w.cols();
    if constexpr (std::is_same_v<T, float>) {
        if (w.dtype == DType::BF16) return detail::linear_bf16(w, x, y, tokens, pool);
        if (w.quantized()) return detail::linear_quant(w, x, y, tokens, pool);
        if (w.dtype == DType::Ggml) return detail::linear_ggml(w, x, y, tokens, pool);
        pool.parallel_for(
            N,
            [&](std::int64_t n0, std::int64_t n1) {
                thread_local std::vector<T> row;
                if (static_cast<std::int64_t>(row.size()) < K) row.resize(static_cast<std::size_t>(K));
                for (std::int64_t n = n0; n < n1; ++n) {
                    const T* wr;
                    if (detail::stored_as<T>(w)) {
                        wr = reinterpret_cast<const T*>(w.data) + n * K;
                    } else {
                        detail::load_row(w, n, row.data());
                        wr = row.data();
                    }
                    for (std::int64_t t = 0; t < tokens; ++t) y.row(t)[n] = detail::dot(wr, x.row(t), K);
                }
            },
            16);
    } else {
        detail::linear_eigen(w, x, y, tokens, pool);
    }
}

/// The kernels the process runs at its level (kernels/cpu.hpp), by name: for `gemma4 info`, the
/// bench's JSON and the tests.
struct KernelChoice {
    std::string quant;      ///< the Q8/Q4 linear
    std::string bf16;       ///< the bf16 linear
    std::string attention;  ///< the float score and value passes
};

inline KernelChoice active_kernels() {
    const Isa isa = active_isa();
    // The baseline level runs xsimd at the architecture the translation unit was built for.
    const std::string generic = std::string("xsimd-") + xsimd::default_arch::name();
    const std::string vector = isa >= Isa::Avx512 ? "avx512" : isa == Isa::Avx2 ? "avx2" : generic;
    return {std::string(detail::quant_kernel_name(detail::quant_kernel_for(isa, isa_report().features))), vector, vector};
}

/// One matrix of a shared-input linear call and where its outputs go.
template <class T>
struct LinearOut {
    const WeightView* w;
    Rows<T> y;
};

/// linear for several matrices over the same input (attn.qkv_proj, mlp.gate_up). Q8/Q4 matrices
/// of one dtype and block size share one quantization of x and one parallel region, GGUF block
/// matrices (any mix of types) one quantization of x (each output bit-identical to its own call);
/// other weights run one matrix after the other.
template <class T>
void linear(std::span<const LinearOut<T>> outs, Rows<const T> x, std::int64_t tokens, ThreadPool& pool) {
    if (outs.empty()) return;
    if constexpr (std::is_same_v<T, float>) {
        const WeightView& w0 = *outs.front().w;
        const bool shared = w0.quantized() && std::all_of(outs.begin(), outs.end(), [&](const LinearOut<T>& o) {
                                return o.w->dtype == w0.dtype && o.w->block == w0.block && o.w->cols() == w0.cols();
                            });
        if (shared && outs.size() <= detail::kMaxQuantTargets) {
            std::array<detail::QuantTarget, detail::kMaxQuantTargets> targets{};
            for (std::size_t i = 0; i < outs.size(); ++i) targets[i] = {outs[i].w, outs[i].y};
            return detail::linear_quant(std::span<const detail::QuantTarget>(targets.data(), outs.size()), x, tokens, pool);
        }
        const bool blocks = std::all_of(outs.begin(), outs.end(), [&](const LinearOut<T>& o) {
            return o.w->dtype == DType::Ggml && o.w->cols() == w0.cols();
        });
        if (blocks && outs.size() <= detail::kMaxQuantTargets) {
            std::array<detail::QuantTarget, detail::kMaxQuantTargets> targets{};
            for (std::size_t i = 0; i < outs.size(); ++i) targets[i] = {outs[i].w, outs[i].y};
            return detail::linear_ggml(std::span<const detail::QuantTarget>(targets.data(), outs.size()), x, tokens, pool);
        }
    }
    for (const LinearOut<T>& o : outs) linear<T>(*o.w, x, o.y, tokens, pool);
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
