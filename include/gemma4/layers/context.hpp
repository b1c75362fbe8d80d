// What a layer sees of one forward step: the tokens (their sequence and position), the KV cache,
// the thread pool. Layers are otherwise pure functions of their weights and inputs.
#pragma once

#include <gemma4/config.hpp>
#include <gemma4/kernels/thread_pool.hpp>
#include <gemma4/model/kv_cache.hpp>

#include <cstdint>
#include <vector>

namespace gemma4 {

/// The tokens of one forward step, in order; several sequences may be mixed.
struct StepTokens {
    std::vector<SeqId> seq;         ///< per token: its sequence
    std::vector<std::int64_t> pos;  ///< per token: its position in that sequence
    std::int64_t size() const { return static_cast<std::int64_t>(pos.size()); }
};

template <class T>
struct LayerContext {
    const Gemma4Config& config;
    int layer;
    const StepTokens& tokens;
    KVCache<T>& cache;
    ThreadPool& pool;
};

}  // namespace gemma4
