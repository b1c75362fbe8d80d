// Session files: a restored session continues with exactly the tokens and logits of one that
// never stopped (greedy and seeded sampling, float and double, Float and Int8 KV, conversations
// past the sliding window); bad files (truncated, corrupted, another version, another model,
// scalar type or KV dtype, hostile sizes) are typed errors naming the file.
#include <catch2/catch.hpp>

#include <gemma4/generate/session.hpp>
#include <gemma4/model/random_checkpoint.hpp>
#include <gemma4/tokenizer/tiny_tokenizer.hpp>

#include "support/temp_dir.hpp"

#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

using namespace gemma4;

namespace {

Gemma4Config session_config() {
    Gemma4Config c = tiny_config();  // sliding window of 8: conversations below pass it
    c.max_position_embeddings = 512;
    return c;
}

const std::filesystem::path& model_dir() {
    static const auto dir = [] {
        const auto d = test::temp_dir("session_file_model");
        write_random_checkpoint(d, session_config(), {.seed = 41});
        return d;
    }();
    return dir;
}

template <class T>
const Model<T>& model() {
    static const Model<T> m = Model<T>::load(model_dir(), ModelOptions{2});
    return m;
}

std::vector<std::int32_t> ids_from(std::int32_t first, std::size_t n) {
    std::vector<std::int32_t> v;
    for (std::size_t i = 0; i < n; ++i) v.push_back(static_cast<std::int32_t>(first + static_cast<std::int32_t>(i * 7 % 200)));
    return v;
}

GenerateOptions options(bool sampled, std::int64_t n) {
    GenerateOptions o;
    o.max_new_tokens = n;
    o.end_ids = {511};  // an id the random model hardly picks: fixed-length replies
    o.sampling = sampled ? SamplingParams{.temperature = 1.0, .seed = 1234} : SamplingParams{.temperature = 0.0};
    return o;
}

std::vector<unsigned char> read_bytes(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

void write_bytes(const std::filesystem::path& p, const std::vector<unsigned char>& b) {
    std::ofstream(p, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::uint32_t config_bytes(const std::vector<unsigned char>& f) {
    std::uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n |= static_cast<std::uint32_t>(f[12 + static_cast<std::size_t>(i)]) << (8 * i);
    return n;
}

void put_u64(std::vector<unsigned char>& f, std::size_t at, std::uint64_t v) {
    for (int i = 0; i < 8; ++i) f[at + static_cast<std::size_t>(i)] = static_cast<unsigned char>(v >> (8 * i));
}

/// Recomputes both checksums and the payload size, as a forger would: only the reader's own
/// checks stand between such a file and the allocator.
void reseal(std::vector<unsigned char>& f) {
    const std::size_t payload_at = 64 + config_bytes(f);
    put_u64(f, 32, f.size() - payload_at);
    put_u64(f, 40, fnv1a64(std::as_bytes(std::span(f).subspan(payload_at))));
    put_u64(f, 48, 0);
    Fnv1a64 h;
    h.update(f.data(), payload_at);
    put_u64(f, 48, h.value());
}

template <class T>
void check_round_trip(KVDtype kv, bool sampled) {
    const Model<T>& m = model<T>();
    const KVCacheOptions cache{.kv_dtype = kv};
    const auto dir = test::temp_dir("session_file_round_trip");
    Session<T> a(m, nullptr, cache);
    const auto p1 = ids_from(2, 20);
    const GenerationResult first = a.generate(std::span<const std::int32_t>(p1), options(sampled, 14));
    REQUIRE(first.ids.size() == 14);
    // Past the window: the first sliding pages are gone, the full ones are all there.
    REQUIRE(a.cached_tokens() == 33);
    REQUIRE(a.cache().page_of(a.sequence(), AttentionKind::Sliding, 0) == -1);
    REQUIRE(a.cache().page_of(a.sequence(), AttentionKind::Full, 0) >= 0);
    a.save(dir / "s.g4s");

    // Restored into a session that had a conversation of its own: it is replaced.
    Session<T> b(m, nullptr, cache);
    const auto other = ids_from(9, 5);
    b.generate(std::span<const std::int32_t>(other), options(sampled, 3));
    b.load(dir / "s.g4s");
    CHECK(b.history() == a.history());
    CHECK(b.cached_tokens() == a.cached_tokens());

    for (int turn = 0; turn < 2; ++turn) {
        const auto p = ids_from(30 + turn, 6);
        const GenerationResult ra = a.generate(std::span<const std::int32_t>(p), options(sampled, 12));
        const GenerationResult rb = b.generate(std::span<const std::int32_t>(p), options(sampled, 12));
        CHECK(ra.ids == rb.ids);
        CHECK(ra.stats.prompt_tokens == rb.stats.prompt_tokens);
    }
    CHECK(a.history() == b.history());
    CHECK(a.cached_tokens() > m.config().sliding_window * 4);
}

}  // namespace

TEST_CASE("a restored session continues with the same tokens (float and double, Float and Int8 KV, greedy and sampled)",
          "[session-file]") {
    for (const bool sampled : {false, true}) {
        for (const KVDtype kv : {KVDtype::Float, KVDtype::Int8}) {
            INFO("sampled " << sampled << ", int8 KV " << (kv == KVDtype::Int8));
            check_round_trip<float>(kv, sampled);
            check_round_trip<double>(kv, sampled);
        }
    }
}

TEST_CASE("a sampled session continues its random stream across calls and through a file", "[session-file]") {
    const Model<float>& m = model<float>();
    const auto dir = test::temp_dir("session_file_stream");
    const auto p = ids_from(2, 6), q = ids_from(40, 3);
    Session<float> a(m);
    a.generate(std::span<const std::int32_t>(p), options(true, 8));
    a.save(dir / "a.g4s");
    const auto continued = a.generate(std::span<const std::int32_t>(q), options(true, 16));

    Session<float> resumed(m);
    resumed.load(dir / "a.g4s");
    CHECK(resumed.generate(std::span<const std::int32_t>(q), options(true, 16)).ids == continued.ids);

    // The same ids with the stream started afresh from the same seed at this point: other
    // tokens, so the file's stream state is what makes the resumed call equal (16 draws agreeing
    // by chance is not a concern at temperature 1 over 512 ids).
    std::vector<std::int32_t> upto = a.history();
    upto.resize(upto.size() - continued.ids.size());
    Session<float> restarted(m);
    const auto scratch = restarted.generate(std::span<const std::int32_t>(upto), options(true, 16));
    CHECK(scratch.ids != continued.ids);

    // A call with another seed starts the stream again from that seed.
    GenerateOptions other = options(true, 16);
    other.sampling.seed = 99;
    Session<float> b(m);
    b.load(dir / "a.g4s");
    const auto reseeded = b.generate(std::span<const std::int32_t>(q), other);
    Session<float> fresh(m);
    CHECK(fresh.generate(std::span<const std::int32_t>(upto), other).ids == reseeded.ids);
}

TEST_CASE("restored KV pages give bit-identical logits to the cache they were saved from", "[session-file]") {
    const Model<double>& m = model<double>();
    for (const KVDtype kv : {KVDtype::Float, KVDtype::Int8}) {
        KVCache<double> cache = m.make_cache({.kv_dtype = kv});
        const SeqId s = cache.add_sequence();
        const auto ids = ids_from(3, 45);  // 45 positions: partial last page, freed sliding pages
        m.forward(std::span<const std::int32_t>(ids).first(30), cache, s);
        m.forward(std::span<const std::int32_t>(ids).subspan(30), cache, s);

        std::stringstream buffer;
        BinaryWriter w(buffer, "buffer");
        write_kv_sequence(w, cache, s);
        CHECK(w.written() == kv_sequence_record_bytes(cache, cache.length(s)));

        KVCache<double> restored = m.make_cache({.kv_dtype = kv});
        const SeqId spare = restored.add_sequence();  // slots and page ids need not match the source's
        m.forward(std::span<const std::int32_t>(ids).first(20), restored, spare);
        BinaryReader r(buffer, "buffer", w.written());
        const SeqId t = read_kv_sequence(r, restored);
        CHECK(r.left() == 0);
        CHECK(r.checksum() == w.checksum());
        CHECK(restored.length(t) == 45);
        for (const AttentionKind kind : kKVKinds)  // 20 positions: 2 pages of each kind for the spare sequence
            CHECK(restored.pages_in_use(kind) - cache.pages_in_use(kind) == 2);

        const std::vector<std::int32_t> next = {17, 200, 33, 4, 90, 91, 92, 93, 94, 95, 96, 97};
        const Logits<double> want = m.forward(std::span<const std::int32_t>(next), cache, s, LogitsMode::All);
        const Logits<double> got = m.forward(std::span<const std::int32_t>(next), restored, t, LogitsMode::All);
        REQUIRE(want.values.size() == got.values.size());
        CHECK(std::memcmp(want.values.data(), got.values.data(), want.values.size() * sizeof(double)) == 0);
        // Freed pages are reusable, referenced pages are counted once.
        restored.remove_sequence(t);
        restored.remove_sequence(spare);
        CHECK(restored.pages_in_use(AttentionKind::Sliding) == 0);
        CHECK(restored.pages_in_use(AttentionKind::Full) == 0);
    }
}

TEST_CASE("a chat session restores its chat state with its conversation", "[session-file]") {
    const auto dir = test::temp_dir("session_file_chat");
    const TinyTokenizerInfo info = write_tiny_tokenizer(dir);
    Gemma4Config c = session_config();
    adopt_tiny_tokenizer(c, info);
    write_random_checkpoint(dir, c, {.seed = 8});
    const Model<float> m = Model<float>::load(dir);
    const Tokenizer tokenizer = Tokenizer::from_file(info.tokenizer_json);
    GenerateOptions o{.max_new_tokens = 6, .sampling = {.temperature = 0.8, .seed = 3}};

    // Saved before its first turn: the system prompt waits in the pending messages.
    ChatSession<float> a(m, tokenizer, {.enable_thinking = true}, std::string("Be brief."));
    a.save(dir / "start.g4s");
    ChatSession<float> b(m, tokenizer);
    b.load(dir / "start.g4s");
    CHECK(b.options().enable_thinking);
    const GenerationResult a1 = a.reply("Hello there", o);
    const GenerationResult b1 = b.reply("Hello there", o);
    CHECK(a1.ids == b1.ids);
    CHECK(a1.text == b1.text);

    a.save(dir / "turn1.g4s");
    ChatSession<float> d(m, tokenizer, {}, std::string("Another system prompt"));
    d.load(dir / "turn1.g4s");
    for (const char* text : {"And now?", "Once more"}) {
        const GenerationResult ra = a.reply(text, o);
        const GenerationResult rd = d.reply(text, o);
        CHECK(ra.ids == rd.ids);
        CHECK(ra.text == rd.text);
    }
    CHECK(a.session().history() == d.session().history());

    // The kinds do not mix.
    Session<float> plain(m, &tokenizer);
    REQUIRE_THROWS_AS(plain.load(dir / "turn1.g4s"), InvalidArgument);
    REQUIRE_THROWS_WITH(plain.load(dir / "turn1.g4s"), Catch::Contains("turn1.g4s") && Catch::Contains("holds a ChatSession"));
    plain.save(dir / "plain.g4s");
    REQUIRE_THROWS_AS(d.load(dir / "plain.g4s"), InvalidArgument);
}

TEST_CASE("session file: truncated, corrupted and wrong-version files are FormatErrors", "[session-file]") {
    const Model<float>& m = model<float>();
    const auto dir = test::temp_dir("session_file_bad");
    Session<float> a(m, nullptr, {.kv_dtype = KVDtype::Int8});
    const auto p = ids_from(2, 25);
    a.generate(std::span<const std::int32_t>(p), options(true, 5));
    a.save(dir / "good.g4s");
    const std::vector<unsigned char> good = read_bytes(dir / "good.g4s");
    const std::size_t header = 64 + config_bytes(good);
    const auto bad = dir / "bad.g4s";

    Session<float> b(m, nullptr, {.kv_dtype = KVDtype::Int8});
    const auto before = ids_from(50, 4);
    b.generate(std::span<const std::int32_t>(before), options(false, 2));
    const auto history = b.history();
    const auto expect_format_error = [&](const std::string& what) {
        INFO(what);
        try {
            b.load(bad);
            FAIL("loaded");
        } catch (const FormatError& e) {
            CHECK(std::string(e.what()).rfind(bad.string() + ": ", 0) == 0);
        }
    };

    // Truncated anywhere: every header byte, then a spread of payload offsets.
    for (std::size_t n = 0; n < good.size(); n += n < header + 64 ? 1 : 97) {
        write_bytes(bad, std::vector<unsigned char>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)));
        expect_format_error("truncated to " + std::to_string(n) + " bytes");
    }
    write_bytes(bad, std::vector<unsigned char>(good.begin(), good.end() - 1));
    REQUIRE_THROWS_WITH(b.load(bad), Catch::Contains("truncated"));
    // A byte flipped: every byte of the header and the config, then a spread of the payload.
    for (std::size_t i = 0; i < good.size(); i += i < header ? 1 : 53) {
        std::vector<unsigned char> f = good;
        f[i] ^= 0x5a;
        write_bytes(bad, f);
        expect_format_error("byte " + std::to_string(i) + " flipped");
    }
    {
        std::vector<unsigned char> f = good;
        f[header + 8] ^= 1;  // the first id of the history: 2 becomes 3, a valid id
        write_bytes(bad, f);
        REQUIRE_THROWS_WITH(b.load(bad), Catch::Contains("payload checksum mismatch"));
    }
    // Trailing bytes.
    {
        std::vector<unsigned char> f = good;
        f.push_back(0);
        write_bytes(bad, f);
        REQUIRE_THROWS_WITH(b.load(bad), Catch::Contains("trailing bytes"));
    }
    // Another version, with valid checksums.
    {
        std::vector<unsigned char> f = good;
        f[8] = 2;
        reseal(f);
        write_bytes(bad, f);
        REQUIRE_THROWS_AS(b.load(bad), FormatError);
        REQUIRE_THROWS_WITH(b.load(bad), Catch::Contains("session file version 2; this library reads version 1"));
    }
    // Not a session file at all.
    write_bytes(bad, std::vector<unsigned char>(100, 'x'));
    REQUIRE_THROWS_WITH(b.load(bad), Catch::Contains("not a gemma4 session file"));
    REQUIRE_THROWS_AS(b.load(dir / "missing.g4s"), IoError);

    // After all that, b is the session it was.
    CHECK(b.history() == history);
    Session<float> c(m, nullptr, {.kv_dtype = KVDtype::Int8});
    c.generate(std::span<const std::int32_t>(before), options(false, 2));
    const auto more = ids_from(60, 3);
    CHECK(b.generate(std::span<const std::int32_t>(more), options(false, 4)).ids ==
          c.generate(std::span<const std::int32_t>(more), options(false, 4)).ids);
}

TEST_CASE("session file: forged sizes and values are refused before anything is allocated", "[session-file]") {
    const Model<float>& m = model<float>();
    const auto dir = test::temp_dir("session_file_forged");
    Session<float> a(m);
    const auto p = ids_from(2, 20);
    a.generate(std::span<const std::int32_t>(p), options(false, 3));
    a.save(dir / "good.g4s");
    const std::vector<unsigned char> good = read_bytes(dir / "good.g4s");
    const std::size_t payload = 64 + config_bytes(good);
    const std::size_t history_count = payload, pending_count = payload + 8 + 4 * a.history().size();
    const std::size_t kv_length = pending_count + 8 + 4 + 1 + 8 + 32;  // one pending id; the random stream
    const auto bad = dir / "bad.g4s";
    Session<float> b(m);
    const auto forged = [&](std::size_t at, std::uint64_t value, const std::string& message) {
        std::vector<unsigned char> f = good;
        put_u64(f, at, value);
        reseal(f);
        write_bytes(bad, f);
        INFO(message);
        REQUIRE_THROWS_AS(b.load(bad), FormatError);
        REQUIRE_THROWS_WITH(b.load(bad), Catch::Contains(message));
    };
    forged(history_count, std::uint64_t(1) << 60, "history: 1152921504606846976 is more than the 513 allowed");
    forged(pending_count, 2, "pending: 2 is more than the 1 allowed");
    forged(kv_length, 512, "kv: a sequence of 512 positions needs");
    forged(kv_length, std::uint64_t(1) << 40, "kv.length: 1099511627776 positions, the model's context is 512");
    forged(kv_length, 21, "history: 23 ids, but the cache holds 21 and 1 are pending");
    {
        std::vector<unsigned char> f = good;
        f[history_count + 8] = 0xff;  // first id: 255 + ... beyond the vocabulary
        f[history_count + 9] = 0xff;
        reseal(f);
        write_bytes(bad, f);
        REQUIRE_THROWS_WITH(b.load(bad), Catch::Contains("history[0]: id 65535 is outside the vocabulary of 512"));
    }
    {
        // A page value that is not finite: the last float of the last page.
        std::vector<unsigned char> f = good;
        const float nan = std::numeric_limits<float>::quiet_NaN();
        std::memcpy(f.data() + f.size() - 4, &nan, 4);
        reseal(f);
        write_bytes(bad, f);
        REQUIRE_THROWS_WITH(b.load(bad), Catch::Contains("full_attention page at slot 1 holds a value that is not finite"));
    }
    {
        std::vector<unsigned char> f = good;
        f[64] ^= 1;  // the config text itself, checksums redone: the fingerprint no longer matches it
        reseal(f);
        write_bytes(bad, f);
        REQUIRE_THROWS_WITH(b.load(bad), Catch::Contains("fingerprint does not match"));
    }
}

TEST_CASE("session file: another model, scalar type or KV dtype is refused by name", "[session-file]") {
    const auto dir = test::temp_dir("session_file_other_model");
    Session<float> a(model<float>());
    const auto p = ids_from(2, 10);
    a.generate(std::span<const std::int32_t>(p), options(false, 3));
    a.save(dir / "f.g4s");

    Gemma4Config c = session_config();
    c.sliding_window = 16;
    c.rms_norm_eps = 1e-5;
    write_random_checkpoint(dir / "other", c, {.seed = 41});
    const Model<float> other = Model<float>::load(dir / "other");
    Session<float> o(other);
    REQUIRE_THROWS_AS(o.load(dir / "f.g4s"), ConfigError);
    REQUIRE_THROWS_WITH(o.load(dir / "f.g4s"), Catch::StartsWith((dir / "f.g4s").string() + ": saved for a different model") &&
                                                   Catch::Contains("text_config.sliding_window: 8 in the file, 16 in this model") &&
                                                   Catch::Contains("text_config.rms_norm_eps"));

    Session<double> d(model<double>());
    REQUIRE_THROWS_AS(d.load(dir / "f.g4s"), InvalidArgument);
    REQUIRE_THROWS_WITH(d.load(dir / "f.g4s"), Catch::Contains("saved from a model computing in float, this one computes in double"));
    Session<float> int8(model<float>(), nullptr, {.kv_dtype = KVDtype::Int8});
    REQUIRE_THROWS_WITH(int8.load(dir / "f.g4s"), Catch::Contains("holds a Float KV cache, this session's is Int8"));
}

TEST_CASE("session file size: the ids, the stream and only the pages still held", "[session-file]") {
    const Model<float>& m = model<float>();
    const auto dir = test::temp_dir("session_file_size");
    const std::size_t config = canonical_config_json(m.config()).size();
    std::uintmax_t last_sliding_bytes = 0;
    for (const std::size_t n : {std::size_t{5}, std::size_t{60}, std::size_t{200}}) {
        Session<float> a(m);
        const auto p = ids_from(2, n);
        a.generate(std::span<const std::int32_t>(p), options(false, 1));  // n + 1 ids, n cached, 1 pending
        a.save(dir / "s.g4s");
        const KVCache<float>& cache = a.cache();
        const std::int64_t length = a.cached_tokens();
        REQUIRE(length == static_cast<std::int64_t>(n));
        const std::uint64_t expected = 64 + config + (8 + 4 * (n + 1)) + (8 + 4) + (1 + 8 + 32) + kv_sequence_record_bytes(cache, length);
        CHECK(std::filesystem::file_size(dir / "s.g4s") == expected);

        // Full pages: one per 16 positions. Sliding pages: those the window still sees, at most 2.
        const auto [sf, se] = cache.held_slots(AttentionKind::Sliding, length);
        const auto [ff, fe] = cache.held_slots(AttentionKind::Full, length);
        CHECK(fe - ff == (length + 15) / 16);
        CHECK(se - sf <= 2);
        CHECK(cache.pages_in_use(AttentionKind::Sliding) == se - sf);
        CHECK(cache.pages_in_use(AttentionKind::Full) == fe - ff);
        const std::uintmax_t sliding_bytes = static_cast<std::uintmax_t>(se - sf) * cache.page_bytes(AttentionKind::Sliding);
        if (n > 60) CHECK(sliding_bytes == last_sliding_bytes);  // stops growing at the window
        last_sliding_bytes = sliding_bytes;
    }
}

TEST_CASE("a prompt with a placeholder id but no soft tokens is refused, the session unchanged", "[session-file]") {
    const Model<float>& m = model<float>();
    Session<float> a(m);
    const auto p = ids_from(2, 5);
    a.generate(std::span<const std::int32_t>(p), options(false, 2));
    const auto history = a.history();
    const std::vector<std::int32_t> image = {m.config().tokens.image};
    REQUIRE_THROWS_AS(a.generate(std::span<const std::int32_t>(image), options(false, 2)), InvalidArgument);
    REQUIRE_THROWS_WITH(a.generate(std::span<const std::int32_t>(image), options(false, 2)),
                        Catch::Contains("1 image/audio placeholder ids but 0 soft-token rows"));
    CHECK(a.history() == history);
    // The pending id is still fed first by the next call.
    const auto q = ids_from(70, 2);
    Session<float> b(m);
    b.generate(std::span<const std::int32_t>(p), options(false, 2));
    CHECK(a.generate(std::span<const std::int32_t>(q), options(false, 3)).ids == b.generate(std::span<const std::int32_t>(q), options(false, 3)).ids);
}
