// The library's one family of random generators, fully specified so that every sequence (random
// checkpoints and their committed fingerprints, sampling with a seed, benchmark weights, test
// inputs) is the same on every platform and standard library: splitmix64, and xoshiro256**
// seeded through it.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>

#include <array>
#include <cstddef>
#include <cstdint>

namespace gemma4::inline GEMMA4_ABI::detail {

/// One step of splitmix64: advances `state` by the golden-ratio increment and returns the mix.
constexpr std::uint64_t splitmix64(std::uint64_t& state) {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/// Uniform in [0, 1) from the top 53 bits of a draw, exactly representable as a double.
constexpr double unit_double(std::uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

/// splitmix64 as a generator: one word of state, cheap to seed per thread or per chunk.
struct SplitMix64 {
    std::uint64_t state;
    constexpr std::uint64_t next() { return splitmix64(state); }
    constexpr double uniform() { return unit_double(next()); }     // [0, 1)
    constexpr double symmetric() { return 2.0 * uniform() - 1.0; }  // [-1, 1)
};

/// xoshiro256** seeded through splitmix64: small, fast and fully specified, unlike the
/// standard distributions whose output differs between library implementations.
class Xoshiro256 {
public:
    explicit Xoshiro256(std::uint64_t seed) { reseed(seed); }

    void reseed(std::uint64_t seed) {
        for (auto& word : state_) word = splitmix64(seed);
    }

    std::uint64_t next() {
        const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
        const std::uint64_t t = state_[1] << 17;
        state_[2] ^= state_[0];
        state_[3] ^= state_[1];
        state_[1] ^= state_[2];
        state_[0] ^= state_[3];
        state_[2] ^= t;
        state_[3] = rotl(state_[3], 45);
        return result;
    }

    /// Uniform in [0, 1) with 53 random bits, exactly representable as a double.
    double uniform() { return unit_double(next()); }

    /// The whole state: a generator set to it continues the same sequence.
    std::array<std::uint64_t, 4> state() const { return {state_[0], state_[1], state_[2], state_[3]}; }
    /// All zero is the one state xoshiro never leaves (it would draw 0 forever).
    void set_state(const std::array<std::uint64_t, 4>& s) {
        if (!(s[0] | s[1] | s[2] | s[3])) throw InvalidArgument("Sampler: the all-zero generator state is not valid");
        for (std::size_t i = 0; i < 4; ++i) state_[i] = s[i];
    }

private:
    static constexpr std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

    std::uint64_t state_[4]{};
};

}  // namespace gemma4::inline GEMMA4_ABI::detail
