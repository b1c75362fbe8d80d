// A read-only memory map of a whole file (RAII). Checkpoints are used in place through it.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gemma4 {
inline namespace GEMMA4_ABI {

class MappedFile {
public:
    MappedFile() = default;

    explicit MappedFile(const std::filesystem::path& path) : path_(path) {
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            throw IoError(path.string() + ": cannot open: " + std::strerror(errno));
        struct stat st {};
        if (::fstat(fd, &st) != 0) {
            const int err = errno;
            ::close(fd);
            throw IoError(path.string() + ": cannot stat: " + std::strerror(err));
        }
        if (!S_ISREG(st.st_mode)) {
            ::close(fd);
            throw IoError(path.string() + ": not a regular file");
        }
        size_ = static_cast<std::size_t>(st.st_size);
        if (size_ > 0) {
            void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
            if (p == MAP_FAILED) {
                const int err = errno;
                ::close(fd);
                throw IoError(path.string() + ": cannot map: " + std::strerror(err));
            }
            data_ = static_cast<const std::byte*>(p);
        }
        ::close(fd);
    }

    MappedFile(MappedFile&& o) noexcept
        : path_(std::move(o.path_)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
    MappedFile& operator=(MappedFile&& o) noexcept {
        if (this != &o) {
            unmap();
            path_ = std::move(o.path_);
            data_ = std::exchange(o.data_, nullptr);
            size_ = std::exchange(o.size_, 0);
        }
        return *this;
    }
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    ~MappedFile() { unmap(); }

    std::span<const std::byte> bytes() const { return {data_, size_}; }
    const std::byte* data() const { return data_; }
    std::size_t size() const { return size_; }
    const std::filesystem::path& path() const { return path_; }

    /// Drops this process's pages of bytes [p, p + n) of the map (the whole pages inside it), for
    /// data that was copied and will not be read again: they leave the resident set, and a later
    /// read would fault them in again from the file. A no-op where the kernel refuses.
    void release(const std::byte* p, std::size_t n) const {
        const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
        const auto begin = (reinterpret_cast<std::uintptr_t>(p) + page - 1) / page * page;
        const auto end = (reinterpret_cast<std::uintptr_t>(p) + n) / page * page;
        if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
    }

private:
    void unmap() {
        if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
        data_ = nullptr;
    }
    std::filesystem::path path_;
    const std::byte* data_ = nullptr;
    std::size_t size_ = 0;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
