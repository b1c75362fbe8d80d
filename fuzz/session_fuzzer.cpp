// Session files (Session::load, ChatSession::load) into a fixed tiny model, with a Float and an
// Int8 KV cache. Each input is tried as is, and again with its payload size and both checksums
// recomputed, so that mutations reach the payload's own checks instead of stopping at the
// checksum. A file that loads must continue: one greedy step, then save and load again to the
// same history and cache length.
#include <gemma4/generate/session.hpp>

#include "fuzz_support.hpp"
#include "session_fixture.hpp"

#include <cstring>
#include <vector>

namespace {

gemma4::fuzz::SessionFixture g_fixture;
std::filesystem::path g_scratch;

void store_u64(std::uint8_t* p, std::uint64_t v) {
    for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

/// The input with a consistent payload size and checksums, or empty if its header cannot hold them.
std::vector<std::uint8_t> resealed(const std::uint8_t* data, std::size_t size) {
    if (size < gemma4::kSessionHeaderBytes) return {};
    std::uint32_t config = 0;
    for (int i = 0; i < 4; ++i) config |= static_cast<std::uint32_t>(data[12 + i]) << (8 * i);
    const std::size_t payload = gemma4::kSessionHeaderBytes + config;
    if (config > gemma4::kSessionMaxConfigBytes || payload > size) return {};
    std::vector<std::uint8_t> f(data, data + size);
    store_u64(f.data() + 32, size - payload);
    store_u64(f.data() + 40, gemma4::fnv1a64(std::as_bytes(std::span(f).subspan(payload))));
    store_u64(f.data() + 48, 0);
    gemma4::Fnv1a64 h;
    h.update(f.data(), payload);
    store_u64(f.data() + 48, h.value());
    return f;
}

template <class S>
void check_continues(S& s, std::int64_t cached, std::size_t history) {
    if (static_cast<std::int64_t>(history) < cached) gemma4::fuzz::fail("a loaded history is shorter than its cache");
    gemma4::fuzz::expect_ok_or_error([&] {  // a full context is a ContextLengthError
        const std::vector<std::int32_t> next = {100};
        s.generate(std::span<const std::int32_t>(next), {.max_new_tokens = 1, .sampling = {.temperature = 0.0}});
    });
}

void try_load(const std::filesystem::path& path) {
    const gemma4::Model<float>& model = *g_fixture.model;
    for (const gemma4::KVDtype kv : {gemma4::KVDtype::Float, gemma4::KVDtype::Int8}) {
        gemma4::Session<float> s(model, g_fixture.tokenizer.get(), {.kv_dtype = kv});
        bool loaded = false;
        gemma4::fuzz::expect_ok_or_error([&] {
            s.load(path);
            loaded = true;
        });
        if (!loaded) continue;
        const auto history = s.history();
        const std::int64_t cached = s.cached_tokens();
        s.save(g_scratch / "again.g4s");
        gemma4::Session<float> t(model, g_fixture.tokenizer.get(), {.kv_dtype = kv});
        t.load(g_scratch / "again.g4s");  // a saved session must load: no catch
        if (t.history() != history || t.cached_tokens() != cached) gemma4::fuzz::fail("save then load changed the session");
        check_continues(s, cached, history.size());
    }
    gemma4::ChatSession<float> chat(model, *g_fixture.tokenizer);
    bool loaded = false;
    gemma4::fuzz::expect_ok_or_error([&] {
        chat.load(path);
        loaded = true;
    });
    if (loaded)
        gemma4::fuzz::expect_ok_or_error([&] { chat.reply("Hi", {.max_new_tokens = 1, .sampling = {.temperature = 0.0}}); });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    g_scratch = gemma4::fuzz::scratch_dir("session");
    g_fixture = gemma4::fuzz::make_session_fixture(g_scratch / "model");
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static gemma4::fuzz::MemoryFile file;
    try_load(file.write(data, size));
    const std::vector<std::uint8_t> fixed = resealed(data, size);
    if (!fixed.empty()) try_load(file.write(fixed.data(), fixed.size()));
    return 0;
}
