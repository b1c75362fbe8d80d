// Weight formats at load time: the big matrices (q/k/v/o, gate/up/down, the tied embedding)
// re-encoded as bf16, Q8 or Q4 (tensor/quant.hpp); norms and scalars stay as stored. Also random
// weights generated directly in a format (benchmarks), without a checkpoint file.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/detail/random.hpp>
#include <gemma4/error.hpp>
#include <gemma4/io/config_json.hpp>
#include <gemma4/io/safetensors_writer.hpp>
#include <gemma4/kernels/thread_pool.hpp>
#include <gemma4/model/checkpoint.hpp>
#include <gemma4/model/owned_buffers.hpp>
#include <gemma4/model/tensor_table.hpp>
#include <gemma4/model/weights.hpp>
#include <gemma4/tensor/quant.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <new>
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

/// A quantized matrix in the panel layout, in buffers of `owned`: `out` has dtype and shape set;
/// it gets data and scales. row(r, codes, scales) supplies row r in the file layout. Panels are
/// filled in parallel.
template <class RowFn>
inline void make_panels(WeightView& out, OwnedBuffers& owned, ThreadPool& pool, RowFn&& row) {
    const std::int64_t rows = out.rows(), cols = out.cols(), np = quant::panel_count(rows);
    const std::int64_t pb = quant::panel_bytes(out.dtype, cols), ps = quant::panel_scale_count(cols);
    out.layout = WeightView::Layout::Panels;
    out.size_bytes = static_cast<std::size_t>(np * pb);
    std::byte* data = owned.allocate(out.size_bytes);
    auto* scales = reinterpret_cast<std::uint16_t*>(owned.allocate(static_cast<std::size_t>(np * ps * 2)));
    out.data = data;
    out.scales = reinterpret_cast<const std::byte*>(scales);
    pool.parallel_for(np, [&](std::int64_t p0, std::int64_t p1) {
        std::vector<std::byte> codes(static_cast<std::size_t>(quant::row_bytes(out.dtype, cols)));
        std::vector<std::uint16_t> sc(static_cast<std::size_t>(quant::blocks_per_row(cols)));
        for (std::int64_t p = p0; p < p1; ++p) {
            quant::clear_panel(out.dtype, cols, data + p * pb, scales + p * ps);
            for (std::int64_t r = p * quant::kPanelRows; r < std::min(rows, (p + 1) * quant::kPanelRows); ++r) {
                row(r, codes.data(), sc.data());
                quant::row_to_panel(out.dtype, codes.data(), sc.data(), cols, r % quant::kPanelRows, data + p * pb, scales + p * ps);
            }
        }
    }, 4);
}


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

/// Re-encodes the matrices `mats` in `format` (no-op for AsStored or matrices already in it);
/// `storage` (the owner of the views) is replaced by one that also keeps the new buffers. Rows
/// are converted in parallel; the double path can still read the result (it dequantizes rows
/// exactly).
inline void quantize_matrices(const std::vector<WeightView*>& mats, std::shared_ptr<const void>& storage, WeightFormat format,
                              const QuantizeProgress& progress, ThreadPool& pool) {
    if (format == WeightFormat::AsStored) return;
    const DType target = format_dtype(format);
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
                        for (std::int64_t c = 0; c < cols; ++c) row[static_cast<std::size_t>(c)] = v.at<float>(r * cols + c);
                        for (std::int64_t c = 0; c < cols; ++c) detail::set_bf16(data + 2 * (r * cols + c), row[static_cast<std::size_t>(c)]);
                    }
                }, 64);
            } else {
                detail::make_panels(out, *owned, pool, [&](std::int64_t r, std::byte* codes, std::uint16_t* scales) {
                    thread_local std::vector<float> row;
                    row.resize(static_cast<std::size_t>(cols));
                    if (v.dtype == DType::BF16) {
                        const auto* src = reinterpret_cast<const std::uint16_t*>(v.data) + r * cols;
                        for (std::int64_t c = 0; c < cols; ++c) row[static_cast<std::size_t>(c)] = bf16_to_float(src[c]);
                    } else {
                        for (std::int64_t c = 0; c < cols; ++c) row[static_cast<std::size_t>(c)] = v.at<float>(r * cols + c);
                    }
                    quant::quantize_row(target, row.data(), cols, codes, scales);
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
                              const QuantizeProgress& progress = {}, unsigned n_threads = 0) {
    if (format == WeightFormat::AsStored) return;
    ThreadPool pool(n_threads);
    quantize_matrices(mats, storage, format, progress, pool);
}

/// Re-encodes the big matrices of `w` in `format` (quantize_matrices) on `pool`'s threads.
inline void quantize_weights(ModelWeights& w, WeightFormat format, const QuantizeProgress& progress, ThreadPool& pool) {
    quantize_matrices(big_matrices(w), w.storage, format, progress, pool);
}

/// Re-encodes the big matrices of `w` in `format` (quantize_matrices).
inline void quantize_weights(ModelWeights& w, WeightFormat format, const QuantizeProgress& progress = {}, unsigned n_threads = 0) {
    quantize_matrices(big_matrices(w), w.storage, format, progress, n_threads);
}

/// Weights of `c`'s text decoder with random values, generated directly in `format` (BF16,
/// Int8 or Int4): matrices ~ uniform with unit-variance outputs, norms ≈ 1. Fast (a cheap
/// generator per thread), for benchmarks at full size without a file.
inline ModelWeights random_weights(const Gemma4Config& c, WeightFormat format, std::uint64_t seed = 1, unsigned n_threads = 0) {
    if (format == WeightFormat::AsStored) format = WeightFormat::BF16;
    const DType target = format_dtype(format);
    ModelWeights w;
    auto owned = std::make_shared<detail::OwnedBuffers>();
    ThreadPool pool(n_threads);
    auto fill_random = [&](std::byte* p, std::size_t n, std::uint64_t s) {
        pool.parallel_for(static_cast<std::int64_t>((n + 4095) / 4096), [&](std::int64_t p0, std::int64_t p1) {
            // a generator per 4 KiB chunk, seeded by the chunk's index: the bytes do not depend on
            // how chunks fall to threads
            for (std::int64_t chunk = p0; chunk < p1; ++chunk) {
                detail::SplitMix64 rng{s ^ (0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(chunk + 1))};
                const std::size_t b0 = static_cast<std::size_t>(chunk) * 4096, b1 = std::min(n, b0 + 4096);
                for (std::size_t i = b0; i < b1; i += 8) {
                    const std::uint64_t x = rng.next();
                    std::memcpy(p + i, &x, std::min<std::size_t>(8, b1 - i));
                }
            }
        });
    };
    auto vector_f32 = [&](std::string name, std::int64_t n, float value) {
        WeightView v{std::move(name), DType::F32, {n}, nullptr, static_cast<std::size_t>(4 * n)};
        std::byte* p = owned->allocate(v.size_bytes);
        for (std::int64_t i = 0; i < n; ++i) std::memcpy(p + 4 * i, &value, 4);
        v.data = p;
        return v;
    };
    std::uint64_t salt = seed;
    auto matrix = [&](std::string name, std::int64_t rows, std::int64_t cols, double amax) {
        WeightView v{std::move(name), target, {rows, cols}, nullptr, 0};
        v.origin = DType::BF16;
        const std::uint64_t matrix_seed = detail::splitmix64(salt);
        if (target == DType::BF16) {
            v.size_bytes = static_cast<std::size_t>(rows * cols * 2);
            std::byte* p = owned->allocate(v.size_bytes);
            fill_random(p, v.size_bytes, matrix_seed);
            // keep random sign and mantissa; the exponent of amax/2, so |w| ∈ [amax/2, amax)
            const std::uint16_t exp = static_cast<std::uint16_t>(float_to_bf16(static_cast<float>(amax / 2)) & 0x7f80u);
            pool.parallel_for(rows, [&](std::int64_t r0, std::int64_t r1) {
                auto* h = reinterpret_cast<std::uint16_t*>(p);
                for (std::int64_t i = r0 * cols; i < r1 * cols; ++i) h[i] = static_cast<std::uint16_t>((h[i] & 0x807fu) | exp);
            }, 64);
            v.data = p;
        } else {
            // random codes; every row's scales the same, padding rows' zero
            const std::int64_t np = quant::panel_count(rows), pb = quant::panel_bytes(target, cols), ps = quant::panel_scale_count(cols);
            v.size_bytes = static_cast<std::size_t>(np * pb);
            std::byte* p = owned->allocate(v.size_bytes);
            fill_random(p, v.size_bytes, matrix_seed);
            auto* s = reinterpret_cast<std::uint16_t*>(owned->allocate(static_cast<std::size_t>(np * ps * 2)));
            const std::uint16_t scale = quant::block_scale(static_cast<float>(amax), target);
            pool.parallel_for(np, [&](std::int64_t p0, std::int64_t p1) {
                for (std::int64_t i = p0 * ps; i < p1 * ps; ++i)
                    s[i] = (i / ps) * quant::kPanelRows + i % quant::kPanelRows < rows ? scale : std::uint16_t{0};
            }, 64);
            v.data = p;
            v.scales = reinterpret_cast<const std::byte*>(s);
        }
        return v;
    };
    // the text decoder's tensors of the checkpoint table: matrices ~ U(±√3/√fan_in) (unit-variance
    // outputs; the embedding 0.05·√3, as random checkpoints), every vector 1
    for (const TensorSpec& spec : tensor_table(c, "model.language_model.", w)) {
        if (spec.group != TensorGroup::Text) continue;
        if (spec.shape.size() == 2) {
            const double amax = spec.field == &w.embed_tokens ? 0.05 * std::sqrt(3.0) : std::sqrt(3.0 / static_cast<double>(spec.shape[1]));
            *spec.field = matrix(spec.name(), spec.shape[0], spec.shape[1], amax);
        } else {
            *spec.field = vector_f32(spec.name(), spec.shape[0], 1.0f);
        }
    }
    w.storage = owned;
    return w;
}

/// load_checkpoint, then the big matrices re-encoded in `options.format` (a checkpoint already
/// in that format is only mapped), both on `options.pool` or on one pool of `options.n_threads`.
inline Checkpoint load_checkpoint_as(const std::filesystem::path& dir, const LoadOptions& options = {}) {
    const detail::LoadPool pool(options);  // one pool for the whole load: a GGUF file's conversion and the re-encoding
    LoadOptions on_pool = options;
    on_pool.pool = &*pool;
    Checkpoint ck = load_checkpoint(dir, on_pool);
    quantize_weights(ck.weights, options.format, options.progress, *pool);
    return ck;
}

/// Writes the tensors of `table` (the views its fields point to) as one .safetensors file: plain
/// tensors as they are in memory, quantized matrices as "<name>" (I8 codes for Q8, U8 packed
/// nibbles for Q4) plus "<name>_scale" (F16), with `__metadata__` recording the format
/// (docs/checkpoint-formats.md), so that loading the file maps it and converts nothing.
inline void save_tensors(const std::vector<TensorSpec>& table, const std::filesystem::path& file) {
    std::vector<TensorRef> refs;
    std::deque<std::vector<std::byte>> row_layout;  // stable addresses for refs
    std::map<std::string, std::string> meta{{"format", "pt"}};
    std::optional<DType> qtype;
    for (const TensorSpec& spec : table) {
        const WeightView& v = *spec.field;
        if (!v) continue;
        if (v.quantized()) {
            if (qtype && *qtype != v.dtype) throw InvalidArgument("save_tensors: matrices of mixed quantized formats");
            qtype = v.dtype;
            meta["gemma4.origin_dtype"] = std::string(dtype_name(v.origin));
            // files hold the rows one after another
            const std::int64_t rows = v.rows(), cols = v.cols(), rb = quant::row_bytes(v.dtype, cols), nb = quant::blocks_per_row(cols);
            auto& codes = row_layout.emplace_back(static_cast<std::size_t>(rows * rb));
            auto& scales = row_layout.emplace_back(static_cast<std::size_t>(rows * nb * 2));
            for (std::int64_t r = 0; r < rows; ++r)
                v.quant_row(r, codes.data() + r * rb, reinterpret_cast<std::uint16_t*>(scales.data()) + r * nb);
            refs.push_back({spec.name(), v.dtype == DType::Q8 ? DType::I8 : DType::U8, {rows, rb}, codes.data(), codes.size()});
            refs.push_back({spec.name() + "_scale", DType::F16, {rows, nb}, scales.data(), scales.size()});

        } else {
            refs.push_back({spec.name(), v.dtype, v.shape, v.data, v.size_bytes});
        }
    }
    if (qtype) {
        meta["gemma4.weight_format"] = *qtype == DType::Q8 ? "int8" : "int4";
        meta["gemma4.block_size"] = std::to_string(quant::kBlock);
        meta["gemma4.row_align"] = std::to_string(quant::kRowAlign);
    }
    write_safetensors(file, refs, meta);
}

namespace detail {

/// Creates `dir` and its config.json: a copy of `source`'s when there is one (its fields as
/// published), else `make_json()`.
template <class MakeJson>
void write_config_file(const std::filesystem::path& dir, const std::filesystem::path& source, MakeJson&& make_json) {
    std::filesystem::create_directories(dir);
    const auto src_config = source.empty() ? std::filesystem::path() : source / "config.json";
    if (!src_config.empty() && std::filesystem::exists(src_config)) {
        if (std::filesystem::absolute(src_config) != std::filesystem::absolute(dir / "config.json"))
            std::filesystem::copy_file(src_config, dir / "config.json", std::filesystem::copy_options::overwrite_existing);
    } else {
        std::ofstream(dir / "config.json") << make_json().dump(2) << "\n";
    }
}

}  // namespace detail

/// Writes `ck` as a checkpoint directory: config.json (copied from the source directory when
/// there is one) and one model.safetensors holding every tensor as it is in memory
/// (save_tensors).
inline void save_checkpoint(const Checkpoint& ck, const std::filesystem::path& dir) {
    detail::write_config_file(dir, ck.directory, [&] { return config_to_json(ck.config); });
    ModelWeights w = ck.weights;  // the table binds pointers into a copy of the views
    const auto table = tensor_table(ck.config, ck.text_prefix.empty() ? "model.language_model." : ck.text_prefix, w);
    save_tensors(table, dir / "model.safetensors");
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
