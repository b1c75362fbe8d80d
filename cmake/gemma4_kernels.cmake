# gemma4_separate_kernels(<target>): the library's Q8/Q4 kernels compiled once for <target>, in a
# translation unit of their own, instead of in each of its translation units that runs a model
# (about 14 s of g++ -O2 apiece; GEMMA4_SEPARATE_KERNELS in include/gemma4/kernels/target.hpp,
# docs/api.md). The definition is PUBLIC: a library given the kernels passes the mode on to the
# programs that link it, which then share its copy.
function(gemma4_separate_kernels target)
  set(source "${CMAKE_CURRENT_BINARY_DIR}/${target}_gemma4_kernels.cpp")
  file(CONFIGURE OUTPUT "${source}" CONTENT
       "// Written by gemma4_separate_kernels(${target}): the one definition of the kernels.\n#define GEMMA4_KERNELS_IMPLEMENTATION\n#include <gemma4/kernels/linear_quant.hpp>\n")
  target_sources(${target} PRIVATE "${source}")
  # The macro must come before the headers: never batched with other files, nor preceded by a
  # precompiled header.
  set_source_files_properties("${source}" PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON SKIP_PRECOMPILE_HEADERS ON)
  target_compile_definitions(${target} PUBLIC GEMMA4_SEPARATE_KERNELS)
endfunction()
