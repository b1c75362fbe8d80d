// Inputs found by the fuzzers in fuzz/ (docs/fuzzing.md) that once misbehaved; each must now be
// a gemma4::Error with a precise message.
#include <catch2/catch.hpp>

#include <gemma4/multimodal/wav.hpp>

#include <array>
#include <span>

using namespace gemma4;

// fuzz_wav: a 64-bit float WAV whose first sample (about 1.4e62) is finite as a double passed
// the finiteness check and became +inf when narrowed to float, reaching the embedder.
TEST_CASE("fuzz: 64-bit float WAV sample beyond the float range", "[multimodal][wav][fuzz]") {
    const std::array<unsigned char, 60> file = {
        0x52, 0x49, 0x46, 0x46, 0x34, 0x00, 0x00, 0x00, 0x57, 0x41, 0x56, 0x45, 0x66, 0x6d, 0x74, 0x20,
        0x10, 0x00, 0x00, 0x00, 0x03, 0x00, 0x01, 0x00, 0x80, 0x41, 0x00, 0x00, 0x00, 0xf4, 0x01, 0x00,
        0x08, 0x00, 0x40, 0x00, 0x64, 0x61, 0x74, 0x61, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0xe0, 0x4c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xbf};
    const auto bytes = std::as_bytes(std::span(file));
    REQUIRE_THROWS_AS(decode_wav(bytes, "fuzz.wav"), FormatError);
    REQUIRE_THROWS_WITH(decode_wav(bytes, "fuzz.wav"), "fuzz.wav: sample frame 0 is outside the range of a 32-bit float");
}
