// Tensor-core quantized products with the GEMV's bits (matmul_qmma.h).
#include "backends/cuda/matmul_qmma.h"

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

// Scratch layout: the quantized units, then one float2 {d, float(s)} per unit.
__host__ __device__ inline size_t units_bytes(int64_t n, int64_t cols) { return static_cast<size_t>(n) * static_cast<size_t>(cols / 32) * kUnitBytes; }

// --- activations --------------------------------------------------------------------------------
//
// Unit i (token i / U, unit i % U) of x, stored at unit-major index (i % U) * n + i / U, quantized as gemv_tile.cuh quantize_tile does (the same
// amax, q and int sum), stored as the mma fragments want it: the unit's low-byte plane lo[0..8)
// and high-byte plane hi[0..8) (words of four elements; at 8 bits lo holds q itself and hi is
// zero), piece p (the quad lane p of a warp reads it) = {lo[p], lo[p + 4], hi[p], hi[p + 4]}:
// elements 4p .. 4p + 3 and 16 + 4p .. 16 + 4p + 3 of both planes.
template <int kXB>
__global__ void __launch_bounds__(256) qmma_quantize_kernel(const float* __restrict__ x, int64_t n, int n_units,
                                                            uint8_t* __restrict__ xq, float2* __restrict__ xf) {
  const int64_t total_units = n * n_units;
  pdl_wait();  // x is the predecessor's output, and a previous product may still read the scratch
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total_units) {
    const float* src = x + i * 32;
    float v[32];
    if ((reinterpret_cast<uintptr_t>(src) & 15) == 0) {
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
    const int64_t at = (i % n_units) * n + i / n_units;
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

__device__ __forceinline__ uint32_t ld32(const uint8_t* p) { return __ldg(reinterpret_cast<const uint32_t*>(p)); }
__device__ __forceinline__ uint32_t ld32_a2(const uint8_t* p) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  return static_cast<uint32_t>(__ldg(h)) | static_cast<uint32_t>(__ldg(h + 1)) << 16;
}
__device__ __forceinline__ float ld_half(const uint8_t* p) {
  return half_bits_to_float(__ldg(reinterpret_cast<const uint16_t*>(p)));
}

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
    r.sa = static_cast<int8_t>(__ldg(blk + 192 + 8 * hh + 2 * k));
    r.sb = static_cast<int8_t>(__ldg(blk + 192 + 8 * hh + 2 * k + 1));
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

// The block's scale table: every (unit, row) of kTabUnits units of its 64 rows, formed once per
// block by all its threads (a weight row's scales are read by 16 lanes of 2 warps), as two
// float2 per (unit, row pair).
constexpr int kTabUnits = 64;

// What a unit's contributions read from memory: the A fragments of the warp's tokens g and
// g + 8, their scales {d, float(s)}, and the B words of its two n8 tiles' rows. Loaded one unit
// ahead of their use (qmma_kernel), so a warp's loads are in flight while it computes.
struct UnitLoads {
  uint4 q0, q1;
  float2 f0, f1;
  uint32_t b[2][2];
};

template <DType T>
__device__ __forceinline__ void load_unit(const uint8_t* const (&wb)[2], const uint8_t* const (&xa)[2],
                                          const float2* const (&xs)[2], int64_t n, int u, int p, UnitLoads& l) {
  l.q0 = __ldg(reinterpret_cast<const uint4*>(xa[0] + static_cast<size_t>(u) * n * kUnitBytes));
  l.q1 = __ldg(reinterpret_cast<const uint4*>(xa[1] + static_cast<size_t>(u) * n * kUnitBytes));
  l.f0 = __ldg(xs[0] + static_cast<size_t>(u) * n);
  l.f1 = __ldg(xs[1] + static_cast<size_t>(u) * n);
#pragma unroll
  for (int t = 0; t < 2; ++t) b_words<T>(wb[t], u, p, l.b[t][0], l.b[t][1]);
}

template <DType T, int kXB>
__device__ __forceinline__ void unit_contributions(const UnitLoads& l, const float4 (*tab)[kTileRows / 2], int wrow,
                                                   int u, int p, float (&c)[kElems]) {
  // A fragments: rows g (q0) and g + 8 (q1); low plane, then high plane.
  const uint32_t A[8] = {l.q0.x, l.q1.x, l.q0.y, l.q1.y, l.q0.z, l.q1.z, l.q0.w, l.q1.w};
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    UnitDots<T, kXB> r;
    unit_dots<T, kXB>(A, l.b[t][0], l.b[t][1], r);
    // rows 8t + 2p and 8t + 2p + 1 of the warp's tile: one 16-byte entry pair
    const float4 e = tab[u % kTabUnits][(wrow + 8 * t + 2 * p) / 2];
    const UnitScale s0 = unpack_scale(make_float2(e.x, e.y), T == DType::Q6_K);
    const UnitScale s1 = unpack_scale(make_float2(e.z, e.w), T == DType::Q6_K);
    c[4 * t + 0] = unit_c<T, kXB>(s0, l.f0.x, l.f0.y, r, 0);
    c[4 * t + 1] = unit_c<T, kXB>(s1, l.f0.x, l.f0.y, r, 1);
    c[4 * t + 2] = unit_c<T, kXB>(s0, l.f1.x, l.f1.y, r, 2);
    c[4 * t + 3] = unit_c<T, kXB>(s1, l.f1.x, l.f1.y, r, 3);
  }
}

template <DType T, int kXB>
__global__ void __launch_bounds__(kThreads) qmma_kernel(const MatmulArgs a) {
  const int cols = static_cast<int>(a.cols), n_units = cols / 32;
  const int n_steps = (n_units + kStepUnits - 1) / kStepUnits;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, p = lane & 3;
  const int64_t n = a.n, total = a.total_rows();
  const int64_t tok0 = static_cast<int64_t>(blockIdx.y) * kTileTokens + 16 * (warp % kWarpsM);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kTileRows + 16 * (warp / kWarpsM);
  // Rows and tokens past the ends read the last one's data (results not stored).
  auto clamp_row = [&](int64_t r) { return r < total ? r : total - 1; };
  auto clamp_tok = [&](int64_t i) { return i < n ? i : n - 1; };
  const uint8_t* wb[2];  // B rows: 8t + g
#pragma unroll
  for (int t = 0; t < 2; ++t) wb[t] = mat_row(a, clamp_row(row0 + 8 * t + g)).w;
  // The scale table: thread tid fills row tid % 64 of the block's tile, units tid / 64 + 4k.
  __shared__ float4 tab[kTabUnits][kTileRows / 2];
  const int tab_row = threadIdx.x % kTileRows, tab_unit0 = threadIdx.x / kTileRows;
  const uint8_t* tab_w = mat_row(a, clamp_row(static_cast<int64_t>(blockIdx.x) * kTileRows + tab_row)).w;
  float2* tab_entries = reinterpret_cast<float2*>(&tab[0][0]);
  const int wrow = 16 * (warp / kWarpsM);  // the warp's first row in the block's tile
  const uint8_t* xq = a.qmma_x;
  const float2* xf = reinterpret_cast<const float2*>(a.qmma_x + units_bytes(n, cols));
  const uint8_t* xa[2];
  const float2* xs[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t tok = clamp_tok(tok0 + g + 8 * h);
    xa[h] = xq + static_cast<size_t>(tok) * kUnitBytes + 16 * p;
    xs[h] = xf + tok;
  }
  pdl_enter();  // the scratch is the quantize kernel's output
  // Units past the row load the last unit (never used): every load stays inside the row.
  UnitLoads next;
  load_unit<T>(wb, xa, xs, n, 0, p, next);

  float stack[kElems][kQmmaStepLevels];
#pragma unroll
  for (int e = 0; e < kElems; ++e) {
#pragma unroll
    for (int k = 0; k < kQmmaStepLevels; ++k) stack[e][k] = 0.0f;
  }
  for (int s = 0; s < n_steps; ++s) {
    float items[kItemLevels][kElems];  // the item counter's stored subtrees
#pragma unroll
    for (int l = 0; l < kItemLevels; ++l) {
#pragma unroll
      for (int e = 0; e < kElems; ++e) items[l][e] = 0.0f;
    }
    float v[kElems];
    for (int i = 0; i < kStepUnits / kItemUnits; ++i) {
      const int u0 = s * kStepUnits + i * kItemUnits;
      if (u0 % kTabUnits == 0) {  // uniform: refill the scale table for units u0 .. u0 + 63
        __syncthreads();
        for (int k = tab_unit0; k < kTabUnits; k += kThreads / kTileRows) {
          if (u0 + k < n_units) {
            tab_entries[k * kTileRows + tab_row] = pack_scale(unit_scale<T>(tab_w, u0 + k), T == DType::Q6_K);
          }
        }
        __syncthreads();
      }
#pragma unroll
      for (int e = 0; e < kElems; ++e) v[e] = 0.0f;
      if (u0 < n_units) {  // uniform; an item past the row is a +0 leaf, as the GEMV's idle lanes
        float c0[kElems], c1[kElems], pair[kElems];
#pragma unroll
        for (int k = 0; k < kItemUnits; ++k) {
          float cu[kElems];
          if (u0 + k < n_units) {
            const UnitLoads cur = next;
            load_unit<T>(wb, xa, xs, n, min(u0 + k + 1, n_units - 1), p, next);
            unit_contributions<T, kXB>(cur, tab, wrow, u0 + k, p, cu);
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
      // Push item i: merge with the stored subtrees of its trailing one bits, store at the first
      // zero bit. After item 31, v is the step's sum.
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
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      bool placed = false;
#pragma unroll
      for (int k = 0; k < kQmmaStepLevels; ++k) {
        if (!placed) {
          if ((s >> k) & 1) {
            v[e] = __fadd_rn(stack[e][k], v[e]);
          } else {
            stack[e][k] = v[e];
            placed = true;
          }
        }
      }
    }
  }
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
    const int64_t tok = tok0 + g + 8 * (f >> 1), gr = row0 + 8 * t + 2 * p + (f & 1);
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
                kThreads, 0, a);
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

// The byte alignment b_words / unit_scale need of a row of type t.
size_t row_alignment(DType t) {
  return t == DType::Q4_1 || t == DType::Q4_K || t == DType::Q5_K ? 4 : 2;
}

}  // namespace

size_t qmma_scratch_bytes(int64_t n, int64_t cols) {
  return units_bytes(n, cols) + static_cast<size_t>(n) * static_cast<size_t>(cols / 32) * sizeof(float2);
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
  if (a.x_bits != 8 && a.x_bits != 16) return false;
  if (a.cols % 32 != 0 || (a.cols + gemv_items::kStepElems - 1) / gemv_items::kStepElems > kQmmaMaxSteps) return false;
  const size_t align = row_alignment(a.dtype);
  for (int m = 0; m < a.n_mats; ++m) {
    if (reinterpret_cast<uintptr_t>(a.w[m]) % align != 0 || a.w_stride_bytes[m] % align != 0) return false;
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
  const int64_t units = a.n * (a.cols / 32);
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

}  // namespace tern::cuda
