// Writes a checkpoint of any shape with random weights, in the official layout (config.json,
// one model.safetensors or shards with model.safetensors.index.json), walking the same tensor
// table the loader uses. For tests, benchmarks and the no-download demo.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/detail/random.hpp>
#include <gemma4/io/config_json.hpp>
#include <gemma4/io/safetensors_writer.hpp>
#include <gemma4/model/assistant_checkpoint.hpp>
#include <gemma4/model/tensor_table.hpp>
#include <gemma4/tokenizer/tiny_tokenizer.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

struct RandomCheckpointOptions {
    std::uint64_t seed = 1;
    DType dtype = DType::BF16;
    int shards = 1;               ///< > 1: model-0000k-of-0000n.safetensors + index
    bool text_only_layout = false;  ///< "model." prefix and no multimodal tensors
};

namespace detail {

/// Values for one tensor: matrices ~ U(±√3/√fan_in) (unit variance outputs), norm weights
/// around 1, layer scalars in [0.5, 1.5], embeddings ~ U(±√3) · 0.05.
inline std::vector<double> random_values(const TensorSpec& spec, SplitMix64& rng) {
    std::int64_t n = 1;
    for (auto d : spec.shape) n *= d;
    std::vector<double> v(static_cast<std::size_t>(n));
    const std::string& name = spec.name();
    auto ends_with = [&](const std::string& s) { return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0; };
    if (ends_with("layer_scalar")) {
        for (auto& x : v) x = 0.5 + rng.uniform();
    } else if (spec.shape.size() == 1 && ends_with(".bias")) {
        for (auto& x : v) x = 0.1 * rng.symmetric();
    } else if (spec.shape.size() == 1) {
        for (auto& x : v) x = 1.0 + 0.25 * rng.symmetric();
    } else if (ends_with("embed_tokens.weight")) {
        for (auto& x : v) x = 0.05 * std::sqrt(3.0) * rng.symmetric();
    } else {
        const double fan_in = static_cast<double>(spec.shape.back());
        const double a = std::sqrt(3.0 / fan_in);
        for (auto& x : v) x = a * rng.symmetric();
    }
    return v;
}

/// The tensors of `table` with random values (random_values) in o.dtype, written as
/// model.safetensors or as o.shards shards with their index.
inline void write_random_tensors(const std::filesystem::path& dir, const std::vector<TensorSpec>& table, const RandomCheckpointOptions& o) {
    SplitMix64 rng{o.seed};
    const auto shards = static_cast<std::size_t>(o.shards);
    nlohmann::json index{{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
    std::size_t total = 0, next = 0;
    // One shard in memory at a time (tensors i with i · shards / n == s, in table order, so the
    // values do not depend on the shard count): the 12B's shapes in bf16 take ~24 GB in all.
    for (std::size_t s = 0; s < shards; ++s) {
        std::vector<TensorBlob> blobs;
        for (; next < table.size() && next * shards / table.size() == s; ++next) {
            const TensorSpec& spec = table[next];
            blobs.push_back({spec.name(), o.dtype, spec.shape, encode_values(random_values(spec, rng), o.dtype)});
        }
        if (shards == 1) {
            write_safetensors(dir / "model.safetensors", blobs, {{"format", "pt"}});
            return;
        }
        char name[64];
        std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards);
        write_safetensors(dir / name, blobs, {{"format", "pt"}});
        for (const TensorBlob& b : blobs) {
            index["weight_map"][b.name] = name;
            total += b.bytes.size();
        }
    }
    index["metadata"]["total_size"] = total;
    std::ofstream(dir / "model.safetensors.index.json") << index.dump(2) << "\n";
}

}  // namespace detail

inline void write_random_checkpoint(const std::filesystem::path& dir, Gemma4Config config, RandomCheckpointOptions o = {}) {
    if (o.shards < 1) throw InvalidArgument("write_random_checkpoint: shards must be >= 1");
    if (o.text_only_layout) config.has_vision = config.has_audio = false;
    std::filesystem::create_directories(dir);
    {
        nlohmann::json j = config_to_json(config);
        if (o.text_only_layout) {  // a plain text config, as saved by a text-only conversion
            nlohmann::json t = j["text_config"];
            t["architectures"] = {"Gemma4UnifiedForCausalLM"};
            j = t;
        }
        std::ofstream(dir / "config.json") << j.dump(2) << "\n";
    }
    ModelWeights unused;
    detail::write_random_tensors(dir, tensor_table(config, o.text_only_layout ? "model." : "model.language_model.", unused), o);
}

/// A small configuration with the 12B's structure (both layer kinds, k_eq_v, proportional RoPE,
/// a window shorter than test sequences) for tests and the demo.
constexpr Gemma4Config tiny_config() {
    Gemma4Config c{};
    c.vocab_size = 512;
    c.hidden_size = 64;
    c.intermediate_size = 128;
    c.num_hidden_layers = 6;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.global_head_dim = 32;
    c.num_global_key_value_heads = 1;
    c.sliding_window = 8;
    c.max_position_embeddings = 4096;
    c.layer_types = Gemma4Config::default_layer_types(c.num_hidden_layers);
    c.layer_types[2] = AttentionKind::Full;  // full layers at 2 and 5
    c.vision.patch_size = 4;
    c.vision.pooling_kernel_size = 2;
    c.vision.mm_posemb_size = 16;
    c.audio.audio_embed_dim = 32;
    c.tokens.eos = {1, 106};
    c.tokens.eos_count = 2;
    c.tokens.image = 300;
    c.tokens.audio = 301;
    c.tokens.video = 302;
    c.tokens.boi = 303;
    c.tokens.eoi = 304;
    c.tokens.boa = 305;
    c.tokens.eoa = 306;
    return c;
}

/// Gives the config the tiny tokenizer's special ids (tokenizer/tiny_tokenizer.hpp), and a
/// vocabulary at least as large as its own, so a random checkpoint and that tokenizer agree.
inline void adopt_tiny_tokenizer(Gemma4Config& c, const TinyTokenizerInfo& t) {
    c.vocab_size = std::max<std::int64_t>(c.vocab_size, t.vocab_size);
    c.tokens.pad = t.pad;
    c.tokens.bos = t.bos;
    c.tokens.eos = {t.eos, t.turn_end};
    c.tokens.eos_count = 2;
    c.tokens.image = t.image;
    c.tokens.audio = t.audio;
    c.tokens.video = t.video;
    c.tokens.boi = t.image_start;
    c.tokens.eoi = t.image_end;
    c.tokens.boa = t.audio_start;
    c.tokens.eoa = t.audio_end;
}

/// Writes an assistant checkpoint of `a` with random weights in the official layout (values as
/// write_random_checkpoint draws them; `text_only_layout` does not apply).
inline void write_random_assistant_checkpoint(const std::filesystem::path& dir, const AssistantConfig& a, RandomCheckpointOptions o = {}) {
    if (o.shards < 1) throw InvalidArgument("write_random_assistant_checkpoint: shards must be >= 1");
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "config.json") << assistant_config_to_json(a).dump(2) << "\n";
    AssistantWeights unused;
    detail::write_random_tensors(dir, assistant_tensor_table(a, unused), o);
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
