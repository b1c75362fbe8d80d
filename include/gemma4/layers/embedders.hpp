// The encoder-free multimodal embedders (spec §4.2, §4.3): image tiles and audio frames projected
// straight into the decoder's hidden size. Their outputs replace the placeholder tokens' rows,
// unscaled.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/config.hpp>
#include <gemma4/error.hpp>
#include <gemma4/kernels/layer_norm.hpp>
#include <gemma4/kernels/linear.hpp>
#include <gemma4/layers/rms_norm.hpp>
#include <gemma4/tensor/weights.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// A LayerNorm's weight and bias converted once to T.
template <class T>
struct LayerNormParams {
    std::vector<T> weight, bias;
    T eps;
    void operator()(const T* x, T* y) const {
        kernels::layer_norm(x, weight.data(), bias.data(), eps, static_cast<std::int64_t>(weight.size()), y);
    }
};

/// patches [N, P] with (x, y) tile positions → soft tokens [N, H]:
/// LayerNorm → dense (+bias) → LayerNorm → + pos[x, 0] + pos[y, 1] → LayerNorm → RMSNorm (no
/// weight), all at the embedder's width E (mm_embed_dim) → projection to the hidden size H.
template <class T>
class VisionEmbedder {
public:
    VisionEmbedder(const Gemma4Config& c, const VisionWeights& w) : config_(c), w_(w) {
        if (!w.patch_dense_weight || !w.embedding_projection || !w.pos_embedding)
            throw ShapeError("checkpoint has no vision embedder tensors (model.vision_embedder.*)");
        const T eps = static_cast<T>(c.vision.layer_norm_eps);
        ln1_ = {w.patch_ln1_weight.to_vector<T>(), w.patch_ln1_bias.to_vector<T>(), eps};
        ln2_ = {w.patch_ln2_weight.to_vector<T>(), w.patch_ln2_bias.to_vector<T>(), eps};
        pos_norm_ = {w.pos_norm_weight.to_vector<T>(), w.pos_norm_bias.to_vector<T>(), eps};
        dense_bias_ = w.patch_dense_bias.to_vector<T>();
        unit_norm_ = RMSNorm<T>::unit(c.vision_embed_dim(), c.vision.rms_norm_eps);
    }

    std::int64_t patch_values() const { return config_.vision.patch_values(); }

    std::vector<T> operator()(std::span<const T> patches, std::span<const std::int32_t> positions, ThreadPool& pool) const {
        const std::int64_t P = patch_values(), E = config_.vision_embed_dim(), H = config_.hidden_size;
        if (patches.size() % static_cast<std::size_t>(P) != 0)
            throw ShapeError("image patches: " + std::to_string(patches.size()) + " values is not a multiple of the patch size " +
                             std::to_string(P));
        const auto n = static_cast<std::int64_t>(patches.size()) / P;
        if (static_cast<std::int64_t>(positions.size()) != 2 * n)
            throw ShapeError("image positions: expected [" + std::to_string(n) + ", 2], got " + std::to_string(positions.size()) + " values");
        const std::int64_t table = config_.vision.mm_posemb_size;
        for (std::int64_t i = 0; i < 2 * n; ++i)
            if (positions[static_cast<std::size_t>(i)] < 0 || positions[static_cast<std::size_t>(i)] >= table)
                throw InvalidArgument("image positions: " + std::to_string(positions[static_cast<std::size_t>(i)]) +
                                      " at patch " + std::to_string(i / 2) + " is outside the position table [0, " +
                                      std::to_string(table) + ")");
        std::vector<T> normed(patches.size()), h(static_cast<std::size_t>(n * E)), out(static_cast<std::size_t>(n * H));
        for (std::int64_t i = 0; i < n; ++i) ln1_(patches.data() + i * P, normed.data() + i * P);
        linear<T>(w_.patch_dense_weight, {normed.data(), P}, {h.data(), E}, n, pool);
        for (std::int64_t i = 0; i < n; ++i) {
            T* row = h.data() + i * E;
            for (std::int64_t j = 0; j < E; ++j) row[j] += dense_bias_[static_cast<std::size_t>(j)];
            ln2_(row, row);
            const std::int64_t x = positions[static_cast<std::size_t>(2 * i)], y = positions[static_cast<std::size_t>(2 * i + 1)];
            // pos_embedding[x, 0, :] + pos_embedding[y, 1, :]
            for (std::int64_t j = 0; j < E; ++j)
                row[j] += w_.pos_embedding.at<T>((x * 2 + 0) * E + j) + w_.pos_embedding.at<T>((y * 2 + 1) * E + j);
            pos_norm_(row, row);
            unit_norm_(row, E, row, E, 1);
        }
        linear<T>(w_.embedding_projection, {h.data(), E}, {out.data(), H}, n, pool);
        return out;
    }

private:
    const Gemma4Config& config_;
    VisionWeights w_;
    LayerNormParams<T> ln1_, ln2_, pos_norm_;
    std::vector<T> dense_bias_;
    RMSNorm<T> unit_norm_;
};

/// frames [n, F] → soft tokens [n, H]: RMSNorm (no weight) → projection.
template <class T>
class AudioEmbedder {
public:
    AudioEmbedder(const Gemma4Config& c, const AudioWeights& w) : config_(c), w_(w) {
        if (!w.embedding_projection) throw ShapeError("checkpoint has no audio embedder tensor (model.embed_audio.embedding_projection.weight)");
        norm_ = RMSNorm<T>::unit(c.audio.audio_embed_dim, c.audio.rms_norm_eps);
    }

    std::vector<T> operator()(std::span<const T> frames, ThreadPool& pool) const {
        const std::int64_t F = config_.audio.audio_embed_dim, H = config_.hidden_size;
        if (frames.size() % static_cast<std::size_t>(F) != 0)
            throw ShapeError("audio frames: " + std::to_string(frames.size()) + " values is not a multiple of the frame size " +
                             std::to_string(F));
        const auto n = static_cast<std::int64_t>(frames.size()) / F;
        std::vector<T> normed(frames.size()), out(static_cast<std::size_t>(n * H));
        norm_(frames.data(), F, normed.data(), F, n);
        linear<T>(w_.embedding_projection, {normed.data(), F}, {out.data(), H}, n, pool);
        return out;
    }

private:
    const Gemma4Config& config_;
    AudioWeights w_;
    RMSNorm<T> norm_;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
