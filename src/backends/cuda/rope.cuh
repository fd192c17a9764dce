// The rotation of one rope pair, shared by the rope kernel (elementwise.cu) and the fused decode
// attention (attention_fused.cuh), so a rotated q or k element has the same bits whichever
// launch computed it. Explicit-rounding intrinsics: nvcc never contracts them into FMAs.
#pragma once

#include <cuda_runtime.h>

namespace tern::cuda {

// Pair i (of n_rot / 2) of a head: the dimensions it rotates (NeoX: i and i + half; else 2 i and
// 2 i + 1).
__device__ __forceinline__ int rope_i0(int i, int half, bool neox) { return neox ? i : 2 * i; }
__device__ __forceinline__ int rope_i1(int i, int half, bool neox) { return neox ? i + half : 2 * i + 1; }

// The rotation of pair i at a position, scaled by mscale: (c, s). It depends on the position and
// the model's frequencies only, so the fused decode attention computes it before its PDL wait.
__device__ __forceinline__ void rope_factors(int position, float inv_freq_i, float mscale, float& c, float& s) {
  const float angle = __fmul_rn(static_cast<float>(position), inv_freq_i);
  sincosf(angle, &s, &c);
  c = __fmul_rn(c, mscale);
  s = __fmul_rn(s, mscale);
}
// (x0, x1) rotated by the factors (c, s).
__device__ __forceinline__ void rope_apply(float c, float s, float x0, float x1, float& y0, float& y1) {
  y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
  y1 = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

// (x0, x1) of pair i rotated by position * inv_freq[i], scaled by mscale.
__device__ __forceinline__ void rope_rotate(int position, float inv_freq_i, float mscale, float x0, float x1, float& y0,
                                            float& y1) {
  float c, s;
  rope_factors(position, inv_freq_i, mscale, c, s);
  rope_apply(c, s, x0, x1, y0, y1);
}

}  // namespace tern::cuda
