// The paged KV cache. Positions are stored in pages of 16 drawn from one pool per attention kind;
// each sequence has a block table per kind mapping position / 16 to a page. Sliding layers keep
// only the pages that intersect the window, so their memory stops growing at the window; pages
// freed by one sequence are reused by any other. Pages carry reference counts so that sequences
// may later share a common prefix.
//
// K/V are held in the model's scalar type T (default, exact) or, with KVDtype::Int8, as int8
// codes with one float scale per (position, kv head): max|x| / 127, so each stored element is
// within scale / 2 of the value written. That cuts a position's bytes to ≈ 1/4 (float) or ≈ 1/8
// (double) for long contexts; attention then reads the codes with fused dequantization.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/error.hpp>
#include <gemma4/tensor/quant.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <utility>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

using SeqId = std::int32_t;

/// How K/V are stored: in the model's scalar type (exact), or int8 with a scale per head.
enum class KVDtype : std::uint8_t { Float, Int8 };

struct KVCacheOptions {
    /// Upper bound on the bytes of K/V pages held at once (0: no bound).
    std::size_t max_bytes = 0;
    /// Upper bound on live sequences.
    std::int32_t max_sequences = 256;
    /// Storage of K/V (Float: the model's scalar type T).
    KVDtype kv_dtype = KVDtype::Float;
};

/// One cached K or V row stored as int8: codes [kv_heads · head_dim] and a scale per head;
/// element i is codes[i] · scales[i / head_dim].
struct KVInt8Row {
    const std::int8_t* codes;
    const float* scales;
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
            pool.head_dim = g.head_dim;
        }
        for (Pool& p : pools_) {
            const std::int64_t rows = p.layers * 2 * kPageSize;  // (layer, K/V, position) rows
            p.page_bytes = int8() ? static_cast<std::size_t>(rows * p.kv_dim) + static_cast<std::size_t>(rows * heads(p)) * sizeof(float)
                                  : static_cast<std::size_t>(rows * p.kv_dim) * sizeof(T);
        }
    }

    /// Whether K/V are stored as int8 (KVDtype::Int8): then use store() and key_int8() /
    /// value_int8() instead of the T* accessors.
    bool int8() const { return options_.kv_dtype == KVDtype::Int8; }

    /// Bytes of K and V for one position of one layer of `kind` (page rounding aside).
    std::size_t bytes_per_position(AttentionKind kind) const {
        const Pool& p = pools_[kind_index(kind)];
        return p.layers ? p.page_bytes / static_cast<std::size_t>(p.layers * kPageSize) : 0;
    }

    // ---- sequences -------------------------------------------------------------------------

    SeqId add_sequence() {
        std::int32_t live = 0;
        for (const auto& s : seqs_) live += s.active;
        if (live >= options_.max_sequences)
            throw InvalidArgument("KV cache: cannot add a sequence, " + std::to_string(options_.max_sequences) +
                                  " sequences are already live (max_sequences)");
        std::size_t i = 0;
        while (i < seqs_.size() && seqs_[i].active) ++i;
        if (i == seqs_.size()) seqs_.emplace_back();
        Sequence& seq = seqs_[i];
        seq.active = true;
        seq.length = 0;
        seq.rollback = 0;
        // Page tables of the whole context, so that decoding never grows them (a step allocates nothing).
        const auto pages = static_cast<std::size_t>((max_positions_ + kPageSize - 1) / kPageSize);
        for (int k = 0; k < 2; ++k) {
            seq.table[k].clear();
            if (pools_[k].layers) seq.table[k].reserve(pages);
        }
        return static_cast<SeqId>(i);
    }

    /// A new sequence sharing all of `src`'s pages (copy on write): the same length and
    /// contents, so it continues from where `src` is without recomputing anything.
    SeqId fork(SeqId src) {
        at(src);
        const SeqId s = add_sequence();
        Sequence& from = seqs_[static_cast<std::size_t>(src)];
        Sequence& to = seqs_[static_cast<std::size_t>(s)];
        to.length = from.length;
        to.rollback = from.rollback;
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
        seq.active = false;
        seq.length = 0;
        seq.rollback = 0;
        for (auto& table : seq.table) table.clear();  // its capacity serves the next sequence in this slot
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
    /// query can see (keys below length + n - window + 1), or, with set_max_rollback(s, r), no
    /// query after a rollback of up to r positions.
    void advance(SeqId s, std::int64_t n) {
        Sequence& seq = at(s);
        seq.length += n;
        const std::int64_t lowest_visible = seq.length - seq.rollback - window_ + 1;
        auto& table = seq.table[0];
        for (std::int64_t j = 0; j < static_cast<std::int64_t>(table.size()) && (j + 1) * kPageSize <= lowest_visible; ++j)
            if (table[static_cast<std::size_t>(j)] >= 0) {
                release(0, table[static_cast<std::size_t>(j)]);
                table[static_cast<std::size_t>(j)] = -1;
            }
    }

    /// Lets truncate() take back up to `positions` positions written after this call: sliding
    /// pages stay held until no query could see them after such a rollback (at most one page
    /// more per sequence for a rollback of up to 16). Speculative decoding writes a drafted
    /// continuation, then keeps only its accepted part.
    void set_max_rollback(SeqId s, std::int64_t positions) {
        if (positions < 0) throw InvalidArgument("KV cache: max rollback must be >= 0, got " + std::to_string(positions));
        at(s).rollback = positions;
    }
    std::int64_t max_rollback(SeqId s) const { return at(s).rollback; }

    /// Forgets positions [length, this->length(s)) of sequence s, as if they had never been
    /// written; pages holding only such positions go back to the pool. The sliding pages a query
    /// at `length` sees must still be held: InvalidArgument if the rollback reaches further back
    /// than set_max_rollback allowed when they were written.
    void truncate(SeqId s, std::int64_t length) {
        Sequence& seq = at(s);
        if (length < 0 || length > seq.length)
            throw InvalidArgument("KV cache: cannot truncate sequence " + std::to_string(s) + " of " + std::to_string(seq.length) +
                                  " positions to " + std::to_string(length));
        if (length == seq.length) return;
        if (const std::int64_t j = dropped_window_slot(seq, length); j >= 0)
            throw InvalidArgument("KV cache: cannot roll sequence " + std::to_string(s) + " back from " + std::to_string(seq.length) +
                                  " to " + std::to_string(length) + " positions: its sliding page for positions from " +
                                  std::to_string(j * kPageSize) + " was freed (set_max_rollback allows " + std::to_string(seq.rollback) +
                                  ")");
        const auto keep = static_cast<std::size_t>((length + kPageSize - 1) / kPageSize);
        for (int k = 0; k < 2; ++k) {
            auto& table = seq.table[k];
            while (table.size() > keep) {
                if (table.back() >= 0) release(k, table.back());
                table.pop_back();
            }
        }
        seq.length = length;
    }

    /// Whether truncate(s, length) would succeed: sequence s still holds the sliding pages that
    /// a query at `length` sees.
    bool can_truncate(SeqId s, std::int64_t length) const {
        const Sequence& seq = at(s);
        return length >= 0 && length <= seq.length && (length == seq.length || dropped_window_slot(seq, length) < 0);
    }

    /// The lowest page slot of `kind` that sequence s holds (its slot count if none). Of two
    /// sequences with the same first positions, the one whose first sliding slot is lower can
    /// be truncated to every length the other can.
    std::int64_t first_held_slot(SeqId s, AttentionKind kind) const {
        const auto& table = at(s).table[kind_index(kind)];
        std::int64_t j = 0;
        while (j < static_cast<std::int64_t>(table.size()) && table[static_cast<std::size_t>(j)] < 0) ++j;
        return j;
    }

    // ---- storage ---------------------------------------------------------------------------

    /// K of `layer` at position `pos` of sequence s: [kv_heads · head_dim] (Float caches).
    T* key(std::int64_t layer, SeqId s, std::int64_t pos) { return float_slot(layer, s, pos, 0); }
    T* value(std::int64_t layer, SeqId s, std::int64_t pos) { return float_slot(layer, s, pos, 1); }
    const T* key(std::int64_t layer, SeqId s, std::int64_t pos) const { return const_cast<KVCache*>(this)->float_slot(layer, s, pos, 0); }
    const T* value(std::int64_t layer, SeqId s, std::int64_t pos) const { return const_cast<KVCache*>(this)->float_slot(layer, s, pos, 1); }

    /// K or V of `layer` at `pos` of an Int8 cache.
    KVInt8Row key_int8(std::int64_t layer, SeqId s, std::int64_t pos) const { return int8_slot(layer, s, pos, 0); }
    KVInt8Row value_int8(std::int64_t layer, SeqId s, std::int64_t pos) const { return int8_slot(layer, s, pos, 1); }

    /// Writes K and V ([kv_heads · head_dim] each) of `layer` at `pos`, quantizing them for an
    /// Int8 cache. Positions must have been reserved.
    void store(std::int64_t layer, SeqId s, std::int64_t pos, const T* k, const T* v) {
        const Pool& p = pools_[layer_slot_[static_cast<std::size_t>(layer)].kind];
        if (!int8()) {
            std::memcpy(float_slot(layer, s, pos, 0), k, sizeof(T) * static_cast<std::size_t>(p.kv_dim));
            std::memcpy(float_slot(layer, s, pos, 1), v, sizeof(T) * static_cast<std::size_t>(p.kv_dim));
            return;
        }
        for (int kv = 0; kv < 2; ++kv) {
            const KVInt8Row row = int8_slot(layer, s, pos, kv);
            const T* x = kv ? v : k;
            for (std::int64_t h = 0; h * p.head_dim < p.kv_dim; ++h) {
                // one scale per head (computed in T, stored as float)
                auto* codes = const_cast<std::int8_t*>(row.codes) + h * p.head_dim;
                const_cast<float*>(row.scales)[h] = static_cast<float>(quant::quantize_symmetric(x + h * p.head_dim, p.head_dim, quant::kQ8Max, codes));
            }
        }
    }

    /// Pages currently held by sequences, per kind (0 sliding, 1 full).
    std::int64_t pages_in_use(AttentionKind kind) const {
        const Pool& p = pools_[kind_index(kind)];
        return static_cast<std::int64_t>(p.storage.size() - p.free.size());
    }
    std::size_t bytes_in_use() const {
        std::size_t b = 0;
        for (int k = 0; k < 2; ++k)
            b += static_cast<std::size_t>(pages_in_use(k == 0 ? AttentionKind::Sliding : AttentionKind::Full)) *
                 pools_[k].page_bytes;
        return b;
    }
    std::size_t bytes_allocated() const {
        std::size_t b = 0;
        for (const Pool& p : pools_) b += p.storage.size() * p.page_bytes;
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

    // ---- one sequence's state, for saving and restoring it (kv/kv_state.hpp) --------------

    const KVCacheOptions& options() const { return options_; }
    std::int64_t max_positions() const { return max_positions_; }
    /// Bytes of one page of `kind`: every layer of that kind, K and V, 16 positions.
    std::size_t page_bytes(AttentionKind kind) const { return pools_[kind_index(kind)].page_bytes; }

    /// The page slots (position / 16) [first, end) that a sequence of `length` positions holds
    /// for `kind` after its forward steps: every slot up to its last position on full layers,
    /// only those a later query can still see on sliding layers, none for a kind without layers.
    std::pair<std::int64_t, std::int64_t> held_slots(AttentionKind kind, std::int64_t length) const {
        const int k = kind_index(kind);
        if (pools_[k].layers == 0 || length <= 0) return {0, 0};
        const std::int64_t end = (length + kPageSize - 1) / kPageSize;
        const std::int64_t first = k == 0 ? std::max<std::int64_t>(0, length - window_ + 1) / kPageSize : 0;
        return {std::min(first, end), end};
    }

    /// Copies the page at `slot` of sequence s for `kind` into `out` (page_bytes(kind) bytes).
    /// Rows of positions at or past the sequence's length are written as zeros: they hold
    /// nothing yet (or a former owner's data), and the copy should depend only on what s wrote.
    void export_page(SeqId s, AttentionKind kind, std::int64_t slot, std::span<std::byte> out) const {
        const Sequence& seq = at(s);
        const int k = kind_index(kind);
        const Pool& p = pools_[k];
        const auto [first, end] = held_slots(kind, seq.length);
        if (slot < first || slot >= end || static_cast<std::size_t>(slot) >= seq.table[k].size() ||
            seq.table[k][static_cast<std::size_t>(slot)] < 0)
            throw InvalidArgument("KV cache: sequence " + std::to_string(s) + " holds no " +
                                  std::string(attention_kind_name(kind)) + " page at slot " + std::to_string(slot));
        if (out.size() != p.page_bytes)
            throw InvalidArgument("KV cache: export_page needs " + std::to_string(p.page_bytes) + " bytes, got " + std::to_string(out.size()));
        const std::byte* page = p.storage[static_cast<std::size_t>(seq.table[k][static_cast<std::size_t>(slot)])].get();
        std::copy_n(page, p.page_bytes, out.data());
        const std::int64_t written = std::min(kPageSize, seq.length - slot * kPageSize);
        if (written == kPageSize) return;
        const std::int64_t rows = p.layers * 2 * kPageSize;
        const std::size_t row_bytes = static_cast<std::size_t>(p.kv_dim) * (int8() ? 1 : sizeof(T));
        const std::size_t scale_bytes = static_cast<std::size_t>(heads(p)) * sizeof(float);
        for (std::int64_t block = 0; block < p.layers * 2; ++block)  // (layer, K/V) blocks of 16 rows
            for (std::int64_t r = block * kPageSize + written; r < (block + 1) * kPageSize; ++r) {
                std::fill_n(out.data() + static_cast<std::size_t>(r) * row_bytes, row_bytes, std::byte{0});
                if (int8())
                    std::fill_n(out.data() + static_cast<std::size_t>(rows) * row_bytes + static_cast<std::size_t>(r) * scale_bytes,
                                scale_bytes, std::byte{0});
            }
    }

    /// A new sequence of `length` positions holding fresh zeroed pages (reference count 1) at
    /// exactly held_slots() of each kind; fill them with import_page().
    SeqId add_sequence_of_length(std::int64_t length) {
        if (length < 0 || length > max_positions_)
            throw ContextLengthError("KV cache: a sequence of " + std::to_string(length) +
                                     " positions exceeds max_position_embeddings (" + std::to_string(max_positions_) + ")");
        const SeqId s = add_sequence();
        try {
            Sequence& seq = seqs_[static_cast<std::size_t>(s)];
            for (int k = 0; k < 2; ++k) {
                const auto [first, end] = held_slots(k == 0 ? AttentionKind::Sliding : AttentionKind::Full, length);
                if (pools_[k].layers) seq.table[k].assign(static_cast<std::size_t>((length + kPageSize - 1) / kPageSize), -1);
                for (std::int64_t j = first; j < end; ++j) {
                    const std::int32_t page = allocate(k);
                    std::fill_n(pools_[k].storage[static_cast<std::size_t>(page)].get(), pools_[k].page_bytes, std::byte{0});
                    seq.table[k][static_cast<std::size_t>(j)] = page;
                }
            }
            seq.length = length;
        } catch (...) {
            remove_sequence(s);
            throw;
        }
        return s;
    }

    /// Writes the page at `slot` of sequence s for `kind` (a page it holds; a shared one is
    /// copied first). The bytes are checked before anything is written: every value finite
    /// (Float), every scale finite and >= 0 and every code in [-127, 127] (Int8).
    void import_page(SeqId s, AttentionKind kind, std::int64_t slot, std::span<const std::byte> in) {
        Sequence& seq = at(s);
        const int k = kind_index(kind);
        const Pool& p = pools_[k];
        if (in.size() != p.page_bytes)
            throw InvalidArgument("KV cache: a " + std::string(attention_kind_name(kind)) + " page has " +
                                  std::to_string(p.page_bytes) + " bytes, got " + std::to_string(in.size()));
        if (slot < 0 || static_cast<std::size_t>(slot) >= seq.table[k].size() || seq.table[k][static_cast<std::size_t>(slot)] < 0)
            throw InvalidArgument("KV cache: sequence " + std::to_string(s) + " holds no " +
                                  std::string(attention_kind_name(kind)) + " page at slot " + std::to_string(slot));
        check_page_values(p, in, kind, slot);
        std::int32_t& page = seq.table[k][static_cast<std::size_t>(slot)];
        if (pools_[k].refcount[static_cast<std::size_t>(page)] > 1) page = copy_page(k, page);
        std::copy_n(in.data(), p.page_bytes, pools_[k].storage[static_cast<std::size_t>(page)].get());
    }

private:
    struct Pool {
        std::int64_t layers = 0;
        std::int64_t kv_dim = 0;
        std::int64_t head_dim = 0;
        /// Float: layers × {K, V} × 16 × kv_dim values of T. Int8: as many int8 codes, then
        /// layers × {K, V} × 16 × kv_heads float scales.
        std::size_t page_bytes = 0;
        std::vector<std::unique_ptr<std::byte[]>> storage;
        std::vector<std::int32_t> refcount;
        std::vector<std::int32_t> free;
    };
    struct Sequence {
        bool active = false;
        std::int64_t length = 0;
        std::int64_t rollback = 0;  // set_max_rollback
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
        if (options_.max_bytes && bytes_allocated() + p.page_bytes > options_.max_bytes)
            throw ContextLengthError("KV cache: memory budget of " + std::to_string(options_.max_bytes) +
                                     " bytes exhausted (" + std::to_string(bytes_allocated()) + " bytes in pages)");
        // operator new aligns to at least alignof(std::max_align_t), enough for T and the scales
        p.storage.push_back(std::make_unique<std::byte[]>(p.page_bytes));
        p.refcount.push_back(1);
        return static_cast<std::int32_t>(p.storage.size() - 1);
    }

    std::int32_t copy_page(int k, std::int32_t page) {
        const std::int32_t copy = allocate(k);
        Pool& p = pools_[k];
        std::copy_n(p.storage[static_cast<std::size_t>(page)].get(), p.page_bytes, p.storage[static_cast<std::size_t>(copy)].get());
        release(k, page);
        return copy;
    }

    void release(int k, std::int32_t page) {
        Pool& p = pools_[k];
        if (--p.refcount[static_cast<std::size_t>(page)] == 0) p.free.push_back(page);
    }

    static std::int64_t heads(const Pool& p) { return p.head_dim ? p.kv_dim / p.head_dim : 0; }

    void check_page_values(const Pool& p, std::span<const std::byte> in, AttentionKind kind, std::int64_t slot) const {
        const auto bad = [&](const std::string& what) {
            throw InvalidArgument("KV cache: " + std::string(attention_kind_name(kind)) + " page at slot " + std::to_string(slot) +
                                  " holds " + what);
        };
        const std::int64_t rows = p.layers * 2 * kPageSize;
        if (!int8()) {
            for (std::size_t i = 0; i < p.page_bytes / sizeof(T); ++i) {
                T x;
                std::memcpy(&x, in.data() + i * sizeof(T), sizeof(T));
                if (!std::isfinite(x)) bad("a value that is not finite");
            }
            return;
        }
        const auto codes = static_cast<std::size_t>(rows * p.kv_dim);
        for (std::size_t i = 0; i < codes; ++i)
            if (static_cast<std::int8_t>(in[i]) == -128) bad("the int8 code -128 (codes are within [-127, 127])");
        for (std::size_t i = 0; i < static_cast<std::size_t>(rows * heads(p)); ++i) {
            float d;
            std::memcpy(&d, in.data() + codes + i * sizeof(float), sizeof(float));
            if (!(d >= 0.0f) || !std::isfinite(d)) bad("a scale that is negative or not finite");
        }
    }

    /// The first sliding page slot that a query at `length` sees and `seq` no longer holds
    /// (-1: it holds them all).
    std::int64_t dropped_window_slot(const Sequence& seq, std::int64_t length) const {
        if (!pools_[0].layers) return -1;
        const auto& sliding = seq.table[0];
        for (std::int64_t j = std::max<std::int64_t>(0, length - window_ + 1) / kPageSize; j * kPageSize < length; ++j)
            if (static_cast<std::size_t>(j) >= sliding.size() || sliding[static_cast<std::size_t>(j)] < 0) return j;
        return -1;
    }

    /// The page holding `pos` and the index of the (layer, K/V, position) row within it.
    std::byte* row_of(std::int64_t layer, SeqId s, std::int64_t pos, int kv, const Pool*& pool, std::int64_t& row) const {
        const LayerSlot ls = layer_slot_[static_cast<std::size_t>(layer)];
        const Sequence& seq = seqs_[static_cast<std::size_t>(s)];
        const std::int32_t page = seq.table[ls.kind][static_cast<std::size_t>(pos / kPageSize)];
        pool = &pools_[ls.kind];
        row = (ls.index * 2 + kv) * kPageSize + pos % kPageSize;
        return pool->storage[static_cast<std::size_t>(page)].get();
    }

    T* float_slot(std::int64_t layer, SeqId s, std::int64_t pos, int kv) {
        if (int8()) throw InvalidArgument("KV cache: this cache stores int8 K/V; use store() and key_int8()/value_int8()");
        const Pool* p;
        std::int64_t row;
        std::byte* page = row_of(layer, s, pos, kv, p, row);
        return reinterpret_cast<T*>(page) + row * p->kv_dim;
    }

    KVInt8Row int8_slot(std::int64_t layer, SeqId s, std::int64_t pos, int kv) const {
        const Pool* p;
        std::int64_t row;
        std::byte* page = row_of(layer, s, pos, kv, p, row);
        const std::int64_t rows = p->layers * 2 * kPageSize;
        return {reinterpret_cast<const std::int8_t*>(page) + row * p->kv_dim,
                reinterpret_cast<const float*>(page + rows * p->kv_dim) + row * heads(*p)};
    }

    KVCacheOptions options_;
    std::int64_t window_ = 0;
    std::int64_t max_positions_ = 0;
    std::array<Pool, 2> pools_{};
    std::vector<LayerSlot> layer_slot_;
    std::vector<Sequence> seqs_;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
