// .npy reading: the input is a whole file, read as each element type the library supports.
#include <gemma4/io/npy.hpp>

#include "fuzz_support.hpp"

namespace {
template <class T>
void read_as(const std::filesystem::path& path) {
    gemma4::fuzz::expect_ok_or_error([&] {
        const gemma4::NpyArray<T> a = gemma4::read_npy<T>(path);
        std::int64_t count = 1;
        for (const auto d : a.shape) count *= d;
        if (count != static_cast<std::int64_t>(a.data.size())) gemma4::fuzz::fail("shape and data size disagree");
    });
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static gemma4::fuzz::MemoryFile file;
    const auto& path = file.write(data, size);
    read_as<float>(path);
    read_as<double>(path);
    read_as<std::int32_t>(path);
    return 0;
}
