// The model and tokenizer that fuzz_session loads session files into, and that make_corpus saves
// its session seeds from: both must build the very same config (files carry its fingerprint).
// Small on purpose: one sliding and one full layer of narrow heads keep a page at 1-2 KB, so a
// seed past the sliding window stays a few KB.
#pragma once

#include <gemma4/generate/session.hpp>
#include <gemma4/model/random_checkpoint.hpp>
#include <gemma4/tokenizer/tiny_tokenizer.hpp>

#include <filesystem>
#include <memory>

namespace gemma4::fuzz {

inline Gemma4Config session_fuzz_config(const TinyTokenizerInfo& info) {
    Gemma4Config c = tiny_config();
    c.vocab_size = info.vocab_size;
    c.hidden_size = 32;
    c.intermediate_size = 64;
    c.num_hidden_layers = 2;
    c.layer_types = Gemma4Config::default_layer_types(2);
    c.layer_types[1] = AttentionKind::Full;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.head_dim = 8;
    c.global_head_dim = 16;
    c.num_global_key_value_heads = 1;
    c.sliding_window = 8;
    c.max_position_embeddings = 64;
    c.tokens.eos = {info.eos, info.turn_end};
    c.tokens.eos_count = 2;
    c.tokens.image = info.image;
    c.tokens.audio = info.audio;
    c.tokens.video = info.video;
    return c;
}

struct SessionFixture {
    std::unique_ptr<Tokenizer> tokenizer;
    std::unique_ptr<Model<float>> model;
};

/// Writes the tokenizer and a random checkpoint to `dir` and loads them (one thread).
inline SessionFixture make_session_fixture(const std::filesystem::path& dir) {
    const TinyTokenizerInfo info = write_tiny_tokenizer(dir);
    write_random_checkpoint(dir, session_fuzz_config(info), {.seed = 7});
    return {std::make_unique<Tokenizer>(Tokenizer::from_file(info.tokenizer_json)),
            std::make_unique<Model<float>>(Model<float>::load(dir, ModelOptions{1}))};
}

}  // namespace gemma4::fuzz
