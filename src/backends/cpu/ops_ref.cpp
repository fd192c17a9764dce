#include "backends/cpu/ops_ref.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/fp16.h"
#include "core/quant_ref.h"

namespace tern::cpu::ref {

void embed(const Tensor& table, const BatchPlan& plan, Tensor& out) {
  TERN_CHECK(out.rows == plan.n_tokens());
  for (int t = 0; t < plan.n_tokens(); ++t) {
    const int32_t id = plan.token_ids[t];
    TERN_CHECK_MSG(id >= 0 && id < table.rows, "token id out of the embedding table");
    TERN_CHECK(dequantize_row_ref(table.dtype, table.row(id), out.row<float>(t), table.cols));
  }
}

void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  const float* wv = w.f32();
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* xr = x.row<float>(r);
    float* yr = out.row<float>(r);
    double sum_sq = 0.0;
    for (int64_t c = 0; c < x.cols; ++c) sum_sq += static_cast<double>(xr[c]) * xr[c];
    const float inv = 1.0f / std::sqrt(static_cast<float>(sum_sq / static_cast<double>(x.cols)) + eps);
    for (int64_t c = 0; c < x.cols; ++c) yr[c] = xr[c] * inv * wv[c];
  }
}

void add_bias(Tensor& x, const Tensor& bias) {
  const float* bv = bias.f32();
  for (int64_t r = 0; r < x.rows; ++r) {
    float* xr = x.row<float>(r);
    for (int64_t c = 0; c < x.cols; ++c) xr[c] += bv[c];
  }
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  for (int64_t r = 0; r < a.rows; ++r) {
    const float* ar = a.row<float>(r);
    const float* br = b.row<float>(r);
    float* yr = out.row<float>(r);
    for (int64_t c = 0; c < a.cols; ++c) yr[c] = ar[c] + br[c];
  }
}

void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) {
  for (int64_t r = 0; r < gate.rows; ++r) {
    const float* g = gate.row<float>(r);
    const float* u = up.row<float>(r);
    float* y = out.row<float>(r);
    for (int64_t c = 0; c < gate.cols; ++c) y[c] = g[c] / (1.0f + std::exp(-g[c])) * u[c];
  }
}

void rope(Tensor& x, int n_heads, int head_dim, const RopeParams& rope, const BatchPlan& plan) {
  const int half = rope.n_rot / 2;
  const float* inv_freq = rope.inv_freq.f32();
  std::vector<float> cos_v(half), sin_v(half);
  for (int64_t t = 0; t < x.rows; ++t) {
    const float pos = static_cast<float>(plan.positions[t]);
    for (int i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];
      cos_v[i] = std::cos(angle) * rope.mscale;
      sin_v[i] = std::sin(angle) * rope.mscale;
    }
    for (int h = 0; h < n_heads; ++h) {
      float* v = x.row<float>(t) + static_cast<int64_t>(h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const int i0 = rope.neox ? i : 2 * i;
        const int i1 = rope.neox ? i + half : 2 * i + 1;
        const float x0 = v[i0], x1 = v[i1];
        v[i0] = x0 * cos_v[i] - x1 * sin_v[i];
        v[i1] = x0 * sin_v[i] + x1 * cos_v[i];
      }
    }
  }
}

namespace {
void store_row(const float* src, Tensor& cache, int64_t slot) {
  if (cache.dtype == DType::F32) {
    float* dst = cache.row<float>(slot);
    for (int64_t c = 0; c < cache.cols; ++c) dst[c] = src[c];
  } else {
    TERN_CHECK(cache.dtype == DType::F16);
    uint16_t* dst = cache.row<uint16_t>(slot);
    for (int64_t c = 0; c < cache.cols; ++c) dst[c] = f32_to_fp16(src[c]);
  }
}
}  // namespace

void load_kv(const Tensor& cache, int64_t slot, int64_t col, int64_t n, float* dst) {
  if (cache.dtype == DType::F32) {
    const float* src = cache.row<float>(slot) + col;
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  } else {
    const uint16_t* src = cache.row<uint16_t>(slot) + col;
    for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(src[i]);
  }
}

void kv_write(const Tensor& k, const Tensor& v, KvLayerView& kv, const BatchPlan& plan) {
  for (int64_t t = 0; t < k.rows; ++t) {
    const int64_t slot = plan.kv_slots[t];
    TERN_CHECK(slot >= 0 && slot < kv.k.rows);
    store_row(k.row<float>(t), kv.k, slot);
    store_row(v.row<float>(t), kv.v, slot);
  }
}

void attention(const Tensor& q, const KvLayerView& kv, const AttentionParams& p, const BatchPlan& plan, Tensor& out) {
  const int group = p.n_heads / p.n_kv_heads;
  std::vector<float> scores, krow(p.head_dim), vrow(p.head_dim);
  for (int64_t t = 0; t < q.rows; ++t) {
    const int s = plan.seq_index[t];
    const int32_t* blocks = plan.block_ids.data() + plan.block_offsets[s];
    const int n_ctx = plan.positions[t] + 1;
    const int first = p.sliding_window > 0 ? std::max(0, n_ctx - p.sliding_window) : 0;
    scores.assign(n_ctx, 0.0f);
    for (int h = 0; h < p.n_heads; ++h) {
      const float* qh = q.row<float>(t) + static_cast<int64_t>(h) * p.head_dim;
      const int64_t kv_col = static_cast<int64_t>(h / group) * p.head_dim;
      float max_score = -INFINITY;
      for (int j = first; j < n_ctx; ++j) {
        const int64_t slot = static_cast<int64_t>(blocks[j / kv.block_tokens]) * kv.block_tokens + j % kv.block_tokens;
        load_kv(kv.k, slot, kv_col, p.head_dim, krow.data());
        float dot = 0.0f;
        for (int d = 0; d < p.head_dim; ++d) dot += qh[d] * krow[d];
        float score = dot * p.scale;
        if (p.logit_softcap > 0.0f) score = p.logit_softcap * std::tanh(score / p.logit_softcap);
        scores[j] = score;
        max_score = std::max(max_score, score);
      }
      float denom = 0.0f;
      for (int j = first; j < n_ctx; ++j) {
        scores[j] = std::exp(scores[j] - max_score);
        denom += scores[j];
      }
      float* oh = out.row<float>(t) + static_cast<int64_t>(h) * p.head_dim;
      for (int d = 0; d < p.head_dim; ++d) oh[d] = 0.0f;
      for (int j = first; j < n_ctx; ++j) {
        const int64_t slot = static_cast<int64_t>(blocks[j / kv.block_tokens]) * kv.block_tokens + j % kv.block_tokens;
        load_kv(kv.v, slot, kv_col, p.head_dim, vrow.data());
        const float w = scores[j] / denom;
        for (int d = 0; d < p.head_dim; ++d) oh[d] += w * vrow[d];
      }
    }
  }
}

void gather_logit_rows(const Tensor& x, const BatchPlan& plan, Tensor& out) {
  TERN_CHECK(out.rows == static_cast<int64_t>(plan.logit_rows.size()));
  for (size_t i = 0; i < plan.logit_rows.size(); ++i) {
    const float* src = x.row<float>(plan.logit_rows[i]);
    float* dst = out.row<float>(static_cast<int64_t>(i));
    for (int64_t c = 0; c < x.cols; ++c) dst[c] = src[c];
  }
}

}  // namespace tern::cpu::ref
