// Matmul dispatch (one entry point per weight dtype), the fp32 kernel for F32 / F16 / BF16 rows
// and the generic per-element kernel for the remaining GGUF types (gemv.h describes all three).
#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/gemv.h"
#include "backends/cuda/gemv_fusion.cuh"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/matmul_qmma.h"
#include "core/check.h"

namespace tern::cuda {
namespace {

__device__ __forceinline__ void load8(DType t, const uint8_t* p, float (&w)[8]) {
  if (t == DType::F32) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
    w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
    return;
  }
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint16_t lo = static_cast<uint16_t>(words[i] & 0xffffu), hi = static_cast<uint16_t>(words[i] >> 16);
    if (t == DType::F16) {
      w[2 * i] = half_bits_to_float(lo);
      w[2 * i + 1] = half_bits_to_float(hi);
    } else {
      w[2 * i] = bf16_bits_to_float(lo);
      w[2 * i + 1] = bf16_bits_to_float(hi);
    }
  }
}

// Eight activations: two float4 when aligned, else element by element (the same values).
__device__ __forceinline__ void load_x8(const float* xr, bool vec, float (&xv)[8]) {
  if (vec) {
    const float4 p = reinterpret_cast<const float4*>(xr)[0], q = reinterpret_cast<const float4*>(xr)[1];
    xv[0] = p.x; xv[1] = p.y; xv[2] = p.z; xv[3] = p.w;
    xv[4] = q.x; xv[5] = q.y; xv[6] = q.z; xv[7] = q.w;
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) xv[i] = xr[i];
}

// F32 / F16 / BF16 rows, 16-byte aligned, cols % 8 == 0, register-tiled: a warp takes kRows
// weight rows against a tile of kX activation rows, so each 16-byte weight word is loaded once for
// kX activation rows and each activation chunk once for kRows weight rows. Every (weight row,
// activation row) pair runs one chain: lane l owns elements 8l .. 8l + 7 of each 256-element
// chunk, fmaf in element order, chunk after chunk, then warp_sum_tree; so every instance gives
// the bits of gemv_float.cu's bulk-staged kernel and the n = 1 kernels. n > 1 takes 4 x 8
// (kFloatTile*): 4 x 8 x 8 = 256 multiply-adds per 20 loads per lane, against 32 per 9 for the
// warp per row against 4 activation rows (1 x kGemvMaxXRows, the legacy path's), whose n = 512
// products ncu found bound by L1 throughput (96% of it, 31% of the issue slots; 8B F16 gate+up
// 24 ms at n = 512, 11.5 ms tiled).
constexpr int kFloatTileRows = 4;
constexpr int kFloatTileX = 8;
template <int kRows, int kX>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_float_tile_kernel(MatmulArgs a) {
  pdl_enter();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t total = a.total_rows();
  const int64_t gr0 = (int64_t{blockIdx.y} * kGemvWarps + warp) * kRows;
  if (gr0 >= total) return;
  const int64_t x0 = int64_t{blockIdx.x} * kX;
  const int nt = static_cast<int>(a.n - x0 < kX ? a.n - x0 : kX);
  const int elem_bytes = a.dtype == DType::F32 ? 4 : 2;
  // A missing row of the last tile re-reads the tile's first row; never stored.
  MatRow rows[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) rows[r] = mat_row(a, gr0 + r < total ? gr0 + r : gr0);
  const bool x_vec = (reinterpret_cast<uintptr_t>(a.x) & 15) == 0;
  float acc[kRows][kX] = {};
  for (int64_t e = 8 * lane; e < a.cols; e += 256) {
    float w[kRows][8];
#pragma unroll
    for (int r = 0; r < kRows; ++r) load8(a.dtype, rows[r].w + e * elem_bytes, w[r]);
#pragma unroll
    for (int j = 0; j < kX; ++j) {
      if (j >= nt) break;
      float xv[8];
      load_x8(a.x + (x0 + j) * a.cols + e, x_vec, xv);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[r][j] = __fmaf_rn(w[r][i], xv[i], acc[r][j]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int j = 0; j < kX; ++j) {
      const float sum = warp_sum_tree(acc[r][j]);
      if (lane == 0 && j < nt && gr0 + r < total) {
        rows[r].y[(x0 + j) * rows[r].rows + rows[r].r] = sum;
        fused_residual(a, x0 + j, rows[r].r, sum);
      }
    }
  }
}

template <int kRows, int kX>
void launch_float_tile(const MatmulArgs& a, const LaunchEnv& env) {
  const int64_t row_blocks = (a.total_rows() + kGemvWarps * kRows - 1) / (kGemvWarps * kRows);
  TERN_CHECK_MSG(row_blocks <= 65535, "matmul: too many weight rows for one launch");
  const dim3 grid(static_cast<unsigned>((a.n + kX - 1) / kX), static_cast<unsigned>(row_blocks));
  launch_kernel(env, gemv_float_tile_kernel<kRows, kX>, grid, kGemvWarps * 32, 0, a);
}

// Any type dequant_element knows; warp per weight row, lane l owns elements l, l + 32, ...
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_generic_kernel(MatmulArgs a) {
  pdl_enter();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t gr = int64_t{blockIdx.y} * kGemvWarps + warp;
  if (gr >= a.total_rows()) return;
  const MatRow row = mat_row(a, gr);
  const int64_t x0 = int64_t{blockIdx.x} * kGemvMaxXRows;
  const int nt = static_cast<int>(a.n - x0 < kGemvMaxXRows ? a.n - x0 : kGemvMaxXRows);
  const uint8_t* wrow = row.w;
  float acc[kGemvMaxXRows] = {};
  for (int64_t e = lane; e < a.cols; e += 32) {
    const float w = dequant_element(a.dtype, wrow, e);
#pragma unroll
    for (int j = 0; j < kGemvMaxXRows; ++j) {
      if (j >= nt) break;
      acc[j] = __fmaf_rn(w, a.x[(x0 + j) * a.cols + e], acc[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < kGemvMaxXRows; ++j) {
    const float sum = warp_sum_tree(acc[j]);
    if (lane == 0 && j < nt) {
      row.y[(x0 + j) * row.rows + row.r] = sum;
      fused_residual(a, x0 + j, row.r, sum);
    }
  }
}

bool float_rows_aligned(const MatmulArgs& a) {
  const bool is_float = a.dtype == DType::F32 || a.dtype == DType::F16 || a.dtype == DType::BF16;
  bool aligned = is_float && a.cols % 8 == 0;
  for (int m = 0; m < a.n_mats; ++m) {
    aligned = aligned && reinterpret_cast<uintptr_t>(a.w[m]) % 16 == 0 && a.w_stride_bytes[m] % 16 == 0;
  }
  return aligned;
}

// Where the bulk-staged float kernel (gemv_float.cu) measured faster than the one-row-per-warp
// instance above (1 x kGemvMaxXRows; H200, gpu_bench --gemv, both giving the same bits): one
// activation row and rows of at most 4096 elements (8B F16 q+k+v 47.6% -> 54% of the copy
// bandwidth, gate+up 68% -> 81%). It lost on 14336-wide rows (ffn_down 52% -> 41%: every chunk
// re-reads 57 KiB of x through an L1 that the stages have shrunk) and on four activation rows
// (0.64-0.83x). One activation row now takes the register-streamed kernel
// (gemv_float_stream.cu), so this choice only applies under TERN_CUDA_GEMV_FLOAT=prev (the
// previous float kernels, for A/B timing).
bool float_bulk_measured_faster(const MatmulArgs& a) {
  return a.gemv_path != static_cast<int32_t>(GemvPath::kLegacy) && a.n == 1 && a.cols <= 4096;
}


}  // namespace

bool matmul_supports(DType t) { return dequant_element_supports(t); }

void launch_prologue_op(const MatmulArgs& a, const LaunchEnv& env) {
  const GemvFusion& f = a.fuse;
  if (f.write_x == 0) return;
  if (f.prologue == GemvPrologue::kRmsNorm) {
    RmsNormArgs n{};
    n.x = const_cast<float*>(f.src);
    n.x_stride = f.src_stride;
    n.w = f.src2;
    n.out = const_cast<float*>(a.x);
    n.out_stride = a.cols;
    n.rows = a.n;
    n.cols = a.cols;
    n.eps = f.eps;
    launch_rms_norm(n, env);
  } else {
    ElementwiseArgs e{};
    e.op = ElementwiseOp::kSwiglu;
    e.a = f.src;
    e.a_stride = f.src_stride;
    e.b = f.src2;
    e.b_stride = f.src2_stride;
    e.out = const_cast<float*>(a.x);
    e.out_stride = a.cols;
    e.rows = a.n;
    e.cols = a.cols;
    launch_elementwise(e, env);
  }
}


void launch_matmul(const MatmulArgs& fused, const LaunchEnv& env) {
  if (fused.n == 0 || fused.total_rows() == 0) return;
  if (fused.tail_mat > 0) {
    // A mixed-type launch: one multi-row kernel where it takes it, else its two parts (the same
    // rows' arithmetic either way). The tail part forms its activations as a carried norm does:
    // from the norm's inputs in-kernel, or from x, which the head part (or the launch before it)
    // stored.
    if (gemv_stream_chosen(fused)) {
      launch_gemv_stream(fused, env);
      return;
    }
    if (fused.gemv_path != static_cast<int32_t>(GemvPath::kLegacy) &&
        fused.gemv_path != static_cast<int32_t>(GemvPath::kSingle) && gemv_rows_mixed_supports(fused)) {
      launch_gemv_rows(fused, env);
      return;
    }
    MatmulArgs head = fused, tail = fused;
    head.n_mats = fused.tail_mat;
    head.tail_mat = 0;
    tail.n_mats = fused.n_mats - fused.tail_mat;
    tail.dtype = fused.tail_dtype;
    tail.tail_mat = 0;
    for (int m = 0; m < kMaxFusedMatmuls; ++m) {
      const int from = m + fused.tail_mat;
      const bool in = from < fused.n_mats;
      tail.w[m] = in ? fused.w[from] : nullptr;
      tail.w_stride_bytes[m] = in ? fused.w_stride_bytes[from] : 0;
      tail.rows[m] = in ? fused.rows[from] : 0;
      tail.y[m] = in ? fused.y[from] : nullptr;
    }
    for (int m = head.n_mats; m < kMaxFusedMatmuls; ++m) {
      head.w[m] = nullptr;
      head.w_stride_bytes[m] = 0;
      head.rows[m] = 0;
      head.y[m] = nullptr;
    }
    tail.fuse.write_x = 0;
    launch_matmul(head, env);
    launch_matmul(tail, env);
    return;
  }
  // The kernel choice depends on the weight alone (dtype, shape, alignment), never on n: every
  // n takes the same arithmetic for a given row (batch invariance).
  // Many activation rows: the tensor-core kernel where it handles the weight (the same bits).
  if (fused.qmma_x != nullptr && launch_matmul_qmma(fused, env)) return;
  if (launch_gemv_quant(fused, env)) return;  // the quantized kernels take any fusion in-kernel
  MatmulArgs a = fused;
  // The register-streamed float kernel (n = 1 only: any n takes the same per-row arithmetic, so
  // the other float kernels below give the same bits for n > 1) takes the RMSNorm prologue and
  // the epilogues in-kernel; a SwiGLU prologue runs as its own kernel first.
  MatmulArgs plain = a;
  if (plain.fuse.prologue == GemvPrologue::kSwiglu) {
    plain.fuse.prologue = GemvPrologue::kNone;
    plain.fuse.write_x = 0;
  }
  if (gemv_float_stream_supports(plain)) {
    if (a.fuse.prologue == GemvPrologue::kSwiglu) launch_prologue_op(a, env);
    launch_gemv_float_stream(plain, env);
    return;
  }
  if (a.fuse.prologue != GemvPrologue::kNone) {
    launch_prologue_op(a, env);
    a.fuse.prologue = GemvPrologue::kNone;
    a.fuse.write_x = 0;
  }
  if (float_rows_aligned(a) && float_bulk_measured_faster(a)) {
    launch_gemv_float(a, env);
  } else if (float_rows_aligned(a) && a.n > 1 && a.gemv_path != static_cast<int32_t>(GemvPath::kLegacy)) {
    launch_float_tile<kFloatTileRows, kFloatTileX>(a, env);
  } else if (float_rows_aligned(a)) {
    launch_float_tile<1, kGemvMaxXRows>(a, env);
  } else {
    const int64_t row_blocks = (a.total_rows() + kGemvWarps - 1) / kGemvWarps;
    const int64_t x_tiles = (a.n + kGemvMaxXRows - 1) / kGemvMaxXRows;
    TERN_CHECK_MSG(row_blocks <= 65535, "matmul: too many weight rows for one launch");
    const dim3 grid(static_cast<unsigned>(x_tiles), static_cast<unsigned>(row_blocks));
    launch_kernel(env, gemv_generic_kernel, grid, kGemvWarps * 32, 0, a);
  }
  if (a.fuse.glu_out != nullptr) launch_glu_after(a, env);  // a SwiGLU epilogue, as its own kernel
}

void launch_glu_after(const MatmulArgs& a, const LaunchEnv& env) {
  ElementwiseArgs e{};
  e.op = ElementwiseOp::kSwiglu;
  e.a = a.y[0];
  e.a_stride = a.rows[0];
  e.b = a.y[1];
  e.b_stride = a.rows[1];
  e.out = a.fuse.glu_out;
  e.out_stride = a.fuse.glu_out_stride;
  e.rows = a.n;
  e.cols = a.rows[0];
  launch_elementwise(e, env);
}

void init_matmul(int max_smem_bytes) {
  init_gemv_quant(max_smem_bytes);
  init_gemv_float(max_smem_bytes);
  init_gemv_float_stream(max_smem_bytes);
  init_gemv_rows(max_smem_bytes);
  init_gemv_stream(max_smem_bytes);
  init_qmma(max_smem_bytes);
}

}  // namespace tern::cuda
