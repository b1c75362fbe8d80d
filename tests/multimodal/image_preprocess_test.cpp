// Target size, antialiased bicubic resize, rescale and patchify (§4.1), and the whole
// file → patches pipeline.
#include "test_files.hpp"

#include <gemma4/detail/random.hpp>
#include <gemma4/multimodal/image.hpp>
#include <gemma4/multimodal/image_patches.hpp>
#include <gemma4/multimodal/image_resize.hpp>

#include <cmath>

using namespace gemma4;

namespace {

// --- An independent double-precision reference of the PIL-style antialiased bicubic -------
// Written from the definition: each output pixel is the direct 2-D sum over the input of
// k_y(y, i) · k_x(x, j) · in(i, j), with k the Keys cubic (a = -0.5) stretched by the
// downscale factor, restricted to the window [center ± support] clamped to the image and
// normalised to sum 1. No fixed point, no intermediate rounding.

double keys(double t) {
    t = std::fabs(t);
    if (t < 1) return 1.5 * t * t * t - 2.5 * t * t + 1;
    if (t < 2) return -0.5 * t * t * t + 2.5 * t * t - 4 * t + 2;
    return 0;
}

std::vector<std::vector<double>> weight_matrix(int in, int out) {
    const double scale = double(in) / out;
    const double stretch = std::max(scale, 1.0);
    const double support = 2 * stretch;
    std::vector<std::vector<double>> m(out, std::vector<double>(in, 0.0));
    for (int o = 0; o < out; ++o) {
        const double center = (o + 0.5) * scale;
        const int lo = std::max(0, int(center - support + 0.5));
        const int hi = std::min(in, int(center + support + 0.5));
        double sum = 0;
        for (int i = lo; i < hi; ++i) sum += m[o][i] = keys((i + 0.5 - center) / stretch);
        for (int i = lo; i < hi; ++i) m[o][i] /= sum;
    }
    return m;
}

std::vector<double> reference_resize(const RgbImage& src, int out_w, int out_h) {
    const auto wx = weight_matrix(int(src.width), out_w);
    const auto wy = weight_matrix(int(src.height), out_h);
    std::vector<double> out(std::size_t(out_w) * out_h * 3);
    for (int y = 0; y < out_h; ++y)
        for (int x = 0; x < out_w; ++x)
            for (int c = 0; c < 3; ++c) {
                double acc = 0;
                for (int i = 0; i < src.height; ++i) {
                    if (wy[y][i] == 0) continue;
                    for (int j = 0; j < src.width; ++j) acc += wy[y][i] * wx[x][j] * src.at(i, j, c);
                }
                out[(std::size_t(y) * out_w + x) * 3 + c] = acc;
            }
    return out;
}

RgbImage make_image(std::int64_t w, std::int64_t h, auto f) {
    RgbImage img{w, h, std::vector<std::uint8_t>(std::size_t(w * h * 3))};
    for (std::int64_t y = 0; y < h; ++y)
        for (std::int64_t x = 0; x < w; ++x)
            for (int c = 0; c < 3; ++c) img.pixels[std::size_t((y * w + x) * 3 + c)] = static_cast<std::uint8_t>(f(x, y, c));
    return img;
}

}  // namespace

TEST_CASE("target size follows get_aspect_ratio_preserving_size", "[multimodal][image][size]") {
    // (height, width, budget) → (height, width), values from the reference formula in Python.
    struct Case {
        std::int64_t h, w;
        int budget;
        ImageSize want;
    };
    const Case cases[] = {
        {480, 640, 280, {672, 912}},       // the usual photo: 14 × 19 = 266 tokens
        {100, 100, 280, {768, 768}},       // upscaled (factor > 1)
        {768, 768, 280, {768, 768}},       // already the right size
        {1080, 1920, 1120, {1200, 2112}},  //
        {3000, 4000, 70, {336, 432}},      //
        {4000, 3000, 140, {624, 480}},     //
        {333, 777, 560, {720, 1728}},      //
        {23, 37, 280, {624, 1008}},        //
        {7, 3, 280, {1200, 480}},          //
        {1, 1, 70, {384, 384}},            //
        {1, 279, 280, {48, 13392}},        // just above the h = 0 branch
        {10, 10000, 280, {48, 13440}},     // h = 0 branch: 48 × min(floor(W/H)·48, 280·48)
        {1, 281, 280, {48, 13440}},        // h = 0 branch, capped
        {2, 561, 280, {48, 13440}},        // h = 0 branch, both bounds equal
        {1, 100, 70, {48, 3360}},          // h = 0 branch, budget 70
        {10000, 10, 280, {13440, 48}},     // w = 0 branch
        {10, 10000, 1120, {48, 50784}},    //
    };
    for (const auto& c : cases) {
        INFO(c.h << "x" << c.w << " budget " << c.budget);
        const ImageSize got = aspect_ratio_preserving_size(c.h, c.w, c.budget);
        CHECK(got == c.want);
        CHECK(got.height % 48 == 0);
        CHECK(got.width % 48 == 0);
        CHECK((got.height / 48) * (got.width / 48) <= c.budget);
    }
    CHECK(aspect_ratio_preserving_size(480, 640, 280, 4, 2) == ImageSize{112, 152});  // tiny checkpoint geometry

    for (int bad : {0, 69, 100, 281, 2240, -280}) {
        REQUIRE_THROWS_AS(aspect_ratio_preserving_size(480, 640, bad), InvalidArgument);
        REQUIRE_THROWS_WITH(aspect_ratio_preserving_size(480, 640, bad),
                            Catch::Contains("max_soft_tokens") && Catch::Contains(std::to_string(bad)));
    }
    REQUIRE_THROWS_AS(aspect_ratio_preserving_size(0, 640, 280), InvalidArgument);
    REQUIRE_THROWS_AS(aspect_ratio_preserving_size(480, 640, 280, 0, 3), InvalidArgument);
}

TEST_CASE("bicubic antialiased resize matches a direct double evaluation", "[multimodal][image][resize]") {
    gemma4::detail::SplitMix64 rng{1234};
    // Values kept inside [48, 207] so the first pass never overshoots 0..255: its clamp would
    // otherwise (legitimately) differ from the unclamped 2-D sum.
    const RgbImage noise = make_image(53, 41, [&](auto, auto, auto) { return 48 + static_cast<int>(rng.next() % 160); });
    const RgbImage smooth = make_image(53, 41, [](auto x, auto y, auto c) { return 128 + 100 * std::sin(0.2 * x + 0.3 * y + c); });
    struct Size {
        int w, h;
    };
    // Down- and upscaling on each axis, mixed, odd factors, and one axis unchanged.
    const Size sizes[] = {{24, 17}, {13, 40}, {96, 96}, {106, 20}, {53, 9}, {7, 41}, {1, 1}, {200, 3}};
    for (const RgbImage* src : {&noise, &smooth})
        for (const Size s : sizes) {
            INFO((src == &noise ? "noise " : "smooth ") << "53x41 -> " << s.w << "x" << s.h);
            for (BicubicVariant variant : {BicubicVariant::torchvision, BicubicVariant::pil}) {
            const RgbImage got = resize_bicubic_antialias(*src, s.w, s.h, variant);
            REQUIRE(got.width == s.w);
            REQUIRE(got.height == s.h);
            const std::vector<double> want = reference_resize(*src, s.w, s.h);
            // Our result rounds twice (after each pass, like torchvision's uint8 kernel) and uses
            // 16-bit weights; against the exact value that costs at most 0.5 (first rounding,
            // carried through weights whose absolute sum is below 1.3) + 0.5 (final rounding)
            // + weight quantisation: never more than 1.5, so 1 level after rounding in almost
            // every pixel and 2 at most.
            double worst = 0, sum = 0;
            for (std::size_t i = 0; i < want.size(); ++i) {
                const double exact = std::clamp(want[i], 0.0, 255.0);
                const double err = std::fabs(got.pixels[i] - exact);
                worst = std::max(worst, err);
                sum += err;
            }
            CHECK(worst <= 1.5);
            CHECK(sum / double(want.size()) < 0.5);
            }
        }
}

TEST_CASE("the PIL variant is bit-identical to Pillow's Image.resize(BICUBIC)", "[multimodal][image][resize]") {
    // FNV-1a hashes (and first/last bytes) of Pillow 9.4's output for this 53x41 pattern.
    const RgbImage src = make_image(53, 41, [](auto x, auto y, auto c) { return (x * 37 + y * 101 + c * 59 + (x * y) % 13) % 256; });
    struct Golden {
        int w, h;
        std::uint64_t fnv1a;
        int first, last;
    };
    const Golden golden[] = {
        {24, 17, 0x9e6b735df05dacd1ULL, 101, 139}, {13, 40, 0x1649964bb81b6252ULL, 72, 130},
        {96, 96, 0xcf8eb5150f1fa018ULL, 0, 206},   {106, 20, 0x1a747349c872af9bULL, 69, 161},
        {7, 41, 0xc06e7c60fa6374adULL, 100, 127},  {200, 3, 0x8c8716574a1587a1ULL, 132, 142},
        {1, 1, 0x23ae0e1ad9b4e2c1ULL, 129, 127},    {53, 9, 0xbe30c9acf4847a91ULL, 112, 155},
        {17, 41, 0xef6815a4e026980cULL, 42, 156},
    };
    for (const Golden& g : golden) {
        INFO("53x41 -> " << g.w << "x" << g.h);
        const RgbImage r = resize_bicubic_antialias(src, g.w, g.h, BicubicVariant::pil);
        std::uint64_t h = 0xcbf29ce484222325ULL;
        for (std::uint8_t v : r.pixels) h = (h ^ v) * 0x100000001b3ULL;
        CHECK(int(r.pixels.front()) == g.first);
        CHECK(int(r.pixels.back()) == g.last);
        CHECK(h == g.fnv1a);
        // The torchvision variant differs only by weight quantisation: a level after the first
        // pass, carried through the second pass's weights (absolute sum < 1.3) and rounded.
        const RgbImage t = resize_bicubic_antialias(src, g.w, g.h);
        for (std::size_t i = 0; i < t.pixels.size(); ++i) REQUIRE(std::abs(int(t.pixels[i]) - int(r.pixels[i])) <= 2);
    }
}

TEST_CASE("resize properties", "[multimodal][image][resize]") {
    SECTION("a constant image stays constant") {
        for (int v : {0, 1, 128, 254, 255}) {
            const RgbImage flat = make_image(37, 29, [=](auto, auto, auto c) { return c == 1 ? 255 - v : v; });
            for (auto [w, h] : {std::pair{12, 7}, std::pair{100, 80}, std::pair{37, 5}, std::pair{3, 29}}) {
                const RgbImage r = resize_bicubic_antialias(flat, w, h);
                for (std::size_t i = 0; i < r.pixels.size(); ++i) REQUIRE(int(r.pixels[i]) == (i % 3 == 1 ? 255 - v : v));
            }
        }
    }
    SECTION("the identity size returns the image unchanged") {
        gemma4::detail::SplitMix64 rng{7};
        const RgbImage img = make_image(31, 17, [&](auto, auto, auto) { return int(rng.next() % 256); });
        CHECK(resize_bicubic_antialias(img, 31, 17).pixels == img.pixels);
    }
    SECTION("halving a checkerboard gives flat grey") {
        const RgbImage board = make_image(64, 48, [](auto x, auto y, auto) { return (x + y) % 2 ? 255 : 0; });
        const RgbImage r = resize_bicubic_antialias(board, 32, 24);
        // Away from the borders (where the clamped window is lopsided) every pixel is 127.5 ± 1.
        for (int y = 2; y < 22; ++y)
            for (int x = 2; x < 30; ++x) REQUIRE(std::abs(int(r.at(y, x, 0)) - 127.5) <= 1.0);
    }
    SECTION("bad arguments") {
        const RgbImage img = make_image(4, 4, [](auto, auto, auto) { return 0; });
        REQUIRE_THROWS_AS(resize_bicubic_antialias(img, 0, 4), InvalidArgument);
        REQUIRE_THROWS_AS(resize_bicubic_antialias(img, 1 << 20, 1 << 20), InvalidArgument);
        RgbImage broken = img;
        broken.pixels.pop_back();
        REQUIRE_THROWS_WITH(resize_bicubic_antialias(broken, 2, 2), Catch::Contains("bytes"));
    }
}

TEST_CASE("patchify cuts row-major HWC tiles", "[multimodal][image][patchify]") {
    for (auto [tile, gw, gh] : {std::tuple{48, 3, 2}, std::tuple{8, 5, 7}, std::tuple{1, 3, 3}}) {
        const std::int64_t W = tile * gw, H = tile * gh;
        const RgbImage img = make_image(W, H, [](auto x, auto y, auto c) { return (x * 7 + y * 13 + c * 101) % 256; });
        const ImagePatches p = patchify(img, tile);
        REQUIRE(p.num_patches == gw * gh);
        REQUIRE(p.patch_dim == tile * tile * 3);
        REQUIRE(p.grid_width == gw);
        REQUIRE(p.grid_height == gh);
        REQUIRE(p.values.size() == std::size_t(p.num_patches * p.patch_dim));
        REQUIRE(p.positions.size() == std::size_t(p.num_patches * 2));
        for (std::int64_t n = 0; n < p.num_patches; ++n) {
            const std::int64_t tx = n % gw, ty = n / gw;
            REQUIRE(p.positions[2 * n] == tx);
            REQUIRE(p.positions[2 * n + 1] == ty);
            for (std::int64_t r = 0; r < tile; ++r)
                for (std::int64_t c = 0; c < tile; ++c)
                    for (int ch = 0; ch < 3; ++ch) {
                        const float v = p.values[std::size_t(n * p.patch_dim + (r * tile + c) * 3 + ch)];
                        const std::uint8_t px = img.at(ty * tile + r, tx * tile + c, ch);
                        REQUIRE(v == static_cast<float>(px) * static_cast<float>(1.0 / 255.0));
                        REQUIRE(std::fabs(v - px / 255.0) <= 1e-7);
                    }
        }
    }
    const RgbImage odd = make_image(50, 48, [](auto, auto, auto) { return 0; });
    REQUIRE_THROWS_AS(patchify(odd, 48), InvalidArgument);
    REQUIRE_THROWS_WITH(patchify(odd, 48), Catch::Contains("50x48"));
}

TEST_CASE("image file to patches", "[multimodal][image][pipeline]") {
    const std::uint32_t w = 640, h = 480;
    std::vector<unsigned> samples;
    for (std::uint32_t y = 0; y < h; ++y)
        for (std::uint32_t x = 0; x < w; ++x)
            for (unsigned c = 0; c < 3; ++c) samples.push_back((x / 2 + y * c) % 256);
    const auto path = gemma4::test::tmp_path("photo.png");
    gemma4::test::write_png(path, {.width = w, .height = h}, samples);

    const ImagePatches p = preprocess_image(path);
    CHECK(p.num_patches == 14 * 19);
    CHECK(p.patch_dim == 6912);
    CHECK(p.grid_width == 19);
    CHECK(p.grid_height == 14);
    CHECK(p.positions[2 * (p.num_patches - 1)] == 18);
    CHECK(p.positions[2 * (p.num_patches - 1) + 1] == 13);
    // The same as doing each step by hand.
    const RgbImage resized = resize_bicubic_antialias(load_image(path), 912, 672);
    CHECK(p.values == patchify(resized, 48).values);

    const ImagePatches small = preprocess_image(path, {.max_soft_tokens = 70});
    CHECK(small.num_patches == 7 * 9);  // 336 x 432

    const ImagePatches tiny = preprocess_image(path, {.patch_size = 4, .pooling_kernel_size = 2});
    CHECK(tiny.patch_dim == 8 * 8 * 3);
    CHECK(tiny.num_patches == (112 / 8) * (152 / 8));

    // An image already of the target size is not resampled.
    const RgbImage exact = make_image(768, 768, [](auto x, auto y, auto c) { return (x ^ y) + c; });
    CHECK(preprocess_image(exact).values == patchify(exact, 48).values);

    REQUIRE_THROWS_AS(preprocess_image(path, {.max_soft_tokens = 300}), InvalidArgument);
    REQUIRE_THROWS_WITH(preprocess_image(path, {.max_soft_tokens = 300}), Catch::Contains("300"));
    const std::string missing = gemma4::test::tmp_path("missing.jpg").string();
    REQUIRE_THROWS_AS(preprocess_image(missing), IoError);
    REQUIRE_THROWS_WITH(preprocess_image(missing), Catch::Contains(missing));
}
