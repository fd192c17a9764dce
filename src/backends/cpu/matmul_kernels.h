// Internal to the matmul: the interface between the driver (matmul.cpp) and the per-level kernels
// (matmul_scalar.cpp, matmul_{float,legacy,kquant}_{avx2,avx512}.cpp).
//
// Letters: n = activation rows, cols = reduction length, r = weight row.
//
// Activation formats. A weight dtype names the activation form its kernels read; the driver makes
// that form once per call, one row at a time (so a row's bytes never depend on the other rows).
// Every level's quantizer writes bitwise the same bytes as the scalar one, so a level without a
// kernel for some dtype can borrow a lower level's kernel on the same activations.
//   q8x32  (legacy quants):  per 32 elements a float scale d = amax / 127, int8 q = rne(x * 127 / amax),
//                            and s = d * sum(q), the term a weight block's offset multiplies. d and s
//                            are stored interleaved ({d, s} per block) so that one vector load pairs
//                            with the {d, m} fp16 pairs at the head of q4_1 / q5_1 blocks.
//   q8x256 (k-quants):       per 256 elements d as above, int8 q, and bsums = sum of each 16 q.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/cpu_features.h"
#include "core/dtype.h"

namespace tern::cpu::detail {

constexpr int kQ8x32Block = 32;     // elements per q8x32 block (= a legacy weight block)
constexpr int kQ8x256Block = 256;   // elements per q8x256 block (= a k-quant super-block)
constexpr int kQ8x256SumGroup = 16; // elements per bsums entry

enum class ActFormat : uint8_t { kF32, kQ8x32, kQ8x256 };

struct ActQ8x32 {
  const int8_t* qs = nullptr;  // [n, cols]
  const float* ds = nullptr;   // [n, cols / 32, 2]: {d, s} per block
};

struct ActQ8x256 {
  const int8_t* qs = nullptr;       // [n, cols]
  const float* d = nullptr;         // [n, cols / 256]
  const int16_t* bsums = nullptr;   // [n, cols / 16]
};

// The activations of one call in the form the weight's kernel reads (only that member is set).
struct Activations {
  int64_t n = 0;
  int64_t cols = 0;
  const float* f32 = nullptr;  // [n, cols]
  ActQ8x32 q8x32;
  ActQ8x256 q8x256;
};

// A run of weight rows (one thread's share).
struct WeightRows {
  const uint8_t* data = nullptr;  // first row
  size_t row_stride = 0;          // bytes between rows
  int64_t n_rows = 0;
  int64_t cols = 0;
};

// Writes y[i * ldy + r] = dot(activation row i, weight row r) for i < x.n, r < w.n_rows.
// Contract (batch invariance): the float operations behind each output depend only on the
// activation row, the weight row and the kernel, never on n, on r's position in the tile or on
// which other rows are present.
using GemmFn = void (*)(const WeightRows& w, const Activations& x, float* y, int64_t ldy);

struct Kernel {
  ActFormat act = ActFormat::kF32;
  GemmFn gemm = nullptr;  // nullptr: this level has no kernel for the dtype
};

// Quantize one activation row of `cols` floats (a multiple of the block size).
using QuantizeQ8x32Fn = void (*)(const float* x, int64_t cols, int8_t* qs, float* ds);
using QuantizeQ8x256Fn = void (*)(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums);

// Per-dtype kernel lookups, one per source file; matmul.cpp assembles them into levels.
Kernel scalar_find_kernel(DType t);
Kernel avx2_find_float_kernel(DType t);
Kernel avx2_find_legacy_kernel(DType t);
Kernel avx2_find_kquant_kernel(DType t);
Kernel avx512_find_float_kernel(DType t);
Kernel avx512_find_legacy_kernel(DType t);
Kernel avx512_find_kquant_kernel(DType t);

void scalar_quantize_q8x32(const float* x, int64_t cols, int8_t* qs, float* ds);
void scalar_quantize_q8x256(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums);
void avx2_quantize_q8x32(const float* x, int64_t cols, int8_t* qs, float* ds);
void avx2_quantize_q8x256(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums);
void avx512_quantize_q8x32(const float* x, int64_t cols, int8_t* qs, float* ds);
void avx512_quantize_q8x256(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums);

}  // namespace tern::cpu::detail
