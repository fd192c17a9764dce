// Tensor-core quantized products with the GEMV's bits (matmul_qmma.h).
#include "backends/cuda/matmul_qmma.h"

#include "backends/cuda/async_copy.cuh"
#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/gemv.h"
#include "backends/cuda/gemv_fusion.cuh"
#include "backends/cuda/gemv_items.cuh"
#include "backends/cuda/gemv_tile.cuh"
#include "backends/cuda/launch.cuh"

namespace tern::cuda {
namespace {

using gemv_items::kItemUnits;
using gemv_items::kStepUnits;
using gemv_items::x_qmax;

constexpr int kUnitBytes = 64;  // a token's unit in the scratch: four 16-byte quad pieces
constexpr int kWarpsM = 2, kWarpsN = 4;
constexpr int kThreads = 32 * kWarpsM * kWarpsN;
constexpr int kTileTokens = 16 * kWarpsM;  // a block's activation rows
constexpr int kTileRows = 16 * kWarpsN;    // a block's weight rows
constexpr int kItemLevels = 5;             // binary counter over a step's 32 items

constexpr int kChunkUnits = 16;           // units a block stages per pipeline stage

// Scratch layout, unit-major over the tokens padded to whole block tiles (the pad tokens are
// zeros): the quantized units [U][n_pad] of kUnitBytes, then one float2 {d, float(s)} per unit.
__host__ __device__ inline int64_t padded_tokens(int64_t n) { return (n + kTileTokens - 1) / kTileTokens * kTileTokens; }
__host__ __device__ inline size_t units_bytes(int64_t n, int64_t cols) {
  return static_cast<size_t>(padded_tokens(n)) * static_cast<size_t>(cols / 32) * kUnitBytes;
}

// --- activations --------------------------------------------------------------------------------
//
// Unit i (token i / U, unit i % U) of x, quantized as gemv_tile.cuh quantize_tile does (the same
// amax, q and int sum) and stored at unit-major index (i % U) * n_pad + i / U as the mma fragments
// want it (tokens n .. n_pad - 1 as zeros): the unit's low-byte plane lo[0..8)
// and high-byte plane hi[0..8) (words of four elements; at 8 bits lo holds q itself and hi is
// zero), piece p (the quad lane p of a warp reads it) = {lo[p], lo[p + 4], hi[p], hi[p + 4]}:
// elements 4p .. 4p + 3 and 16 + 4p .. 16 + 4p + 3 of both planes.
template <int kXB>
__global__ void __launch_bounds__(256) qmma_quantize_kernel(const float* __restrict__ x, int64_t n, int n_units,
                                                            uint8_t* __restrict__ xq, float2* __restrict__ xf) {
  const int64_t n_pad = padded_tokens(n), total_units = n_pad * n_units;
  pdl_wait();  // x is the predecessor's output, and a previous product may still read the scratch
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total_units) {
    const bool pad = i >= n * n_units;
    const float* src = x + i * 32;
    float v[32];
    if (pad) {
#pragma unroll
      for (int k = 0; k < 32; ++k) v[k] = 0.0f;
    } else if ((reinterpret_cast<uintptr_t>(src) & 15) == 0) {
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float4 f = reinterpret_cast<const float4*>(src)[k];
        v[4 * k] = f.x;
        v[4 * k + 1] = f.y;
        v[4 * k + 2] = f.z;
        v[4 * k + 3] = f.w;
      }
    } else {
#pragma unroll
      for (int k = 0; k < 32; ++k) v[k] = src[k];
    }
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < 32; ++k) amax = fmaxf(amax, fabsf(v[k]));
    const float inv = gemv_tile::x_inv_scale<kXB>(amax);
    uint32_t lo[8], hi[8];
    int sum = 0;
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      lo[w] = 0;
      hi[w] = 0;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int q = __float2int_rn(__fmul_rn(v[4 * w + b], inv));
        sum += q;
        lo[w] |= (static_cast<uint32_t>(q) & 0xffu) << (8 * b);
        if constexpr (kXB == 2) hi[w] |= (static_cast<uint32_t>(q >> 8) & 0xffu) << (8 * b);
      }
    }
    // unit-major: the tokens of one unit are adjacent, so a warp's 8 tokens share cache lines
    const int64_t at = (i % n_units) * n_pad + i / n_units;
    uint4* dst = reinterpret_cast<uint4*>(xq + at * kUnitBytes);
#pragma unroll
    for (int p = 0; p < 4; ++p) dst[p] = make_uint4(lo[p], lo[p + 4], hi[p], hi[p + 4]);
    xf[at] = make_float2(__fdiv_rn(amax, x_qmax<kXB>()), static_cast<float>(sum));
  }
  pdl_launch_dependents();
}

// --- integer mma --------------------------------------------------------------------------------

// d += A (16 x 32, row-major, bytes unsigned when kAU) * B (32 x 8, col-major, signed bytes).
template <bool kAU>
__device__ __forceinline__ void mma_k32(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
  if constexpr (kAU) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}
// d += A (16 x 16) * B (16 x 8).
template <bool kAU>
__device__ __forceinline__ void mma_k16(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  if constexpr (kAU) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(b0));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(b0));
  }
}

// An int32 accumulator started at the bits of 1.5 * 2^23 holds, for |dot| < 2^22, the bits of the
// float 1.5 * 2^23 + dot: one exact subtraction gives float(dot).
constexpr int kBiasBits = 0x4B400000;
constexpr float kBiasValue = 12582912.0f;
__device__ __forceinline__ float biased_to_float(int d) { return __fsub_rn(__int_as_float(d), kBiasValue); }

// --- weights ------------------------------------------------------------------------------------

// Loads out of a weight row's staged chunk (shared memory; the chunk starts at a block boundary,
// so offsets inside blocks are the row's own).
__device__ __forceinline__ uint32_t ld32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ uint32_t ld32_a2(const uint8_t* p) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  return static_cast<uint32_t>(h[0]) | static_cast<uint32_t>(h[1]) << 16;
}
__device__ __forceinline__ float ld_half(const uint8_t* p) {
  return half_bits_to_float(*reinterpret_cast<const uint16_t*>(p));
}
__device__ __forceinline__ int ld_s8(const uint8_t* p) { return static_cast<int8_t>(*p); }

// The B operand of unit u of a weight row: its codes of unit elements 4p .. 4p + 3 (b0) and
// 16 + 4p .. 16 + 4p + 3 (b1), p = the lane's quad index, as signed bytes (q6_k: code - 32).
template <DType T>
__device__ __forceinline__ void b_words(const uint8_t* w, int u, int p, uint32_t& b0, uint32_t& b1) {
  if constexpr (T == DType::Q8_0) {
    const uint8_t* c = w + 34 * u + 2 + 4 * p;
    b0 = ld32_a2(c);
    b1 = ld32_a2(c + 16);
  } else if constexpr (T == DType::Q4_0 || T == DType::Q4_1) {
    // element e < 16: low nibble of byte e; 16 + e: its high nibble
    const uint32_t c = T == DType::Q4_0 ? ld32_a2(w + 18 * u + 2 + 4 * p) : ld32(w + 20 * u + 4 + 4 * p);
    b0 = c & 0x0f0f0f0fu;
    b1 = (c >> 4) & 0x0f0f0f0fu;
  } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    // sub-block s of a super-block: the low (s even) or high nibbles of qs[32 (s / 2) ..]
    constexpr bool kFive = T == DType::Q5_K;
    const int s = u & 7;
    const uint8_t* blk = w + (kFive ? 176 : 144) * (u >> 3);
    const uint8_t* qs = blk + (kFive ? 48 : 16) + 32 * (s >> 1) + 4 * p;
    const int shift = 4 * (s & 1);
    b0 = (ld32(qs) >> shift) & 0x0f0f0f0fu;
    b1 = (ld32(qs + 16) >> shift) & 0x0f0f0f0fu;
    if constexpr (kFive) {  // fifth bit of sub-block s: bit s of qh[element]
      b0 |= ((ld32(blk + 16 + 4 * p) >> s) & 0x01010101u) << 4;
      b1 |= ((ld32(blk + 32 + 4 * p) >> s) & 0x01010101u) << 4;
    }
  } else {  // Q6_K: quadrant k of half hh; low bits from ql, high two from qh
    const int k8 = u & 7, hh = k8 >> 2, k = k8 & 3;
    const uint8_t* blk = w + 210 * (u >> 3);
    const uint8_t* ql = blk + 64 * hh + 32 * (k & 1) + 4 * p;
    const uint8_t* qh = blk + 128 + 32 * hh + 4 * p;
    const int shift = 4 * (k >> 1);
    const uint32_t c0 = ((ld32_a2(ql) >> shift) & 0x0f0f0f0fu) | (((ld32_a2(qh) >> (2 * k)) & 0x03030303u) << 4);
    const uint32_t c1 = ((ld32_a2(ql + 16) >> shift) & 0x0f0f0f0fu) | (((ld32_a2(qh + 16) >> (2 * k)) & 0x03030303u) << 4);
    b0 = __vsub4(c0, 0x20202020u);
    b1 = __vsub4(c1, 0x20202020u);
  }
}

// A weight row's scales for unit u: d (or q4_k's d * sc), m (q4_1's min, q4_k's dmin * m) and
// q6_k's two 16-element sub-block scales. The same floats gemv_items.cuh forms.
struct UnitScale {
  float d, m;
  int sa, sb;
};
template <DType T>
__device__ __forceinline__ UnitScale unit_scale(const uint8_t* w, int u) {
  UnitScale r{0.0f, 0.0f, 0, 0};
  if constexpr (T == DType::Q8_0) {
    r.d = ld_half(w + 34 * u);
  } else if constexpr (T == DType::Q4_0) {
    r.d = ld_half(w + 18 * u);
  } else if constexpr (T == DType::Q4_1) {
    const uint32_t h = ld32(w + 20 * u);
    r.d = half_bits_to_float(h & 0xffffu);
    r.m = half_bits_to_float(h >> 16);
  } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    const uint8_t* blk = w + (T == DType::Q5_K ? 176 : 144) * (u >> 3);
    const int s = u & 7;
    const uint32_t h0 = ld32(blk), h1 = ld32(blk + 4), h2 = ld32(blk + 8), h3 = ld32(blk + 12);
    // the 6-bit scales and mins of sub-blocks 4hh .. 4hh + 3, as WItemK45 unpacks them
    const uint32_t sc4 = s < 4 ? h1 & 0x3f3f3f3fu : (h3 & 0x0f0f0f0fu) | ((h1 >> 2) & 0x30303030u);
    const uint32_t m4 = s < 4 ? h2 & 0x3f3f3f3fu : ((h3 >> 4) & 0x0f0f0f0fu) | ((h2 >> 2) & 0x30303030u);
    r.d = __fmul_rn(half_bits_to_float(h0 & 0xffffu), gemv_items::byte_to_float(sc4, s & 3));
    r.m = __fmul_rn(half_bits_to_float(h0 >> 16), gemv_items::byte_to_float(m4, s & 3));
  } else {  // Q6_K
    const uint8_t* blk = w + 210 * (u >> 3);
    const int k8 = u & 7, hh = k8 >> 2, k = k8 & 3;
    r.d = ld_half(blk + 208);
    r.sa = ld_s8(blk + 192 + 8 * hh + 2 * k);
    r.sb = ld_s8(blk + 192 + 8 * hh + 2 * k + 1);
  }
  return r;
}

// A unit's scales as one table entry (the block's scale table in shared memory): d, then m or
// q6_k's two sub-block scales as 16-bit halves.
__device__ __forceinline__ float2 pack_scale(const UnitScale& s, bool halves) {
  const uint32_t packed = (static_cast<uint32_t>(s.sa) & 0xffffu) | (static_cast<uint32_t>(s.sb) << 16);
  return make_float2(s.d, halves ? __uint_as_float(packed) : s.m);
}
__device__ __forceinline__ UnitScale unpack_scale(float2 v, bool halves) {
  UnitScale s{v.x, v.y, 0, 0};
  if (halves) {
    const int b = __float_as_int(v.y);
    s.sa = static_cast<int16_t>(b & 0xffff);
    s.sb = b >> 16;
  }
  return s;
}

// float(isum) of a unit from its exact parts.
template <int kXB>
__device__ __forceinline__ float planes_to_float(int lo, int hi) {
  if constexpr (kXB == 2) return __fmaf_rn(biased_to_float(hi), 256.0f, biased_to_float(lo));
  return biased_to_float(lo);
}
// float(t_a + t_b) for two int32 terms whose sum may pass 2^31: the exact sum split at bit 10
// into two floats that hold it exactly, joined by one rounding.
__device__ __forceinline__ float sum2_to_float(int ta, int tb) {
  const int h = (ta >> 10) + (tb >> 10);   // |h| < 2^22
  const int l = (ta & 1023) + (tb & 1023);  // 0 .. 2046
  return __fmaf_rn(biased_to_float(kBiasBits + h), 1024.0f, biased_to_float(kBiasBits + l));
}

// --- the product ----------------------------------------------------------------------------------

template <DType T, int kXB>
struct UnitDots {
  // q6_k: the two halves' integer dots (exact ints); others: the biased planes.
  int lo[4], hi[4], lo_b[4], hi_b[4];
};

template <DType T, int kXB>
__device__ __forceinline__ void unit_dots(const uint32_t (&A)[8], uint32_t b0, uint32_t b1, UnitDots<T, kXB>& r) {
  constexpr bool kLoU = kXB == 2;  // at 16 bits the low plane's bytes are unsigned
  if constexpr (T == DType::Q6_K) {
#pragma unroll
    for (int e = 0; e < 4; ++e) r.lo[e] = r.hi[e] = r.lo_b[e] = r.hi_b[e] = 0;
    mma_k16<kLoU>(r.lo, A[0], A[1], b0);
    mma_k16<kLoU>(r.lo_b, A[2], A[3], b1);
    if constexpr (kXB == 2) {
      mma_k16<false>(r.hi, A[4], A[5], b0);
      mma_k16<false>(r.hi_b, A[6], A[7], b1);
    }
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) r.lo[e] = r.hi[e] = kBiasBits;
    mma_k32<kLoU>(r.lo, A[0], A[1], A[2], A[3], b0, b1);
    if constexpr (kXB == 2) mma_k32<false>(r.hi, A[4], A[5], A[6], A[7], b0, b1);
  }
}

// c_u of element e of a fragment (gemv_items.cuh's unit_* expressions, from the same floats).
template <DType T, int kXB>
__device__ __forceinline__ float unit_c(const UnitScale& s, float dx, float fxs, const UnitDots<T, kXB>& r, int e) {
  if constexpr (T == DType::Q6_K) {
    const int da = kXB == 2 ? r.hi[e] * 256 + r.lo[e] : r.lo[e];
    const int db = kXB == 2 ? r.hi_b[e] * 256 + r.lo_b[e] : r.lo_b[e];
    const float isum = sum2_to_float(s.sa * da, s.sb * db);
    return __fmul_rn(__fmul_rn(s.d, dx), isum);
  } else if constexpr (T == DType::Q4_0) {
    // isum = dot - 8 * xs: dot_lo - 8 xs is an integer below 2^24, exact in float
    const float lo = __fsub_rn(biased_to_float(r.lo[e]), __fmul_rn(8.0f, fxs));
    const float isum = kXB == 2 ? __fmaf_rn(biased_to_float(r.hi[e]), 256.0f, lo) : lo;
    return __fmul_rn(__fmul_rn(s.d, dx), isum);
  } else {
    const float isum = planes_to_float<kXB>(r.lo[e], r.hi[e]);
    if constexpr (T == DType::Q8_0) {
      return __fmul_rn(__fmul_rn(s.d, dx), isum);
    } else if constexpr (T == DType::Q4_1) {
      return __fadd_rn(__fmul_rn(__fmul_rn(s.d, dx), isum), __fmul_rn(__fmul_rn(s.m, dx), fxs));
    } else {  // Q4_K, Q5_K
      return __fsub_rn(__fmul_rn(__fmul_rn(s.d, dx), isum), __fmul_rn(__fmul_rn(s.m, dx), fxs));
    }
  }
}

// A warp's 16 tokens x 16 rows: two n8 tiles, four fragment elements each; element (t, e) is
// token g + 8 (e >> 1), row 8t + 2p + (e & 1) of the warp's tile (g = lane / 4, p = lane % 4).
constexpr int kElems = 8;

// Bytes of n units of a row (n a multiple of 8 for the k-quants' 256-element blocks).
template <DType T>
__host__ __device__ constexpr int units_row_bytes(int n) {
  return T == DType::Q4_K ? n / 8 * 144
       : T == DType::Q5_K ? n / 8 * 176
       : T == DType::Q6_K ? n / 8 * 210
       : T == DType::Q8_0 ? n * 34
       : T == DType::Q4_0 ? n * 18
                          : n * 20;  // Q4_1
}

// A pipeline stage in shared memory: the chunk's activation pieces [unit][32 tokens][64 bytes],
// their scales [unit][32 tokens], the block's 64 weight rows' chunk bytes (rows w_pitch apart:
// 16 bytes mod 32, so the 8 rows x 4 quads of a warp's B-word loads fall on 32 banks) and the
// scale table [unit][row pair] (two float2 per float4).
template <DType T>
struct StageLayout {
  static constexpr int kRowBytes = units_row_bytes<T>(kChunkUnits);
  static constexpr int kWPitch = (kRowBytes + 15) / 16 * 16 % 32 == 16 ? (kRowBytes + 15) / 16 * 16
                                                                        : (kRowBytes + 15) / 16 * 16 + 16;
  static constexpr int kA = 0;
  static constexpr int kXf = kA + kChunkUnits * kTileTokens * kUnitBytes;
  static constexpr int kW = kXf + kChunkUnits * kTileTokens * 8;
  static constexpr int kTab = kW + kTileRows * kWPitch;
  static constexpr int kBytes = kTab + kChunkUnits * kTileRows * 8;
  static constexpr int kTotal = 2 * kBytes;  // double-buffered
};

// The block's copies of chunk c into stage `st` (cp.async; the caller commits): the activation
// pieces and scales of its 32 tokens (whole 16-byte pieces), and each weight row's chunk bytes by
// 16-byte copies where the row and length allow, else 4-byte copies, else 2-byte loads.
template <DType T>
__device__ __forceinline__ void stage_chunk(uint8_t* st, int c, int n_units, int64_t n_pad, int64_t tok_block0,
                                            const uint8_t* xq, const float2* xf, const uint8_t* w_row, int copy_row,
                                            int copy_part) {
  using L = StageLayout<T>;
  const int u0 = c * kChunkUnits, units = min(kChunkUnits, n_units - u0);
  const int tid = threadIdx.x;
  // activations: per unit 32 tokens x 64 bytes = 128 pieces, contiguous in the scratch
  for (int i = tid; i < units * (kTileTokens * kUnitBytes / 16); i += kThreads) {
    const int k = i / (kTileTokens * kUnitBytes / 16), piece = i % (kTileTokens * kUnitBytes / 16);
    const uint8_t* src = xq + (static_cast<size_t>(u0 + k) * n_pad + tok_block0) * kUnitBytes + 16 * piece;
    cp_async16(st + L::kA + (k * kTileTokens * kUnitBytes) + 16 * piece, src);
  }
  for (int i = tid; i < units * (kTileTokens * 8 / 16); i += kThreads) {
    const int k = i / (kTileTokens * 8 / 16), piece = i % (kTileTokens * 8 / 16);
    const uint8_t* src = reinterpret_cast<const uint8_t*>(xf + static_cast<size_t>(u0 + k) * n_pad + tok_block0) + 16 * piece;
    cp_async16(st + L::kXf + k * kTileTokens * 8 + 16 * piece, src);
  }
  // weights: four threads per row
  const uint8_t* src = w_row + units_row_bytes<T>(u0);
  uint8_t* dst = st + L::kW + copy_row * L::kWPitch;
  const int len = units_row_bytes<T>(units);
  const uintptr_t align = reinterpret_cast<uintptr_t>(src) | static_cast<uintptr_t>(len);
  if ((align & 15) == 0) {
    for (int o = 16 * copy_part; o < len; o += 64) cp_async16(dst + o, src + o);
  } else if ((align & 3) == 0) {
    for (int o = 4 * copy_part; o < len; o += 16) cp_async4(dst + o, src + o);
  } else {
    for (int o = 2 * copy_part; o < len; o += 8) {
      *reinterpret_cast<uint16_t*>(dst + o) = __ldg(reinterpret_cast<const uint16_t*>(src + o));
    }
  }
}

// Unit k of the stage: the warp's contributions c[8].
template <DType T, int kXB>
__device__ __forceinline__ void unit_contributions(const uint8_t* st, int tok_w, int wrow, int g, int p, int k,
                                                   float (&c)[kElems]) {
  using L = StageLayout<T>;
  const uint8_t* a = st + L::kA + (k * kTileTokens + tok_w + g) * kUnitBytes + 16 * p;
  const uint4 q0 = *reinterpret_cast<const uint4*>(a);
  const uint4 q1 = *reinterpret_cast<const uint4*>(a + 8 * kUnitBytes);
  const float2* f = reinterpret_cast<const float2*>(st + L::kXf) + k * kTileTokens + tok_w + g;
  const float2 f0 = f[0], f1 = f[8];
  // A fragments: rows g (q0) and g + 8 (q1); low plane, then high plane.
  const uint32_t A[8] = {q0.x, q1.x, q0.y, q1.y, q0.z, q1.z, q0.w, q1.w};
  const float4* tab = reinterpret_cast<const float4*>(st + L::kTab) + k * (kTileRows / 2);
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    uint32_t b0, b1;
    b_words<T>(st + L::kW + (wrow + 8 * t + g) * L::kWPitch, k, p, b0, b1);
    UnitDots<T, kXB> r;
    unit_dots<T, kXB>(A, b0, b1, r);
    // rows 8t + 2p and 8t + 2p + 1 of the warp's tile: one 16-byte entry pair
    const float4 e = tab[(wrow + 8 * t + 2 * p) / 2];
    const UnitScale s0 = unpack_scale(make_float2(e.x, e.y), T == DType::Q6_K);
    const UnitScale s1 = unpack_scale(make_float2(e.z, e.w), T == DType::Q6_K);
    c[4 * t + 0] = unit_c<T, kXB>(s0, f0.x, f0.y, r, 0);
    c[4 * t + 1] = unit_c<T, kXB>(s1, f0.x, f0.y, r, 1);
    c[4 * t + 2] = unit_c<T, kXB>(s0, f1.x, f1.y, r, 2);
    c[4 * t + 3] = unit_c<T, kXB>(s1, f1.x, f1.y, r, 3);
  }
}

// Item i of the step's 32 enters the counter: it merges with the stored subtrees of its trailing
// one bits and is stored at the first zero bit. After item 31, v is the step's sum.
__device__ __forceinline__ void push_item(float (&items)[kItemLevels][kElems], float (&v)[kElems], int i) {
  bool placed = false;
#pragma unroll
  for (int l = 0; l < kItemLevels; ++l) {
    if (!placed) {
      if ((i >> l) & 1) {
#pragma unroll
        for (int e = 0; e < kElems; ++e) v[e] = __fadd_rn(items[l][e], v[e]);
      } else {
#pragma unroll
        for (int e = 0; e < kElems; ++e) items[l][e] = v[e];
        placed = true;
      }
    }
  }
}
// Step s's sum enters the step counter (gemv_tile.cuh counter_push over kQmmaStepLevels levels).
__device__ __forceinline__ void push_step(float (&stack)[kElems][kQmmaStepLevels], const float (&v)[kElems], int s) {
#pragma unroll
  for (int e = 0; e < kElems; ++e) {
    float sum = v[e];
    bool placed = false;
#pragma unroll
    for (int k = 0; k < kQmmaStepLevels; ++k) {
      if (!placed) {
        if ((s >> k) & 1) {
          sum = __fadd_rn(stack[e][k], sum);
        } else {
          stack[e][k] = sum;
          placed = true;
        }
      }
    }
  }
}

template <DType T, int kXB>
__global__ void __launch_bounds__(kThreads) qmma_kernel(const MatmulArgs a) {
  using L = StageLayout<T>;
  extern __shared__ __align__(16) uint8_t smem[];
  const int cols = static_cast<int>(a.cols), n_units = cols / 32;
  const int n_chunks = (n_units + kChunkUnits - 1) / kChunkUnits;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, p = lane & 3;
  const int64_t n = a.n, n_pad = padded_tokens(n), total = a.total_rows();
  const int64_t tok_block0 = static_cast<int64_t>(blockIdx.y) * kTileTokens;
  const int64_t row_block0 = static_cast<int64_t>(blockIdx.x) * kTileRows;
  const int tok_w = 16 * (warp % kWarpsM);  // the warp's first token and row in the block's tile
  const int wrow = 16 * (warp / kWarpsM);
  const uint8_t* xq = a.qmma_x;
  const float2* xf = reinterpret_cast<const float2*>(a.qmma_x + units_bytes(n, cols));
  // The row this thread copies (four threads per row; rows past the end copy the last one) and
  // the scale-table entries it forms: row tid % 64, units tid / 64 + 4k of each chunk.
  const int copy_row = threadIdx.x / 4, copy_part = threadIdx.x % 4;
  const int64_t copy_gr = row_block0 + copy_row < total ? row_block0 + copy_row : total - 1;
  const uint8_t* w_row = mat_row(a, copy_gr).w;
  const int tab_row = threadIdx.x % kTileRows, tab_unit0 = threadIdx.x / kTileRows;

  pdl_enter();  // the scratch is the quantize kernel's output
  stage_chunk<T>(smem, 0, n_units, n_pad, tok_block0, xq, xf, w_row, copy_row, copy_part);
  cp_async_commit();

  float stack[kElems][kQmmaStepLevels];
  float items[kItemLevels][kElems];
#pragma unroll
  for (int e = 0; e < kElems; ++e) {
#pragma unroll
    for (int k = 0; k < kQmmaStepLevels; ++k) stack[e][k] = 0.0f;
  }
#pragma unroll
  for (int l = 0; l < kItemLevels; ++l) {
#pragma unroll
    for (int e = 0; e < kElems; ++e) items[l][e] = 0.0f;
  }
  int item = 0;  // items pushed so far: item % 32 in the step, item / 32 the step
  float v[kElems];
  for (int c = 0; c < n_chunks; ++c) {
    uint8_t* st = smem + (c & 1) * L::kBytes;
    if (c + 1 < n_chunks) {  // the next chunk's copies go out before this one is computed
      stage_chunk<T>(smem + ((c + 1) & 1) * L::kBytes, c + 1, n_units, n_pad, tok_block0, xq, xf, w_row, copy_row,
                     copy_part);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    // The chunk's scale table, from the staged rows.
    const int u0 = c * kChunkUnits;
    for (int k = tab_unit0; k < kChunkUnits; k += kThreads / kTileRows) {
      if (u0 + k < n_units) {
        reinterpret_cast<float2*>(st + L::kTab)[k * kTileRows + tab_row] =
            pack_scale(unit_scale<T>(st + L::kW + tab_row * L::kWPitch, k), T == DType::Q6_K);
      }
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kChunkUnits / kItemUnits; ++j) {
      const int k0 = j * kItemUnits;
#pragma unroll
      for (int e = 0; e < kElems; ++e) v[e] = 0.0f;
      if (u0 + k0 < n_units) {  // uniform; an item past the row is a +0 leaf, as the GEMV's idle lanes
        float c0[kElems], c1[kElems], pair[kElems];
#pragma unroll
        for (int k = 0; k < kItemUnits; ++k) {
          float cu[kElems];
          if (u0 + k0 + k < n_units) {
            unit_contributions<T, kXB>(st, tok_w, wrow, g, p, k0 + k, cu);
          } else {  // a legacy row's partial item: a zero leaf (gemv_items.cuh item_tree)
#pragma unroll
            for (int e = 0; e < kElems; ++e) cu[e] = 0.0f;
          }
#pragma unroll
          for (int e = 0; e < kElems; ++e) {
            if ((k & 1) == 0) c0[e] = cu[e];
            else c1[e] = cu[e];
          }
          if (k == 1) {
#pragma unroll
            for (int e = 0; e < kElems; ++e) pair[e] = __fadd_rn(c0[e], c1[e]);
          } else if (k == 3) {
#pragma unroll
            for (int e = 0; e < kElems; ++e) v[e] = __fadd_rn(pair[e], __fadd_rn(c0[e], c1[e]));
          }
        }
      }
      push_item(items, v, item & 31);
      if ((item & 31) == 31) push_step(stack, v, item >> 5);
      ++item;
    }
    __syncthreads();  // the stage is refilled two chunks on
  }
  // The last step's missing items are +0 leaves.
  while ((item & 31) != 0) {
#pragma unroll
    for (int e = 0; e < kElems; ++e) v[e] = 0.0f;
    push_item(items, v, item & 31);
    if ((item & 31) == 31) push_step(stack, v, item >> 5);
    ++item;
  }
  const int n_steps = item >> 5;
#pragma unroll
  for (int e = 0; e < kElems; ++e) {
    // gemv_tile.cuh counter_close over kQmmaStepLevels levels
    float acc = 0.0f;
    bool have = false;
#pragma unroll
    for (int k = 0; k < kQmmaStepLevels; ++k) {
      if ((n_steps >> k) & 1) {
        acc = have ? __fadd_rn(stack[e][k], acc) : stack[e][k];
        have = true;
      }
    }
    const int t = e >> 2, f = e & 3;
    const int64_t tok = tok_block0 + tok_w + g + 8 * (f >> 1), gr = row_block0 + wrow + 8 * t + 2 * p + (f & 1);
    if (tok < n && gr < total) {
      const MatRow row = mat_row(a, gr);
      row.y[tok * row.rows + row.r] = acc;
      fused_residual(a, tok, row.r, acc);
    }
  }
}

template <DType T, int kXB>
void launch_typed(const MatmulArgs& a, const LaunchEnv& env) {
  const int64_t row_blocks = (a.total_rows() + kTileRows - 1) / kTileRows;
  const int64_t tok_blocks = (a.n + kTileTokens - 1) / kTileTokens;
  TERN_CHECK_MSG(tok_blocks <= 65535, "qmma: too many activation rows for one launch");
  launch_kernel(env, qmma_kernel<T, kXB>, dim3(static_cast<unsigned>(row_blocks), static_cast<unsigned>(tok_blocks)),
                kThreads, StageLayout<T>::kTotal, a);
}

template <DType T>
void allow_smem(int max_smem_bytes) {
  if (StageLayout<T>::kTotal > max_smem_bytes) return;  // qmma_takes declines the type there
  TERN_CUDA_CHECK(cudaFuncSetAttribute(qmma_kernel<T, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, StageLayout<T>::kTotal));
  TERN_CUDA_CHECK(cudaFuncSetAttribute(qmma_kernel<T, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, StageLayout<T>::kTotal));
}

int stage_bytes(DType t) {
  switch (t) {
    case DType::Q4_0: return StageLayout<DType::Q4_0>::kTotal;
    case DType::Q4_1: return StageLayout<DType::Q4_1>::kTotal;
    case DType::Q8_0: return StageLayout<DType::Q8_0>::kTotal;
    case DType::Q4_K: return StageLayout<DType::Q4_K>::kTotal;
    case DType::Q5_K: return StageLayout<DType::Q5_K>::kTotal;
    case DType::Q6_K: return StageLayout<DType::Q6_K>::kTotal;
    default: return 0;
  }
}

template <int kXB>
void launch_product(const MatmulArgs& a, const LaunchEnv& env) {
  switch (a.dtype) {
    case DType::Q4_0: launch_typed<DType::Q4_0, kXB>(a, env); break;
    case DType::Q4_1: launch_typed<DType::Q4_1, kXB>(a, env); break;
    case DType::Q8_0: launch_typed<DType::Q8_0, kXB>(a, env); break;
    case DType::Q4_K: launch_typed<DType::Q4_K, kXB>(a, env); break;
    case DType::Q5_K: launch_typed<DType::Q5_K, kXB>(a, env); break;
    case DType::Q6_K: launch_typed<DType::Q6_K, kXB>(a, env); break;
    default: TERN_CHECK_MSG(false, "qmma: unsupported weight type");
  }
}

}  // namespace

size_t qmma_scratch_bytes(int64_t n, int64_t cols) {
  return units_bytes(n, cols) + static_cast<size_t>(padded_tokens(n)) * static_cast<size_t>(cols / 32) * sizeof(float2);
}

bool qmma_supports(DType t) {
  switch (t) {
    case DType::Q4_0: case DType::Q4_1: case DType::Q8_0: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

bool qmma_takes(const MatmulArgs& a) {
  if (a.qmma_x == nullptr || a.n < 1 || a.tail_mat != 0 || !qmma_supports(a.dtype)) return false;
  if ((a.n + kTileTokens - 1) / kTileTokens > 65535) return false;  // the grid's y dimension
  if (a.x_bits != 8 && a.x_bits != 16) return false;
  if (a.cols % 32 != 0 || (a.cols + gemv_items::kStepElems - 1) / gemv_items::kStepElems > kQmmaMaxSteps) return false;
  if (stage_bytes(a.dtype) > a.max_smem_bytes) return false;  // e.g. q8_0 on a 99 KiB device
  for (int m = 0; m < a.n_mats; ++m) {  // the stages copy rows by 16, 4 or 2 bytes
    if (reinterpret_cast<uintptr_t>(a.w[m]) % 2 != 0 || a.w_stride_bytes[m] % 2 != 0) return false;
  }
  return gemv_quant_takes(a);  // n = 1 runs the GEMV: the same arithmetic only where it takes it
}

bool launch_matmul_qmma(const MatmulArgs& fused, const LaunchEnv& env) {
  if (!qmma_takes(fused)) return false;
  MatmulArgs a = fused;
  if (a.fuse.prologue != GemvPrologue::kNone) {
    launch_prologue_op(a, env);
    a.fuse.prologue = GemvPrologue::kNone;
    a.fuse.write_x = 0;
  }
  const int64_t units = padded_tokens(a.n) * (a.cols / 32);
  uint8_t* xq = a.qmma_x;
  float2* xf = reinterpret_cast<float2*>(xq + units_bytes(a.n, a.cols));
  const unsigned blocks = static_cast<unsigned>((units + 255) / 256);
  if (a.x_bits == 16) {
    launch_kernel(env, qmma_quantize_kernel<2>, dim3(blocks), 256, 0, a.x, a.n, static_cast<int>(a.cols / 32), xq, xf);
    launch_product<2>(a, env);
  } else {
    launch_kernel(env, qmma_quantize_kernel<1>, dim3(blocks), 256, 0, a.x, a.n, static_cast<int>(a.cols / 32), xq, xf);
    launch_product<1>(a, env);
  }
  if (a.fuse.glu_out != nullptr) launch_glu_after(a, env);
  return true;
}

void init_qmma(int max_smem_bytes) {
  allow_smem<DType::Q4_0>(max_smem_bytes);
  allow_smem<DType::Q4_1>(max_smem_bytes);
  allow_smem<DType::Q8_0>(max_smem_bytes);
  allow_smem<DType::Q4_K>(max_smem_bytes);
  allow_smem<DType::Q5_K>(max_smem_bytes);
  allow_smem<DType::Q6_K>(max_smem_bytes);
}

}  // namespace tern::cuda
