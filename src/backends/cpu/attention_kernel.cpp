// The portable attention unit kernel (baseline x86-64) and the per-ISA dispatch. It follows the
// per-query sequence of attention_kernel.h with plain loops; the AVX-512 kernel computes the same
// quantities with 16-lane vectors (so the two may differ in the last bits, like the matmul levels).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/attention_kernel.h"
#include "core/check.h"
#include "core/fp16.h"

namespace tern::cpu::detail {
namespace {

int64_t round_up16(int64_t n) { return (n + kKeyTile - 1) / kKeyTile * kKeyTile; }

// Converts `n` values of the K or V row of position j (columns kv_col ..) to floats.
void load_row(const Tensor& cache, const int32_t* blocks, int block_tokens, int j, int64_t kv_col, int n, float* dst) {
  const int64_t slot = static_cast<int64_t>(blocks[j / block_tokens]) * block_tokens + j % block_tokens;
  if (cache.dtype == DType::F32) {
    std::memcpy(dst, cache.row<float>(slot) + kv_col, static_cast<size_t>(n) * sizeof(float));
  } else {
    const uint16_t* src = cache.row<uint16_t>(slot) + kv_col;
    for (int i = 0; i < n; ++i) dst[i] = fp16_to_f32(src[i]);
  }
}

}  // namespace

int64_t unit_scratch_floats(int head_dim, int group, int max_queries, int kv_chunk) {
  const int64_t keys = round_up16(kv_chunk) + kKeyTile;  // a chunk's keys, tile-aligned
  const int64_t hd_pad = round_up16(head_dim);
  // K (transposed in the AVX-512 kernel) and V, converted; then the scores of every query vector.
  return 2 * keys * hd_pad + static_cast<int64_t>(max_queries) * group * keys;
}

void attend_unit_portable(const AttentionUnit& u) {
  const KvLayerView& kv = *u.kv;
  const int hd = u.head_dim, n_keys = u.key_hi - u.key_lo;
  float* k = u.scratch;                                   // [n_keys, hd]
  float* v = k + static_cast<int64_t>(n_keys) * hd;       // [n_keys, hd]
  float* scores = v + static_cast<int64_t>(n_keys) * hd;  // [n_keys] (one query vector at a time)
  for (int j = u.key_lo; j < u.key_hi; ++j) {
    load_row(kv.k, u.blocks, kv.block_tokens, j, u.kv_col, hd, k + static_cast<int64_t>(j - u.key_lo) * hd);
    load_row(kv.v, u.blocks, kv.block_tokens, j, u.kv_col, hd, v + static_cast<int64_t>(j - u.key_lo) * hd);
  }
  for (int i = 0; i < u.n_queries; ++i) {
    const UnitQuery& uq = u.queries[i];
    for (int h = 0; h < u.group; ++h) {
      const float* qh = uq.q + static_cast<int64_t>(h) * hd;
      float mx = -INFINITY;
      for (int j = uq.j0; j < uq.j1; ++j) {
        const float* kj = k + static_cast<int64_t>(j - u.key_lo) * hd;
        float dot = 0.0f;
        for (int d = 0; d < hd; ++d) dot += qh[d] * kj[d];
        float s = dot * u.scale;
        if (u.softcap > 0.0f) s = u.softcap * std::tanh(s / u.softcap);
        scores[j - u.key_lo] = s;
        mx = std::max(mx, s);
      }
      float sum = 0.0f;
      for (int j = uq.j0; j < uq.j1; ++j) {
        float& s = scores[j - u.key_lo];
        s = std::exp(s - mx);
        sum += s;
      }
      float* acc = uq.partial + 2 * u.group + static_cast<int64_t>(h) * hd;
      std::fill(acc, acc + hd, 0.0f);
      for (int j = uq.j0; j < uq.j1; ++j) {
        const float pj = scores[j - u.key_lo];
        const float* vj = v + static_cast<int64_t>(j - u.key_lo) * hd;
        for (int d = 0; d < hd; ++d) acc[d] += pj * vj[d];
      }
      uq.partial[h] = mx;
      uq.partial[u.group + h] = sum;
    }
  }
}

AttendUnitFn attend_unit_for(Isa isa) {
  return isa == Isa::kAvx512 ? attend_unit_avx512 : attend_unit_portable;
}

}  // namespace tern::cpu::detail
