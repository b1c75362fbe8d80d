// 8-bit RGB images and the antialiased bicubic resize of the image preprocessing (§4.1 step 2).
//
// The reference processor resizes the uint8 tensor with torchvision, which on the CPU runs
// ATen's native uint8 path (`_upsample_bicubic2d_aa`, UpSampleKernel.cpp). That path is the
// PIL `ImagingResample` design — separable passes, Keys cubic a = -0.5, support scaled by the
// downscale factor, weights normalised per output pixel, window clamped to the image — carried
// out in fixed point: per axis the double weights become int16 with a precision chosen from
// the largest weight, sums are integers with a +0.5 bias, and the horizontal pass is rounded
// and clamped to uint8 before the vertical one. We reproduce that arithmetic so that resized
// pixels are bit-identical; docs/multimodal.md lists the steps. PIL's own `Image.resize(...,
// BICUBIC)` differs only in the weight quantisation (fixed 22-bit int32 weights) and is
// available as BicubicVariant::pil.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// An 8-bit RGB image, rows top to bottom, pixels interleaved (HWC).
struct RgbImage {
    std::int64_t width = 0;
    std::int64_t height = 0;
    std::vector<std::uint8_t> pixels;  // [height, width, 3]

    std::uint8_t at(std::int64_t y, std::int64_t x, int c) const {
        return pixels[static_cast<std::size_t>((y * width + x) * 3 + c)];
    }
};

/// Largest image (width · height) the library creates or accepts: 2^28 pixels (768 MiB RGB).
inline constexpr std::int64_t kMaxImagePixels = std::int64_t{1} << 28;

/// Whose fixed-point weight quantisation to reproduce; all else is common to both.
enum class BicubicVariant {
    torchvision,  // ATen's uint8 kernel, used by torchvision (and so the reference processor)
    pil,          // Pillow's ImagingResample (the reference's PIL backend)
};

namespace detail {

/// Keys' cubic convolution kernel with a = -0.5 (PIL `bicubic_filter`, ATen `aa_filter`).
inline double bicubic_kernel(double x) {
    constexpr double a = -0.5;
    x = std::abs(x);
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    return 0.0;
}

/// Fixed-point resampling coefficients for one axis: output i reads input[start[i] + k] for
/// k < count[i] with weight weights[i * taps + k] / 2^precision.
struct ResampleAxis {
    std::int64_t taps = 0;
    unsigned precision = 0;
    std::vector<std::int64_t> start;
    std::vector<std::int64_t> count;
    std::vector<std::int32_t> weights;
};

// Mirrors ATen `_compute_index_ranges_int16_weights` (antialias, align_corners false, no
// explicit scale) or Pillow's `precompute_coeffs` + `normalize_coeffs_8bpc`, including their
// truncating casts, so the integer weights come out identical.
inline ResampleAxis bicubic_axis(std::int64_t in_size, std::int64_t out_size, BicubicVariant variant) {
    const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
    const double support = scale >= 1.0 ? 2.0 * scale : 2.0;
    const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    ResampleAxis axis;
    axis.taps = static_cast<std::int64_t>(std::ceil(support)) * 2 + 1;
    axis.start.resize(static_cast<std::size_t>(out_size));
    axis.count.resize(static_cast<std::size_t>(out_size));
    std::vector<double> w(static_cast<std::size_t>(out_size * axis.taps), 0.0);
    double w_max = 0.0;
    for (std::int64_t i = 0; i < out_size; ++i) {
        const double center = scale * (static_cast<double>(i) + 0.5);
        const std::int64_t lo = std::max(static_cast<std::int64_t>(center - support + 0.5), std::int64_t{0});
        const std::int64_t n =
            std::clamp(std::min(static_cast<std::int64_t>(center + support + 0.5), in_size) - lo, std::int64_t{0}, axis.taps);
        double* wi = w.data() + i * axis.taps;
        double total = 0.0;
        for (std::int64_t k = 0; k < n; ++k) {
            wi[k] = bicubic_kernel((static_cast<double>(k + lo) - center + 0.5) * invscale);
            total += wi[k];
        }
        if (total != 0.0)
            for (std::int64_t k = 0; k < n; ++k) {
                wi[k] /= total;
                w_max = std::max(w_max, wi[k]);
            }
        axis.start[static_cast<std::size_t>(i)] = lo;
        axis.count[static_cast<std::size_t>(i)] = n;
    }
    unsigned p = 22;  // Pillow: 32 - 8 - 2 bits, int32 weights
    if (variant == BicubicVariant::torchvision) {
        // ATen: the largest precision (at most 22 bits) at which the largest weight fits int16.
        for (p = 0; p < 22; ++p)
            if (static_cast<int>(0.5 + w_max * static_cast<double>(1 << (p + 1))) >= (1 << 15)) break;
    }
    axis.precision = p;
    axis.weights.resize(w.size());
    for (std::size_t k = 0; k < w.size(); ++k) {
        const double v = w[k] * static_cast<double>(1 << p);
        axis.weights[k] = v < 0 ? static_cast<int>(-0.5 + v) : static_cast<int>(0.5 + v);
    }
    return axis;
}

inline std::uint8_t fixed_point_to_u8(std::int32_t acc, unsigned precision) {
    return static_cast<std::uint8_t>(std::clamp(acc >> precision, 0, 255));
}

inline RgbImage resize_rows(const RgbImage& src, std::int64_t out_width, BicubicVariant variant) {
    const ResampleAxis ax = bicubic_axis(src.width, out_width, variant);
    RgbImage dst{out_width, src.height, std::vector<std::uint8_t>(static_cast<std::size_t>(out_width * src.height * 3))};
    const std::int32_t bias = std::int32_t{1} << (ax.precision - 1);
    for (std::int64_t y = 0; y < src.height; ++y) {
        const std::uint8_t* row = src.pixels.data() + y * src.width * 3;
        std::uint8_t* out = dst.pixels.data() + y * out_width * 3;
        for (std::int64_t x = 0; x < out_width; ++x) {
            const std::int32_t* w = ax.weights.data() + x * ax.taps;
            const std::uint8_t* in = row + ax.start[static_cast<std::size_t>(x)] * 3;
            std::int32_t acc[3] = {bias, bias, bias};
            for (std::int64_t k = 0; k < ax.count[static_cast<std::size_t>(x)]; ++k)
                for (int c = 0; c < 3; ++c) acc[c] += static_cast<std::int32_t>(in[k * 3 + c]) * w[k];
            for (int c = 0; c < 3; ++c) out[x * 3 + c] = fixed_point_to_u8(acc[c], ax.precision);
        }
    }
    return dst;
}

inline RgbImage resize_columns(const RgbImage& src, std::int64_t out_height, BicubicVariant variant) {
    const ResampleAxis ax = bicubic_axis(src.height, out_height, variant);
    const std::int64_t row_len = src.width * 3;
    RgbImage dst{src.width, out_height, std::vector<std::uint8_t>(static_cast<std::size_t>(row_len * out_height))};
    const std::int32_t bias = std::int32_t{1} << (ax.precision - 1);
    std::vector<std::int32_t> acc(static_cast<std::size_t>(row_len));
    for (std::int64_t y = 0; y < out_height; ++y) {
        std::fill(acc.begin(), acc.end(), bias);
        const std::int32_t* w = ax.weights.data() + y * ax.taps;
        const std::int64_t y0 = ax.start[static_cast<std::size_t>(y)];
        for (std::int64_t k = 0; k < ax.count[static_cast<std::size_t>(y)]; ++k) {
            const std::uint8_t* in = src.pixels.data() + (y0 + k) * row_len;
            for (std::int64_t i = 0; i < row_len; ++i) acc[static_cast<std::size_t>(i)] += static_cast<std::int32_t>(in[i]) * w[k];
        }
        std::uint8_t* out = dst.pixels.data() + y * row_len;
        for (std::int64_t i = 0; i < row_len; ++i) out[i] = fixed_point_to_u8(acc[static_cast<std::size_t>(i)], ax.precision);
    }
    return dst;
}

inline void check_rgb_image(const RgbImage& image, const char* what) {
    if (image.width <= 0 || image.height <= 0 || image.width > kMaxImagePixels / image.height)
        throw InvalidArgument(std::string(what) + ": image size " + std::to_string(image.width) + "x" +
                              std::to_string(image.height) + " is empty or too large");
    if (image.pixels.size() != static_cast<std::size_t>(image.width * image.height * 3))
        throw InvalidArgument(std::string(what) + ": image has " + std::to_string(image.pixels.size()) +
                              " bytes, " + std::to_string(image.width) + "x" + std::to_string(image.height) +
                              " RGB needs " + std::to_string(image.width * image.height * 3));
}

}  // namespace detail

/// Resizes to out_width × out_height with antialiased bicubic interpolation, bit-identical to
/// torchvision `resize(uint8 tensor, BICUBIC, antialias=True)` on the CPU (or, with
/// BicubicVariant::pil, to PIL `Image.resize(size, BICUBIC)`). Width is resampled first (to
/// uint8), then height; an axis whose size does not change is not touched, and an image
/// already of the requested size is returned unchanged.
inline RgbImage resize_bicubic_antialias(const RgbImage& src, std::int64_t out_width, std::int64_t out_height,
                                         BicubicVariant variant = BicubicVariant::torchvision) {
    detail::check_rgb_image(src, "resize_bicubic_antialias");
    if (out_width <= 0 || out_height <= 0 || out_width > kMaxImagePixels / out_height)
        throw InvalidArgument("resize_bicubic_antialias: output size " + std::to_string(out_width) + "x" +
                              std::to_string(out_height) + " is empty or too large");
    if (out_width == src.width && out_height == src.height) return src;
    if (out_height == src.height) return detail::resize_rows(src, out_width, variant);
    if (out_width == src.width) return detail::resize_columns(src, out_height, variant);
    return detail::resize_columns(detail::resize_rows(src, out_width, variant), out_height, variant);
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
