// gemma4 — header-only C++20 inference for Google's Gemma 4 12B. The umbrella header: everything
// but image-file decoding, which needs libpng/libjpeg (include <gemma4/multimodal/image.hpp> and
// link gemma4::image for that), and the writers of test fixtures (model/random_checkpoint.hpp,
// tokenizer/tiny_tokenizer.hpp, io/safetensors_writer.hpp), which a program includes when it
// makes its own test checkpoints.
#pragma once

#include <gemma4/config.hpp>
#include <gemma4/version.hpp>
#include <gemma4/error.hpp>
#include <gemma4/generate/chat.hpp>
#include <gemma4/generate/drafter.hpp>
#include <gemma4/generate/engine.hpp>
#include <gemma4/generate/generation_config.hpp>
#include <gemma4/generate/mtp_drafter.hpp>
#include <gemma4/generate/sampler.hpp>
#include <gemma4/generate/session.hpp>
#include <gemma4/generate/speculative.hpp>
#include <gemma4/generate/stop.hpp>
#include <gemma4/grammar/constraint.hpp>
#include <gemma4/grammar/gbnf.hpp>
#include <gemma4/grammar/json_schema.hpp>
#include <gemma4/grammar/token_vocabulary.hpp>
#include <gemma4/io/config_json.hpp>
#include <gemma4/io/gguf.hpp>
#include <gemma4/io/npy.hpp>
#include <gemma4/io/safetensors.hpp>
#include <gemma4/kernels/cpu.hpp>
#include <gemma4/kernels/thread_pool.hpp>
#include <gemma4/kv/kv_cache.hpp>
#include <gemma4/kv/kv_state.hpp>
#include <gemma4/kv/prompt_cache.hpp>
#include <gemma4/layers/attention.hpp>
#include <gemma4/layers/decoder_layer.hpp>
#include <gemma4/layers/embedders.hpp>
#include <gemma4/layers/mlp.hpp>
#include <gemma4/layers/observer.hpp>
#include <gemma4/layers/rms_norm.hpp>
#include <gemma4/layers/rope.hpp>
#include <gemma4/model/assistant.hpp>
#include <gemma4/model/assistant_checkpoint.hpp>
#include <gemma4/model/checkpoint.hpp>
#include <gemma4/model/gguf_checkpoint.hpp>
#include <gemma4/model/gguf_mmproj.hpp>
#include <gemma4/model/model.hpp>
#include <gemma4/model/multimodal.hpp>
#include <gemma4/model/quantize.hpp>
#include <gemma4/model/save_checkpoint.hpp>
#include <gemma4/model/tensor_table.hpp>
#include <gemma4/multimodal/audio.hpp>
#include <gemma4/multimodal/image_patches.hpp>
#include <gemma4/multimodal/wav.hpp>
#include <gemma4/tensor/weights.hpp>
#include <gemma4/tokenizer/gguf_tokenizer.hpp>
#include <gemma4/tokenizer/streaming_decoder.hpp>
#include <gemma4/tokenizer/tokenizer.hpp>
