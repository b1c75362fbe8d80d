// Built with -march=x86-64-v3 (AVX2, FMA; tests/odr/CMakeLists.txt).
#include "odr_body.hpp"

OdrRun odr_run_x86_64_v3(const std::filesystem::path& dir) { return odr_run(dir); }
