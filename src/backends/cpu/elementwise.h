// Fast row-wise ops of the CPU backend: RMSNorm, SwiGLU, residual add, rotary embedding with a
// per-step cos/sin table. Each output row is a fixed sequence of float operations on its own
// input row (batch invariant); the AVX-512 forms differ from the reference (ops_ref) only in
// summation order (rms_norm) and in exp's last bits (swiglu).
#pragma once

#include <vector>

#include "backends/cpu/cpu_features.h"
#include "ops/backend.h"

namespace tern::cpu {

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w. out may alias x.
void rms_norm_fast(Isa isa, const Tensor& x, const Tensor& w, float eps, Tensor& out);
// out = silu(gate) * up. out may alias gate.
void swiglu_fast(Isa isa, const Tensor& gate, const Tensor& up, Tensor& out);
// out = a + b. out may alias a or b.
void add_fast(Isa isa, const Tensor& a, const Tensor& b, Tensor& out);

// cos and sin of every (token, frequency) of one step, times mscale: built by the first rope op
// of a step and reused by the others (a decode step has two per layer, all with the same
// frequencies). Values are those ops_ref::rope computes, so the rotation matches it bitwise.
class RopeTableCache {
 public:
  void invalidate() { valid_ = false; }
  // The table for `rope` at `positions` (rebuilt if the frequencies differ from the cached ones).
  // Layout: cos at [t * n_rot / 2 + i], sin likewise.
  void prepare(const RopeParams& rope, const std::vector<int32_t>& positions);
  const float* cos() const { return cos_.data(); }
  const float* sin() const { return sin_.data(); }

 private:
  bool valid_ = false;
  const void* inv_freq_ = nullptr;
  float mscale_ = 0.0f;
  int n_rot_ = 0;
  std::vector<float> cos_, sin_;
};

// Rotates x [n_tokens, n_heads * head_dim] in place with the prepared table.
void rope_with_table(Tensor& x, int n_heads, int head_dim, const RopeParams& rope, const RopeTableCache& table);

namespace detail {
void rms_norm_row_avx512(const float* x, const float* w, float eps, int64_t cols, float* out);
void swiglu_row_avx512(const float* gate, const float* up, int64_t cols, float* out);
void add_row_avx512(const float* a, const float* b, int64_t cols, float* out);
}  // namespace detail

}  // namespace tern::cpu
