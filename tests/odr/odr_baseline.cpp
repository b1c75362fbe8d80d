// Built with -march=x86-64 (tests/odr/CMakeLists.txt).
#include "odr_body.hpp"

OdrRun odr_run_baseline(const std::filesystem::path& dir) { return odr_run(dir); }
