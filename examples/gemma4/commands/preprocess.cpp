// `gemma4 preprocess-image` and `gemma4 preprocess-audio`: write the vision/audio embedder
// inputs of one file as .npy arrays, for inspection and for comparison with other
// implementations.
#include "../cli.hpp"

#include <gemma4/io/npy.hpp>
#include <gemma4/multimodal/audio.hpp>
#include <gemma4/multimodal/image.hpp>

#include <cstdint>
#include <cstdio>
#include <span>

namespace cmd_preprocess {

int preprocess_image_command(gemma4::cli::Args& args) {
    const std::string image = args.require("image");
    gemma4::ImagePreprocessOptions options;
    options.max_soft_tokens = args.number<int>("max-soft-tokens", options.max_soft_tokens);
    options.patch_size = args.number<int>("patch-size", options.patch_size);
    options.pooling_kernel_size = args.number<int>("pooling-kernel-size", options.pooling_kernel_size);
    options.apply_exif_orientation = !args.flag("ignore-exif-orientation");
    if (args.flag("pil-resize")) options.resize = gemma4::BicubicVariant::pil;
    const std::string out_patches = args.require("out-patches");
    const std::string out_positions = args.require("out-positions");
    args.finish();

    const gemma4::ImagePatches p = gemma4::preprocess_image(image, options);
    const std::int64_t patch_shape[] = {p.num_patches, p.patch_dim};
    const std::int64_t position_shape[] = {p.num_patches, 2};
    gemma4::write_npy<float>(out_patches, p.values, patch_shape);
    gemma4::write_npy<std::int32_t>(out_positions, p.positions, position_shape);
    std::printf("%s: %lld soft tokens (%lldx%lld tiles of %lld values)\n", image.c_str(),
                static_cast<long long>(p.num_patches), static_cast<long long>(p.grid_width),
                static_cast<long long>(p.grid_height), static_cast<long long>(p.patch_dim));
    return 0;
}

int preprocess_audio_command(gemma4::cli::Args& args) {
    const std::string audio = args.require("audio");
    gemma4::AudioPreprocessOptions options;
    options.frame_size = args.number<std::int64_t>("frame-size", options.frame_size);
    const std::string out_frames = args.require("out-frames");
    args.finish();

    const gemma4::AudioFrames f = gemma4::preprocess_audio(audio, options);
    const std::int64_t shape[] = {f.num_frames, f.frame_size};
    gemma4::write_npy<float>(out_frames, f.values, shape);
    std::printf("%s: %lld soft tokens (frames of %lld samples at %lld Hz)\n", audio.c_str(),
                static_cast<long long>(f.num_frames), static_cast<long long>(f.frame_size),
                static_cast<long long>(options.sample_rate));
    return 0;
}

using gemma4::cli::kRequired;

const gemma4::cli::Command image_command{
    "preprocess-image", "image file -> vision patches and positions as .npy",
    {
        {"image", "FILE", "PNG or JPEG image", kRequired},
        {"out-patches", "FILE", "float32 [N, patch values] .npy to write", kRequired},
        {"out-positions", "FILE", "int32 [N, 2] .npy of patch positions to write", kRequired},
        {"max-soft-tokens", "N", "soft tokens per image: 70, 140, 280 (default), 560 or 1120"},
        {"patch-size", "N", "patch side in pixels (default: 16)"},
        {"pooling-kernel-size", "N", "patches pooled per soft token, per side (default: 3)"},
        {"ignore-exif-orientation", "", "do not rotate by the EXIF orientation tag"},
        {"pil-resize", "", "resize with Pillow's bicubic instead of torchvision's"},
    },
    preprocess_image_command};
const gemma4::cli::Command audio_command{
    "preprocess-audio", "WAV file -> 16 kHz audio frames as .npy",
    {
        {"audio", "FILE", "WAV file", kRequired},
        {"out-frames", "FILE", "float32 [n, frame size] .npy to write", kRequired},
        {"frame-size", "N", "samples per frame (default: 640)"},
    },
    preprocess_audio_command};

}  // namespace cmd_preprocess
