// Random weights generated directly in memory, without a checkpoint file: the text decoder in a
// weight format, the embedders in bf16, at the 12B's shapes for benchmarks (gemma4 bench
// --random-weights, --image-tokens).
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/detail/random.hpp>
#include <gemma4/kernels/thread_pool.hpp>
#include <gemma4/model/owned_buffers.hpp>
#include <gemma4/model/quantize.hpp>
#include <gemma4/model/tensor_table.hpp>
#include <gemma4/tensor/quant.hpp>
#include <gemma4/tensor/weights.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// Weights of `c` with random values: the text decoder's generated directly in `format` (BF16,
/// Int8 or Int4, in blocks of `block` elements, 0: quant::kDefaultBlock), the image and audio
/// embedders' (when `c` has them) in bf16; matrices ~ uniform with unit-variance outputs, norms
/// ≈ 1. Fast (a cheap generator per thread), for benchmarks at full size without a file.
inline ModelWeights random_weights(const Gemma4Config& c, WeightFormat format, std::uint64_t seed = 1, unsigned n_threads = 0,
                                   std::int64_t block = 0) {
    if (format == WeightFormat::AsStored) format = WeightFormat::BF16;
    const DType target = format_dtype(format);
    const std::int64_t qblock = is_quantized(target) ? quant_block_for(block) : 0;
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
    auto matrix = [&](std::string name, std::int64_t rows, std::int64_t cols, double amax, DType dtype) {
        WeightView v{std::move(name), dtype, {rows, cols}, nullptr, 0};
        v.origin = DType::BF16;
        const std::uint64_t matrix_seed = detail::splitmix64(salt);
        if (dtype == DType::BF16) {
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
            v.block = qblock;
            const std::int64_t np = quant::panel_count(rows), pb = quant::panel_bytes(dtype, qblock, cols), nb = quant::blocks_per_row(cols, qblock);
            v.size_bytes = static_cast<std::size_t>(np * pb);
            std::byte* p = owned->allocate(v.size_bytes);
            fill_random(p, v.size_bytes, matrix_seed);
            const std::uint16_t scale = quant::block_scale(static_cast<float>(amax), dtype);
            pool.parallel_for(np, [&](std::int64_t p0, std::int64_t p1) {
                for (std::int64_t q = p0; q < p1; ++q)
                    for (std::int64_t b = 0; b < nb; ++b)
                        for (std::int64_t r = 0; r < quant::kPanelRows; ++r) {
                            const std::uint16_t s = q * quant::kPanelRows + r < rows ? scale : std::uint16_t{0};
                            std::memcpy(p + q * pb + quant::panel_scale_offset(dtype, qblock, b, r), &s, 2);
                        }
            }, 64);
            v.data = p;
        }
        return v;
    };
    // every tensor of the checkpoint table: matrices ~ U(±√3/√fan_in) (unit-variance outputs;
    // the embedding and the image position table 0.05·√3, as random checkpoints), every vector 1.
    // The text decoder's matrices are in `format`; the embedders' (when c has them) stay bf16,
    // as a checkpoint stores them: the load-time formats do not apply to them.
    for (const TensorSpec& spec : tensor_table(c, "model.language_model.", w)) {
        const DType dtype = spec.group == TensorGroup::Text ? target : DType::BF16;
        if (spec.shape.size() == 3) {  // pos_embedding [table, 2, E]
            *spec.field = matrix(spec.name(), spec.shape[0] * spec.shape[1], spec.shape[2], 0.05 * std::sqrt(3.0), DType::BF16);
            spec.field->shape = spec.shape;
        } else if (spec.shape.size() == 2) {
            const double amax = spec.field == &w.embed_tokens ? 0.05 * std::sqrt(3.0) : std::sqrt(3.0 / static_cast<double>(spec.shape[1]));
            *spec.field = matrix(spec.name(), spec.shape[0], spec.shape[1], amax, dtype);
        } else {
            *spec.field = vector_f32(spec.name(), spec.shape[0], 1.0f);
        }
    }
    w.storage = owned;
    return w;
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
