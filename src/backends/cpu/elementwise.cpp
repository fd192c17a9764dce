// Row loops and dispatch of the fast row-wise ops; below AVX-512 they are the reference ops.
#include "backends/cpu/elementwise.h"

#include <cmath>

#include "backends/cpu/ops_ref.h"
#include "core/check.h"

namespace tern::cpu {

void rms_norm_fast(Isa isa, const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  if (isa != Isa::kAvx512) return ref::rms_norm(x, w, eps, out);
  for (int64_t r = 0; r < x.rows; ++r) detail::rms_norm_row_avx512(x.row<float>(r), w.f32(), eps, x.cols, out.row<float>(r));
}

void swiglu_fast(Isa isa, const Tensor& gate, const Tensor& up, Tensor& out) {
  if (isa != Isa::kAvx512) return ref::swiglu(gate, up, out);
  for (int64_t r = 0; r < gate.rows; ++r)
    detail::swiglu_row_avx512(gate.row<float>(r), up.row<float>(r), gate.cols, out.row<float>(r));
}

void add_fast(Isa isa, const Tensor& a, const Tensor& b, Tensor& out) {
  if (isa != Isa::kAvx512) return ref::add(a, b, out);
  for (int64_t r = 0; r < a.rows; ++r) detail::add_row_avx512(a.row<float>(r), b.row<float>(r), a.cols, out.row<float>(r));
}

void RopeTableCache::prepare(const RopeParams& rope, const std::vector<int32_t>& positions) {
  if (valid_ && inv_freq_ == rope.inv_freq.data && mscale_ == rope.mscale && n_rot_ == rope.n_rot) return;
  const int half = rope.n_rot / 2;
  const float* inv_freq = rope.inv_freq.f32();
  cos_.resize(positions.size() * half);
  sin_.resize(positions.size() * half);
  for (size_t t = 0; t < positions.size(); ++t) {
    const float pos = static_cast<float>(positions[t]);
    for (int i = 0; i < half; ++i) {
      // The reference's expressions exactly (ops_ref.cpp rope), so the rotation matches it.
      const float angle = pos * inv_freq[i];
      cos_[t * half + i] = std::cos(angle) * rope.mscale;
      sin_[t * half + i] = std::sin(angle) * rope.mscale;
    }
  }
  valid_ = true;
  inv_freq_ = rope.inv_freq.data;
  mscale_ = rope.mscale;
  n_rot_ = rope.n_rot;
}

void rope_with_table(Tensor& x, int n_heads, int head_dim, const RopeParams& rope, const RopeTableCache& table) {
  const int half = rope.n_rot / 2;
  for (int64_t t = 0; t < x.rows; ++t) {
    const float* c = table.cos() + t * half;
    const float* s = table.sin() + t * half;
    for (int h = 0; h < n_heads; ++h) {
      float* v = x.row<float>(t) + static_cast<int64_t>(h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const int i0 = rope.neox ? i : 2 * i;
        const int i1 = rope.neox ? i + half : 2 * i + 1;
        const float x0 = v[i0], x1 = v[i1];
        v[i0] = x0 * c[i] - x1 * s[i];
        v[i1] = x0 * s[i] + x1 * c[i];
      }
    }
  }
}

}  // namespace tern::cpu
