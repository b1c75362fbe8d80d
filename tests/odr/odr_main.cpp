// One program, two translation units built with different -march, each using the library
// (odr_baseline.cpp, odr_x86_64_v3.cpp): each must keep its own generic code (the inline
// namespace of gemma4/abi.hpp), run the kernels chosen for the process, and give the same
// results. Usage: test_odr DIR (a scratch directory for the small model).
#include "odr_run.hpp"

#include <gemma4/kernels/cpu.hpp>
#include <gemma4/model/random_checkpoint.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>

namespace {

int failures = 0;

void check(bool ok, const char* what) {
    std::printf("%s: %s\n", ok ? "ok" : "FAILED", what);
    failures += !ok;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: test_odr DIR\n");
        return 2;
    }
    if (!gemma4::cpu_features().avx2 || !gemma4::cpu_features().fma || !gemma4::cpu_features().os_avx) {
        std::printf("GEMMA4_SKIP: this CPU cannot run the -march=x86-64-v3 translation unit\n");
        return 0;
    }
    const std::filesystem::path dir = argv[1];
    gemma4::write_random_checkpoint(dir, gemma4::tiny_config());
    const OdrRun a = odr_run_baseline(dir), b = odr_run_x86_64_v3(dir);
    std::printf("baseline unit: %s, kernels q8/q4 %s, bf16 %s\n", a.abi.c_str(), a.quant.c_str(), a.bf16.c_str());
    std::printf("x86-64-v3 unit: %s, kernels q8/q4 %s, bf16 %s\n", b.abi.c_str(), b.quant.c_str(), b.bf16.c_str());
    check(a.abi == "arch_base" && b.abi == "arch_avx2fma", "each unit keeps the library code built with its own flags");
    check(a.quant == b.quant, "both run the Q8/Q4 kernel chosen for the process");
    if (gemma4::active_isa() == gemma4::Isa::Baseline)
        check(a.bf16 != b.bf16, "at the baseline level each runs xsimd at its own architecture");
    else
        check(a.bf16 == b.bf16, "both run the bf16 kernel of the process's level");
    if (gemma4::active_isa() == gemma4::Isa::Baseline) {
        // the portable kernel is generic code: the x86-64-v3 unit may fuse its multiply-adds
        double diff = 0, largest = 0;
        for (std::size_t i = 0; i < a.q8.size() && i < b.q8.size(); ++i) {
            diff = std::max(diff, std::fabs(static_cast<double>(a.q8[i]) - b.q8[i]));
            largest = std::max(largest, std::fabs(static_cast<double>(a.q8[i])));
        }
        std::printf("portable Q8: largest difference %.3g (largest value %.3g)\n", diff, largest);
        check(a.q8.size() == b.q8.size() && diff <= 1e-5 * std::max(1.0, largest), "the portable Q8 kernel agrees in both");
    } else {
        check(a.q8.size() == b.q8.size() && std::memcmp(a.q8.data(), b.q8.data(), a.q8.size() * sizeof(float)) == 0,
              "the level's Q8 kernel gives the same bits in both");
    }
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < a.logits.size() && i < b.logits.size(); ++i) {
        worst = std::max(worst, std::fabs(static_cast<double>(a.logits[i]) - b.logits[i]));
        scale = std::max(scale, std::fabs(static_cast<double>(a.logits[i])));
    }
    std::printf("logits: largest difference %.3g (largest value %.3g)\n", worst, scale);
    check(!a.logits.empty() && a.logits.size() == b.logits.size() && worst <= 1e-4 * std::max(1.0, scale),
          "the model's logits agree (float rounding of the generic code aside)");
    return failures == 0 ? 0 : 1;
}
