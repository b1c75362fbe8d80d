// Weight formats at load time: the big matrices (q/k/v/o, gate/up/down, the tied embedding)
// re-encoded as bf16, Q8 or Q4 (tensor/quant.hpp), or re-laid as the kernels' panels; norms and
// scalars stay as stored. (Writing checkpoints: model/save_checkpoint.hpp; random weights for
// benchmarks: model/random_weights.hpp.)
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/error.hpp>
#include <gemma4/kernels/linear.hpp>
#include <gemma4/kernels/thread_pool.hpp>
#include <gemma4/model/checkpoint.hpp>
#include <gemma4/model/owned_buffers.hpp>
#include <gemma4/model/panels.hpp>
#include <gemma4/model/tensor_table.hpp>
#include <gemma4/tensor/weights.hpp>
#include <gemma4/tensor/quant.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// The storage dtype a format gives the big matrices (AsStored: none).
constexpr DType format_dtype(WeightFormat f) {
    switch (f) {
        case WeightFormat::Int8: return DType::Q8;
        case WeightFormat::Int4: return DType::Q4;
        default: return DType::BF16;
    }
}

namespace detail {

inline void set_bf16(std::byte* p, float v) {
    const std::uint16_t h = float_to_bf16(v);
    std::memcpy(p, &h, 2);
}

}  // namespace detail

/// The matrices a weight format applies to, in checkpoint order.
inline std::vector<WeightView*> big_matrices(ModelWeights& w) {
    std::vector<WeightView*> m{&w.embed_tokens};
    for (LayerWeights& l : w.layers)
        for (const LayerTensor& t : kLayerTensors)
            if (t.matrix() && l.*t.field) m.push_back(&(l.*t.field));
    return m;
}

/// Bytes a forward step reads from the big matrices (codes and scales), embedding included
/// once as the LM head.
inline std::size_t matrix_bytes(ModelWeights& w) {
    std::size_t n = 0;
    for (const WeightView* v : big_matrices(w)) n += v->size_bytes + v->scale_bytes();
    return n;
}

/// The big matrices as loaded, one entry per kind of storage, most bytes first: "Q4_K as stored:
/// 196 matrices, 1.07 GB; Q6_K as stored: 43 matrices, 0.55 GB" (a GGUF block type read in place),
/// "Q8: 337 matrices, 2.52 GB" (our int8 / int4, panels or rows), "BF16: …", "F32: …".
inline std::string matrix_summary(ModelWeights& w) {
    struct Kind {
        std::string name;
        std::int64_t count = 0;
        std::size_t bytes = 0;
    };
    std::vector<Kind> kinds;
    for (const WeightView* v : big_matrices(w)) {
        const std::string name = v->dtype == DType::Ggml ? std::string(ggml_type_name(v->ggml)) + " as stored" : std::string(dtype_name(v->dtype));
        auto it = std::find_if(kinds.begin(), kinds.end(), [&](const Kind& k) { return k.name == name; });
        if (it == kinds.end()) it = kinds.insert(kinds.end(), Kind{name});
        ++it->count;
        it->bytes += v->size_bytes + v->scale_bytes();
    }
    std::stable_sort(kinds.begin(), kinds.end(), [](const Kind& a, const Kind& b) { return a.bytes > b.bytes; });
    std::string out;
    for (const Kind& k : kinds) {
        char gb[32];
        std::snprintf(gb, sizeof gb, "%.2f", static_cast<double>(k.bytes) / 1e9);
        out += (out.empty() ? "" : "; ") + k.name + ": " + std::to_string(k.count) + (k.count == 1 ? " matrix, " : " matrices, ") + gb + " GB";
    }
    return out;
}

/// Quantized matrices among `mats` held as rows (a quantized checkpoint as mapped) re-laid as
/// panels, the layout the kernels read (tensor/quant.hpp), on `pool`'s threads; `storage` (the
/// owner of the views) is replaced by one that also keeps the new panels.
inline void matrices_to_panels(const std::vector<WeightView*>& mats, std::shared_ptr<const void>& storage, ThreadPool& pool) {
    std::shared_ptr<detail::OwnedBuffers> owned;
    for (WeightView* v : mats) {
        if (!v->quantized() || v->layout == WeightView::Layout::Panels) continue;
        if (!owned) {
            owned = std::make_shared<detail::OwnedBuffers>();
            owned->parent = storage;
        }
        const WeightView src = *v;
        detail::make_panels(*v, *owned, pool, [&](std::int64_t r, std::byte* codes, std::uint16_t* scales) { src.quant_row(r, codes, scales); });
    }
    if (owned) storage = owned;
}

/// The big matrices of a model as panels (matrices_to_panels).
inline void to_panels(ModelWeights& w, ThreadPool& pool) { matrices_to_panels(big_matrices(w), w.storage, pool); }

/// Re-encodes the matrices `mats` in `format` (no-op for AsStored or matrices already in it;
/// Int8/Int4 in blocks of `block` elements, 0: quant::kDefaultBlock); `storage` (the owner of the
/// views) is replaced by one that also keeps the new buffers. Rows are converted in parallel; the
/// double path can still read the result (it dequantizes rows exactly).
inline void quantize_matrices(const std::vector<WeightView*>& mats, std::shared_ptr<const void>& storage, WeightFormat format,
                              const QuantizeProgress& progress, ThreadPool& pool, std::int64_t block = 0) {
    if (format == WeightFormat::AsStored) return;
    const DType target = format_dtype(format);
    const std::int64_t target_block = is_quantized(target) ? quant_block_for(block) : 0;
    auto owned = std::make_shared<detail::OwnedBuffers>();
    owned->parent = storage;
    for (std::size_t i = 0; i < mats.size(); ++i) {
        WeightView& v = *mats[i];
        if (v.dtype != target) {
            if (v.shape.size() != 2) throw ShapeError("quantize_weights: '" + v.name + "' is not a matrix");
            const std::int64_t rows = v.rows(), cols = v.cols();
            WeightView out = v;
            out.dtype = target;
            out.origin = v.value_dtype();
            if (target == DType::BF16) {
                out.size_bytes = static_cast<std::size_t>(rows * cols * 2);
                std::byte* data = owned->allocate(out.size_bytes);
                out.data = data;
                out.scales = nullptr;
                pool.parallel_for(rows, [&](std::int64_t r0, std::int64_t r1) {
                    std::vector<float> row(static_cast<std::size_t>(cols));
                    for (std::int64_t r = r0; r < r1; ++r) {
                        detail::load_row(v, r, row.data());
                        for (std::int64_t c = 0; c < cols; ++c) detail::set_bf16(data + 2 * (r * cols + c), row[static_cast<std::size_t>(c)]);
                    }
                }, 64);
            } else {
                out.block = target_block;
                detail::make_panels(out, *owned, pool, [&](std::int64_t r, std::byte* codes, std::uint16_t* scales) {
                    thread_local std::vector<float> row;
                    row.resize(static_cast<std::size_t>(cols));
                    detail::load_row(v, r, row.data());
                    quant::quantize_row(target, target_block, row.data(), cols, codes, scales);
                });
            }
            v = std::move(out);
        }
        if (progress) progress(i + 1, mats.size(), v.name);
    }
    storage = owned;
}

/// quantize_matrices on a pool of `n_threads` threads (0: hardware concurrency) made for the call.
inline void quantize_matrices(const std::vector<WeightView*>& mats, std::shared_ptr<const void>& storage, WeightFormat format,
                              const QuantizeProgress& progress = {}, unsigned n_threads = 0, std::int64_t block = 0) {
    if (format == WeightFormat::AsStored) return;
    ThreadPool pool(n_threads);
    quantize_matrices(mats, storage, format, progress, pool, block);
}

/// Re-encodes the big matrices of `w` in `format` (quantize_matrices) on `pool`'s threads.
inline void quantize_weights(ModelWeights& w, WeightFormat format, const QuantizeProgress& progress, ThreadPool& pool, std::int64_t block = 0) {
    quantize_matrices(big_matrices(w), w.storage, format, progress, pool, block);
}

/// Re-encodes the big matrices of `w` in `format` (quantize_matrices).
inline void quantize_weights(ModelWeights& w, WeightFormat format, const QuantizeProgress& progress = {}, unsigned n_threads = 0,
                             std::int64_t block = 0) {
    quantize_matrices(big_matrices(w), w.storage, format, progress, n_threads, block);
}

/// load_checkpoint, then the big matrices re-encoded in `options.format` (a checkpoint already
/// in that format is only mapped), both on `options.pool` or on one pool of `options.n_threads`.
inline Checkpoint load_checkpoint_as(const std::filesystem::path& dir, const LoadOptions& options = {}) {
    quant_block_for(options.block);  // a bad block size is an error whatever the format
    const detail::LoadPool pool(options);  // one pool for the whole load: a GGUF file's conversion and the re-encoding
    LoadOptions on_pool = options;
    on_pool.pool = &*pool;
    Checkpoint ck = load_checkpoint(dir, on_pool);
    quantize_weights(ck.weights, options.format, options.progress, *pool, options.block);
    return ck;
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
