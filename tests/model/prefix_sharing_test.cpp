// Prefix sharing: forked sequences share pages copy-on-write; a prompt cache lets a later request
// skip a prefix longer than the sliding window and still get the exact logits.
#include <catch2/catch.hpp>

#include <gemma4/model/model.hpp>
#include <gemma4/kv/prompt_cache.hpp>
#include <gemma4/model/random_checkpoint.hpp>

#include "support/reference_model.hpp"
#include "support/temp_dir.hpp"

using namespace gemma4;

namespace {
std::vector<std::int32_t> ids_from(std::int32_t start, std::size_t n) {
    std::vector<std::int32_t> v;
    for (std::size_t i = 0; i < n; ++i) {
        const auto id = static_cast<std::int32_t>((start + 37 * i) % 500);
        v.push_back(id >= 300 && id <= 306 ? id - 10 : id);  // not the tiny config's placeholder ids
    }
    return v;
}
}  // namespace

TEST_CASE("forked sequences share pages and copy on write", "[cache][prefix]") {
    const auto dir = test::temp_dir("prefix_fork");
    write_random_checkpoint(dir, tiny_config(), {.seed = 81});
    const Model<double> model = Model<double>::load(dir);
    KVCache<double> cache = model.make_cache();
    const SeqId a = cache.add_sequence();
    const auto prefix = ids_from(3, 21);  // a page and a part, longer than the window
    model.forward(prefix, cache, a, LogitsMode::Last);
    const std::int64_t full_pages = cache.pages_in_use(AttentionKind::Full);

    const SeqId b = cache.fork(a);
    CHECK(cache.length(b) == 21);
    CHECK(cache.pages_in_use(AttentionKind::Full) == full_pages);  // nothing copied yet
    const std::int32_t shared = cache.page_of(a, AttentionKind::Full, 20);
    CHECK(cache.page_refcount(AttentionKind::Full, shared) == 2);

    const auto sa = ids_from(100, 5), sb = ids_from(200, 7);
    const Logits<double> la = model.forward(sa, cache, a);
    const Logits<double> lb = model.forward(sb, cache, b);
    // The partly filled page was copied for the writer; the full first page stays shared.
    CHECK(cache.page_of(a, AttentionKind::Full, 20) != cache.page_of(b, AttentionKind::Full, 20));
    CHECK(cache.page_of(a, AttentionKind::Full, 0) == cache.page_of(b, AttentionKind::Full, 0));

    auto cat = [](std::vector<std::int32_t> x, const std::vector<std::int32_t>& y) {
        x.insert(x.end(), y.begin(), y.end());
        return x;
    };
    const Logits<double> ea = model.logits(cat(prefix, sa)), eb = model.logits(cat(prefix, sb));
    CHECK(test::relative_error(la.values.data(), ea.values.data() + 21 * 512, la.values.size()) <= 1e-13);
    CHECK(test::relative_error(lb.values.data(), eb.values.data() + 21 * 512, lb.values.size()) <= 1e-13);

    cache.remove_sequence(a);
    cache.remove_sequence(b);
    CHECK(cache.pages_in_use(AttentionKind::Full) == 0);  // no page leaks
    CHECK(cache.pages_in_use(AttentionKind::Sliding) == 0);
}

TEST_CASE("a prompt cache reuses a prefix, sliding window state included", "[cache][prefix]") {
    const auto dir = test::temp_dir("prefix_prompt_cache");
    write_random_checkpoint(dir, tiny_config(), {.seed = 82});
    const Model<double> model = Model<double>::load(dir);
    KVCache<double> cache = model.make_cache();
    PromptCache<double> prompts(cache);
    const auto system = ids_from(7, 30);  // > 3 windows of 8

    const SeqId first = cache.add_sequence();
    model.forward(system, cache, first, LogitsMode::Last);
    prompts.store(system, first);
    cache.remove_sequence(first);

    std::vector<std::int32_t> request = system;
    const auto question = ids_from(300, 6);
    request.insert(request.end(), question.begin(), question.end());
    std::int64_t reused = -1;
    const SeqId s = prompts.start(request, reused);
    CHECK(reused == 30);
    const Logits<double> got = model.forward(std::span<const std::int32_t>(request).subspan(30), cache, s);
    const Logits<double> expected = model.logits(request);
    CHECK(test::relative_error(got.values.data(), expected.values.data() + 30 * 512, got.values.size()) <= 1e-13);

    std::int64_t none = -1;
    const SeqId other = prompts.start(ids_from(1, 4), none);
    CHECK(none == 0);
    CHECK(cache.length(other) == 0);
    REQUIRE_THROWS_AS(prompts.store(ids_from(1, 3), other), InvalidArgument);
    REQUIRE_THROWS_WITH(prompts.store(ids_from(1, 3), other), Catch::Contains("holds 0 positions, not the 3 ids given"));
    cache.remove_sequence(s);
    cache.remove_sequence(other);
    prompts.clear();
    CHECK(cache.pages_in_use(AttentionKind::Full) == 0);
    CHECK(cache.pages_in_use(AttentionKind::Sliding) == 0);
}

TEST_CASE("cache budget and sequence limits are clear errors", "[cache][errors]") {
    Gemma4Config c = tiny_config();
    KVCache<float> small(c, {.max_bytes = 64 * 1024, .max_sequences = 2});
    const SeqId a = small.add_sequence();
    small.add_sequence();
    REQUIRE_THROWS_AS(small.add_sequence(), InvalidArgument);
    REQUIRE_THROWS_WITH(small.add_sequence(), Catch::Contains("2 sequences are already live (max_sequences)"));
    REQUIRE_THROWS_AS(small.reserve(a, 4000), ContextLengthError);
    REQUIRE_THROWS_WITH(small.reserve(a, 4000), Catch::Contains("memory budget of 65536 bytes exhausted"));
    KVCache<float> many(c, {});
    for (int i = 0; i < 256; ++i) many.add_sequence();
    REQUIRE_THROWS_WITH(many.add_sequence(), Catch::Contains("256 sequences are already live"));
}

TEST_CASE("truncate forgets positions, returns their pages, and can roll back over released sliding pages", "[cache]") {
    Gemma4Config c = tiny_config();  // window 8, pages of 16
    KVCache<float> cache(c);
    const SeqId s = cache.add_sequence();
    const auto write = [&](std::int64_t n) {
        cache.reserve(s, n);
        cache.advance(s, n);
    };
    write(40);  // sliding pages below position 33 are released: only slot 2 is held
    CHECK(cache.page_of(s, AttentionKind::Sliding, 20) < 0);
    CHECK_THROWS_WITH(cache.truncate(s, 30), Catch::Contains("was freed") && Catch::Contains("set_max_rollback"));
    CHECK(cache.length(s) == 40);  // a refused truncate changes nothing

    cache.set_max_rollback(s, 10);
    write(16);  // 56 positions: the window alone would release slot 2 (32..47); a rollback to 46 needs keys from 39
    CHECK(cache.page_of(s, AttentionKind::Sliding, 39) >= 0);
    CHECK(cache.pages_in_use(AttentionKind::Full) == 4);
    cache.truncate(s, 46);
    CHECK(cache.length(s) == 46);
    CHECK(cache.pages_in_use(AttentionKind::Full) == (46 + 15) / 16);  // slot 3 (48..63) went back
    CHECK(cache.page_of(s, AttentionKind::Full, 50) < 0);
    // Beyond the allowance the same error names it.
    CHECK_THROWS_WITH(cache.truncate(s, 20), Catch::Contains("allows 10"));
    CHECK_THROWS_WITH(cache.truncate(s, 47), Catch::Contains("cannot truncate"));
    CHECK_THROWS_WITH(cache.set_max_rollback(s, -1), Catch::Contains("max rollback"));
    // Writing again after a truncate takes fresh pages as needed.
    write(20);
    CHECK(cache.length(s) == 66);
    CHECK(cache.page_of(s, AttentionKind::Full, 65) >= 0);
}
