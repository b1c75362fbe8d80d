// PNG/JPEG decoding: every colour type converts to the expected RGB, JPEG stays close to the
// pixels it was made from, EXIF orientation, and every malformed input is a named error.
#include "test_files.hpp"

#include <gemma4/multimodal/image_decode.hpp>

#include <cmath>
#include <cstdlib>

using namespace gemma4;
using gemma4::test::PngSpec;
using gemma4::test::tmp_path;

namespace {

// A deterministic pattern with every value in [0, max].
unsigned pattern(std::uint32_t x, std::uint32_t y, unsigned c, unsigned max) {
    return (x * 37u + y * 101u + c * 59u + (x * y) % 13u) % (max + 1);
}

RgbImage expected_from(std::uint32_t w, std::uint32_t h, auto rgb_of) {
    RgbImage img{w, h, std::vector<std::uint8_t>(std::size_t{w} * h * 3)};
    for (std::uint32_t y = 0; y < h; ++y)
        for (std::uint32_t x = 0; x < w; ++x)
            for (unsigned c = 0; c < 3; ++c) img.pixels[(std::size_t{y} * w + x) * 3 + c] = static_cast<std::uint8_t>(rgb_of(x, y, c));
    return img;
}

void require_same(const RgbImage& got, const RgbImage& want) {
    REQUIRE(got.width == want.width);
    REQUIRE(got.height == want.height);
    REQUIRE(got.pixels == want.pixels);
}

// Writes a PNG with `channels` samples per pixel from `sample(x, y, c)` and checks the decoded
// RGB against `rgb(x, y, c)`.
void check_png(const std::string& file, PngSpec spec, int channels, auto sample, auto rgb) {
    std::vector<unsigned> samples;
    for (std::uint32_t y = 0; y < spec.height; ++y)
        for (std::uint32_t x = 0; x < spec.width; ++x)
            for (int c = 0; c < channels; ++c) samples.push_back(sample(x, y, static_cast<unsigned>(c)));
    const auto path = tmp_path(file);
    gemma4::test::write_png(path, spec, samples);
    require_same(load_image(path), expected_from(spec.width, spec.height, rgb));
}

}  // namespace

TEST_CASE("PNG colour types decode to exact RGB", "[multimodal][image][png]") {
    SECTION("RGB 8-bit, odd size") {
        check_png("rgb8.png", {.width = 37, .height = 23}, 3, [](auto x, auto y, auto c) { return pattern(x, y, c, 255); },
                  [](auto x, auto y, auto c) { return pattern(x, y, c, 255); });
    }
    SECTION("RGB 8-bit, Adam7 interlaced") {
        check_png("rgb8_interlaced.png", {.width = 19, .height = 11, .interlaced = true}, 3,
                  [](auto x, auto y, auto c) { return pattern(x, y, c, 255); },
                  [](auto x, auto y, auto c) { return pattern(x, y, c, 255); });
    }
    SECTION("RGBA 8-bit: alpha is dropped, colour kept as stored") {
        check_png("rgba8.png", {.width = 13, .height = 9, .color_type = PNG_COLOR_TYPE_RGB_ALPHA}, 4,
                  [](auto x, auto y, auto c) { return c == 3 ? (x * 20u + y) % 256u : pattern(x, y, c, 255); },
                  [](auto x, auto y, auto c) { return pattern(x, y, c, 255); });
    }
    SECTION("grey 8-bit is replicated") {
        check_png("gray8.png", {.width = 17, .height = 5, .color_type = PNG_COLOR_TYPE_GRAY}, 1,
                  [](auto x, auto y, auto) { return pattern(x, y, 0, 255); },
                  [](auto x, auto y, auto) { return pattern(x, y, 0, 255); });
    }
    SECTION("grey + alpha 8-bit") {
        check_png("gray_alpha8.png", {.width = 6, .height = 7, .color_type = PNG_COLOR_TYPE_GRAY_ALPHA}, 2,
                  [](auto x, auto y, auto c) { return c == 1 ? 17u * x : pattern(x, y, 0, 255); },
                  [](auto x, auto y, auto) { return pattern(x, y, 0, 255); });
    }
    for (int depth : {1, 2, 4}) {
        DYNAMIC_SECTION("grey " << depth << "-bit expands to 0..255") {
            const unsigned max = (1u << depth) - 1;
            check_png("gray" + std::to_string(depth) + ".png",
                      {.width = 11, .height = 3, .bit_depth = depth, .color_type = PNG_COLOR_TYPE_GRAY}, 1,
                      [=](auto x, auto y, auto) { return pattern(x, y, 0, max); },
                      [=](auto x, auto y, auto) { return pattern(x, y, 0, max) * 255u / max; });
        }
    }
    SECTION("16-bit samples keep their high byte") {
        check_png("rgb16.png", {.width = 9, .height = 4, .bit_depth = 16}, 3,
                  [](auto x, auto y, auto c) { return pattern(x, y, c, 65535) * 257u % 65536u; },
                  [](auto x, auto y, auto c) { return (pattern(x, y, c, 65535) * 257u % 65536u) >> 8; });
        check_png("rgba16.png", {.width = 5, .height = 6, .bit_depth = 16, .color_type = PNG_COLOR_TYPE_RGB_ALPHA}, 4,
                  [](auto x, auto y, auto c) { return c == 3 ? 1000u * x : pattern(x, y, c, 65535) * 31u % 65536u; },
                  [](auto x, auto y, auto c) { return (pattern(x, y, c, 65535) * 31u % 65536u) >> 8; });
        check_png("gray16.png", {.width = 7, .height = 3, .bit_depth = 16, .color_type = PNG_COLOR_TYPE_GRAY}, 1,
                  [](auto x, auto y, auto) { return 9000u * x + 13u * y; },
                  [](auto x, auto y, auto) { return (9000u * x + 13u * y) >> 8; });
        check_png("gray_alpha16.png", {.width = 4, .height = 4, .bit_depth = 16, .color_type = PNG_COLOR_TYPE_GRAY_ALPHA}, 2,
                  [](auto x, auto y, auto c) { return c == 1 ? 0u : 16000u * x + y; },
                  [](auto x, auto y, auto) { return (16000u * x + y) >> 8; });
    }
    static const png_color palette[5] = {{0, 0, 0}, {255, 0, 0}, {10, 200, 30}, {7, 8, 9}, {255, 255, 255}};
    SECTION("palette 8-bit and 4-bit") {
        check_png("palette8.png",
                  {.width = 10, .height = 10, .color_type = PNG_COLOR_TYPE_PALETTE, .palette = palette, .num_palette = 5}, 1,
                  [](auto x, auto y, auto) { return (x + 2 * y) % 5u; },
                  [](auto x, auto y, auto c) {
                      const png_color& p = palette[(x + 2 * y) % 5u];
                      return c == 0 ? p.red : c == 1 ? p.green : p.blue;
                  });
        check_png("palette4.png",
                  {.width = 7, .height = 3, .bit_depth = 4, .color_type = PNG_COLOR_TYPE_PALETTE, .palette = palette,
                   .num_palette = 5},
                  1, [](auto x, auto y, auto) { return (x * y) % 5u; },
                  [](auto x, auto y, auto c) {
                      const png_color& p = palette[(x * y) % 5u];
                      return c == 0 ? p.red : c == 1 ? p.green : p.blue;
                  });
    }
    SECTION("transparency (tRNS) is dropped too") {
        static const png_byte alpha[3] = {0, 128, 255};
        check_png("palette_trns.png",
                  {.width = 8, .height = 2, .color_type = PNG_COLOR_TYPE_PALETTE, .palette = palette, .num_palette = 5,
                   .trans_alpha = alpha, .num_trans = 3},
                  1, [](auto x, auto, auto) { return x % 5u; },
                  [](auto x, auto, auto c) {
                      const png_color& p = palette[x % 5u];
                      return c == 0 ? p.red : c == 1 ? p.green : p.blue;
                  });
        static const png_color_16 key{0, 0, 0, 0, 40};
        check_png("gray_trns.png", {.width = 8, .height = 2, .color_type = PNG_COLOR_TYPE_GRAY, .trans_color = &key}, 1,
                  [](auto x, auto, auto) { return 20u * x; }, [](auto x, auto, auto) { return 20u * x; });
    }
}

TEST_CASE("JPEG decodes close to the encoded pixels", "[multimodal][image][jpeg]") {
    const int w = 45, h = 31;
    std::vector<unsigned char> rgb(std::size_t{w} * h * 3);
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x)
            for (int c = 0; c < 3; ++c)
                rgb[(std::size_t(y) * w + x) * 3 + c] = static_cast<unsigned char>(c == 0 ? 5 * x : c == 1 ? 8 * y : 128 + 2 * (x - y));
    auto mean_and_max = [](const std::vector<std::uint8_t>& a, const std::vector<unsigned char>& b) {
        double sum = 0;
        int worst = 0;
        for (std::size_t i = 0; i < a.size(); ++i) {
            const int d = std::abs(int(a[i]) - int(b[i]));
            sum += d;
            worst = std::max(worst, d);
        }
        return std::pair{sum / static_cast<double>(a.size()), worst};
    };
    SECTION("colour, 4:4:4, quality 98") {
        const auto path = tmp_path("gradient.jpg");
        gemma4::test::write_jpeg(path, rgb, w, h, 3, 98);
        const RgbImage img = load_image(path);
        REQUIRE(img.width == w);
        REQUIRE(img.height == h);
        const auto [mean, worst] = mean_and_max(img.pixels, rgb);
        CHECK(mean < 1.5);
        CHECK(worst <= 12);
    }
    SECTION("colour, 4:2:0, quality 90") {
        const auto path = tmp_path("gradient420.jpg");
        gemma4::test::write_jpeg(path, rgb, w, h, 3, 90, false);
        const auto [mean, worst] = mean_and_max(load_image(path).pixels, rgb);
        CHECK(mean < 3.0);
        CHECK(worst <= 40);
    }
    SECTION("progressive JPEG decodes like the baseline one") {
        const auto base = tmp_path("baseline.jpg"), prog = tmp_path("progressive.jpg");
        gemma4::test::write_jpeg(base, rgb, w, h, 3, 90);
        gemma4::test::write_jpeg(prog, rgb, w, h, 3, 90, true, {}, true);
        CHECK(gemma4::test::read_bytes(base) != gemma4::test::read_bytes(prog));
        CHECK(load_image(prog).pixels == load_image(base).pixels);
    }
    SECTION("greyscale JPEG is replicated to RGB") {
        std::vector<unsigned char> gray(std::size_t{w} * h);
        for (int y = 0; y < h; ++y)
            for (int x = 0; x < w; ++x) gray[std::size_t(y) * w + x] = static_cast<unsigned char>(3 * x + 4 * y);
        const auto path = tmp_path("gray.jpg");
        gemma4::test::write_jpeg(path, gray, w, h, 1, 98);
        const RgbImage img = load_image(path);
        int worst = 0;
        for (int i = 0; i < w * h; ++i) {
            CHECK(img.pixels[3 * i] == img.pixels[3 * i + 1]);
            CHECK(img.pixels[3 * i] == img.pixels[3 * i + 2]);
            worst = std::max(worst, std::abs(int(img.pixels[3 * i]) - int(gray[i])));
        }
        CHECK(worst <= 4);
    }
}

TEST_CASE("EXIF orientation follows PIL's exif_transpose", "[multimodal][image][jpeg]") {
    // a b c / d e f, each pixel a distinct grey
    const RgbImage src = expected_from(3, 2, [](auto x, auto y, auto) { return 10 * (y * 3 + x + 1); });
    auto grid = [](const RgbImage& img) {
        std::vector<int> v;
        for (std::size_t i = 0; i < img.pixels.size(); i += 3) v.push_back(img.pixels[i] / 10);
        return std::tuple{img.width, img.height, v};
    };
    using T = std::tuple<std::int64_t, std::int64_t, std::vector<int>>;
    CHECK(grid(detail::apply_orientation(src, 1)) == T{3, 2, {1, 2, 3, 4, 5, 6}});
    CHECK(grid(detail::apply_orientation(src, 2)) == T{3, 2, {3, 2, 1, 6, 5, 4}});
    CHECK(grid(detail::apply_orientation(src, 3)) == T{3, 2, {6, 5, 4, 3, 2, 1}});
    CHECK(grid(detail::apply_orientation(src, 4)) == T{3, 2, {4, 5, 6, 1, 2, 3}});
    CHECK(grid(detail::apply_orientation(src, 5)) == T{2, 3, {1, 4, 2, 5, 3, 6}});
    CHECK(grid(detail::apply_orientation(src, 6)) == T{2, 3, {4, 1, 5, 2, 6, 3}});
    CHECK(grid(detail::apply_orientation(src, 7)) == T{2, 3, {6, 3, 5, 2, 4, 1}});
    CHECK(grid(detail::apply_orientation(src, 8)) == T{2, 3, {3, 6, 2, 5, 1, 4}});

    const int w = 24, h = 16;
    std::vector<unsigned char> rgb(std::size_t{w} * h * 3);
    for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<unsigned char>((i * 7) % 251);
    for (bool little_endian : {true, false}) {
        const auto path = tmp_path(little_endian ? "exif6_le.jpg" : "exif6_be.jpg");
        gemma4::test::write_jpeg(path, rgb, w, h, 3, 95, true, gemma4::test::exif_orientation_payload(6, little_endian));
        const RgbImage raw = load_image(path, {.apply_exif_orientation = false});
        const RgbImage turned = load_image(path);
        REQUIRE(raw.width == w);
        REQUIRE(turned.width == h);
        REQUIRE(turned.height == w);
        CHECK(turned.pixels == detail::apply_orientation(raw, 6).pixels);
    }
    CHECK(detail::exif_orientation(reinterpret_cast<const unsigned char*>("Exif\0\0II*\0\xff\xff\xff\x7f"), 14) == 1);
    CHECK(detail::exif_orientation(reinterpret_cast<const unsigned char*>("Exif\0"), 5) == 1);
}

TEST_CASE("malformed images are FormatErrors naming the file", "[multimodal][image][errors]") {
    std::vector<unsigned> samples(20 * 10 * 3);
    for (std::size_t i = 0; i < samples.size(); ++i) samples[i] = static_cast<unsigned>((i * 31) % 256);
    const auto png_path = tmp_path("valid.png");
    gemma4::test::write_png(png_path, {.width = 20, .height = 10}, samples);
    const auto png = gemma4::test::read_bytes(png_path);
    std::vector<unsigned char> rgb(32 * 16 * 3, 100);
    const auto jpg_path = tmp_path("valid.jpg");
    gemma4::test::write_jpeg(jpg_path, rgb, 32, 16, 3);
    const auto jpg = gemma4::test::read_bytes(jpg_path);

    auto write = [](const std::string& name, const std::vector<unsigned char>& bytes) {
        const auto p = tmp_path(name);
        gemma4::test::write_bytes(p, bytes);
        return p.string();
    };
    auto prefix = [](const std::vector<unsigned char>& v, std::size_t n) { return std::vector<unsigned char>(v.begin(), v.begin() + n); };

    SECTION("missing file") {
        const std::string p = tmp_path("does_not_exist.png").string();
        REQUIRE_THROWS_AS(load_image(p), IoError);
        REQUIRE_THROWS_WITH(load_image(p), Catch::Contains(p));
    }
    SECTION("zero-size file") {
        const auto p = write("empty.png", {});
        REQUIRE_THROWS_AS(load_image(p), FormatError);
        REQUIRE_THROWS_WITH(load_image(p), Catch::Contains(p) && Catch::Contains("empty"));
    }
    SECTION("truncated PNG, at several points") {
        for (std::size_t n : {std::size_t{5}, std::size_t{8}, std::size_t{20}, std::size_t{40}, png.size() / 2, png.size() - 13, png.size() - 1}) {
            const auto p = write("truncated.png", prefix(png, n));
            INFO("kept " << n << " of " << png.size() << " bytes");
            REQUIRE_THROWS_AS(load_image(p), FormatError);
            REQUIRE_THROWS_WITH(load_image(p), Catch::Contains(p));
            if (n > 8) REQUIRE_THROWS_WITH(load_image(p), Catch::Contains("truncated"));
        }
    }
    SECTION("PNG with a corrupted IDAT") {
        auto bad = png;
        bad[bad.size() - 20] ^= 0x5A;  // inside the IDAT payload or its CRC
        const auto p = write("corrupt.png", bad);
        REQUIRE_THROWS_AS(load_image(p), FormatError);
        REQUIRE_THROWS_WITH(load_image(p), Catch::Contains(p) && Catch::Contains("invalid PNG"));
    }
    SECTION("PNG with absurd dimensions is rejected before allocating") {
        auto big = png;
        gemma4::test::put_be32(&big[16], 100000);  // IHDR width
        gemma4::test::put_be32(&big[20], 100000);  // IHDR height
        gemma4::test::put_be32(&big[29], gemma4::test::png_crc(&big[12], 17));
        const auto p = write("huge.png", big);
        REQUIRE_THROWS_AS(load_image(p), FormatError);
        REQUIRE_THROWS_WITH(load_image(p), Catch::Contains(p) && Catch::Contains("100000x100000") &&
                                               Catch::Contains("exceeds the limit"));
        REQUIRE_THROWS_WITH(load_image(png_path, {.max_pixels = 199}), Catch::Contains("exceeds the limit of 199"));
        auto zero = png;
        gemma4::test::put_be32(&zero[16], 0);
        gemma4::test::put_be32(&zero[29], gemma4::test::png_crc(&zero[12], 17));
        REQUIRE_THROWS_AS(load_image(write("zero_width.png", zero)), FormatError);
    }
    SECTION("truncated JPEG") {
        for (std::size_t n : {std::size_t{3}, std::size_t{30}, jpg.size() / 2, jpg.size() - 2}) {
            const auto p = write("truncated.jpg", prefix(jpg, n));
            INFO("kept " << n << " of " << jpg.size() << " bytes");
            REQUIRE_THROWS_AS(load_image(p), FormatError);
            REQUIRE_THROWS_WITH(load_image(p), Catch::Contains(p) && Catch::Contains("truncated"));
        }
    }
    SECTION("JPEG with garbage after the signature") {
        std::vector<unsigned char> bad = {0xFF, 0xD8, 0xFF, 0x00, 'n', 'o', 'p', 'e', 0, 0, 0, 0};
        const auto p = write("garbage.jpg", bad);
        REQUIRE_THROWS_AS(load_image(p), FormatError);
        REQUIRE_THROWS_WITH(load_image(p), Catch::Contains(p) && Catch::Contains("invalid JPEG"));
    }
    SECTION("JPEG with absurd dimensions is rejected before allocating") {
        auto big = jpg;
        std::size_t sof = 2;
        while (sof + 9 < big.size() && !(big[sof] == 0xFF && big[sof + 1] == 0xC0)) ++sof;
        REQUIRE(sof + 9 < big.size());
        big[sof + 5] = 0xEA;  // height 60000
        big[sof + 6] = 0x60;
        big[sof + 7] = 0xEA;  // width 60000
        big[sof + 8] = 0x60;
        const auto p = write("huge.jpg", big);
        REQUIRE_THROWS_AS(load_image(p), FormatError);
        REQUIRE_THROWS_WITH(load_image(p), Catch::Contains(p) && Catch::Contains("60000x60000"));
        REQUIRE_THROWS_WITH(load_image(jpg_path, {.max_pixels = 100}), Catch::Contains("exceeds the limit of 100"));
    }
    SECTION("CMYK JPEG is rejected") {
        const auto p = tmp_path("cmyk.jpg").string();
        gemma4::test::write_jpeg(p, std::vector<unsigned char>(8 * 8 * 4, 60), 8, 8, 4);
        REQUIRE_THROWS_AS(load_image(p), FormatError);
        REQUIRE_THROWS_WITH(load_image(p), Catch::Contains(p) && Catch::Contains("CMYK"));
    }
    SECTION("unsupported formats") {
        const auto gif = write("image.gif", {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0, 0, 0});
        REQUIRE_THROWS_AS(load_image(gif), FormatError);
        REQUIRE_THROWS_WITH(load_image(gif), Catch::Contains(gif) && Catch::Contains("GIF images are not supported"));
        const auto webp = write("image.webp", {'R', 'I', 'F', 'F', 4, 0, 0, 0, 'W', 'E', 'B', 'P'});
        REQUIRE_THROWS_WITH(load_image(webp), Catch::Contains("WebP"));
        const auto text = write("image.txt", {'h', 'e', 'l', 'l', 'o'});
        REQUIRE_THROWS_AS(load_image(text), FormatError);
        REQUIRE_THROWS_WITH(load_image(text), Catch::Contains(text) && Catch::Contains("not a PNG or JPEG"));
    }
}
