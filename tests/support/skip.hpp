// Skipping a test that needs a file this checkout may not have (a download, reference data).
// Catch2 2 has no SKIP: the test prints a marker on stdout and returns, and ctest, which looks
// for the marker (SKIP_REGULAR_EXPRESSION, set for every test in tests/CMakeLists.txt), reports
// it as skipped rather than passed.
#pragma once

#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#define GEMMA4_SKIP_MARKER "GEMMA4_SKIP:"

/// Ends the current test case, reported by ctest as skipped; `reason` is anything `<<` takes.
#define GEMMA4_SKIP(reason)                                       \
    do {                                                          \
        std::cout << GEMMA4_SKIP_MARKER " " << reason << std::endl; \
        return;                                                   \
    } while (false)

/// GEMMA4_SKIP unless the file `path` exists; an optional second argument says how to get it.
#define GEMMA4_SKIP_IF_MISSING(...)                                                           \
    do {                                                                                      \
        if (const auto gemma4_missing_reason_ = ::gemma4::test::missing_file(__VA_ARGS__)) \
            GEMMA4_SKIP(*gemma4_missing_reason_);                                             \
    } while (false)

namespace gemma4::test {

/// Why a test needing `path` cannot run, or nothing when the file is there.
inline std::optional<std::string> missing_file(const std::filesystem::path& path, const std::string& hint = "") {
    std::error_code ec;
    if (!path.empty() && std::filesystem::is_regular_file(path, ec)) return std::nullopt;
    return (path.empty() ? std::string("a needed file") : path.string()) + " not found" + (hint.empty() ? "" : "; " + hint);
}

}  // namespace gemma4::test
