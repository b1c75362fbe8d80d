// Cache-line-aligned storage: a standard allocator whose blocks start on a 64-byte boundary, for
// buffers read by whole-line loads (AMX tile rows, the matrices re-encoded at load).
#pragma once

#include <gemma4/abi.hpp>

#include <cstddef>
#include <new>
#include <vector>

namespace gemma4::inline GEMMA4_ABI::detail {

inline constexpr std::size_t kCacheLine = 64;

/// std::allocator with every block aligned to a cache line. A 32-byte tile row that starts 16
/// bytes into a line (what malloc gives) straddles two lines every other row: AMX loads ran about
/// a quarter slower from such a buffer.
template <class T>
struct CacheLineAllocator {
    using value_type = T;
    CacheLineAllocator() = default;
    template <class U>
    constexpr CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}
    T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{kCacheLine})); }
    void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{kCacheLine}); }
    template <class U>
    bool operator==(const CacheLineAllocator<U>&) const noexcept { return true; }
};

/// A vector whose data() is cache-line aligned.
template <class T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace gemma4::detail
