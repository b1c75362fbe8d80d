// A small fork-join thread pool. Work is split into contiguous index ranges by a fixed rule
// that depends only on the range and the task count, and every output element is computed by
// exactly one task in a fixed order, so results are identical for any number of threads.
//
// A decode step runs several hundred short parallel regions (one per matrix, plus attention),
// so waking workers through a condition variable each time costs a noticeable share of a
// token. Workers and the submitting thread therefore spin briefly on atomics (a region usually
// follows the previous one within microseconds) and only then block on the condition variable,
// which keeps an idle pool from burning CPU.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/detail/function_ref.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace gemma4 {
inline namespace GEMMA4_ABI {

namespace detail {

/// One iteration of a spin-wait: tells the core it is spinning (x86 `pause`).
inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#else
    std::this_thread::yield();
#endif
}

}  // namespace detail

class ThreadPool {
public:
    /// n_threads = 0: hardware concurrency.
    explicit ThreadPool(unsigned n_threads = 0) {
        if (n_threads == 0) n_threads = std::max(1u, std::thread::hardware_concurrency());
        for (unsigned i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
    }
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;
    ~ThreadPool() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stop_.store(true, std::memory_order_relaxed);
            generation_.fetch_add(1, std::memory_order_release);
        }
        wake_.notify_all();
        for (auto& w : workers_) w.join();
    }

    unsigned size() const { return static_cast<unsigned>(workers_.size()) + 1; }

    /// Calls fn(begin, end) over [0, n) split into at most size() contiguous chunks of at least
    /// `grain` items. Blocks until all chunks are done; rethrows the first exception.
    void parallel_for(std::int64_t n, detail::FunctionRef<void(std::int64_t, std::int64_t)> fn, std::int64_t grain = 1) {
        if (n <= 0) return;
        const std::int64_t max_tasks = std::max<std::int64_t>(1, n / std::max<std::int64_t>(1, grain));
        const unsigned tasks = static_cast<unsigned>(std::min<std::int64_t>(size(), max_tasks));
        if (tasks <= 1) {
            fn(0, n);
            return;
        }
        std::unique_lock<std::mutex> submit(submit_mutex_);  // one parallel region at a time
        job_ = &fn;  // fn lives until this region ends
        job_n_ = n;
        job_tasks_ = tasks;
        error_ = nullptr;
        // Every worker reports back, even those without a chunk, so none of them can still be
        // reading the job when the next one is written.
        pending_.store(static_cast<unsigned>(workers_.size()), std::memory_order_relaxed);
        {
            std::lock_guard<std::mutex> lock(mutex_);  // pairs with a worker about to block
            generation_.fetch_add(1, std::memory_order_release);
        }
        wake_.notify_all();
        run_chunk(0);
        for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
            if (spin < kSpins) {
                detail::spin_pause();
                continue;
            }
            std::unique_lock<std::mutex> lock(mutex_);
            done_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
            break;
        }
        job_ = nullptr;
        if (error_) std::rethrow_exception(error_);
    }

    /// Calls fn(begin, end) over [0, n) in chunks of `chunk` items (the last may be shorter) that
    /// threads claim one at a time. Which thread runs a chunk varies, the chunks do not: use it
    /// when each item's result does not depend on the other items of its chunk. Balances the
    /// load when a thread is slowed down (other processes on the machine, unequal caches).
    void parallel_chunks(std::int64_t n, detail::FunctionRef<void(std::int64_t, std::int64_t)> fn, std::int64_t chunk) {
        if (n <= 0) return;
        chunk = std::max<std::int64_t>(1, chunk);
        const std::int64_t chunks = (n + chunk - 1) / chunk;
        if (chunks <= 1 || size() == 1) {
            fn(0, n);
            return;
        }
        std::atomic<std::int64_t> next{0};
        parallel_for(
            std::min<std::int64_t>(size(), chunks),
            [&](std::int64_t, std::int64_t) {
                for (std::int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < chunks;)
                    fn(i * chunk, std::min(n, (i + 1) * chunk));
            },
            1);
    }

private:
    /// Spin iterations (`pause` ≈ tens of cycles each) before blocking: tens of microseconds,
    /// longer than the serial work between two regions of a decode step.
    static constexpr int kSpins = 1 << 12;

    void run_chunk(unsigned task) {
        const std::int64_t begin = job_n_ * task / job_tasks_, end = job_n_ * (task + 1) / job_tasks_;
        try {
            if (begin < end) (*job_)(begin, end);
        } catch (...) {
            std::lock_guard<std::mutex> lock(mutex_);
            if (!error_) error_ = std::current_exception();
        }
    }

    void worker_loop(unsigned index) {
        std::uint64_t seen = 0;
        for (;;) {
            std::uint64_t g = generation_.load(std::memory_order_acquire);
            for (int spin = 0; g == seen && spin < kSpins; ++spin) {
                detail::spin_pause();
                g = generation_.load(std::memory_order_acquire);
            }
            if (g == seen) {
                std::unique_lock<std::mutex> lock(mutex_);
                wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
                g = generation_.load(std::memory_order_acquire);
            }
            seen = g;
            if (stop_.load(std::memory_order_acquire)) return;
            if (index < job_tasks_) run_chunk(index);
            if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
                std::lock_guard<std::mutex> lock(mutex_);  // the submitter may be about to block
                done_.notify_one();
            }
        }
    }

    std::vector<std::thread> workers_;
    std::mutex mutex_, submit_mutex_;
    std::condition_variable wake_, done_;
    const detail::FunctionRef<void(std::int64_t, std::int64_t)>* job_ = nullptr;
    std::int64_t job_n_ = 0;
    unsigned job_tasks_ = 0;
    std::atomic<unsigned> pending_{0};
    std::atomic<std::uint64_t> generation_{0};
    std::atomic<bool> stop_{false};
    std::exception_ptr error_;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
