// What a layer sees of one forward step: the tokens (their sequence and position), the KV cache,
// the thread pool. Layers are otherwise pure functions of their weights and inputs.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/kernels/thread_pool.hpp>
#include <gemma4/layers/rope.hpp>
#include <gemma4/kv/kv_cache.hpp>

#include <cstdint>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// The tokens of one forward step, in order; several sequences may be mixed.
struct StepTokens {
    std::vector<SeqId> seq;         ///< per token: its sequence
    std::vector<std::int64_t> pos;  ///< per token: its position in that sequence
    /// Per token: the last key position it may see. Empty: causal (pos). Later than pos for the
    /// soft tokens of one image, which see each other in both directions (decision 9).
    std::vector<std::int64_t> last_key;
    /// Whether those bidirectional blocks apply to full-attention layers too (the reference
    /// implementation's default path) or to sliding layers only (the documented intent).
    bool blocks_on_full_layers = false;
    std::int64_t size() const { return static_cast<std::int64_t>(pos.size()); }
};

template <class T>
struct LayerContext {
    const Gemma4Config& config;
    int layer;
    const StepTokens& tokens;
    KVCache<T>& cache;
    ThreadPool& pool;
    const StepRope<T>& rope;  ///< attn.rope's cos/sin for this step's positions, per attention kind
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
