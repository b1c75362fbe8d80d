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

TEST_CASE("a prompt cache reuses the ids a request shares with a longer prompt, where that prompt still holds the window", "[cache][prefix]") {
    const auto dir = test::temp_dir("prefix_partial");
    write_random_checkpoint(dir, tiny_config(), {.seed = 83});
    const Model<double> model = Model<double>::load(dir);
    KVCache<double> cache = model.make_cache();  // window 8, pages of 16
    PromptCache<double> prompts(cache);
    const auto system = ids_from(11, 24), first_question = ids_from(150, 6), long_question = ids_from(180, 40);
    auto concat = [](std::vector<std::int32_t> a, const std::vector<std::int32_t>& b) {
        a.insert(a.end(), b.begin(), b.end());
        return a;
    };
    const auto stored = concat(system, first_question);  // 30 ids: sliding pages from slot 1 (positions 16-31) held
    const auto stored_long = concat(system, long_question);  // 64 ids: from slot 3 (48-63)
    for (const auto* ids : {&stored, &stored_long}) {
        const SeqId s = cache.add_sequence();
        model.forward(*ids, cache, s, LogitsMode::Last);
        prompts.store(*ids, s);
        cache.remove_sequence(s);
    }

    // Parting from both at 24: the 30-id prompt still holds the window of positions 17-23.
    const auto request = concat(system, ids_from(400, 5));
    REQUIRE(request[24] != stored[24]);
    REQUIRE(request[24] != stored_long[24]);
    std::int64_t reused = -1;
    const SeqId s = prompts.start(request, reused);
    CHECK(reused == 24);
    CHECK(cache.length(s) == 24);
    const Logits<double> got = model.forward(std::span<const std::int32_t>(request).subspan(24), cache, s);
    const Logits<double> expected = model.logits(request);
    CHECK(test::relative_error(got.values.data(), expected.values.data() + 24 * 512, got.values.size()) <= 1e-13);
    cache.remove_sequence(s);

    // The rules behind it, on two sequences.
    const SeqId a = cache.add_sequence(), b = cache.add_sequence();
    model.forward(stored, cache, a, LogitsMode::Last);
    model.forward(stored_long, cache, b, LogitsMode::Last);
    CHECK(cache.first_held_slot(a, AttentionKind::Sliding) == 1);
    CHECK(cache.first_held_slot(b, AttentionKind::Sliding) == 3);
    CHECK(cache.first_held_slot(b, AttentionKind::Full) == 0);
    CHECK(cache.can_truncate(a, 24));
    CHECK_FALSE(cache.can_truncate(a, 20));  // its window, 13-19, reaches into slot 0
    CHECK_FALSE(cache.can_truncate(b, 24));
    CHECK(cache.can_truncate(b, 56));  // its window, 49-55, is in slot 3
    CHECK(cache.can_truncate(b, 55));  // 48-54
    CHECK_FALSE(cache.can_truncate(b, 54));  // 47-53 reaches into slot 2
    CHECK(cache.can_truncate(b, 64));
    CHECK_FALSE(cache.can_truncate(b, 65));
    CHECK(reusable_prefix(cache, a, stored, request) == 24);
    CHECK(reusable_prefix(cache, b, stored_long, request) == 0);
    CHECK(reusable_prefix(cache, a, stored, stored) == 29);  // one id left to feed
    CHECK_FALSE(covers_prefix(cache, a, stored, b, stored_long));  // a does not start with b's ids
    const SeqId cut = fork_prefix(cache, a, 24);
    CHECK(cache.length(cut) == 24);
    CHECK(covers_prefix(cache, a, stored, cut, std::span<const std::int32_t>(stored).first(24)));
    CHECK_FALSE(covers_prefix(cache, b, stored_long, cut, system));  // b starts with system too, but has dropped slot 1
    // A failed fork removes its sequence: otherwise b's pages would outlive b (checked below).
    REQUIRE_THROWS_AS(fork_prefix(cache, b, 24), InvalidArgument);
    REQUIRE_THROWS_WITH(fork_prefix(cache, b, 24), Catch::Contains("its sliding page for positions from 16 was freed"));
    CHECK(cache.pages_in_use(AttentionKind::Full) > 0);
    for (const SeqId q : {a, b, cut}) cache.remove_sequence(q);
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
