#include "models/decoder.h"

#include <algorithm>
#include <cmath>

#include "core/argmax.h"
#include "core/bytes.h"
#include "core/quant_ref.h"
#include "core/top_candidates.h"
#include "models/rope_table.h"

namespace tern {
namespace {

// True when the plan wants the logits of every token, in order (decode steps, verifies).
bool all_rows_need_logits(const BatchPlan& plan) {
  if (static_cast<int>(plan.logit_rows.size()) != plan.n_tokens()) return false;
  for (size_t i = 0; i < plan.logit_rows.size(); ++i) {
    if (plan.logit_rows[i] != static_cast<int32_t>(i)) return false;
  }
  return true;
}

}  // namespace

Result<Tensor> DecoderModel::weight(const std::string& name, int64_t rows, int64_t cols) {
  const gguf::TensorInfo* info = file_->find_tensor(name);
  if (info == nullptr) return error("model: tensor '" + name + "' is missing");
  const int64_t file_cols = info->shape.empty() ? 0 : info->shape[0];
  const int64_t file_rows = info->numel() / std::max<int64_t>(file_cols, 1);
  if (file_cols != cols || file_rows != rows || (info->shape.size() > 2 && rows != 1 && info->shape[2] != 1)) {
    std::string shape;
    for (int64_t d : info->shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    return error("model: tensor '" + name + "' has shape [" + shape + "], expected [" + std::to_string(cols) + ", " +
                 std::to_string(rows) + "]");
  }
  Tensor host = Tensor::view(const_cast<uint8_t*>(info->data), info->type, rows, cols);
  std::unique_ptr<Buffer> owner;
  Tensor t;
  try {
    t = backend_->upload_weight(host, owner);
  } catch (const OutOfMemory& e) {
    return error("model: tensor '" + name + "' (" + human_bytes(info->n_bytes) + ", after " +
                 human_bytes(weight_bytes_) + " of weights): " + e.what());
  }
  if (owner) weight_buffers_.push_back(std::move(owner));
  weight_bytes_ += info->n_bytes;
  return t;
}

Result<Tensor> DecoderModel::vector(const std::string& name, int64_t n) {
  TERN_ASSIGN_OR_RETURN(Tensor t, weight(name, 1, n));
  if (t.dtype != DType::F32)
    return error("model: tensor '" + name + "' must be f32, found " + std::string(dtype_name(t.dtype)));
  return t;
}

Status DecoderModel::load_common(const ModelConfig& config, const ModelOptions& options) {
  config_ = config;
  n_ctx_ = options.n_ctx > 0 ? options.n_ctx : config.n_ctx_train;
  const ModelConfig& c = config_;
  TERN_ASSIGN_OR_RETURN(token_embd_, weight("token_embd.weight", c.n_vocab, c.n_embd));
  TERN_ASSIGN_OR_RETURN(output_norm_, vector("output_norm.weight", c.n_embd));
  if (c.tied_embeddings) {
    output_ = token_embd_;
  } else {
    TERN_ASSIGN_OR_RETURN(output_, weight("output.weight", c.n_vocab, c.n_embd));
  }

  std::vector<float> freq_factors;
  if (c.has_rope_freq_factors) {
    // Read on the host from the mapped file: the uploaded copy may live on a device.
    const gguf::TensorInfo* info = file_->find_tensor("rope_freqs.weight");
    if (info->type != DType::F32 || info->numel() != c.n_rot / 2)
      return error("model: tensor 'rope_freqs.weight' must be f32 with " + std::to_string(c.n_rot / 2) + " values");
    const auto* values = reinterpret_cast<const float*>(info->data);
    freq_factors.assign(values, values + c.n_rot / 2);
  }
  RopeTable table = make_rope_table(c, freq_factors, n_ctx_);
  rope_buffer_ = backend_->alloc(table.inv_freq.size() * sizeof(float));
  rope_.inv_freq = Tensor::view(rope_buffer_->data(), DType::F32, 1, c.n_rot / 2, backend_->device());
  backend_->copy_from_host(table.inv_freq.data(), rope_.inv_freq);
  rope_.n_rot = c.n_rot;
  rope_.mscale = table.mscale;

  attn_params_.n_heads = c.n_heads;
  attn_params_.n_kv_heads = c.n_kv_heads;
  attn_params_.head_dim = c.head_dim;
  attn_params_.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  return Status::ok();
}

void DecoderModel::ensure_workspace(int n_tokens, int n_logit_rows) {
  if (n_tokens <= ws_tokens_ && n_logit_rows <= ws_logit_rows_) return;
  const int want_tokens = std::max(n_tokens, ws_tokens_), want_logit_rows = std::max(n_logit_rows, ws_logit_rows_);
  const ModelConfig& c = config_;
  const int64_t n = want_tokens, m = std::max(want_logit_rows, 1);
  const int64_t q_cols = int64_t{c.n_heads} * c.head_dim, kv_cols = int64_t{c.n_kv_heads} * c.head_dim;
  struct Slot {
    Tensor* t;
    int64_t rows, cols;
  };
  const Slot slots[] = {{&ws_.x, n, c.n_embd},        {&ws_.norm, n, c.n_embd}, {&ws_.q, n, q_cols},
                        {&ws_.attn, n, q_cols},       {&ws_.k, n, kv_cols},     {&ws_.v, n, kv_cols},
                        {&ws_.gate, n, c.n_ff},       {&ws_.up, n, c.n_ff},     {&ws_.out, n, c.n_embd},
                        {&ws_.logit_hidden, m, c.n_embd}, {&ws_.logits, m, c.n_vocab}};
  size_t total = 0;
  for (const Slot& s : slots) total += (static_cast<size_t>(s.rows * s.cols) * 4 + 63) / 64 * 64;
  // The old workspace goes first (a device holds one at a time). An allocation that fails
  // (OutOfMemory, which the step's caller reports) leaves none, and the next step sizes its own.
  workspace_buffer_.reset();
  ws_tokens_ = ws_logit_rows_ = 0;
  last_logit_rows_ = 0;  // (the last forward's logit rows went with it)
  workspace_buffer_ = backend_->alloc(total);
  auto* base = static_cast<uint8_t*>(workspace_buffer_->data());
  for (const Slot& s : slots) {
    *s.t = Tensor::view(base, DType::F32, s.rows, s.cols, backend_->device());
    base += (static_cast<size_t>(s.rows * s.cols) * 4 + 63) / 64 * 64;
  }
  ws_tokens_ = want_tokens;
  ws_logit_rows_ = want_logit_rows;
}

void DecoderModel::forward(const BatchPlan& plan, KvPool& kv, const Outputs& outputs) {
  try {
    forward_step(plan, kv, outputs);
  } catch (const OutOfMemory&) {
    backend_->cancel_step();  // the step's work not yet run is dropped; the caller reports it
    throw;
  }
}

void DecoderModel::forward_step(const BatchPlan& plan, KvPool& kv, const Outputs& outputs) {
  const int n = plan.n_tokens();
  const int m = static_cast<int>(plan.logit_rows.size());
  TERN_CHECK(n > 0 && plan.positions.size() == static_cast<size_t>(n) && plan.kv_slots.size() == static_cast<size_t>(n));
  ensure_workspace(n, m);
  last_logit_rows_ = 0;
  Backend& b = *backend_;
  b.begin_step(plan);

  Tensor x = ws_.x.slice_rows(0, n);
  ops::embed(b, token_embd_, x);
  for (int l = 0; l < config_.n_layers; ++l) forward_layer(l, x, kv.layer(l));
  if (m == 0) return;

  // The final norm reads the rows that need logits and writes them to a tensor of their own, so
  // that a backend can fold it into the head product as that launch's prologue (the CUDA
  // backend does: one launch instead of a gather, a norm and the head). When every row needs
  // logits (a decode step, a verify) there is nothing to gather; otherwise the rows go to the
  // layers' norm buffer first, which is free once the last layer has run.
  Tensor hidden = ws_.logit_hidden.slice_rows(0, m);
  Tensor rows = x;
  if (!all_rows_need_logits(plan)) {
    rows = ws_.norm.slice_rows(0, m);
    ops::gather_logit_rows(b, x, rows);
  }
  ops::rms_norm(b, rows, output_norm_, config_.rms_eps, hidden);
  Tensor out = ws_.logits.slice_rows(0, m);
  ops::matmul(b, output_, hidden, out);
  last_logit_rows_ = m;
  const CandidateRows* cands = outputs.candidates;
  if (outputs.logits != nullptr) {
    b.copy_to_host(out, outputs.logits);
    for (int r = 0; r < m; ++r) {
      const float* row = outputs.logits + static_cast<size_t>(r) * config_.n_vocab;
      if (outputs.argmax != nullptr) outputs.argmax[r] = first_argmax(row, config_.n_vocab);
      if (cands != nullptr) top_candidates_row(row, config_.n_vocab, *cands, r);
    }
  } else if (cands != nullptr) {
    TERN_CHECK(cands->rows == m);
    ops::top_candidates(b, out, *cands);
    if (outputs.argmax != nullptr) {
      for (int r = 0; r < m; ++r) outputs.argmax[r] = candidates_argmax(*cands, r);
    }
  } else if (outputs.argmax != nullptr) {
    ops::argmax_rows(b, out, outputs.argmax);
  }
}

void DecoderModel::copy_logit_row(int row, float* dst) {
  TERN_CHECK_MSG(row >= 0 && row < last_logit_rows_, "copy_logit_row: the last forward has no such logit row");
  backend_->copy_to_host(ws_.logits.slice_rows(row, 1), dst);
}

}  // namespace tern
