# Fails when a public header includes a header of a layer above its own. The layers, lowest
# first (docs/architecture.md, "Layers of the code"); a folder may include its own headers, the
# top-level ones (abi, config, error, version) and those of the folders listed for it:
#   detail, tensor                       nothing but the top level (tensor: detail)
#   io, kernels                          tensor
#   kv                                   tensor, io
#   tokenizer, multimodal                io
#   layers                               tensor, kernels, kv
#   grammar                              tokenizer, io
#   model                                every folder above
#   generate                             every folder but examples
# (The umbrella gemma4.hpp includes them all.) Run with -DINCLUDE_DIR=<repo>/include.
cmake_minimum_required(VERSION 3.25)
set(allowed_detail "")
set(allowed_tensor "detail")
set(allowed_io "detail;tensor")
set(allowed_kernels "detail;tensor")
set(allowed_kv "detail;tensor;io")
set(allowed_tokenizer "detail;io")
set(allowed_multimodal "detail;io;tensor")
set(allowed_layers "detail;tensor;kernels;kv")
set(allowed_grammar "detail;io;tokenizer")
set(allowed_model "detail;tensor;io;kernels;kv;layers;tokenizer;multimodal")
set(allowed_generate "detail;tensor;io;kernels;kv;layers;tokenizer;multimodal;model;grammar")
set(top "")  # the folder-less headers may include only each other

file(GLOB_RECURSE headers RELATIVE "${INCLUDE_DIR}/gemma4" "${INCLUDE_DIR}/gemma4/*.hpp")
set(bad "")
set(folders "")
foreach(h ${headers})
  string(FIND "${h}" "/" slash)
  if(h STREQUAL "gemma4.hpp")
    continue()  # the umbrella includes every layer
  elseif(slash EQUAL -1)
    set(folder "")
  else()
    string(SUBSTRING "${h}" 0 ${slash} folder)
    list(APPEND folders "${folder}")
    if(NOT DEFINED allowed_${folder})
      string(APPEND bad "\n  ${h}: folder '${folder}' has no place in the layering (tests/support/check_layering.cmake)")
      continue()
    endif()
  endif()
  file(STRINGS "${INCLUDE_DIR}/gemma4/${h}" includes REGEX "^#include <gemma4/")
  foreach(line ${includes})
    string(REGEX REPLACE "^#include <gemma4/([^>]*)>.*" "\\1" target "${line}")
    string(FIND "${target}" "/" tslash)
    if(tslash EQUAL -1)
      continue()  # a top-level header: every layer may use it
    endif()
    string(SUBSTRING "${target}" 0 ${tslash} tfolder)
    if(folder STREQUAL "" AND NOT tfolder STREQUAL "")
      string(APPEND bad "\n  ${h} includes ${target}: a top-level header may include only top-level headers")
    elseif(NOT folder STREQUAL "" AND NOT tfolder STREQUAL folder AND NOT tfolder IN_LIST allowed_${folder})
      string(APPEND bad "\n  ${h} includes ${target}: ${folder}/ may include only ${allowed_${folder}}")
    endif()
  endforeach()
endforeach()
list(REMOVE_DUPLICATES folders)
list(LENGTH folders n_folders)
if(n_folders LESS 8)
  message(FATAL_ERROR "found only ${n_folders} folders under ${INCLUDE_DIR}/gemma4: wrong INCLUDE_DIR?")
endif()
if(bad)
  message(FATAL_ERROR "headers that include a layer above their own:${bad}")
endif()
message(STATUS "${n_folders} folders, every include points down")
