// Audio file → audio embedder input (§4.3): read WAV, mix to mono, resample to 16 kHz when
// needed, right-pad with zeros to whole 640-sample frames. No amplitude normalisation, no mel.
//
// The reference feature extractor expects the caller to supply 16 kHz audio and does not
// resample; we resample other rates with band-limited (windowed-sinc) interpolation, described
// in docs/multimodal.md.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/multimodal/wav.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <numbers>
#include <span>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// Parameters of the windowed-sinc resampler (defaults: see docs/multimodal.md for the
/// measured response — flat to about 0.9 of the lower Nyquist frequency, stopband from just
/// below it).
struct ResamplerOptions {
    int zero_crossings = 64;   // half-width of the sinc kernel, in zero crossings
    double rolloff = 0.945;    // cutoff as a fraction of the lower Nyquist frequency
    double kaiser_beta = 10.0; // Kaiser window shape (about 100 dB sidelobe attenuation)
    int table_density = 512;   // kernel samples per zero crossing (linearly interpolated)
};

/// Longest output the resampler and the framing produce: 2^28 samples (4.6 hours at 16 kHz).
inline constexpr std::int64_t kMaxAudioSamples = std::int64_t{1} << 28;

namespace detail {

/// Modified Bessel function of the first kind, order 0 (power series).
inline double bessel_i0(double x) {
    const double q = x * x / 4.0;
    double term = 1.0, sum = 1.0;
    for (int k = 1; k < 500 && term > 1e-17 * sum; ++k) {
        term *= q / (static_cast<double>(k) * k);
        sum += term;
    }
    return sum;
}

/// h(u) = sinc(u) · kaiser(u / Z) sampled at u = k / density for k = 0 .. Z·density (+1 zero).
inline std::vector<double> windowed_sinc_table(const ResamplerOptions& o) {
    const std::int64_t n = std::int64_t{o.zero_crossings} * o.table_density;
    std::vector<double> h(static_cast<std::size_t>(n + 2), 0.0);
    const double i0_beta = bessel_i0(o.kaiser_beta);
    for (std::int64_t k = 0; k <= n; ++k) {
        const double u = static_cast<double>(k) / o.table_density;
        const double t = u / o.zero_crossings;
        const double window = bessel_i0(o.kaiser_beta * std::sqrt(std::max(0.0, 1.0 - t * t))) / i0_beta;
        const double sinc = k == 0 ? 1.0 : std::sin(std::numbers::pi * u) / (std::numbers::pi * u);
        h[static_cast<std::size_t>(k)] = sinc * window;
    }
    h[static_cast<std::size_t>(n)] = 0.0;  // the window's end point
    return h;
}

}  // namespace detail

/// Resamples `input` from in_rate to out_rate Hz by band-limited interpolation:
/// y[n] = fc · Σ_k x[k] · h(fc · (n·in_rate/out_rate − k)), with fc = rolloff · min(1,
/// out_rate/in_rate) and h a Kaiser-windowed sinc; samples outside the input count as zero.
/// The output has ceil(N · out_rate / in_rate) samples. Equal rates return the input.
inline std::vector<float> resample_audio(std::span<const float> input, std::int64_t in_rate, std::int64_t out_rate,
                                         const ResamplerOptions& options = {}) {
    if (in_rate <= 0 || out_rate <= 0 || in_rate > kMaxWavSampleRate || out_rate > kMaxWavSampleRate)
        throw InvalidArgument("resample_audio: rates " + std::to_string(in_rate) + " -> " + std::to_string(out_rate) +
                              " Hz are not supported");
    if (options.zero_crossings < 1 || options.zero_crossings > 1024 || options.table_density < 1 ||
        options.table_density > 65536 || !(options.rolloff > 0.0 && options.rolloff <= 1.0) || !(options.kaiser_beta >= 0.0))
        throw InvalidArgument("resample_audio: invalid resampler options");
    if (in_rate == out_rate) return {input.begin(), input.end()};
    const auto n_in = static_cast<std::int64_t>(input.size());
    if (n_in > kMaxAudioSamples) throw InvalidArgument("resample_audio: input of " + std::to_string(n_in) + " samples is too long");
    const std::int64_t n_out = (n_in * out_rate + in_rate - 1) / in_rate;
    if (n_out > kMaxAudioSamples)
        throw InvalidArgument("resample_audio: output of " + std::to_string(n_out) + " samples is too long");

    const std::vector<double> h = detail::windowed_sinc_table(options);
    const double fc = options.rolloff * std::min(1.0, static_cast<double>(out_rate) / static_cast<double>(in_rate));
    const double reach = options.zero_crossings / fc;  // kernel half-width in input samples
    const double density = options.table_density;
    const double limit = options.zero_crossings;
    std::vector<float> out(static_cast<std::size_t>(n_out));
    for (std::int64_t n = 0; n < n_out; ++n) {
        // Exact rational time of output n in input samples: whole part i0 plus frac in [0, 1).
        const std::int64_t p = n * in_rate;
        const std::int64_t i0 = p / out_rate;
        const double frac = static_cast<double>(p % out_rate) / static_cast<double>(out_rate);
        const std::int64_t k_lo = std::max<std::int64_t>(0, i0 - static_cast<std::int64_t>(std::floor(reach)));
        const std::int64_t k_hi = std::min<std::int64_t>(n_in - 1, i0 + static_cast<std::int64_t>(std::ceil(reach)));
        double acc = 0.0;
        for (std::int64_t k = k_lo; k <= k_hi; ++k) {
            const double u = std::abs(static_cast<double>(i0 - k) + frac) * fc;
            if (u >= limit) continue;
            const double pos = u * density;
            const auto j = static_cast<std::size_t>(pos);
            const double f = pos - static_cast<double>(j);
            acc += static_cast<double>(input[static_cast<std::size_t>(k)]) * (h[j] + f * (h[j + 1] - h[j]));
        }
        out[static_cast<std::size_t>(n)] = static_cast<float>(fc * acc);
    }
    return out;
}

/// The audio embedder's input: num_frames rows of frame_size samples.
struct AudioFrames {
    std::int64_t num_frames = 0;
    std::int64_t frame_size = 0;
    std::vector<float> values;  // [num_frames, frame_size]
};

/// Right-pads with zeros to a whole number of frames: ceil(N / frame_size) frames.
inline AudioFrames frame_audio(std::span<const float> samples, std::int64_t frame_size = 640) {
    if (frame_size <= 0 || frame_size > (std::int64_t{1} << 20))
        throw InvalidArgument("frame_audio: frame_size " + std::to_string(frame_size) + " is not supported");
    const auto n = static_cast<std::int64_t>(samples.size());
    if (n > kMaxAudioSamples) throw InvalidArgument("frame_audio: " + std::to_string(n) + " samples is too long");
    AudioFrames out;
    out.frame_size = frame_size;
    out.num_frames = (n + frame_size - 1) / frame_size;
    out.values.assign(static_cast<std::size_t>(out.num_frames * frame_size), 0.0f);
    std::copy(samples.begin(), samples.end(), out.values.begin());
    return out;
}

/// Audio preprocessing settings; the defaults are the 12B checkpoint's.
struct AudioPreprocessOptions {
    std::int64_t sample_rate = 16000;  // the feature extractor's sampling_rate
    std::int64_t frame_size = 640;     // audio_embed_dim: samples per soft token (40 ms)
    ResamplerOptions resampler = {};
};

/// WAV file → frames: read (mono mix), resample to options.sample_rate if needed, frame.
/// Errors name the file: IoError if unreadable, FormatError if malformed or unsupported.
inline AudioFrames preprocess_audio(const std::filesystem::path& path, const AudioPreprocessOptions& options = {}) {
    const AudioClip clip = read_wav(path);
    try {
        if (clip.sample_rate == options.sample_rate) return frame_audio(clip.samples, options.frame_size);
        return frame_audio(resample_audio(clip.samples, clip.sample_rate, options.sample_rate, options.resampler),
                           options.frame_size);
    } catch (const InvalidArgument& e) {
        throw InvalidArgument(path.string() + ": " + e.what());
    }
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
