// Tensor-core prefill matmul (opt-in: CudaBackendOptions::tc_prefill, TERN_CUDA_TC_PREFILL=1).
//
// For products with many activation rows (n >= CudaBackendOptions::tc_prefill_min_tokens) the
// quantized GEMV family of gemv.h re-reads every weight row once per 4-row activation tile and
// multiplies on the CUDA cores. This path instead:
//   1. rounds x [n, cols] (f32) to bf16 into a scratch buffer (once for consecutive products of
//      the same x: q/k/v, gate/up);
//   2. dequantizes the weight, a tile of at most kTcWeightTileElems elements (whole rows) at a
//      time, to bf16 in a second scratch buffer: the exact float of dequantize_row_ref rounded
//      to nearest bf16 (BF16 weights are used in place, nothing is copied);
//   3. runs a cuBLASLt bf16 GEMM with fp32 accumulation per tile (tc_gemm.h), writing the
//      output columns of that tile.
//
// Numerics, against the CPU reference (f32 weights dequantized exactly, f32 activations): each
// product w_k x_k carries the bf16 roundings of both factors (relative error <= 2^-8 each ~
// 2^-8 together), so |y - y_ref| <= 2^-7 * sum_k |w_k x_k| plus the fp32 summation error;
// measured rel. L2 ~2e-3 (tests/gpu/tc_prefill_test.cpp). For comparison the GEMV path rounds x
// to int8 per 32 elements (up to 2^-8 of the block maximum, i.e. coarser for small elements).
// The sums run in cuBLASLt's order, which depends on n: rows are NOT batch-invariant, and a
// prefill's rows differ in their last bits from the same tokens decoded one by one (issue 7:
// opt-in, documented). Decode (n below the threshold) is untouched.
#pragma once

#include <cstdint>

#include "backends/cuda/kernels.h"
#include "core/dtype.h"

namespace tern::cuda {

class TcGemm;

// Weight elements one dequantized tile may hold (bf16): 64 Mi elements = 128 MiB, enough for
// an 8B model's ffn matrices (14336 x 4096) in one tile; larger weights run in row tiles.
constexpr int64_t kTcWeightTileElems = int64_t{64} << 20;

// One tensor-core product y[n, rows] = x[n, cols] @ w^T (a single weight: MatmulArgs with
// n_mats == 1). Trivially copyable like every launch record.
struct TcMatmulArgs {
  MatmulArgs mm;
  TcGemm* gemm;
  uint16_t* x16;     // scratch [n, cols] bf16 bits
  uint16_t* w16;     // scratch [w16_rows, cols] bf16 bits (unused when the weight is BF16)
  int64_t w16_rows;  // weight rows per tile
  int convert_x;     // 0: x16 already holds x (the previous record converted this x)
};

// Weight types this path dequantizes (every type matmul_supports).
bool tc_matmul_supports(DType t);
// Rows of a [rows, cols] weight per dequantized tile.
int64_t tc_weight_tile_rows(int64_t rows, int64_t cols);
// True when the weight is used in place (BF16), so no weight scratch is needed.
bool tc_weight_in_place(DType t);
// Chooses the cuBLASLt algorithms of every GEMM the record will launch (host only; call when
// recording, so the flush, and a graph capture of it, only launches).
void prepare_matmul_tc(const TcMatmulArgs& a);
void launch_matmul_tc(const TcMatmulArgs& a, const LaunchEnv& env);

}  // namespace tern::cuda
