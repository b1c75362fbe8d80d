// From preprocessed images and audio to a step's soft tokens: embed each with the checkpoint's
// embedders, expand prompt placeholders, and lay out rows and image blocks in id order.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/layers/embedders.hpp>
#include <gemma4/model/model.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// One image as the embedder takes it: tiles [n, patch_values] and their (x, y) positions.
template <class T>
struct ImageInput {
    std::vector<T> patches;
    std::vector<std::int32_t> positions;
    std::int64_t num_tiles() const { return static_cast<std::int64_t>(positions.size() / 2); }
};

/// One audio clip: frames [n, audio_embed_dim].
template <class T>
struct AudioInput {
    std::vector<T> frames;
    std::int64_t num_frames(std::int64_t frame_size) const { return static_cast<std::int64_t>(frames.size()) / frame_size; }
};

/// Soft-token rows and blocks for a prompt's ids (owning; view them with `view()`).
template <class T>
struct SoftTokenPlan {
    std::vector<T> rows;
    std::vector<std::int32_t> blocks;
    SoftTokens<T> view() const { return {rows, blocks}; }
    /// The part for ids [begin, end) of the prompt, given how many placeholder rows precede it.
    SoftTokens<T> slice(std::size_t begin, std::size_t end, std::int64_t rows_before, std::int64_t rows_in, std::int64_t hidden) const {
        return {std::span<const T>(rows).subspan(static_cast<std::size_t>(rows_before * hidden), static_cast<std::size_t>(rows_in * hidden)),
                blocks.empty() ? std::span<const std::int32_t>() : std::span<const std::int32_t>(blocks).subspan(begin, end - begin)};
    }
};

/// Replaces every single `<|image|>` / `<|audio|>` placeholder of a rendered prompt by
/// `<|image>` + n × `<|image|>` + `<image|>` (or the audio equivalent), n = that input's soft
/// token count, in order of appearance (spec §4.4).
inline std::vector<std::int32_t> expand_placeholders(std::span<const std::int32_t> ids, const TokenIds& tok,
                                                     std::span<const std::int64_t> image_tokens, std::span<const std::int64_t> audio_tokens) {
    std::vector<std::int32_t> out;
    std::size_t image = 0, audio = 0;
    for (std::int32_t id : ids) {
        if (id == tok.image) {
            if (image >= image_tokens.size())
                throw InvalidArgument("prompt has more image placeholders than images (" + std::to_string(image_tokens.size()) + ")");
            out.push_back(tok.boi);
            out.insert(out.end(), static_cast<std::size_t>(image_tokens[image++]), tok.image);
            out.push_back(tok.eoi);
        } else if (id == tok.audio) {
            if (audio >= audio_tokens.size())
                throw InvalidArgument("prompt has more audio placeholders than audio clips (" + std::to_string(audio_tokens.size()) + ")");
            out.push_back(tok.boa);
            out.insert(out.end(), static_cast<std::size_t>(audio_tokens[audio++]), tok.audio);
            out.push_back(tok.eoa);
        } else if (id == tok.video) {
            throw InvalidArgument("video input is not supported");
        } else {
            out.push_back(id);
        }
    }
    if (image != image_tokens.size())
        throw InvalidArgument(std::to_string(image_tokens.size()) + " images given but the prompt has " + std::to_string(image) + " image placeholders");
    if (audio != audio_tokens.size())
        throw InvalidArgument(std::to_string(audio_tokens.size()) + " audio clips given but the prompt has " + std::to_string(audio) +
                              " audio placeholders");
    return out;
}

/// Embeds the images and audio and lays their rows out in the order their placeholder runs
/// appear in `ids` (already expanded: one placeholder id per soft token). Each image's run is
/// one bidirectional block; audio stays causal.
template <class T, class Model>
SoftTokenPlan<T> plan_soft_tokens(const Model& model, std::span<const std::int32_t> ids, std::span<const ImageInput<T>> images,
                                  std::span<const AudioInput<T>> audios) {
    const Gemma4Config& c = model.config();
    const std::int64_t H = c.hidden_size;
    std::vector<std::vector<T>> image_rows, audio_rows;
    if (!images.empty()) {
        const VisionEmbedder<T> vision(c, model.weights().vision);
        for (const auto& im : images) image_rows.push_back(vision(im.patches, im.positions, model.pool()));
    }
    if (!audios.empty()) {
        const AudioEmbedder<T> audio(c, model.weights().audio);
        for (const auto& a : audios) audio_rows.push_back(audio(a.frames, model.pool()));
    }
    SoftTokenPlan<T> plan;
    plan.blocks.assign(ids.size(), -1);
    std::size_t image = 0, audio = 0;
    std::int64_t used = 0;  // rows used from the current input
    for (std::size_t i = 0; i < ids.size(); ++i) {
        const bool is_image = ids[i] == c.tokens.image, is_audio = ids[i] == c.tokens.audio;
        if (!is_image && !is_audio) continue;
        const bool run_start = i == 0 || ids[i - 1] != ids[i];
        auto& list = is_image ? image_rows : audio_rows;
        std::size_t& which = is_image ? image : audio;
        if (run_start && used != 0) throw InvalidArgument("soft tokens: a placeholder run is shorter than its input");
        if (which >= list.size())
            throw InvalidArgument(std::string("soft tokens: more ") + (is_image ? "image" : "audio") + " placeholder runs than inputs");
        const std::vector<T>& rows = list[which];
        plan.rows.insert(plan.rows.end(), rows.begin() + used * H, rows.begin() + (used + 1) * H);
        if (is_image) plan.blocks[i] = static_cast<std::int32_t>(which);
        if (++used * H == static_cast<std::int64_t>(rows.size())) {
            used = 0;
            ++which;
        }
    }
    if (used != 0 || image != image_rows.size() || audio != audio_rows.size())
        throw InvalidArgument("soft tokens: the placeholder ids do not match the images and audio given (counts differ)");
    return plan;
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
