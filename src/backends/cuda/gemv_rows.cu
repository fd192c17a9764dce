// The n = 1 quantized GEMV with several weight rows per warp step and rows split over warps (the
// default for the products gemv_rows_default picks; GemvPath::kRows, TERN_CUDA_GEMV=rows, for
// all it takes): same items, same canonical tree (gemv.h), so the same bits as gemv_quant.cu's
// kernels; only which warp computes which subtree changes. It takes the RMSNorm prologue, the
// residual and SwiGLU epilogues (gemv_fusion.cuh) and GemvFusion::concurrent.
//
// Why (H200, bench/RESULTS.md "GEMV at the HBM limit"): the single-row kernel spends ~540 warp
// instructions per 2.3 KB q4_k step with ~1 eligible warp per scheduler, so it is bound by
// instructions, not bytes; and 4096 rows of 14336 (ffn_down) over ~3200 warps leave most warps
// one row and some two, so the last third of the launch runs on a fraction of the warps.
//
// kRows weight rows per warp step (2 or 4, rows consecutive in the joint row index): the lane
// loads its activation group (32 words, scales, sums) once and dots it with each row's item, and
// the rows' butterflies share their shuffles: at level 1 a lane keeps the rows whose index bit 0
// matches its lane bit 0 and sends the others (one shuffle per kept pair instead of one per row),
// at level 2 likewise with bit 1, then plain butterflies. Each sum is still a + b of the same two
// subtrees (fadd is commutative), so lane i ends with row i's step sum, bit for bit the full-warp
// tree's. The binary counter then runs once per lane for its own row.
//
// kParts warps per row (2 or 4, a group of consecutive warps of a block): part p takes the
// aligned run of P = 2^k steps [pP, pP + P) (the last part may have fewer), so its counter builds
// exactly the canonical subtree of that run. The parts' values meet in shared memory behind a
// named barrier of the group, and part 0 folds them with the same counter and closing, which
// gives the single-warp result (the closing of a row's steps merges the low bits, i.e. the last
// partial run, first, then the full runs' subtrees: the same as pushing the runs as leaves).
//
// The grid is balanced rather than maximal: with W resident warps and S row sets, every group
// takes ceil(S / groups) sets, and the number of groups is cut to what that needs, so no warp
// streams two sets while others idle (dealing the sets over every resident block instead,
// TERN_CUDA_GEMV_SPREAD=1, measured slower).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/gemv.h"
#include "backends/cuda/gemv_bulk.cuh"
#include "backends/cuda/gemv_items.cuh"
#include "backends/cuda/gemv_tile.cuh"
#include "backends/cuda/launch.cuh"
#include "core/check.h"

namespace tern::cuda {
namespace {

using namespace gemv_items;
using namespace gemv_tile;

// Levels 3-7 of the canonical tree for kRows rows at once; lane l returns row (l % kRows)'s sum.
template <int kRows>
__device__ __forceinline__ float multi_row_tree(const float (&v)[kRows], int lane) {
  if constexpr (kRows == 1) {
    return warp_sum_tree(v[0]);
  } else {
    const bool b0 = lane & 1;
    float s;
    if constexpr (kRows == 2) {
      const float keep = b0 ? v[1] : v[0], send = b0 ? v[0] : v[1];
      s = __fadd_rn(keep, __shfl_xor_sync(kFullMask, send, 1));
    } else {
      static_assert(kRows == 4, "2 or 4 rows per step");
      // Level 1: keep rows b0 and b0 + 2, send rows 1 - b0 and 3 - b0.
      const float keep_a = b0 ? v[1] : v[0], keep_b = b0 ? v[3] : v[2];
      const float send_a = b0 ? v[0] : v[1], send_b = b0 ? v[2] : v[3];
      const float sa = __fadd_rn(keep_a, __shfl_xor_sync(kFullMask, send_a, 1));
      const float sb = __fadd_rn(keep_b, __shfl_xor_sync(kFullMask, send_b, 1));
      // Level 2: keep row b0 + 2 * b1.
      const bool b1 = lane & 2;
      const float keep = b1 ? sb : sa, send = b1 ? sa : sb;
      s = __fadd_rn(keep, __shfl_xor_sync(kFullMask, send, 2));
    }
#pragma unroll
    for (int off = kRows; off < 32; off <<= 1) s = __fadd_rn(s, __shfl_xor_sync(kFullMask, s, off));
    return s;
  }
}

// Register budgets without spills (ptxas -v, sm_90a): single-row kernels 64 registers (four
// blocks per SM) for q4_k, 80 (three) for the others; two or four rows per step keep the
// activation group live across the rows' items and need up to 128 (two blocks).
// 16-bit activations (kXB = 2): a group is 64 registers, so every instance gets 128.
template <DType T, int kRows, int kXB>
constexpr int rows_min_blocks() {
  if constexpr (kRows == 1 && kXB == 1) return T == DType::Q4_K ? 4 : 3;
  else return 2;
}

// Bytes of one stage: a step of each of the kRows rows, each at a 16-byte aligned offset, plus
// the one-word overread of load_words_2aligned past the last row.
// A mixed-type launch (T2 != T) sizes its rows for the larger step of the two types.
template <DType T, DType T2 = T>
__host__ __device__ constexpr int rows_row_pitch() {
  return round16(step_bytes<T>() > step_bytes<T2>() ? step_bytes<T>() : step_bytes<T2>());
}

template <DType T, int kRows, DType T2 = T>
__host__ __device__ int rows_stage_pitch() {
  return kRows * rows_row_pitch<T, T2>() + 16;
}

template <DType T, int kRows, int kXB, DType T2 = T>
__host__ __device__ SmemLayout rows_smem_layout(int cols, int n_stages) {
  SmemLayout l = smem_layout<T, kXB>(cols, 1, n_stages);
  l.stage_pitch = rows_stage_pitch<T, kRows, T2>();
  l.total = l.stage_off + kGemvWarps * n_stages * l.stage_pitch;
  // + partial sums of the split rows: [groups][2 buffers][kParts <= 4][kRows] floats.
  l.total += kGemvWarps * 2 * 4 * kRows * 4;
  return l;
}

// Grid: blocks of kGemvWarps / kParts groups. Group q takes row sets q, q + n_groups, ... (set k =
// joint rows k * kRows .. k * kRows + kRows - 1, or paired gate / up rows under a SwiGLU
// epilogue); part p of the group takes steps [p * part_steps, (p + 1) * part_steps) of each.
// spread == 0: q = block * groups_per_block + group in block, so the sets fill the first blocks;
// spread == 1: q = block + blocks * group in block, so consecutive sets go to different blocks
// and a grid of every resident block spreads a small product's sets over all SMs.
// The per-step code is lean (session 7, bench/RESULTS.md: the profile put the kernel at 0.17 warp
// instructions per weight byte, half of them outside the dot products, with 2-4 resident warps
// per scheduler waiting on each other's dependencies): weight items are read with the stage's
// known alignment (gemv_items.cuh WItemOf<T, true>: one load path per warp, q4_k's high nibbles
// in place), and a set's row addresses come from one matrix lookup (its rows are consecutive in
// one matrix, or a gate / up pair) instead of one per row. Same words, same integer sums, same
// bits as the previous code (q6_k down 22.3 -> 19.1 us, q4_k q+k 7.1 -> 6.4 us).
// T2 != T: a mixed-type launch (MatmulArgs::tail_mat; kRows >= 2, one part, no SwiGLU pairs):
// the sets of the tail matrices' rows hold T2 rows and take T2's items and step lengths, the
// others T's; the activation tile carries what both read. Each row's arithmetic is its type's.
template <DType T, int kRows, int kParts, int kXB, DType T2 = T>
__global__ void __launch_bounds__(kGemvWarps * 32, rows_min_blocks<T, kRows, kXB>())
    gemv_rows_kernel(MatmulArgs a, int n_stages, int part_steps, int prefetch, int spread, int norm_preload) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(16) uint8_t smem[];
  using W = typename WItemOf<T, true>::type;
  using W2 = typename WItemOf<T2, true>::type;
  constexpr bool kMixed = T2 != T;
  constexpr int kFullStepBytes = step_bytes<T>();
  constexpr int kFullStepBytes2 = step_bytes<T2>();
  constexpr int kRowPitch = rows_row_pitch<T, T2>();
  constexpr int kGroups = kGemvWarps / kParts;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = warp / kParts, part = warp % kParts;
  const int cols = static_cast<int>(a.cols);
  const int n_steps = (cols + kStepElems - 1) / kStepElems;
  const int step0 = part * part_steps;
  const int my_steps = min(part_steps, n_steps - step0);  // >= 1: the launcher sizes the parts
  const SmemLayout l = rows_smem_layout<T, kRows, kXB, T2>(cols, n_stages);
  uint8_t* xq = smem + l.x_off;
  float* xd = reinterpret_cast<float*>(smem + l.d_off);
  int* xs = reinterpret_cast<int*>(smem + l.s_off);
  int* xh = reinterpret_cast<int*>(smem + l.h_off);
  float* partials = reinterpret_cast<float*>(smem + l.stage_off + kGemvWarps * n_stages * l.stage_pitch) +
                    group * 2 * 4 * kRows;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem) + warp * kMaxStages;
  uint8_t* stage = smem + l.stage_off + warp * n_stages * l.stage_pitch;
  const int64_t n_sets = a.total_rows() / kRows;
  const int64_t set_stride = int64_t{gridDim.x} * kGroups;
  const int64_t first_set = spread ? int64_t{blockIdx.x} + int64_t{gridDim.x} * group : int64_t{blockIdx.x} * kGroups + group;
  const int my_sets = first_set < n_sets ? static_cast<int>((n_sets - first_set + set_stride - 1) / set_stride) : 0;
  const int total = my_sets * my_steps;

  // Mixed: joint rows from tail_row0 on are T2 rows (a multiple of kRows: sets hold one type).
  int64_t tail_row0 = a.total_rows();
  if constexpr (kMixed) tail_row0 = a.rows[0] + (a.tail_mat > 1 ? a.rows[1] : 0);
  struct Cursor {
    int set_k, t, slot;
    const uint8_t* w[kRows];  // the set's rows, at this part's first step
  };
  auto set_is_tail = [&](int set_k) {
    return kMixed && (first_set + int64_t{set_k} * set_stride) * kRows >= tail_row0;
  };
  // A SwiGLU epilogue (GemvFusion::glu_out; kRows >= 2, one part) pairs the matrices' rows: row
  // i of set k is gate row (or, i odd, up row) k * kRows / 2 + i / 2, so lanes 2j and 2j + 1 end
  // with the two sums of one output. Only which warp computes a row changes, never how.
  const bool pair = a.fuse.glu_out != nullptr;
  auto joint_row = [&](int64_t set, int i) -> int64_t {
    if (!pair) return set * kRows + i;
    return (i & 1) * a.rows[0] + set * (kRows / 2) + (i >> 1);
  };
  // The matrix of the issuing cursor's last set, joint rows [win_begin, win_end) from win_w0 (its
  // row 0): a warp's sets walk the joint row index upwards, so a set inside it takes its rows'
  // addresses without a matrix lookup (mat_row's conditionals and 64-bit products were a large
  // part of a one-step set's instructions).
  int64_t win_begin = 0, win_end = 0;
  const uint8_t* win_w0 = nullptr;
  size_t win_stride = 0;
  auto load_set = [&](Cursor& c) {
    if (c.set_k >= my_sets) return;
    const int64_t set = first_set + int64_t{c.set_k} * set_stride;
    const size_t skip = static_cast<size_t>(step0) * (set_is_tail(c.set_k) ? kFullStepBytes2 : kFullStepBytes);
    {
      if (pair) {  // gate row (matrix 0) and up row (matrix 1) of each output, rows of equal count
        const int64_t r0 = set * (kRows / 2);
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
          const uint8_t* base = static_cast<const uint8_t*>(i & 1 ? a.w[1] : a.w[0]);
          c.w[i] = base + (r0 + (i >> 1)) * static_cast<int64_t>(i & 1 ? a.w_stride_bytes[1] : a.w_stride_bytes[0]) + skip;
        }
        return;
      }
      const int64_t jr = set * kRows;
      if (kRows == 1 || jr >= win_end) {  // (one-row instances: no registers to keep it in)
        const MatRow m0 = mat_row(a, jr);
        win_begin = jr - m0.r;
        win_end = win_begin + m0.rows;
        win_stride = m0.stride;
        win_w0 = m0.w - m0.r * static_cast<int64_t>(m0.stride);
      }
      if (jr + kRows <= win_end) {  // the set's rows in one matrix: one stride apart
        const uint8_t* w = win_w0 + (jr - win_begin) * static_cast<int64_t>(win_stride) + skip;
#pragma unroll
        for (int i = 0; i < kRows; ++i) c.w[i] = w + static_cast<int64_t>(i) * win_stride;
        return;
      }
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) c.w[i] = mat_row(a, joint_row(set, i)).w + skip;
  };
  // Only the issuing cursor tracks the rows' addresses.
  auto advance = [&](Cursor& c, bool with_rows) {
    if (++c.t == my_steps) {
      c.t = 0;
      ++c.set_k;
      if (with_rows) load_set(c);
    }
    if (++c.slot == n_stages) c.slot = 0;
  };
  // A step's copy length: a full step's bytes but in a row's last step.
  const int last_elems = cols - (n_steps - 1) * kStepElems;
  const int last_len = last_elems / QType<T>::kBlockElems * QType<T>::kBlockBytes;
  const int last_len2 = last_elems / QType<T2>::kBlockElems * QType<T2>::kBlockBytes;
  auto issue = [&](const Cursor& c) {
    if (lane != 0) return;
    const bool last = step0 + c.t == n_steps - 1;
    const bool tail = set_is_tail(c.set_k);
    const int len = tail ? (last ? last_len2 : kFullStepBytes2) : (last ? last_len : kFullStepBytes);
    const size_t step_off = static_cast<size_t>(c.t) * (tail ? kFullStepBytes2 : kFullStepBytes);
    uint8_t* dst = stage + c.slot * l.stage_pitch;
    mbar_expect_bytes(&bars[c.slot], kRows * len);
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      bulk_copy_no_arrive(dst + i * kRowPitch, c.w[i] + step_off, len, &bars[c.slot]);
    }
  };
  if (lane == 0) {
    for (int k = 0; k < n_stages; ++k) mbar_init(&bars[k]);
    mbar_fence_init();
  }
  __syncwarp();
  Cursor in{0, 0, 0, {}};
  load_set(in);
  Cursor out = in;
  for (int k = 0; k < prefetch; ++k) {
    if (k < total) {
      issue(in);
      advance(in, true);
    }
  }
  // x is the previous kernel's output, so the kernel waits for it here; a concurrent launch
  // (GemvFusion::concurrent: v after q+k, carrying their RMSNorm) reads only what the kernels
  // before its predecessor wrote, complete once the predecessor's blocks have passed their own
  // wait (which launched this one), and waits for the predecessor only before it exits.
  const bool concurrent = a.fuse.concurrent != 0;
  // The norm weight before the wait (gemv_norm_preload; H200, alone with the prologue: q4_k q+k
  // 8.77 -> 8.24 us, q6_k v 5.93 -> 5.52); not in the one-row instances, whose 64-80 registers
  // would spill its 16 values.
  NormPreload pre;
  if (kRows >= 2 && norm_preload) preload_norm16(a, 1, pre);
  if (!concurrent) pdl_enter();
  // An RMSNorm prologue (the only one gemv_rows_supports takes): block 0 stores the normed rows.
  if (a.fuse.prologue != GemvPrologue::kNone) {
    quantize_tile_fused<kXB>(a, 0, 1, l, xq, xd, xs, xh, blockIdx.x == 0, pre);
  } else {
    quantize_tile_halves<kRows >= 2 ? 4 : 1, kXB>(a, l, xq, xd, xs, xh);
  }
  __syncthreads();
  if (my_sets == 0) {  // the whole group: its parts share the sets
    if (concurrent) pdl_enter();
    return;
  }
  const XTile x{xq, xd, xs, xh, l.row_pitch, l.unit_pitch};
  const int row_of_lane = lane % kRows;

  float stack[kLevels];
#pragma unroll
  for (int k = 0; k < kLevels; ++k) stack[k] = 0.0f;
  uint32_t phases = 0;
  // The matrix of the lane's output row (joint rows [out_begin, out_end), outputs out_y): each
  // lane's row grows with its sets, so the lookup runs once per matrix, as load_set's.
  int64_t out_begin = 0, out_end = 0;
  float* out_y = nullptr;
  auto out_row = [&](int64_t r) -> int64_t {
    if (kRows == 1 || r >= out_end) {
      const MatRow m = mat_row(a, r);
      out_begin = r - m.r;
      out_end = out_begin + m.rows;
      out_y = m.y;
    }
    return r - out_begin;
  };
  for (int it = 0; it < total; ++it) {
    // Refill the stage consumed by the previous iteration (steps below `prefetch` went out above).
    if (it + n_stages - 1 < total && it + n_stages - 1 >= prefetch) {
      issue(in);
      advance(in, true);
    }
    mbar_wait(&bars[out.slot], (phases >> out.slot) & 1u);
    phases ^= 1u << out.slot;
    const int s = step0 + out.t;
    const uint8_t* wstage = stage + out.slot * l.stage_pitch;
    const int u0 = s * kStepUnits + kItemUnits * lane;
    float v[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) v[i] = 0.0f;
    // Row 0's item is decoded before x is loaded, as in gemv_quant.cu: the other order keeps
    // x's 40-odd registers live through the decode and spills at these register budgets.
    auto dot_rows = [&](auto item, int n_valid) {
      using WI = decltype(item);
      WI w0;
      w0.load(wstage, lane);
      XGroup<kXB> xg;
      load_x<WI::kSums, WI::kHalves>(x, 0, u0 / kItemUnits, xg);
      v[0] = w0.dot(xg, n_valid);
#pragma unroll
      for (int i = 1; i < kRows; ++i) {
        WI w;
        w.load(wstage + i * kRowPitch, lane);
        v[i] = w.dot(xg, n_valid);
      }
    };
    if (u0 < cols / 32) {
      const int n_valid = min(kItemUnits, cols / 32 - u0);
      if (kMixed && set_is_tail(out.set_k)) dot_rows(W2{}, n_valid);
      else dot_rows(W{}, n_valid);
    }
    // A one-step run (rows of <= 4096 elements: most products) is its step's sum, which is what
    // pushing it and closing the counter would give; the counter's bookkeeping is skipped.
    const float step_sum = multi_row_tree<kRows>(v, lane);
    if (my_steps > 1) counter_push(stack, out.t, step_sum);
    if (out.t == my_steps - 1) {
      const float mine = my_steps == 1 ? step_sum : counter_close(stack, my_steps);
      const int64_t r = joint_row(first_set + int64_t{out.set_k} * set_stride, row_of_lane);
      if constexpr (kParts == 1) {
        const int64_t rr = out_row(r);
        if (lane < kRows) {
          out_y[rr] = mine;
          fused_residual(a, 0, rr, mine);
        }
        if (kRows >= 2 && pair) {
          const float up = __shfl_down_sync(kFullMask, mine, 1);
          __syncwarp();  // after the up row's store, so an in-place output wins
          if (lane < kRows && (lane & 1) == 0) a.fuse.glu_out[rr] = swiglu_value(mine, up);
        }
      } else {
        float* slot = partials + (out.set_k & 1) * 4 * kRows;
        if (lane < kRows) slot[part * kRows + lane] = mine;
        // Named barrier of the group's kParts warps (id 0 is __syncthreads). Slots alternate
        // between sets: a part writes set k + 2's slot only after barrier k + 1, which part 0
        // reaches after reading set k's.
        asm volatile("bar.sync %0, %1;\n" ::"r"(1 + group), "r"(kParts * 32) : "memory");
        if (part == 0 && lane < kRows) {
          const int n_parts = (n_steps + part_steps - 1) / part_steps;
          float runs[kLevels];
#pragma unroll
          for (int k = 0; k < kLevels; ++k) runs[k] = 0.0f;
#pragma unroll
          for (int p = 0; p < kParts; ++p) {
            if (p < n_parts) counter_push(runs, p, slot[p * kRows + lane]);
          }
          const int64_t rr = out_row(r);
          const float acc = counter_close(runs, n_parts);
          out_y[rr] = acc;
          fused_residual(a, 0, rr, acc);
        }
      }
    }
    advance(out, false);
    __syncwarp();  // every lane is done with this stage before lane 0 refills it
  }
  if (concurrent) pdl_enter();  // completes after the predecessor: the stream's order
#else
  __trap();  // launch_gemv_rows runs only on sm_90+ (bulk copies)
#endif
}

// Whether a launch marked concurrent (GemvFusion::concurrent) runs alongside its predecessor: off
// by default, TERN_CUDA_GEMV_CONCURRENT=1 turns it on (read once per process). Such a launch
// reads the norm's inputs without a griddepcontrol.wait of its own: it relies on its
// predecessor's blocks having passed theirs before it could launch, and on nothing of the SM's
// L1 holding those rows from before their writer ran. The PTX model promises visibility only to
// a grid that waits, and the measured gain was small (8B Q4_K_M 334.0 -> 336.0 tok/s on the
// H200, bench/RESULTS.md), so the default keeps every launch behind its own wait.
bool run_concurrent() {
  static const bool on = [] {
    const char* e = std::getenv("TERN_CUDA_GEMV_CONCURRENT");
    return e != nullptr && std::strcmp(e, "1") == 0;
  }();
  return on;
}

// Whether the grid spreads the row sets over every resident block (the kernel's spread == 1)
// instead of packing them into the fewest blocks: off, TERN_CUDA_GEMV_SPREAD=1 turns it on (A/B;
// read once per process). Measured slower on the H200 (8B q4_k q+k 6.94 -> 7.75 us, q6_k v 4.32
// -> 5.37, Q4_K_M decode 336.0 -> 330.3 tok/s): more blocks repeat the activation prologue, and a
// product's sets on fewer SMs leave the rest to the next launch's early start.
bool spread_sets() {
  static const bool spread = [] {
    const char* e = std::getenv("TERN_CUDA_GEMV_SPREAD");
    return e != nullptr && std::strcmp(e, "1") == 0;
  }();
  return spread;
}

// Launches one instance; false when even two stages do not fit shared memory (four rows of
// wide q6_k steps), which the caller answers with fewer rows per step. (One row per step always
// fits: launch_typed in gemv_quant.cu has checked a larger layout.)
template <DType T, int kRows, int kParts, int kXB, DType T2 = T>
bool launch_rows_instance(const MatmulArgs& a, const LaunchEnv& env, int part_steps) {
  auto* kernel = gemv_rows_kernel<T, kRows, kParts, kXB, T2>;
  const int cols = static_cast<int>(a.cols);
  const int budget = a.stage_bytes_per_warp > 0 ? a.stage_bytes_per_warp : kDefaultStageBytesPerWarp;
  int n_stages = std::clamp(budget / rows_stage_pitch<T, kRows, T2>(), 2, kMaxStages);
  // The fused prologue's static shared memory comes out of the same per-block budget.
  const int smem_limit = a.max_smem_bytes - kFusionStaticSmemBytes;
  while (n_stages > 2 && rows_smem_layout<T, kRows, kXB, T2>(cols, n_stages).total > smem_limit) --n_stages;
  const SmemLayout l = rows_smem_layout<T, kRows, kXB, T2>(cols, n_stages);
  if (l.total > smem_limit) return false;
  int per_sm = 0;
  TERN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kGemvWarps * 32, l.total));
  const int64_t max_groups = std::max<int64_t>(1, int64_t{std::max(per_sm, 1)} * a.n_sm * (kGemvWarps / kParts));
  const int64_t n_sets = a.total_rows() / kRows;
  const int64_t sets_per_group = (n_sets + max_groups - 1) / max_groups;
  const int64_t groups = (n_sets + sets_per_group - 1) / sets_per_group;
  MatmulArgs args = a;
  if (!run_concurrent()) args.fuse.concurrent = 0;
  // Packed: the fewest blocks that hold the groups. Spread: every resident block (at most one per
  // group that has a set), the sets dealt out across blocks first; no group takes more than
  // sets_per_group either way, so the longest warp's work is the same.
  const bool spread = spread_sets();
  const int64_t max_blocks = int64_t{std::max(per_sm, 1)} * a.n_sm;
  const int64_t wanted = spread ? std::min(max_blocks, groups)
                                : (groups + kGemvWarps / kParts - 1) / (kGemvWarps / kParts);
  const int64_t blocks = std::min<int64_t>(wanted, 65535);
  launch_kernel(env, kernel, dim3(static_cast<unsigned>(blocks)), kGemvWarps * 32, static_cast<size_t>(l.total), args,
                n_stages, part_steps, prefetch_steps(n_stages, true), spread ? 1 : 0, a.gemv_norm_preload != 2 ? 1 : 0);
  return true;
}

// Rows per step and parts per row for a product: the overrides when set (benchmark sweeps), else
// what measured fastest on the 8B products (H200, gpu_bench --gemv-rows, bench/RESULTS.md
// session 5): two rows per step, four for the small q4_k products (q+k 8.52 -> 6.71 us, o 7.87
// -> 6.16; 2x1: 6.80 / 6.36). Splitting rows over warps measured no faster anywhere, ffn_down
// included (q6_k 4096 x 14336: 21.2-21.8 us in every shape), so it stays opt-in; one row per
// step at three blocks per SM measured slower there (26.2 us against 22.7 for 2x1).
struct RowsShape {
  int rows, parts;
  int budget = 0;  // pipeline bytes per warp (0: MatmulArgs::stage_bytes_per_warp)
};

// Per-product shapes for A/B sweeps of whole models: TERN_CUDA_GEMV_SHAPES="q4_k:4096x14336=1x1@9280,..."
// (type:ROWSxCOLS, ROWS the launch's joint rows, = RxP rows per step and parts per row, "@B" a
// pipeline budget per warp; read once per process). Products not named keep the default choice.
struct ShapeOverride {
  DType dtype;
  int64_t rows, cols;
  RowsShape shape;
};
const std::vector<ShapeOverride>& shape_overrides() {
  static const std::vector<ShapeOverride> list = [] {
    std::vector<ShapeOverride> out;
    const char* e = std::getenv("TERN_CUDA_GEMV_SHAPES");
    if (e == nullptr) return out;
    const std::string spec = e;
    size_t pos = 0;
    while (pos < spec.size()) {
      size_t end = spec.find(',', pos);
      if (end == std::string::npos) end = spec.size();
      const std::string item = spec.substr(pos, end - pos);
      pos = end + 1;
      const size_t colon = item.find(':');
      if (colon == std::string::npos) continue;
      const std::string name = item.substr(0, colon);
      long long rows = 0, cols = 0;
      RowsShape sh{0, 0};
      if (std::sscanf(item.c_str() + colon + 1, "%lldx%lld=%dx%d@%d", &rows, &cols, &sh.rows, &sh.parts, &sh.budget) < 4) {
        continue;
      }
      for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_0}) {
        if (dtype_name(t) == name) out.push_back({t, rows, cols, sh});
      }
    }
    return out;
  }();
  return list;
}

// At 16-bit activations four rows per step spill (a 64-register activation group beside four
// items) and two measured faster on every 8B product (H200, gpu_bench --gemv, session 13: q4_k
// q+k 7.01 -> 6.36 us, o 6.06 -> 5.63).
RowsShape pick_shape(const MatmulArgs& a) {
  RowsShape s{2, 1};
  if (a.dtype == DType::Q4_K && a.total_rows() <= 8192 && a.x_bits != 16) s.rows = 4;
  if (a.gemv_rows_per_step == 0 && a.gemv_parts_per_row == 0) {
    for (const ShapeOverride& o : shape_overrides()) {
      if (o.dtype == a.dtype && o.rows == a.total_rows() && o.cols == a.cols) s = o.shape;
    }
  }
  if (a.gemv_rows_per_step > 0) s.rows = a.gemv_rows_per_step;
  if (a.gemv_parts_per_row > 0) s.parts = a.gemv_parts_per_row;
  return s;
}

template <DType T, int kXB>
void launch_rows_shape(const MatmulArgs& a, const LaunchEnv& env, RowsShape s, int part_steps, bool pair);
template <DType T>
void launch_rows_shape_bits(const MatmulArgs& a, const LaunchEnv& env, RowsShape s, int part_steps, bool pair) {
  if (a.x_bits == 16) launch_rows_shape<T, 2>(a, env, s, part_steps, pair);
  else launch_rows_shape<T, 1>(a, env, s, part_steps, pair);
}

template <DType T>
void launch_rows_typed(const MatmulArgs& a, const LaunchEnv& env) {
  const int n_steps = static_cast<int>((a.cols + kStepElems - 1) / kStepElems);
  RowsShape s = pick_shape(a);
  const bool pair = a.fuse.glu_out != nullptr;  // SwiGLU epilogue: pairs of rows, one part
  if (pair) s.rows = std::max(s.rows, 2), s.parts = 1;
  // Parts cover aligned runs of part_steps = 2^k steps; every part must get at least one step.
  int part_steps = 1;
  while (part_steps * s.parts < n_steps) part_steps *= 2;
  if ((n_steps + part_steps - 1) / part_steps != s.parts) s.parts = 1, part_steps = n_steps;
  if (s.parts == 1) part_steps = n_steps;
  // Sets of consecutive rows must tile the joint row index; else fewer rows per step.
  while (s.rows > 1 && a.total_rows() % s.rows != 0) s.rows /= 2;
  if (s.budget > 0 && a.stage_bytes_per_warp == 0) {
    MatmulArgs b = a;
    b.stage_bytes_per_warp = s.budget;
    s.budget = 0;
    launch_rows_shape_bits<T>(b, env, s, part_steps, pair);
    return;
  }
  launch_rows_shape_bits<T>(a, env, s, part_steps, pair);
}

template <DType T, int kXB>
void launch_rows_shape(const MatmulArgs& a, const LaunchEnv& env, RowsShape s, int part_steps, bool pair) {
  const int n_steps = static_cast<int>((a.cols + kStepElems - 1) / kStepElems);
  bool launched = false;
  if (s.rows == 1 && s.parts == 2) launched = launch_rows_instance<T, 1, 2, kXB>(a, env, part_steps);
  else if (s.rows == 1 && s.parts == 4) launched = launch_rows_instance<T, 1, 4, kXB>(a, env, part_steps);
  else if (s.rows == 4 && s.parts == 1) launched = launch_rows_instance<T, 4, 1, kXB>(a, env, part_steps);
  // Two rows per step: the shape asked for, or four that do not fit shared memory.
  if (!launched && s.rows >= 2 && s.parts == 1) launched = launch_rows_instance<T, 2, 1, kXB>(a, env, part_steps);
  // One row per step, one warp per row: the shape asked for, one without an instance (rows and
  // parts both above 1), or the fallback of one that does not fit.
  TERN_CHECK_MSG(launched || !pair, "gemv_rows: a SwiGLU epilogue needs two rows per step");
  if (!launched) launched = launch_rows_instance<T, 1, 1, kXB>(a, env, n_steps);
  TERN_CHECK_MSG(launched, "gemv_rows: one row per step must fit where gemv_quant's layout fit");
}

// One instance's shared memory: the device's whole budget less the fusion's static part.
template <typename Kernel>
void allow_instance_smem(Kernel* k, int max_smem_bytes) {
  allow_dynamic_smem(k, max_smem_bytes, kFusionStaticSmemBytes,
                     "gemv_rows: static shared memory exceeds kFusionStaticSmemBytes");
}

// The mixed-type instance (q4_k head, q6_k tail, two rows per step).
void allow_mixed_smem(int max_smem_bytes) {
  allow_instance_smem(gemv_rows_kernel<DType::Q4_K, 2, 1, 1, DType::Q6_K>, max_smem_bytes);
  allow_instance_smem(gemv_rows_kernel<DType::Q4_K, 2, 1, 2, DType::Q6_K>, max_smem_bytes);
}

template <DType T, int kXB>
void allow_rows_smem_bits(int max_smem_bytes) {
  for (auto* k : {gemv_rows_kernel<T, 1, 1, kXB>, gemv_rows_kernel<T, 1, 2, kXB>, gemv_rows_kernel<T, 1, 4, kXB>,
                  gemv_rows_kernel<T, 2, 1, kXB>, gemv_rows_kernel<T, 4, 1, kXB>}) {
    allow_instance_smem(k, max_smem_bytes);
  }
}
template <DType T>
void allow_rows_smem(int max_smem_bytes) {
  allow_rows_smem_bits<T, 1>(max_smem_bytes);
  allow_rows_smem_bits<T, 2>(max_smem_bytes);
}

}  // namespace

bool gemv_rows_supports(const MatmulArgs& a) {
  if (a.n != 1 || a.cols <= kStepElems / 2) return false;  // short rows take segmented steps
  // Fusion: the RMSNorm prologue, the residual and SwiGLU epilogues; not the SwiGLU prologue.
  if (a.fuse.prologue == GemvPrologue::kSwiglu) return false;
  switch (a.dtype) {
    case DType::Q8_0: return bulk_eligible<DType::Q8_0>(a);
    case DType::Q4_K: return bulk_eligible<DType::Q4_K>(a);
    case DType::Q5_K: return bulk_eligible<DType::Q5_K>(a);
    case DType::Q6_K: return bulk_eligible<DType::Q6_K>(a);
    default: return false;
  }
}

// The default path's choice (GemvPath::kAuto): every 8B product it takes measured faster on it
// (H200, q4_k / q6_k / q8_0, 1.03-1.27x) except, at 8-bit activations, the vocabulary head
// (128256 rows: 113 us against the single-row kernel's 110, which streams it at 92% of the copy
// bandwidth), so products of up to 64k rows of the measured types there. At 16 bits the head
// goes too (q6_k: 132.4 -> 108.2 us, session 13). q5_k was not measured and keeps the single-row
// kernel.
bool gemv_rows_default(const MatmulArgs& a) {
  if (a.n != 1 || (a.total_rows() > 65536 && a.x_bits != 16)) return false;
  return a.dtype == DType::Q4_K || a.dtype == DType::Q6_K || a.dtype == DType::Q8_0;
}

bool gemv_rows_mixed_supports(const MatmulArgs& a) {
  if (a.tail_mat <= 0 || a.tail_mat >= a.n_mats || a.n != 1 || a.cols <= kStepElems / 2) return false;
  if (a.dtype != DType::Q4_K || a.tail_dtype != DType::Q6_K) return false;
  if (a.fuse.prologue == GemvPrologue::kSwiglu || a.fuse.glu_out != nullptr) return false;
  int64_t head_rows = 0;
  for (int m = 0; m < a.tail_mat; ++m) head_rows += a.rows[m];
  if (head_rows % 2 != 0) return false;  // two-row sets must not straddle the types
  MatmulArgs head = a, tail = a;
  head.n_mats = a.tail_mat;
  tail.n_mats = a.n_mats - a.tail_mat;
  for (int m = 0; m < tail.n_mats; ++m) {
    tail.w[m] = a.w[a.tail_mat + m];
    tail.w_stride_bytes[m] = a.w_stride_bytes[a.tail_mat + m];
  }
  return bulk_eligible<DType::Q4_K>(head) && bulk_eligible<DType::Q6_K>(tail);
}

void launch_gemv_rows(const MatmulArgs& a, const LaunchEnv& env) {
  if (a.tail_mat > 0) {
    TERN_CHECK_MSG(gemv_rows_mixed_supports(a), "launch_gemv_rows: unsupported mixed-type launch");
    const int n_steps = static_cast<int>((a.cols + kStepElems - 1) / kStepElems);
    const bool launched = a.x_bits == 16 ? launch_rows_instance<DType::Q4_K, 2, 1, 2, DType::Q6_K>(a, env, n_steps)
                                         : launch_rows_instance<DType::Q4_K, 2, 1, 1, DType::Q6_K>(a, env, n_steps);
    TERN_CHECK_MSG(launched, "launch_gemv_rows: the mixed-type launch does not fit shared memory");
    return;
  }
  switch (a.dtype) {
    case DType::Q8_0: launch_rows_typed<DType::Q8_0>(a, env); break;
    case DType::Q4_K: launch_rows_typed<DType::Q4_K>(a, env); break;
    case DType::Q5_K: launch_rows_typed<DType::Q5_K>(a, env); break;
    case DType::Q6_K: launch_rows_typed<DType::Q6_K>(a, env); break;
    default: TERN_CHECK_MSG(false, "launch_gemv_rows: unsupported dtype (check gemv_rows_supports)");
  }
}

void init_gemv_rows(int max_smem_bytes) {
  allow_mixed_smem(max_smem_bytes);
  allow_rows_smem<DType::Q8_0>(max_smem_bytes);
  allow_rows_smem<DType::Q4_K>(max_smem_bytes);
  allow_rows_smem<DType::Q5_K>(max_smem_bytes);
  allow_rows_smem<DType::Q6_K>(max_smem_bytes);
}

}  // namespace tern::cuda
