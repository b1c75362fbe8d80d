// Shared by the kernel tests: the library's random generator and a checkpoint configuration
// larger than tiny_config() (wide enough for whole quantization blocks and SIMD tiles).
#pragma once

#include <gemma4/config.hpp>
#include <gemma4/detail/random.hpp>
#include <gemma4/model/random_checkpoint.hpp>

#include <cstdint>

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

}  // namespace gemma4::test
