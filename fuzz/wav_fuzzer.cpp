// WAV decoding from memory, then the audio preprocessing (resample to 16 kHz, framing).
#include <gemma4/multimodal/audio.hpp>
#include <gemma4/multimodal/wav.hpp>

#include "fuzz_support.hpp"

#include <cmath>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    gemma4::fuzz::expect_ok_or_error([&] {
        const gemma4::AudioClip clip = gemma4::decode_wav(gemma4::fuzz::as_bytes(data, size), "fuzz.wav");
        if (clip.sample_rate < gemma4::kMinWavSampleRate || clip.sample_rate > gemma4::kMaxWavSampleRate)
            gemma4::fuzz::fail("decode_wav accepted a sample rate outside its limits");
        // decode_wav promises finite samples (a non-finite one would poison every activation).
        for (const float s : clip.samples)
            if (!std::isfinite(s)) gemma4::fuzz::fail("decode_wav returned a non-finite sample");
        // A short kernel keeps each run fast; the indexing is the same as with the defaults.
        const gemma4::ResamplerOptions resampler{.zero_crossings = 4, .table_density = 16};
        const std::vector<float> at16k = gemma4::resample_audio(clip.samples, clip.sample_rate, 16000, resampler);
        const gemma4::AudioFrames frames = gemma4::frame_audio(at16k);
        if (frames.values.size() != static_cast<std::size_t>(frames.num_frames * frames.frame_size))
            gemma4::fuzz::fail("frame_audio size mismatch");
    });
    return 0;
}
