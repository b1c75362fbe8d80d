// Shared by the kernel tests: the library's random generator and a checkpoint configuration
// larger than tiny_config() (wide enough for whole quantization blocks and SIMD tiles).
#pragma once

#include <gemma4/config.hpp>
#include <gemma4/detail/random.hpp>
#include <gemma4/kernels/cpu.hpp>
#include <gemma4/model/random_checkpoint.hpp>

#include <cstdint>
#include <string>

namespace gemma4::test {

/// The library's generator; symmetric() draws test inputs in [-1, 1).
using Rng = detail::SplitMix64;

inline Gemma4Config small_model_config() {
    Gemma4Config c = tiny_config();
    c.vocab_size = 1024;
    c.hidden_size = 256;
    c.intermediate_size = 640;
    c.num_hidden_layers = 4;
    c.head_dim = 64;
    c.global_head_dim = 128;
    c.sliding_window = 16;
    c.layer_types = Gemma4Config::default_layer_types(4);
    c.layer_types[3] = AttentionKind::Full;
    return c;
}

/// Why the kernels of `level` do not run in this process, or "" when they do: the CPU lacks
/// features, GEMMA4_ISA caps the level below it, or the OS refused the AMX tile state. Each
/// level's kernel test is a test case of its own that reports this as skipped.
inline std::string level_unavailable(Isa level) {
    const IsaReport& r = isa_report();
    if (r.active >= level) return "";
    const std::string path = "the " + std::string(isa_name(level)) + " path does not run here: ";
    if (r.cpu < level) return path + "this CPU lacks " + detail::missing_features(r.features, level);
    if (!r.note.empty()) return path + r.note;
    return path + "GEMMA4_ISA=" + r.cap + " caps the level";
}

}  // namespace gemma4::test
