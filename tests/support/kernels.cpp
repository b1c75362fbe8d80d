// The Q8/Q4 kernels of every level, compiled once for all the test programs instead of once per
// test folder (GEMMA4_SEPARATE_KERNELS, kernels/target.hpp). The README's example and the
// two-flag program (tests/odr) stay header-only, as a user's program is by default.
#define GEMMA4_KERNELS_IMPLEMENTATION
#include <gemma4/kernels/linear_quant.hpp>
