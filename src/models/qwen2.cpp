// Qwen2 (Qwen2.5, Qwen2.5-Coder): the Llama block with biases on the Q, K and V projections and
// rotary embedding on (i, i + n_rot/2) pairs (NeoX style; GGUF keeps HF's Q/K row order).
#include <vector>

#include "models/architectures.h"
#include "models/decoder.h"

namespace tern {
namespace {

class Qwen2Model final : public DecoderModel {
 public:
  Qwen2Model(std::shared_ptr<const gguf::File> file, Backend& backend) : DecoderModel(std::move(file), backend) {}
  Status load(const ModelConfig& config, const ModelOptions& options);

 private:
  struct Layer {
    Tensor attn_norm;     // [1, d]
    Tensor wq;            // [h * hd, d]
    Tensor wk, wv;        // [hk * hd, d]
    Tensor bq;            // [1, h * hd]
    Tensor bk, bv;        // [1, hk * hd]
    Tensor wo;            // [d, h * hd]
    Tensor ffn_norm;      // [1, d]
    Tensor w_gate, w_up;  // [f, d]
    Tensor w_down;        // [d, f]
  };
  void forward_layer(int layer, Tensor& x, KvLayerView& kv) override;
  std::vector<Layer> layers_;
};

Status Qwen2Model::load(const ModelConfig& config, const ModelOptions& options) {
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
    TERN_ASSIGN_OR_RETURN(w.bq, vector(layer_name(l, "attn_q.bias"), q_cols));
    TERN_ASSIGN_OR_RETURN(w.bk, vector(layer_name(l, "attn_k.bias"), kv_cols));
    TERN_ASSIGN_OR_RETURN(w.bv, vector(layer_name(l, "attn_v.bias"), kv_cols));
    TERN_ASSIGN_OR_RETURN(w.wo, weight(layer_name(l, "attn_output.weight"), c.n_embd, q_cols));
    TERN_ASSIGN_OR_RETURN(w.ffn_norm, vector(layer_name(l, "ffn_norm.weight"), c.n_embd));
    TERN_ASSIGN_OR_RETURN(w.w_gate, weight(layer_name(l, "ffn_gate.weight"), c.n_ff, c.n_embd));
    TERN_ASSIGN_OR_RETURN(w.w_up, weight(layer_name(l, "ffn_up.weight"), c.n_ff, c.n_embd));
    TERN_ASSIGN_OR_RETURN(w.w_down, weight(layer_name(l, "ffn_down.weight"), c.n_embd, c.n_ff));
  }
  return Status::ok();
}

void Qwen2Model::forward_layer(int layer, Tensor& x, KvLayerView& kv) {
  const Layer& w = layers_[layer];
  const ModelConfig& c = config_;
  Backend& b = backend();
  const int64_t n = x.rows;
  Tensor h = ws_.norm.slice_rows(0, n), q = ws_.q.slice_rows(0, n), k = ws_.k.slice_rows(0, n),
         v = ws_.v.slice_rows(0, n), attn = ws_.attn.slice_rows(0, n), out = ws_.out.slice_rows(0, n),
         gate = ws_.gate.slice_rows(0, n), up = ws_.up.slice_rows(0, n);

  // Self-attention: x += Wo · attn(rope(Wq h + bq), rope(Wk h + bk), Wv h + bv), h = rmsnorm(x).
  ops::rms_norm(b, x, w.attn_norm, c.rms_eps, h);
  ops::matmul_group(b, h, {&w.wq, &w.wk, &w.wv}, {&q, &k, &v});
  ops::add_bias(b, q, w.bq);
  ops::add_bias(b, k, w.bk);
  ops::add_bias(b, v, w.bv);
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

Result<std::unique_ptr<Model>> make_qwen2(std::shared_ptr<const gguf::File> file, Backend& backend,
                                          const ModelConfig& config, const ModelOptions& options) {
  auto model = std::make_unique<Qwen2Model>(std::move(file), backend);
  TERN_RETURN_IF_ERROR(model->load(config, options));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace tern
