// Quantized matrices laid out as panels of 16 rows (tensor/quant.hpp), the layout the kernels
// read, built in a buffer of the model's storage from a function that supplies each row in the
// file layout: used by the loaders (a GGUF Q8_0 / Q4_0 matrix goes from the mapped file straight
// into panels) and by the re-encodings of model/quantize.hpp.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/kernels/thread_pool.hpp>
#include <gemma4/model/owned_buffers.hpp>
#include <gemma4/tensor/quant.hpp>
#include <gemma4/tensor/weight_view.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {
namespace detail {

/// A quantized matrix in the panel layout, in a buffer of `owned`: `out` has dtype, block and
/// shape set; it gets data (codes and scales, tensor/quant.hpp). row(r, codes, scales) supplies row r
/// in the file layout. Panels are filled in parallel.
template <class RowFn>
inline void make_panels(WeightView& out, OwnedBuffers& owned, ThreadPool& pool, RowFn&& row) {
    const std::int64_t rows = out.rows(), cols = out.cols(), np = quant::panel_count(rows);
    const std::int64_t pb = quant::panel_bytes(out.dtype, out.block, cols);
    out.layout = WeightView::Layout::Panels;
    out.size_bytes = static_cast<std::size_t>(np * pb);
    std::byte* data = owned.allocate(out.size_bytes);
    out.data = data;
    out.scales = nullptr;
    pool.parallel_for(np, [&](std::int64_t p0, std::int64_t p1) {
        std::vector<std::byte> codes(static_cast<std::size_t>(quant::row_bytes(out.dtype, cols)));
        std::vector<std::uint16_t> sc(static_cast<std::size_t>(quant::blocks_per_row(cols, out.block)));
        for (std::int64_t p = p0; p < p1; ++p) {
            quant::clear_panel(out.dtype, out.block, cols, data + p * pb);
            for (std::int64_t r = p * quant::kPanelRows; r < std::min(rows, (p + 1) * quant::kPanelRows); ++r) {
                row(r, codes.data(), sc.data());
                quant::row_to_panel(out.dtype, out.block, codes.data(), sc.data(), cols, r % quant::kPanelRows, data + p * pb);
            }
        }
    }, 4);
}

}  // namespace detail
}  // namespace GEMMA4_ABI
}  // namespace gemma4
