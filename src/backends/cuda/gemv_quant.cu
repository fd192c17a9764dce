// Quantized GEMV/GEMM on GGUF blocks: q4_0, q4_1, q8_0, q4_k, q5_k, q6_k (gemv.h has the design
// and the canonical summation order every kernel here follows).
//
// Shared memory of a block:
//   xq     [nt][n_groups * kGroupPitch] int8: the activation tile, 64 elements (two units) per
//          group, each group padded to 80 bytes so 16-byte loads of 8 lanes hit distinct banks
//   xd, xs [nt][n_units]: per-unit activation scale (float) and sum of the int8 values (int)
//   stage  [warps][2][stage_pitch]: each warp's double-buffered copy of its weight row's step
// A staged step starts at byte (src & 15) of its buffer, so the 16-byte cp.async copies stay
// aligned whatever the row's alignment; the ragged head and tail go through 2-byte copies.
#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/gemv.h"

namespace tern::cuda {
namespace {

constexpr int kStepElems = 2048;
constexpr int kStepUnits = kStepElems / 32;
constexpr int kGroupPitch = 80;
constexpr int kLevels = 6;  // binary counter depth: up to 2^6 - 1 steps (cols < 129024)
constexpr int kMaxSteps = (1 << kLevels) - 1;
constexpr int kStages = 4;  // weight steps in flight per warp: three loading while one computes

template <DType T>
struct QType;
template <> struct QType<DType::Q4_0> { static constexpr int kBlockElems = 32, kBlockBytes = 18; };
template <> struct QType<DType::Q4_1> { static constexpr int kBlockElems = 32, kBlockBytes = 20; };
template <> struct QType<DType::Q8_0> { static constexpr int kBlockElems = 32, kBlockBytes = 34; };
template <> struct QType<DType::Q4_K> { static constexpr int kBlockElems = 256, kBlockBytes = 144; };
template <> struct QType<DType::Q5_K> { static constexpr int kBlockElems = 256, kBlockBytes = 176; };
template <> struct QType<DType::Q6_K> { static constexpr int kBlockElems = 256, kBlockBytes = 210; };

template <DType T>
constexpr int step_bytes() {
  return kStepElems / QType<T>::kBlockElems * QType<T>::kBlockBytes;
}

constexpr int round16(int b) { return (b + 15) / 16 * 16; }

struct SmemLayout {
  int row_pitch;    // bytes of one quantized activation row
  int d_off, s_off, stage_off;
  int stage_pitch;  // bytes of one stage buffer
  int total;
};

template <DType T>
__host__ __device__ SmemLayout smem_layout(int cols, int nt_alloc) {
  SmemLayout l;
  const int n_units = cols / 32;
  l.row_pitch = (n_units + 1) / 2 * kGroupPitch;
  l.d_off = nt_alloc * l.row_pitch;
  l.s_off = l.d_off + round16(nt_alloc * n_units * 4);
  l.stage_off = l.s_off + round16(nt_alloc * n_units * 4);
  // + 32: the up-to-14-byte alignment shift plus the one-word overread of load_words_2aligned.
  l.stage_pitch = round16(step_bytes<T>() + 32);
  l.total = l.stage_off + kGemvWarps * kStages * l.stage_pitch;
  return l;
}

// --- cp.async staging -------------------------------------------------------------------------

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// The warp copies [src, src + len) (src and len even) to buf + (src & 15): 16-byte cp.async for
// the aligned middle, plain 2-byte copies for the ragged ends. Caller commits.
__device__ __forceinline__ void stage_copy(uint8_t* buf, const uint8_t* src, int len, int lane) {
  const uintptr_t s = reinterpret_cast<uintptr_t>(src);
  uint8_t* dst = buf + (s & 15);
  const uintptr_t a0 = (s + 15) & ~uintptr_t{15};
  const uintptr_t a1 = (s + len) & ~uintptr_t{15};
  int head_bytes = len, tail_begin = len;
  if (a0 < a1) {
    head_bytes = static_cast<int>(a0 - s);
    tail_begin = static_cast<int>(a1 - s);
    const int n16 = static_cast<int>((a1 - a0) / 16);
    for (int i = lane; i < n16; i += 32) cp_async16(dst + head_bytes + 16 * i, src + head_bytes + 16 * i);
  }
  for (int i = lane; i < head_bytes / 2; i += 32) {
    reinterpret_cast<uint16_t*>(dst)[i] = reinterpret_cast<const uint16_t*>(src)[i];
  }
  for (int i = lane; i < (len - tail_begin) / 2; i += 32) {
    reinterpret_cast<uint16_t*>(dst + tail_begin)[i] = reinterpret_cast<const uint16_t*>(src + tail_begin)[i];
  }
}

// --- activation tile ---------------------------------------------------------------------------

struct XTile {
  const uint8_t* q;
  const float* d;
  const int* s;
  int row_pitch;
  int n_units;
};

// The 64 int8 values of group g (units 2g, 2g + 1) of tile row j, as 16 words.
__device__ __forceinline__ void load_x_group(const XTile& x, int j, int g, uint32_t (&X)[16]) {
  const uint4* p = reinterpret_cast<const uint4*>(x.q + j * x.row_pitch + g * kGroupPitch);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint4 v = p[k];
    X[4 * k] = v.x;
    X[4 * k + 1] = v.y;
    X[4 * k + 2] = v.z;
    X[4 * k + 3] = v.w;
  }
}

__device__ __forceinline__ int dp4a(uint32_t a, uint32_t b, int c) {
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
}

// --- canonical unit contributions (gemv.h, step 1) ---------------------------------------------

// x = d * q:                     c = (dw * dx) * isum
__device__ __forceinline__ float unit_scaled(float dw, float dx, int isum) {
  return __fmul_rn(__fmul_rn(dw, dx), static_cast<float>(isum));
}
// x = d * q + m:                 c = (dw * dx) * isum + (mw * dx) * xsum
__device__ __forceinline__ float unit_affine(float dw, float mw, float dx, int isum, int xsum) {
  return __fadd_rn(__fmul_rn(__fmul_rn(dw, dx), static_cast<float>(isum)),
                   __fmul_rn(__fmul_rn(mw, dx), static_cast<float>(xsum)));
}
// x = dl * q - ml (k-quants):    c = (dl * dx) * isum - (ml * dx) * xsum
__device__ __forceinline__ float unit_kmin(float dl, float ml, float dx, int isum, int xsum) {
  return __fsub_rn(__fmul_rn(__fmul_rn(dl, dx), static_cast<float>(isum)),
                   __fmul_rn(__fmul_rn(ml, dx), static_cast<float>(xsum)));
}

// Sum of v over both units of a lane item; c1 only exists when has_u1.
__device__ __forceinline__ float pair_sum(float c0, float c1, bool has_u1) { return has_u1 ? __fadd_rn(c0, c1) : c0; }

// Scale and min j (0..7) of a q4_k / q5_k block from its 12 packed bytes in words h1..h3.
__device__ __forceinline__ void scale_min_k4(uint32_t h1, uint32_t h2, uint32_t h3, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = byte_of3(h1, h2, h3, j) & 63;
    *m = byte_of3(h1, h2, h3, j + 4) & 63;
  } else {
    *sc = (byte_of3(h1, h2, h3, j + 4) & 0x0f) | ((byte_of3(h1, h2, h3, j - 4) >> 6) << 4);
    *m = (byte_of3(h1, h2, h3, j + 4) >> 4) | ((byte_of3(h1, h2, h3, j) >> 6) << 4);
  }
}

// --- per-type lane items: units u0 = 2g, u1 = 2g + 1, at lane's place in the staged step --------

template <DType T>
__device__ void item_dot(const uint8_t* wstep, int lane, bool has_u1, const XTile& x, int g, int nt,
                         float (&v)[kGemvMaxXRows]);

// Two 18-byte blocks: d, then 16 bytes of nibbles (element i low, i + 16 high).
template <>
__device__ void item_dot<DType::Q4_0>(const uint8_t* wstep, int lane, bool has_u1, const XTile& x, int g, int nt,
                                      float (&v)[kGemvMaxXRows]) {
  uint32_t w[9];
  load_words_2aligned<9>(wstep + lane * 36, w);
  const float d0 = half_bits_to_float(w[0] & 0xffffu), d1 = half_bits_to_float(w[4] >> 16);
  uint32_t q0[4], q1[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    q0[i] = __funnelshift_r(w[i], w[i + 1], 16);
    q1[i] = w[5 + i];
  }
#pragma unroll
  for (int j = 0; j < kGemvMaxXRows; ++j) {
    if (j >= nt) break;
    uint32_t X[16];
    load_x_group(x, j, g, X);
    const int base = j * x.n_units + 2 * g;
    int s0 = 0, s1 = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s0 = dp4a(q0[i] & 0x0f0f0f0fu, X[i], s0);
      s0 = dp4a((q0[i] >> 4) & 0x0f0f0f0fu, X[4 + i], s0);
      s1 = dp4a(q1[i] & 0x0f0f0f0fu, X[8 + i], s1);
      s1 = dp4a((q1[i] >> 4) & 0x0f0f0f0fu, X[12 + i], s1);
    }
    const float c0 = unit_scaled(d0, x.d[base], s0 - 8 * x.s[base]);
    const float c1 = has_u1 ? unit_scaled(d1, x.d[base + 1], s1 - 8 * x.s[base + 1]) : 0.0f;
    v[j] = pair_sum(c0, c1, has_u1);
  }
}

// Two 20-byte blocks: d, m, 16 bytes of nibbles.
template <>
__device__ void item_dot<DType::Q4_1>(const uint8_t* wstep, int lane, bool has_u1, const XTile& x, int g, int nt,
                                      float (&v)[kGemvMaxXRows]) {
  uint32_t w[10];
  load_words_2aligned<10>(wstep + lane * 40, w);
  const float d0 = half_bits_to_float(w[0] & 0xffffu), m0 = half_bits_to_float(w[0] >> 16);
  const float d1 = half_bits_to_float(w[5] & 0xffffu), m1 = half_bits_to_float(w[5] >> 16);
#pragma unroll
  for (int j = 0; j < kGemvMaxXRows; ++j) {
    if (j >= nt) break;
    uint32_t X[16];
    load_x_group(x, j, g, X);
    const int base = j * x.n_units + 2 * g;
    int s0 = 0, s1 = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s0 = dp4a(w[1 + i] & 0x0f0f0f0fu, X[i], s0);
      s0 = dp4a((w[1 + i] >> 4) & 0x0f0f0f0fu, X[4 + i], s0);
      s1 = dp4a(w[6 + i] & 0x0f0f0f0fu, X[8 + i], s1);
      s1 = dp4a((w[6 + i] >> 4) & 0x0f0f0f0fu, X[12 + i], s1);
    }
    const float c0 = unit_affine(d0, m0, x.d[base], s0, x.s[base]);
    const float c1 = has_u1 ? unit_affine(d1, m1, x.d[base + 1], s1, x.s[base + 1]) : 0.0f;
    v[j] = pair_sum(c0, c1, has_u1);
  }
}

// Two 34-byte blocks: d, 32 int8.
template <>
__device__ void item_dot<DType::Q8_0>(const uint8_t* wstep, int lane, bool has_u1, const XTile& x, int g, int nt,
                                      float (&v)[kGemvMaxXRows]) {
  uint32_t w[17];
  load_words_2aligned<17>(wstep + lane * 68, w);
  const float d0 = half_bits_to_float(w[0] & 0xffffu), d1 = half_bits_to_float(w[8] >> 16);
  uint32_t q0[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) q0[i] = __funnelshift_r(w[i], w[i + 1], 16);
#pragma unroll
  for (int j = 0; j < kGemvMaxXRows; ++j) {
    if (j >= nt) break;
    uint32_t X[16];
    load_x_group(x, j, g, X);
    const int base = j * x.n_units + 2 * g;
    int s0 = 0, s1 = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      s0 = dp4a(q0[i], X[i], s0);
      s1 = dp4a(w[9 + i], X[8 + i], s1);
    }
    const float c0 = unit_scaled(d0, x.d[base], s0);
    const float c1 = has_u1 ? unit_scaled(d1, x.d[base + 1], s1) : 0.0f;
    v[j] = pair_sum(c0, c1, has_u1);
  }
}

// q4_k / q5_k share everything but the fifth bit. A 256-element block is four lane items; item p
// covers sub-blocks 2p (low nibbles of qs[32p .. 32p + 32)) and 2p + 1 (high nibbles).
template <bool kFive>
__device__ __forceinline__ void item_dot_k45(const uint8_t* wstep, int lane, const XTile& x, int g, int nt,
                                             float (&v)[kGemvMaxXRows]) {
  constexpr int kBlockBytes = kFive ? 176 : 144;
  constexpr int kQsOffset = kFive ? 48 : 16;
  const int sb = lane >> 2, p = lane & 3;
  const uint8_t* b = wstep + sb * kBlockBytes;
  uint32_t h[4], q[8];
  load_words_2aligned<4>(b, h);
  load_words_2aligned<8>(b + kQsOffset + 32 * p, q);
  uint32_t lo[8], hi[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    lo[i] = q[i] & 0x0f0f0f0fu;
    hi[i] = (q[i] >> 4) & 0x0f0f0f0fu;
  }
  if constexpr (kFive) {
    uint32_t qh[8];
    load_words_2aligned<8>(b + 16, qh);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      lo[i] |= ((qh[i] >> (2 * p)) & 0x01010101u) << 4;
      hi[i] |= ((qh[i] >> (2 * p + 1)) & 0x01010101u) << 4;
    }
  }
  const float d = half_bits_to_float(h[0] & 0xffffu), dmin = half_bits_to_float(h[0] >> 16);
  int sc0, m0, sc1, m1;
  scale_min_k4(h[1], h[2], h[3], 2 * p, &sc0, &m0);
  scale_min_k4(h[1], h[2], h[3], 2 * p + 1, &sc1, &m1);
  const float dl0 = __fmul_rn(d, static_cast<float>(sc0)), ml0 = __fmul_rn(dmin, static_cast<float>(m0));
  const float dl1 = __fmul_rn(d, static_cast<float>(sc1)), ml1 = __fmul_rn(dmin, static_cast<float>(m1));
#pragma unroll
  for (int j = 0; j < kGemvMaxXRows; ++j) {
    if (j >= nt) break;
    uint32_t X[16];
    load_x_group(x, j, g, X);
    const int base = j * x.n_units + 2 * g;
    int s0 = 0, s1 = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      s0 = dp4a(lo[i], X[i], s0);
      s1 = dp4a(hi[i], X[8 + i], s1);
    }
    v[j] = __fadd_rn(unit_kmin(dl0, ml0, x.d[base], s0, x.s[base]),
                     unit_kmin(dl1, ml1, x.d[base + 1], s1, x.s[base + 1]));
  }
}

template <>
__device__ void item_dot<DType::Q4_K>(const uint8_t* wstep, int lane, bool, const XTile& x, int g, int nt,
                                      float (&v)[kGemvMaxXRows]) {
  item_dot_k45<false>(wstep, lane, x, g, nt, v);
}

template <>
__device__ void item_dot<DType::Q5_K>(const uint8_t* wstep, int lane, bool, const XTile& x, int g, int nt,
                                      float (&v)[kGemvMaxXRows]) {
  item_dot_k45<true>(wstep, lane, x, g, nt, v);
}

// q6_k: item p covers elements 64p .. 64p + 63 of the block: low 4 bits from ql[64h .. 64h + 64)
// (h = p / 2; nibble p % 2), high 2 bits from qh[32h .. 32h + 32), and four int8 sub-block
// scales. A unit's integer dot is sc_a * dot_a + sc_b * dot_b over its two 16-element halves,
// each with q - 32 (|value| < 2^24, exact in float).
template <>
__device__ void item_dot<DType::Q6_K>(const uint8_t* wstep, int lane, bool, const XTile& x, int g, int nt,
                                      float (&v)[kGemvMaxXRows]) {
  const int sb = lane >> 2, p = lane & 3, hh = p >> 1, shift = 4 * (p & 1);
  const uint8_t* b = wstep + sb * 210;
  uint32_t L[16], H[8], S[4];
  load_words_2aligned<16>(b + 64 * hh, L);
  load_words_2aligned<8>(b + 128 + 32 * hh, H);
  load_words_2aligned<4>(b + 192, S);
  const float d = half_bits_to_float(load_u16(b + 208));
  const uint32_t sw = p == 0 ? S[0] : (p == 1 ? S[1] : (p == 2 ? S[2] : S[3]));
  const int sc0 = static_cast<int8_t>(sw & 0xffu), sc1 = static_cast<int8_t>((sw >> 8) & 0xffu);
  const int sc2 = static_cast<int8_t>((sw >> 16) & 0xffu), sc3 = static_cast<int8_t>(sw >> 24);
  uint32_t q0[8], q1[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    q0[i] = ((L[i] >> shift) & 0x0f0f0f0fu) | (((H[i] >> shift) & 0x03030303u) << 4);
    q1[i] = ((L[8 + i] >> shift) & 0x0f0f0f0fu) | (((H[i] >> (shift + 2)) & 0x03030303u) << 4);
  }
#pragma unroll
  for (int j = 0; j < kGemvMaxXRows; ++j) {
    if (j >= nt) break;
    uint32_t X[16];
    load_x_group(x, j, g, X);
    const int base = j * x.n_units + 2 * g;
    int a0 = 0, b0 = 0, a1 = 0, b1 = 0, xa0 = 0, xb0 = 0, xa1 = 0, xb1 = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      a0 = dp4a(q0[i], X[i], a0);
      xa0 = dp4a(0x01010101u, X[i], xa0);
      b0 = dp4a(q0[4 + i], X[4 + i], b0);
      xb0 = dp4a(0x01010101u, X[4 + i], xb0);
      a1 = dp4a(q1[i], X[8 + i], a1);
      xa1 = dp4a(0x01010101u, X[8 + i], xa1);
      b1 = dp4a(q1[4 + i], X[12 + i], b1);
      xb1 = dp4a(0x01010101u, X[12 + i], xb1);
    }
    const int i0 = sc0 * (a0 - 32 * xa0) + sc1 * (b0 - 32 * xb0);
    const int i1 = sc2 * (a1 - 32 * xa1) + sc3 * (b1 - 32 * xb1);
    v[j] = __fadd_rn(unit_scaled(d, x.d[base], i0), unit_scaled(d, x.d[base + 1], i1));
  }
}

// --- the kernel ---------------------------------------------------------------------------------

// Quantizes the block's activation tile into shared memory: one thread per 32-element unit, so
// the loads of a unit are independent and in flight together. amax and the int sum do not
// depend on the order they are formed in.
__device__ __forceinline__ void quantize_tile(const MatmulArgs& a, int64_t x0, int nt, const SmemLayout& l,
                                              uint8_t* xq, float* xd, int* xs) {
  const int cols = static_cast<int>(a.cols), n_units = cols / 32;
  const bool aligned = (reinterpret_cast<uintptr_t>(a.x) & 15) == 0;
  for (int i = threadIdx.x; i < nt * n_units; i += blockDim.x) {
    const int j = i / n_units, u = i % n_units;
    const float* src = a.x + (x0 + j) * cols + u * 32;
    float v[32];
    if (aligned) {
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
    const float inv = amax > 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
    uint32_t packed[8];
    int qsum = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      uint32_t w = 0;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int q = __float2int_rn(__fmul_rn(v[4 * k + b], inv));
        qsum += q;
        w |= (static_cast<uint32_t>(q) & 0xffu) << (8 * b);
      }
      packed[k] = w;
    }
    uint4* dst = reinterpret_cast<uint4*>(xq + j * l.row_pitch + (u / 2) * kGroupPitch + (u % 2) * 32);
    dst[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    dst[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
    xd[j * n_units + u] = __fdiv_rn(amax, 127.0f);
    xs[j * n_units + u] = qsum;
  }
}

// Grid: (activation tiles, row groups). Warp w of row group b owns weight rows
// b * kGemvWarps + w + k * (gridDim.y * kGemvWarps), k = 0, 1, ...; it streams them step by step
// through a kStages-deep cp.async pipeline that runs on across row boundaries, so the latency of
// the first load is paid once per warp, not once per row.
template <DType T>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_quant_kernel(MatmulArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int kBlockElems = QType<T>::kBlockElems, kBlockBytes = QType<T>::kBlockBytes;
  constexpr int kFullStepBytes = step_bytes<T>();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int cols = static_cast<int>(a.cols);
  const int n_units = cols / 32;
  const int nt_alloc = a.n < kGemvMaxXRows ? static_cast<int>(a.n) : kGemvMaxXRows;
  const int64_t x0 = int64_t{blockIdx.x} * kGemvMaxXRows;
  const int nt = static_cast<int>(a.n - x0 < kGemvMaxXRows ? a.n - x0 : kGemvMaxXRows);
  const SmemLayout l = smem_layout<T>(cols, nt_alloc);
  uint8_t* xq = smem;
  float* xd = reinterpret_cast<float*>(smem + l.d_off);
  int* xs = reinterpret_cast<int*>(smem + l.s_off);

  const int64_t row_stride = int64_t{gridDim.y} * kGemvWarps;
  const int64_t first_row = int64_t{blockIdx.y} * kGemvWarps + warp;
  const int64_t total_rows = a.total_rows();
  const int n_rows = first_row < total_rows ? static_cast<int>((total_rows - first_row + row_stride - 1) / row_stride) : 0;
  const int n_steps = (cols + kStepElems - 1) / kStepElems;
  const int total = n_rows * n_steps;  // (row, step) items of this warp
  uint8_t* stage = smem + l.stage_off + warp * kStages * l.stage_pitch;

  // Item cursors advance without divisions (64-bit division is a long software routine).
  struct Cursor {
    int row_k, step, slot;
    const uint8_t* row_w;
  };
  auto advance = [&](Cursor& c) {
    if (++c.step == n_steps) {
      c.step = 0;
      ++c.row_k;
      c.row_w = c.row_k < n_rows ? mat_row(a, first_row + int64_t{c.row_k} * row_stride).w : nullptr;
    }
    if (++c.slot == kStages) c.slot = 0;
  };
  auto issue = [&](const Cursor& c) {
    const int elems = min(kStepElems, cols - c.step * kStepElems);
    stage_copy(stage + c.slot * l.stage_pitch, c.row_w + static_cast<size_t>(c.step) * kFullStepBytes,
               elems / kBlockElems * kBlockBytes, lane);
  };
  const Cursor start{0, 0, 0, n_rows > 0 ? mat_row(a, first_row).w : nullptr};
  Cursor in = start, out = start;
  // The first weight steps do not depend on x: start them before quantizing it.
#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) {
    if (k < total) {
      issue(in);
      advance(in);
    }
    cp_async_commit();
  }
  quantize_tile(a, x0, nt, l, xq, xd, xs);
  __syncthreads();
  if (n_rows == 0) return;
  const XTile x{xq, xd, xs, l.row_pitch, n_units};

  float stack[kGemvMaxXRows][kLevels];
#pragma unroll
  for (int j = 0; j < kGemvMaxXRows; ++j) {
#pragma unroll
    for (int k = 0; k < kLevels; ++k) stack[j][k] = 0.0f;
  }
  for (int it = 0; it < total; ++it) {
    if (it + kStages - 1 < total) {
      issue(in);
      advance(in);
    }
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncwarp();
    const int s = out.step;
    const uint8_t* src = out.row_w + static_cast<size_t>(s) * kFullStepBytes;
    const uint8_t* wstep = stage + out.slot * l.stage_pitch + (reinterpret_cast<uintptr_t>(src) & 15);
    const int u0 = s * kStepUnits + 2 * lane;
    float v[kGemvMaxXRows];
#pragma unroll
    for (int j = 0; j < kGemvMaxXRows; ++j) v[j] = 0.0f;
    if (u0 < n_units) item_dot<T>(wstep, lane, u0 + 1 < n_units, x, u0 / 2, nt, v);
#pragma unroll
    for (int j = 0; j < kGemvMaxXRows; ++j) {
      if (j < nt) {  // nt is uniform across the warp
        float sum = warp_sum_tree(v[j]);
        // Binary counter: step s merges with the stored subtrees of its trailing one bits.
        bool placed = false;
#pragma unroll
        for (int k = 0; k < kLevels; ++k) {
          if (!placed) {
            if ((s >> k) & 1) {
              sum = __fadd_rn(stack[j][k], sum);
            } else {
              stack[j][k] = sum;
              placed = true;
            }
          }
        }
      }
    }
    if (s == n_steps - 1) {
      // Close the zero-padded tree: merge the stored subtrees, smallest first.
      const MatRow row = mat_row(a, first_row + int64_t{out.row_k} * row_stride);
#pragma unroll
      for (int j = 0; j < kGemvMaxXRows; ++j) {
        float acc = 0.0f;
        bool have = false;
#pragma unroll
        for (int k = 0; k < kLevels; ++k) {
          if ((n_steps >> k) & 1) {
            acc = have ? __fadd_rn(stack[j][k], acc) : stack[j][k];
            have = true;
          }
        }
        if (lane == 0 && j < nt) row.y[(x0 + j) * row.rows + row.r] = acc;
      }
    }
    advance(out);
    __syncwarp();
  }
}

template <DType T>
bool launch_typed(const MatmulArgs& a, cudaStream_t stream) {
  if (a.cols % QType<T>::kBlockElems != 0 || a.cols >= (int64_t{1} << 31)) return false;
  if ((a.cols + kStepElems - 1) / kStepElems > kMaxSteps) return false;
  // Eligibility is judged at the full tile so that it cannot depend on n (batch invariance).
  if (smem_layout<T>(static_cast<int>(a.cols), kGemvMaxXRows).total > a.max_smem_bytes) return false;
  const int nt_alloc = a.n < kGemvMaxXRows ? static_cast<int>(a.n) : kGemvMaxXRows;
  const SmemLayout l = smem_layout<T>(static_cast<int>(a.cols), nt_alloc);
  const int64_t x_tiles = (a.n + kGemvMaxXRows - 1) / kGemvMaxXRows;
  // About two blocks per SM in all; each warp then streams several rows.
  const int64_t target = std::max<int64_t>(1, 2 * int64_t{a.n_sm} / x_tiles);
  const int64_t row_blocks =
      std::min<int64_t>((a.total_rows() + kGemvWarps - 1) / kGemvWarps, std::min<int64_t>(target, 65535));
  if (x_tiles > (int64_t{1} << 31) - 1) return false;
  // x tiles vary fastest, so blocks sharing weight rows run together and re-read them from L2.
  const dim3 grid(static_cast<unsigned>(x_tiles), static_cast<unsigned>(row_blocks));
  gemv_quant_kernel<T><<<grid, kGemvWarps * 32, l.total, stream>>>(a);
  TERN_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace

bool launch_gemv_quant(const MatmulArgs& a, cudaStream_t stream) {
  switch (a.dtype) {
    case DType::Q4_0: return launch_typed<DType::Q4_0>(a, stream);
    case DType::Q4_1: return launch_typed<DType::Q4_1>(a, stream);
    case DType::Q8_0: return launch_typed<DType::Q8_0>(a, stream);
    case DType::Q4_K: return launch_typed<DType::Q4_K>(a, stream);
    case DType::Q5_K: return launch_typed<DType::Q5_K>(a, stream);
    case DType::Q6_K: return launch_typed<DType::Q6_K>(a, stream);
    default: return false;
  }
}

void init_gemv_quant(int max_smem_bytes) {
  const cudaFuncAttribute attr = cudaFuncAttributeMaxDynamicSharedMemorySize;
  TERN_CUDA_CHECK(cudaFuncSetAttribute(gemv_quant_kernel<DType::Q4_0>, attr, max_smem_bytes));
  TERN_CUDA_CHECK(cudaFuncSetAttribute(gemv_quant_kernel<DType::Q4_1>, attr, max_smem_bytes));
  TERN_CUDA_CHECK(cudaFuncSetAttribute(gemv_quant_kernel<DType::Q8_0>, attr, max_smem_bytes));
  TERN_CUDA_CHECK(cudaFuncSetAttribute(gemv_quant_kernel<DType::Q4_K>, attr, max_smem_bytes));
  TERN_CUDA_CHECK(cudaFuncSetAttribute(gemv_quant_kernel<DType::Q5_K>, attr, max_smem_bytes));
  TERN_CUDA_CHECK(cudaFuncSetAttribute(gemv_quant_kernel<DType::Q6_K>, attr, max_smem_bytes));
}

}  // namespace tern::cuda
