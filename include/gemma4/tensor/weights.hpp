// The model's tensors as views (mmap'd checkpoint bytes, or quantized copies), one field per
// checkpoint tensor, named like the checkpoint.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/tensor/weight_view.hpp>

#include <memory>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

struct LayerWeights {
    WeightView input_layernorm;            // spec: input_norm
    WeightView q_proj, k_proj, v_proj;     // spec: attn.qkv_proj (v_proj absent when k_eq_v)
    WeightView q_norm, k_norm;             // spec: attn.qk_norm
    WeightView o_proj;                     // spec: attn.o_proj
    WeightView post_attention_layernorm;   // spec: post_mix_norm
    WeightView pre_feedforward_layernorm;  // spec: post_attn_norm
    WeightView gate_proj, up_proj;         // spec: mlp.gate_up
    WeightView down_proj;                  // spec: mlp.down
    WeightView post_feedforward_layernorm; // spec: post_ffn_norm
    WeightView layer_scalar;               // spec: mlp_residual's s
};

struct VisionWeights {
    WeightView patch_ln1_weight, patch_ln1_bias;
    WeightView patch_dense_weight, patch_dense_bias;
    WeightView patch_ln2_weight, patch_ln2_bias;
    WeightView pos_embedding;
    WeightView pos_norm_weight, pos_norm_bias;
    WeightView embedding_projection;
};

struct AudioWeights {
    WeightView embedding_projection;
};

struct ModelWeights {
    WeightView embed_tokens;  // spec: embed, and lm_head (tied)
    WeightView norm;          // spec: final_norm
    std::vector<LayerWeights> layers;
    VisionWeights vision;
    AudioWeights audio;
    /// Keeps the storage behind the views alive (mapped files, quantized buffers).
    std::shared_ptr<const void> storage;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
