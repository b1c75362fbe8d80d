// WAV (RIFF/WAVE) reading: integer PCM 16/24/32-bit and IEEE float 32/64-bit, plain or
// WAVE_FORMAT_EXTENSIBLE, any channel count (mixed to mono by averaging). Samples come out as
// floats in the usual [-1, 1) scaling (integer / 2^(bits-1)), as audio loaders hand them to
// the reference feature extractor; nothing is normalised.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/io/mapped_file.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// A mono clip.
struct AudioClip {
    std::int64_t sample_rate = 0;
    int source_channels = 0;     // channels in the file before mixing
    std::vector<float> samples;  // mono
};

/// Upper bounds that reject absurd headers before anything is allocated.
inline constexpr std::int64_t kMinWavSampleRate = 1'000;
inline constexpr std::int64_t kMaxWavSampleRate = 1'536'000;
inline constexpr int kMaxWavChannels = 256;

namespace detail {

inline std::uint32_t le_u32(const unsigned char* p) {
    return std::uint32_t(p[0]) | std::uint32_t(p[1]) << 8 | std::uint32_t(p[2]) << 16 | std::uint32_t(p[3]) << 24;
}
inline std::uint16_t le_u16(const unsigned char* p) { return static_cast<std::uint16_t>(p[0] | (p[1] << 8)); }

inline std::string fourcc_text(const unsigned char* p) {
    std::string s;
    for (int i = 0; i < 4; ++i) {
        const unsigned char c = p[i];
        if (c >= 0x20 && c < 0x7f) s += static_cast<char>(c);
        else {
            static constexpr char hex[] = "0123456789abcdef";
            s += "\\x";
            s += hex[c >> 4];
            s += hex[c & 15];
        }
    }
    return s;
}

inline const char* wav_format_name(unsigned tag) {
    switch (tag) {
        case 0x0002: return "Microsoft ADPCM";
        case 0x0006: return "A-law";
        case 0x0007: return "mu-law";
        case 0x0011: return "IMA ADPCM";
        case 0x0031: return "GSM 6.10";
        case 0x0050: return "MPEG";
        case 0x0055: return "MP3";
        default: return nullptr;
    }
}

// KSDATAFORMAT_SUBTYPE_* GUIDs share these 14 bytes after the 2-byte format code.
inline constexpr unsigned char kWavSubtypeTail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                                                      0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71};

}  // namespace detail

/// Parses a WAV file held in memory. `name` identifies it in error messages; every malformed
/// or unsupported file is a FormatError.
inline AudioClip decode_wav(std::span<const std::byte> bytes, const std::string& name) {
    using namespace detail;
    const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
    const std::size_t n = bytes.size();
    if (n == 0) throw FormatError(name + ": file is empty");
    if (n < 12) throw FormatError(name + ": file is truncated (" + std::to_string(n) + " bytes, no RIFF header)");
    if (std::memcmp(b, "RF64", 4) == 0) throw FormatError(name + ": RF64 WAV files are not supported");
    if (std::memcmp(b, "RIFF", 4) != 0 || std::memcmp(b + 8, "WAVE", 4) != 0)
        throw FormatError(name + ": not a RIFF/WAVE file");

    const unsigned char* fmt = nullptr;
    std::size_t fmt_size = 0;
    const unsigned char* data = nullptr;
    std::size_t data_size = 0;
    // The RIFF size field is often wrong in the wild; the walk is bounded by the real file size.
    for (std::size_t pos = 12; pos < n;) {
        if (n - pos < 8) throw FormatError(name + ": file is truncated inside a chunk header at byte " + std::to_string(pos));
        const unsigned char* id = b + pos;
        const std::uint32_t size = le_u32(b + pos + 4);
        if (size > n - pos - 8)
            throw FormatError(name + ": file is truncated: chunk '" + fourcc_text(id) + "' declares " + std::to_string(size) +
                              " bytes, only " + std::to_string(n - pos - 8) + " remain");
        if (std::memcmp(id, "fmt ", 4) == 0) {
            if (fmt) throw FormatError(name + ": more than one 'fmt ' chunk");
            fmt = b + pos + 8;
            fmt_size = size;
        } else if (std::memcmp(id, "data", 4) == 0) {
            if (data) throw FormatError(name + ": more than one 'data' chunk");
            data = b + pos + 8;
            data_size = size;
        }
        pos += 8 + std::size_t{size} + (size & 1);  // chunks are padded to even sizes
    }
    if (!fmt) throw FormatError(name + ": no 'fmt ' chunk");
    if (!data) throw FormatError(name + ": no 'data' chunk");
    if (fmt_size < 16) throw FormatError(name + ": 'fmt ' chunk is too short (" + std::to_string(fmt_size) + " bytes)");

    unsigned tag = le_u16(fmt);
    const unsigned channels = le_u16(fmt + 2);
    const std::uint32_t rate = le_u32(fmt + 4);
    const unsigned block_align = le_u16(fmt + 12);
    const unsigned bits = le_u16(fmt + 14);
    if (tag == 0xFFFE) {  // WAVE_FORMAT_EXTENSIBLE: the real format is the subformat GUID
        if (fmt_size < 40 || le_u16(fmt + 16) < 22)
            throw FormatError(name + ": WAVE_FORMAT_EXTENSIBLE 'fmt ' chunk is too short");
        const unsigned valid_bits = le_u16(fmt + 18);
        if (std::memcmp(fmt + 26, kWavSubtypeTail, 14) != 0)
            throw FormatError(name + ": WAVE_FORMAT_EXTENSIBLE with an unknown subformat GUID");
        tag = le_u16(fmt + 24);
        if (valid_bits != 0 && valid_bits != bits)
            throw FormatError(name + ": " + std::to_string(valid_bits) + " valid bits in " + std::to_string(bits) +
                              "-bit containers are not supported");
    }
    if (channels == 0) throw FormatError(name + ": zero channels");
    if (channels > kMaxWavChannels) throw FormatError(name + ": " + std::to_string(channels) + " channels is absurd");
    if (rate < kMinWavSampleRate || rate > kMaxWavSampleRate)
        throw FormatError(name + ": sample rate " + std::to_string(rate) + " Hz is outside " +
                          std::to_string(kMinWavSampleRate) + ".." + std::to_string(kMaxWavSampleRate) + " Hz");
    const bool is_pcm = tag == 0x0001, is_float = tag == 0x0003;
    if (!is_pcm && !is_float) {
        const char* known = wav_format_name(tag);
        throw FormatError(name + ": unsupported WAV encoding " + (known ? std::string(known) : "format tag " + std::to_string(tag)) +
                          " (PCM 16/24/32-bit or IEEE float 32/64-bit only)");
    }
    if ((is_pcm && bits != 16 && bits != 24 && bits != 32) || (is_float && bits != 32 && bits != 64))
        throw FormatError(name + ": unsupported WAV encoding: " + std::to_string(bits) + "-bit " + (is_pcm ? "PCM" : "float") +
                          " (PCM 16/24/32-bit or IEEE float 32/64-bit only)");
    const std::size_t sample_bytes = bits / 8;
    if (block_align != channels * sample_bytes)
        throw FormatError(name + ": block align " + std::to_string(block_align) + " does not match " +
                          std::to_string(channels) + " channels of " + std::to_string(bits) + " bits");
    if (data_size == 0) throw FormatError(name + ": 'data' chunk holds no samples");
    if (data_size % block_align != 0)
        throw FormatError(name + ": 'data' chunk size " + std::to_string(data_size) + " is not a whole number of " +
                          std::to_string(block_align) + "-byte frames");

    const std::size_t frames = data_size / block_align;
    AudioClip clip;
    clip.sample_rate = rate;
    clip.source_channels = static_cast<int>(channels);
    clip.samples.resize(frames);
    auto sample = [&](const unsigned char* p) -> double {
        if (is_float) {
            if (bits == 32) {
                float f;
                const std::uint32_t u = le_u32(p);
                std::memcpy(&f, &u, 4);
                return f;
            }
            const std::uint64_t u = std::uint64_t(le_u32(p)) | std::uint64_t(le_u32(p + 4)) << 32;
            double d;
            std::memcpy(&d, &u, 8);
            return d;
        }
        if (bits == 16) return static_cast<std::int16_t>(le_u16(p)) / 32768.0;
        if (bits == 24) {
            const std::int32_t v = static_cast<std::int32_t>(std::uint32_t(p[0]) << 8 | std::uint32_t(p[1]) << 16 |
                                                             std::uint32_t(p[2]) << 24) >> 8;
            return v / 8388608.0;
        }
        return static_cast<std::int32_t>(le_u32(p)) / 2147483648.0;
    };
    for (std::size_t i = 0; i < frames; ++i) {
        const unsigned char* frame = data + i * block_align;
        double sum = 0.0;
        for (unsigned c = 0; c < channels; ++c) sum += sample(frame + c * sample_bytes);
        // A non-finite float sample would poison every activation downstream.
        if (!std::isfinite(sum))
            throw FormatError(name + ": sample frame " + std::to_string(i) + " is not a finite number");
        const double mono = channels == 1 ? sum : sum / channels;
        // A finite 64-bit float sample beyond float's range would become infinity all the same.
        if (std::abs(mono) > static_cast<double>(std::numeric_limits<float>::max()))
            throw FormatError(name + ": sample frame " + std::to_string(i) + " is outside the range of a 32-bit float");
        clip.samples[i] = static_cast<float>(mono);
    }
    return clip;
}

/// Reads a WAV file: IoError if it cannot be opened, FormatError if malformed or unsupported.
inline AudioClip read_wav(const std::filesystem::path& path) {
    const MappedFile file(path);
    return decode_wav(file.bytes(), path.string());
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
