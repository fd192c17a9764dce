// Internal to the matmul: the interface between the driver (matmul.cpp) and the per-level kernels
// (matmul_scalar.cpp, matmul_{float,legacy,kquant}_{avx2,avx512}.cpp).
//
// Letters: n = activation rows, cols = reduction length, r = weight row, D = activation digits.
//
// Activation formats. A weight dtype names the activation form its kernels read; the driver makes
// that form once per call, one row at a time (so a row's bytes never depend on the other rows).
// Every level's quantizer writes bitwise the same bytes as the scalar one, so a level without a
// kernel for some dtype can borrow a lower level's kernel on the same activations.
//
// Quantized activations are integers q = rne(x * q_max / amax) per block (amax = the block's
// largest |x|, scale d = amax / q_max), stored as D int8 digits in balanced base 255:
// q = 255 * hi + lo for D = 2 (the 16-bit mode), q = the one digit for D = 1 (the 8-bit mode).
// Every digit lies in [-127, 127], the range the int8 kernels were built for (vpdpbusd, maddubs
// saturation bounds, the AVX2 sign trick), so a 16-bit dot product is two exact int8 dot products
// of the same weight codes: dot(u, q) = 255 * dot(u, hi) + dot(u, lo).
//   D = 1: q_max = 127    (a step of ~2^-7 of the block's amax)
//   D = 2: q_max = 32512  (= 255 * 127 + 127; a step of ~2^-15 of amax)
// Digit planes of row i: qs + (D * i + k) * cols for digit k (most significant first).
// note: why digits rather than int16 activations against weight codes widened to int16
// (vpdpwssd / vpmaddwd): the multiply instructions per block are the same (a zmm vpdpwssd does 32
// multiply-adds, vpdpbusd 64), but the digits need no widening of codes (16 more vector ops per
// 32-element block in decode), keep the repacked prefill panels at 8 bits, and reuse every weight
// decoder and overflow bound, so every weight type has 16-bit kernels at every level.
//   x32  (legacy quants):  per 32 elements the scale d and s = d * sum(q), the term a weight block's
//                          offset multiplies. d and s are stored interleaved ({d, s} per block) so
//                          that one vector load pairs with the {d, m} fp16 pairs at the head of
//                          q4_1 / q5_1 blocks.
//   x256 (k-quants):       per 256 elements d, and per digit bsums = the sum of each 16 digits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/cpu_features.h"
#include "core/dtype.h"

namespace tern::cpu::detail {

constexpr int kQ8x32Block = 32;     // elements per x32 block (= a legacy weight block)
constexpr int kQ8x256Block = 256;   // elements per x256 block (= a k-quant super-block)
constexpr int kQ8x256SumGroup = 16; // elements per bsums entry
constexpr int kDigitBase = 255;     // q = 255 * hi + lo (D = 2)
constexpr int kMaxDigits = 2;

enum class ActFormat : uint8_t { kF32, kQ8x32, kQ8x256 };

struct ActQ8x32 {
  const int8_t* qs = nullptr;  // [n, D, cols]
  const float* ds = nullptr;   // [n, cols / 32, 2]: {d, s} per block
};

struct ActQ8x256 {
  const int8_t* qs = nullptr;       // [n, D, cols]
  const float* d = nullptr;         // [n, cols / 256]
  const int16_t* bsums = nullptr;   // [n, D, cols / 16]
};

// The activations of one call in the form the weight's kernel reads (only that member is set).
struct Activations {
  int64_t n = 0;
  int64_t cols = 0;
  int digits = 1;  // D of the quantized forms
  const float* f32 = nullptr;  // [n, cols]
  ActQ8x32 q8x32;
  ActQ8x256 q8x256;
};

// A run of weight rows (one thread's share), starting at a multiple of 16 rows of its tensor.
struct WeightRows {
  const uint8_t* data = nullptr;  // first row
  size_t row_stride = 0;          // bytes between rows
  int64_t n_rows = 0;
  int64_t cols = 0;
  // The run's first panel in the tensor's decode pack (matmul.h DecodePack), or nullptr.
  const uint8_t* decode_pack = nullptr;
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

// Quantize one activation row of `cols` floats (a multiple of the block size) into D digits:
// qs holds the row's D digit planes back to back ([D, cols]), bsums likewise ([D, cols / 16]).
using QuantizeQ8x32Fn = void (*)(const float* x, int64_t cols, int8_t* qs, float* ds);
using QuantizeQ8x256Fn = void (*)(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums);

// Per-dtype kernel lookups, one per source file; matmul.cpp assembles them into levels. `digits`
// is the activation digit count D the caller will quantize to (1 or 2); float kernels ignore it.
Kernel scalar_find_kernel(DType t, int digits);
Kernel avx2_find_float_kernel(DType t, int digits);
Kernel avx2_find_legacy_kernel(DType t, int digits);
Kernel avx2_find_kquant_kernel(DType t, int digits);
Kernel avx512_find_float_kernel(DType t, int digits);
Kernel avx512_find_legacy_kernel(DType t, int digits);
Kernel avx512_find_kquant_kernel(DType t, int digits);

// q4_k decode packs (AVX-512 only): every full 16-row panel's super-blocks in the lane order the
// kernel consumes (matmul_kquant_avx512.cpp), 64-byte aligned `out`; the tail rows are not packed.
size_t avx512_q4k_decode_pack_bytes(int64_t rows, int64_t cols);
void avx512_pack_q4k_for_decode(const uint8_t* data, size_t row_stride, int64_t rows, int64_t cols, uint8_t* out);

// Activation quantizers: q8 = D = 1, q16 = D = 2.
void scalar_quantize_q8x32(const float* x, int64_t cols, int8_t* qs, float* ds);
void scalar_quantize_q8x256(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums);
void scalar_quantize_q16x32(const float* x, int64_t cols, int8_t* qs, float* ds);
void scalar_quantize_q16x256(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums);
void avx2_quantize_q8x32(const float* x, int64_t cols, int8_t* qs, float* ds);
void avx2_quantize_q8x256(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums);
void avx2_quantize_q16x32(const float* x, int64_t cols, int8_t* qs, float* ds);
void avx2_quantize_q16x256(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums);
void avx512_quantize_q8x32(const float* x, int64_t cols, int8_t* qs, float* ds);
void avx512_quantize_q8x256(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums);
void avx512_quantize_q16x32(const float* x, int64_t cols, int8_t* qs, float* ds);
void avx512_quantize_q16x256(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums);

}  // namespace tern::cpu::detail
