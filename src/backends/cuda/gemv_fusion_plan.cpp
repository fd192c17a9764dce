// The GEMV fusion peephole (gemv_fusion_plan.h).
#include "backends/cuda/gemv_fusion_plan.h"

#include <vector>

#include "backends/cuda/gemv.h"

namespace tern::cuda {
namespace {

FloatRows x_rows(const MatmulArgs& a) { return {a.x, a.cols, a.cols, a.n}; }
// What a fused prologue reads besides x: the norm's input and weight, or the SwiGLU's gate and up.
std::vector<FloatRows> prologue_reads(const GemvFusion& f, int64_t n, int64_t cols) {
  if (f.prologue == GemvPrologue::kRmsNorm) return {{f.src, f.src_stride, cols, n}, {f.src2, cols, cols, 1}};
  if (f.prologue == GemvPrologue::kSwiglu) return {{f.src, f.src_stride, cols, n}, {f.src2, f.src2_stride, cols, n}};
  return {};
}

}  // namespace

bool prologue_untouched(const MatmulArgs& a, const FloatRows& rows) {
  if (a.fuse.prologue == GemvPrologue::kNone) return true;
  if (!disjoint(rows, x_rows(a))) return false;
  for (const FloatRows& r : prologue_reads(a.fuse, a.n, a.cols)) {
    if (!disjoint(rows, r)) return false;
  }
  return true;
}

// The prologue of a new product of x: the RMSNorm or SwiGLU record right before it that
// produced x (popped), or the RMSNorm that the previous product of the same x carried (q/k/v
// split into two launches by weight type). Only where the launch reads nothing the op writes
// except x itself, and its output y touches none of the op's inputs.
GemvFusion take_gemv_prologue(StepQueue& queue, const Tensor& w, const Tensor& x, const Tensor& out,
                              int* swiglu_done_blocks) {
  GemvFusion f{};
  const int64_t n = x.rows, cols = w.cols;
  const FloatRows xr{x.f32(), cols, cols, n}, yr = out_rows(out, n);
  if (x.cols != cols || f32_stride(x) != cols || !disjoint(xr, yr)) return f;
  if (const RmsNormArgs* norm = queue.last_if<RmsNormArgs>(OpKind::kRmsNorm);
      norm != nullptr && norm->add_a == nullptr && norm->out == x.f32() && norm->out_stride == cols &&
      norm->rows == n && norm->cols == cols) {
    const FloatRows src{norm->x, norm->x_stride, cols, n}, weight{norm->w, cols, cols, 1};
    if (disjoint(src, xr) && disjoint(weight, xr) && disjoint(src, yr) && disjoint(weight, yr)) {
      f.prologue = GemvPrologue::kRmsNorm;
      f.write_x = 1;
      f.src = norm->x;
      f.src_stride = norm->x_stride;
      f.src2 = norm->w;
      f.eps = norm->eps;
      queue.pop();
    }
    return f;
  }
  if (const ElementwiseArgs* sw = queue.last_if<ElementwiseArgs>(OpKind::kElementwise);
      swiglu_done_blocks != nullptr && sw != nullptr && sw->op == ElementwiseOp::kSwiglu && sw->out == x.f32() &&
      sw->out_stride == cols && sw->rows == n && sw->cols == cols && n <= kGemvMaxXRows) {
    // The output may be the gate or up itself (in place): the launch stores it after every
    // block has read its inputs (gemv_fusion.cuh fused_store_after_readers).
    const FloatRows gate{sw->a, sw->a_stride, cols, n}, up{sw->b, sw->b_stride, cols, n};
    const bool gate_ok = (sw->a == sw->out && sw->a_stride == cols) || disjoint(gate, xr);
    const bool up_ok = (sw->b == sw->out && sw->b_stride == cols) || disjoint(up, xr);
    if (gate_ok && up_ok && disjoint(gate, yr) && disjoint(up, yr)) {
      f.prologue = GemvPrologue::kSwiglu;
      f.write_x = 1;
      f.src = sw->a;
      f.src_stride = sw->a_stride;
      f.src2 = sw->b;
      f.src2_stride = sw->b_stride;
      f.done_blocks = swiglu_done_blocks;
      queue.pop();
    }
    return f;
  }
  if (const MatmulArgs* prev = queue.last_if<MatmulArgs>(OpKind::kMatmul);
      prev != nullptr && prev->fuse.prologue == GemvPrologue::kRmsNorm && prev->x == x.f32() && prev->n == n &&
      prev->cols == cols) {
    // The previous launch completes before this one starts; its outputs must leave the norm's
    // inputs as they were.
    bool untouched = prologue_untouched(*prev, yr);
    for (int m = 0; m < prev->n_mats; ++m) {
      const FloatRows ym{prev->y[m], prev->rows[m], prev->rows[m], n};
      for (const FloatRows& r : prologue_reads(prev->fuse, n, cols)) untouched = untouched && disjoint(ym, r);
    }
    if (prev->fuse.glu_out != nullptr) {
      const FloatRows glu{prev->fuse.glu_out, prev->fuse.glu_out_stride, prev->rows[0], n};
      for (const FloatRows& r : prologue_reads(prev->fuse, n, cols)) untouched = untouched && disjoint(glu, r);
    }
    if (untouched && prev->fuse.residual == nullptr) {
      f = prev->fuse;
      f.write_x = 0;  // the previous launch stored x
      // Nothing either launch writes is touched by the other: this one's output lies apart
      // from the previous one's activations and outputs (its other reads, the norm's inputs
      // and the weights, were checked above or are never written).
      bool apart = disjoint(yr, x_rows(*prev));
      for (int m = 0; m < prev->n_mats; ++m) apart = apart && disjoint(yr, {prev->y[m], prev->rows[m], prev->rows[m], n});
      f.concurrent = apart && prev->fuse.glu_out == nullptr ? 1 : 0;
    }
  }
  return f;
}

// add(x, y, x) or add(y, x, x) right after the product that wrote y (one matrix): the product's
// launch adds each output to x as it stores it (same rounding; addition commutes).
bool take_residual_add(StepQueue& queue, const Tensor& a, const Tensor& b, const Tensor& out) {
  MatmulArgs* prev = queue.last_if<MatmulArgs>(OpKind::kMatmul);
  if (prev == nullptr || prev->n_mats != 1 || prev->fuse.residual != nullptr || prev->n != out.rows ||
      prev->rows[0] != out.cols || a.rows != out.rows || a.cols != out.cols) {
    return false;
  }
  const int64_t n = prev->n, rows = prev->rows[0];
  auto is_y = [&](const Tensor& t) { return t.f32() == prev->y[0] && f32_stride(t) == rows; };
  auto is_out = [&](const Tensor& t) { return t.f32() == out.f32() && f32_stride(t) == f32_stride(out); };
  if (!((is_y(b) && is_out(a)) || (is_y(a) && is_out(b)))) return false;
  const FloatRows res{out.f32(), f32_stride(out), rows, n};
  if (!disjoint(res, {prev->y[0], rows, rows, n}) || !disjoint(res, x_rows(*prev)) ||
      !prologue_untouched(*prev, res)) {
    return false;
  }
  prev->fuse.residual = out.f32();
  prev->fuse.residual_stride = f32_stride(out);
  return true;
}

// swiglu(gate, up, out) right after the two-matrix product that wrote gate and up (equal rows):
// the product's launch stores silu(gate) * up to out once both rows of an index are done. out
// may be gate or up itself (each row's output is stored after its inputs' own stores).
bool take_swiglu_epilogue(StepQueue& queue, const Tensor& gate, const Tensor& up, const Tensor& out, bool any_kernel) {
  MatmulArgs* prev = queue.last_if<MatmulArgs>(OpKind::kMatmul);
  if (prev == nullptr || prev->n_mats != 2 || prev->tail_mat != 0 || prev->fuse.glu_out != nullptr ||
      prev->fuse.residual != nullptr ||
      prev->rows[0] != prev->rows[1] || prev->n != gate.rows || gate.cols != prev->rows[0] ||
      up.rows != gate.rows || up.cols != gate.cols || out.rows != gate.rows || out.cols != gate.cols) {
    return false;
  }
  // Without any_kernel (CudaBackendOptions::fuse_swiglu_epilogue), only the float products that
  // the streamed kernel takes in one launch (n = 1; gemv_float_stream.cu pairs gate row r with up row r).
  const bool is_float = prev->dtype == DType::F32 || prev->dtype == DType::F16 || prev->dtype == DType::BF16;
  if (!any_kernel && !(is_float && prev->n == 1 && prev->gemv_float_kernel == 0)) return false;
  const int64_t n = prev->n, rows = prev->rows[0];
  auto is = [&](const Tensor& t, const float* p) { return t.f32() == p && f32_stride(t) == rows; };
  if (!is(gate, prev->y[0]) || !is(up, prev->y[1])) return false;
  const FloatRows o{out.f32(), f32_stride(out), rows, n};
  const bool in_place = is(out, prev->y[0]) || is(out, prev->y[1]);
  if (!in_place && (!disjoint(o, {prev->y[0], rows, rows, n}) || !disjoint(o, {prev->y[1], rows, rows, n}) ||
                    !disjoint(o, x_rows(*prev)) || !prologue_untouched(*prev, o))) {
    return false;
  }
  prev->fuse.glu_out = out.f32();
  prev->fuse.glu_out_stride = f32_stride(out);
  return true;
}

}  // namespace tern::cuda
