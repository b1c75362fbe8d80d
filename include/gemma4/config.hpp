// Gemma4Config: the model's hyper-parameters as a constexpr aggregate, the published 12B values,
// per-layer geometry, and the parameter count. The runtime twin is read from config.json by
// io/config_json.hpp; field names follow config.json.
#pragma once

#include <gemma4/abi.hpp>

#include <array>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// The two attention kinds of Gemma 4 (config.json `layer_types`).
enum class AttentionKind : std::uint8_t { Sliding, Full };

constexpr std::string_view attention_kind_name(AttentionKind k) {
    return k == AttentionKind::Sliding ? "sliding_attention" : "full_attention";
}

enum class RopeType : std::uint8_t { Default, Proportional };

/// One entry of config.json `rope_parameters`.
struct RopeParameters {
    RopeType rope_type = RopeType::Default;
    double rope_theta = 10000.0;
    double partial_rotary_factor = 1.0;  ///< used by the proportional type only
    constexpr bool operator==(const RopeParameters&) const = default;
};

/// Image embedder hyper-parameters (`vision_config`).
struct VisionConfig {
    std::int64_t patch_size = 16;
    std::int64_t pooling_kernel_size = 3;
    std::int64_t mm_posemb_size = 1120;
    /// Width of the embedder (patch_dense, the norms, the position table) before its projection
    /// to the text hidden size; 0 means the text hidden size, as in the 12B (spec §4.2).
    std::int64_t mm_embed_dim = 0;
    double rms_norm_eps = 1e-6;
    /// The three LayerNorms of the embedder use torch's default eps (spec §4.2): not a
    /// config.json field, so a constant rather than a member that nothing reads or writes.
    static constexpr double layer_norm_eps = 1e-5;

    constexpr std::int64_t model_patch_size() const { return patch_size * pooling_kernel_size; }
    constexpr std::int64_t patch_values() const { return model_patch_size() * model_patch_size() * 3; }
};

/// Audio embedder hyper-parameters (`audio_config`).
struct AudioConfig {
    std::int64_t audio_embed_dim = 640;  ///< samples per frame (one soft token)
    double rms_norm_eps = 1e-6;
};

/// Special token ids (top level of config.json and generation_config.json).
struct TokenIds {
    static constexpr std::size_t kMaxEos = 8;
    std::int32_t pad = 0;
    std::int32_t bos = 2;
    std::array<std::int32_t, kMaxEos> eos{1};
    std::size_t eos_count = 1;
    std::int32_t image = 258880;
    std::int32_t audio = 258881;
    std::int32_t video = 258884;
    std::int32_t boi = 255999;
    std::int32_t eoi = 258882;
    std::int32_t boa = 256000;
    std::int32_t eoa = 258883;

    constexpr bool is_eos(std::int32_t id) const {
        for (std::size_t i = 0; i < eos_count; ++i)
            if (eos[i] == id) return true;
        return false;
    }
};

/// Geometry of one decoder layer, derived from the config (spec §1 table, decision 7).
struct LayerGeometry {
    AttentionKind kind;
    std::int64_t head_dim;      ///< d
    std::int64_t num_heads;     ///< query heads
    std::int64_t num_kv_heads;  ///< key/value heads
    bool has_v_proj;            ///< false on full layers with attention_k_eq_v (V = raw K)
    RopeParameters rope;
    std::int64_t rope_pairs;    ///< rotated pairs (i, i + d/2), i < rope_pairs; the rest pass
    std::int64_t window;        ///< keys visible to a query (0 = unlimited)

    constexpr std::int64_t q_dim() const { return num_heads * head_dim; }
    constexpr std::int64_t kv_dim() const { return num_kv_heads * head_dim; }
    /// Width of the spec's fused `attn.qkv_proj` output: q | k | v (no v without v_proj).
    constexpr std::int64_t qkv_dim() const { return q_dim() + kv_dim() * (has_v_proj ? 2 : 1); }
    /// Query heads per key/value head.
    constexpr std::int64_t group() const { return num_heads / num_kv_heads; }
    constexpr bool operator==(const LayerGeometry&) const = default;
};

/// Hyper-parameters of a Gemma 4 unified model. Sizes are data, not template parameters, so
/// the tiny test checkpoints and the 12B run through the same code.
struct Gemma4Config {
    static constexpr std::size_t kMaxLayers = 256;

    std::int64_t vocab_size = 262144;
    std::int64_t hidden_size = 3840;
    std::int64_t intermediate_size = 15360;
    std::int64_t num_hidden_layers = 48;
    std::int64_t num_attention_heads = 16;
    std::int64_t num_key_value_heads = 8;
    std::int64_t head_dim = 256;
    std::int64_t global_head_dim = 512;
    std::int64_t num_global_key_value_heads = 1;
    bool attention_k_eq_v = true;
    std::int64_t sliding_window = 1024;
    std::int64_t max_position_embeddings = 262144;
    double rms_norm_eps = 1e-6;
    double final_logit_softcapping = 30.0;
    RopeParameters rope_sliding{RopeType::Default, 10000.0, 1.0};
    RopeParameters rope_full{RopeType::Proportional, 1000000.0, 0.25};
    /// `layer_types[i]` for i < num_hidden_layers.
    std::array<AttentionKind, kMaxLayers> layer_types = default_layer_types(48);
    bool tie_word_embeddings = true;
    /// Whether the checkpoint has the vision / audio embedders (unified layout).
    bool has_vision = true;
    bool has_audio = true;
    VisionConfig vision{};
    AudioConfig audio{};
    TokenIds tokens{};

    /// Gemma 4's default pattern: full iff (i + 1) % 6 == 0.
    static constexpr std::array<AttentionKind, kMaxLayers> default_layer_types(std::int64_t n) {
        std::array<AttentionKind, kMaxLayers> t{};
        for (std::int64_t i = 0; i < static_cast<std::int64_t>(kMaxLayers); ++i)
            t[static_cast<std::size_t>(i)] =
                (i < n && (i + 1) % 6 == 0) ? AttentionKind::Full : AttentionKind::Sliding;
        return t;
    }

    constexpr AttentionKind layer_kind(std::int64_t i) const {
        return layer_types[static_cast<std::size_t>(i)];
    }

    constexpr LayerGeometry layer(std::int64_t i) const { return geometry(layer_kind(i)); }

    /// The geometry every layer of one kind shares.
    constexpr LayerGeometry geometry(AttentionKind kind) const {
        if (kind == AttentionKind::Sliding) {
            return LayerGeometry{kind, head_dim, num_attention_heads, num_key_value_heads, true,
                                 rope_sliding, rope_pairs(rope_sliding, head_dim), sliding_window};
        }
        const bool k_eq_v = attention_k_eq_v;
        return LayerGeometry{kind,
                             global_head_dim,
                             num_attention_heads,
                             k_eq_v ? num_global_key_value_heads : num_key_value_heads,
                             !k_eq_v,
                             rope_full,
                             rope_pairs(rope_full, global_head_dim),
                             0};
    }

    /// Rotated pairs: all d/2 for default RoPE; int(factor · d / 2) for proportional (decision 4).
    static constexpr std::int64_t rope_pairs(const RopeParameters& r, std::int64_t d) {
        if (r.rope_type == RopeType::Default) return d / 2;
        return static_cast<std::int64_t>(r.partial_rotary_factor * static_cast<double>(d) / 2.0);
    }

    /// The vision embedder's width E: patch_dense maps P → E, embedding_projection E → H.
    constexpr std::int64_t vision_embed_dim() const { return vision.mm_embed_dim > 0 ? vision.mm_embed_dim : hidden_size; }

    constexpr std::int64_t num_layers_of(AttentionKind kind) const {
        std::int64_t n = 0;
        for (std::int64_t i = 0; i < num_hidden_layers; ++i) n += layer_kind(i) == kind;
        return n;
    }
};

/// The published google/gemma-4-12B configuration.
inline constexpr Gemma4Config kGemma4_12B = [] {
    Gemma4Config c{};
    c.tokens.eos = {1, 106};
    c.tokens.eos_count = 2;
    return c;
}();

// ---- parameter counts ----------------------------------------------------------------------

/// Parameters of one decoder layer (every tensor of the layer in the checkpoint).
constexpr std::int64_t layer_parameter_count(const Gemma4Config& c, std::int64_t i) {
    const LayerGeometry g = c.layer(i);
    const std::int64_t H = c.hidden_size;
    std::int64_t n = 0;
    n += g.q_dim() * H;                           // q_proj
    n += g.kv_dim() * H * (g.has_v_proj ? 2 : 1);  // k_proj (+ v_proj)
    n += H * g.q_dim();                           // o_proj
    n += 2 * g.head_dim;                          // q_norm, k_norm
    n += 4 * H;                                   // the four sandwich norms
    n += 1;                                       // layer_scalar
    n += 3 * c.intermediate_size * H;             // gate, up, down
    return n;
}

/// Parameters of the text model: embedding (tied LM head), layers, final norm.
constexpr std::int64_t text_parameter_count(const Gemma4Config& c) {
    std::int64_t n = c.vocab_size * c.hidden_size + c.hidden_size;
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) n += layer_parameter_count(c, i);
    return n;
}

constexpr std::int64_t vision_parameter_count(const Gemma4Config& c) {
    const std::int64_t P = c.vision.patch_values(), E = c.vision_embed_dim(), H = c.hidden_size;
    return 2 * P                         // patch_ln1
           + E * P + E                   // patch_dense
           + 2 * E                       // patch_ln2
           + c.vision.mm_posemb_size * 2 * E  // pos_embedding
           + 2 * E                       // pos_norm
           + H * E;                      // embedding_projection
}

constexpr std::int64_t audio_parameter_count(const Gemma4Config& c) {
    return c.hidden_size * c.audio.audio_embed_dim;
}

/// Every parameter in the checkpoint, the multimodal embedders included when present.
constexpr std::int64_t parameter_count(const Gemma4Config& c) {
    return text_parameter_count(c) + (c.has_vision ? vision_parameter_count(c) : 0) +
           (c.has_audio ? audio_parameter_count(c) : 0);
}

/// The default configuration parameter of the model types (Model<T>, Attention<Kind, T>): no
/// configuration is fixed at compile time, every size is read from config.json at load. A model
/// type given a constexpr configuration instead (Model<float, kGemma4_12B>) loads only
/// checkpoints whose config.json equals it, and says which fields differ. (Its sizes were once
/// also constants of the attention kernels; that bought no measurable time, see
/// docs/perf-log/ "Fixed configuration", and was taken out.)
inline constexpr Gemma4Config kConfigFromCheckpoint{};

/// Whether a model type's configuration parameter fixes the configuration at compile time.
/// Compared as template arguments (the same object or not), not as addresses: with
/// -fsanitize=address GCC does not fold a comparison of two variables' addresses.
template <const Gemma4Config& C>
inline constexpr bool is_fixed_config =
    !std::is_same_v<std::integral_constant<const Gemma4Config*, &C>, std::integral_constant<const Gemma4Config*, &kConfigFromCheckpoint>>;

/// `c` with its first n layers (Gemma 4's layer pattern): e.g. a fixed-configuration model type
/// of the 12B's shapes with fewer layers, for benchmarks.
constexpr Gemma4Config with_layers(Gemma4Config c, std::int64_t n) {
    c.num_hidden_layers = n;
    c.layer_types = Gemma4Config::default_layer_types(n);
    return c;
}

static_assert(text_parameter_count(kGemma4_12B) == 11'907'350'320);
static_assert(parameter_count(kGemma4_12B) == 11'959'730'224);
static_assert(kGemma4_12B.num_layers_of(AttentionKind::Full) == 8);
static_assert(kGemma4_12B.layer(5).qkv_dim() == 8704 && kGemma4_12B.layer(0).qkv_dim() == 8192);

}  // namespace GEMMA4_ABI
}  // namespace gemma4
