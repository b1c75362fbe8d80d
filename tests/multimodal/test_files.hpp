// Writers for the PNG, JPEG and WAV files the multimodal tests decode (there is no network,
// so every input is made here), plus small file helpers.
#pragma once

#include <catch2/catch.hpp>

#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <png.h>
#include <jpeglib.h>

namespace gemma4::test {

inline std::filesystem::path tmp_path(const std::string& name) {
    const std::filesystem::path dir = std::filesystem::path(GEMMA4_TEST_TMP_DIR) / "multimodal";
    std::filesystem::create_directories(dir);
    return dir / name;
}

inline std::vector<unsigned char> read_bytes(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE(in);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::filesystem::path& path, const std::vector<unsigned char>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    REQUIRE(out);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out);
}

/// CRC-32 as PNG chunks use it (polynomial 0xEDB88320), for patching chunks in tests.
inline std::uint32_t png_crc(const unsigned char* p, std::size_t n) {
    std::uint32_t c = 0xFFFFFFFFu;
    for (std::size_t i = 0; i < n; ++i) {
        c ^= p[i];
        for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xFFFFFFFFu;
}

inline void put_be32(unsigned char* p, std::uint32_t v) {
    p[0] = static_cast<unsigned char>(v >> 24);
    p[1] = static_cast<unsigned char>(v >> 16);
    p[2] = static_cast<unsigned char>(v >> 8);
    p[3] = static_cast<unsigned char>(v);
}

// ---------------------------------------------------------------------------------------------
// PNG

struct PngSpec {
    std::uint32_t width = 0, height = 0;
    int bit_depth = 8;
    int color_type = PNG_COLOR_TYPE_RGB;
    bool interlaced = false;
    const png_color* palette = nullptr;
    int num_palette = 0;
    const png_byte* trans_alpha = nullptr;
    int num_trans = 0;
    const png_color_16* trans_color = nullptr;
};

// Plain data only (libpng long-jumps here on error).
inline int write_png_raw(std::FILE* f, const PngSpec* s, png_bytepp rows) {
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
    png_infop info = png ? png_create_info_struct(png) : nullptr;
    if (info == nullptr) {
        png_destroy_write_struct(&png, nullptr);
        return 1;
    }
    if (setjmp(png_jmpbuf(png)) != 0) {
        png_destroy_write_struct(&png, &info);
        return 1;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, s->width, s->height, s->bit_depth, s->color_type,
                 s->interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (s->palette) png_set_PLTE(png, info, s->palette, s->num_palette);
    if (s->trans_alpha || s->trans_color) png_set_tRNS(png, info, s->trans_alpha, s->num_trans, s->trans_color);
    png_write_info(png, info);
    png_write_image(png, rows);
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    return 0;
}

/// Packs one row of samples (already in the PNG's sample order) at the given bit depth:
/// sub-byte depths MSB first, 16-bit big-endian.
inline std::vector<unsigned char> pack_samples(const std::vector<unsigned>& samples, int depth) {
    std::vector<unsigned char> row;
    if (depth == 16) {
        for (unsigned v : samples) {
            row.push_back(static_cast<unsigned char>(v >> 8));
            row.push_back(static_cast<unsigned char>(v & 0xFF));
        }
    } else if (depth == 8) {
        for (unsigned v : samples) row.push_back(static_cast<unsigned char>(v));
    } else {
        const int per_byte = 8 / depth;
        row.assign((samples.size() + per_byte - 1) / per_byte, 0);
        for (std::size_t i = 0; i < samples.size(); ++i)
            row[i / per_byte] |= static_cast<unsigned char>(samples[i] << (8 - depth * (1 + static_cast<int>(i % per_byte))));
    }
    return row;
}

/// Writes a PNG whose rows are given as sample values (row-major, spec's channel order).
inline void write_png(const std::filesystem::path& path, const PngSpec& spec, const std::vector<unsigned>& samples) {
    const std::size_t per_row = samples.size() / spec.height;
    std::vector<std::vector<unsigned char>> packed;
    for (std::uint32_t y = 0; y < spec.height; ++y)
        packed.push_back(pack_samples(std::vector<unsigned>(samples.begin() + y * per_row, samples.begin() + (y + 1) * per_row),
                                      spec.bit_depth));
    std::vector<png_bytep> rows;
    for (auto& r : packed) rows.push_back(r.data());
    std::FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    const int rc = write_png_raw(f, &spec, rows.data());
    std::fclose(f);
    REQUIRE(rc == 0);
}

// ---------------------------------------------------------------------------------------------
// JPEG

struct JpegWriter {
    jpeg_compress_struct cinfo;
    jpeg_error_mgr err;
    std::jmp_buf jump;
};

inline void jpeg_writer_error(j_common_ptr cinfo) { std::longjmp(static_cast<JpegWriter*>(cinfo->client_data)->jump, 1); }

// Plain data only (libjpeg long-jumps here on error).
inline int write_jpeg_raw(JpegWriter* w, std::FILE* f, const unsigned char* pixels, int width, int height, int components,
                          int quality, bool full_chroma, bool progressive, const unsigned char* app1, unsigned app1_len) {
    w->cinfo.err = jpeg_std_error(&w->err);
    w->err.error_exit = jpeg_writer_error;
    w->cinfo.client_data = w;
    if (setjmp(w->jump) != 0) {
        jpeg_destroy_compress(&w->cinfo);
        return 1;
    }
    jpeg_create_compress(&w->cinfo);
    jpeg_stdio_dest(&w->cinfo, f);
    w->cinfo.image_width = static_cast<JDIMENSION>(width);
    w->cinfo.image_height = static_cast<JDIMENSION>(height);
    w->cinfo.input_components = components;
    w->cinfo.in_color_space = components == 3 ? JCS_RGB : components == 4 ? JCS_CMYK : JCS_GRAYSCALE;
    jpeg_set_defaults(&w->cinfo);
    jpeg_set_quality(&w->cinfo, quality, TRUE);
    if (full_chroma && components == 3) w->cinfo.comp_info[0].h_samp_factor = w->cinfo.comp_info[0].v_samp_factor = 1;
    if (progressive) jpeg_simple_progression(&w->cinfo);
    jpeg_start_compress(&w->cinfo, TRUE);
    if (app1) jpeg_write_marker(&w->cinfo, JPEG_APP0 + 1, app1, app1_len);
    while (w->cinfo.next_scanline < w->cinfo.image_height) {
        JSAMPROW row = const_cast<unsigned char*>(pixels) + static_cast<std::size_t>(w->cinfo.next_scanline) * width * components;
        jpeg_write_scanlines(&w->cinfo, &row, 1);
    }
    jpeg_finish_compress(&w->cinfo);
    jpeg_destroy_compress(&w->cinfo);
    return 0;
}

inline void write_jpeg(const std::filesystem::path& path, const std::vector<unsigned char>& pixels, int width, int height,
                       int components, int quality = 95, bool full_chroma = true,
                       const std::vector<unsigned char>& app1 = {}, bool progressive = false) {
    auto w = std::make_unique<JpegWriter>();
    std::FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    const int rc = write_jpeg_raw(w.get(), f, pixels.data(), width, height, components, quality, full_chroma, progressive,
                                  app1.empty() ? nullptr : app1.data(), static_cast<unsigned>(app1.size()));
    std::fclose(f);
    REQUIRE(rc == 0);
}

/// An EXIF APP1 payload holding only an Orientation tag (little- or big-endian TIFF).
inline std::vector<unsigned char> exif_orientation_payload(int orientation, bool little_endian = true) {
    std::vector<unsigned char> p = {'E', 'x', 'i', 'f', 0, 0};
    auto u16 = [&](unsigned v) {
        if (little_endian) p.insert(p.end(), {static_cast<unsigned char>(v), static_cast<unsigned char>(v >> 8)});
        else p.insert(p.end(), {static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)});
    };
    auto u32 = [&](std::uint32_t v) {
        if (little_endian) { u16(v & 0xFFFF); u16(v >> 16); }
        else { u16(v >> 16); u16(v & 0xFFFF); }
    };
    if (little_endian) p.insert(p.end(), {'I', 'I'});
    else p.insert(p.end(), {'M', 'M'});
    u16(42);
    u32(8);  // IFD0 right after the header
    u16(1);  // one entry
    u16(0x0112);
    u16(3);  // SHORT
    u32(1);
    u16(static_cast<unsigned>(orientation));
    u16(0);
    u32(0);  // no next IFD
    return p;
}

// ---------------------------------------------------------------------------------------------
// WAV

struct WavSpec {
    unsigned format_tag = 1;  // 1 PCM, 3 IEEE float, 0xFFFE extensible
    unsigned channels = 1;
    std::uint32_t sample_rate = 16000;
    unsigned bits = 16;
    int block_align = -1;            // -1: channels · bits / 8
    unsigned sub_format = 1;         // for 0xFFFE
    bool bad_guid = false;
    unsigned valid_bits = 0;         // for 0xFFFE; 0 → bits
    bool extra_chunks = false;       // a LIST chunk and an odd-sized chunk before 'data'
    bool fmt_after_data = false;
    int fmt_size = -1;               // -1: 16 (or 40 when extensible)
};

inline void put_le(std::vector<unsigned char>& b, std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) b.push_back(static_cast<unsigned char>(v >> (8 * i)));
}

inline std::vector<unsigned char> wav_bytes(const WavSpec& s, const std::vector<unsigned char>& data) {
    std::vector<unsigned char> fmt;
    const bool ext = s.format_tag == 0xFFFE;
    put_le(fmt, s.format_tag, 2);
    put_le(fmt, s.channels, 2);
    put_le(fmt, s.sample_rate, 4);
    const unsigned align = s.block_align >= 0 ? static_cast<unsigned>(s.block_align) : s.channels * s.bits / 8;
    put_le(fmt, std::uint64_t{s.sample_rate} * align, 4);
    put_le(fmt, align, 2);
    put_le(fmt, s.bits, 2);
    if (ext) {
        put_le(fmt, 22, 2);
        put_le(fmt, s.valid_bits ? s.valid_bits : s.bits, 2);
        put_le(fmt, s.channels == 2 ? 3 : 4, 4);
        put_le(fmt, s.sub_format, 2);
        const unsigned char tail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71};
        fmt.insert(fmt.end(), tail, tail + 14);
        if (s.bad_guid) fmt.back() ^= 0xFF;
    }
    if (s.fmt_size >= 0) fmt.resize(static_cast<std::size_t>(s.fmt_size), 0);
    auto chunk = [](std::vector<unsigned char>& out, const char* id, const std::vector<unsigned char>& body) {
        out.insert(out.end(), id, id + 4);
        put_le(out, body.size(), 4);
        out.insert(out.end(), body.begin(), body.end());
        if (body.size() % 2) out.push_back(0);
    };
    std::vector<unsigned char> body = {'W', 'A', 'V', 'E'};
    if (!s.fmt_after_data) chunk(body, "fmt ", fmt);
    if (s.extra_chunks) {
        chunk(body, "LIST", {'I', 'N', 'F', 'O', 'I', 'S', 'F', 'T', 4, 0, 0, 0, 't', 'e', 's', 't'});
        chunk(body, "junk", {1, 2, 3});  // odd size: one pad byte follows
    }
    chunk(body, "data", data);
    if (s.fmt_after_data) chunk(body, "fmt ", fmt);
    std::vector<unsigned char> file = {'R', 'I', 'F', 'F'};
    put_le(file, body.size(), 4);
    file.insert(file.end(), body.begin(), body.end());
    return file;
}

inline std::vector<unsigned char> pcm16_data(const std::vector<std::int16_t>& v) {
    std::vector<unsigned char> d;
    for (auto s : v) put_le(d, static_cast<std::uint16_t>(s), 2);
    return d;
}

inline std::vector<unsigned char> float32_data(const std::vector<float>& v) {
    std::vector<unsigned char> d;
    for (float f : v) {
        std::uint32_t u;
        std::memcpy(&u, &f, 4);
        put_le(d, u, 4);
    }
    return d;
}

}  // namespace gemma4::test
