// What a layer sees of one forward step: the tokens (their sequence and position), the KV cache,
// the thread pool, the step's working buffers. Layers are otherwise pure functions of their weights and inputs.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/kernels/thread_pool.hpp>
#include <gemma4/layers/rope.hpp>
#include <gemma4/layers/step_scratch.hpp>
#include <gemma4/kv/kv_cache.hpp>

#include <cstdint>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

template <class T>
struct LayerContext {
    const Gemma4Config& config;
    int layer;
    const StepTokens& tokens;
    KVCache<T>& cache;
    ThreadPool& pool;
    const StepRope<T>& rope;  ///< attn.rope's cos/sin for this step's positions, per attention kind
    StepScratch<T>& scratch;  ///< the step's working buffers (a layer's intermediates live there, not on the heap)
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
