// Quantized GEMV/GEMM on GGUF blocks: q4_0, q4_1, q8_0, q4_k, q5_k, q6_k (gemv.h has the design
// and the canonical summation order every kernel here follows).
//
// A lane item is 128 elements (four 32-element units) of one weight row, a step is 32 items
// (4096 elements). Wide items amortize what does not scale with the data: the butterfly, the
// binary counter, the pipeline bookkeeping, and for k-quants the scale decode (a q4_k lane takes
// half a super-block, whose four scales and mins come out of three words with vector masks).
//
// Shared memory of a block:
//   bars   [warps][kMaxStages] mbarriers of the bulk-copy pipelines (unused by per-lane staging)
//   xq     [nt][n_groups * group_pitch] int8 or int16 (MatmulArgs::x_bits): the activation tile,
//          128 elements (four units) per group, each group padded by 16 bytes (144 / 272 bytes)
//          so 16-byte loads of 8 lanes hit distinct banks
//   xd, xs [nt][unit_pitch]: per-unit activation scale (float) and sum of the int8 values (int)
//   xh     [nt][2 * unit_pitch]: sums of each 16-element half of a unit (q6_k's sub-block offset)
//   stage  [warps][n_stages][stage_pitch]: each warp's pipelined copies of its weight row's steps
// A bulk-copied step starts at byte 0 of its buffer. A per-lane staged step starts at byte
// (src & 15), so the 16-byte cp.async copies stay aligned whatever the row's alignment; the
// ragged head and tail go through 2-byte copies.
#include <algorithm>

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

// --- segmented steps ------------------------------------------------------------------------------

// Levels 3+ of the canonical tree for a row held by a segment of seg_lanes lanes (a power of two,
// < 32, aligned to its size) with every later lane of a full step holding 0: the butterfly over
// the segment gives the segment's subtree S, and the full-warp butterfly would then add zero
// subtrees to it, S + 0 + ... + 0 = S + 0 (which is S except that -0 becomes +0).
__device__ __forceinline__ float segment_sum_tree(float v, int seg_lanes) {
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    if (off < seg_lanes) v = __fadd_rn(v, __shfl_xor_sync(kFullMask, v, off));
  }
  return __fadd_rn(v, 0.0f);
}

// Rows a segmented step takes: the row's items rounded up to a power of two lanes, for rows of at
// most half a step whose matrices split into whole groups of contiguous rows; 1 otherwise.
template <DType T>
int segment_rows(const MatmulArgs& a) {
  if (a.cols > kStepElems / 2) return 1;
  const int items = static_cast<int>((a.cols / 32 + kItemUnits - 1) / kItemUnits);
  int seg_lanes = 1;
  while (seg_lanes < items) seg_lanes *= 2;
  const int rows = 32 / seg_lanes;
  for (int m = 0; m < a.n_mats; ++m) {
    if (a.rows[m] % rows != 0 || a.w_stride_bytes[m] != static_cast<size_t>(a.cols / QType<T>::kBlockElems * QType<T>::kBlockBytes)) {
      return 1;
    }
  }
  return rows;
}

// --- the kernel ---------------------------------------------------------------------------------

// Activation rows of a multi-row tile: kGemvMaxXRows where they fit shared memory with the
// pipeline's stages; at 16 bits (twice the bytes per row) two where four do not; one otherwise
// (QuantPlan::tile_rows).
constexpr int kHalfTileRows = kGemvMaxXRows / 2;

// Grid: (activation tiles, row groups). Warp w of row group b owns weight rows
// b * kGemvWarps + w + k * (gridDim.y * kGemvWarps), k = 0, 1, ...; it streams them step by step
// through an n_stages-deep pipeline that runs on across row boundaries, so the latency of the
// first load is paid once per warp, not once per row.
//
// kBulk: each step is one cp.async.bulk copy (the TMA engine, sm_90) that lane 0 issues and an
// mbarrier per stage completes; the rest of the warp only waits on the barrier. The staged-copy
// variant spends ~4.5 cp.async per lane per q4_k step plus their address arithmetic and
// commit/wait bookkeeping; with bulk copies the issue cost of a step is a few instructions, so
// the pipeline can also be deeper (n_stages is a launch parameter, not a template constant).
// Bulk copies need 16-byte aligned sources and lengths: the launcher picks kBulk only for rows
// whose base, stride and step lengths are all multiples of 16. Both variants feed the same
// item_dot<T> with the same bytes, so their results are identical bit for bit.
// Registers decide how many blocks are resident (the launcher sizes the grid by occupancy), and
// more resident warps hide more of a step's dependent latency (shared loads -> dp4a -> five
// shuffles). The single-row tile is held to 64 registers (four blocks per SM) where that costs no
// spills, 80 (three) for q8_0, q6_k and the per-lane-staged variants; the four-row tile to 128 (two).
// 16-bit activations (kXB = 2) hold a group in 64 registers instead of 32: their single-row
// instances get the four-row tile's 128.
template <DType T, bool kBulk, int kTile, int kXB>
constexpr int min_blocks_per_sm() {
  if constexpr (kTile != 1 || kXB != 1) return 2;
  else return T == DType::Q8_0 || T == DType::Q6_K || !kBulk ? 3 : 4;
}

// kPair: the SwiGLU epilogue's instance (bulk-staged only; others leave it to the elementwise
// kernel), a separate instance so the others keep their registers.
// kEarly: loads that do not depend on the kernel before go out early (see below).
// The kernel's body (gemv_quant_kernel below) is a function of its own: so inlined, it compiles to
// the sm_90a code that session 8 measured; written into the kernel, the single-row instances'
// register assignment and scheduling shift (same instructions, same bits, but not the same SASS).
// kFull: the block's activation tile is whole (nt == kTile), so the per-row loops run a
// compile-time trip count; the partial last tile of a prefill takes the other instance. The same
// operations on the same rows either way (the full instance only drops the `j < nt` branches,
// which ncu found were ~20% of a prefill product's instructions: the branches, their convergence
// barriers and predicates).
template <DType T, int kXB, bool kBulk, int kTile, bool kPair, bool kEarly, bool kFull = false>
__device__ __forceinline__ void gemv_quant_body(const MatmulArgs& a, int n_stages, int seg_rows, int prefetch) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int kBlockElems = QType<T>::kBlockElems, kBlockBytes = QType<T>::kBlockBytes;
  constexpr int kFullStepBytes = step_bytes<T>();
  if constexpr (!kBulk) n_stages = stages<T>(), prefetch = n_stages - 1;  // cp.async groups count on it
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int cols = static_cast<int>(a.cols);
  const int n_units = cols / 32;
  const int nt_alloc = kFull ? kTile : (a.n < kTile ? static_cast<int>(a.n) : kTile);
  const int64_t x0 = int64_t{blockIdx.x} * kTile;
  const int nt = kFull ? kTile : static_cast<int>(a.n - x0 < kTile ? a.n - x0 : kTile);
  const SmemLayout l = smem_layout<T, kXB>(cols, nt_alloc, n_stages, seg_rows);
  uint8_t* xq = smem + l.x_off;
  float* xd = reinterpret_cast<float*>(smem + l.d_off);
  int* xs = reinterpret_cast<int*>(smem + l.s_off);
  int* xh = reinterpret_cast<int*>(smem + l.h_off);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem) + warp * kMaxStages;  // kBulk: one per stage
  // Segmented mode (seg_rows > 1, rows of at most 2048 elements): a warp step takes seg_rows
  // consecutive rows, one segment of seg_lanes lanes each, and the cursor below walks groups of
  // rows instead of rows. Lane i of a segment holds item i of its row, as lane i does in a full
  // step, so the row's canonical tree is unchanged (see the segment butterfly below).
  const int seg_lanes = 32 / seg_rows;
  const int seg = lane / seg_lanes, seg_lane = lane % seg_lanes;
  const int64_t row_stride = int64_t{gridDim.y} * kGemvWarps;
  const int64_t first_row = int64_t{blockIdx.y} * kGemvWarps + warp;  // first group in segmented mode
  // A SwiGLU epilogue pairs the two matrices' rows: the warp's k-th unit is group pair
  // first_row + (k / 2) * row_stride, gate's group for even k and up's for odd k, so one lane
  // holds both sums of a row r. Only which warp computes a row changes, never how.
  constexpr bool pair = kPair;
  const int64_t total_rows = (pair ? a.rows[0] : a.total_rows()) / seg_rows;
  const int64_t up_group = a.rows[0] / seg_rows;
  const int n_units_w = first_row < total_rows ? static_cast<int>((total_rows - first_row + row_stride - 1) / row_stride) : 0;
  const int n_rows = pair ? 2 * n_units_w : n_units_w;
  // The joint index of the first row of the warp's k-th group.
  auto group_row = [&](int k) -> int64_t {
    if (!pair) return (first_row + int64_t{k} * row_stride) * seg_rows;
    return ((k & 1) * up_group + first_row + int64_t{k >> 1} * row_stride) * seg_rows;
  };
  const int n_steps = (cols + kStepElems - 1) / kStepElems;
  const int total = n_rows * n_steps;  // (row, step) items of this warp
  uint8_t* stage = smem + l.stage_off + warp * n_stages * l.stage_pitch;

  // Item cursors advance without divisions (64-bit division is a long software routine).
  struct Cursor {
    int row_k, step, slot;
    const uint8_t* row_w;
  };
  auto advance = [&](Cursor& c) {
    if (++c.step == n_steps) {
      c.step = 0;
      ++c.row_k;
      c.row_w = c.row_k < n_rows ? mat_row(a, group_row(c.row_k)).w : nullptr;
    }
    if (++c.slot == n_stages) c.slot = 0;
  };
  auto issue = [&](const Cursor& c) {
    const int elems = min(kStepElems, cols - c.step * kStepElems);
    const uint8_t* src = c.row_w + static_cast<size_t>(c.step) * kFullStepBytes;
    const int len = elems / kBlockElems * kBlockBytes * seg_rows;  // a group's rows are contiguous
    if constexpr (kBulk) {
      if (lane == 0) bulk_copy(stage + c.slot * l.stage_pitch, src, len, &bars[c.slot]);
    } else {
      stage_copy(stage + c.slot * l.stage_pitch, src, len, lane);
    }
  };
  if constexpr (kBulk) {
    if (lane == 0) {
      for (int k = 0; k < n_stages; ++k) mbar_init(&bars[k]);
      mbar_fence_init();
    }
    __syncwarp();
  }
  const Cursor start{0, 0, 0, n_rows > 0 ? mat_row(a, group_row(0)).w : nullptr};
  Cursor in = start, out = start;
  // The first weight steps do not depend on x: start them before quantizing it.
  for (int k = 0; k < prefetch; ++k) {
    if (k < total) {
      issue(in);
      advance(in);
    }
    if constexpr (!kBulk) cp_async_commit();
  }
  // An RMSNorm prologue's weight is constant: its first values go out before the wait, which
  // takes an L2 round trip off the path after it (MatmulArgs::gemv_norm_preload; same values).
  NormPreload pre;
  if (kEarly && a.gemv_norm_preload != 2) preload_norm16(a, nt, pre);
  pdl_enter();  // x is the previous kernel's output
  // The residual epilogue's old value of the warp's first row (single-row tile), loaded now, so
  // its round trip overlaps the tile and the dot product instead of following them: only this
  // lane writes that element, and the writer before the wait has completed. Same add, same bits.
  float res_first = 0.0f;
  const bool res_early = kEarly && kTile == 1 && a.gemv_norm_preload != 2 && a.fuse.residual != nullptr && n_rows > 0 &&
                         seg_lane == 0;
  if (res_early) res_first = a.fuse.residual[x0 * a.fuse.residual_stride + mat_row(a, group_row(0) + seg).r];
  if (a.fuse.prologue != GemvPrologue::kNone) {
    quantize_tile_fused<kXB>(a, x0, nt, l, xq, xd, xs, xh, blockIdx.y == 0, pre);
  } else {
    quantize_tile<kXB>(a, x0, nt, l, xq, xd, xs, xh);
  }
  __syncthreads();
  if (a.fuse.prologue == GemvPrologue::kSwiglu && a.fuse.write_x != 0) fused_store_after_readers(a);
  if (n_rows == 0) return;
  const XTile x{xq, xd, xs, xh, l.row_pitch, l.unit_pitch};

  float gate_sum[kTile];  // pair mode: the gate row's sum, until its up row completes
#pragma unroll
  for (int j = 0; j < kTile; ++j) gate_sum[j] = 0.0f;
  float stack[kTile][kLevels];
#pragma unroll
  for (int j = 0; j < kTile; ++j) {
#pragma unroll
    for (int k = 0; k < kLevels; ++k) stack[j][k] = 0.0f;
  }
  uint32_t phases = 0;  // kBulk: bit k = parity of stage k's next completion
  for (int it = 0; it < total; ++it) {
    // Refill the stage consumed by the previous iteration (steps below `prefetch` went out above).
    if (it + n_stages - 1 < total && it + n_stages - 1 >= prefetch) {
      issue(in);
      advance(in);
    }
    if constexpr (kBulk) {
      mbar_wait(&bars[out.slot], (phases >> out.slot) & 1u);
      phases ^= 1u << out.slot;
    } else {
      cp_async_commit();
      cp_async_wait<stages<T>() - 1>();
      __syncwarp();
    }
    const int s = out.step;
    const uint8_t* src = out.row_w + static_cast<size_t>(s) * kFullStepBytes;
    const uint8_t* wstep = stage + out.slot * l.stage_pitch + (kBulk ? 0 : (reinterpret_cast<uintptr_t>(src) & 15)) +
                           seg * (cols / kBlockElems * kBlockBytes);
    const int u0 = s * kStepUnits + kItemUnits * seg_lane;
    float v[kTile];
#pragma unroll
    for (int j = 0; j < kTile; ++j) v[j] = 0.0f;
    if (u0 < n_units) item_dot<T, kTile, kXB>(wstep, seg_lane, min(kItemUnits, n_units - u0), x, u0 / kItemUnits, nt, v);
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      if (j < nt) {  // nt is uniform across the warp
        float sum = seg_lanes == 32 ? warp_sum_tree(v[j]) : segment_sum_tree(v[j], seg_lanes);
        counter_push(stack[j], s, sum);
      }
    }
    if (s == n_steps - 1) {
      const MatRow row = mat_row(a, group_row(out.row_k) + seg);
#pragma unroll
      for (int j = 0; j < kTile; ++j) {
        const float acc = counter_close(stack[j], n_steps);
        if (seg_lane == 0 && j < nt) {
          row.y[(x0 + j) * row.rows + row.r] = acc;
          if (res_early && out.row_k == 0) {
            a.fuse.residual[(x0 + j) * a.fuse.residual_stride + row.r] = __fadd_rn(res_first, acc);
          } else {
            fused_residual(a, x0 + j, row.r, acc);
          }
          if constexpr (pair) {
            if ((out.row_k & 1) == 0) {
              gate_sum[j] = acc;
            } else {  // after the gate row's store, so an in-place output wins
              a.fuse.glu_out[(x0 + j) * a.fuse.glu_out_stride + row.r] = swiglu_value(gate_sum[j], acc);
            }
          }
        }
      }
    }
    advance(out);
    // Every lane is done reading this stage before lane 0 refills it (next iteration's issue).
    __syncwarp();
  }
}

// kEarly: the early loads at two blocks per SM (128 registers) where the other single-row
// instances are held to 64-80, for the single-row products whose grid is at most one block per SM
// (launch_typed), where residency does not limit the grid.
template <DType T, int kXB, bool kBulk, int kTile, bool kPair = false, bool kEarly = false>
__global__ void __launch_bounds__(kGemvWarps * 32, kEarly ? 2 : min_blocks_per_sm<T, kBulk, kTile, kXB>())
    gemv_quant_kernel(MatmulArgs a, int n_stages, int seg_rows, int prefetch) {
  if constexpr (kTile > 1) {
    if (a.n - int64_t{blockIdx.x} * kTile >= kTile) {
      gemv_quant_body<T, kXB, kBulk, kTile, kPair, kEarly, true>(a, n_stages, seg_rows, prefetch);
      return;
    }
  }
  gemv_quant_body<T, kXB, kBulk, kTile, kPair, kEarly>(a, n_stages, seg_rows, prefetch);
}

// Launches one instance with a grid of as many blocks as can be resident (occupancy of this
// instance at this shared-memory size), so every warp starts at once and then streams its rows
// (per_sm > 0 fixes the blocks per SM instead: the legacy path's two).
template <DType T, int kXB, bool kBulk, int kTile, bool kPair = false, bool kEarly = false>
void launch_instance(const MatmulArgs& a, const LaunchEnv& env, int n_stages, int seg_rows, int per_sm = 0) {
  auto* kernel = gemv_quant_kernel<T, kXB, kBulk, kTile, kPair, kEarly>;
  const int nt_alloc = a.n < kTile ? static_cast<int>(a.n) : kTile;
  const SmemLayout l = smem_layout<T, kXB>(static_cast<int>(a.cols), nt_alloc, n_stages, seg_rows);
  if (per_sm <= 0) {
    TERN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kGemvWarps * 32, l.total));
  }
  const int64_t x_tiles = (a.n + kTile - 1) / kTile;
  const int64_t target = std::max<int64_t>(1, std::max(per_sm, 1) * int64_t{a.n_sm} / x_tiles);
  // A SwiGLU epilogue's warps take pairs of groups (gate's and up's).
  const int64_t groups = (kPair ? a.rows[0] : a.total_rows()) / seg_rows;
  const int64_t row_blocks = std::min<int64_t>((groups + kGemvWarps - 1) / kGemvWarps, std::min<int64_t>(target, 65535));
  // x tiles vary fastest, so blocks sharing weight rows run together and re-read them from L2.
  const dim3 grid(static_cast<unsigned>(x_tiles), static_cast<unsigned>(row_blocks));
  launch_kernel(env, kernel, grid, kGemvWarps * 32, static_cast<size_t>(l.total), a, n_stages, seg_rows,
                prefetch_steps(n_stages, false));
}

// How launch_typed runs a product of type T (a function of the record alone).
struct QuantPlan {
  bool ok = false;    // the quantized kernels take it
  bool legacy = false;
  bool rows = false;  // gemv_rows.cu takes it
  bool stream = false;  // gemv_stream.cu takes it (before gemv_rows.cu)
  bool bulk = false;
  bool glu = false;   // a SwiGLU epilogue (kernels.h GemvFusion)
  bool pair = false;  // ... applied in the kernel (kPair); else by the elementwise kernel after it
  int tile_rows = 1;  // activation rows per block for n > 1: kGemvMaxXRows, kHalfTileRows or 1
  int n_stages = 0;
  int seg_rows = 1;
};

template <DType T, int kXB>
QuantPlan plan_typed(const MatmulArgs& a) {
  QuantPlan p;
  if (a.cols % QType<T>::kBlockElems != 0 || a.cols >= (int64_t{1} << 31)) return p;
  if ((a.cols + kStepElems - 1) / kStepElems > kMaxSteps) return p;
  if (a.n > (int64_t{1} << 31) - 1) return p;  // x tiles of one row at most: a grid dimension
  const int cols = static_cast<int>(a.cols);
  // Eligibility is judged on the weight alone, never on n (batch invariance): every instance
  // computes a row the same way, so n > 1 takes the largest multi-row tile that fits and the
  // single-row instance (one block per activation row) where none does (the 8B ffn_down's 14336
  // columns at 8 bits with the per-lane-staged pipeline on an A100's 163 KiB); a row too long
  // for even one activation row takes the generic kernel. The bulk pipelines shrink to two stages
  // to fit (below), the per-lane-staged ones keep stages<T>().
  // The fused prologue's static shared memory comes out of the same per-block budget.
  const int smem_limit = a.max_smem_bytes - kFusionStaticSmemBytes;
  const bool legacy = a.gemv_path == static_cast<int32_t>(GemvPath::kLegacy);
  const int min_stages = !legacy && bulk_eligible<T>(a) ? 2 : stages<T>();
  auto fits = [&](int rows) { return smem_layout<T, kXB>(cols, rows, min_stages).total <= smem_limit; };
  // Blocks of a tile that shared memory lets an SM hold (about the per-block limit plus the 1 KiB
  // reserved per block), at most the two that the multi-row instances' 128 registers allow. At 16
  // bits two rows go where they double that: H200, n = 512, the q4_k ffn_down (14336 columns)
  // 4.79 ms with one block of four rows per SM, 4.10 with two of two; the q6_k one, one block
  // either way, 6.05 with four rows against 7.62 with two.
  auto resident = [&](int rows) {
    const int bytes = smem_layout<T, kXB>(cols, rows, min_stages).total + kFusionStaticSmemBytes + 1024;
    return std::min(2, (a.max_smem_bytes + 1024) / bytes);
  };
  const bool four = fits(kGemvMaxXRows), two = kXB == 2 && fits(kHalfTileRows);
  if (four && !(two && resident(kHalfTileRows) > resident(kGemvMaxXRows))) p.tile_rows = kGemvMaxXRows;
  else if (two) p.tile_rows = kHalfTileRows;
  else if (!fits(1)) return p;
  p.ok = true;
  p.glu = a.fuse.glu_out != nullptr;
  if (legacy) {
    p.legacy = true;
    return p;
  }
  // Which instance runs changes where a row's sums are computed, never how (same item_dot, same
  // tree), so the choice may depend on n: one activation row takes the single-row tile, whose
  // kernel needs fewer registers (more resident warps) and no per-row predicates.
  p.bulk = bulk_eligible<T>(a);
  // The bulk-staged kernels pair gate and up rows; the per-lane-staged ones leave the SwiGLU to
  // the elementwise kernel (pairing them at n = 1 measured 1-2% slower on the H200, SmolLM2
  // decode: half the blocks, each warp two rows in turn; bench/RESULTS.md session 8).
  p.pair = p.glu && p.bulk;
  p.seg_rows = segment_rows<T>(a);
  // A segmented step is at most a full step, so it fits the stages sized for full steps.
  if (smem_layout<T, kXB>(cols, p.tile_rows, min_stages, p.seg_rows).total > smem_limit) p.seg_rows = 1;
  p.n_stages = stages<T>();
  if (p.bulk) {
    // As many stages as fit the per-warp byte budget, fewer where the full tile would not fit.
    const int pitch = smem_layout<T, kXB>(cols, 1, 2, p.seg_rows).stage_pitch;
    const int budget = a.stage_bytes_per_warp > 0 ? a.stage_bytes_per_warp : kDefaultStageBytesPerWarp;
    p.n_stages = std::clamp(budget / pitch, 2, kMaxStages);
    while (p.n_stages > 2 && smem_layout<T, kXB>(cols, p.tile_rows, p.n_stages, p.seg_rows).total > smem_limit) --p.n_stages;
  }
  // The multi-row / split-row kernel (n = 1): on kRows wherever it takes the product, on kAuto
  // for the shapes where it measured faster (gemv_rows_default).
  // GemvPath::kStream falls back to kAuto's choice for the products the streamed kernel leaves;
  // kPrev is that choice alone.
  const bool auto_path = a.gemv_path == static_cast<int32_t>(GemvPath::kAuto) ||
                         a.gemv_path == static_cast<int32_t>(GemvPath::kStream) ||
                         a.gemv_path == static_cast<int32_t>(GemvPath::kPrev);
  const bool rows_path = a.gemv_path == static_cast<int32_t>(GemvPath::kRows) || (auto_path && gemv_rows_default(a));
  p.rows = rows_path && gemv_rows_supports(a);
  // The register-streamed kernel (gemv_stream.cu) where gemv_stream_chosen sends the product.
  p.stream = gemv_stream_chosen(a);
  return p;
}

template <DType T>
constexpr bool has_early() {
  return T == DType::Q4_0 || T == DType::Q4_1 || T == DType::Q8_0;
}

// The instance whose tile holds tile_rows activation rows (kGemvMaxXRows, kHalfTileRows at 16
// bits, or 1: the single-row instance).
template <DType T, int kXB, bool kBulk, bool kPair = false>
void launch_with_tile(const MatmulArgs& a, const LaunchEnv& env, int tile_rows, int n_stages, int seg_rows,
                    int per_sm = 0) {
  if (tile_rows == kGemvMaxXRows) {
    launch_instance<T, kXB, kBulk, kGemvMaxXRows, kPair>(a, env, n_stages, seg_rows, per_sm);
    return;
  }
  if constexpr (kXB == 2) {
    if (tile_rows == kHalfTileRows) {
      launch_instance<T, kXB, kBulk, kHalfTileRows, kPair>(a, env, n_stages, seg_rows, per_sm);
      return;
    }
  }
  launch_instance<T, kXB, kBulk, 1, kPair>(a, env, n_stages, seg_rows, per_sm);
}

template <DType T, int kXB>
bool launch_bits(const MatmulArgs& a, const LaunchEnv& env) {
  const QuantPlan p = plan_typed<T, kXB>(a);
  if (!p.ok) return false;
  if (p.legacy) {
    launch_with_tile<T, kXB, false>(a, env, p.tile_rows, stages<T>(), 1, 2);
    if (p.glu) launch_glu_after(a, env);
    return true;
  }
  if (p.stream) {
    launch_gemv_stream(a, env);
    return true;
  }
  if (p.rows) {
    launch_gemv_rows(a, env);
    return true;
  }
  // The early-load instances (q4_0 / q4_1 / q8_0: the small models' types) where one block per SM
  // holds the grid; gemv_norm_preload off keeps the others.
  const int64_t groups = (p.pair ? a.rows[0] : a.total_rows()) / p.seg_rows;
  if (has_early<T>() && a.n == 1 && a.gemv_norm_preload != 2 && (groups + kGemvWarps - 1) / kGemvWarps <= a.n_sm) {
    if constexpr (has_early<T>()) {
      if (p.bulk && p.pair) launch_instance<T, kXB, true, 1, true, true>(a, env, p.n_stages, p.seg_rows);
      else if (p.bulk) launch_instance<T, kXB, true, 1, false, true>(a, env, p.n_stages, p.seg_rows);
      else launch_instance<T, kXB, false, 1, false, true>(a, env, p.n_stages, p.seg_rows);
    }
  } else {
    const int rows = a.n == 1 ? 1 : p.tile_rows;
    if (p.bulk && p.pair) launch_with_tile<T, kXB, true, true>(a, env, rows, p.n_stages, p.seg_rows);
    else if (p.bulk) launch_with_tile<T, kXB, true>(a, env, rows, p.n_stages, p.seg_rows);
    else launch_with_tile<T, kXB, false>(a, env, rows, p.n_stages, p.seg_rows);
  }
  if (p.glu && !p.pair) launch_glu_after(a, env);
  return true;
}

template <DType T>
bool launch_typed(const MatmulArgs& a, const LaunchEnv& env) {
  return a.x_bits == 16 ? launch_bits<T, 2>(a, env) : launch_bits<T, 1>(a, env);
}

template <DType T, int kXB, bool kBulk, int kTile, bool kPair = false, bool kEarly = false>
void allow_smem_instance(int max_smem_bytes) {
  allow_dynamic_smem(gemv_quant_kernel<T, kXB, kBulk, kTile, kPair, kEarly>, max_smem_bytes, kFusionStaticSmemBytes,
                     "gemv: static shared memory exceeds kFusionStaticSmemBytes");
}

template <DType T, int kXB>
void allow_smem_bits(int max_smem_bytes) {
  allow_smem_instance<T, kXB, false, kGemvMaxXRows>(max_smem_bytes);
  allow_smem_instance<T, kXB, false, 1>(max_smem_bytes);
  allow_smem_instance<T, kXB, true, kGemvMaxXRows>(max_smem_bytes);
  allow_smem_instance<T, kXB, true, 1>(max_smem_bytes);
  allow_smem_instance<T, kXB, true, kGemvMaxXRows, true>(max_smem_bytes);
  if constexpr (kXB == 2) {
    allow_smem_instance<T, kXB, false, kHalfTileRows>(max_smem_bytes);
    allow_smem_instance<T, kXB, true, kHalfTileRows>(max_smem_bytes);
    allow_smem_instance<T, kXB, true, kHalfTileRows, true>(max_smem_bytes);
  }
  allow_smem_instance<T, kXB, true, 1, true>(max_smem_bytes);
  if constexpr (has_early<T>()) {
    allow_smem_instance<T, kXB, false, 1, false, true>(max_smem_bytes);
    allow_smem_instance<T, kXB, true, 1, false, true>(max_smem_bytes);
    allow_smem_instance<T, kXB, true, 1, true, true>(max_smem_bytes);
  }
}

template <DType T>
void allow_smem(int max_smem_bytes) {
  allow_smem_bits<T, 1>(max_smem_bytes);
  allow_smem_bits<T, 2>(max_smem_bytes);
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

bool gemv_quant_takes(const MatmulArgs& a) { return gemv_quant_tile_rows(a) > 0; }

int gemv_quant_tile_rows(const MatmulArgs& a) {
  auto ok = [&](auto plan) { return plan.ok ? plan.tile_rows : 0; };
  const bool wide = a.x_bits == 16;
  switch (a.dtype) {
    case DType::Q4_0: return ok(wide ? plan_typed<DType::Q4_0, 2>(a) : plan_typed<DType::Q4_0, 1>(a));
    case DType::Q4_1: return ok(wide ? plan_typed<DType::Q4_1, 2>(a) : plan_typed<DType::Q4_1, 1>(a));
    case DType::Q8_0: return ok(wide ? plan_typed<DType::Q8_0, 2>(a) : plan_typed<DType::Q8_0, 1>(a));
    case DType::Q4_K: return ok(wide ? plan_typed<DType::Q4_K, 2>(a) : plan_typed<DType::Q4_K, 1>(a));
    case DType::Q5_K: return ok(wide ? plan_typed<DType::Q5_K, 2>(a) : plan_typed<DType::Q5_K, 1>(a));
    case DType::Q6_K: return ok(wide ? plan_typed<DType::Q6_K, 2>(a) : plan_typed<DType::Q6_K, 1>(a));
    default: return false;
  }
}

bool gemv_bulk_compiled() {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, gemv_quant_kernel<DType::Q4_K, 1, true, 1>) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.ptxVersion >= 90;
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
