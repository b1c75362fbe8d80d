// gemma4 — header-only C++20 inference for Google's Gemma 4 12B. The umbrella header.
#pragma once

#include <gemma4/config.hpp>
#include <gemma4/error.hpp>
#include <gemma4/io/config_json.hpp>
#include <gemma4/io/npy.hpp>
#include <gemma4/io/safetensors.hpp>
#include <gemma4/kernels/thread_pool.hpp>
#include <gemma4/layers/attention.hpp>
#include <gemma4/layers/decoder_layer.hpp>
#include <gemma4/layers/mlp.hpp>
#include <gemma4/layers/observer.hpp>
#include <gemma4/layers/rms_norm.hpp>
#include <gemma4/model/checkpoint.hpp>
#include <gemma4/model/kv_cache.hpp>
#include <gemma4/model/model.hpp>
#include <gemma4/model/tensor_table.hpp>
#include <gemma4/model/weights.hpp>
