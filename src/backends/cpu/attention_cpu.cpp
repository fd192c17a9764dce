#include "backends/cpu/attention_cpu.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/kv_row.h"

namespace tern::cpu {
namespace {

struct UnitShape {
  int group;     // q heads per kv head
  int head_dim;
  int64_t floats() const { return 2 * group + static_cast<int64_t>(group) * head_dim; }
};

// One unit: q heads [g*group, (g+1)*group) of token t over positions [j0, j1).
void attend_chunk(const Tensor& q, const KvLayerView& kv, const AttentionParams& p, const int32_t* blocks, int64_t t,
                  int g, int j0, int j1, const UnitShape& u, float* partial, float* scores) {
  const int hd = p.head_dim;
  const int64_t kv_col = static_cast<int64_t>(g) * hd;
  float* m = partial;
  float* l = partial + u.group;
  float* acc = partial + 2 * u.group;
  const int n = j1 - j0;
  const KvRowOps& ops = kv_row_ops(kv.k.dtype);
  // Scores for every q head of the group: [group, n].
  for (int j = j0; j < j1; ++j) {
    const int64_t slot = static_cast<int64_t>(blocks[j / kv.block_tokens]) * kv.block_tokens + j % kv.block_tokens;
    const void* krow = static_cast<const uint8_t*>(kv.k.row(slot)) + kv_col * (kv.k.dtype == DType::F16 ? 2 : 4);
    for (int h = 0; h < u.group; ++h) {
      const float* qh = q.row<float>(t) + static_cast<int64_t>(g * u.group + h) * hd;
      float s = ops.dot(qh, krow, hd) * p.scale;
      if (p.logit_softcap > 0.0f) s = p.logit_softcap * std::tanh(s / p.logit_softcap);
      scores[h * n + (j - j0)] = s;
    }
  }
  for (int h = 0; h < u.group; ++h) {
    float* sh = scores + h * n;
    float mx = -INFINITY;
    for (int i = 0; i < n; ++i) mx = std::max(mx, sh[i]);
    float sum = 0.0f;
    for (int i = 0; i < n; ++i) {
      sh[i] = std::exp(sh[i] - mx);
      sum += sh[i];
    }
    m[h] = mx;
    l[h] = sum;
    std::fill(acc + h * hd, acc + (h + 1) * hd, 0.0f);
  }
  for (int j = j0; j < j1; ++j) {
    const int64_t slot = static_cast<int64_t>(blocks[j / kv.block_tokens]) * kv.block_tokens + j % kv.block_tokens;
    const void* vrow = static_cast<const uint8_t*>(kv.v.row(slot)) + kv_col * (kv.v.dtype == DType::F16 ? 2 : 4);
    for (int h = 0; h < u.group; ++h) ops.axpy(scores[h * n + (j - j0)], vrow, acc + h * hd, hd);
  }
}

}  // namespace

void attention_fast(const Tensor& q, const KvLayerView& kv, const AttentionParams& p, const BatchPlan& plan,
                    Tensor& out, ThreadPool& pool, AttentionScratch& scratch) {
  const int group = p.n_heads / p.n_kv_heads;
  const UnitShape u{group, p.head_dim};
  const int64_t n_tokens = q.rows;
  // Units are enumerated (token, kv head, chunk) in order.
  scratch.unit_begin.resize(static_cast<size_t>(n_tokens * p.n_kv_heads + 1));
  int64_t n_units = 0;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int n_ctx = plan.positions[t] + 1;
    const int first = p.sliding_window > 0 ? std::max(0, n_ctx - p.sliding_window) : 0;
    const int first_chunk = first / kAttentionChunkTokens;
    const int n_chunks = (n_ctx - 1) / kAttentionChunkTokens + 1 - first_chunk;
    for (int g = 0; g < p.n_kv_heads; ++g) {
      scratch.unit_begin[t * p.n_kv_heads + g] = n_units;
      n_units += n_chunks;
    }
  }
  scratch.unit_begin.back() = n_units;
  scratch.partial.resize(static_cast<size_t>(n_units * u.floats()));

  scratch.thread_scores.resize(pool.n_threads());
  for (auto& s : scratch.thread_scores) s.resize(static_cast<size_t>(group) * kAttentionChunkTokens);
  pool.run([&](int thread) {
    float* scores = scratch.thread_scores[thread].data();
    const int nt = pool.n_threads();
    const int64_t b = n_units * thread / nt, e = n_units * (thread + 1) / nt;
    // Walk the (token, kv head) pairs whose units intersect [b, e).
    int64_t pair = std::upper_bound(scratch.unit_begin.begin(), scratch.unit_begin.end() - 1, b) -
                   scratch.unit_begin.begin() - 1;
    for (int64_t unit = b; unit < e; ++unit) {
      while (scratch.unit_begin[pair + 1] <= unit) ++pair;
      const int64_t t = pair / p.n_kv_heads;
      const int g = static_cast<int>(pair % p.n_kv_heads);
      const int n_ctx = plan.positions[t] + 1;
      const int first = p.sliding_window > 0 ? std::max(0, n_ctx - p.sliding_window) : 0;
      const int chunk = first / kAttentionChunkTokens + static_cast<int>(unit - scratch.unit_begin[pair]);
      const int j0 = std::max(first, chunk * kAttentionChunkTokens);
      const int j1 = std::min(n_ctx, (chunk + 1) * kAttentionChunkTokens);
      const int32_t* blocks = plan.block_ids.data() + plan.block_offsets[plan.seq_index[t]];
      attend_chunk(q, kv, p, blocks, t, g, j0, j1, u, scratch.partial.data() + unit * u.floats(), scores);
    }
  });

  // Merge partials of each (token, kv head) in chunk order. Cheap: done on the calling thread.
  const int hd = p.head_dim;
  for (int64_t pair = 0; pair < n_tokens * p.n_kv_heads; ++pair) {
    const int64_t t = pair / p.n_kv_heads;
    const int g = static_cast<int>(pair % p.n_kv_heads);
    const int64_t u0 = scratch.unit_begin[pair], u1 = scratch.unit_begin[pair + 1];
    for (int h = 0; h < group; ++h) {
      float mx = -INFINITY;
      for (int64_t un = u0; un < u1; ++un) mx = std::max(mx, scratch.partial[un * u.floats() + h]);
      float denom = 0.0f;
      float* o = out.row<float>(t) + static_cast<int64_t>(g * group + h) * hd;
      std::fill(o, o + hd, 0.0f);
      for (int64_t un = u0; un < u1; ++un) {
        const float* part = scratch.partial.data() + un * u.floats();
        const float w = std::exp(part[h] - mx);
        denom += part[group + h] * w;
        const float* acc = part + 2 * group + static_cast<int64_t>(h) * hd;
        for (int d = 0; d < hd; ++d) o[d] += acc[d] * w;
      }
      const float inv = 1.0f / denom;
      for (int d = 0; d < hd; ++d) o[d] *= inv;
    }
  }
}

}  // namespace tern::cpu
