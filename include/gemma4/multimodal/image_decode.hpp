// PNG and JPEG decoding to 8-bit RGB with libpng and libjpeg(-turbo). Needs the CMake target
// gemma4::image (links PNG::PNG and JPEG::JPEG).
//
// Both libraries report errors by long-jumping out of their callbacks. A longjmp that crosses
// a frame holding a C++ object with a destructor is undefined behaviour, so every call into
// the libraries happens in a small function whose locals are plain data, which does its own
// setjmp and returns a status; the C++ caller owns the library handles (RAII) and throws.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/io/mapped_file.hpp>
#include <gemma4/multimodal/image_resize.hpp>

#include <algorithm>
#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <png.h>
// jpeglib.h needs FILE and size_t declared first (<cstdio> above).
#include <jpeglib.h>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// Decoding limits and conversions.
struct ImageDecodeOptions {
    /// Files whose width · height exceeds this are rejected before any pixel memory is allocated.
    std::int64_t max_pixels = kMaxImagePixels;
    /// Rotate/flip JPEGs as their EXIF Orientation tag says, as the reference's `load_image`
    /// does (PIL `ImageOps.exif_transpose`).
    bool apply_exif_orientation = true;
};

namespace detail {

inline void check_decoded_size(std::uint64_t width, std::uint64_t height, std::int64_t max_pixels,
                               const std::string& name, const char* format) {
    if (width == 0 || height == 0)
        throw FormatError(name + ": " + format + " image has a zero dimension (" + std::to_string(width) + "x" +
                          std::to_string(height) + ")");
    const auto cap = static_cast<std::uint64_t>(std::clamp(max_pixels, std::int64_t{0}, kMaxImagePixels));
    if (width > cap || height > cap || width * height > cap)
        throw FormatError(name + ": " + format + " image of " + std::to_string(width) + "x" + std::to_string(height) +
                          " pixels exceeds the limit of " + std::to_string(cap) + " pixels");
}

// ---------------------------------------------------------------------------------------------
// PNG

// Plain data only: libpng long-jumps through the callbacks that use it.
struct PngReader {
    const unsigned char* data;
    std::size_t size;
    std::size_t pos;
    std::jmp_buf jump;
    char message[256];
};

inline void png_on_error(png_structp png, png_const_charp text) {
    auto* r = static_cast<PngReader*>(png_get_error_ptr(png));
    std::snprintf(r->message, sizeof r->message, "%s", text ? text : "libpng error");
    std::longjmp(r->jump, 1);
}

inline void png_on_warning(png_structp, png_const_charp) {}

inline void png_on_read(png_structp png, png_bytep out, png_size_t count) {
    auto* r = static_cast<PngReader*>(png_get_io_ptr(png));
    if (count > r->size - r->pos) png_error(png, "file is truncated");
    std::memcpy(out, r->data + r->pos, count);
    r->pos += count;
}

inline int png_create(PngReader* r, png_structp* png, png_infop* info) {
    if (setjmp(r->jump) != 0) return 1;
    *png = png_create_read_struct(PNG_LIBPNG_VER_STRING, r, png_on_error, png_on_warning);
    if (*png == nullptr) return 1;
    *info = png_create_info_struct(*png);
    return *info == nullptr ? 1 : 0;
}

// Reads the header and sets up conversion of every PNG colour type to 8-bit RGB: 16-bit
// samples keep their high byte (as PIL does for RGB), low-depth grey expands to 0..255,
// palettes are looked up, grey is replicated, alpha (and tRNS) is dropped.
inline int png_begin(PngReader* r, png_structp png, png_infop info, png_uint_32* width, png_uint_32* height) {
    if (setjmp(r->jump) != 0) return 1;
    png_set_read_fn(png, r, png_on_read);
    // Our own pixel cap applies instead of libpng's default 10^6 per side.
    png_set_user_limits(png, 0x7fffffffU, 0x7fffffffU);
    png_read_info(png, info);
    *width = png_get_image_width(png, info);
    *height = png_get_image_height(png, info);
    if (png_get_bit_depth(png, info) == 16) png_set_strip_16(png);
    if (png_get_color_type(png, info) == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if ((png_get_color_type(png, info) & PNG_COLOR_MASK_COLOR) == 0) {
        if (png_get_bit_depth(png, info) < 8) png_set_expand_gray_1_2_4_to_8(png);
        png_set_gray_to_rgb(png);
    }
    png_set_strip_alpha(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8 ||
        png_get_rowbytes(png, info) != static_cast<png_size_t>(*width) * 3)
        png_error(png, "unexpected pixel layout after conversion to RGB");
    return 0;
}

inline int png_finish(PngReader* r, png_structp png, png_bytepp rows) {
    if (setjmp(r->jump) != 0) return 1;
    png_read_image(png, rows);
    png_read_end(png, nullptr);
    return 0;
}

inline RgbImage decode_png(std::span<const std::byte> bytes, const std::string& name, std::int64_t max_pixels) {
    struct Handles {
        png_structp png = nullptr;
        png_infop info = nullptr;
        ~Handles() {
            if (png) png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
        }
    } h;
    auto reader = std::make_unique<PngReader>();
    reader->data = reinterpret_cast<const unsigned char*>(bytes.data());
    reader->size = bytes.size();
    if (png_create(reader.get(), &h.png, &h.info) != 0)
        throw Error(name + ": cannot initialise libpng (out of memory or library version mismatch)");
    png_uint_32 width = 0, height = 0;
    if (png_begin(reader.get(), h.png, h.info, &width, &height) != 0)
        throw FormatError(name + ": invalid PNG: " + reader->message);
    check_decoded_size(width, height, max_pixels, name, "PNG");
    RgbImage image{width, height, std::vector<std::uint8_t>(static_cast<std::size_t>(width) * height * 3)};
    std::vector<png_bytep> rows(height);
    for (png_uint_32 y = 0; y < height; ++y) rows[y] = image.pixels.data() + static_cast<std::size_t>(y) * width * 3;
    if (png_finish(reader.get(), h.png, rows.data()) != 0)
        throw FormatError(name + ": invalid PNG: " + reader->message);
    return image;
}

// ---------------------------------------------------------------------------------------------
// JPEG

// Plain data only, for the same reason as PngReader; reached through cinfo->client_data.
struct JpegState {
    jpeg_decompress_struct cinfo;
    jpeg_error_mgr err;
    jpeg_source_mgr src;
    std::jmp_buf jump;
    char message[JMSG_LENGTH_MAX + 32];
    bool created;
};

inline JpegState* jpeg_state(j_common_ptr cinfo) { return static_cast<JpegState*>(cinfo->client_data); }

inline void jpeg_on_error(j_common_ptr cinfo) {
    JpegState* s = jpeg_state(cinfo);
    (*cinfo->err->format_message)(cinfo, s->message);
    std::longjmp(s->jump, 1);
}

inline void jpeg_on_output(j_common_ptr) {}

[[noreturn]] inline void jpeg_truncated(j_decompress_ptr cinfo) {
    JpegState* s = jpeg_state(reinterpret_cast<j_common_ptr>(cinfo));
    std::snprintf(s->message, sizeof s->message, "file is truncated");
    std::longjmp(s->jump, 1);
}

// The whole file is handed over at once, so a request for more data means it ended early
// (libjpeg's own memory source would pad with a fake EOI and only warn).
inline void jpeg_src_init(j_decompress_ptr) {}
inline boolean jpeg_src_fill(j_decompress_ptr cinfo) { jpeg_truncated(cinfo); }
inline void jpeg_src_skip(j_decompress_ptr cinfo, long count) {
    if (count <= 0) return;
    if (static_cast<unsigned long>(count) > cinfo->src->bytes_in_buffer) jpeg_truncated(cinfo);
    cinfo->src->next_input_byte += count;
    cinfo->src->bytes_in_buffer -= static_cast<std::size_t>(count);
}
inline void jpeg_src_term(j_decompress_ptr) {}

inline int jpeg_begin(JpegState* s, const unsigned char* data, std::size_t size) {
    if (setjmp(s->jump) != 0) return 1;
    s->cinfo.err = jpeg_std_error(&s->err);
    s->err.error_exit = jpeg_on_error;
    s->err.output_message = jpeg_on_output;
    s->cinfo.client_data = s;
    s->created = true;  // jpeg_destroy_decompress is safe on a half-created object
    jpeg_create_decompress(&s->cinfo);
    s->src.next_input_byte = data;
    s->src.bytes_in_buffer = size;
    s->src.init_source = jpeg_src_init;
    s->src.fill_input_buffer = jpeg_src_fill;
    s->src.skip_input_data = jpeg_src_skip;
    s->src.resync_to_restart = jpeg_resync_to_restart;
    s->src.term_source = jpeg_src_term;
    s->cinfo.src = &s->src;
    jpeg_save_markers(&s->cinfo, JPEG_APP0 + 1, 0xFFFF);  // EXIF
    jpeg_read_header(&s->cinfo, TRUE);
    return 0;
}

inline int jpeg_finish(JpegState* s, unsigned char* pixels, std::size_t stride) {
    if (setjmp(s->jump) != 0) return 1;
    jpeg_start_decompress(&s->cinfo);
    if (s->cinfo.output_components != 3 || s->cinfo.output_width != s->cinfo.image_width ||
        s->cinfo.output_height != s->cinfo.image_height) {
        std::snprintf(s->message, sizeof s->message, "unexpected output layout");
        return 1;
    }
    while (s->cinfo.output_scanline < s->cinfo.output_height) {
        JSAMPROW row = pixels + static_cast<std::size_t>(s->cinfo.output_scanline) * stride;
        jpeg_read_scanlines(&s->cinfo, &row, 1);
    }
    jpeg_finish_decompress(&s->cinfo);
    return 0;
}

/// The EXIF Orientation (1..8) in an APP1 payload, or 1 when absent or unreadable.
inline int exif_orientation(const unsigned char* p, std::size_t n) {
    if (n < 6 || std::memcmp(p, "Exif\0\0", 6) != 0) return 1;
    const unsigned char* t = p + 6;
    const std::size_t len = n - 6;
    if (len < 8) return 1;
    const bool le = t[0] == 'I' && t[1] == 'I';
    if (!le && !(t[0] == 'M' && t[1] == 'M')) return 1;
    auto u16 = [&](std::size_t o) -> unsigned { return le ? t[o] | (t[o + 1] << 8) : (t[o] << 8) | t[o + 1]; };
    auto u32 = [&](std::size_t o) -> std::uint32_t {
        return le ? std::uint32_t(t[o]) | std::uint32_t(t[o + 1]) << 8 | std::uint32_t(t[o + 2]) << 16 | std::uint32_t(t[o + 3]) << 24
                  : std::uint32_t(t[o]) << 24 | std::uint32_t(t[o + 1]) << 16 | std::uint32_t(t[o + 2]) << 8 | std::uint32_t(t[o + 3]);
    };
    if (u16(2) != 42) return 1;
    const std::uint32_t ifd = u32(4);
    if (ifd > len - 2 || ifd < 8) return 1;
    const unsigned entries = u16(ifd);
    for (unsigned i = 0; i < entries; ++i) {
        const std::size_t e = ifd + 2 + std::size_t{i} * 12;
        if (e + 12 > len) return 1;
        if (u16(e) == 0x0112) {
            const unsigned v = (u16(e + 2) == 3 && u32(e + 4) == 1) ? u16(e + 8) : 1;
            return v >= 1 && v <= 8 ? static_cast<int>(v) : 1;
        }
    }
    return 1;
}

/// Applies an EXIF orientation like PIL's exif_transpose (2 mirror, 3 rotate 180, 4 flip,
/// 5 transpose, 6 rotate 90° clockwise, 7 transverse, 8 rotate 90° counter-clockwise).
inline RgbImage apply_orientation(RgbImage src, int orientation) {
    if (orientation <= 1 || orientation > 8) return src;
    const std::int64_t W = src.width, H = src.height;
    const bool swap = orientation >= 5;
    RgbImage dst{swap ? H : W, swap ? W : H, std::vector<std::uint8_t>(src.pixels.size())};
    for (std::int64_t y = 0; y < dst.height; ++y)
        for (std::int64_t x = 0; x < dst.width; ++x) {
            std::int64_t sx = x, sy = y;
            switch (orientation) {
                case 2: sx = W - 1 - x; break;
                case 3: sx = W - 1 - x; sy = H - 1 - y; break;
                case 4: sy = H - 1 - y; break;
                case 5: sx = y; sy = x; break;
                case 6: sx = y; sy = H - 1 - x; break;
                case 7: sx = W - 1 - y; sy = H - 1 - x; break;
                case 8: sx = W - 1 - y; sy = x; break;
            }
            std::memcpy(&dst.pixels[static_cast<std::size_t>((y * dst.width + x) * 3)],
                        &src.pixels[static_cast<std::size_t>((sy * W + sx) * 3)], 3);
        }
    return dst;
}

inline RgbImage decode_jpeg(std::span<const std::byte> bytes, const std::string& name, const ImageDecodeOptions& options) {
    struct Owner {
        std::unique_ptr<JpegState> s = std::make_unique<JpegState>();
        ~Owner() {
            if (s->created) jpeg_destroy_decompress(&s->cinfo);
        }
    } owner;
    JpegState* s = owner.s.get();
    if (jpeg_begin(s, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()) != 0)
        throw FormatError(name + ": invalid JPEG: " + s->message);
    const J_COLOR_SPACE space = s->cinfo.jpeg_color_space;
    if (space == JCS_CMYK || space == JCS_YCCK)
        throw FormatError(name + ": CMYK JPEG images are not supported");
    if (space != JCS_GRAYSCALE && space != JCS_YCbCr && space != JCS_RGB)
        throw FormatError(name + ": JPEG colour space " + std::to_string(static_cast<int>(space)) + " is not supported");
    check_decoded_size(s->cinfo.image_width, s->cinfo.image_height, options.max_pixels, name, "JPEG");
    int orientation = 1;
    for (jpeg_saved_marker_ptr m = s->cinfo.marker_list; m != nullptr; m = m->next)
        if (m->marker == JPEG_APP0 + 1) {
            orientation = exif_orientation(m->data, m->data_length);
            if (orientation != 1) break;
        }
    s->cinfo.out_color_space = JCS_RGB;
    RgbImage image{s->cinfo.image_width, s->cinfo.image_height,
                   std::vector<std::uint8_t>(static_cast<std::size_t>(s->cinfo.image_width) * s->cinfo.image_height * 3)};
    if (jpeg_finish(s, image.pixels.data(), static_cast<std::size_t>(image.width) * 3) != 0)
        throw FormatError(name + ": invalid JPEG: " + s->message);
    return options.apply_exif_orientation ? apply_orientation(std::move(image), orientation) : image;
}

}  // namespace detail

/// Decodes a PNG or JPEG held in memory to RGB (see docs/multimodal.md for the conversions).
/// `name` identifies the source in error messages. Throws FormatError for anything malformed,
/// truncated, too large or in another format.
inline RgbImage decode_image(std::span<const std::byte> bytes, const std::string& name,
                             const ImageDecodeOptions& options = {}) {
    const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
    const std::size_t n = bytes.size();
    if (n == 0) throw FormatError(name + ": file is empty");
    if (n >= 8 && std::memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0) return detail::decode_png(bytes, name, options.max_pixels);
    if (n >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return detail::decode_jpeg(bytes, name, options);
    const char* known = nullptr;
    if (n >= 4 && (std::memcmp(b, "GIF8", 4) == 0)) known = "GIF";
    else if (n >= 12 && std::memcmp(b, "RIFF", 4) == 0 && std::memcmp(b + 8, "WEBP", 4) == 0) known = "WebP";
    else if (n >= 2 && b[0] == 'B' && b[1] == 'M') known = "BMP";
    else if (n >= 4 && (std::memcmp(b, "II*\0", 4) == 0 || std::memcmp(b, "MM\0*", 4) == 0)) known = "TIFF";
    if (known) throw FormatError(name + ": " + known + " images are not supported (PNG or JPEG only)");
    throw FormatError(name + ": not a PNG or JPEG file (unrecognised or truncated signature)");
}

/// Reads and decodes a PNG or JPEG file. IoError if it cannot be opened, FormatError otherwise.
inline RgbImage load_image(const std::filesystem::path& path, const ImageDecodeOptions& options = {}) {
    const MappedFile file(path);
    return decode_image(file.bytes(), path.string(), options);
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
