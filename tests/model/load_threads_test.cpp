// Re-encoding at load runs on the model's own pool (the assistant's likewise): a model given one
// thread starts no other thread while it loads, and a model given two starts exactly one, its
// pool's worker, which is the one that re-encodes. The threads are those Linux lists in /proc/self/task, read from the
// progress callback (called between matrices, while the load's pool is alive).
#include <catch2/catch.hpp>

#include <gemma4/model/assistant.hpp>
#include <gemma4/model/model.hpp>
#include <gemma4/model/random_checkpoint.hpp>

#include "support/gguf_fixtures.hpp"
#include "support/skip.hpp"
#include "support/temp_dir.hpp"

#include <algorithm>
#include <set>
#include <string>

using namespace gemma4;

namespace {

const std::filesystem::path kTaskDir = "/proc/self/task";

/// The ids of this process's threads.
std::set<long> live_thread_ids() {
    std::set<long> ids;
    for (const auto& e : std::filesystem::directory_iterator(kTaskDir)) ids.insert(std::stol(e.path().filename().string()));
    return ids;
}

/// The threads of a watched load and the loaded model's pool size.
struct LoadThreads {
    std::set<long> before, during, after;  ///< during: all threads seen at any progress call
    std::size_t progress_calls = 0;
    unsigned pool_size = 0;
};

/// The threads seen while `load(n_threads, options, after)` loads a model in int8; it fills
/// `after` while the model is alive and returns its pool size.
template <class Load>
LoadThreads watch_load(unsigned n_threads, Load load) {
    LoadThreads t;
    t.before = live_thread_ids();
    LoadOptions options{.format = WeightFormat::Int8};
    options.progress = [&](std::size_t, std::size_t, const std::string&) {
        ++t.progress_calls;
        const std::set<long> now = live_thread_ids();
        t.during.insert(now.begin(), now.end());
    };
    t.pool_size = load(n_threads, options, t.after);
    return t;
}

std::set<long> started(const LoadThreads& t) {
    std::set<long> out;
    std::set_difference(t.during.begin(), t.during.end(), t.before.begin(), t.before.end(), std::inserter(out, out.end()));
    return out;
}

template <class Load>
void check_load_threads(Load load) {
    SECTION("one thread: no other thread runs during the load") {
        const LoadThreads t = watch_load(1, load);
        REQUIRE(t.progress_calls > 0);
        CHECK(t.pool_size == 1);
        CHECK(started(t).empty());
        CHECK(std::includes(t.before.begin(), t.before.end(), t.after.begin(), t.after.end()));
    }
    SECTION("two threads: the one worker started is the model's own") {
        const LoadThreads t = watch_load(2, load);
        REQUIRE(t.progress_calls > 0);
        CHECK(t.pool_size == 2);
        const std::set<long> s = started(t);
        CHECK(s.size() == 1);
        // a pool of the load's own would be gone once the load returns
        CHECK(std::includes(t.after.begin(), t.after.end(), s.begin(), s.end()));
    }
}

/// Model<float>::load of `path`.
auto model_load(const std::filesystem::path& path) {
    return [path](unsigned n_threads, const LoadOptions& options, std::set<long>& after) {
        const Model<float> model = Model<float>::load(path, ModelOptions{n_threads}, options);
        after = live_thread_ids();
        return model.pool().size();
    };
}

}  // namespace

TEST_CASE("a model re-encodes its weights at load on its own pool of n_threads", "[model][threads]") {
    if (!std::filesystem::is_directory(kTaskDir)) GEMMA4_SKIP(kTaskDir.string() << " not found (threads are listed from Linux's procfs)");
    const auto dir = gemma4::test::temp_dir("load_threads");
    write_random_checkpoint(dir, tiny_config(), {.seed = 5, .dtype = DType::BF16});
    check_load_threads(model_load(dir));
}

TEST_CASE("a model converts and re-encodes a GGUF file at load on its own pool of n_threads", "[model][threads][gguf]") {
    if (!std::filesystem::is_directory(kTaskDir)) GEMMA4_SKIP(kTaskDir.string() << " not found (threads are listed from Linux's procfs)");
    const auto path = gemma4::test::gguf_fixture("tiny-gemma4-q4_0");
    GEMMA4_SKIP_IF_MISSING(path);
    check_load_threads(model_load(path));
}

TEST_CASE("an assistant re-encodes its weights at load on its own pool of n_threads", "[model][threads][assistant]") {
    if (!std::filesystem::is_directory(kTaskDir)) GEMMA4_SKIP(kTaskDir.string() << " not found (threads are listed from Linux's procfs)");
    const auto dir = gemma4::test::temp_dir("load_threads_assistant");
    const Gemma4Config target = tiny_config();
    write_random_assistant_checkpoint(dir, assistant_config_for(target), {.seed = 6, .dtype = DType::BF16});
    check_load_threads([&](unsigned n_threads, const LoadOptions& options, std::set<long>& after) {
        const Assistant<float> assistant = Assistant<float>::load(dir, target, ModelOptions{n_threads}, options);
        after = live_thread_ids();
        return assistant.pool().size();
    });
}
