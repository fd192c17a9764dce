// The GEMV fusion peephole (kernels.h GemvFusion), run on a step's recorded ops as the backend
// records them: which RMSNorm or SwiGLU before a product becomes its prologue, and which residual
// add or SwiGLU after it becomes its epilogue. A fold is taken only where the fused launch then
// reads nothing that it or another op writes (address-range checks below), so fused and separate
// launches give the same bits (tests/gpu GpuFusion). The caller counts the folds taken.
#pragma once

#include <cstdint>

#include "backends/cuda/kernels.h"
#include "backends/cuda/step_queue.h"
#include "core/tensor.h"

namespace tern::cuda {

inline int64_t f32_stride(const Tensor& t) { return static_cast<int64_t>(t.row_stride / sizeof(float)); }

// Rows of floats a launch reads or writes, for the no-overlap checks.
struct FloatRows {
  const float* p;
  int64_t stride, cols, rows;
};
// True when the address ranges the two cover do not overlap.
inline bool disjoint(const FloatRows& a, const FloatRows& b) {
  if (a.rows == 0 || b.rows == 0) return true;
  const auto begin_a = reinterpret_cast<uintptr_t>(a.p), begin_b = reinterpret_cast<uintptr_t>(b.p);
  const uintptr_t end_a = begin_a + sizeof(float) * static_cast<uintptr_t>((a.rows - 1) * a.stride + a.cols);
  const uintptr_t end_b = begin_b + sizeof(float) * static_cast<uintptr_t>((b.rows - 1) * b.stride + b.cols);
  return end_a <= begin_b || end_b <= begin_a;
}
// True when the float rows [a + r * a_stride, + a_cols) and [b + r * b_stride, + b_cols),
// r < rows, lie in address ranges that do not overlap.
inline bool disjoint_rows(const float* a, int64_t a_stride, int64_t a_cols, const float* b, int64_t b_stride,
                          int64_t b_cols, int64_t rows) {
  return disjoint(FloatRows{a, a_stride, a_cols, rows}, FloatRows{b, b_stride, b_cols, rows});
}
inline FloatRows out_rows(const Tensor& out, int64_t n) { return {out.f32(), out.cols, out.cols, n}; }

// True when `rows`, written by a launch of a, overlaps neither a's fused prologue inputs nor x.
bool prologue_untouched(const MatmulArgs& a, const FloatRows& rows);

// The prologue for a new product of x (w, out), taken from the queue: the RMSNorm record right
// before it that produced x (popped), the SwiGLU record that did (popped; only with
// swiglu_done_blocks, the zeroed counter its launch needs, i.e. CudaBackendOptions::fuse_swiglu),
// or the RMSNorm the previous product of the same x carried. prologue kNone: nothing to fold.
GemvFusion take_gemv_prologue(StepQueue& queue, const Tensor& w, const Tensor& x, const Tensor& out,
                              int* swiglu_done_blocks);
// add(a, b, out) with out one of a / b, right after the one-matrix product that wrote the other:
// folded into that product's launch as its residual epilogue. True when taken.
bool take_residual_add(StepQueue& queue, const Tensor& a, const Tensor& b, const Tensor& out);
// swiglu(gate, up, out) right after the two-matrix product that wrote gate and up: folded into
// its launch as the SwiGLU epilogue. any_kernel (CudaBackendOptions::fuse_swiglu_epilogue):
// every GEMV kernel; otherwise only the streamed float kernel at n = 1. True when taken.
bool take_swiglu_epilogue(StepQueue& queue, const Tensor& gate, const Tensor& up, const Tensor& out, bool any_kernel);

}  // namespace tern::cuda
