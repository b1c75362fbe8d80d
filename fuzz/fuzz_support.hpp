// Shared pieces of the fuzz targets. A target passes on an input when the library either
// accepts it or throws gemma4::Error; anything else escapes LLVMFuzzerTestOneInput, reaches
// std::terminate and is reported by libFuzzer as a crash, like a sanitizer report would be.
#pragma once

#include <gemma4/error.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include <sys/mman.h>
#include <unistd.h>

namespace gemma4::fuzz {

/// Runs `f`, swallowing only the library's documented error type.
template <class F>
void expect_ok_or_error(F&& f) {
    try {
        f();
    } catch (const gemma4::Error&) {
    }
}

/// Fails the run with a message; for broken invariants that are not crashes.
[[noreturn]] inline void fail(const char* what) {
    std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
    std::abort();
}

/// The parsers that take a path read the input through an in-memory file (memfd), so that
/// fuzzing touches no disk and leaves nothing behind. The file is reused for every input.
class MemoryFile {
public:
    MemoryFile() {
        fd_ = ::memfd_create("gemma4-fuzz-input", MFD_CLOEXEC);
        if (fd_ < 0) {
            std::perror("memfd_create");
            std::abort();
        }
        path_ = "/proc/self/fd/" + std::to_string(fd_);
    }
    MemoryFile(const MemoryFile&) = delete;
    MemoryFile& operator=(const MemoryFile&) = delete;
    ~MemoryFile() { ::close(fd_); }

    /// Replaces the file's contents with `bytes` and returns a path that opens it.
    const std::filesystem::path& write(const std::uint8_t* data, std::size_t size) {
        if (::ftruncate(fd_, 0) != 0 || ::lseek(fd_, 0, SEEK_SET) != 0) {
            std::perror("memfd reset");
            std::abort();
        }
        std::size_t done = 0;
        while (done < size) {
            const ssize_t n = ::write(fd_, data + done, size - done);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                std::perror("memfd write");
                std::abort();
            }
            done += static_cast<std::size_t>(n);
        }
        return path_;
    }

private:
    int fd_ = -1;
    std::filesystem::path path_;
};

inline std::span<const std::byte> as_bytes(const std::uint8_t* data, std::size_t size) {
    return {reinterpret_cast<const std::byte*>(data), size};
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
    return {reinterpret_cast<const char*>(data), size};
}

/// A scratch folder for fixtures the targets write once at start-up (the tiny tokenizer).
inline std::filesystem::path scratch_dir(const char* name) {
    const char* tmp = std::getenv("TMPDIR");
    auto dir = std::filesystem::path(tmp && *tmp ? tmp : "/tmp") /
               ("gemma4-fuzz-" + std::string(name) + "-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    return dir;
}

}  // namespace gemma4::fuzz
