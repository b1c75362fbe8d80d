// A straightforward reference forward pass of the Gemma 4 decoder, written from the spec with
// plain loops in double and none of the library's kernels or layers. It reads the checkpoint
// through the library's loader (I/O is tested on its own) and converts every tensor to double.
// Besides logits it records every spec node, for per-node comparisons through the taps.
#pragma once

#include <gemma4/model/checkpoint.hpp>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gemma4::test {

struct Matrix {  // row-major [rows, cols]
    std::int64_t rows = 0, cols = 0;
    std::vector<double> v;
    Matrix() = default;
    Matrix(std::int64_t r, std::int64_t c) : rows(r), cols(c), v(static_cast<std::size_t>(r * c), 0.0) {}
    double& operator()(std::int64_t r, std::int64_t c) { return v[static_cast<std::size_t>(r * cols + c)]; }
    double operator()(std::int64_t r, std::int64_t c) const { return v[static_cast<std::size_t>(r * cols + c)]; }
};

inline Matrix to_matrix(const WeightView& w) {
    Matrix m(w.rows(), w.cols());
    for (std::int64_t i = 0; i < w.numel(); ++i) m.v[static_cast<std::size_t>(i)] = w.at<double>(i);
    return m;
}

class ReferenceModel {
public:
    explicit ReferenceModel(const std::filesystem::path& dir) : ck_(load_checkpoint(dir)) {}

    const Gemma4Config& config() const { return ck_.config; }

    /// Image and audio inputs, and how their tokens attend (spec §4, decision 9).
    struct Soft {
        Matrix rows;                      ///< [placeholders, H], in id order
        std::vector<std::int32_t> blocks;  ///< per id: image block or -1
        bool blocks_on_full_layers = false;
    };

    /// Vision embedder, spec §4.2: patches [N, P], positions (x, y).
    Matrix embed_image(const Matrix& patches, const std::vector<std::int32_t>& pos) const {
        const VisionWeights& w = ck_.weights.vision;
        const std::int64_t E = ck_.config.vision_embed_dim();
        Matrix h = layer_norm(patches, w.patch_ln1_weight, w.patch_ln1_bias);
        h = matmul(h, to_matrix(w.patch_dense_weight));
        for (std::int64_t t = 0; t < h.rows; ++t)
            for (std::int64_t i = 0; i < E; ++i) h(t, i) += w.patch_dense_bias.at<double>(i);
        h = layer_norm(h, w.patch_ln2_weight, w.patch_ln2_bias);
        for (std::int64_t t = 0; t < h.rows; ++t)
            for (std::int64_t i = 0; i < E; ++i)
                h(t, i) += w.pos_embedding.at<double>((pos[2 * t] * 2 + 0) * E + i) + w.pos_embedding.at<double>((pos[2 * t + 1] * 2 + 1) * E + i);
        h = layer_norm(h, w.pos_norm_weight, w.pos_norm_bias);
        h = rms_heads(h, E, nullptr, ck_.config.vision.rms_norm_eps);
        return matmul(h, to_matrix(w.embedding_projection));
    }

    /// Audio embedder, spec §4.3: frames [n, F].
    Matrix embed_audio(const Matrix& frames) const {
        const Matrix h = rms_heads(frames, frames.cols, nullptr, ck_.config.audio.rms_norm_eps);
        return matmul(h, to_matrix(ck_.weights.audio.embedding_projection));
    }

    /// Logits [T, V] of the whole sequence; `nodes` receives every spec node's output.
    Matrix forward(const std::vector<std::int32_t>& ids, std::map<std::string, Matrix>* nodes = nullptr, const Soft* soft = nullptr) const {
        const Gemma4Config& c = ck_.config;
        const std::int64_t T = static_cast<std::int64_t>(ids.size()), H = c.hidden_size;
        auto record = [&](const std::string& name, const Matrix& m) {
            if (nodes) (*nodes)[name] = m;
        };
        const WeightView& E = ck_.weights.embed_tokens;
        // embed: y[t] = scale · E[id], scale = √H rounded to E's dtype
        double scale = std::sqrt(static_cast<double>(H));
        if (E.dtype == DType::BF16) scale = bf16_to_float(float_to_bf16(static_cast<float>(scale)));
        if (E.dtype == DType::F16) scale = f16_to_float(float_to_f16(static_cast<float>(scale)));
        if (E.dtype == DType::F32) scale = static_cast<float>(scale);
        Matrix x(T, H);
        std::int64_t soft_row = 0;
        for (std::int64_t t = 0; t < T; ++t) {
            const std::int32_t id = ids[static_cast<std::size_t>(t)];
            const bool placeholder = id == c.tokens.image || id == c.tokens.audio || id == c.tokens.video;
            for (std::int64_t i = 0; i < H; ++i) x(t, i) = placeholder ? soft->rows(soft_row, i) : scale * E.at<double>(id * H + i);
            soft_row += placeholder;
        }
        record("embed", x);
        auto same_block = [&](std::int64_t a, std::int64_t b) {
            return soft && !soft->blocks.empty() && soft->blocks[static_cast<std::size_t>(a)] >= 0 &&
                   soft->blocks[static_cast<std::size_t>(a)] == soft->blocks[static_cast<std::size_t>(b)];
        };

        for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
            const LayerWeights& w = ck_.weights.layers[static_cast<std::size_t>(l)];
            const std::string p = "layers." + std::to_string(l) + ".";
            const bool full = c.layer_kind(l) == AttentionKind::Full;
            const std::int64_t d = full ? c.global_head_dim : c.head_dim;
            const std::int64_t nq = c.num_attention_heads;
            const std::int64_t nkv = (full && c.attention_k_eq_v) ? c.num_global_key_value_heads : c.num_key_value_heads;
            const bool has_v = !(full && c.attention_k_eq_v);

            Matrix a = rms(x, w.input_layernorm, c.rms_norm_eps);
            record(p + "input_norm", a);
            Matrix q = matmul(a, to_matrix(w.q_proj)), k = matmul(a, to_matrix(w.k_proj));
            Matrix v = has_v ? matmul(a, to_matrix(w.v_proj)) : k;  // k_eq_v: V is the raw K
            record(p + "attn.qkv_proj", has_v ? concat({q, k, v}) : concat({q, k}));
            q = rms_heads(q, d, &w.q_norm, c.rms_norm_eps);
            k = rms_heads(k, d, &w.k_norm, c.rms_norm_eps);
            record(p + "attn.qk_norm", concat({q, k}));
            v = rms_heads(v, d, nullptr, c.rms_norm_eps);
            record(p + "attn.v_norm", v);
            const RopeParameters& rp = full ? c.rope_full : c.rope_sliding;
            const std::int64_t active = rp.rope_type == RopeType::Default
                                            ? d / 2
                                            : static_cast<std::int64_t>(rp.partial_rotary_factor * static_cast<double>(d) / 2.0);
            rope_heads(q, d, active, rp.rope_theta);
            rope_heads(k, d, active, rp.rope_theta);
            record(p + "attn.rope", concat({q, k}));
            Matrix o(T, nq * d);
            for (std::int64_t t = 0; t < T; ++t)
                for (std::int64_t h = 0; h < nq; ++h) {
                    const std::int64_t g = h / (nq / nkv);
                    std::vector<double> s;
                    std::vector<std::int64_t> keys;
                    for (std::int64_t j = 0; j < T; ++j) {
                        // causal, or the same image block (sliding layers; full ones on request)
                        const bool block = same_block(t, j) && (!full || soft->blocks_on_full_layers);
                        if (!(j <= t || block)) continue;
                        if (!full && !(t - c.sliding_window < j)) continue;  // q − W < k
                        double dot = 0;
                        for (std::int64_t i = 0; i < d; ++i) dot += q(t, h * d + i) * k(j, g * d + i);
                        s.push_back(dot);
                        keys.push_back(j);
                    }
                    double m = s[0], sum = 0;
                    for (double e : s) m = std::max(m, e);
                    for (double& e : s) sum += (e = std::exp(e - m));
                    for (std::size_t n = 0; n < s.size(); ++n)
                        for (std::int64_t i = 0; i < d; ++i) o(t, h * d + i) += s[n] / sum * v(keys[n], g * d + i);
                }
            record(p + "attn.core", o);
            Matrix attn = matmul(o, to_matrix(w.o_proj));
            record(p + "attn.o_proj", attn);
            attn = rms(attn, w.post_attention_layernorm, c.rms_norm_eps);
            record(p + "post_mix_norm", attn);
            for (std::size_t i = 0; i < x.v.size(); ++i) x.v[i] += attn.v[i];
            record(p + "attn_residual", x);
            Matrix m = rms(x, w.pre_feedforward_layernorm, c.rms_norm_eps);
            record(p + "post_attn_norm", m);
            Matrix gate = matmul(m, to_matrix(w.gate_proj)), up = matmul(m, to_matrix(w.up_proj));
            record(p + "mlp.gate_up", concat({gate, up}));
            Matrix act(T, gate.cols);
            for (std::size_t i = 0; i < act.v.size(); ++i) {
                const double g = gate.v[i];
                act.v[i] = 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g))) * up.v[i];
            }
            record(p + "mlp.act", act);
            Matrix down = matmul(act, to_matrix(w.down_proj));
            record(p + "mlp.down", down);
            down = rms(down, w.post_feedforward_layernorm, c.rms_norm_eps);
            record(p + "post_ffn_norm", down);
            const double s = w.layer_scalar.at<double>(0);
            for (std::size_t i = 0; i < x.v.size(); ++i) x.v[i] = s * (x.v[i] + down.v[i]);
            record(p + "mlp_residual", x);
        }
        Matrix h = rms(x, ck_.weights.norm, c.rms_norm_eps);
        record("final_norm", h);
        Matrix logits = matmul(h, to_matrix(E));
        const double cap = c.final_logit_softcapping;
        if (cap > 0)
            for (double& z : logits.v) z = cap * std::tanh(z / cap);
        record("lm_head", logits);
        return logits;
    }

private:
    static Matrix matmul(const Matrix& x, const Matrix& w) {  // x · wᵀ
        Matrix y(x.rows, w.rows);
        for (std::int64_t t = 0; t < x.rows; ++t)
            for (std::int64_t n = 0; n < w.rows; ++n) {
                double s = 0;
                for (std::int64_t k = 0; k < x.cols; ++k) s += x(t, k) * w(n, k);
                y(t, n) = s;
            }
        return y;
    }
    static Matrix concat(std::initializer_list<Matrix> parts) {
        std::int64_t cols = 0;
        for (const Matrix& m : parts) cols += m.cols;
        Matrix y(parts.begin()->rows, cols);
        std::int64_t off = 0;
        for (const Matrix& m : parts) {
            for (std::int64_t t = 0; t < m.rows; ++t)
                for (std::int64_t i = 0; i < m.cols; ++i) y(t, off + i) = m(t, i);
            off += m.cols;
        }
        return y;
    }
    static Matrix rms(const Matrix& x, const WeightView& w, double eps) { return rms_heads(x, x.cols, &w, eps); }
    static Matrix layer_norm(const Matrix& x, const WeightView& w, const WeightView& b) {  // eps 1e-5
        Matrix y(x.rows, x.cols);
        for (std::int64_t t = 0; t < x.rows; ++t) {
            double mean = 0, var = 0;
            for (std::int64_t i = 0; i < x.cols; ++i) mean += x(t, i) / static_cast<double>(x.cols);
            for (std::int64_t i = 0; i < x.cols; ++i) var += (x(t, i) - mean) * (x(t, i) - mean) / static_cast<double>(x.cols);
            for (std::int64_t i = 0; i < x.cols; ++i) y(t, i) = (x(t, i) - mean) / std::sqrt(var + 1e-5) * w.at<double>(i) + b.at<double>(i);
        }
        return y;
    }
    static Matrix rms_heads(const Matrix& x, std::int64_t d, const WeightView* w, double eps) {
        Matrix y(x.rows, x.cols);
        for (std::int64_t t = 0; t < x.rows; ++t)
            for (std::int64_t h = 0; h < x.cols / d; ++h) {
                double ss = 0;
                for (std::int64_t i = 0; i < d; ++i) ss += x(t, h * d + i) * x(t, h * d + i);
                const double r = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
                for (std::int64_t i = 0; i < d; ++i) y(t, h * d + i) = x(t, h * d + i) * r * (w ? w->at<double>(i) : 1.0);
            }
        return y;
    }
    /// Pairs (i, i + d/2) rotated by pos · θ^(−2i/d) for i < active; the rest unchanged.
    static void rope_heads(Matrix& x, std::int64_t d, std::int64_t active, double theta) {
        for (std::int64_t t = 0; t < x.rows; ++t)
            for (std::int64_t h = 0; h < x.cols / d; ++h)
                for (std::int64_t i = 0; i < active; ++i) {
                    const double angle = static_cast<double>(t) * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
                    const double a = x(t, h * d + i), b = x(t, h * d + i + d / 2);
                    x(t, h * d + i) = a * std::cos(angle) - b * std::sin(angle);
                    x(t, h * d + i + d / 2) = b * std::cos(angle) + a * std::sin(angle);
                }
    }

    Checkpoint ck_;
};

/// max |a − b| / max |b|
inline double relative_error(const double* a, const double* b, std::size_t n) {
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < n; ++i) {
        diff = std::max(diff, std::abs(a[i] - b[i]));
        scale = std::max(scale, std::abs(b[i]));
    }
    return scale > 0 ? diff / scale : diff;
}

}  // namespace gemma4::test
