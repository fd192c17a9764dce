// Shared pieces of the quantized GEMV kernels (gemv_quant.cu: any n; gemv_rows.cu: the n = 1
// multi-row / split-row kernel): shared-memory layout, pipeline depths, the activation tile's
// quantization, the binary counter over steps (gemv.h's canonical tree, levels 8+) and the
// bulk-copy eligibility of a product.
#pragma once

#include <cstdlib>
#include <cstring>

#include "backends/cuda/common.cuh"
#include "backends/cuda/gemv.h"
#include "backends/cuda/gemv_fusion.cuh"
#include "backends/cuda/gemv_items.cuh"

namespace tern::cuda::gemv_tile {

using namespace gemv_items;

constexpr int kLevels = 6;  // binary counter depth: up to 2^6 - 1 steps (cols < 258048)
constexpr int kMaxSteps = (1 << kLevels) - 1;

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

// Bulk-copy pipelines: at most kMaxStages stages per warp, as many as fit the byte budget
// (MatmulArgs::stage_bytes_per_warp, 0 = this default), at least 2. The staged-copy variant keeps
// stages<T>(). 6 KiB (two q4_k / q6_k / q8_0 steps) measured best or within 1% on the 8B products
// except q4_1 gate+up (8 KiB: 6% faster), H200, budgets of 4-12 KiB swept with gpu_bench
// --gemv-stage-bytes: a deeper pipeline costs resident blocks, and resident warps are what this
// kernel is short of.
constexpr int kMaxStages = 16;
constexpr int kDefaultStageBytesPerWarp = 6144;

// Bytes past the last stage buffer that an item may read. item_dot loads a lane's whole item
// (four units' words) and drops the units past the row by n_valid, so a partial item -- the last
// row of a segmented step, a row's last step -- reads past the staged bytes it uses: up to an
// item of words (q8_0: 4 x 34 bytes) plus the staged copy's 14-byte alignment shift and
// load_words_2aligned's extra word. Inside the region that lands in the next buffer (ignored
// values); after the last one it would leave the block's shared memory (a memcheck error, and an
// illegal-address fault once static shared memory moved the end off the allocation granule).
constexpr int kStageTailSlack = 160;

// Weight steps a bulk-copy pipeline issues before its PDL wait, i.e. while the previous kernel
// may still run: n_stages - 1 (shallow: the loop refills a stage before waiting on the next) or
// every stage (deep: the first refill waits until the first step is consumed), so that a warp
// of a small product (one or two one-step row sets) has all its weights in flight while the
// activations are formed. Measured on the H200 (8B products, bench/RESULTS.md session 5): deep
// helps the multi-row kernel (gemv_rows.cu; v 5.23 -> 4.58 us, gate+up 20.98 -> 20.27) and
// not the single-row one (8B Q4_K_M decode 312.7 -> 303.4 tok/s with it), so the default is per
// kernel. TERN_CUDA_GEMV_PREFETCH=shallow / =deep overrides both (A/B; read once per process).
inline int prefetch_steps(int n_stages, bool deep_default) {
  static const int env = [] {
    const char* e = std::getenv("TERN_CUDA_GEMV_PREFETCH");
    if (e != nullptr && std::strcmp(e, "shallow") == 0) return 0;
    if (e != nullptr && std::strcmp(e, "deep") == 0) return 1;
    return -1;
  }();
  const bool deep = env < 0 ? deep_default : env == 1;
  return deep ? n_stages : n_stages - 1;
}

struct SmemLayout {
  int row_pitch;    // bytes of one quantized activation row (groups of group_pitch<kXB>() bytes)
  int unit_pitch;   // units of one row of xd / xs (a multiple of 4: 16-byte loads)
  int x_off, d_off, s_off, h_off, stage_off;
  int stage_pitch;  // bytes of one stage buffer
  int total;
};

template <DType T, int kXB>
__host__ __device__ SmemLayout smem_layout(int cols, int nt_alloc, int n_stages, int seg_rows = 1) {
  SmemLayout l;
  const int n_units = cols / 32;
  l.row_pitch = (n_units + kItemUnits - 1) / kItemUnits * group_pitch<kXB>();
  l.unit_pitch = (n_units + kItemUnits - 1) / kItemUnits * kItemUnits;
  l.x_off = kGemvWarps * kMaxStages * 8;  // the bulk pipelines' mbarriers come first
  l.d_off = l.x_off + nt_alloc * l.row_pitch;
  l.s_off = l.d_off + round16(nt_alloc * l.unit_pitch * 4);
  l.h_off = l.s_off + round16(nt_alloc * l.unit_pitch * 4);
  l.stage_off = l.h_off + round16(nt_alloc * l.unit_pitch * 8);
  // A row's steps are full steps, or one step of the whole row when it is shorter (seg_rows such
  // rows per step in segmented mode).
  const int row_step_bytes =
      seg_rows * ((cols < kStepElems ? cols : kStepElems) / QType<T>::kBlockElems * QType<T>::kBlockBytes);
  // + 32: the up-to-14-byte alignment shift plus the one-word overread of load_words_2aligned.
  l.stage_pitch = round16(row_step_bytes + 32);
  l.total = l.stage_off + kGemvWarps * n_stages * l.stage_pitch + kStageTailSlack;
  return l;
}

// 1 / scale of a unit: q_max / amax, or 0 where that is not finite (amax = 0, or so small that
// the quotient overflows: the unit quantizes to zeros, as the CPU's quantizer does).
template <int kXB>
__device__ __forceinline__ float x_inv_scale(float amax) {
  const float inv = __fdiv_rn(x_qmax<kXB>(), amax);
  return isfinite(inv) ? inv : 0.0f;
}

// Four consecutive values of a unit, quantized and packed into kXB words (int8: one word of four
// bytes; int16: two words of two halves); adds the values to sum.
template <int kXB>
__device__ __forceinline__ void quantize4(const float* v, float inv, uint32_t* out, int& sum) {
  int q[4];
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    q[b] = __float2int_rn(__fmul_rn(v[b], inv));
    sum += q[b];
  }
  if constexpr (kXB == 1) {
    out[0] = (static_cast<uint32_t>(q[0]) & 0xffu) | (static_cast<uint32_t>(q[1]) & 0xffu) << 8 |
             (static_cast<uint32_t>(q[2]) & 0xffu) << 16 | static_cast<uint32_t>(q[3]) << 24;
  } else {
    out[0] = (static_cast<uint32_t>(q[0]) & 0xffffu) | static_cast<uint32_t>(q[1]) << 16;
    out[1] = (static_cast<uint32_t>(q[2]) & 0xffffu) | static_cast<uint32_t>(q[3]) << 16;
  }
}

// Stores the N packed words (whole 16-byte pieces) to dst (16-byte aligned).
template <int N>
__device__ __forceinline__ void store_words(uint8_t* dst, const uint32_t (&w)[N]) {
  static_assert(N % 4 == 0, "whole 16-byte pieces");
#pragma unroll
  for (int k = 0; k < N / 4; ++k) {
    reinterpret_cast<uint4*>(dst)[k] = make_uint4(w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3]);
  }
}

// Quantizes the block's activation tile into shared memory: one thread per 32-element unit, so
// the loads of a unit are independent and in flight together. amax and the int sums do not
// depend on the order they are formed in.
template <int kXB>
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
    const float inv = x_inv_scale<kXB>(amax);
    uint32_t packed[8 * kXB];
    int half_sum[2] = {0, 0};
#pragma unroll
    for (int k = 0; k < 8; ++k) quantize4<kXB>(v + 4 * k, inv, packed + kXB * k, half_sum[k / 4]);
    store_words(xq + j * l.row_pitch + (u / kItemUnits) * group_pitch<kXB>() + (u % kItemUnits) * 32 * kXB, packed);
    xd[j * l.unit_pitch + u] = __fdiv_rn(amax, x_qmax<kXB>());
    xs[j * l.unit_pitch + u] = half_sum[0] + half_sum[1];
    xh[j * 2 * l.unit_pitch + 2 * u] = half_sum[0];
    xh[j * 2 * l.unit_pitch + 2 * u + 1] = half_sum[1];
  }
}

// A half-unit's 16 values quantized with its unit's scale, the unit's halves in adjacent lanes:
// amax over both halves (one shuffle with the pair lane, which every lane of the warp must
// reach; a lane that is not live takes part in the shuffles only), q = rint(v * q_max / amax)
// packed into 4 * kXB words, and the int sums of this half and of the pair's.
template <int kXB>
struct HalfUnitQ {
  float amax;
  uint32_t packed[4 * kXB];
  int half_sum, other_sum;
};
template <int kXB>
__device__ __forceinline__ HalfUnitQ<kXB> quantize_half_unit(const float (&v)[16], bool live) {
  HalfUnitQ<kXB> q;
  q.amax = 0.0f;
  if (live) {
#pragma unroll
    for (int e = 0; e < 16; ++e) q.amax = fmaxf(q.amax, fabsf(v[e]));
  }
  q.amax = fmaxf(q.amax, __shfl_xor_sync(kFullMask, q.amax, 1));
  const float inv = x_inv_scale<kXB>(q.amax);
  q.half_sum = 0;
#pragma unroll
  for (int w = 0; w < 4; ++w) quantize4<kXB>(v + 4 * w, inv, q.packed + kXB * w, q.half_sum);
  q.other_sum = __shfl_xor_sync(kFullMask, q.half_sum, 1);
  return q;
}

// quantize_tile for one activation row by half-units (the multi-row kernel's tile, gemv_rows.cu):
// thread t takes half-units t, t + blockDim, ... (16 elements each, a unit's halves in adjacent
// lanes, meeting for amax and the int sum in one shuffle, as quantize_tile_fused), and loads up to
// kBatch of them before quantizing any. quantize_tile runs one unit per thread, one after another:
// rows of 14336 (ffn_down) took two dependent L2 round trips, and rows of 4096 left half the
// threads idle and the other half a 32-element chain while every warp waited at the barrier
// (session 8 profile: the prologue was ~20% of the multi-row kernel's stall samples). amax is a
// max, the values and int sums are the same, so the tile is quantize_tile's bit for bit.
// kRunUnits: the quantized row's layout, runs of kRunUnits units run_pitch<kRunUnits, kXB>()
// bytes apart (x_unit_offset); the default is the lane items' groups of four units
// (group_pitch). The values are the same in any layout.
template <int kRunUnits, int kXB>
__host__ __device__ constexpr int x_unit_offset(int u) {
  return (u / kRunUnits) * run_pitch<kRunUnits, kXB>() + (u % kRunUnits) * 32 * kXB;
}

template <int kBatch, int kXB, int kRunUnits = kItemUnits>
__device__ __forceinline__ void quantize_tile_halves(const MatmulArgs& a, const SmemLayout& l, uint8_t* xq, float* xd,
                                                     int* xs, int* xh) {
  const int n_units = static_cast<int>(a.cols / 32), total = 2 * n_units;
  const int lane = threadIdx.x & 31, step = blockDim.x;
  for (int base = 0; base < total; base += kBatch * step) {
    float v[kBatch][16];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int i = base + k * step + static_cast<int>(threadIdx.x);
      if (i < total) load_floats16(a.x + int64_t{i >> 1} * 32 + 16 * (i & 1), v[k]);
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int i = base + k * step + static_cast<int>(threadIdx.x);
      if (i - lane >= total) break;  // uniform across the warp: whole warps take part in the shuffles
      const bool active = i < total;
      const int half = i & 1, u = i >> 1;
      const HalfUnitQ<kXB> q = quantize_half_unit<kXB>(v[k], active);
      if (active) {
        store_words(xq + x_unit_offset<kRunUnits, kXB>(u) + half * 16 * kXB, q.packed);
        xh[2 * u + half] = q.half_sum;
        if (half == 0) {
          xd[u] = __fdiv_rn(q.amax, x_qmax<kXB>());
          xs[u] = q.half_sum + q.other_sum;
        }
      }
    }
  }
}

// Static shared memory the fused prologue adds to a quantized GEMV kernel (the norm tree's warp
// sums, 1 / rms per row, the SwiGLU store's flag), reserved out of the device's per-block limit
// (gemv_quant.cu checks the kernels against it at init).
constexpr int kFusionStaticSmemBytes = 256;

// quantize_tile with a fused prologue (a.fuse, gemv_fusion.cuh): the tile is formed from the op's
// inputs instead of read from a.x, and the blocks of row group 0 store an RMSNorm's output to
// a.x (store_block: the caller's choice of blocks, one per activation tile). Two threads per unit, 16 elements each (a unit's halves, as xh splits it), meeting for
// amax in one shuffle: the extra loads and arithmetic of the prologue would otherwise push the
// kernel's single-row tiles past their 64-80 registers. The values, amax and int sums are those
// quantize_tile forms from the stored activations, so the tile is the same bit for bit.
// The norm weight of a thread's first half-unit of quantize_tile_fused, loaded before the
// kernel's PDL wait (MatmulArgs::gemv_norm_preload): the weight is constant, so this takes its
// L2 round trip off the path after the wait; the values, and so the bits, are the same.
struct NormPreload {
  float w[16];
  bool have = false;
};
__device__ __forceinline__ void preload_norm16(const MatmulArgs& a, int nt, NormPreload& p) {
  p.have = false;
  if (a.fuse.prologue != GemvPrologue::kRmsNorm) return;
  const int n_units = static_cast<int>(a.cols / 32), i = threadIdx.x;
  if (i >= 2 * nt * n_units) return;
  const int half = i & 1, u = (i >> 1) % n_units;
  load_floats16(a.fuse.src2 + int64_t{u} * 32 + 16 * half, p.w);
  p.have = true;
}

template <int kXB, int kRunUnits = kItemUnits>
__device__ __forceinline__ void quantize_tile_fused(const MatmulArgs& a, int64_t x0, int nt, const SmemLayout& l,
                                                    uint8_t* xq, float* xd, int* xs, int* xh, bool store_block,
                                                    const NormPreload& pre) {
  __shared__ float row_inv[kGemvMaxXRows];  // RMSNorm: 1 / rms per activation row
  if (a.fuse.prologue == GemvPrologue::kRmsNorm) fused_rms_inv_rows<kGemvWarps * 32>(a, x0, nt, row_inv);
  const int cols = static_cast<int>(a.cols), n_units = cols / 32;
  const bool store = a.fuse.write_x != 0 && a.fuse.prologue == GemvPrologue::kRmsNorm && store_block;
  const int lane = threadIdx.x & 31, total = 2 * nt * n_units;
  // i - lane is uniform across the warp, so whole warps take part in the shuffle.
  for (int i = threadIdx.x; i - lane < total; i += blockDim.x) {
    const bool active = i < total;
    const int half = i & 1, unit = active ? i >> 1 : 0;
    const int j = unit / n_units, u = unit % n_units;
    float v[16];
    if (active) {
      // The thread's first half-unit (i == threadIdx.x) is the one preload_norm16 loaded.
      const bool use_pre = pre.have && i == static_cast<int>(threadIdx.x);
      fused_x16(a, x0 + j, int64_t{u} * 32 + 16 * half, row_inv[j < kGemvMaxXRows ? j : 0], store, v, pre.w, use_pre);
    } else {
#pragma unroll
      for (int k = 0; k < 16; ++k) v[k] = 0.0f;
    }
    const HalfUnitQ<kXB> q = quantize_half_unit<kXB>(v, true);  // (an idle lane's v is zero)
    if (active) {
      store_words(xq + j * l.row_pitch + x_unit_offset<kRunUnits, kXB>(u) + half * 16 * kXB, q.packed);
      xh[j * 2 * l.unit_pitch + 2 * u + half] = q.half_sum;
      if (half == 0) {
        xd[j * l.unit_pitch + u] = __fdiv_rn(q.amax, x_qmax<kXB>());
        xs[j * l.unit_pitch + u] = q.half_sum + q.other_sum;
      }
    }
  }
}

// Without a preloaded norm weight.
template <int kXB, int kRunUnits = kItemUnits>
__device__ __forceinline__ void quantize_tile_fused(const MatmulArgs& a, int64_t x0, int nt, const SmemLayout& l,
                                                    uint8_t* xq, float* xd, int* xs, int* xh, bool store_block) {
  NormPreload none;
  quantize_tile_fused<kXB, kRunUnits>(a, x0, nt, l, xq, xd, xs, xh, store_block, none);
}

// Binary counter over a row's steps (levels 8+ of the canonical tree): step s merges with the
// stored subtrees of its trailing one bits and is stored at the first zero bit.
__device__ __forceinline__ void counter_push(float (&stack)[kLevels], int s, float sum) {
  bool placed = false;
#pragma unroll
  for (int k = 0; k < kLevels; ++k) {
    if (!placed) {
      if ((s >> k) & 1) {
        sum = __fadd_rn(stack[k], sum);
      } else {
        stack[k] = sum;
        placed = true;
      }
    }
  }
}

// Closes the zero-padded tree of n pushed steps: merges the stored subtrees, smallest first.
__device__ __forceinline__ float counter_close(const float (&stack)[kLevels], int n) {
  float acc = 0.0f;
  bool have = false;
#pragma unroll
  for (int k = 0; k < kLevels; ++k) {
    if ((n >> k) & 1) {
      acc = have ? __fadd_rn(stack[k], acc) : stack[k];
      have = true;
    }
  }
  return acc;
}

// True when every step of every row can be one bulk copy: 16-byte aligned bases and strides,
// and step lengths (the full step and the row's last one) that are multiples of 16.
template <DType T>
inline bool bulk_eligible(const MatmulArgs& a) {
  const int64_t last_elems = a.cols - (a.cols - 1) / kStepElems * kStepElems;
  if (step_bytes<T>() % 16 != 0 || last_elems / QType<T>::kBlockElems * QType<T>::kBlockBytes % 16 != 0) return false;
  for (int m = 0; m < a.n_mats; ++m) {
    if (reinterpret_cast<uintptr_t>(a.w[m]) % 16 != 0 || a.w_stride_bytes[m] % 16 != 0) return false;
  }
  return true;
}

}  // namespace tern::cuda::gemv_tile
