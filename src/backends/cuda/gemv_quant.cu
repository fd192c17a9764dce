// Quantized GEMV/GEMM on GGUF blocks: q4_0, q4_1, q8_0, q4_k, q5_k, q6_k (gemv.h has the design
// and the canonical summation order every kernel here follows).
//
// A lane item is 128 elements (four 32-element units) of one weight row, a step is 32 items
// (4096 elements). Wide items amortize what does not scale with the data: the butterfly, the
// binary counter, the pipeline bookkeeping, and for k-quants the scale decode (a q4_k lane takes
// half a super-block, whose four scales and mins come out of three words with vector masks).
//
// Shared memory of a block:
//   xq     [nt][n_groups * kGroupPitch] int8: the activation tile, 128 elements (four units) per
//          group, each group padded to 144 bytes so 16-byte loads of 8 lanes hit distinct banks
//   xd, xs [nt][unit_pitch]: per-unit activation scale (float) and sum of the int8 values (int)
//   xh     [nt][2 * unit_pitch]: sums of each 16-element half of a unit (q6_k's sub-block offset)
//   stage  [warps][stages][stage_pitch]: each warp's pipelined copies of its weight row's steps
// A staged step starts at byte (src & 15) of its buffer, so the 16-byte cp.async copies stay
// aligned whatever the row's alignment; the ragged head and tail go through 2-byte copies.
#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/gemv.h"
#include "backends/cuda/launch.cuh"

namespace tern::cuda {
namespace {

constexpr int kItemUnits = 4;
constexpr int kStepElems = 4096;
constexpr int kStepUnits = kStepElems / 32;
constexpr int kGroupPitch = 144;
constexpr int kLevels = 6;  // binary counter depth: up to 2^6 - 1 steps (cols < 258048)
constexpr int kMaxSteps = (1 << kLevels) - 1;

template <DType T>
struct QType;
template <> struct QType<DType::Q4_0> { static constexpr int kBlockElems = 32, kBlockBytes = 18; };
template <> struct QType<DType::Q4_1> { static constexpr int kBlockElems = 32, kBlockBytes = 20; };
template <> struct QType<DType::Q8_0> { static constexpr int kBlockElems = 32, kBlockBytes = 34; };
template <> struct QType<DType::Q4_K> { static constexpr int kBlockElems = 256, kBlockBytes = 144; };
template <> struct QType<DType::Q5_K> { static constexpr int kBlockElems = 256, kBlockBytes = 176; };
template <> struct QType<DType::Q6_K> { static constexpr int kBlockElems = 256, kBlockBytes = 210; };

template <DType T>
__host__ __device__ constexpr int step_bytes() {
  return kStepElems / QType<T>::kBlockElems * QType<T>::kBlockBytes;
}

// Weight steps each warp keeps in its pipeline (several loads in flight while one step computes):
// as many full steps as fit in about 10 KB per warp, which leaves room for two blocks per SM at
// 14336 columns. (Rows shorter than a step could afford more; 8 stages for SmolLM2's rows
// measured 4% slower decode on the H200, so the depth stays per type.)
template <DType T>
__host__ __device__ constexpr int stages() {
  return step_bytes<T>() * 4 <= 10240 ? 4 : (step_bytes<T>() * 3 <= 10240 ? 3 : 2);
}

__host__ __device__ constexpr int round16(int b) { return (b + 15) / 16 * 16; }

struct SmemLayout {
  int row_pitch;    // bytes of one quantized activation row
  int unit_pitch;   // units of one row of xd / xs (a multiple of 4: 16-byte loads)
  int d_off, s_off, h_off, stage_off;
  int stage_pitch;  // bytes of one stage buffer
  int total;
};

template <DType T>
__host__ __device__ SmemLayout smem_layout(int cols, int nt_alloc) {
  SmemLayout l;
  const int n_units = cols / 32;
  l.row_pitch = (n_units + kItemUnits - 1) / kItemUnits * kGroupPitch;
  l.unit_pitch = (n_units + kItemUnits - 1) / kItemUnits * kItemUnits;
  l.d_off = nt_alloc * l.row_pitch;
  l.s_off = l.d_off + round16(nt_alloc * l.unit_pitch * 4);
  l.h_off = l.s_off + round16(nt_alloc * l.unit_pitch * 4);
  l.stage_off = l.h_off + round16(nt_alloc * l.unit_pitch * 8);
  // A row's steps are full steps, or one step of the whole row when it is shorter.
  const int row_step_bytes = (cols < kStepElems ? cols : kStepElems) / QType<T>::kBlockElems * QType<T>::kBlockBytes;
  // + 32: the up-to-14-byte alignment shift plus the one-word overread of load_words_2aligned.
  l.stage_pitch = round16(row_step_bytes + 32);
  l.total = l.stage_off + kGemvWarps * stages<T>() * l.stage_pitch;
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
  const int* h;
  int row_pitch;
  int unit_pitch;
};

// The 128 int8 values of group g (units 4g .. 4g + 3) of tile row j, as 32 words: unit k is
// X[8k .. 8k + 8), its first 16 elements X[8k .. 8k + 4).
__device__ __forceinline__ void load_x_group(const XTile& x, int j, int g, uint32_t (&X)[32]) {
  const uint4* p = reinterpret_cast<const uint4*>(x.q + j * x.row_pitch + g * kGroupPitch);
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const uint4 v = p[k];
    X[4 * k] = v.x;
    X[4 * k + 1] = v.y;
    X[4 * k + 2] = v.z;
    X[4 * k + 3] = v.w;
  }
}

// Scales and int sums of the four units of group g of row j.
__device__ __forceinline__ float4 x_scales(const XTile& x, int j, int g) {
  return reinterpret_cast<const float4*>(x.d + j * x.unit_pitch)[g];
}
__device__ __forceinline__ int4 x_sums(const XTile& x, int j, int g) {
  return reinterpret_cast<const int4*>(x.s + j * x.unit_pitch)[g];
}

__device__ __forceinline__ int dp4a(uint32_t a, uint32_t b, int c) {
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
}

// Integer dot of 8 weight words (32 elements, each byte one signed or small unsigned value) with
// unit X[8k .. 8k + 8).
template <int K>
__device__ __forceinline__ int unit_dot(const uint32_t (&w)[8], const uint32_t (&X)[32]) {
  int s = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) s = dp4a(w[i], X[8 * K + i], s);
  return s;
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

template <DType T>
__device__ void item_dot(const uint8_t* wstep, int lane, int n_valid, const XTile& x, int g, int nt,
                         float (&v)[kGemvMaxXRows]);

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
template <>
__device__ void item_dot<DType::Q4_0>(const uint8_t* wstep, int lane, int n_valid, const XTile& x, int g, int nt,
                                      float (&v)[kGemvMaxXRows]) {
  uint32_t w[18];
  load_words_2aligned<18>(wstep + lane * 72, w);
  float d[4];
  uint32_t q[4][8];
  q40_block<0>(w, &d[0], q[0]);
  q40_block<1>(w, &d[1], q[1]);
  q40_block<2>(w, &d[2], q[2]);
  q40_block<3>(w, &d[3], q[3]);
#pragma unroll
  for (int j = 0; j < kGemvMaxXRows; ++j) {
    if (j >= nt) break;
    uint32_t X[32];
    load_x_group(x, j, g, X);
    const float4 dx = x_scales(x, j, g);
    const int4 xs = x_sums(x, j, g);
    v[j] = item_tree(unit_scaled(d[0], dx.x, unit_dot<0>(q[0], X) - 8 * xs.x),
                     unit_scaled(d[1], dx.y, unit_dot<1>(q[1], X) - 8 * xs.y),
                     unit_scaled(d[2], dx.z, unit_dot<2>(q[2], X) - 8 * xs.z),
                     unit_scaled(d[3], dx.w, unit_dot<3>(q[3], X) - 8 * xs.w), n_valid);
  }
}

// Four 20-byte blocks: d, m, 16 bytes of nibbles.
template <>
__device__ void item_dot<DType::Q4_1>(const uint8_t* wstep, int lane, int n_valid, const XTile& x, int g, int nt,
                                      float (&v)[kGemvMaxXRows]) {
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
  for (int j = 0; j < kGemvMaxXRows; ++j) {
    if (j >= nt) break;
    uint32_t X[32];
    load_x_group(x, j, g, X);
    const float4 dx = x_scales(x, j, g);
    const int4 xs = x_sums(x, j, g);
    v[j] = item_tree(unit_affine(d[0], m[0], dx.x, unit_dot<0>(q[0], X), xs.x),
                     unit_affine(d[1], m[1], dx.y, unit_dot<1>(q[1], X), xs.y),
                     unit_affine(d[2], m[2], dx.z, unit_dot<2>(q[2], X), xs.z),
                     unit_affine(d[3], m[3], dx.w, unit_dot<3>(q[3], X), xs.w), n_valid);
  }
}

// Four 34-byte blocks: d, 32 int8.
template <>
__device__ void item_dot<DType::Q8_0>(const uint8_t* wstep, int lane, int n_valid, const XTile& x, int g, int nt,
                                      float (&v)[kGemvMaxXRows]) {
  uint32_t w[34];
  load_words_2aligned<34>(wstep + lane * 136, w);
  float d[4];
  uint32_t q[4][8];
  legacy_block<34, 0, 8>(w, &d[0], q[0]);
  legacy_block<34, 1, 8>(w, &d[1], q[1]);
  legacy_block<34, 2, 8>(w, &d[2], q[2]);
  legacy_block<34, 3, 8>(w, &d[3], q[3]);
#pragma unroll
  for (int j = 0; j < kGemvMaxXRows; ++j) {
    if (j >= nt) break;
    uint32_t X[32];
    load_x_group(x, j, g, X);
    const float4 dx = x_scales(x, j, g);
    v[j] = item_tree(unit_scaled(d[0], dx.x, unit_dot<0>(q[0], X)), unit_scaled(d[1], dx.y, unit_dot<1>(q[1], X)),
                     unit_scaled(d[2], dx.z, unit_dot<2>(q[2], X)), unit_scaled(d[3], dx.w, unit_dot<3>(q[3], X)),
                     n_valid);
  }
}

// q4_k / q5_k share everything but the fifth bit. Lane l takes half hh = l & 1 of super-block
// l >> 1: sub-blocks 4hh .. 4hh + 3, i.e. the low and high nibbles of qs[64hh .. 64hh + 64).
template <bool kFive>
__device__ __forceinline__ void item_dot_k45(const uint8_t* wstep, int lane, const XTile& x, int g, int nt,
                                             float (&v)[kGemvMaxXRows]) {
  constexpr int kBlockBytes = kFive ? 176 : 144;
  constexpr int kQsOffset = kFive ? 48 : 16;
  const int hh = lane & 1;
  const uint8_t* b = wstep + (lane >> 1) * kBlockBytes;
  uint32_t h[4], qs[16];
  load_words_2aligned<4>(b, h);
  load_words_2aligned<16>(b + kQsOffset + 64 * hh, qs);
  // The 6-bit scales and mins of sub-blocks 4hh + k, byte k of sc4 / m4 (the 12-byte packing of
  // core/quant_ref_layout.h, four at a time).
  const uint32_t sc4 = hh == 0 ? h[1] & 0x3f3f3f3fu : (h[3] & 0x0f0f0f0fu) | ((h[1] >> 2) & 0x30303030u);
  const uint32_t m4 = hh == 0 ? h[2] & 0x3f3f3f3fu : ((h[3] >> 4) & 0x0f0f0f0fu) | ((h[2] >> 2) & 0x30303030u);
  const float d = half_bits_to_float(h[0] & 0xffffu), dmin = half_bits_to_float(h[0] >> 16);
  float dl[4], ml[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    dl[k] = __fmul_rn(d, byte_to_float(sc4, k));
    ml[k] = __fmul_rn(dmin, byte_to_float(m4, k));
  }
  uint32_t q[4][8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    q[0][i] = qs[i] & 0x0f0f0f0fu;
    q[1][i] = (qs[i] >> 4) & 0x0f0f0f0fu;
    q[2][i] = qs[8 + i] & 0x0f0f0f0fu;
    q[3][i] = (qs[8 + i] >> 4) & 0x0f0f0f0fu;
  }
  if constexpr (kFive) {
    uint32_t qh[8];
    load_words_2aligned<8>(b + 16, qh);
    const int bit0 = 4 * hh;  // fifth bit of sub-block s is bit s of qh
#pragma unroll
    for (int i = 0; i < 8; ++i) {
#pragma unroll
      for (int k = 0; k < 4; ++k) q[k][i] |= ((qh[i] >> (bit0 + k)) & 0x01010101u) << 4;
    }
  }
#pragma unroll
  for (int j = 0; j < kGemvMaxXRows; ++j) {
    if (j >= nt) break;
    uint32_t X[32];
    load_x_group(x, j, g, X);
    const float4 dx = x_scales(x, j, g);
    const int4 xs = x_sums(x, j, g);
    v[j] = item_tree(unit_kmin(dl[0], ml[0], dx.x, unit_dot<0>(q[0], X), xs.x),
                     unit_kmin(dl[1], ml[1], dx.y, unit_dot<1>(q[1], X), xs.y),
                     unit_kmin(dl[2], ml[2], dx.z, unit_dot<2>(q[2], X), xs.z),
                     unit_kmin(dl[3], ml[3], dx.w, unit_dot<3>(q[3], X), xs.w), kItemUnits);
  }
}

template <>
__device__ void item_dot<DType::Q4_K>(const uint8_t* wstep, int lane, int, const XTile& x, int g, int nt,
                                      float (&v)[kGemvMaxXRows]) {
  item_dot_k45<false>(wstep, lane, x, g, nt, v);
}

template <>
__device__ void item_dot<DType::Q5_K>(const uint8_t* wstep, int lane, int, const XTile& x, int g, int nt,
                                      float (&v)[kGemvMaxXRows]) {
  item_dot_k45<true>(wstep, lane, x, g, nt, v);
}

// q6_k: lane l takes half hh = l & 1 of block l >> 1 (elements 128hh .. 128hh + 127). Unit k
// (quadrant k of the half): low 4 bits from ql[64hh + 32(k & 1) ..] (nibble k >> 1), high 2 bits
// from qh[32hh ..] (bits 2k, 2k + 1), and two int8 sub-block scales for its 16-element halves.
// A unit's integer dot is sc_a * (dot_a - 32 sum_a) + sc_b * (dot_b - 32 sum_b) (sum_*: the
// halves' activation sums; |value| < 2^24, exact in float).
template <>
__device__ void item_dot<DType::Q6_K>(const uint8_t* wstep, int lane, int, const XTile& x, int g, int nt,
                                      float (&v)[kGemvMaxXRows]) {
  const int hh = lane & 1;
  const uint8_t* b = wstep + (lane >> 1) * 210;
  uint32_t L[16], H[8], S[2];
  load_words_2aligned<16>(b + 64 * hh, L);
  load_words_2aligned<8>(b + 128 + 32 * hh, H);
  load_words_2aligned<2>(b + 192 + 8 * hh, S);
  const float d = half_bits_to_float(load_u16(b + 208));
  int sc[8];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    sc[k] = static_cast<int8_t>((S[0] >> (8 * k)) & 0xffu);
    sc[4 + k] = static_cast<int8_t>((S[1] >> (8 * k)) & 0xffu);
  }
  uint32_t q[4][8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    q[0][i] = (L[i] & 0x0f0f0f0fu) | ((H[i] << 4) & 0x30303030u);
    q[1][i] = (L[8 + i] & 0x0f0f0f0fu) | ((H[i] << 2) & 0x30303030u);
    q[2][i] = ((L[i] >> 4) & 0x0f0f0f0fu) | (H[i] & 0x30303030u);
    q[3][i] = ((L[8 + i] >> 4) & 0x0f0f0f0fu) | ((H[i] >> 2) & 0x30303030u);
  }
#pragma unroll
  for (int j = 0; j < kGemvMaxXRows; ++j) {
    if (j >= nt) break;
    uint32_t X[32];
    load_x_group(x, j, g, X);
    const float4 dx = x_scales(x, j, g);
    const int4* hp = reinterpret_cast<const int4*>(x.h + j * 2 * x.unit_pitch) + 2 * g;
    const int4 h01 = hp[0], h23 = hp[1];
    const int hs[8] = {h01.x, h01.y, h01.z, h01.w, h23.x, h23.y, h23.z, h23.w};
    int isum[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      int a = 0, c = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a = dp4a(q[k][i], X[8 * k + i], a);
        c = dp4a(q[k][4 + i], X[8 * k + 4 + i], c);
      }
      isum[k] = sc[2 * k] * (a - 32 * hs[2 * k]) + sc[2 * k + 1] * (c - 32 * hs[2 * k + 1]);
    }
    v[j] = item_tree(unit_scaled(d, dx.x, isum[0]), unit_scaled(d, dx.y, isum[1]), unit_scaled(d, dx.z, isum[2]),
                     unit_scaled(d, dx.w, isum[3]), kItemUnits);
  }
}

// --- the kernel ---------------------------------------------------------------------------------

// Quantizes the block's activation tile into shared memory: one thread per 32-element unit, so
// the loads of a unit are independent and in flight together. amax and the int sums do not
// depend on the order they are formed in.
__device__ __forceinline__ void quantize_tile(const MatmulArgs& a, int64_t x0, int nt, const SmemLayout& l,
                                              uint8_t* xq, float* xd, int* xs, int* xh) {
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
    int half_sum[2] = {0, 0};
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      uint32_t w = 0;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int q = __float2int_rn(__fmul_rn(v[4 * k + b], inv));
        half_sum[k / 4] += q;
        w |= (static_cast<uint32_t>(q) & 0xffu) << (8 * b);
      }
      packed[k] = w;
    }
    uint4* dst = reinterpret_cast<uint4*>(xq + j * l.row_pitch + (u / kItemUnits) * kGroupPitch +
                                          (u % kItemUnits) * 32);
    dst[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    dst[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
    xd[j * l.unit_pitch + u] = __fdiv_rn(amax, 127.0f);
    xs[j * l.unit_pitch + u] = half_sum[0] + half_sum[1];
    xh[j * 2 * l.unit_pitch + 2 * u] = half_sum[0];
    xh[j * 2 * l.unit_pitch + 2 * u + 1] = half_sum[1];
  }
}

// Grid: (activation tiles, row groups). Warp w of row group b owns weight rows
// b * kGemvWarps + w + k * (gridDim.y * kGemvWarps), k = 0, 1, ...; it streams them step by step
// through a stages<T>()-deep cp.async pipeline that runs on across row boundaries, so the latency
// of the first load is paid once per warp, not once per row.
template <DType T>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_quant_kernel(MatmulArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int kBlockElems = QType<T>::kBlockElems, kBlockBytes = QType<T>::kBlockBytes;
  constexpr int kFullStepBytes = step_bytes<T>();
  constexpr int kStages = stages<T>();
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
  int* xh = reinterpret_cast<int*>(smem + l.h_off);
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
  pdl_enter();  // x is the previous kernel's output
  quantize_tile(a, x0, nt, l, xq, xd, xs, xh);
  __syncthreads();
  if (n_rows == 0) return;
  const XTile x{xq, xd, xs, xh, l.row_pitch, l.unit_pitch};

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
    const int u0 = s * kStepUnits + kItemUnits * lane;
    float v[kGemvMaxXRows];
#pragma unroll
    for (int j = 0; j < kGemvMaxXRows; ++j) v[j] = 0.0f;
    if (u0 < n_units) item_dot<T>(wstep, lane, min(kItemUnits, n_units - u0), x, u0 / kItemUnits, nt, v);
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
bool launch_typed(const MatmulArgs& a, const LaunchEnv& env) {
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
  launch_kernel(env, gemv_quant_kernel<T>, grid, kGemvWarps * 32, static_cast<size_t>(l.total), a);
  return true;
}

template <DType T>
void allow_smem(int max_smem_bytes) {
  TERN_CUDA_CHECK(cudaFuncSetAttribute(gemv_quant_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem_bytes));
}

}  // namespace

bool launch_gemv_quant(const MatmulArgs& a, const LaunchEnv& env) {
  switch (a.dtype) {
    case DType::Q4_0: return launch_typed<DType::Q4_0>(a, env);
    case DType::Q4_1: return launch_typed<DType::Q4_1>(a, env);
    case DType::Q8_0: return launch_typed<DType::Q8_0>(a, env);
    case DType::Q4_K: return launch_typed<DType::Q4_K>(a, env);
    case DType::Q5_K: return launch_typed<DType::Q5_K>(a, env);
    case DType::Q6_K: return launch_typed<DType::Q6_K>(a, env);
    default: return false;
  }
}

void init_gemv_quant(int max_smem_bytes) {
  allow_smem<DType::Q4_0>(max_smem_bytes);
  allow_smem<DType::Q4_1>(max_smem_bytes);
  allow_smem<DType::Q8_0>(max_smem_bytes);
  allow_smem<DType::Q4_K>(max_smem_bytes);
  allow_smem<DType::Q5_K>(max_smem_bytes);
  allow_smem<DType::Q6_K>(max_smem_bytes);
}

}  // namespace tern::cuda
