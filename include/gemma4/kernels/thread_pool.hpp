// A small fork-join thread pool. Work is split into contiguous index ranges by a fixed rule
// that depends only on the range and the task count, and every output element is computed by
// exactly one task in a fixed order, so results are identical for any number of threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gemma4 {

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
            stop_ = true;
            ++generation_;
        }
        wake_.notify_all();
        for (auto& w : workers_) w.join();
    }

    unsigned size() const { return static_cast<unsigned>(workers_.size()) + 1; }

    /// Calls fn(begin, end) over [0, n) split into at most size() contiguous chunks of at least
    /// `grain` items. Blocks until all chunks are done; rethrows the first exception.
    void parallel_for(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& fn, std::int64_t grain = 1) {
        if (n <= 0) return;
        const std::int64_t max_tasks = std::max<std::int64_t>(1, n / std::max<std::int64_t>(1, grain));
        const unsigned tasks = static_cast<unsigned>(std::min<std::int64_t>(size(), max_tasks));
        if (tasks <= 1) {
            fn(0, n);
            return;
        }
        std::unique_lock<std::mutex> submit(submit_mutex_);  // one parallel region at a time
        {
            std::lock_guard<std::mutex> lock(mutex_);
            job_ = &fn;
            job_n_ = n;
            job_tasks_ = tasks;
            pending_ = tasks - 1;
            error_ = nullptr;
            ++generation_;
        }
        wake_.notify_all();
        run_chunk(0);
        std::unique_lock<std::mutex> lock(mutex_);
        done_.wait(lock, [&] { return pending_ == 0; });
        job_ = nullptr;
        if (error_) std::rethrow_exception(error_);
    }

private:
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
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return generation_ != seen; });
            seen = generation_;
            if (stop_) return;
            if (!job_ || index >= job_tasks_) continue;
            lock.unlock();
            run_chunk(index);
            lock.lock();
            if (--pending_ == 0) done_.notify_one();
        }
    }

    std::vector<std::thread> workers_;
    std::mutex mutex_, submit_mutex_;
    std::condition_variable wake_, done_;
    const std::function<void(std::int64_t, std::int64_t)>* job_ = nullptr;
    std::int64_t job_n_ = 0;
    unsigned job_tasks_ = 0;
    unsigned pending_ = 0;
    std::uint64_t generation_ = 0;
    bool stop_ = false;
    std::exception_ptr error_;
};

}  // namespace gemma4
