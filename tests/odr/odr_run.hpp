// One run of the library as a translation unit sees it; compiled twice (odr_baseline.cpp,
// odr_x86_64_v3.cpp) with different -march. Each defines its own entry point and returns plain
// types, so nothing of gemma4 crosses between them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

struct OdrRun {
    std::string abi;           ///< gemma4::abi_name() of the translation unit
    std::string quant, bf16;   ///< the kernels it reports at the active level
    std::vector<float> logits; ///< of the small model written to `dir`, int8 weights
    std::vector<float> q8;     ///< one int8 linear through the level's kernel
};

OdrRun odr_run_baseline(const std::filesystem::path& dir);
OdrRun odr_run_x86_64_v3(const std::filesystem::path& dir);
