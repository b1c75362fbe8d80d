// Flat open-addressing tables for the two hot lookups of BPE: piece text → id, and
// (left id, right id) → (merge rank, merged id). A 262k-piece vocabulary and 515k merges load
// without one allocation per entry, and lookups touch one cache line in the common case.
#pragma once

#include <gemma4/abi.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace gemma4::inline GEMMA4_ABI::detail {

inline std::uint64_t mix64(std::uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

inline std::uint64_t hash_bytes(std::string_view s) {
    std::uint64_t h = 0x9E3779B97F4A7C15ull ^ (s.size() * 0x100000001B3ull);
    const char* p = s.data();
    std::size_t n = s.size();
    while (n >= 8) {
        std::uint64_t w;
        std::memcpy(&w, p, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    std::uint64_t tail = 0;
    std::memcpy(&tail, p, n);
    return mix64(h ^ tail);
}

inline std::size_t table_capacity_for(std::size_t entries) {
    // Load factor at most 1/2 keeps probe sequences short.
    return std::bit_ceil(std::max<std::size_t>(16, entries * 2));
}

/// Owns the bytes of every piece (one arena) and maps piece text ↔ id. Ids may have holes.
class PieceTable {
public:
    static constexpr std::int32_t kMissing = -1;

    void reserve(std::size_t pieces, std::size_t bytes) {
        arena_.reserve(bytes);
        spans_.reserve(pieces);
        slots_.assign(table_capacity_for(pieces), Slot{});
        mask_ = slots_.size() - 1;
    }

    /// Adds `piece` with `id`; returns the id already holding this piece text, or kMissing when
    /// it was new. The caller rejects duplicate ids (see `has_id`).
    std::int32_t insert(std::string_view piece, std::int32_t id) { return insert_hashed(piece, hash_bytes(piece), id); }

    std::int32_t insert_hashed(std::string_view piece, std::uint64_t h, std::int32_t id) {
        if ((count_ + 1) * 2 > slots_.size()) grow();
        std::size_t i = h & mask_;
        while (slots_[i].id != kMissing) {
            if (matches(slots_[i], piece, h)) return slots_[i].id;
            i = (i + 1) & mask_;
        }
        if (static_cast<std::size_t>(id) >= spans_.size()) spans_.resize(static_cast<std::size_t>(id) + 1);
        const Span span{static_cast<std::uint32_t>(arena_.size()), static_cast<std::uint32_t>(piece.size())};
        spans_[static_cast<std::size_t>(id)] = span;
        arena_.append(piece);
        slots_[i] = Slot{id, static_cast<std::uint32_t>(h), span};
        ++count_;
        return kMissing;
    }

    std::int32_t find(std::string_view piece) const { return find_hashed(piece, hash_bytes(piece)); }

    std::int32_t find_hashed(std::string_view piece, std::uint64_t h) const {
        if (slots_.empty()) return kMissing;
        std::size_t i = h & mask_;
        while (slots_[i].id != kMissing) {
            if (matches(slots_[i], piece, h)) return slots_[i].id;
            i = (i + 1) & mask_;
        }
        return kMissing;
    }

    /// Hints the CPU to fetch the slot a lookup of hash `h` starts at. Loading 500k merges is
    /// bound by cache misses; hashing a batch and prefetching first hides most of them.
    void prefetch(std::uint64_t h) const {
        if (!slots_.empty()) __builtin_prefetch(&slots_[h & mask_]);
    }

    bool has_id(std::int32_t id) const {
        return id >= 0 && static_cast<std::size_t>(id) < spans_.size() &&
               spans_[static_cast<std::size_t>(id)].length != Span::kHole;
    }

    std::string_view piece_of(std::int32_t id) const {
        const Span s = spans_[static_cast<std::size_t>(id)];
        return {arena_.data() + s.offset, s.length};
    }

    std::size_t size() const { return count_; }

private:
    struct Span {
        static constexpr std::uint32_t kHole = std::numeric_limits<std::uint32_t>::max();
        std::uint32_t offset = 0;
        std::uint32_t length = kHole;
    };
    // The span is kept in the slot too, so a lookup does not also miss on `spans_`.
    struct Slot {
        std::int32_t id = kMissing;
        std::uint32_t hash = 0;
        Span span{};
    };

    bool matches(const Slot& slot, std::string_view piece, std::uint64_t h) const {
        return slot.hash == static_cast<std::uint32_t>(h) && slot.span.length == piece.size() &&
               std::memcmp(arena_.data() + slot.span.offset, piece.data(), piece.size()) == 0;
    }

    void grow() {
        std::vector<Slot> old = std::move(slots_);
        slots_.assign(std::max<std::size_t>(16, old.size() * 2), Slot{});
        mask_ = slots_.size() - 1;
        for (const Slot& s : old) {
            if (s.id == kMissing) continue;
            std::size_t i = hash_bytes({arena_.data() + s.span.offset, s.span.length}) & mask_;
            while (slots_[i].id != kMissing) i = (i + 1) & mask_;
            slots_[i] = s;
        }
    }

    std::string arena_;
    std::vector<Span> spans_;
    std::vector<Slot> slots_;
    std::size_t mask_ = 0;
    std::size_t count_ = 0;
};

struct MergeResult {
    std::int32_t rank;
    std::int32_t merged_id;
};

/// (left id, right id) → MergeResult. Later insertions of the same pair replace earlier ones,
/// as in Hugging Face `tokenizers`.
class MergeTable {
public:
    void reserve(std::size_t merges) {
        slots_.assign(table_capacity_for(merges), Slot{});
        mask_ = slots_.size() - 1;
    }

    void insert(std::int32_t left, std::int32_t right, MergeResult value) {
        if ((count_ + 1) * 2 > slots_.size()) grow();
        const std::uint64_t key = pack(left, right);
        std::size_t i = mix64(key) & mask_;
        while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
        if (slots_[i].key == kEmpty) ++count_;
        slots_[i] = Slot{key, value};
    }

    void prefetch(std::int32_t left, std::int32_t right) const {
        if (!slots_.empty()) __builtin_prefetch(&slots_[mix64(pack(left, right)) & mask_]);
    }

    const MergeResult* find(std::int32_t left, std::int32_t right) const {
        if (count_ == 0) return nullptr;
        const std::uint64_t key = pack(left, right);
        std::size_t i = mix64(key) & mask_;
        while (slots_[i].key != kEmpty) {
            if (slots_[i].key == key) return &slots_[i].value;
            i = (i + 1) & mask_;
        }
        return nullptr;
    }

    std::size_t size() const { return count_; }

private:
    static constexpr std::uint64_t kEmpty = std::numeric_limits<std::uint64_t>::max();
    struct Slot {
        std::uint64_t key = kEmpty;
        MergeResult value{};
    };
    static std::uint64_t pack(std::int32_t left, std::int32_t right) {
        return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
               static_cast<std::uint32_t>(right);
    }
    void grow() {
        std::vector<Slot> old = std::move(slots_);
        slots_.assign(std::max<std::size_t>(16, old.size() * 2), Slot{});
        mask_ = slots_.size() - 1;
        for (const Slot& s : old) {
            if (s.key == kEmpty) continue;
            std::size_t i = mix64(s.key) & mask_;
            while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
            slots_[i] = s;
        }
    }

    std::vector<Slot> slots_;
    std::size_t mask_ = 0;
    std::size_t count_ = 0;
};

}  // namespace gemma4::detail
