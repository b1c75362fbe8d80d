// gemma4 info and --version: the level and kernels chosen, and GEMMA4_ISA's errors.
#include <catch2/catch.hpp>

#include <gemma4/kernels/cpu.hpp>
#include <gemma4/version.hpp>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <string>

#include "support/run_cli.hpp"

using gemma4::test::run_cli;

namespace {

/// GEMMA4_ISA set for the child processes of one scope (restored after).
struct IsaEnv {
    std::string old;
    bool had;
    explicit IsaEnv(const char* value) {
        const char* o = std::getenv("GEMMA4_ISA");
        had = o != nullptr;
        if (had) old = o;
        setenv("GEMMA4_ISA", value, 1);
    }
    ~IsaEnv() {
        if (had) setenv("GEMMA4_ISA", old.c_str(), 1);
        else unsetenv("GEMMA4_ISA");
    }
};

}  // namespace

TEST_CASE("gemma4 --version names the version and the level", "[cli][info]") {
    const auto r = run_cli("--version");
    REQUIRE(r.status == 0);
    CHECK(r.out == std::string("gemma4 ") + gemma4::kVersion + " (level " + std::string(gemma4::isa_name(gemma4::active_isa())) + ")\n");
}

TEST_CASE("gemma4 info --json names the level, the kernels and the build", "[cli][info]") {
    const auto r = run_cli("info --json");
    REQUIRE(r.status == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j["isa"] == gemma4::isa_name(gemma4::active_isa()));
    CHECK(j["isa_cpu"] == gemma4::isa_name(gemma4::isa_report().cpu));
    CHECK(j["version"] == gemma4::kVersion);
    CHECK(j["kernels"]["linear_q8_q4"].is_string());
    CHECK(j["build_abi"].get<std::string>().rfind("arch_", 0) == 0);
    {
        const IsaEnv env("baseline");
        const auto b = run_cli("info --json");
        REQUIRE(b.status == 0);
        const auto jb = nlohmann::json::parse(b.out);
        CHECK(jb["isa"] == "baseline");
        CHECK(jb["isa_cap"] == "baseline");
        CHECK(jb["kernels"]["linear_q8_q4"] == "portable");
    }
}

TEST_CASE("an unknown or unavailable GEMMA4_ISA is an error naming it, not a crash", "[cli][info]") {
    {
        const IsaEnv env("avx9000");
        const auto r = run_cli("info");
        CHECK(r.status == 1);
        CHECK(r.err == "gemma4 info: error: GEMMA4_ISA: unknown level 'avx9000' (expected baseline, avx2, avx512 or amx)\n");
    }
    if (gemma4::isa_report().cpu == gemma4::Isa::Amx) return;  // every level runs here
    const IsaEnv env("amx");
    const auto r = run_cli("--version");
    CHECK(r.status == 1);
    CHECK(r.err.find("GEMMA4_ISA=amx: this CPU cannot run that level (missing:") != std::string::npos);
}
