// safetensors header parsing: the input is a whole .safetensors file.
#include <gemma4/io/safetensors.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static gemma4::fuzz::MemoryFile file;
    const auto& path = file.write(data, size);
    gemma4::fuzz::expect_ok_or_error([&] {
        const gemma4::SafetensorsFile st(path);
        // Touch the first and last byte of every accepted tensor: a view that the header checks
        // let through but that points outside the mapping shows up here.
        unsigned sum = 0;
        for (const auto& [name, entry] : st.entries()) {
            const gemma4::WeightView v = st.view(name);
            const auto* bytes = static_cast<const unsigned char*>(static_cast<const void*>(v.data));
            if (v.size_bytes > 0) sum += bytes[0] + bytes[v.size_bytes - 1];
            if (v.size_bytes != entry.end - entry.begin) gemma4::fuzz::fail("view size differs from the header's span");
        }
        volatile unsigned sink = sum;
        (void)sink;
    });
    return 0;
}
