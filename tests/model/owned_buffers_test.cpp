// Load-time buffers (re-encoded matrices): cache-line aligned whatever their size, since the
// kernels load them in whole 64-byte vectors and AMX tile rows.
#include <catch2/catch.hpp>

#include <gemma4/model/owned_buffers.hpp>

#include <cstdint>
#include <cstring>

using namespace gemma4;

TEST_CASE("load-time buffers are cache-line aligned and writable to their last byte", "[model][memory]") {
    detail::OwnedBuffers owned;
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{63}, std::size_t{4097}, std::size_t{3} << 20}) {
        std::byte* p = owned.allocate(n);
        INFO("bytes " << n);
        CHECK(reinterpret_cast<std::uintptr_t>(p) % detail::kCacheLine == 0);
        std::memset(p, 0x5a, n);  // all of it is ours (ASan checks the bound)
        if (n) CHECK(p[n - 1] == std::byte{0x5a});
    }
    CHECK(owned.buffers.size() == 5);
}
