// The request's images and audio, decoded in memory with the library's decoders (nothing is
// read from disk or the network): PNG/JPEG → patches, WAV → 16 kHz frames.
#pragma once

#include "api_error.hpp"
#include "chat_request.hpp"

#include <gemma4/model/multimodal.hpp>
#include <gemma4/multimodal/audio.hpp>
#include <gemma4/multimodal/image_decode.hpp>
#include <gemma4/multimodal/image_patches.hpp>
#include <gemma4/multimodal/wav.hpp>

#include <vector>

namespace gemma4::server {

template <class T>
struct DecodedMedia {
    std::vector<ImageInput<T>> images;
    std::vector<AudioInput<T>> audios;
    std::vector<std::int64_t> image_tokens, audio_tokens;  ///< soft tokens of each, for expand_placeholders
};

/// Decodes every item; a broken file is a 400 that names the request field.
template <class T>
DecodedMedia<T> decode_media(const std::vector<MediaItem>& items, const Gemma4Config& config, int max_soft_tokens) {
    DecodedMedia<T> out;
    for (const MediaItem& item : items) {
        try {
            if (item.kind == MediaItem::Image) {
                if (!config.has_vision) throw ApiError(400, item.param + ": this model takes no images", "invalid_request_error", item.param);
                const RgbImage rgb = decode_image(item.bytes, item.param);
                const ImagePatches p = preprocess_image(rgb, ImagePreprocessOptions{.max_soft_tokens = max_soft_tokens,
                                                                                     .patch_size = static_cast<int>(config.vision.patch_size),
                                                                                     .pooling_kernel_size = static_cast<int>(config.vision.pooling_kernel_size)});
                out.images.push_back({std::vector<T>(p.values.begin(), p.values.end()), p.positions});
                out.image_tokens.push_back(out.images.back().num_tiles());
            } else {
                if (!config.has_audio) throw ApiError(400, item.param + ": this model takes no audio", "invalid_request_error", item.param);
                const AudioClip clip = decode_wav(item.bytes, item.param);
                const AudioPreprocessOptions o{.frame_size = config.audio.audio_embed_dim};
                const AudioFrames f = clip.sample_rate == o.sample_rate
                                          ? frame_audio(clip.samples, o.frame_size)
                                          : frame_audio(resample_audio(clip.samples, clip.sample_rate, o.sample_rate, o.resampler), o.frame_size);
                out.audios.push_back({std::vector<T>(f.values.begin(), f.values.end())});
                out.audio_tokens.push_back(f.num_frames);
            }
        } catch (const ApiError&) {
            throw;
        } catch (const Error& e) {  // FormatError / InvalidArgument from the decoders
            throw ApiError(400, item.param + ": " + e.what(), "invalid_request_error", item.param, "invalid_media");
        }
    }
    return out;
}

}  // namespace gemma4::server
