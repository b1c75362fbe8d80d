// PromptCache: snapshots of sequences at the end of prompts that later requests may start with
// (a system prompt, a shared document). A request that shares a prefix with a cached prompt forks
// the snapshot — sharing its pages copy-on-write — cut back to the shared ids, and prefills only
// the rest. The snapshot holds the sliding layers' window state too (the pages inside the window
// at the end of the prompt), so nothing is recomputed for any layer kind; a snapshot can be cut
// back as far as it still holds the window there.
//
// The rules of reuse (reusable_prefix, fork_prefix, covers_prefix) are shared with Engine's
// prefix cache.
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

namespace detail {
/// How many first ids `a` and `b` share, at most `limit`.
inline std::int64_t common_prefix(std::span<const std::int32_t> a, std::span<const std::int32_t> b, std::size_t limit) {
    const std::size_t n = std::min({a.size(), b.size(), limit});
    return std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n), b.begin()).first - a.begin();
}
}  // namespace detail

/// How many first ids of `ids` the state of sequence `seq`, whose positions hold `held`, can
/// give: the ids they share, one at least left to feed (for its logits), if `seq` can be cut
/// back to them (KVCache::can_truncate: the sliding window there is still held).
template <class T>
std::int64_t reusable_prefix(const KVCache<T>& cache, SeqId seq, std::span<const std::int32_t> held, std::span<const std::int32_t> ids) {
    if (ids.empty()) return 0;
    const std::int64_t n = detail::common_prefix(held, ids, ids.size() - 1);
    return cache.can_truncate(seq, n) ? n : 0;
}

/// A new sequence holding the first `length` positions of `seq`, sharing its pages (copy on write).
template <class T>
SeqId fork_prefix(KVCache<T>& cache, SeqId seq, std::int64_t length) {
    const SeqId s = cache.fork(seq);
    try {
        cache.truncate(s, length);
    } catch (...) {
        cache.remove_sequence(s);
        throw;
    }
    return s;
}

/// Whether state `a` (holding `a_ids`) gives every request at least what state `b` gives: b's
/// ids start a's, and a can be cut back to every length b can.
template <class T>
bool covers_prefix(const KVCache<T>& cache, SeqId a, std::span<const std::int32_t> a_ids, SeqId b, std::span<const std::int32_t> b_ids) {
    return b_ids.size() <= a_ids.size() && std::equal(b_ids.begin(), b_ids.end(), a_ids.begin()) &&
           cache.first_held_slot(a, AttentionKind::Sliding) <= cache.first_held_slot(b, AttentionKind::Sliding);
}

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

    /// A new sequence already holding the most first ids of `ids` that a stored prompt gives
    /// (reusable_prefix: at least one id is left to feed), or an empty one. `reused` receives
    /// how many leading ids are already in it.
    SeqId start(std::span<const std::int32_t> ids, std::int64_t& reused) {
        const Entry* best = nullptr;
        reused = 0;
        for (const Entry& e : entries_)
            if (const std::int64_t n = reusable_prefix(*cache_, e.seq, e.ids, ids); n > reused) {
                best = &e;
                reused = n;
            }
        return best ? fork_prefix(*cache_, best->seq, reused) : cache_->add_sequence();
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
