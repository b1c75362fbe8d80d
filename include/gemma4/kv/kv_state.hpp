// One sequence of a KV cache as a record of a state file: its length, then for each attention
// kind (sliding, then full) the page slots it holds (position / 16) and their bytes. Only the
// pages the sequence still holds are written: sliding layers drop pages that fall out of the
// window, so a long conversation's record stops growing there. Int8 caches write their codes
// and scales as the pages hold them.
//
// Record (little-endian, inside a file that carries the model fingerprint and checksum):
//   u64 length
//   per kind:  u64 page_bytes, u64 n, n × i64 slot, n × page_bytes bytes
//
// Reading validates against the cache it restores into: the length within the context, the page
// size of the cache's layout (scalar type, KV dtype, config), and exactly the slots a sequence of
// that length holds (KVCache::held_slots), so that every key a later step reads is present. It
// adds a new sequence and removes it again on any error, leaving the cache as it was.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/io/binary_stream.hpp>
#include <gemma4/kv/kv_cache.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

inline constexpr AttentionKind kKVKinds[2] = {AttentionKind::Sliding, AttentionKind::Full};

/// Bytes of the record of a sequence of `length` positions in `cache`'s layout.
template <class T>
std::uint64_t kv_sequence_record_bytes(const KVCache<T>& cache, std::int64_t length) {
    std::uint64_t n = 8;
    for (const AttentionKind kind : kKVKinds) {
        const auto [first, end] = cache.held_slots(kind, length);
        n += 16 + static_cast<std::uint64_t>(end - first) * (8 + cache.page_bytes(kind));
    }
    return n;
}

/// Writes sequence `seq` of `cache` as one record.
template <class T>
void write_kv_sequence(BinaryWriter& out, const KVCache<T>& cache, SeqId seq) {
    const std::int64_t length = cache.length(seq);
    out.i64(length);
    for (const AttentionKind kind : kKVKinds) {
        const auto [first, end] = cache.held_slots(kind, length);
        out.u64(cache.page_bytes(kind));
        out.u64(static_cast<std::uint64_t>(end - first));
        for (std::int64_t j = first; j < end; ++j) out.i64(j);
        std::vector<std::byte> page(cache.page_bytes(kind));
        for (std::int64_t j = first; j < end; ++j) {
            cache.export_page(seq, kind, j, page);
            out.bytes(page);
        }
    }
}

/// Reads one record into a new sequence of `cache` and returns it.
template <class T>
SeqId read_kv_sequence(BinaryReader& in, KVCache<T>& cache) {
    const std::int64_t length = in.i64("kv.length");
    if (length < 0 || length > cache.max_positions())
        in.fail("kv.length: " + std::to_string(length) + " positions, the model's context is " + std::to_string(cache.max_positions()));
    // The pages are allocated before they are read: first make sure the file holds them all.
    if (kv_sequence_record_bytes(cache, length) - 8 > in.left())
        in.fail("kv: a sequence of " + std::to_string(length) + " positions needs " + std::to_string(kv_sequence_record_bytes(cache, length)) +
                " bytes of record, only " + std::to_string(in.left() + 8) + " are left");
    const SeqId seq = cache.add_sequence_of_length(length);
    try {
        for (const AttentionKind kind : kKVKinds) {
            const std::string name = "kv." + std::string(attention_kind_name(kind));
            const std::uint64_t page_bytes = in.u64((name + ".page_bytes").c_str());
            if (page_bytes != cache.page_bytes(kind))
                in.fail(name + ".page_bytes: " + std::to_string(page_bytes) + ", this cache's pages have " +
                        std::to_string(cache.page_bytes(kind)));
            const auto [first, end] = cache.held_slots(kind, length);
            const auto held = static_cast<std::uint64_t>(end - first);
            const std::uint64_t n = in.count((name + ".pages").c_str(), held, 8 + page_bytes);
            if (n != held)
                in.fail(name + ".pages: " + std::to_string(n) + " pages, a sequence of " + std::to_string(length) + " positions holds " +
                        std::to_string(held));
            for (std::int64_t j = first; j < end; ++j) {
                const std::int64_t slot = in.i64((name + ".slot").c_str());
                if (slot != j)
                    in.fail(name + ".slot: page slot " + std::to_string(slot) + " where a sequence of " + std::to_string(length) +
                            " positions holds slot " + std::to_string(j));
            }
            std::vector<std::byte> page(static_cast<std::size_t>(page_bytes));
            for (std::int64_t j = first; j < end; ++j) {
                in.bytes(page, (name + ".page").c_str());
                try {
                    cache.import_page(seq, kind, j, page);
                } catch (const InvalidArgument& e) {
                    in.fail(e.what());
                }
            }
        }
    } catch (...) {
        cache.remove_sequence(seq);
        throw;
    }
    return seq;
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
