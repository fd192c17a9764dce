// Lane items of the quantized GEMV (gemv.h, gemv_quant.cu): the activation tile in shared
// memory and, per weight type, the dot product of one lane's 128-element item (four 32-element
// units) with it, reduced to levels 1-2 of the canonical tree. Every kernel that reads these
// types goes through item_dot<T>(), so the unit contributions c_u are one expression per type.
//
// A lane item starts at byte lane * (item bytes) of a staged step for legacy types and at the
// lane's half super-block for k-quants; its words are read with load_words_2aligned, so a step
// may start at any 2-byte-aligned address.
#pragma once

#include "backends/cuda/common.cuh"
#include "backends/cuda/gemv.h"

namespace tern::cuda::gemv_items {

constexpr int kItemUnits = 4;
constexpr int kStepElems = 4096;
constexpr int kStepUnits = kStepElems / 32;

// Activation precision (MatmulArgs::x_bits, one choice per backend): kXB bytes per quantized
// activation element. 1: int8, q = rint(x * 127 / amax) per 32-element unit, dotted with the
// weight codes by dp4a (four products per instruction). 2: int16, q = rint(x * 32512 / amax),
// dotted by dp2a (two 16-bit x 8-bit products per instruction): the same integers as the CPU
// backend's 16-bit mode (backends/cpu/matmul_kernels.h: q_max 32512 = 255 * 127 + 127), a step of
// ~2^-15 of the unit's amax instead of ~2^-7, at twice the dot instructions and tile bytes.
// A run of kUnits units of a tile row: kUnits * 32 * kXB bytes plus 16 of padding, so that the
// 16-byte loads of lanes reading consecutive runs start on different banks.
template <int kUnits, int kXB>
__host__ __device__ constexpr int run_pitch() {
  return kUnits * 32 * kXB + 16;
}
template <int kXB>
__host__ __device__ constexpr int group_pitch() {  // a lane item's four units
  return run_pitch<kItemUnits, kXB>();
}
template <int kXB>
__host__ __device__ constexpr float x_qmax() {
  return kXB == 1 ? 127.0f : 32512.0f;
}

template <DType T>
struct QType;
template <> struct QType<DType::Q4_0> { static constexpr int kBlockElems = 32, kBlockBytes = 18; };
template <> struct QType<DType::Q4_1> { static constexpr int kBlockElems = 32, kBlockBytes = 20; };
template <> struct QType<DType::Q8_0> { static constexpr int kBlockElems = 32, kBlockBytes = 34; };
template <> struct QType<DType::Q4_K> { static constexpr int kBlockElems = 256, kBlockBytes = 144; };
template <> struct QType<DType::Q5_K> { static constexpr int kBlockElems = 256, kBlockBytes = 176; };
template <> struct QType<DType::Q6_K> { static constexpr int kBlockElems = 256, kBlockBytes = 210; };

// --- activation tile ---------------------------------------------------------------------------

struct XTile {
  const uint8_t* q;
  const float* d;
  const int* s;
  const int* h;
  int row_pitch;
  int unit_pitch;
};

// The 128 values of group g (units 4g .. 4g + 3) of tile row j, as 32 * kXB words: unit k is
// X[8 kXB k .. 8 kXB (k + 1)) (int8: four elements per word; int16: two).
template <int kXB>
__device__ __forceinline__ void load_x_words(const uint8_t* q, uint32_t (&X)[32 * kXB]) {
  const uint4* p = reinterpret_cast<const uint4*>(q);
#pragma unroll
  for (int k = 0; k < 8 * kXB; ++k) {
    const uint4 v = p[k];
    X[4 * k] = v.x;
    X[4 * k + 1] = v.y;
    X[4 * k + 2] = v.z;
    X[4 * k + 3] = v.w;
  }
}
template <int kXB = 1>
__device__ __forceinline__ void load_x_group(const XTile& x, int j, int g, uint32_t (&X)[32 * kXB]) {
  load_x_words<kXB>(x.q + j * x.row_pitch + g * group_pitch<kXB>(), X);
}

// Scales and int sums of the four units of group g of row j.
__device__ __forceinline__ float4 x_scales(const XTile& x, int j, int g) {
  return reinterpret_cast<const float4*>(x.d + j * x.unit_pitch)[g];
}
__device__ __forceinline__ int4 x_sums(const XTile& x, int j, int g) {
  return reinterpret_cast<const int4*>(x.s + j * x.unit_pitch)[g];
}

// One lane's view of activation group g of a tile row: its 128 values, the four units' scales,
// int sums and (q6_k) 16-element half sums. Loaded once and dotted with one or several weight
// rows' items (the multi-row kernel of gemv_rows.cu shares it between rows).
template <int kXB = 1>
struct XGroup {
  uint32_t q[32 * kXB];
  float4 d;
  int4 s;
  int hs[8];
};

template <bool kHalves, int kXB>
__device__ __forceinline__ void load_x_halves(const XTile& x, int j, int g, XGroup<kXB>& out) {
  if constexpr (kHalves) {
    const int4* hp = reinterpret_cast<const int4*>(x.h + j * 2 * x.unit_pitch) + 2 * g;
    const int4 h01 = hp[0], h23 = hp[1];
    out.hs[0] = h01.x; out.hs[1] = h01.y; out.hs[2] = h01.z; out.hs[3] = h01.w;
    out.hs[4] = h23.x; out.hs[5] = h23.y; out.hs[6] = h23.z; out.hs[7] = h23.w;
  }
}

template <bool kSums, bool kHalves, int kXB>
__device__ __forceinline__ void load_x(const XTile& x, int j, int g, XGroup<kXB>& out) {
  load_x_group<kXB>(x, j, g, out.q);
  out.d = x_scales(x, j, g);
  if constexpr (kSums) out.s = x_sums(x, j, g);
  load_x_halves<kHalves>(x, j, g, out);
}

// load_x for a tile whose row is laid out by the caller (the streamed kernel's runs of eight
// units, gemv_stream.cu): group g's values start at q (16-byte aligned); scales, sums and half
// sums as load_x. The same values, so the same dot products.
template <bool kSums, bool kHalves, int kXB>
__device__ __forceinline__ void load_x_at(const XTile& x, const uint8_t* q, int g, XGroup<kXB>& out) {
  load_x_words<kXB>(q, out.q);
  out.d = x_scales(x, 0, g);
  if constexpr (kSums) out.s = x_sums(x, 0, g);
  load_x_halves<kHalves>(x, 0, g, out);
}

__device__ __forceinline__ int dp4a(uint32_t a, uint32_t b, int c) {
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
}

// Unsigned bytes of a times signed bytes of b (dp4a.u32.s32): the q4_k high nibbles masked in
// place (0xf0 per byte, 16x the nibble) against the int8 activations.
__device__ __forceinline__ int dp4a_u8s8(uint32_t a, uint32_t b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// Word loads of a lane item out of a bulk-copy stage (gemv_rows.cu), whose buffers and rows all
// start 16-byte aligned, so an item's alignment is fixed by its type: 16 bytes for q4_k / q5_k
// blocks (144 / 176 bytes), 8 for q8_0 items (136 bytes), 2 for q6_k blocks (210 bytes). These
// loads (load_words_a16 / a8 of common.cuh, load_words_a2 below) take one path for every lane:
// load_words_2aligned tests the alignment at run time, and a q6_k warp, whose lanes' blocks sit
// at every even offset mod 16, ran its three paths one after another (the 2-byte one through
// generic loads: its masked integer address lost the shared space). Same words, same bits.
//
// 2-byte aligned: the aligned words covering [p, p + 4N) plus one more (the stages' slack), each
// pair funnel-shifted by 0 or 16 bits. The word pointer is p moved back, not a masked integer,
// so the loads stay shared-memory loads.
template <int N>
__device__ __forceinline__ void load_words_a2(const uint8_t* p, uint32_t (&out)[N]) {
  const uint32_t off = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p)) & 2u;
  const uint32_t* w = reinterpret_cast<const uint32_t*>(p - off);
  const uint32_t shift = off * 8;
  uint32_t prev = w[0];
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const uint32_t next = w[i + 1];
    out[i] = __funnelshift_r(prev, next, shift);
    prev = next;
  }
}

// dp2a: two int16 activations (a's halves) times bytes 0-1 (lo) or 2-3 (hi) of the weight word b.
// kU: b's bytes are unsigned (q4_k's in-place high nibbles, 16x the nibble).
template <bool kHi, bool kU = false>
__device__ __forceinline__ int dp2a(uint32_t a, uint32_t b, int c) {
  int d;
  if constexpr (kHi && kU) asm("dp2a.hi.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  else if constexpr (kHi) asm("dp2a.hi.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  else if constexpr (kU) asm("dp2a.lo.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  else asm("dp2a.lo.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// The exact integer dot of weight words w[i0 .. i0 + N) (four codes each, signed or small
// unsigned bytes; kU: unsigned bytes of any size) with the matching activation elements of unit
// K of a group's words X: dp4a per word at 8 bits, a lo and a hi dp2a per word at 16.
template <int K, int i0, int N, int kXB, bool kU = false>
__device__ __forceinline__ int words_dot(const uint32_t (&w)[8], const uint32_t (&X)[32 * kXB], int s = 0) {
#pragma unroll
  for (int i = i0; i < i0 + N; ++i) {
    if constexpr (kXB == 1) {
      s = kU ? dp4a_u8s8(w[i], X[8 * K + i], s) : dp4a(w[i], X[8 * K + i], s);
    } else {
      s = dp2a<false, kU>(X[16 * K + 2 * i], w[i], s);
      s = dp2a<true, kU>(X[16 * K + 2 * i + 1], w[i], s);
    }
  }
  return s;
}

// Integer dot of 8 weight words (32 elements, each byte one signed or small unsigned value) with
// unit K of X.
template <int K, int kXB = 1>
__device__ __forceinline__ int unit_dot(const uint32_t (&w)[8], const uint32_t (&X)[32 * kXB]) {
  return words_dot<K, 0, 8, kXB>(w, X);
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

// Levels 1-2 of the canonical tree inside a lane item. A unit past the end of the row (only
// legacy types have partial items) is a zero leaf; its c may be garbage (stale staging bytes,
// uninitialized scales), so it is replaced, never multiplied by zero.
__device__ __forceinline__ float item_tree(float c0, float c1, float c2, float c3, int n_valid) {
  c1 = n_valid > 1 ? c1 : 0.0f;
  c2 = n_valid > 2 ? c2 : 0.0f;
  c3 = n_valid > 3 ? c3 : 0.0f;
  return __fadd_rn(__fadd_rn(c0, c1), __fadd_rn(c2, c3));
}

__device__ __forceinline__ float byte_to_float(uint32_t w, int k) { return static_cast<float>((w >> (8 * k)) & 0xffu); }

// --- per-type lane items: units 4g .. 4g + 3 at lane's place in the staged step -----------------


// Block k of a legacy lane item whose blocks are 2 mod 4 bytes long (q4_0: 18, q8_0: 34): its
// f16 scale and its N quant words, out of the item's words w (block k starts at byte k * B).
template <int B, int K, int N, int W>
__device__ __forceinline__ void legacy_block(const uint32_t (&w)[W], float* d, uint32_t (&q)[N]) {
  constexpr int off = K * B, w0 = off / 4;
  if constexpr (off % 4 == 0) {  // scale in the low half of w0, quants start 2 bytes in
    *d = half_bits_to_float(w[w0] & 0xffffu);
#pragma unroll
    for (int i = 0; i < N; ++i) q[i] = __funnelshift_r(w[w0 + i], w[w0 + i + 1], 16);
  } else {  // scale in the high half of w0, quants word-aligned after it
    *d = half_bits_to_float(w[w0] >> 16);
#pragma unroll
    for (int i = 0; i < N; ++i) q[i] = w[w0 + 1 + i];
  }
}

// Block k of a q4_0 item (d, then 16 bytes of nibbles: element i low, i + 16 high), unpacked to
// one byte per element.
template <int K>
__device__ __forceinline__ void q40_block(const uint32_t (&w)[18], float* d, uint32_t (&q)[8]) {
  uint32_t raw[4];
  legacy_block<18, K, 4>(w, d, raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    q[i] = raw[i] & 0x0f0f0f0fu;
    q[4 + i] = (raw[i] >> 4) & 0x0f0f0f0fu;
  }
}

// Four 18-byte blocks.
template <int kRows, int kXB>
__device__ __forceinline__ void item_dot_q4_0(const uint8_t* wstep, int lane, int n_valid, const XTile& x, int g, int nt,
                                      float (&v)[kRows]) {
  uint32_t w[18];
  load_words_2aligned<18>(wstep + lane * 72, w);
  float d[4];
  uint32_t q[4][8];
  q40_block<0>(w, &d[0], q[0]);
  q40_block<1>(w, &d[1], q[1]);
  q40_block<2>(w, &d[2], q[2]);
  q40_block<3>(w, &d[3], q[3]);
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    if (j >= nt) break;
    uint32_t X[32 * kXB];
    load_x_group<kXB>(x, j, g, X);
    const float4 dx = x_scales(x, j, g);
    const int4 xs = x_sums(x, j, g);
    v[j] = item_tree(unit_scaled(d[0], dx.x, unit_dot<0, kXB>(q[0], X) - 8 * xs.x),
                     unit_scaled(d[1], dx.y, unit_dot<1, kXB>(q[1], X) - 8 * xs.y),
                     unit_scaled(d[2], dx.z, unit_dot<2, kXB>(q[2], X) - 8 * xs.z),
                     unit_scaled(d[3], dx.w, unit_dot<3, kXB>(q[3], X) - 8 * xs.w), n_valid);
  }
}

// Four 20-byte blocks: d, m, 16 bytes of nibbles.
template <int kRows, int kXB>
__device__ __forceinline__ void item_dot_q4_1(const uint8_t* wstep, int lane, int n_valid, const XTile& x, int g, int nt,
                                      float (&v)[kRows]) {
  uint32_t w[20];
  load_words_2aligned<20>(wstep + lane * 80, w);
  float d[4], m[4];
  uint32_t q[4][8];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    d[k] = half_bits_to_float(w[5 * k] & 0xffffu);
    m[k] = half_bits_to_float(w[5 * k] >> 16);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      q[k][i] = w[5 * k + 1 + i] & 0x0f0f0f0fu;
      q[k][4 + i] = (w[5 * k + 1 + i] >> 4) & 0x0f0f0f0fu;
    }
  }
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    if (j >= nt) break;
    uint32_t X[32 * kXB];
    load_x_group<kXB>(x, j, g, X);
    const float4 dx = x_scales(x, j, g);
    const int4 xs = x_sums(x, j, g);
    v[j] = item_tree(unit_affine(d[0], m[0], dx.x, unit_dot<0, kXB>(q[0], X), xs.x),
                     unit_affine(d[1], m[1], dx.y, unit_dot<1, kXB>(q[1], X), xs.y),
                     unit_affine(d[2], m[2], dx.z, unit_dot<2, kXB>(q[2], X), xs.z),
                     unit_affine(d[3], m[3], dx.w, unit_dot<3, kXB>(q[3], X), xs.w), n_valid);
  }
}

// Four 34-byte blocks: d, 32 int8. kStaged: the item sits in a 16-byte aligned bulk-copy stage
// (load_words_a8).
template <bool kStaged = false>
struct WItemQ8_0 {
  static constexpr bool kSums = false, kHalves = false;
  float d[4];
  uint32_t q[4][8];
  __device__ __forceinline__ void load(const uint8_t* wstep, int lane) {
    uint32_t w[34];
    if constexpr (kStaged) load_words_a8<34>(wstep + lane * 136, w);
    else load_words_2aligned<34>(wstep + lane * 136, w);
    legacy_block<34, 0, 8>(w, &d[0], q[0]);
    legacy_block<34, 1, 8>(w, &d[1], q[1]);
    legacy_block<34, 2, 8>(w, &d[2], q[2]);
    legacy_block<34, 3, 8>(w, &d[3], q[3]);
  }
  template <int kXB>
  __device__ __forceinline__ float dot(const XGroup<kXB>& x, int n_valid) const {
    return item_tree(unit_scaled(d[0], x.d.x, unit_dot<0, kXB>(q[0], x.q)),
                     unit_scaled(d[1], x.d.y, unit_dot<1, kXB>(q[1], x.q)),
                     unit_scaled(d[2], x.d.z, unit_dot<2, kXB>(q[2], x.q)),
                     unit_scaled(d[3], x.d.w, unit_dot<3, kXB>(q[3], x.q)), n_valid);
  }
};

// q4_k / q5_k share everything but the fifth bit. Lane l takes half hh = l & 1 of super-block
// l >> 1: sub-blocks 4hh .. 4hh + 3, i.e. the low and high nibbles of qs[64hh .. 64hh + 64).
//
// kStaged (the item in a bulk-copy stage, 16-byte aligned): 16-byte loads, and for q4_k the
// high nibbles stay in place (qs & 0xf0f0f0f0, 16x each value, unsigned bytes) and their unit's
// integer dot is divided by 16 once (an exact shift of a multiple of 16) instead of shifting
// every word: the same integer sums with 14 fewer instructions per item.
template <bool kFive, bool kStaged = false>
struct WItemK45 {
  static constexpr bool kSums = true, kHalves = false;
  static constexpr bool kHigh16 = kStaged && !kFive;  // q[1], q[3] hold 16x the nibbles
  float dl[4], ml[4];
  uint32_t q[4][8];
  __device__ __forceinline__ void load(const uint8_t* wstep, int lane) {
    constexpr int kBlockBytes = kFive ? 176 : 144;
    constexpr int kQsOffset = kFive ? 48 : 16;
    const int hh = lane & 1;
    const uint8_t* b = wstep + (lane >> 1) * kBlockBytes;
    uint32_t h[4], qs[16];
    if constexpr (kStaged) {
      load_words_a16<4>(b, h);
      load_words_a16<16>(b + kQsOffset + 64 * hh, qs);
    } else {
      load_words_2aligned<4>(b, h);
      load_words_2aligned<16>(b + kQsOffset + 64 * hh, qs);
    }
    // The 6-bit scales and mins of sub-blocks 4hh + k, byte k of sc4 / m4 (the 12-byte packing of
    // core/quant_ref_layout.h, four at a time).
    const uint32_t sc4 = hh == 0 ? h[1] & 0x3f3f3f3fu : (h[3] & 0x0f0f0f0fu) | ((h[1] >> 2) & 0x30303030u);
    const uint32_t m4 = hh == 0 ? h[2] & 0x3f3f3f3fu : ((h[3] >> 4) & 0x0f0f0f0fu) | ((h[2] >> 2) & 0x30303030u);
    const float d = half_bits_to_float(h[0] & 0xffffu), dmin = half_bits_to_float(h[0] >> 16);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      dl[k] = __fmul_rn(d, byte_to_float(sc4, k));
      ml[k] = __fmul_rn(dmin, byte_to_float(m4, k));
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      q[0][i] = qs[i] & 0x0f0f0f0fu;
      q[2][i] = qs[8 + i] & 0x0f0f0f0fu;
      if constexpr (kHigh16) {
        q[1][i] = qs[i] & 0xf0f0f0f0u;
        q[3][i] = qs[8 + i] & 0xf0f0f0f0u;
      } else {
        q[1][i] = (qs[i] >> 4) & 0x0f0f0f0fu;
        q[3][i] = (qs[8 + i] >> 4) & 0x0f0f0f0fu;
      }
    }
    if constexpr (kFive) {
      uint32_t qh[8];
      if constexpr (kStaged) load_words_a16<8>(b + 16, qh);
      else load_words_2aligned<8>(b + 16, qh);
      const int bit0 = 4 * hh;  // fifth bit of sub-block s is bit s of qh
#pragma unroll
      for (int i = 0; i < 8; ++i) {
#pragma unroll
        for (int k = 0; k < 4; ++k) q[k][i] |= ((qh[i] >> (bit0 + k)) & 0x01010101u) << 4;
      }
    }
  }
  // Unit K's integer dot with a high-nibble unit (kHigh16): sum of 16 * nibble * x (the bytes
  // unsigned), over 16 (exact: a multiple of 16).
  template <int K, int kXB>
  __device__ __forceinline__ int high_dot(const uint32_t (&w)[8], const uint32_t (&X)[32 * kXB]) const {
    return words_dot<K, 0, 8, kXB, true>(w, X) >> 4;
  }
  template <int kXB>
  __device__ __forceinline__ float dot(const XGroup<kXB>& x, int) const {
    int i1, i3;
    if constexpr (kHigh16) {
      i1 = high_dot<1, kXB>(q[1], x.q);
      i3 = high_dot<3, kXB>(q[3], x.q);
    } else {
      i1 = unit_dot<1, kXB>(q[1], x.q);
      i3 = unit_dot<3, kXB>(q[3], x.q);
    }
    return item_tree(unit_kmin(dl[0], ml[0], x.d.x, unit_dot<0, kXB>(q[0], x.q), x.s.x),
                     unit_kmin(dl[1], ml[1], x.d.y, i1, x.s.y),
                     unit_kmin(dl[2], ml[2], x.d.z, unit_dot<2, kXB>(q[2], x.q), x.s.z),
                     unit_kmin(dl[3], ml[3], x.d.w, i3, x.s.w), kItemUnits);
  }
};

// q6_k: lane l takes half hh = l & 1 of block l >> 1 (elements 128hh .. 128hh + 127). Unit k
// (quadrant k of the half): low 4 bits from ql[64hh + 32(k & 1) ..] (nibble k >> 1), high 2 bits
// from qh[32hh ..] (bits 2k, 2k + 1), and two int8 sub-block scales for its 16-element halves.
// A unit's integer dot is sc_a * (dot_a - 32 sum_a) + sc_b * (dot_b - 32 sum_b) (sum_*: the
// halves' activation sums; |value| < 2^24, exact in float).
// kStaged: the item in a 16-byte aligned bulk-copy stage (load_words_a2, one path per warp).
template <bool kStaged = false>
struct WItemQ6_K {
  static constexpr bool kSums = false, kHalves = true;
  float d;
  int sc[8];
  uint32_t q[4][8];
  __device__ __forceinline__ void load(const uint8_t* wstep, int lane) {
    const int hh = lane & 1;
    const uint8_t* b = wstep + (lane >> 1) * 210;
    uint32_t L[16], H[8], S[2];
    if constexpr (kStaged) {
      load_words_a2<16>(b + 64 * hh, L);
      load_words_a2<8>(b + 128 + 32 * hh, H);
      load_words_a2<2>(b + 192 + 8 * hh, S);
    } else {
      load_words_2aligned<16>(b + 64 * hh, L);
      load_words_2aligned<8>(b + 128 + 32 * hh, H);
      load_words_2aligned<2>(b + 192 + 8 * hh, S);
    }
    d = half_bits_to_float(load_u16(b + 208));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      sc[k] = static_cast<int8_t>((S[0] >> (8 * k)) & 0xffu);
      sc[4 + k] = static_cast<int8_t>((S[1] >> (8 * k)) & 0xffu);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      q[0][i] = (L[i] & 0x0f0f0f0fu) | ((H[i] << 4) & 0x30303030u);
      q[1][i] = (L[8 + i] & 0x0f0f0f0fu) | ((H[i] << 2) & 0x30303030u);
      q[2][i] = ((L[i] >> 4) & 0x0f0f0f0fu) | (H[i] & 0x30303030u);
      q[3][i] = ((L[8 + i] >> 4) & 0x0f0f0f0fu) | ((H[i] >> 2) & 0x30303030u);
    }
  }
  // Unit K's integer dot. At 16 bits each half's term reaches 128 * 16 * 32 * 32512 < 2^31 and
  // their sum may not fit an int, so it is formed in 64 bits (the same integer, so float(isum)
  // rounds it as it would an int).
  template <int K, int kXB>
  __device__ __forceinline__ float unit_isum(const XGroup<kXB>& x) const {
    const int a = words_dot<K, 0, 4, kXB>(q[K], x.q) - 32 * x.hs[2 * K];
    const int c = words_dot<K, 4, 4, kXB>(q[K], x.q) - 32 * x.hs[2 * K + 1];
    if constexpr (kXB == 1) {
      return static_cast<float>(sc[2 * K] * a + sc[2 * K + 1] * c);
    } else {
      return static_cast<float>(static_cast<long long>(sc[2 * K] * a) + static_cast<long long>(sc[2 * K + 1] * c));
    }
  }
  template <int kXB>
  __device__ __forceinline__ float dot(const XGroup<kXB>& x, int) const {
    const float dx[4] = {x.d.x, x.d.y, x.d.z, x.d.w};
    return item_tree(__fmul_rn(__fmul_rn(d, dx[0]), unit_isum<0>(x)), __fmul_rn(__fmul_rn(d, dx[1]), unit_isum<1>(x)),
                     __fmul_rn(__fmul_rn(d, dx[2]), unit_isum<2>(x)), __fmul_rn(__fmul_rn(d, dx[3]), unit_isum<3>(x)),
                     kItemUnits);
  }
};

// The weight item type of T (q8_0, q4_k, q5_k, q6_k; q4_0 / q4_1 keep their one-function items);
// kStaged: read out of a 16-byte aligned bulk-copy stage (gemv_rows.cu).
template <DType T, bool kStaged = false>
struct WItemOf;
template <bool S> struct WItemOf<DType::Q8_0, S> { using type = WItemQ8_0<S>; };
template <bool S> struct WItemOf<DType::Q4_K, S> { using type = WItemK45<false, S>; };
template <bool S> struct WItemOf<DType::Q5_K, S> { using type = WItemK45<true, S>; };
template <bool S> struct WItemOf<DType::Q6_K, S> { using type = WItemQ6_K<S>; };

// Decodes one weight item and dots it with rows 0 .. nt - 1 of the tile.
template <typename W, int kRows, int kXB>
__device__ __forceinline__ void witem_dot(const uint8_t* wstep, int lane, int n_valid, const XTile& x, int g, int nt,
                                          float (&v)[kRows]) {
  W w;
  w.load(wstep, lane);
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    if (j >= nt) break;
    XGroup<kXB> xg;
    load_x<W::kSums, W::kHalves>(x, j, g, xg);
    v[j] = w.dot(xg, n_valid);
  }
}

// Lane item of type T: units 4g .. 4g + 3 of the row, n_valid of them inside it, against
// activation rows 0 .. nt - 1 (nt <= kRows) of the tile; v[j] gets levels 1-2 of row j's tree.
template <DType T, int kRows, int kXB>
__device__ __forceinline__ void item_dot(const uint8_t* wstep, int lane, int n_valid, const XTile& x, int g, int nt,
                                         float (&v)[kRows]) {
  if constexpr (T == DType::Q4_0) item_dot_q4_0<kRows, kXB>(wstep, lane, n_valid, x, g, nt, v);
  else if constexpr (T == DType::Q4_1) item_dot_q4_1<kRows, kXB>(wstep, lane, n_valid, x, g, nt, v);
  else witem_dot<typename WItemOf<T>::type, kRows, kXB>(wstep, lane, n_valid, x, g, nt, v);
}

}  // namespace tern::cuda::gemv_items
