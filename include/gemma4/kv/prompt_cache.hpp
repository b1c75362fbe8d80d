// PromptCache: snapshots of sequences at the end of prompts that later requests may start with
// (a system prompt, a shared document). A request that begins with a cached prompt forks the
// snapshot — sharing its pages copy-on-write — and prefills only the rest. The snapshot holds
// the sliding layers' window state too (the pages inside the window at the end of the prompt),
// so nothing is recomputed for any layer kind.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/kv/kv_cache.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

template <class T>
class PromptCache {
public:
    explicit PromptCache(KVCache<T>& cache) : cache_(&cache) {}
    PromptCache(const PromptCache&) = delete;
    PromptCache& operator=(const PromptCache&) = delete;
    ~PromptCache() { clear(); }

    /// Keeps the state of `seq`, whose cached positions are exactly `ids`.
    void store(std::span<const std::int32_t> ids, SeqId seq) {
        if (cache_->length(seq) != static_cast<std::int64_t>(ids.size()))
            throw InvalidArgument("PromptCache::store: sequence " + std::to_string(seq) + " holds " +
                                  std::to_string(cache_->length(seq)) + " positions, not the " + std::to_string(ids.size()) + " ids given");
        for (const Entry& e : entries_)
            if (std::equal(e.ids.begin(), e.ids.end(), ids.begin(), ids.end())) return;
        entries_.push_back({std::vector<std::int32_t>(ids.begin(), ids.end()), cache_->fork(seq)});
    }

    /// A new sequence already holding the longest stored prompt that is a proper prefix of
    /// `ids` (at least one id is left to feed, for its logits), or an empty one.
    /// `reused` receives how many leading ids are already in it.
    SeqId start(std::span<const std::int32_t> ids, std::int64_t& reused) {
        const Entry* best = nullptr;
        for (const Entry& e : entries_)
            if (e.ids.size() < ids.size() && std::equal(e.ids.begin(), e.ids.end(), ids.begin()) &&
                (!best || e.ids.size() > best->ids.size()))
                best = &e;
        reused = best ? static_cast<std::int64_t>(best->ids.size()) : 0;
        return best ? cache_->fork(best->seq) : cache_->add_sequence();
    }

    std::size_t size() const { return entries_.size(); }

    void clear() {
        for (const Entry& e : entries_)
            if (cache_->contains(e.seq)) cache_->remove_sequence(e.seq);
        entries_.clear();
    }

private:
    struct Entry {
        std::vector<std::int32_t> ids;
        SeqId seq;
    };
    KVCache<T>* cache_;
    std::vector<Entry> entries_;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
