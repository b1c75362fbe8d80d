// Scratch directories for tests, under the build tree.
#pragma once

#include <filesystem>
#include <string>

#include <unistd.h>

namespace gemma4::test {

/// A fresh, empty directory named after the test and private to this process (ctest runs test
/// cases of one executable in parallel processes).
inline std::filesystem::path temp_dir(const std::string& name) {
    const auto dir = std::filesystem::path(GEMMA4_TEST_TMP_DIR) / (name + "." + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

}  // namespace gemma4::test
