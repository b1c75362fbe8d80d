// WAV reading, resampling to 16 kHz, framing (§4.3), and every malformed WAV as a named error.
#include "test_files.hpp"

#include <gemma4/multimodal/audio.hpp>
#include <gemma4/multimodal/wav.hpp>

#include <cmath>
#include <limits>
#include <numbers>

using namespace gemma4;
using gemma4::test::WavSpec;
using gemma4::test::wav_bytes;

namespace {

std::string write_wav(const std::string& name, const WavSpec& spec, const std::vector<unsigned char>& data) {
    const auto path = gemma4::test::tmp_path(name);
    gemma4::test::write_bytes(path, wav_bytes(spec, data));
    return path.string();
}

std::vector<std::int16_t> ramp16(std::size_t n) {
    std::vector<std::int16_t> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::int16_t>(int((i * 7919) % 65536) - 32768);
    return v;
}

}  // namespace

TEST_CASE("WAV encodings read to the expected float samples", "[multimodal][audio][wav]") {
    const auto pcm = ramp16(1000);
    SECTION("PCM 16-bit mono: x / 32768, frames padded with zeros") {
        const auto path = write_wav("pcm16.wav", {}, gemma4::test::pcm16_data(pcm));
        const AudioClip clip = read_wav(path);
        CHECK(clip.sample_rate == 16000);
        CHECK(clip.source_channels == 1);
        REQUIRE(clip.samples.size() == pcm.size());
        for (std::size_t i = 0; i < pcm.size(); ++i) REQUIRE(clip.samples[i] == float(pcm[i]) / 32768.0f);
        CHECK(clip.samples[0] == -1.0f);

        const AudioFrames f = preprocess_audio(path);
        CHECK(f.num_frames == 2);  // ceil(1000 / 640)
        CHECK(f.frame_size == 640);
        REQUIRE(f.values.size() == 1280);
        for (std::size_t i = 0; i < 1280; ++i) REQUIRE(f.values[i] == (i < 1000 ? clip.samples[i] : 0.0f));
    }
    SECTION("IEEE float 32-bit mono is passed through untouched") {
        std::vector<float> v = {0.0f, 0.25f, -0.5f, 1.5f, -3.0f, 1e-8f, 0.123456789f};
        const AudioClip clip = read_wav(write_wav("float32.wav", {.format_tag = 3, .bits = 32}, gemma4::test::float32_data(v)));
        CHECK(clip.samples == v);  // no clipping or normalisation
    }
    SECTION("IEEE float 64-bit, PCM 24-bit and 32-bit") {
        std::vector<unsigned char> d64;
        for (double x : {0.5, -0.25, 0.1}) {
            std::uint64_t u;
            std::memcpy(&u, &x, 8);
            gemma4::test::put_le(d64, u, 8);
        }
        CHECK(read_wav(write_wav("float64.wav", {.format_tag = 3, .bits = 64}, d64)).samples ==
              std::vector<float>{0.5f, -0.25f, 0.1f});
        std::vector<unsigned char> d24;
        for (std::int32_t x : {0, 1, -1, 8388607, -8388608, 4194304}) gemma4::test::put_le(d24, static_cast<std::uint32_t>(x), 3);
        CHECK(read_wav(write_wav("pcm24.wav", {.bits = 24}, d24)).samples ==
              std::vector<float>{0.0f, 1.0f / 8388608, -1.0f / 8388608, 8388607.0f / 8388608, -1.0f, 0.5f});
        std::vector<unsigned char> d32;
        for (std::int32_t x : {0, -2147483647 - 1, 1073741824}) gemma4::test::put_le(d32, static_cast<std::uint32_t>(x), 4);
        CHECK(read_wav(write_wav("pcm32.wav", {.bits = 32}, d32)).samples == std::vector<float>{0.0f, -1.0f, 0.5f});
    }
    SECTION("stereo and multichannel are averaged to mono") {
        const auto path = write_wav("stereo.wav", {.channels = 2}, gemma4::test::pcm16_data(pcm));
        const AudioClip clip = read_wav(path);
        CHECK(clip.source_channels == 2);
        REQUIRE(clip.samples.size() == 500);
        for (std::size_t i = 0; i < 500; ++i)
            REQUIRE(clip.samples[i] == static_cast<float>((pcm[2 * i] / 32768.0 + pcm[2 * i + 1] / 32768.0) / 2));
        std::vector<float> v = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};  // two frames of three channels
        const AudioClip three = read_wav(write_wav("3ch.wav", {.format_tag = 3, .channels = 3, .bits = 32}, gemma4::test::float32_data(v)));
        REQUIRE(three.samples.size() == 2);
        CHECK(three.samples[0] == static_cast<float>((double(0.1f) + double(0.2f) + double(0.3f)) / 3));
        CHECK(three.samples[1] == static_cast<float>((double(0.4f) + double(0.5f) + double(0.6f)) / 3));
    }
    SECTION("WAVE_FORMAT_EXTENSIBLE, extra chunks, fmt after data") {
        const auto plain = read_wav(write_wav("plain_stereo.wav", {.channels = 2}, gemma4::test::pcm16_data(pcm)));
        CHECK(read_wav(write_wav("ext.wav", {.format_tag = 0xFFFE, .channels = 2}, gemma4::test::pcm16_data(pcm))).samples ==
              plain.samples);
        CHECK(read_wav(write_wav("chunks.wav", {.channels = 2, .extra_chunks = true, .fmt_after_data = true},
                                 gemma4::test::pcm16_data(pcm)))
                  .samples == plain.samples);
        std::vector<float> v = {0.5f, -0.5f};
        CHECK(read_wav(write_wav("ext_float.wav", {.format_tag = 0xFFFE, .bits = 32, .sub_format = 3}, gemma4::test::float32_data(v)))
                  .samples == v);
    }
}

TEST_CASE("frame_audio pads to whole frames", "[multimodal][audio][frames]") {
    std::vector<float> s(1281);
    for (std::size_t i = 0; i < s.size(); ++i) s[i] = float(i) + 1;
    for (auto [n, frames] : {std::pair{0, 0}, std::pair{1, 1}, std::pair{639, 1}, std::pair{640, 1}, std::pair{641, 2},
                             std::pair{1280, 2}, std::pair{1281, 3}}) {
        const AudioFrames f = frame_audio(std::span<const float>(s.data(), std::size_t(n)));
        CHECK(f.num_frames == frames);
        REQUIRE(f.values.size() == std::size_t(frames * 640));
        for (std::size_t i = 0; i < f.values.size(); ++i) REQUIRE(f.values[i] == (i < std::size_t(n) ? s[i] : 0.0f));
    }
    const AudioFrames small = frame_audio(std::span<const float>(s.data(), 10), 4);
    CHECK(small.num_frames == 3);
    CHECK(small.frame_size == 4);
    REQUIRE_THROWS_AS(frame_audio(s, 0), InvalidArgument);
}

TEST_CASE("resampling keeps frequency and amplitude", "[multimodal][audio][resample]") {
    auto tone = [](double freq, double amp, std::int64_t rate, std::size_t n) {
        std::vector<float> v(n);
        for (std::size_t i = 0; i < n; ++i) v[i] = float(amp * std::sin(2 * std::numbers::pi * freq * double(i) / double(rate)));
        return v;
    };
    // Max deviation from the ideal tone at 16 kHz, away from the ends (where the input stops).
    auto deviation = [](const std::vector<float>& y, double freq, double amp) {
        double worst = 0;
        for (std::size_t n = 400; n + 400 < y.size(); ++n)
            worst = std::max(worst, std::fabs(y[n] - amp * std::sin(2 * std::numbers::pi * freq * double(n) / 16000.0)));
        return worst;
    };
    auto peak = [](const std::vector<float>& y) {
        double m = 0;
        for (std::size_t n = 400; n + 400 < y.size(); ++n) m = std::max(m, double(std::fabs(y[n])));
        return m;
    };
    for (std::int64_t rate : {8000, 11025, 22050, 44100, 48000, 96000, 16001}) {
        INFO("from " << rate << " Hz");
        const std::size_t n = std::size_t(rate);  // one second
        for (double freq : {440.0, 1000.0, 3000.0, 6000.0}) {
            if (freq >= 0.47 * double(rate)) continue;
            INFO(freq << " Hz tone");
            const auto y = resample_audio(tone(freq, 0.5, rate, n), rate, 16000);
            CHECK(y.size() == std::size_t((std::int64_t(n) * 16000 + rate - 1) / rate));
            // Passband ripple and interpolation error: below a third of one 16-bit step.
            CHECK(deviation(y, freq, 0.5) < 1e-5);
        }
        if (rate >= 22050) {
            // A tone above the output Nyquist frequency is removed rather than aliased.
            const double high = std::min(0.45 * double(rate), 12000.0);
            CHECK(peak(resample_audio(tone(high, 0.5, rate, n), rate, 16000)) < 1e-5);
        }
    }
    std::vector<float> v = {1, 2, 3};
    CHECK(resample_audio(v, 16000, 16000) == v);
    CHECK(resample_audio({}, 44100, 16000).empty());
    REQUIRE_THROWS_AS(resample_audio(v, 0, 16000), InvalidArgument);
    REQUIRE_THROWS_AS(resample_audio(v, 16000, 16000, {.zero_crossings = 0}), InvalidArgument);

    // The whole pipeline: 48 kHz stereo file → 16 kHz mono frames.
    std::vector<std::int16_t> stereo;
    for (int i = 0; i < 48000; ++i) {
        const auto s = static_cast<std::int16_t>(std::lround(16384 * std::sin(2 * std::numbers::pi * 1000.0 * i / 48000.0)));
        stereo.insert(stereo.end(), {s, s});
    }
    const auto path = gemma4::test::tmp_path("tone48k.wav");
    gemma4::test::write_bytes(path, wav_bytes({.channels = 2, .sample_rate = 48000}, gemma4::test::pcm16_data(stereo)));
    const AudioFrames f = preprocess_audio(path);
    CHECK(f.num_frames == 25);  // 16000 samples
    // The 16-bit input itself is only within 2^-16 of the ideal tone.
    CHECK(deviation(std::vector<float>(f.values.begin(), f.values.end()), 1000.0, 0.5) < 5e-5);
}

TEST_CASE("malformed WAV files are FormatErrors naming the file", "[multimodal][audio][errors]") {
    const auto good = gemma4::test::pcm16_data(ramp16(64));
    auto expect = [](const std::string& path, const std::string& what) {
        INFO(path << ": " << what);
        REQUIRE_THROWS_AS(read_wav(path), FormatError);
        REQUIRE_THROWS_WITH(read_wav(path), Catch::Contains(path) && Catch::Contains(what));
        REQUIRE_THROWS_AS(preprocess_audio(path), FormatError);
    };
    auto raw = [](const std::string& name, const std::vector<unsigned char>& bytes) {
        const auto p = gemma4::test::tmp_path(name);
        gemma4::test::write_bytes(p, bytes);
        return p.string();
    };
    const auto whole = wav_bytes({}, good);

    const std::string missing = gemma4::test::tmp_path("missing.wav").string();
    REQUIRE_THROWS_AS(read_wav(missing), IoError);
    REQUIRE_THROWS_WITH(read_wav(missing), Catch::Contains(missing));

    expect(raw("empty.wav", {}), "empty");
    expect(raw("tiny.wav", {'R', 'I', 'F', 'F', 0}), "truncated");
    expect(raw("text.wav", std::vector<unsigned char>(40, 'x')), "not a RIFF/WAVE file");
    auto rf64 = whole;
    std::memcpy(rf64.data(), "RF64", 4);
    expect(raw("rf64.wav", rf64), "RF64");
    // Cut inside the data, inside a chunk header, and just after the RIFF header.
    expect(raw("cut_data.wav", std::vector<unsigned char>(whole.begin(), whole.end() - 7)), "truncated");
    expect(raw("cut_header.wav", std::vector<unsigned char>(whole.begin(), whole.begin() + 40)), "truncated");
    expect(raw("cut_fmt.wav", std::vector<unsigned char>(whole.begin(), whole.begin() + 20)), "truncated");
    expect(raw("riff_only.wav", std::vector<unsigned char>(whole.begin(), whole.begin() + 12)), "no 'fmt ' chunk");
    // Only a 'fmt ' chunk (cut right after it).
    expect(raw("no_data.wav", std::vector<unsigned char>(whole.begin(), whole.begin() + 36)), "no 'data' chunk");
    expect(write_wav("zero_data.wav", {}, {}), "no samples");
    expect(write_wav("short_fmt.wav", {.fmt_size = 14}, good), "too short");
    expect(write_wav("pcm8.wav", {.bits = 8}, good), "8-bit PCM");
    expect(write_wav("mulaw.wav", {.format_tag = 7, .bits = 8}, good), "mu-law");
    expect(write_wav("alaw.wav", {.format_tag = 6, .bits = 8}, good), "A-law");
    expect(write_wav("adpcm.wav", {.format_tag = 2, .bits = 4, .block_align = 256}, good), "ADPCM");
    expect(write_wav("mp3.wav", {.format_tag = 0x55, .bits = 0, .block_align = 1}, good), "MP3");
    expect(write_wav("float16.wav", {.format_tag = 3, .bits = 16}, good), "16-bit float");
    expect(write_wav("ext_guid.wav", {.format_tag = 0xFFFE, .bad_guid = true}, good), "subformat");
    expect(write_wav("ext_mulaw.wav", {.format_tag = 0xFFFE, .bits = 8, .sub_format = 7}, good), "mu-law");
    expect(write_wav("ext_valid_bits.wav", {.format_tag = 0xFFFE, .bits = 32, .valid_bits = 24}, good), "valid bits");
    expect(write_wav("ext_short.wav", {.format_tag = 0xFFFE, .fmt_size = 18}, good), "too short");
    expect(write_wav("zero_channels.wav", {.channels = 0, .block_align = 2}, good), "zero channels");
    expect(write_wav("many_channels.wav", {.channels = 5000, .block_align = 2}, good), "absurd");
    expect(write_wav("rate_zero.wav", {.sample_rate = 0}, good), "sample rate 0 Hz");
    expect(write_wav("rate_huge.wav", {.sample_rate = 4000000000u}, good), "sample rate 4000000000 Hz");
    expect(write_wav("align.wav", {.block_align = 3}, good), "block align");
    expect(write_wav("partial_frame.wav", {.channels = 2}, gemma4::test::pcm16_data(ramp16(63))), "whole number");
    auto dup = whole;
    dup.insert(dup.end(), whole.begin() + 12, whole.begin() + 36);  // a second 'fmt '
    expect(raw("two_fmt.wav", dup), "more than one 'fmt ' chunk");
    expect(write_wav("nan.wav", {.format_tag = 3, .bits = 32},
                     gemma4::test::float32_data({0.0f, std::numeric_limits<float>::quiet_NaN()})),
           "not a finite number");
}
