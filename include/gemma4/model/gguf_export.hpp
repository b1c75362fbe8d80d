// A text model's weights as a GGUF file (llama.cpp architecture "gemma4"), the inverse of
// model/gguf_checkpoint.hpp: the `gemma4.*` keys of the config, the tensors under their GGUF
// names. Q8 matrices become Q8_0 and Q4 matrices Q4_0 with the same codes and f16 scales (the
// loader maps them back without requantizing, so the file computes exactly what the weights
// do); F32, F16 and BF16 tensors are written as they are. The data is converted and written a
// few rows at a time, so a file of the 12B is never held in memory.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/error.hpp>
#include <gemma4/io/gguf.hpp>
#include <gemma4/io/gguf_writer.hpp>
#include <gemma4/kernels/thread_pool.hpp>
#include <gemma4/model/gguf_checkpoint.hpp>
#include <gemma4/model/tensor_table.hpp>
#include <gemma4/tensor/weights.hpp>
#include <gemma4/tensor/ggml_blocks.hpp>
#include <gemma4/tensor/quant.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// The metadata gguf_config reads back as `c` (text model: layer kinds, heads, RoPE, window,
/// context, norms, soft-capping, special ids). InvalidArgument for what GGUF cannot express.
inline std::vector<GgufKv> gguf_model_metadata(const Gemma4Config& c) {
    if (c.rope_sliding.rope_type != RopeType::Default)
        throw InvalidArgument("gguf export: sliding layers' RoPE must be the default type (GGUF has no key for another)");
    const std::int64_t L = c.num_hidden_layers;
    std::vector<std::int32_t> kv_heads;
    std::vector<bool> sliding;
    for (std::int64_t i = 0; i < L; ++i) {
        sliding.push_back(c.layer_kind(i) == AttentionKind::Sliding);
        kv_heads.push_back(static_cast<std::int32_t>(sliding.back() ? c.num_key_value_heads : c.num_global_key_value_heads));
    }
    const auto u32 = [](std::int64_t v) { return static_cast<std::uint32_t>(v); };
    std::vector<GgufKv> kvs{
        gguf_string("general.architecture", "gemma4"),
        gguf_uint32("gemma4.block_count", u32(L)),
        gguf_uint32("gemma4.context_length", u32(c.max_position_embeddings)),
        gguf_uint32("gemma4.embedding_length", u32(c.hidden_size)),
        gguf_uint32("gemma4.feed_forward_length", u32(c.intermediate_size)),
        gguf_uint32("gemma4.attention.head_count", u32(c.num_attention_heads)),
        gguf_int32_array("gemma4.attention.head_count_kv", kv_heads),
        gguf_float32("gemma4.rope.freq_base", static_cast<float>(c.rope_full.rope_theta)),
        gguf_float32("gemma4.rope.freq_base_swa", static_cast<float>(c.rope_sliding.rope_theta)),
        gguf_float32("gemma4.attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps)),
        gguf_uint32("gemma4.attention.key_length", u32(c.global_head_dim)),
        gguf_uint32("gemma4.attention.value_length", u32(c.global_head_dim)),
        gguf_uint32("gemma4.attention.key_length_swa", u32(c.head_dim)),
        gguf_uint32("gemma4.attention.value_length_swa", u32(c.head_dim)),
        gguf_uint32("gemma4.attention.sliding_window", u32(c.sliding_window)),
        gguf_bool_array("gemma4.attention.sliding_window_pattern", sliding),
        gguf_uint32("tokenizer.ggml.bos_token_id", u32(c.tokens.bos)),
        gguf_uint32("tokenizer.ggml.padding_token_id", u32(c.tokens.pad)),
    };
    if (c.final_logit_softcapping > 0)
        kvs.push_back(gguf_float32("gemma4.final_logit_softcapping", static_cast<float>(c.final_logit_softcapping)));
    if (c.tokens.eos_count > 0) kvs.push_back(gguf_uint32("tokenizer.ggml.eos_token_id", u32(c.tokens.eos[0])));
    if (c.tokens.eos_count > 1) kvs.push_back(gguf_uint32("tokenizer.ggml.eot_token_id", u32(c.tokens.eos[1])));
    return kvs;
}

namespace detail {

inline GgmlType gguf_type_of(const WeightView& v) {
    switch (v.dtype) {
        case DType::Q8: return GgmlType::Q8_0;
        case DType::Q4: return GgmlType::Q4_0;
        case DType::F32: return GgmlType::F32;
        case DType::F16: return GgmlType::F16;
        case DType::BF16: return GgmlType::BF16;
        case DType::Ggml: return v.ggml;  // its blocks as stored
        default: throw InvalidArgument("gguf export: tensor '" + v.name + "' is " + std::string(dtype_name(v.dtype)) + ", which GGUF export does not write");
    }
}

}  // namespace detail

/// Writes the text model `weights` of config `c` to `path` (replacing it) and returns the
/// file's size in bytes. Quantized matrices need a multiple of 32 columns. `n_threads` convert
/// rows in parallel (0: all cores).
inline std::uint64_t write_gguf_model(const std::filesystem::path& path, const Gemma4Config& c, const ModelWeights& weights,
                                      unsigned n_threads = 0) {
    ModelWeights views = weights;  // tensor_table binds its entries to these (cheap) views
    const std::vector<TensorSpec> table = tensor_table(c, "model.", views);
    std::vector<GgufTensorHeader> headers;
    std::vector<const WeightView*> sources;  // null: rope_freqs.weight

    // The full layers' partial rotation: 1.0 for rotated pairs, the sentinel for the rest.
    std::string rope_freqs;
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
        const LayerGeometry g = c.layer(i);
        if (g.kind != AttentionKind::Full || 2 * g.rope_pairs == g.head_dim) continue;
        for (std::int64_t k = 0; k < g.head_dim / 2; ++k) {
            const float f = k < g.rope_pairs ? 1.0f : kGgufRopeFreqSentinel;
            rope_freqs.append(reinterpret_cast<const char*>(&f), 4);
        }
        headers.push_back({"rope_freqs.weight", {static_cast<std::uint64_t>(g.head_dim / 2)}, GgmlType::F32, rope_freqs.size()});
        sources.push_back(nullptr);
        break;
    }
    for (const TensorSpec& spec : table) {
        if (spec.group != TensorGroup::Text) continue;
        const WeightView& v = *spec.field;
        const std::string name = detail::gguf_tensor_name(spec.name());
        if (!v) throw InvalidArgument("gguf export: tensor '" + spec.name() + "' is missing");
        const GgmlType type = detail::gguf_type_of(v);
        std::vector<std::uint64_t> ne(spec.shape.rbegin(), spec.shape.rend());
        std::uint64_t bytes = v.size_bytes;
        if (v.quantized()) {
            if (v.cols() % ggml::kBlock32)
                throw InvalidArgument("gguf export: tensor '" + spec.name() + "' has " + std::to_string(v.cols()) +
                                      " columns, not a multiple of 32 (a Q8_0 / Q4_0 block)");
            bytes = static_cast<std::uint64_t>(v.rows() * ggml::bytes_of(type, v.cols()));
        }
        headers.push_back({name, std::move(ne), type, bytes});
        sources.push_back(&v);
    }

    ThreadPool pool(n_threads);
    std::vector<std::byte> chunk;
    return write_gguf_streaming(path, gguf_model_metadata(c), headers, [&](std::size_t i, const auto& write) {
        const WeightView* v = sources[i];
        if (!v) return write(rope_freqs.data(), rope_freqs.size());
        if (!v->quantized()) return write(v->data, v->size_bytes);
        const std::int64_t rows = v->rows(), cols = v->cols();
        const std::int64_t out_row = ggml::bytes_of(headers[i].type, cols), rb = quant::row_bytes(v->dtype, cols),
                           nb = quant::blocks_per_row(cols, v->block);
        constexpr std::int64_t kRows = 1024;  // rows converted per write
        chunk.resize(static_cast<std::size_t>(std::min(rows, kRows) * out_row));
        for (std::int64_t r0 = 0; r0 < rows; r0 += kRows) {
            const std::int64_t n = std::min(kRows, rows - r0);
            pool.parallel_for(n, [&](std::int64_t a, std::int64_t b) {
                std::vector<std::byte> codes(static_cast<std::size_t>(rb));
                std::vector<std::uint16_t> scales(static_cast<std::size_t>(nb));
                for (std::int64_t r = a; r < b; ++r) {
                    v->quant_row(r0 + r, codes.data(), scales.data());
                    std::byte* dst = chunk.data() + r * out_row;
                    if (v->dtype == DType::Q8) ggml::q8_row_to_q8_0(codes.data(), scales.data(), v->block, cols, dst);
                    else ggml::q4_row_to_q4_0(codes.data(), scales.data(), v->block, cols, dst);
                }
            }, 16);
            write(chunk.data(), static_cast<std::size_t>(n * out_row));
        }
    });
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
