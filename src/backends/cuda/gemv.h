// Matrix products against GGUF weights on the device: y[n, rows] = x[n, cols] @ w^T.
//
// One kernel family serves every n (decode, batched decode, speculative verify, prefill; products
// of many activation rows take matmul_qmma.h's tensor-core kernel instead, which reproduces this
// family's bits with integer mma): a
// block of 8 warps streams weight rows (a warp owns rows w, w + 8 * blocks, ...) against a tile of
// up to kGemvMaxXRows activation rows (one row when n == 1: a leaner instance, more resident
// warps); larger n runs more tiles. The grid is the blocks that can be resident at once. Nothing
// about a row's arithmetic depends on n, on the tile it landed in or on which instance ran, so
// results are batch-invariant by construction (tests/gpu/matmul_test.cpp compares the bits).
//
// Quantized weights (q4_0, q4_1, q8_0, q4_k, q5_k, q6_k; gemv_quant.cu, per-type lane items in
// gemv_items.cuh) work on the blocks as stored. Each block quantizes its activation tile once
// with one float scale per 32 elements (d = amax / q_max, q = rint(x * q_max / amax)): to int16
// (q_max = 32512, the CPU's 16-bit precision; the default) or int8 (q_max = 127, llama.cpp's;
// MatmulArgs::x_bits, one choice per backend), then each warp streams its weight rows through
// shared memory in steps of 4096 elements and takes exact integer dot products (dp2a: two 16-bit
// x 8-bit products per instruction; dp4a: four 8-bit ones). A multi-row tile holds 4 activation
// rows where they fit shared memory (at 16 bits 2 where four do not, or where two let an SM hold
// twice the blocks), else 1 (gemv_quant_tile_rows). On sm_90, rows that are 16-byte aligned are
// staged by one bulk TMA copy per step (gemv_bulk.cuh), others by per-lane cp.async; rows of at
// most 2048 elements are staged several to a step (segmented steps: 576-wide rows four to a step instead of one row on
// 5 of 32 lanes). The canonical order of a row's float sum — fixed here so that a later
// tensor-core kernel can reproduce it bit for bit — is:
//   1. unit u = 32 consecutive elements. c_u is a float expression of the exact integer dot
//      products of the unit and the block scales (per type, in gemv_items.cuh: unit_*()).
//   2. y = perfect pairwise tree over c_0 .. c_{U-1}, zero-padded to a power of two
//      ((c0 + c1) + (c2 + c3)) + ...; a missing leaf is +0 (x + 0 == x, and -0 + 0 == +0).
// A warp realizes it as: lane l holds units 4l .. 4l+3 of a 128-unit step (levels 1-2),
// butterflies over lanes (levels 3-7), then a binary counter over steps (levels 8+). A segmented
// step butterflies over the row's aligned power-of-two group of lanes and adds +0 for the zero
// lanes a full step would have. (How a warp cuts the tree into lanes and steps does not change
// it: 2-unit lane items and 64-unit steps gave the same bits.)
//
// F32, F16 and BF16 weights multiply in fp32 without quantizing x: lane l owns elements
// 8l .. 8l+7 of every 256-element chunk, accumulates them with fmaf in element order, and the
// lanes' sums meet in a butterfly. At n = 1 the register-streamed kernel (gemv_float_stream.cu:
// x in shared memory, weights straight into registers, the RMSNorm prologue and the residual /
// SwiGLU epilogues in-kernel) takes them; n > 1 takes matmul.cu's register-tiled kernel (a warp
// per 4 weight rows x 8 activation rows); legacy devices, TERN_CUDA_GEMV=legacy and
// TERN_CUDA_GEMV_FLOAT=prev take its one-row-per-warp instance (1 x 4) or gemv_float.cu's
// bulk-staged one. All give the same bits. Every other type
// supported by dequant.cuh (q5_0, q5_1, q2_k, q3_k, q8_k, and float rows that are not 16-byte
// aligned) takes a slow generic kernel: lane l owns elements l, l + 32, ... and dequantizes them
// one at a time.
//
// At n = 1 the default path (GemvPath::kAuto) sends q4_k products of 16k-64k rows (8B gate+up)
// to the register-streamed kernel (gemv_stream.cu: coalesced 16-byte loads straight into
// registers, a lane per eight units of one of a warp's two rows; gemv_stream_default), and the
// other q4_k / q6_k / q8_0 products of up to 64k rows to gemv_rows.cu (gemv_rows_default): two or four rows per warp step sharing the activation
// loads and butterflies, on a grid balanced to the rows (H200, 8B: 1.05-1.3x the single-row
// kernel per product; the vocabulary head stays on the single-row kernel, which streams it at
// 90%). GemvPath::kRows (TERN_CUDA_GEMV=rows) sends it every product it takes, and can split a
// row's steps over two or four warps at power-of-two step boundaries (same tree; measured no
// faster, opt-in); GemvPath::kSingle (=single) keeps the single-row kernels everywhere.
// GemvPath::kStream (=stream) sends the streamed kernel every product it takes, kPrev (=prev)
// none (the default before it, A/B).
// GemvPath::kLegacy (CudaBackendOptions::legacy_gemv, TERN_CUDA_GEMV=legacy) keeps the previous
// launch shape (per-lane cp.async, four-row tiles, two blocks per SM, one float row per warp) for
// A/B timing; `gpu_bench --gemv` times legacy, single and default per shape.
#pragma once

#include "backends/cuda/kernels.h"

namespace tern::cuda {

constexpr int kGemvWarps = 8;      // warps (= weight rows) per block
constexpr int kGemvMaxXRows = 4;   // activation rows per block

// Row gr of a (possibly fused) matmul's joint row index: its weight row and output column.
struct MatRow {
  const uint8_t* w;
  float* y;       // y_m: element (i, r) at y[i * rows + r]
  int64_t rows;   // rows of matrix m
  int64_t r;      // row within matrix m
  size_t stride;  // bytes between rows of matrix m
};
#if defined(__CUDACC__)
// Selects with conditionals rather than indexing the parameter arrays, which would copy them to
// local memory.
__device__ __forceinline__ MatRow mat_row(const MatmulArgs& a, int64_t gr) {
  int m = 0;
  if (a.n_mats > 1 && gr >= a.rows[0]) {
    gr -= a.rows[0];
    m = 1;
    if (a.n_mats > 2 && gr >= a.rows[1]) {
      gr -= a.rows[1];
      m = 2;
    }
  }
  const void* w = m == 0 ? a.w[0] : (m == 1 ? a.w[1] : a.w[2]);
  const size_t stride = m == 0 ? a.w_stride_bytes[0] : (m == 1 ? a.w_stride_bytes[1] : a.w_stride_bytes[2]);
  MatRow row;
  row.w = static_cast<const uint8_t*>(w) + gr * stride;
  row.y = m == 0 ? a.y[0] : (m == 1 ? a.y[1] : a.y[2]);
  row.rows = m == 0 ? a.rows[0] : (m == 1 ? a.rows[1] : a.rows[2]);
  row.r = gr;
  row.stride = stride;
  return row;
}
#endif

// A SwiGLU epilogue (GemvFusion::glu_out) as the elementwise kernel, after a product launch
// that did not apply it (matmul.cu).
void launch_glu_after(const MatmulArgs& a, const LaunchEnv& env);
// A fused prologue (GemvFusion::prologue) as the op's own kernel, before a product launch that
// does not form it in-kernel: stores x (a carried RMSNorm, write_x == 0, finds x stored by the
// launch before, and runs nothing).
void launch_prologue_op(const MatmulArgs& a, const LaunchEnv& env);
// Launches the quantized kernel for a.dtype if it has one and the shape fits (decided for the
// largest activation tile, so the answer never depends on n); false otherwise.
bool launch_gemv_quant(const MatmulArgs& a, const LaunchEnv& env);
// Whether launch_gemv_quant takes the product (host logic: the weight's type, its row length
// against the shared memory a.max_smem_bytes allows, at a.x_bits); a product it leaves runs on
// the slow generic kernel.
bool gemv_quant_takes(const MatmulArgs& a);
// The activation rows per block it runs n > 1 in (4, 2 at 16 bits, or 1); 0 where it does not
// take the product.
int gemv_quant_tile_rows(const MatmulArgs& a);
// The bulk-staged kernel (sm_90) for F32 / F16 / BF16 rows that are 16-byte aligned with
// cols % 8 == 0 (gemv_float.cu), and its one-time shared-memory setup.
void launch_gemv_float(const MatmulArgs& a, const LaunchEnv& env);
void init_gemv_float(int max_smem_bytes);
// The register-streamed kernel for F32 / F16 / BF16 rows at n = 1 (gemv_float_stream.cu): whether
// it takes the product (16-byte aligned rows, cols % 8 == 0, x fits in shared memory; any fusion,
// done in the kernel), its launcher and its one-time shared-memory setup.
bool gemv_float_stream_supports(const MatmulArgs& a);
void launch_gemv_float_stream(const MatmulArgs& a, const LaunchEnv& env);
void init_gemv_float_stream(int max_smem_bytes);
// Sets the quantized kernels' dynamic shared-memory limit (once per device).
void init_gemv_quant(int max_smem_bytes);
// The n = 1 multi-row / split-row kernel (gemv_rows.cu, GemvPath::kRows): whether it takes the
// product (q8_0 / q4_k / q5_k / q6_k rows of more than 2048 elements, bulk-copy eligible, no
// prologue or an RMSNorm one, no SwiGLU epilogue), whether GemvPath::kAuto sends the product to
// it (the shapes where it measured faster), its launcher and its one-time shared-memory setup.
bool gemv_rows_supports(const MatmulArgs& a);
bool gemv_rows_default(const MatmulArgs& a);
// A mixed-type launch (MatmulArgs::tail_mat) that one multi-row kernel takes: n = 1, q4_k head
// matrices of an even joint row count (two-row sets never straddle the types) and q6_k tail
// matrices, every step of both a whole bulk copy.
bool gemv_rows_mixed_supports(const MatmulArgs& a);
void launch_gemv_rows(const MatmulArgs& a, const LaunchEnv& env);
void init_gemv_rows(int max_smem_bytes);
// The n = 1 register-streamed quantized kernel (gemv_stream.cu): whether it takes the product
// (q8_0 / q4_k / q5_k / q6_k rows whose steps are whole 16-byte pieces, the mixed q4_k + q6_k
// launch; the RMSNorm prologue, the residual and SwiGLU epilogues), whether GemvPath::kAuto sends
// the product to it (the shapes where it measured faster), whether this launch takes it (the one
// routing decision, for gemv_quant.cu and matmul.cu), its launcher and its shared-memory setup.
bool gemv_stream_supports(const MatmulArgs& a);
bool gemv_stream_default(const MatmulArgs& a);
bool gemv_stream_chosen(const MatmulArgs& a);
void launch_gemv_stream(const MatmulArgs& a, const LaunchEnv& env);
void init_gemv_stream(int max_smem_bytes);

}  // namespace tern::cuda
