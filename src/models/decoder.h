// Shared machinery of decoder-only transformers: weight lookup with shape checks, the rotary
// table, activation workspace and the final norm + logits. Each architecture file declares its
// own layer weights and writes its layer forward with the ops vocabulary.
// Letters: n = tokens in the step, d = n_embd, f = n_ff, h/hk = q/kv heads, hd = head_dim, V = vocab.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/model.h"
#include "ops/ops.h"

namespace tern {

class DecoderModel : public Model {
 public:
  using Model::forward;
  void forward(const BatchPlan& plan, KvPool& kv, const Outputs& out) final;
  void copy_logit_row(int row, float* dst) final;

 protected:
  DecoderModel(std::shared_ptr<const gguf::File> file, Backend& backend) : file_(std::move(file)), backend_(&backend) {}

  // Common setup: config, token embedding, output norm/head, rope table. Call first in load().
  Status load_common(const ModelConfig& config, const ModelOptions& options);
  // A weight [rows, cols] (GGUF shape [cols, rows]); error naming the tensor on a mismatch.
  Result<Tensor> weight(const std::string& name, int64_t rows, int64_t cols);
  // An F32 vector [1, n] (norm weights, biases).
  Result<Tensor> vector(const std::string& name, int64_t n);
  bool has_tensor(const std::string& name) const { return file_->find_tensor(name) != nullptr; }
  static std::string layer_name(int layer, const char* suffix) { return "blk." + std::to_string(layer) + "." + suffix; }

  // Runs layer `layer` on the residual stream x [n, d] in place.
  virtual void forward_layer(int layer, Tensor& x, KvLayerView& kv) = 0;

  // Workspace for the current step: every tensor is sized for n rows.
  struct Workspace {
    Tensor x, norm;         // [n, d]
    Tensor q, attn;         // [n, h * hd]
    Tensor k, v;            // [n, hk * hd]
    Tensor gate, up;        // [n, f]
    Tensor out;             // [n, d]: attention / ffn output before the residual add
    Tensor logit_hidden;    // [m, d], m = rows needing logits: the final norm of those rows
    Tensor logits;          // [m, V]
  };
  Workspace ws_;
  Backend& backend() { return *backend_; }
  RopeParams rope_;
  AttentionParams attn_params_;

 private:
  void ensure_workspace(int n_tokens, int n_logit_rows);
  // forward's body; forward drops the step's pending work when it throws OutOfMemory.
  void forward_step(const BatchPlan& plan, KvPool& kv, const Outputs& outputs);

  std::shared_ptr<const gguf::File> file_;
  Backend* backend_;
  Tensor token_embd_, output_norm_, output_;
  std::vector<std::unique_ptr<Buffer>> weight_buffers_;  // device copies (none on the CPU)
  std::unique_ptr<Buffer> rope_buffer_;
  std::unique_ptr<Buffer> workspace_buffer_;
  int ws_tokens_ = 0, ws_logit_rows_ = 0;
  int last_logit_rows_ = 0;  // logit rows of the last forward (copy_logit_row)
};

}  // namespace tern
