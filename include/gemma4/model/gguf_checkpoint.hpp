// Gemma 4 from a GGUF file (llama.cpp architecture "gemma4"): the config from the `gemma4.*`
// keys and the tensor shapes, the tensors mapped to our table (docs/checkpoint-formats.md) and
// shape-checked. load_checkpoint dispatches here when given a file rather than a directory.
//
// Per ggml type: F32 / F16 / BF16 are used in place (zero-copy views of the mapping); Q8_0 and
// Q4_0 matrices are repacked losslessly into our Q8 / Q4 rows (same codes, same f16 scales);
// matrices of every other block type (Q4_K, Q6_K, Q5_K, IQ4_XS, Q4_1, …) are used in place too,
// as stored (DType::Ggml), their scales checked once; a quantized vector is dequantized exactly
// to F32. When the load options ask for a weight format, matrices are converted row by row
// straight into it.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/error.hpp>
#include <gemma4/io/gguf.hpp>
#include <gemma4/kernels/thread_pool.hpp>
#include <gemma4/model/checkpoint.hpp>
#include <gemma4/model/owned_buffers.hpp>
#include <gemma4/model/panels.hpp>
#include <gemma4/model/tensor_table.hpp>
#include <gemma4/tensor/weights.hpp>
#include <gemma4/tensor/ggml_blocks.hpp>
#include <gemma4/tensor/quant.hpp>

#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

namespace detail {

/// A FLOAT32 key is the float32 rounding of a decimal (1e-06 → 9.99999997e-07): read it as the
/// shortest decimal that rounds to it, i.e. the value the converter was given. FLOAT64 and
/// integers as they are.
inline double gguf_number(const GgufFile& f, std::string_view key) {
    const GgufValue& v = f.require(key);
    if (v.type() == GgufValueType::Float32) {
        const auto x = static_cast<float>(*v.as_double());
        if (!std::isfinite(x)) f.key_error(key, "not a finite number");
        char buf[64];
        const auto r = std::to_chars(buf, buf + sizeof buf, x);
        double d = 0;
        std::from_chars(buf, r.ptr, d);
        return d;
    }
    const double d = f.get_float(key);
    if (!std::isfinite(d)) f.key_error(key, "not a finite number");
    return d;
}

inline std::int64_t gguf_positive(const GgufFile& f, std::string_view key, std::int64_t max_value = std::int64_t{1} << 40) {
    const std::int64_t n = f.get_int(key);
    if (n < 1 || n > max_value) f.key_error(key, "must be between 1 and " + std::to_string(max_value) + ", got " + std::to_string(n));
    return n;
}

/// An integer key that may also be an array with one value per layer.
inline std::vector<std::int64_t> gguf_per_layer(const GgufFile& f, std::string_view key, std::int64_t layers) {
    const GgufValue& v = f.require(key);
    std::vector<std::int64_t> out;
    if (!v.is_array()) {
        out.assign(static_cast<std::size_t>(layers), f.get_int(key));
    } else {
        if (static_cast<std::int64_t>(v.size()) != layers)
            f.key_error(key, "has " + std::to_string(v.size()) + " entries, block_count is " + std::to_string(layers));
        for (std::size_t i = 0; i < v.size(); ++i) {
            const auto x = v.at(i).as_int();
            if (!x) f.key_error(key, "expected integers, got " + v.type_string());
            out.push_back(*x);
        }
    }
    for (std::size_t i = 0; i < out.size(); ++i)
        if (out[i] < 1 || out[i] > (1 << 20))
            f.key_error(key, "entry " + std::to_string(i) + " is " + std::to_string(out[i]) + ", expected a positive count");
    return out;
}

/// The GGUF name of a tensor of our table (text-only names, prefix "model."), or "" if none.
inline std::string gguf_tensor_name(const std::string& hf) {
    static const std::map<std::string, std::string> global{{"model.embed_tokens.weight", "token_embd.weight"},
                                                           {"model.norm.weight", "output_norm.weight"}};
    static const std::map<std::string, std::string> layer{
        {"input_layernorm.weight", "attn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},
        {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"self_attn.q_norm.weight", "attn_q_norm.weight"},
        {"self_attn.k_norm.weight", "attn_k_norm.weight"},
        {"post_attention_layernorm.weight", "post_attention_norm.weight"},
        {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},
        {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"},
        {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
        {"layer_scalar", "layer_output_scale.weight"},
    };
    if (const auto it = global.find(hf); it != global.end()) return it->second;
    const std::string prefix = "model.layers.";
    if (hf.rfind(prefix, 0) != 0) return "";
    const std::size_t dot = hf.find('.', prefix.size());
    if (dot == std::string::npos) return "";
    const auto it = layer.find(hf.substr(dot + 1));
    if (it == layer.end()) return "";
    return "blk." + hf.substr(prefix.size(), dot - prefix.size()) + "." + it->second;
}

inline std::string gguf_shape_string(const GgufTensorInfo& t) {
    std::vector<std::int64_t> ne(t.ne.begin(), t.ne.end());
    return "ne " + shape_string(ne);
}

}  // namespace detail

/// The sentinel llama.cpp's converter writes into rope_freqs for pairs that are not rotated.
inline constexpr float kGgufRopeFreqSentinel = 1e30f;

/// Gemma4Config from a GGUF file's `gemma4.*` keys and tensor shapes. ConfigError names the key
/// (missing, mistyped, inconsistent) or the architecture; ShapeError names a tensor.
inline Gemma4Config gguf_config(const GgufFile& f) {
    const std::string file = f.path().string();
    const std::string arch(f.get_string("general.architecture"));
    if (arch != "gemma4")
        throw ConfigError(file + ": general.architecture is '" + arch + "'; only 'gemma4' is supported");
    const std::string p = "gemma4.";
    Gemma4Config c{};
    c.has_vision = c.has_audio = false;

    // Variants we do not implement, by key.
    for (const char* key : {"gemma4.attention.shared_kv_layers", "gemma4.embedding_length_per_layer_input", "gemma4.expert_count"})
        if (f.contains(key) && f.get_int(key) != 0) f.key_error(key, "must be 0 (not supported: " + std::to_string(f.get_int(key)) + ")");

    c.num_hidden_layers = detail::gguf_positive(f, p + "block_count", static_cast<std::int64_t>(Gemma4Config::kMaxLayers));
    const std::int64_t L = c.num_hidden_layers;
    c.hidden_size = detail::gguf_positive(f, p + "embedding_length");
    const auto ffn = detail::gguf_per_layer(f, p + "feed_forward_length", L);
    for (auto n : ffn)
        if (n != ffn[0]) f.key_error(p + "feed_forward_length", "differs between layers (not supported)");
    c.intermediate_size = ffn[0];
    const auto heads = detail::gguf_per_layer(f, p + "attention.head_count", L);
    for (auto n : heads)
        if (n != heads[0]) f.key_error(p + "attention.head_count", "differs between layers (not supported)");
    c.num_attention_heads = heads[0];
    c.global_head_dim = detail::gguf_positive(f, p + "attention.key_length", 1 << 16);
    c.head_dim = detail::gguf_positive(f, p + "attention.key_length_swa", 1 << 16);
    if (f.contains(p + "attention.value_length") && f.get_int(p + "attention.value_length") != c.global_head_dim)
        f.key_error(p + "attention.value_length", "must equal attention.key_length (" + std::to_string(c.global_head_dim) + ")");
    if (f.contains(p + "attention.value_length_swa") && f.get_int(p + "attention.value_length_swa") != c.head_dim)
        f.key_error(p + "attention.value_length_swa", "must equal attention.key_length_swa (" + std::to_string(c.head_dim) + ")");
    if (c.head_dim % 2 || c.global_head_dim % 2) f.key_error(p + "attention.key_length", "head dimensions must be even (RoPE pairs)");
    c.sliding_window = detail::gguf_positive(f, p + "attention.sliding_window");
    c.max_position_embeddings = detail::gguf_positive(f, p + "context_length");
    c.rms_norm_eps = detail::gguf_number(f, p + "attention.layer_norm_rms_epsilon");
    if (!(c.rms_norm_eps > 0)) f.key_error(p + "attention.layer_norm_rms_epsilon", "must be > 0");
    c.final_logit_softcapping = f.contains(p + "final_logit_softcapping") ? detail::gguf_number(f, p + "final_logit_softcapping") : 0.0;
    if (c.final_logit_softcapping < 0) f.key_error(p + "final_logit_softcapping", "must be >= 0");

    // Layer kinds: sliding_window_pattern is true for sliding layers.
    const GgufValue& pattern = f.get_array(p + "attention.sliding_window_pattern");
    if (pattern.element_type() != GgufValueType::Bool)
        f.key_error(p + "attention.sliding_window_pattern", "expected ARRAY[BOOL], got " + pattern.type_string());
    if (static_cast<std::int64_t>(pattern.size()) != L)
        f.key_error(p + "attention.sliding_window_pattern",
                    "has " + std::to_string(pattern.size()) + " entries, block_count is " + std::to_string(L));
    for (std::int64_t i = 0; i < L; ++i)
        c.layer_types[static_cast<std::size_t>(i)] = *pattern.at(static_cast<std::size_t>(i)).as_bool() ? AttentionKind::Sliding : AttentionKind::Full;
    const std::int64_t n_full = c.num_layers_of(AttentionKind::Full);

    // V shares K's projection on full layers exactly when their attn_v is missing.
    std::int64_t full_with_v = 0;
    for (std::int64_t i = 0; i < L; ++i)
        if (c.layer_kind(i) == AttentionKind::Full && f.find_tensor("blk." + std::to_string(i) + ".attn_v.weight")) ++full_with_v;
    if (full_with_v != 0 && full_with_v != n_full)
        throw ShapeError(file + ": some full-attention layers have attn_v.weight and others do not");
    c.attention_k_eq_v = n_full > 0 && full_with_v == 0;

    // KV heads per layer: one count for the sliding layers, one for the full layers.
    const auto kv = detail::gguf_per_layer(f, p + "attention.head_count_kv", L);
    std::optional<std::int64_t> kv_sliding, kv_full;
    for (std::int64_t i = 0; i < L; ++i) {
        auto& slot = c.layer_kind(i) == AttentionKind::Sliding ? kv_sliding : kv_full;
        if (slot && *slot != kv[static_cast<std::size_t>(i)])
            f.key_error(p + "attention.head_count_kv", "differs between layers of the same kind (layer " + std::to_string(i) + ")");
        slot = kv[static_cast<std::size_t>(i)];
    }
    c.num_key_value_heads = kv_sliding.value_or(kv_full.value_or(1));
    c.num_global_key_value_heads = kv_full.value_or(c.num_key_value_heads);
    if (!c.attention_k_eq_v && c.num_global_key_value_heads != c.num_key_value_heads)
        f.key_error(p + "attention.head_count_kv", "full layers with attn_v must have as many KV heads as sliding layers");
    for (const std::int64_t n : {c.num_key_value_heads, c.num_global_key_value_heads})
        if (c.num_attention_heads % n)
            f.key_error(p + "attention.head_count_kv", std::to_string(n) + " does not divide attention.head_count (" +
                                                           std::to_string(c.num_attention_heads) + ")");

    // RoPE: the sliding layers rotate all pairs; the full layers' partial rotation lives only in
    // rope_freqs.weight (1.0 for rotated pairs, the 1e30 sentinel for the rest).
    if (f.contains(p + "rope.dimension_count_swa") && f.get_int(p + "rope.dimension_count_swa") != c.head_dim)
        f.key_error(p + "rope.dimension_count_swa", "must equal attention.key_length_swa (partial RoPE on sliding layers is not supported)");
    if (f.contains(p + "rope.dimension_count") && f.get_int(p + "rope.dimension_count") != c.global_head_dim)
        f.key_error(p + "rope.dimension_count", "must equal attention.key_length (the partial rotation is in rope_freqs.weight)");
    c.rope_sliding = {RopeType::Default, detail::gguf_number(f, p + "rope.freq_base_swa"), 1.0};
    c.rope_full = {RopeType::Default, detail::gguf_number(f, p + "rope.freq_base"), 1.0};
    if (!(c.rope_sliding.rope_theta > 0)) f.key_error(p + "rope.freq_base_swa", "must be > 0");
    if (!(c.rope_full.rope_theta > 0)) f.key_error(p + "rope.freq_base", "must be > 0");
    if (const GgufTensorInfo* rf = f.find_tensor("rope_freqs.weight")) {
        const std::int64_t half = c.global_head_dim / 2;
        if (rf->ne.size() != 1 || static_cast<std::int64_t>(rf->ne[0]) != half)
            throw ShapeError(file + ": tensor 'rope_freqs.weight' has " + detail::gguf_shape_string(*rf) + "; attention.key_length " +
                             std::to_string(c.global_head_dim) + " implies ne [" + std::to_string(half) + "]");
        std::vector<float> freqs(static_cast<std::size_t>(half));
        ggml::dequantize_row(rf->type, f.data(*rf), half, freqs.data(), file + ": tensor 'rope_freqs.weight'");
        std::int64_t ones = 0;
        while (ones < half && freqs[static_cast<std::size_t>(ones)] == 1.0f) ++ones;
        for (std::int64_t i = ones; i < half; ++i)
            if (freqs[static_cast<std::size_t>(i)] != kGgufRopeFreqSentinel)
                throw ShapeError(file + ": tensor 'rope_freqs.weight' entry " + std::to_string(i) + " is " +
                                 std::to_string(freqs[static_cast<std::size_t>(i)]) +
                                 "; only 1.0 (rotated) followed by 1e30 (not rotated) is supported");
        if (ones < half) {
            c.rope_full.rope_type = RopeType::Proportional;
            double factor = 2.0 * static_cast<double>(ones) / static_cast<double>(c.global_head_dim);
            while (Gemma4Config::rope_pairs(RopeParameters{RopeType::Proportional, 1, factor}, c.global_head_dim) < ones)
                factor = std::nextafter(factor, 2.0);
            c.rope_full.partial_rotary_factor = factor;
        }
    }

    // Vocabulary and LM head from the tensors.
    const GgufTensorInfo* embd = f.find_tensor("token_embd.weight");
    if (!embd) throw ShapeError(file + ": missing tensor 'token_embd.weight'");
    if (embd->ne.size() != 2 || static_cast<std::int64_t>(embd->ne[0]) != c.hidden_size)
        throw ShapeError(file + ": tensor 'token_embd.weight' has " + detail::gguf_shape_string(*embd) + "; embedding_length " +
                         std::to_string(c.hidden_size) + " implies ne [" + std::to_string(c.hidden_size) + ", vocab]");
    c.vocab_size = static_cast<std::int64_t>(embd->ne[1]);
    if (c.vocab_size < 1) throw ShapeError(file + ": tensor 'token_embd.weight' has no rows");
    if (f.find_tensor("output.weight"))
        throw ConfigError(file + ": tensor 'output.weight' is present: an untied LM head is not supported");
    c.tie_word_embeddings = true;

    // Special ids: the tokenizer's, and <turn|> ends a turn as in the published configs.
    const auto id_key = [&](const std::string& key, std::int32_t fallback) {
        if (!f.contains(key)) return fallback;
        const std::int64_t id = f.get_int(key);
        if (id < 0 || id >= c.vocab_size) f.key_error(key, "id " + std::to_string(id) + " is outside the vocabulary");
        return static_cast<std::int32_t>(id);
    };
    c.tokens.pad = id_key("tokenizer.ggml.padding_token_id", 0);
    c.tokens.bos = id_key("tokenizer.ggml.bos_token_id", 2);
    c.tokens.eos = {id_key("tokenizer.ggml.eos_token_id", 1)};
    c.tokens.eos_count = 1;
    const auto add_eos = [&](std::int32_t id) {
        if (id >= 0 && !c.tokens.is_eos(id) && c.tokens.eos_count < TokenIds::kMaxEos) c.tokens.eos[c.tokens.eos_count++] = id;
    };
    add_eos(id_key("tokenizer.ggml.eot_token_id", -1));
    if (const GgufValue* tokens = f.find("tokenizer.ggml.tokens"); tokens && tokens->is_array() && tokens->element_type() == GgufValueType::String) {
        const auto& s = tokens->strings();
        for (std::size_t i = 0; i < s.size() && static_cast<std::int64_t>(i) < c.vocab_size; ++i)
            if (s[i] == "<turn|>") add_eos(static_cast<std::int32_t>(i));
    }
    return c;
}

inline Checkpoint load_gguf_checkpoint(const std::filesystem::path& path, const LoadOptions& options) {
    // The converted tensors' buffers, keeping the mapped file alive for the views into it.
    auto storage = std::make_shared<detail::OwnedBuffers>();
    const auto mapped = std::make_shared<const GgufFile>(path);
    storage->parent = mapped;
    const GgufFile& f = *mapped;
    const std::string file = path.string();
    Checkpoint ck;
    ck.directory = path;
    ck.text_prefix = "model.";
    ck.config = gguf_config(f);
    const auto table = tensor_table(ck.config, ck.text_prefix, ck.weights);
    const detail::LoadPool load_pool(options);
    ThreadPool& pool = *load_pool;

    std::set<std::string> used{"rope_freqs.weight"};
    for (const TensorSpec& spec : table) {
        if (spec.group != TensorGroup::Text) continue;
        const std::string name = detail::gguf_tensor_name(spec.name());
        const GgufTensorInfo* t = f.find_tensor(name);
        if (!t) throw ShapeError(file + ": missing tensor '" + name + "' (expected ne " + shape_string(std::vector<std::int64_t>(spec.shape.rbegin(), spec.shape.rend())) + ")");
        used.insert(name);
        if (t->shape() != spec.shape)
            throw ShapeError(file + ": tensor '" + name + "' has " + detail::gguf_shape_string(*t) + "; the metadata implies ne " +
                             shape_string(std::vector<std::int64_t>(spec.shape.rbegin(), spec.shape.rend())));
        const std::string where = file + ": tensor '" + name + "'";
        if (!ggml::can_dequantize(t->type))
            throw ShapeError(where + ": ggml type " + std::string(ggml_type_name(t->type)) + " is not supported (the library runs " +
                             std::string(kSupportedGgmlTypes) + ")");
        WeightView v{name, DType::F32, spec.shape, nullptr, 0};
        const std::byte* src = f.data(*t);
        if (t->type == GgmlType::F32 || t->type == GgmlType::F16 || t->type == GgmlType::BF16) {
            v.dtype = t->type == GgmlType::F32 ? DType::F32 : t->type == GgmlType::F16 ? DType::F16 : DType::BF16;
            v.data = src;
            v.size_bytes = static_cast<std::size_t>(t->size_bytes);
            *spec.field = std::move(v);
            continue;
        }
        const bool matrix = spec.shape.size() == 2;
        const std::int64_t rows = matrix ? spec.shape[0] : 1, cols = matrix ? spec.shape[1] : spec.shape[0];
        const std::int64_t src_row = ggml::bytes_of(t->type, cols);
        if (matrix && options.format == WeightFormat::AsStored && t->type != GgmlType::Q8_0 && t->type != GgmlType::Q4_0) {
            // Every other block type runs as stored, from the mapping (kernels/linear_ggml.hpp).
            const ggml::BlockDecoder dec = ggml::block_decoder(t->type);
            std::atomic<std::int64_t> bad_row{-1};
            pool.parallel_for(rows, [&](std::int64_t r0, std::int64_t r1) {
                for (std::int64_t r = r0; r < r1; ++r)
                    if (!ggml::finite_scales(dec, src + r * src_row, cols)) bad_row = r;
            }, 16);
            if (bad_row >= 0) throw FormatError(where + ": row " + std::to_string(bad_row.load()) + " has a non-finite block scale");
            v.dtype = DType::Ggml;
            v.ggml = t->type;
            v.data = src;
            v.size_bytes = static_cast<std::size_t>(t->size_bytes);
            v.layout = WeightView::Layout::Rows;
            v.origin = DType::F32;  // ggml dequantizes in float32
            *spec.field = std::move(v);
            continue;
        }
        // The quantized format this matrix gets: Q8_0 / Q4_0 keep theirs; others the requested one.
        std::optional<DType> q;
        if (matrix && t->type == GgmlType::Q8_0) q = DType::Q8;
        else if (matrix && t->type == GgmlType::Q4_0) q = DType::Q4;
        else if (matrix && options.format == WeightFormat::Int8) q = DType::Q8;
        else if (matrix && options.format == WeightFormat::Int4) q = DType::Q4;
        if (q) {
            // Q8_0 / Q4_0 keep their 32-element blocks; a re-encoding takes the requested size.
            // The rows go from the file straight into panels (the layout the kernels read), and
            // the file's pages are dropped after: the matrix is in memory once.
            const std::int64_t block = t->type == GgmlType::Q8_0 || t->type == GgmlType::Q4_0 ? 32 : quant_block_for(options.block);
            const std::int64_t nb = quant::blocks_per_row(cols, block);
            v.dtype = *q;
            v.block = block;
            v.origin = DType::F32;  // ggml dequantizes in float32
            std::atomic<std::int64_t> bad_row{-1};
            detail::make_panels(v, *storage, pool, [&](std::int64_t r, std::byte* out_codes, std::uint16_t* out_scales) {
                const std::byte* in = src + r * src_row;
                if (t->type == GgmlType::Q8_0 && *q == DType::Q8) {
                    ggml::q8_0_to_q8_row(in, cols, out_codes, out_scales);
                } else if (t->type == GgmlType::Q4_0 && *q == DType::Q4) {
                    ggml::q4_0_to_q4_row(in, cols, out_codes, out_scales);
                } else {
                    thread_local std::vector<float> row;
                    row.resize(static_cast<std::size_t>(cols));
                    ggml::dequantize_row(t->type, in, cols, row.data(), where);
                    for (float x : row)
                        if (!std::isfinite(x)) bad_row = r;
                    quant::quantize_row(*q, block, row.data(), cols, out_codes, out_scales);
                }
                for (std::int64_t b = 0; b < nb; ++b)
                    if ((out_scales[b] & 0x7c00u) == 0x7c00u) bad_row = r;  // an infinite or NaN f16 scale
            });
            if (bad_row >= 0) throw FormatError(where + ": row " + std::to_string(bad_row.load()) + " has a non-finite scale or value");
            f.release(*t);
        } else {
            // Exact values: F32, or bf16 when that format is asked for.
            const bool bf16 = matrix && options.format == WeightFormat::BF16;
            v.dtype = bf16 ? DType::BF16 : DType::F32;
            v.size_bytes = static_cast<std::size_t>(rows * cols * (bf16 ? 2 : 4));
            std::byte* out = storage->allocate(v.size_bytes);
            std::atomic<std::int64_t> bad_row{-1};
            pool.parallel_for(rows, [&](std::int64_t r0, std::int64_t r1) {
                std::vector<float> row(static_cast<std::size_t>(cols));
                for (std::int64_t r = r0; r < r1; ++r) {
                    ggml::dequantize_row(t->type, src + r * src_row, cols, row.data(), where);
                    for (std::int64_t j = 0; j < cols; ++j) {
                        const float x = row[static_cast<std::size_t>(j)];
                        if (!std::isfinite(x)) bad_row = r;
                        if (bf16) {
                            const std::uint16_t h = float_to_bf16(x);
                            std::memcpy(out + 2 * (r * cols + j), &h, 2);
                        } else {
                            std::memcpy(out + 4 * (r * cols + j), &x, 4);
                        }
                    }
                }
            }, 16);
            if (bad_row >= 0) throw FormatError(where + ": row " + std::to_string(bad_row.load()) + " has a non-finite value");
            v.data = out;
            f.release(*t);
        }
        *spec.field = std::move(v);
    }
    for (const GgufTensorInfo& t : f.tensors())
        if (!used.count(t.name))
            throw ShapeError(file + ": unexpected tensor '" + t.name + "' (not part of the Gemma 4 text model described by the metadata)");
    ck.weights.storage = storage;
    return ck;
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4

#include <gemma4/model/gguf_mmproj.hpp>  // after the definitions above, which it uses
