// A tiny random-weight checkpoint with its tiny tokenizer, written once per test program into a
// scratch folder: the model that the generation tests run.
#pragma once

#include <gemma4/model/random_checkpoint.hpp>
#include <gemma4/tokenizer/tiny_tokenizer.hpp>

#include "support/temp_dir.hpp"

#include <cstdint>
#include <filesystem>
#include <string>

namespace gemma4::test {

struct TinyModelFiles {
    std::filesystem::path dir;  ///< config.json and the safetensors
    TinyTokenizerInfo info;     ///< the tokenizer in dir/tokenizer and its special ids
};

/// tiny_config() with the tiny tokenizer's vocabulary, a context of `max_positions` and weights
/// from `seed`, in the scratch folder `name`.
inline TinyModelFiles write_tiny_model(const std::string& name, std::uint64_t seed, std::int64_t max_positions) {
    const auto dir = temp_dir(name);
    const TinyTokenizerInfo info = write_tiny_tokenizer(dir / "tokenizer");
    Gemma4Config c = tiny_config();
    adopt_tiny_tokenizer(c, info);
    c.max_position_embeddings = max_positions;
    write_random_checkpoint(dir, c, {.seed = seed});
    return {dir, info};
}

}  // namespace gemma4::test
