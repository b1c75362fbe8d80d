// The paged KV cache. Positions are stored in pages of 16 drawn from one pool per attention kind;
// each sequence has a block table per kind mapping position / 16 to a page. Sliding layers keep
// only the pages that intersect the window, so their memory stops growing at the window; pages
// freed by one sequence are reused by any other. Pages carry reference counts so that sequences
// may later share a common prefix.
#pragma once

#include <gemma4/config.hpp>
#include <gemma4/error.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gemma4 {

using SeqId = std::int32_t;

struct KVCacheOptions {
    /// Upper bound on the bytes of K/V pages held at once (0: no bound).
    std::size_t max_bytes = 0;
    /// Upper bound on live sequences.
    std::int32_t max_sequences = 256;
};

template <class T>
class KVCache {
public:
    static constexpr std::int64_t kPageSize = 16;

    explicit KVCache(const Gemma4Config& c, KVCacheOptions options = {}) : options_(options) {
        window_ = c.sliding_window;
        max_positions_ = c.max_position_embeddings;
        for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
            const LayerGeometry g = c.layer(i);
            Pool& pool = pools_[kind_index(g.kind)];
            layer_slot_.push_back({kind_index(g.kind), pool.layers});
            ++pool.layers;
            pool.kv_dim = g.kv_dim();  // the same for every layer of one kind
        }
        for (Pool& p : pools_) p.page_elems = p.layers * 2 * kPageSize * p.kv_dim;
    }

    // ---- sequences -------------------------------------------------------------------------

    SeqId add_sequence() {
        std::int32_t live = 0;
        for (const auto& s : seqs_) live += s.active;
        if (live >= options_.max_sequences)
            throw InvalidArgument("KV cache: cannot add a sequence, " + std::to_string(options_.max_sequences) +
                                  " sequences are already live (max_sequences)");
        for (std::size_t i = 0; i < seqs_.size(); ++i)
            if (!seqs_[i].active) {
                seqs_[i] = Sequence{};
                seqs_[i].active = true;
                return static_cast<SeqId>(i);
            }
        seqs_.push_back(Sequence{});
        seqs_.back().active = true;
        return static_cast<SeqId>(seqs_.size() - 1);
    }

    /// A new sequence sharing all of `src`'s pages (copy on write): the same length and
    /// contents, so it continues from where `src` is without recomputing anything.
    SeqId fork(SeqId src) {
        at(src);
        const SeqId s = add_sequence();
        Sequence& from = seqs_[static_cast<std::size_t>(src)];
        Sequence& to = seqs_[static_cast<std::size_t>(s)];
        to.length = from.length;
        to.table = from.table;
        for (int k = 0; k < 2; ++k)
            for (auto page : to.table[k])
                if (page >= 0) ++pools_[k].refcount[static_cast<std::size_t>(page)];
        return s;
    }

    void remove_sequence(SeqId s) {
        Sequence& seq = at(s);
        for (int k = 0; k < 2; ++k)
            for (auto page : seq.table[k])
                if (page >= 0) release(k, page);
        seq = Sequence{};
    }

    bool contains(SeqId s) const {
        return s >= 0 && static_cast<std::size_t>(s) < seqs_.size() && seqs_[static_cast<std::size_t>(s)].active;
    }
    std::int64_t length(SeqId s) const { return at(s).length; }

    /// Makes room for positions [length, length + n) of sequence s.
    void reserve(SeqId s, std::int64_t n) {
        Sequence& seq = at(s);
        if (seq.length + n > max_positions_)
            throw ContextLengthError("sequence of " + std::to_string(seq.length + n) +
                                     " positions exceeds max_position_embeddings (" + std::to_string(max_positions_) + ")");
        const std::int64_t pages_needed = (seq.length + n + kPageSize - 1) / kPageSize;
        for (int k = 0; k < 2; ++k) {
            if (pools_[k].layers == 0) continue;
            auto& table = seq.table[k];
            // Sliding layers never need a page that ends before the first key of the step's
            // first query; such pages are not allocated (a chunk longer than the window).
            const std::int64_t first_needed = k == 0 ? std::max<std::int64_t>(0, seq.length - window_ + 1) / kPageSize : 0;
            while (static_cast<std::int64_t>(table.size()) < pages_needed) table.push_back(-1);
            for (std::int64_t j = std::max(first_needed, seq.length / kPageSize); j < pages_needed; ++j) {
                std::int32_t& page = table[static_cast<std::size_t>(j)];
                if (page < 0) page = allocate(k);
                else if (pools_[k].refcount[static_cast<std::size_t>(page)] > 1) page = copy_page(k, page);  // shared: copy on write
            }
        }
    }

    /// Marks positions [length, length + n) as written and drops sliding pages that no later
    /// query can see (keys below length + n - window + 1).
    void advance(SeqId s, std::int64_t n) {
        Sequence& seq = at(s);
        seq.length += n;
        const std::int64_t lowest_visible = seq.length - window_ + 1;
        auto& table = seq.table[0];
        for (std::int64_t j = 0; j < static_cast<std::int64_t>(table.size()) && (j + 1) * kPageSize <= lowest_visible; ++j)
            if (table[static_cast<std::size_t>(j)] >= 0) {
                release(0, table[static_cast<std::size_t>(j)]);
                table[static_cast<std::size_t>(j)] = -1;
            }
    }

    // ---- storage ---------------------------------------------------------------------------

    /// K of `layer` at position `pos` of sequence s: [kv_heads · head_dim].
    T* key(std::int64_t layer, SeqId s, std::int64_t pos) { return slot(layer, s, pos, 0); }
    T* value(std::int64_t layer, SeqId s, std::int64_t pos) { return slot(layer, s, pos, 1); }
    const T* key(std::int64_t layer, SeqId s, std::int64_t pos) const { return const_cast<KVCache*>(this)->slot(layer, s, pos, 0); }
    const T* value(std::int64_t layer, SeqId s, std::int64_t pos) const { return const_cast<KVCache*>(this)->slot(layer, s, pos, 1); }

    /// Pages currently held by sequences, per kind (0 sliding, 1 full).
    std::int64_t pages_in_use(AttentionKind kind) const {
        const Pool& p = pools_[kind_index(kind)];
        return static_cast<std::int64_t>(p.storage.size() - p.free.size());
    }
    std::size_t bytes_in_use() const {
        std::size_t b = 0;
        for (int k = 0; k < 2; ++k)
            b += static_cast<std::size_t>(pages_in_use(k == 0 ? AttentionKind::Sliding : AttentionKind::Full)) *
                 static_cast<std::size_t>(pools_[k].page_elems) * sizeof(T);
        return b;
    }
    std::size_t bytes_allocated() const {
        std::size_t b = 0;
        for (const Pool& p : pools_) b += p.storage.size() * static_cast<std::size_t>(p.page_elems) * sizeof(T);
        return b;
    }
    std::int64_t window() const { return window_; }
    /// How many sequences hold `page` of `kind` (for tests of sharing).
    std::int32_t page_refcount(AttentionKind kind, std::int32_t page) const {
        return pools_[kind_index(kind)].refcount[static_cast<std::size_t>(page)];
    }
    /// The page holding position `pos` of sequence s for `kind` (-1: not held).
    std::int32_t page_of(SeqId s, AttentionKind kind, std::int64_t pos) const {
        const auto& table = at(s).table[kind_index(kind)];
        const auto j = static_cast<std::size_t>(pos / kPageSize);
        return j < table.size() ? table[j] : -1;
    }

private:
    struct Pool {
        std::int64_t layers = 0;
        std::int64_t kv_dim = 0;
        std::int64_t page_elems = 0;  // layers × {K, V} × 16 × kv_dim
        std::vector<std::unique_ptr<T[]>> storage;
        std::vector<std::int32_t> refcount;
        std::vector<std::int32_t> free;
    };
    struct Sequence {
        bool active = false;
        std::int64_t length = 0;
        std::array<std::vector<std::int32_t>, 2> table;  // per kind: page id or -1
    };
    struct LayerSlot {
        int kind;
        std::int64_t index;  // among the layers of its kind
    };

    static constexpr int kind_index(AttentionKind k) { return k == AttentionKind::Sliding ? 0 : 1; }

    Sequence& at(SeqId s) {
        if (!contains(s)) throw InvalidArgument("KV cache: no live sequence " + std::to_string(s));
        return seqs_[static_cast<std::size_t>(s)];
    }
    const Sequence& at(SeqId s) const { return const_cast<KVCache*>(this)->at(s); }

    std::int32_t allocate(int k) {
        Pool& p = pools_[k];
        if (!p.free.empty()) {
            const std::int32_t id = p.free.back();
            p.free.pop_back();
            p.refcount[static_cast<std::size_t>(id)] = 1;
            return id;
        }
        const std::size_t page_bytes = static_cast<std::size_t>(p.page_elems) * sizeof(T);
        if (options_.max_bytes && bytes_allocated() + page_bytes > options_.max_bytes)
            throw ContextLengthError("KV cache: memory budget of " + std::to_string(options_.max_bytes) +
                                     " bytes exhausted (" + std::to_string(bytes_allocated()) + " bytes in pages)");
        p.storage.push_back(std::make_unique<T[]>(static_cast<std::size_t>(p.page_elems)));
        p.refcount.push_back(1);
        return static_cast<std::int32_t>(p.storage.size() - 1);
    }

    std::int32_t copy_page(int k, std::int32_t page) {
        const std::int32_t copy = allocate(k);
        Pool& p = pools_[k];
        std::copy_n(p.storage[static_cast<std::size_t>(page)].get(), p.page_elems, p.storage[static_cast<std::size_t>(copy)].get());
        release(k, page);
        return copy;
    }

    void release(int k, std::int32_t page) {
        Pool& p = pools_[k];
        if (--p.refcount[static_cast<std::size_t>(page)] == 0) p.free.push_back(page);
    }

    T* slot(std::int64_t layer, SeqId s, std::int64_t pos, int kv) {
        const LayerSlot ls = layer_slot_[static_cast<std::size_t>(layer)];
        const Sequence& seq = seqs_[static_cast<std::size_t>(s)];
        const std::int32_t page = seq.table[ls.kind][static_cast<std::size_t>(pos / kPageSize)];
        const Pool& p = pools_[ls.kind];
        return p.storage[static_cast<std::size_t>(page)].get() +
               ((ls.index * 2 + kv) * kPageSize + pos % kPageSize) * p.kv_dim;
    }

    KVCacheOptions options_;
    std::int64_t window_ = 0;
    std::int64_t max_positions_ = 0;
    std::array<Pool, 2> pools_{};
    std::vector<LayerSlot> layer_slot_;
    std::vector<Sequence> seqs_;
};

}  // namespace gemma4
