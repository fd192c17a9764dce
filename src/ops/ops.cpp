#include "ops/ops.h"

namespace tern::ops {
namespace {
bool is_f32(const Tensor& t) { return t.dtype == DType::F32; }
bool same_shape(const Tensor& a, const Tensor& b) { return a.rows == b.rows && a.cols == b.cols; }
}  // namespace

void embed(Backend& b, const Tensor& table, Tensor& out) {
  TERN_CHECK(is_f32(out) && out.cols == table.cols);
  b.embed(table, out);
}

void rms_norm(Backend& b, const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  TERN_CHECK(is_f32(x) && is_f32(w) && is_f32(out));
  TERN_CHECK(w.rows == 1 && w.cols == x.cols && same_shape(x, out));
  b.rms_norm(x, w, eps, out);
}

void matmul(Backend& b, const Tensor& w, const Tensor& x, Tensor& out) {
  TERN_CHECK(is_f32(x) && is_f32(out));
  TERN_CHECK(x.cols == w.cols && out.rows == x.rows && out.cols == w.rows);
  TERN_CHECK(x.contiguous() && out.contiguous());
  b.matmul(w, x, out);
}

void matmul_group(Backend& b, const Tensor& x, std::initializer_list<const Tensor*> ws, std::initializer_list<Tensor*> outs) {
  TERN_CHECK(ws.size() == outs.size() && ws.size() >= 1 && ws.size() <= 8);
  TERN_CHECK(is_f32(x) && x.contiguous());
  for (size_t i = 0; i < ws.size(); ++i) {
    const Tensor& w = *ws.begin()[i];
    const Tensor& out = *outs.begin()[i];
    TERN_CHECK(is_f32(out) && out.contiguous());
    TERN_CHECK(x.cols == w.cols && out.rows == x.rows && out.cols == w.rows);
  }
  b.matmul_group(ws.begin(), outs.begin(), static_cast<int>(ws.size()), x);
}

void add_bias(Backend& b, Tensor& x, const Tensor& bias) {
  TERN_CHECK(is_f32(x) && is_f32(bias) && bias.rows == 1 && bias.cols == x.cols);
  b.add_bias(x, bias);
}

void add(Backend& b, const Tensor& a, const Tensor& x, Tensor& out) {
  TERN_CHECK(is_f32(a) && is_f32(x) && is_f32(out) && same_shape(a, x) && same_shape(a, out));
  b.add(a, x, out);
}

void swiglu(Backend& b, const Tensor& gate, const Tensor& up, Tensor& out) {
  TERN_CHECK(is_f32(gate) && is_f32(up) && is_f32(out) && same_shape(gate, up) && same_shape(gate, out));
  b.swiglu(gate, up, out);
}

void rope(Backend& b, Tensor& x, int n_heads, int head_dim, const RopeParams& rope) {
  TERN_CHECK(is_f32(x) && x.cols == static_cast<int64_t>(n_heads) * head_dim);
  TERN_CHECK(rope.n_rot > 0 && rope.n_rot <= head_dim && rope.n_rot % 2 == 0);
  TERN_CHECK(rope.inv_freq.cols == rope.n_rot / 2);
  b.rope(x, n_heads, head_dim, rope);
}

void kv_write(Backend& b, const Tensor& k, const Tensor& v, KvLayerView& kv) {
  TERN_CHECK(is_f32(k) && is_f32(v) && same_shape(k, v));
  TERN_CHECK(k.cols == kv.k.cols && v.cols == kv.v.cols && kv.k.dtype == kv.v.dtype);
  b.kv_write(k, v, kv);
}

void attention(Backend& b, const Tensor& q, const KvLayerView& kv, const AttentionParams& p, Tensor& out) {
  TERN_CHECK(is_f32(q) && is_f32(out) && same_shape(q, out));
  TERN_CHECK(p.n_heads > 0 && p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0);
  TERN_CHECK(q.cols == static_cast<int64_t>(p.n_heads) * p.head_dim);
  TERN_CHECK(kv.k.cols == static_cast<int64_t>(p.n_kv_heads) * p.head_dim);
  b.attention(q, kv, p, out);
}

void gather_logit_rows(Backend& b, const Tensor& x, Tensor& out) {
  TERN_CHECK(is_f32(x) && is_f32(out) && x.cols == out.cols);
  b.gather_logit_rows(x, out);
}

void argmax_rows(Backend& b, const Tensor& x, int32_t* host_ids) {
  TERN_CHECK(is_f32(x) && x.cols > 0 && host_ids != nullptr);
  b.argmax_rows(x, host_ids);
}

void top_candidates(Backend& b, const Tensor& x, const CandidateRows& out) {
  TERN_CHECK(is_f32(x) && x.cols > 0 && out.rows == x.rows);
  TERN_CHECK(out.count >= 1 && out.count <= kMaxCandidates && out.count <= x.cols);
  TERN_CHECK(out.ids != nullptr && out.logits != nullptr && out.flags != nullptr);
  TERN_CHECK((out.exp_sums == nullptr) == (out.temperatures == nullptr));
  b.top_candidates(x, out);
}

}  // namespace tern::ops
