// Qwen3 (dense): the Llama block without QKV biases, with per-head RMSNorm on queries and keys
// before the rotary embedding (QK-norm), NeoX-style rope pairs, and a head dim that need not be
// n_embd / n_heads.
#include <vector>

#include "models/architectures.h"
#include "models/decoder.h"

namespace tern {
namespace {

class Qwen3Model final : public DecoderModel {
 public:
  Qwen3Model(std::shared_ptr<const gguf::File> file, Backend& backend) : DecoderModel(std::move(file), backend) {}
  Status load(const ModelConfig& config, const ModelOptions& options);

 private:
  struct Layer {
    Tensor attn_norm;     // [1, d]
    Tensor wq;            // [h * hd, d]
    Tensor wk, wv;        // [hk * hd, d]
    Tensor q_norm, k_norm;  // [1, hd], shared by all heads
    Tensor wo;            // [d, h * hd]
    Tensor ffn_norm;      // [1, d]
    Tensor w_gate, w_up;  // [f, d]
    Tensor w_down;        // [d, f]
  };
  void forward_layer(int layer, Tensor& x, KvLayerView& kv) override;
  std::vector<Layer> layers_;
};

Status Qwen3Model::load(const ModelConfig& config, const ModelOptions& options) {
  TERN_RETURN_IF_ERROR(load_common(config, options));
  rope_.neox = true;
  const ModelConfig& c = config_;
  const int64_t q_cols = int64_t{c.n_heads} * c.head_dim, kv_cols = int64_t{c.n_kv_heads} * c.head_dim;
  layers_.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    Layer& w = layers_[l];
    TERN_ASSIGN_OR_RETURN(w.attn_norm, vector(layer_name(l, "attn_norm.weight"), c.n_embd));
    TERN_ASSIGN_OR_RETURN(w.wq, weight(layer_name(l, "attn_q.weight"), q_cols, c.n_embd));
    TERN_ASSIGN_OR_RETURN(w.wk, weight(layer_name(l, "attn_k.weight"), kv_cols, c.n_embd));
    TERN_ASSIGN_OR_RETURN(w.wv, weight(layer_name(l, "attn_v.weight"), kv_cols, c.n_embd));
    TERN_ASSIGN_OR_RETURN(w.q_norm, vector(layer_name(l, "attn_q_norm.weight"), c.head_dim));
    TERN_ASSIGN_OR_RETURN(w.k_norm, vector(layer_name(l, "attn_k_norm.weight"), c.head_dim));
    TERN_ASSIGN_OR_RETURN(w.wo, weight(layer_name(l, "attn_output.weight"), c.n_embd, q_cols));
    TERN_ASSIGN_OR_RETURN(w.ffn_norm, vector(layer_name(l, "ffn_norm.weight"), c.n_embd));
    TERN_ASSIGN_OR_RETURN(w.w_gate, weight(layer_name(l, "ffn_gate.weight"), c.n_ff, c.n_embd));
    TERN_ASSIGN_OR_RETURN(w.w_up, weight(layer_name(l, "ffn_up.weight"), c.n_ff, c.n_embd));
    TERN_ASSIGN_OR_RETURN(w.w_down, weight(layer_name(l, "ffn_down.weight"), c.n_embd, c.n_ff));
  }
  return Status::ok();
}

void Qwen3Model::forward_layer(int layer, Tensor& x, KvLayerView& kv) {
  const Layer& w = layers_[layer];
  const ModelConfig& c = config_;
  Backend& b = backend();
  const int64_t n = x.rows;
  Tensor h = ws_.norm.slice_rows(0, n), q = ws_.q.slice_rows(0, n), k = ws_.k.slice_rows(0, n),
         v = ws_.v.slice_rows(0, n), attn = ws_.attn.slice_rows(0, n), out = ws_.out.slice_rows(0, n),
         gate = ws_.gate.slice_rows(0, n), up = ws_.up.slice_rows(0, n);

  // Self-attention: x += Wo · attn(rope(norm_q(Wq h)), rope(norm_k(Wk h)), Wv h), h = rmsnorm(x);
  // norm_q / norm_k normalise each head's hd values ([n, h * hd] viewed as [n * h, hd]).
  ops::rms_norm(b, x, w.attn_norm, c.rms_eps, h);
  ops::matmul_group(b, h, {&w.wq, &w.wk, &w.wv}, {&q, &k, &v});
  Tensor q_heads = q.reshape_cols(c.head_dim), k_heads = k.reshape_cols(c.head_dim);
  ops::rms_norm(b, q_heads, w.q_norm, c.rms_eps, q_heads);
  ops::rms_norm(b, k_heads, w.k_norm, c.rms_eps, k_heads);
  ops::rope(b, q, c.n_heads, c.head_dim, rope_);
  ops::rope(b, k, c.n_kv_heads, c.head_dim, rope_);
  ops::kv_write(b, k, v, kv);
  ops::attention(b, q, kv, attn_params_, attn);
  ops::matmul(b, w.wo, attn, out);
  ops::add(b, x, out, x);

  // Feed-forward: x += W_down · (silu(W_gate h) * W_up h), h = rmsnorm(x).
  ops::rms_norm(b, x, w.ffn_norm, c.rms_eps, h);
  ops::matmul_group(b, h, {&w.w_gate, &w.w_up}, {&gate, &up});
  ops::swiglu(b, gate, up, gate);
  ops::matmul(b, w.w_down, gate, out);
  ops::add(b, x, out, x);
}

}  // namespace

Result<std::unique_ptr<Model>> make_qwen3(std::shared_ptr<const gguf::File> file, Backend& backend,
                                          const ModelConfig& config, const ModelOptions& options) {
  auto model = std::make_unique<Qwen3Model>(std::move(file), backend);
  TERN_RETURN_IF_ERROR(model->load(config, options));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace tern
