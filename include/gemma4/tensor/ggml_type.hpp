// ggml's tensor types as GGUF files number them, with the block geometry of each: what the GGUF
// reader (io/gguf.hpp) needs to size a tensor, and what the block decoders
// (tensor/ggml_blocks.hpp) dispatch on.
#pragma once

#include <gemma4/abi.hpp>

#include <cstdint>
#include <optional>
#include <string_view>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// ggml tensor types (ids as in the file). Only those listed are recognized; see
/// ggml_type_traits for which of them the library can dequantize.
enum class GgmlType : std::uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
};

struct GgmlTypeTraits {
    std::string_view name;
    std::int64_t block;        ///< values per block (1 for plain types)
    std::int64_t block_bytes;  ///< bytes per block
    bool supported;            ///< the library reads it (tensor/ggml_blocks.hpp) and runs it as stored
};

/// Block geometry of a ggml type id, or nullopt for an id we do not know (then a tensor's size
/// cannot be computed and the file is rejected).
constexpr std::optional<GgmlTypeTraits> ggml_type_traits(std::uint32_t id) {
    switch (static_cast<GgmlType>(id)) {
        case GgmlType::F32: return GgmlTypeTraits{"F32", 1, 4, true};
        case GgmlType::F16: return GgmlTypeTraits{"F16", 1, 2, true};
        case GgmlType::BF16: return GgmlTypeTraits{"BF16", 1, 2, true};
        case GgmlType::Q4_0: return GgmlTypeTraits{"Q4_0", 32, 18, true};
        case GgmlType::Q4_1: return GgmlTypeTraits{"Q4_1", 32, 20, true};
        case GgmlType::Q5_0: return GgmlTypeTraits{"Q5_0", 32, 22, true};
        case GgmlType::Q5_1: return GgmlTypeTraits{"Q5_1", 32, 24, true};
        case GgmlType::Q8_0: return GgmlTypeTraits{"Q8_0", 32, 34, true};
        case GgmlType::Q2_K: return GgmlTypeTraits{"Q2_K", 256, 84, true};
        case GgmlType::Q3_K: return GgmlTypeTraits{"Q3_K", 256, 110, true};
        case GgmlType::Q4_K: return GgmlTypeTraits{"Q4_K", 256, 144, true};
        case GgmlType::Q5_K: return GgmlTypeTraits{"Q5_K", 256, 176, true};
        case GgmlType::Q6_K: return GgmlTypeTraits{"Q6_K", 256, 210, true};
        case GgmlType::IQ4_NL: return GgmlTypeTraits{"IQ4_NL", 32, 18, true};
        case GgmlType::IQ4_XS: return GgmlTypeTraits{"IQ4_XS", 256, 136, true};
        // known, sized (so a file holding them parses), but not run
        case GgmlType::Q8_1: return GgmlTypeTraits{"Q8_1", 32, 36, false};
        case GgmlType::Q8_K: return GgmlTypeTraits{"Q8_K", 256, 292, false};
        case GgmlType::IQ2_XXS: return GgmlTypeTraits{"IQ2_XXS", 256, 66, false};
        case GgmlType::IQ2_XS: return GgmlTypeTraits{"IQ2_XS", 256, 74, false};
        case GgmlType::IQ3_XXS: return GgmlTypeTraits{"IQ3_XXS", 256, 98, false};
        case GgmlType::IQ1_S: return GgmlTypeTraits{"IQ1_S", 256, 50, false};
        case GgmlType::IQ3_S: return GgmlTypeTraits{"IQ3_S", 256, 110, false};
        case GgmlType::IQ2_S: return GgmlTypeTraits{"IQ2_S", 256, 82, false};
        case GgmlType::IQ1_M: return GgmlTypeTraits{"IQ1_M", 256, 56, false};
        case GgmlType::TQ1_0: return GgmlTypeTraits{"TQ1_0", 256, 54, false};
        case GgmlType::TQ2_0: return GgmlTypeTraits{"TQ2_0", 256, 66, false};
        case GgmlType::MXFP4: return GgmlTypeTraits{"MXFP4", 32, 17, false};
        case GgmlType::I8: return GgmlTypeTraits{"I8", 1, 1, false};
        case GgmlType::I16: return GgmlTypeTraits{"I16", 1, 2, false};
        case GgmlType::I32: return GgmlTypeTraits{"I32", 1, 4, false};
        case GgmlType::I64: return GgmlTypeTraits{"I64", 1, 8, false};
        case GgmlType::F64: return GgmlTypeTraits{"F64", 1, 8, false};
    }
    return std::nullopt;
}

/// The types the library runs, for messages: "F32, F16, BF16, Q4_0, …".
constexpr std::string_view kSupportedGgmlTypes = "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS";

constexpr std::string_view ggml_type_name(GgmlType t) {
    const auto tr = ggml_type_traits(static_cast<std::uint32_t>(t));
    return tr ? tr->name : std::string_view("?");
}

}  // namespace GEMMA4_ABI
}  // namespace gemma4
