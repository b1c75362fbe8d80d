// The Q8/Q4 kernels of every level, compiled once for the whole program rather than in each of
// its translation units (GEMMA4_SEPARATE_KERNELS, set for this target in CMakeLists.txt; see
// kernels/target.hpp). A program of one translation unit needs none of this.
#define GEMMA4_KERNELS_IMPLEMENTATION
#include <gemma4/kernels/linear_quant.hpp>
