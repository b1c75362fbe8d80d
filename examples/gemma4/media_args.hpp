// Images and audio on the command line: files (`--image`, `--audio`, for generate and chat) or
// preprocessed arrays (`--image-patches`/`--image-positions`, `--audio-frames`, for logits).
#pragma once

#include "cli.hpp"

#include <gemma4/io/npy.hpp>
#include <gemma4/model/multimodal.hpp>
#include <gemma4/multimodal/audio.hpp>
#include <gemma4/multimodal/image.hpp>

#include <vector>

namespace gemma4::cli {

template <class T>
struct Media {
    std::vector<ImageInput<T>> images;
    std::vector<AudioInput<T>> audios;
    bool empty() const { return images.empty() && audios.empty(); }

    std::vector<std::int64_t> image_tokens() const {
        std::vector<std::int64_t> n;
        for (const auto& im : images) n.push_back(im.num_tiles());
        return n;
    }
    std::vector<std::int64_t> audio_tokens(std::int64_t frame_size) const {
        std::vector<std::int64_t> n;
        for (const auto& a : audios) n.push_back(a.num_frames(frame_size));
        return n;
    }
};

/// The options `read_media_files` reads.
inline Options media_file_options() {
    return {
        {"image", "FILE", "PNG or JPEG image for the next <|image|> of the prompt", kRepeatable},
        {"audio", "FILE", "WAV file for the next <|audio|> of the prompt", kRepeatable},
        {"max-soft-tokens", "N", "soft tokens per image: 70, 140, 280 (default), 560 or 1120"},
    };
}

/// --image FILE (PNG/JPEG) and --audio FILE (WAV), repeatable; --max-soft-tokens per image.
template <class T>
Media<T> read_media_files(Args& args, const Gemma4Config& c) {
    Media<T> media;
    const int budget = args.number<int>("max-soft-tokens", 280);
    for (const auto& path : args.get_all("image")) {
        const ImagePatches p = preprocess_image(path, ImagePreprocessOptions{.max_soft_tokens = budget,
                                                                             .patch_size = static_cast<int>(c.vision.patch_size),
                                                                             .pooling_kernel_size = static_cast<int>(c.vision.pooling_kernel_size)});
        media.images.push_back({std::vector<T>(p.values.begin(), p.values.end()), p.positions});
    }
    for (const auto& path : args.get_all("audio")) {
        const AudioFrames f = preprocess_audio(path, AudioPreprocessOptions{.frame_size = c.audio.audio_embed_dim});
        media.audios.push_back({std::vector<T>(f.values.begin(), f.values.end())});
    }
    return media;
}

/// The options `read_media_arrays` reads.
inline Options media_array_options() {
    return {
        {"image-patches", "FILE", "float32 [N, patch values] .npy of one image (see preprocess-image)", kRepeatable},
        {"image-positions", "FILE", "int32 [N, 2] .npy of the same image's patch positions", kRepeatable},
        {"audio-frames", "FILE", "float32 [n, frame size] .npy of one audio clip (see preprocess-audio)", kRepeatable},
    };
}

/// --image-patches P.npy --image-positions POS.npy (pairs, repeatable), --audio-frames F.npy.
template <class T>
Media<T> read_media_arrays(Args& args, const Gemma4Config& c) {
    Media<T> media;
    const auto patches = args.get_all("image-patches"), positions = args.get_all("image-positions");
    if (patches.size() != positions.size())
        throw InvalidArgument(args.command() + ": every --image-patches needs its --image-positions");
    for (std::size_t i = 0; i < patches.size(); ++i) {
        const auto p = read_npy<float>(patches[i]);
        const auto pos = read_npy<std::int32_t>(positions[i]);
        if (p.shape.size() != 2 || p.shape[1] != c.vision.patch_values())
            throw ShapeError(patches[i] + ": expected float32 [N, " + std::to_string(c.vision.patch_values()) + "]");
        if (pos.shape != std::vector<std::int64_t>{p.shape[0], 2})
            throw ShapeError(positions[i] + ": expected int32 [" + std::to_string(p.shape[0]) + ", 2]");
        media.images.push_back({std::vector<T>(p.data.begin(), p.data.end()), pos.data});
    }
    for (const auto& path : args.get_all("audio-frames")) {
        const auto f = read_npy<float>(path);
        if (f.shape.size() != 2 || f.shape[1] != c.audio.audio_embed_dim)
            throw ShapeError(path + ": expected float32 [n, " + std::to_string(c.audio.audio_embed_dim) + "]");
        media.audios.push_back({std::vector<T>(f.data.begin(), f.data.end())});
    }
    return media;
}

/// Where a step may end in [start, size): at most `chunk` ids, never inside an image block.
inline std::size_t chunk_end(std::span<const std::int32_t> blocks, std::size_t start, std::size_t size, std::size_t chunk) {
    std::size_t end = std::min(size, start + chunk);
    while (!blocks.empty() && end < size && blocks[end] >= 0 && blocks[end] == blocks[end - 1]) ++end;
    return end;
}

}  // namespace gemma4::cli
