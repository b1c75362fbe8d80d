// The library's version (CMakeLists.txt reads it from here, so the package and the code agree).
#pragma once

namespace gemma4 {

inline constexpr const char* kVersion = "0.1.0";

}  // namespace gemma4
