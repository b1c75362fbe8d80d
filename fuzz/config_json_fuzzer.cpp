// config.json: the input is a whole file, read through load_config (JSON syntax and number
// errors included), and an accepted config must survive being written back.
#include <gemma4/io/config_json.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static gemma4::fuzz::MemoryFile file;
    const auto& path = file.write(data, size);
    gemma4::fuzz::expect_ok_or_error([&] {
        const gemma4::Gemma4Config config = gemma4::load_config(path);
        // config_to_json is what the random checkpoints and make-tiny write, so a rejected round
        // trip is a bug, not bad input.
        const nlohmann::json again = gemma4::config_to_json(config);
        try {
            const gemma4::Gemma4Config reread = gemma4::parse_config(again, "fuzz/config.json (rewritten)");
            if (gemma4::config_to_json(reread) != again) gemma4::fuzz::fail("config.json round trip changed the config");
        } catch (const gemma4::Error& e) {
            std::fprintf(stderr, "%s\n", e.what());
            gemma4::fuzz::fail("an accepted config.json is rejected once written back");
        }
    });
    return 0;
}
