// The image and audio embedders of Gemma 4 unified from llama.cpp's mmproj GGUF (general.architecture
// "clip", general.type "mmproj", projector types "gemma4uv" / "gemma4ua"), next to a text model
// loaded from a GGUF file: the vision / audio config from the `clip.*` keys and the tensor
// shapes, the placeholder ids from the text file's vocabulary, the tensors under their Hugging
// Face names and in the Hugging Face layout (docs/checkpoint-formats.md, "mmproj").
//
// llama.cpp's converter changes three things, undone here: patch_dense's columns and patch_ln1's
// entries are in ggml's im2col order (channel, row, column) instead of the checkpoint's (row,
// column, channel); pos_embedding [S, 2, E] is stored [2, S, E]; pos_norm is named patch_norm.3.
// F32 / F16 / BF16 tensors whose layout is unchanged are views into the mapped file; reordered
// ones are copies in their own dtype; quantized ones (Q8_0, ...) are dequantized exactly to F32.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/error.hpp>
#include <gemma4/io/gguf.hpp>
#include <gemma4/model/checkpoint.hpp>
#include <gemma4/model/gguf_checkpoint.hpp>
#include <gemma4/model/owned_buffers.hpp>
#include <gemma4/model/tensor_table.hpp>
#include <gemma4/tensor/dtype.hpp>
#include <gemma4/tensor/ggml_blocks.hpp>
#include <gemma4/tensor/weights.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// llama.cpp's gemma4uv graph pools 3 × 3 patches into one model patch and stores only the
/// patch size (clip.vision.patch_size); the pooling is fixed by the projector type.
inline constexpr std::int64_t kGemma4uvPoolingKernel = 3;

namespace detail {

/// How a tensor of the mmproj differs from the checkpoint's.
enum class MmprojLayout : std::uint8_t {
    Same,          ///< the checkpoint's bytes
    PatchColumns,  ///< last axis over a patch in (channel, row, column) order, not (row, column, channel)
    PositionAxes,  ///< [2, S, E] instead of [S, 2, E]
};

struct MmprojTensor {
    const char* hf;    ///< the name in tensor_table
    const char* gguf;  ///< the name in the mmproj
    MmprojLayout layout;
};

inline constexpr MmprojTensor kMmprojTensors[] = {
    {"model.vision_embedder.patch_ln1.weight", "v.patch_norm.1.weight", MmprojLayout::PatchColumns},
    {"model.vision_embedder.patch_ln1.bias", "v.patch_norm.1.bias", MmprojLayout::PatchColumns},
    {"model.vision_embedder.patch_dense.weight", "v.patch_embd.weight", MmprojLayout::PatchColumns},
    {"model.vision_embedder.patch_dense.bias", "v.patch_embd.bias", MmprojLayout::Same},
    {"model.vision_embedder.patch_ln2.weight", "v.patch_norm.2.weight", MmprojLayout::Same},
    {"model.vision_embedder.patch_ln2.bias", "v.patch_norm.2.bias", MmprojLayout::Same},
    {"model.vision_embedder.pos_embedding", "v.position_embd.weight", MmprojLayout::PositionAxes},
    {"model.vision_embedder.pos_norm.weight", "v.patch_norm.3.weight", MmprojLayout::Same},
    {"model.vision_embedder.pos_norm.bias", "v.patch_norm.3.bias", MmprojLayout::Same},
    {"model.embed_vision.embedding_projection.weight", "mm.input_projection.weight", MmprojLayout::Same},
    {"model.embed_audio.embedding_projection.weight", "mm.a.input_projection.weight", MmprojLayout::Same},
};

/// The placeholder and delimiter tokens of Gemma 4's vocabulary, and which encoder needs each.
struct MultimodalToken {
    const char* piece;
    std::int32_t TokenIds::*field;
    bool for_vision, for_audio;
};

inline constexpr MultimodalToken kMultimodalTokens[] = {
    {"<|image|>", &TokenIds::image, true, false}, {"<|image>", &TokenIds::boi, true, false},
    {"<image|>", &TokenIds::eoi, true, false},    {"<|audio|>", &TokenIds::audio, false, true},
    {"<|audio>", &TokenIds::boa, false, true},    {"<audio|>", &TokenIds::eoa, false, true},
    {"<|video|>", &TokenIds::video, false, false},
};

/// Messages about a text model and its mmproj name both files.
struct MmprojFiles {
    std::string text, mmproj;
    std::string prefix() const { return mmproj + " (mmproj of " + text + "): "; }
    [[noreturn]] void format_error(const std::string& what) const { throw FormatError(prefix() + what); }
    [[noreturn]] void config_error(const std::string& what) const { throw ConfigError(prefix() + what); }
    [[noreturn]] void shape_error(const std::string& what) const { throw ShapeError(prefix() + what); }
    [[noreturn]] void key_error(const std::string& key, const std::string& what) const {
        config_error("metadata key '" + key + "': " + what);
    }
};

/// A FLOAT32 epsilon key of the mmproj (its decimal, as gguf_number reads it), 1e-6 when absent
/// (the converter's default).
inline double mmproj_eps(const GgufFile& f, const std::string& key) {
    if (!f.contains(key)) return 1e-6;
    const double eps = gguf_number(f, key);
    if (!(eps > 0)) f.key_error(key, "must be > 0");
    return eps;
}

/// For the checkpoint's index i of a model patch's values ((row · p + column) · 3 + channel),
/// the index in ggml's im2col order (channel · p² + row · p + column).
inline std::int64_t im2col_index(std::int64_t i, std::int64_t p) {
    const std::int64_t channel = i % 3, pixel = i / 3;
    return channel * p * p + pixel;
}

/// The mmproj tensor `t` as the checkpoint tensor `hf` of `shape`, its layout undone.
inline WeightView mmproj_view(const GgufFile& f, const GgufTensorInfo& t, const std::string& hf, const std::vector<std::int64_t>& shape,
                              MmprojLayout layout, std::int64_t model_patch, OwnedBuffers& buffers, const MmprojFiles& files) {
    const std::string where = "tensor '" + t.name + "'";
    const bool plain = t.type == GgmlType::F32 || t.type == GgmlType::F16 || t.type == GgmlType::BF16;
    if (!plain && !ggml::can_dequantize(t.type))
        files.shape_error(where + ": ggml type " + std::string(ggml_type_name(t.type)) + " is not supported");
    const DType dtype = t.type == GgmlType::F16 ? DType::F16 : t.type == GgmlType::BF16 ? DType::BF16 : DType::F32;
    WeightView v{hf, dtype, shape, f.data(t), static_cast<std::size_t>(t.size_bytes)};
    if (plain && layout == MmprojLayout::Same) return v;

    // Row r, column j of the checkpoint's tensor seen as [R, C] (C its last axis) is row
    // source_row(r), column source_col(j) of the stored one, whose rows also have C values.
    const std::int64_t C = shape.back(), R = t.numel == 0 ? 0 : static_cast<std::int64_t>(t.numel) / C;
    const std::int64_t S = layout == MmprojLayout::PositionAxes ? shape[0] : 0;
    const auto source_row = [&](std::int64_t r) { return layout == MmprojLayout::PositionAxes ? (r % 2) * S + r / 2 : r; };
    std::vector<std::int64_t> source_col(static_cast<std::size_t>(C));
    for (std::int64_t j = 0; j < C; ++j)
        source_col[static_cast<std::size_t>(j)] = layout == MmprojLayout::PatchColumns ? im2col_index(j, model_patch) : j;

    const std::size_t element = dtype_size(dtype);
    v.size_bytes = static_cast<std::size_t>(R * C) * element;
    std::byte* out = buffers.allocate(v.size_bytes);
    v.data = out;
    const std::int64_t row_bytes = ggml::bytes_of(t.type, C);
    std::vector<float> row(plain ? 0 : static_cast<std::size_t>(C));
    for (std::int64_t r = 0; r < R; ++r) {
        const std::byte* src = f.data(t) + source_row(r) * row_bytes;
        std::byte* dst = out + static_cast<std::size_t>(r * C) * element;
        if (plain) {
            for (std::int64_t j = 0; j < C; ++j)
                std::memcpy(dst + static_cast<std::size_t>(j) * element, src + static_cast<std::size_t>(source_col[static_cast<std::size_t>(j)]) * element,
                            element);
            continue;
        }
        ggml::dequantize_row(t.type, src, C, row.data(), files.prefix() + where);
        for (std::int64_t j = 0; j < C; ++j) {
            const float x = row[static_cast<std::size_t>(source_col[static_cast<std::size_t>(j)])];
            if (!std::isfinite(x)) files.format_error(where + ": row " + std::to_string(source_row(r)) + " has a non-finite value");
            std::memcpy(dst + static_cast<std::size_t>(j) * element, &x, element);
        }
    }
    return v;
}

/// Keeps alive what the views of a checkpoint with an mmproj point into.
struct MmprojStorage {
    std::shared_ptr<const void> text;
    std::shared_ptr<const GgufFile> mmproj;
    OwnedBuffers converted;
};

}  // namespace detail

/// `text` (a text model's config from its GGUF file `text_file`) with the vision and audio
/// embedders of `mmproj`: has_vision / has_audio, VisionConfig and AudioConfig from the `clip.*`
/// keys and the tensor shapes, and the placeholder ids from `text_file`'s vocabulary. A file that
/// is not a Gemma 4 mmproj, or one that does not fit the text model, is an error naming both files.
inline Gemma4Config gguf_mmproj_config(const Gemma4Config& text, const GgufFile& text_file, const GgufFile& mmproj) {
    const detail::MmprojFiles files{text_file.path().string(), mmproj.path().string()};
    const GgufFile& f = mmproj;
    const GgufValue* arch = f.find("general.architecture");
    const GgufValue* type = f.find("general.type");
    if (!arch || arch->as_string() != std::string_view("clip") || (type && type->as_string() != std::string_view("mmproj")))
        files.format_error("not an mmproj file (general.architecture '" + std::string(arch && arch->as_string() ? *arch->as_string() : "") +
                           "', general.type '" + std::string(type && type->as_string() ? *type->as_string() : "") +
                           "'; expected 'clip' and 'mmproj')");
    Gemma4Config c = text;
    c.has_vision = f.contains("clip.has_vision_encoder") && f.get_bool("clip.has_vision_encoder");
    c.has_audio = f.contains("clip.has_audio_encoder") && f.get_bool("clip.has_audio_encoder");
    if (!c.has_vision && !c.has_audio) files.format_error("neither clip.has_vision_encoder nor clip.has_audio_encoder is true");
    const std::int64_t H = text.hidden_size;

    // Each encoder: its projector type, and the width it projects to, which is the text model's.
    const auto encoder = [&](const std::string& p, std::string_view projector, const char* projection) {
        const std::string key = f.contains(p + "projector_type") ? p + "projector_type" : "clip.projector_type";
        const std::string found(f.get_string(key));
        if (found != projector)
            files.config_error(key + " is '" + found + "'; Gemma 4 unified's is '" + std::string(projector) + "'");
        if (const auto dim = f.find_int(p + "projection_dim"); dim && *dim != H)
            files.shape_error(p + "projection_dim is " + std::to_string(*dim) + " but the text model's hidden size (gemma4.embedding_length) is " +
                              std::to_string(H));
        const GgufTensorInfo* t = f.find_tensor(projection);
        if (!t) files.shape_error(std::string("missing tensor '") + projection + "'");
        if (t->ne.size() != 2 || static_cast<std::int64_t>(t->ne[1]) != H)
            files.shape_error(std::string("tensor '") + projection + "' has " + detail::gguf_shape_string(*t) + ": it does not project to the text model's hidden size " +
                              std::to_string(H));
        return static_cast<std::int64_t>(t->ne[0]);
    };
    if (c.has_vision) {
        const std::int64_t E = encoder("clip.vision.", "gemma4uv", "mm.input_projection.weight");
        c.vision.patch_size = detail::gguf_positive(f, "clip.vision.patch_size", 1 << 10);
        c.vision.pooling_kernel_size = kGemma4uvPoolingKernel;
        c.vision.mm_embed_dim = E;
        if (const auto width = f.find_int("clip.vision.embedding_length"); width && *width != E)
            files.key_error("clip.vision.embedding_length", std::to_string(*width) + " differs from mm.input_projection.weight's input width " + std::to_string(E));
        const GgufTensorInfo* pos = f.find_tensor("v.position_embd.weight");
        if (!pos) files.shape_error("missing tensor 'v.position_embd.weight'");
        if (pos->ne.size() != 3 || static_cast<std::int64_t>(pos->ne[0]) != E || pos->ne[2] != 2 || pos->ne[1] < 1)
            files.shape_error("tensor 'v.position_embd.weight' has " + detail::gguf_shape_string(*pos) + "; expected ne [" + std::to_string(E) +
                              ", S, 2]");
        c.vision.mm_posemb_size = static_cast<std::int64_t>(pos->ne[1]);
        c.vision.rms_norm_eps = detail::mmproj_eps(f, "clip.vision.attention.layer_norm_epsilon");
        // The embedder takes pixels scaled to [0, 1] and normalizes each patch itself (its first
        // LayerNorm); a file asking for a per-channel normalization is not Gemma 4's.
        for (const auto& [key, identity] : {std::pair<const char*, double>{"clip.vision.image_mean", 0.0}, {"clip.vision.image_std", 1.0}}) {
            if (!f.contains(key)) continue;
            const GgufValue& v = f.get_array(key);
            for (std::size_t i = 0; i < v.size(); ++i)
                if (v.at(i).as_double() != identity)
                    files.key_error(key, "must be all " + std::to_string(static_cast<int>(identity)) +
                                         " (Gemma 4 rescales pixels by 1/255 and normalizes no channel)");
        }
    }
    if (c.has_audio) {
        c.audio.audio_embed_dim = encoder("clip.audio.", "gemma4ua", "mm.a.input_projection.weight");
        if (const auto width = f.find_int("clip.audio.embedding_length"); width && *width != c.audio.audio_embed_dim)
            files.key_error("clip.audio.embedding_length", std::to_string(*width) + " differs from mm.a.input_projection.weight's input width " +
                                                           std::to_string(c.audio.audio_embed_dim));
        c.audio.rms_norm_eps = detail::mmproj_eps(f, "clip.audio.attention.layer_norm_epsilon");
    }

    // The placeholder ids: the text model's vocabulary holds Gemma 4's multimodal tokens.
    const GgufValue* vocab = text_file.find("tokenizer.ggml.tokens");
    if (!vocab || !vocab->is_array() || vocab->element_type() != GgufValueType::String)
        files.config_error("the text model has no vocabulary (tokenizer.ggml.tokens), so no ids for the image and audio placeholders");
    for (const detail::MultimodalToken& token : detail::kMultimodalTokens) {
        const auto& pieces = vocab->strings();
        std::int64_t id = -1;
        for (std::size_t i = 0; i < pieces.size() && id < 0; ++i)
            if (pieces[i] == token.piece) id = static_cast<std::int64_t>(i);
        const bool needed = (token.for_vision && c.has_vision) || (token.for_audio && c.has_audio);
        if (id < 0 && needed)
            files.config_error(std::string("the text model's vocabulary has no '") + token.piece + "' token, which the mmproj's " +
                               (token.for_vision ? "image" : "audio") + " encoder needs");
        if (id >= c.vocab_size)
            files.config_error(std::string("the text model's '") + token.piece + "' is id " + std::to_string(id) + ", past its " +
                               std::to_string(c.vocab_size) + " embedding rows");
        if (id >= 0) c.tokens.*token.field = static_cast<std::int32_t>(id);
    }
    return c;
}

/// Adds the embedders of the mmproj file `mmproj` to `ck`, a text model loaded from a GGUF file
/// (its `directory`): the config (gguf_mmproj_config) and, when `options.multimodal`, the
/// weights, bound to `ck.weights.vision` / `audio` under the checkpoint's names and layout.
/// load_checkpoint calls it for LoadOptions::mmproj.
inline void load_gguf_mmproj(Checkpoint& ck, const std::filesystem::path& mmproj, const LoadOptions& options) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(ck.directory, ec))
        throw InvalidArgument(mmproj.string() + ": an mmproj goes with a GGUF model file; " + ck.directory.string() +
                              " is a checkpoint directory, which holds its own embedders");
    if (ck.config.has_vision || ck.config.has_audio)
        throw InvalidArgument(mmproj.string() + ": " + ck.directory.string() + " already has image or audio embedders");
    const GgufFile text_file(ck.directory);
    const detail::MmprojFiles files{ck.directory.string(), mmproj.string()};
    std::shared_ptr<const GgufFile> mapped;
    try {
        mapped = std::make_shared<const GgufFile>(mmproj);
    } catch (const FormatError& e) {
        throw FormatError(std::string(e.what()) + " (given as the mmproj of " + files.text + ")");
    } catch (const IoError& e) {
        throw IoError(std::string(e.what()) + " (given as the mmproj of " + files.text + ")");
    }
    const GgufFile& f = *mapped;
    Gemma4Config config = gguf_mmproj_config(ck.config, text_file, f);

    auto storage = std::make_shared<detail::MmprojStorage>();
    storage->text = ck.weights.storage;
    storage->mmproj = mapped;
    ModelWeights mm;
    const auto table = tensor_table(config, ck.text_prefix, mm);
    std::set<std::string> used;
    for (const TensorSpec& spec : table) {
        if (spec.group == TensorGroup::Text) continue;
        const detail::MmprojTensor* entry = nullptr;
        for (const auto& e : detail::kMmprojTensors)
            if (spec.name() == e.hf) entry = &e;
        if (!entry) throw ShapeError(files.prefix() + "no mmproj name for '" + spec.name() + "'");
        const GgufTensorInfo* t = f.find_tensor(entry->gguf);
        std::vector<std::int64_t> ne(spec.shape.rbegin(), spec.shape.rend());
        if (entry->layout == detail::MmprojLayout::PositionAxes) ne = {spec.shape[2], spec.shape[0], spec.shape[1]};
        if (!t) files.shape_error(std::string("missing tensor '") + entry->gguf + "' (expected ne " + shape_string(ne) + ")");
        if (std::vector<std::int64_t>(t->ne.begin(), t->ne.end()) != ne)
            files.shape_error(std::string("tensor '") + entry->gguf + "' has " + detail::gguf_shape_string(*t) + "; the metadata implies ne " +
                              shape_string(ne));
        used.insert(entry->gguf);
        *spec.field = detail::mmproj_view(f, *t, spec.name(), spec.shape, entry->layout, config.vision.model_patch_size(), storage->converted, files);
    }
    for (const GgufTensorInfo& t : f.tensors())
        if (!used.count(t.name)) files.shape_error("unexpected tensor '" + t.name + "' (not part of Gemma 4's image and audio embedders)");

    ck.config = config;
    if (options.multimodal) {
        ck.weights.vision = std::move(mm.vision);
        ck.weights.audio = std::move(mm.audio);
        ck.weights.storage = storage;
    }
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
