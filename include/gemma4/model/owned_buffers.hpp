// Buffers made at load time (re-encoded or converted matrices), 64-byte aligned, with the
// storage they were made from kept alive (other views still point into it).
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/detail/aligned.hpp>

#include <cstddef>
#include <memory>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {
namespace detail {

/// Owns re-encoded matrices and keeps the storage they were made from alive (the norms still
/// point into it).
struct OwnedBuffers {
    struct AlignedDelete {
        void operator()(std::byte* p) const { CacheLineAllocator<std::byte>{}.deallocate(p, 0); }
    };
    std::shared_ptr<const void> parent;
    std::vector<std::unique_ptr<std::byte[], AlignedDelete>> buffers;
    /// n bytes aligned to a cache line (kernels load whole 64-byte vectors), left uninitialised.
    std::byte* allocate(std::size_t n) {
        std::byte* p = CacheLineAllocator<std::byte>{}.allocate(n > 0 ? n : 1);
        buffers.push_back(std::unique_ptr<std::byte[], AlignedDelete>(p));
        return p;
    }
};

}  // namespace detail
}  // namespace GEMMA4_ABI
}  // namespace gemma4
