// From a decoded RGB image to the vision embedder's input (§4.1): the aspect-ratio-preserving
// target size, the resize, the 1/255 rescale and the cut into model patches. No file I/O and
// no image-library dependency; image.hpp adds decoding on top.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/multimodal/image_resize.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// The soft-token budgets the image processor accepts.
inline constexpr std::array<int, 5> kImageSoftTokenBudgets{70, 140, 280, 560, 1120};

/// Image preprocessing settings; the defaults are the 12B checkpoint's.
struct ImagePreprocessOptions {
    int max_soft_tokens = 280;
    int patch_size = 16;          // vision_config.patch_size
    int pooling_kernel_size = 3;  // vision_config.pooling_kernel_size
    BicubicVariant resize = BicubicVariant::torchvision;
    bool apply_exif_orientation = true;  // used by image.hpp when decoding files
};

/// A height and width in pixels.
struct ImageSize {
    std::int64_t height = 0;
    std::int64_t width = 0;
    friend bool operator==(const ImageSize&, const ImageSize&) = default;
};

/// One image as the vision embedder takes it: num_patches rows of patch_dim values in [0, 1]
/// (tile-local HWC rasters), and each row's tile position (x = column, y = row). No padding:
/// the decoder takes exactly num_patches soft tokens for this image.
struct ImagePatches {
    std::int64_t num_patches = 0;
    std::int64_t patch_dim = 0;
    std::int64_t grid_width = 0;   // tiles per row
    std::int64_t grid_height = 0;  // tiles per column
    std::vector<float> values;             // [num_patches, patch_dim]
    std::vector<std::int32_t> positions;  // [num_patches, 2] as (x, y)
};

/// `get_aspect_ratio_preserving_size`: the size the image is resized to, both sides multiples
/// of patch_size · pooling_kernel_size, area at most max_soft_tokens · pooling² · patch².
/// Throws InvalidArgument for a budget outside kImageSoftTokenBudgets or a degenerate image.
inline ImageSize aspect_ratio_preserving_size(std::int64_t height, std::int64_t width, int max_soft_tokens,
                                              int patch_size = 16, int pooling_kernel_size = 3) {
    if (std::find(kImageSoftTokenBudgets.begin(), kImageSoftTokenBudgets.end(), max_soft_tokens) ==
        kImageSoftTokenBudgets.end())
        throw InvalidArgument("max_soft_tokens must be one of 70, 140, 280, 560, 1120, got " +
                              std::to_string(max_soft_tokens));
    if (patch_size <= 0 || pooling_kernel_size <= 0 || patch_size > 4096 || pooling_kernel_size > 64)
        throw InvalidArgument("patch_size " + std::to_string(patch_size) + " and pooling_kernel_size " +
                              std::to_string(pooling_kernel_size) + " must be positive and sensible");
    if (height <= 0 || width <= 0 || height > kMaxImagePixels || width > kMaxImagePixels)
        throw InvalidArgument("cannot resize an image of " + std::to_string(width) + "x" + std::to_string(height));
    const std::int64_t max_patches = std::int64_t{max_soft_tokens} * pooling_kernel_size * pooling_kernel_size;
    const std::int64_t target_px = max_patches * patch_size * patch_size;
    const std::int64_t side = std::int64_t{patch_size} * pooling_kernel_size;
    // The same double operations, in the same order, as the reference's Python floats.
    const double factor = std::sqrt(static_cast<double>(target_px) / static_cast<double>(height * width));
    const double ideal_h = factor * static_cast<double>(height);
    const double ideal_w = factor * static_cast<double>(width);
    std::int64_t h = static_cast<std::int64_t>(std::floor(ideal_h / static_cast<double>(side))) * side;
    std::int64_t w = static_cast<std::int64_t>(std::floor(ideal_w / static_cast<double>(side))) * side;
    if (h == 0 && w == 0)
        throw InvalidArgument("an image of " + std::to_string(width) + "x" + std::to_string(height) +
                              " would be resized to 0x0");
    const std::int64_t max_side = (max_patches / (std::int64_t{pooling_kernel_size} * pooling_kernel_size)) * side;
    if (h == 0) {
        h = side;
        w = std::min(static_cast<std::int64_t>(std::floor(static_cast<double>(width) / static_cast<double>(height))) * side,
                     max_side);
    } else if (w == 0) {
        w = side;
        h = std::min(static_cast<std::int64_t>(std::floor(static_cast<double>(height) / static_cast<double>(width))) * side,
                     max_side);
    }
    if (h * w > target_px)
        throw InvalidArgument("resizing " + std::to_string(width) + "x" + std::to_string(height) + " to " +
                              std::to_string(w) + "x" + std::to_string(h) + " exceeds the budget of " +
                              std::to_string(max_patches) + " patches");
    return {h, w};
}

/// The rescale factor the reference multiplies by: float32(1/255), applied in float32
/// (`uint8_tensor * (1/255)`), which is not always the correctly rounded x / 255.
inline constexpr float kPixelRescale = static_cast<float>(1.0 / 255.0);

/// Rescales an RGB image to [0, 1] and cuts it into tile × tile patches in row-major tile order,
/// each flattened as (row, column, channel). Both sides must be multiples of tile.
inline ImagePatches patchify(const RgbImage& image, std::int64_t tile) {
    detail::check_rgb_image(image, "patchify");
    if (tile <= 0 || image.width % tile != 0 || image.height % tile != 0)
        throw InvalidArgument("patchify: image " + std::to_string(image.width) + "x" + std::to_string(image.height) +
                              " is not a whole number of " + std::to_string(tile) + "-pixel tiles");
    ImagePatches out;
    out.grid_width = image.width / tile;
    out.grid_height = image.height / tile;
    out.num_patches = out.grid_width * out.grid_height;
    out.patch_dim = tile * tile * 3;
    out.values.resize(static_cast<std::size_t>(out.num_patches * out.patch_dim));
    out.positions.resize(static_cast<std::size_t>(out.num_patches * 2));
    float* dst = out.values.data();
    for (std::int64_t ty = 0; ty < out.grid_height; ++ty)
        for (std::int64_t tx = 0; tx < out.grid_width; ++tx) {
            const std::int64_t n = ty * out.grid_width + tx;
            out.positions[static_cast<std::size_t>(2 * n)] = static_cast<std::int32_t>(tx);
            out.positions[static_cast<std::size_t>(2 * n + 1)] = static_cast<std::int32_t>(ty);
            for (std::int64_t r = 0; r < tile; ++r) {
                const std::uint8_t* src = image.pixels.data() + ((ty * tile + r) * image.width + tx * tile) * 3;
                for (std::int64_t i = 0; i < tile * 3; ++i) *dst++ = static_cast<float>(src[i]) * kPixelRescale;
            }
        }
    return out;
}

/// Steps 1–5 of §4.1 on a decoded image: target size, antialiased bicubic resize (skipped when
/// the size already matches), rescale, patchify into (patch_size · pooling_kernel_size)² tiles.
inline ImagePatches preprocess_image(const RgbImage& image, const ImagePreprocessOptions& options = {}) {
    detail::check_rgb_image(image, "preprocess_image");
    const ImageSize size = aspect_ratio_preserving_size(image.height, image.width, options.max_soft_tokens,
                                                        options.patch_size, options.pooling_kernel_size);
    const std::int64_t tile = std::int64_t{options.patch_size} * options.pooling_kernel_size;
    if (size.height == image.height && size.width == image.width) return patchify(image, tile);
    return patchify(resize_bicubic_antialias(image, size.width, size.height, options.resize), tile);
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
