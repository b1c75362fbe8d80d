// Image file → vision embedder input: decode (PNG/JPEG), then §4.1 preprocessing. Needs the
// CMake target gemma4::image.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/multimodal/image_decode.hpp>
#include <gemma4/multimodal/image_patches.hpp>
#include <gemma4/multimodal/image_resize.hpp>

#include <filesystem>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// Decodes an image file and turns it into patches (`ImagePatches`). Errors name the file:
/// IoError if it cannot be read, FormatError if it is not a valid PNG/JPEG, InvalidArgument
/// for bad options.
inline ImagePatches preprocess_image(const std::filesystem::path& path, const ImagePreprocessOptions& options = {}) {
    // Validate the options before touching the file so a bad budget is reported as such.
    (void)aspect_ratio_preserving_size(1, 1, options.max_soft_tokens, options.patch_size, options.pooling_kernel_size);
    const RgbImage image = load_image(path, ImageDecodeOptions{.apply_exif_orientation = options.apply_exif_orientation});
    try {
        return preprocess_image(image, options);
    } catch (const InvalidArgument& e) {
        throw InvalidArgument(path.string() + ": " + e.what());
    }
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
