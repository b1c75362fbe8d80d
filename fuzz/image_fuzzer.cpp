// PNG/JPEG decoding (libpng, libjpeg) from memory, then the vision preprocessing of what
// decoded. The pixel limit keeps each run small; the limit check itself is exercised too.
#include <gemma4/multimodal/image.hpp>
#include <gemma4/multimodal/image_decode.hpp>
#include <gemma4/multimodal/image_patches.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    gemma4::fuzz::expect_ok_or_error([&] {
        const gemma4::ImageDecodeOptions options{.max_pixels = 1 << 16,
                                                 .apply_exif_orientation = size > 0 && (data[size - 1] & 1)};
        const gemma4::RgbImage image = gemma4::decode_image(gemma4::fuzz::as_bytes(data, size), "fuzz-image", options);
        const gemma4::ImagePatches patches =
            // Small patches keep the resized image small (at most 70 · 4² pixels), so each run is
            // quick; the resize and patch code paths are the same as with the 12B's settings.
            gemma4::preprocess_image(image, {.max_soft_tokens = 70, .patch_size = 4, .pooling_kernel_size = 1});
        if (static_cast<std::int64_t>(patches.values.size()) != patches.num_patches * patches.patch_dim)
            gemma4::fuzz::fail("patch values do not match num_patches x patch_dim");
        for (const float v : patches.values)
            if (!(v >= 0.0f && v <= 1.0f)) gemma4::fuzz::fail("a patch value is outside [0, 1]");
    });
    return 0;
}
