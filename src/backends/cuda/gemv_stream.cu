// The register-streamed quantized GEMV (n = 1; q4_k / q5_k / q6_k / q8_0, and Q4_K_M's mixed
// q4_k + q6_k q/k/v launch): the quantized counterpart of gemv_float_stream.cu. Same items
// (gemv_items.cuh WItemOf<T, true>), same canonical tree (gemv.h), so the same bits as
// gemv_rows.cu and gemv_quant.cu; only where the weight bytes travel and which lane computes
// which subtree change.
//
// Why: the bulk-staged kernels (gemv_rows.cu) wait on an mbarrier per step that one lane's TMA
// copies fill, and cut a 4096-wide row into 32 half super-block items, each decoding its block's
// scales and closing its own four-unit subtree; they stream 8B Q4_K_M at 1.1-2.6 TB/s while the
// F16 kernel, loading straight into registers, reaches 89-93% of the copy bandwidth.
//
// Loads: a warp takes two weight rows at a time (consecutive joint rows, or gate row r and up
// row r under a SwiGLU epilogue). Half-warp h loads row h's step (4096 elements: 2304 bytes of
// q4_k, 3360 of q6_k, 4352 of q8_0) with 16-byte ld.global.nc.L1::no_allocate loads, lane i the
// 16-byte pieces i, i + 16, ...: each instruction reads 256 contiguous bytes per row, whole
// sectors, whatever the blocks' sizes (q6_k's 210-byte blocks are only 2-byte aligned). The
// pieces stay in registers while they travel; when the warp reaches the step it stores them to
// its 2-row buffer in shared memory, issues the next step's loads at once (so a warp's next
// 4.6-8.7 KB are always in flight while it computes; the first step goes out before the PDL
// wait), and each lane reads its own run out of the buffer.
//
// Lanes: lane l computes row l & 1, run l >> 1 of the step: eight consecutive units (one q4_k /
// q5_k / q6_k super-block, two q8_0 items), levels 1-3 of the tree as two lane items (levels 1-2
// each, item_dot's expressions) and one add; butterflies over the lanes of the same row (xor 2,
// 4, 8, 16) are levels 4-7; the binary counter over steps (gemv_tile.cuh) levels 8+. A run past
// the row's end (the half step of a 14336-wide row) is a +0 leaf, as in the other kernels.
//
// x: the block quantizes the activation row once (quantize_tile_halves / quantize_tile_fused:
// the same values) into runs of eight units 272 bytes apart, so lanes reading their runs' 16-byte
// words sit four banks apart (the items' 144-byte groups put every other lane's run on the
// same banks). The RMSNorm prologue and the residual / SwiGLU epilogues are done in the kernel.
#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/gemv.h"
#include "backends/cuda/gemv_items.cuh"
#include "backends/cuda/gemv_tile.cuh"
#include "backends/cuda/launch.cuh"
#include "core/check.h"

namespace tern::cuda {
namespace {

using namespace gemv_items;
using namespace gemv_tile;

constexpr int kThreads = kGemvWarps * 32;
constexpr int kRunUnits = 8;  // a lane's units per step; runs of the activation row are
                              // run_pitch<8, kXB>() bytes apart (272 / 528: 16 bytes of padding)

template <DType T>
constexpr int loads_per_lane() {  // 16-byte loads per lane per step: 256 bytes per instruction and row
  return (step_bytes<T>() + 255) / 256;
}
constexpr int cmax(int a, int b) { return a > b ? a : b; }

// Bytes of one row's buffer: a full step plus load_words_a2's extra word, padded so that the
// warp's two rows sit 16 banks apart (lanes 2r and 2r + 1 read the same run of both rows).
template <DType T, DType T2>
constexpr int stream_row_pitch() {
  return (cmax(step_bytes<T>(), step_bytes<T2>()) + 16 + 127) / 128 * 128 + 64;
}

// Blocks per SM the registers are sized for (kMinBlocks): the step in flight is 36 (q4_k), 44
// (q5_k), 56 (q6_k, mixed) or 68 (q8_0) registers on top of a lane item's decode. ptxas
// (sm_90a): q4_k fits 128 registers (two blocks) without spills; q6_k and the mixed launch spill
// ~200 bytes there, q8_0 ~300; one block per SM gives them 150-200 registers and half the warps.
// MatmulArgs::gemv_stream_blocks picks (A/B); 0: two for q4_k / q5_k products of at least 16384
// rows, else one. H200, gpu_bench --gemv, us at one / two blocks: q4_k gate+up 19.01 / 18.39,
// o 5.12 / 5.82, q+k 5.88 / 6.41, down 13.37 / 14.03; q6_k down 17.52 / 22.80; q8_0 gate+up
// 32.35 / 43.52 (two blocks hold more steps in flight, but a product of few steps per warp pays
// for the second block's prologue, and spills cost more than the warps bring).
int stream_default_blocks(const MatmulArgs& a) {
  const bool four_bit = (a.dtype == DType::Q4_K || a.dtype == DType::Q5_K) && a.tail_mat == 0;
  return four_bit && a.total_rows() >= 16384 ? 2 : 1;
}

template <DType T, DType T2, int kXB>
__host__ __device__ SmemLayout stream_layout(int cols) {
  SmemLayout l;
  const int n_units = cols / 32, runs = (n_units + kRunUnits - 1) / kRunUnits;
  l.row_pitch = runs * run_pitch<kRunUnits, kXB>();
  l.unit_pitch = runs * kRunUnits;
  l.x_off = 0;
  l.d_off = round16(l.row_pitch);
  l.s_off = l.d_off + l.unit_pitch * 4;
  l.h_off = l.s_off + l.unit_pitch * 4;
  l.stage_off = (l.h_off + l.unit_pitch * 8 + 127) / 128 * 128;
  l.stage_pitch = stream_row_pitch<T, T2>();
  l.total = l.stage_off + kGemvWarps * 2 * l.stage_pitch;
  return l;
}

// Levels 1-3 of a lane's run: its two lane items (units u0 .. u0 + 3 and u0 + 4 .. u0 + 7 of the
// row, `left` of them inside it) out of the row's buffer wb, each against its activation group.
template <typename WI, int kXB>
__device__ __forceinline__ float run_dot(const uint8_t* wb, int run, const XTile& x, const uint8_t* xr, int g,
                                         int left) {
  XGroup<kXB> xg;
  WI w0;
  w0.load(wb, 2 * run);
  load_x_at<WI::kSums, WI::kHalves>(x, xr, g, xg);
  const float a0 = w0.dot(xg, min(kItemUnits, left));
  float a1 = 0.0f;
  if (left > kItemUnits) {
    WI w1;
    w1.load(wb, 2 * run + 1);
    load_x_at<WI::kSums, WI::kHalves>(x, xr + 4 * 32 * kXB, g + 1, xg);
    a1 = w1.dot(xg, min(kItemUnits, left - kItemUnits));
  }
  return __fadd_rn(a0, a1);
}

// T2 != T: a mixed-type launch (MatmulArgs::tail_mat; the head rows an even count, so a pair
// never straddles the types): pairs of tail rows take T2's step lengths and items.
template <DType T, DType T2, int kMinBlocks, int kXB>
__global__ void __launch_bounds__(kThreads, kMinBlocks) gemv_stream_kernel(MatmulArgs a, int norm_preload) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) uint8_t smem[];
  using W = typename WItemOf<T, true>::type;
  using W2 = typename WItemOf<T2, true>::type;
  constexpr bool kMixed = T2 != T;
  constexpr int kLoads = cmax(loads_per_lane<T>(), loads_per_lane<T2>());
  constexpr int kPitch = stream_row_pitch<T, T2>();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int cols = static_cast<int>(a.cols), n_units = cols / 32;
  const int n_steps = (cols + kStepElems - 1) / kStepElems;
  const SmemLayout l = stream_layout<T, T2, kXB>(cols);
  uint8_t* xq = smem + l.x_off;
  float* xd = reinterpret_cast<float*>(smem + l.d_off);
  int* xs = reinterpret_cast<int*>(smem + l.s_off);
  int* xh = reinterpret_cast<int*>(smem + l.h_off);
  uint8_t* buf = smem + l.stage_off + warp * 2 * kPitch;

  const bool pair = a.fuse.glu_out != nullptr;
  const int64_t total_rows = a.total_rows();
  const int64_t n_pairs = pair ? a.rows[0] : (total_rows + 1) / 2;
  const int64_t pair_stride = int64_t{gridDim.x} * kGemvWarps;
  const int64_t first_pair = int64_t{blockIdx.x} * kGemvWarps + warp;
  const int my_pairs =
      first_pair < n_pairs ? static_cast<int>((n_pairs - first_pair + pair_stride - 1) / pair_stride) : 0;
  const int total = my_pairs * n_steps;
  int64_t tail_row0 = total_rows;
  if constexpr (kMixed) tail_row0 = a.rows[0] + (a.tail_mat > 1 ? a.rows[1] : 0);
  // Row r of pair p (a missing row: the last pair of an odd row count, never loaded or stored).
  auto joint_row = [&](int64_t p, int r) -> int64_t { return pair ? p + r * a.rows[0] : 2 * p + r; };
  auto is_tail = [&](int64_t p) { return kMixed && 2 * p >= tail_row0; };

  // Issue cursor: pair in_k of the warp, step in_t; the lane loads row ld_row of the pair.
  const int ld_row = lane >> 4, ld_piece = lane & 15;
  int in_k = 0, in_t = 0;
  bool in_tail = false;
  const uint8_t* ld_w = nullptr;
  auto set_load_row = [&]() {
    const int64_t p = first_pair + int64_t{in_k} * pair_stride;
    const int64_t jr = joint_row(p, ld_row);
    in_tail = is_tail(p);
    ld_w = jr < total_rows ? mat_row(a, jr).w : nullptr;
  };
  const int last_elems = cols - (n_steps - 1) * kStepElems;
  const int last_len = last_elems / QType<T>::kBlockElems * QType<T>::kBlockBytes;
  const int last_len2 = last_elems / QType<T2>::kBlockElems * QType<T2>::kBlockBytes;
  uint4 r[kLoads];
  int r_pieces = 0;  // 16-byte pieces of the step in r (0: a missing row)
  auto issue = [&]() {
    const int full = in_tail ? step_bytes<T2>() : step_bytes<T>();
    const int len = in_t == n_steps - 1 ? (in_tail ? last_len2 : last_len) : full;
    r_pieces = ld_w != nullptr ? len / 16 : 0;
    const uint8_t* src = ld_w + static_cast<size_t>(in_t) * full + 16 * ld_piece;
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      if (ld_piece + 16 * i < r_pieces) r[i] = load_stream16_now(src + 256 * i);
    }
    if (++in_t == n_steps) {
      in_t = 0;
      if (++in_k < my_pairs) set_load_row();
    }
  };
  auto stash = [&]() {
    uint8_t* dst = buf + ld_row * kPitch + 16 * ld_piece;
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      if (ld_piece + 16 * i < r_pieces) *reinterpret_cast<uint4*>(dst + 256 * i) = r[i];
    }
  };

  if (total > 0) {  // the first step before the wait: the weights depend on no earlier kernel
    set_load_row();
    issue();
  }
  NormPreload pre;
  if (norm_preload) preload_norm16(a, 1, pre);
  pdl_enter();
  if (a.fuse.prologue != GemvPrologue::kNone) {  // RMSNorm (gemv_stream_supports): block 0 stores it
    quantize_tile_fused<kXB, kRunUnits>(a, 0, 1, l, xq, xd, xs, xh, blockIdx.x == 0, pre);
  } else {
    quantize_tile_halves<4, kXB, kRunUnits>(a, l, xq, xd, xs, xh);
  }
  __syncthreads();
  if (total == 0) return;
  const XTile x{xq, xd, xs, xh, l.row_pitch, l.unit_pitch};
  const int row = lane & 1, run = lane >> 1;
  float stack[kLevels];
#pragma unroll
  for (int k = 0; k < kLevels; ++k) stack[k] = 0.0f;
  int out_k = 0, out_t = 0;
  for (int it = 0; it < total; ++it) {
    __syncwarp();  // every lane is done with the buffer's previous step
    stash();
    __syncwarp();
    if (it + 1 < total) issue();
    const int64_t p = first_pair + int64_t{out_k} * pair_stride;
    const int u0 = out_t * kStepUnits + kRunUnits * run;
    float v = 0.0f;
    if (u0 < n_units) {
      const uint8_t* wb = buf + row * kPitch;
      const uint8_t* xr = xq + x_unit_offset<kRunUnits, kXB>(u0);
      if (kMixed && is_tail(p)) v = run_dot<W2, kXB>(wb, run, x, xr, u0 / kItemUnits, n_units - u0);
      else v = run_dot<W, kXB>(wb, run, x, xr, u0 / kItemUnits, n_units - u0);
    }
#pragma unroll
    for (int off = 2; off < 32; off <<= 1) v = __fadd_rn(v, __shfl_xor_sync(kFullMask, v, off));
    if (n_steps > 1) counter_push(stack, out_t, v);
    if (++out_t == n_steps) {
      out_t = 0;
      ++out_k;
      const float y = n_steps == 1 ? v : counter_close(stack, n_steps);
      const int64_t jr = joint_row(p, row);
      if (lane < 2 && jr < total_rows) {
        const MatRow m = mat_row(a, jr);
        m.y[m.r] = y;
        fused_residual(a, 0, m.r, y);
      }
      if (pair) {
        const float up = __shfl_down_sync(kFullMask, y, 1);
        __syncwarp();  // after the up row's store, so an in-place output wins
        if (lane == 0) a.fuse.glu_out[p] = swiglu_value(y, up);
      }
    }
  }
#else
  __trap();  // gemv_stream_supports asks for sm_90 code (the griddepcontrol of the other n = 1 paths)
#endif
}

template <DType T, DType T2, int kMinBlocks, int kXB>
void launch_stream_blocks(const MatmulArgs& a, const LaunchEnv& env) {
  auto* kernel = gemv_stream_kernel<T, T2, kMinBlocks, kXB>;
  const SmemLayout l = stream_layout<T, T2, kXB>(static_cast<int>(a.cols));
  int per_sm = 0;
  TERN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, l.total));
  const int64_t warps = int64_t{std::max(per_sm, 1)} * a.n_sm * kGemvWarps;
  const int64_t n_pairs = a.fuse.glu_out != nullptr ? a.rows[0] : (a.total_rows() + 1) / 2;
  // Each warp takes ceil(pairs / resident warps) pairs; no more blocks than that needs.
  const int64_t per_warp = (n_pairs + warps - 1) / warps;
  const int64_t groups = (n_pairs + per_warp - 1) / per_warp;
  const int64_t blocks = std::min<int64_t>((groups + kGemvWarps - 1) / kGemvWarps, 65535);
  launch_kernel(env, kernel, dim3(static_cast<unsigned>(blocks)), kThreads, static_cast<size_t>(l.total), a,
                a.gemv_norm_preload != 2 ? 1 : 0);
}

template <DType T, DType T2 = T>
void launch_stream_instance(const MatmulArgs& a, const LaunchEnv& env) {
  const int blocks = a.gemv_stream_blocks > 0 ? a.gemv_stream_blocks : stream_default_blocks(a);
  const bool wide = a.x_bits == 16;
  if (blocks >= 2) wide ? launch_stream_blocks<T, T2, 2, 2>(a, env) : launch_stream_blocks<T, T2, 2, 1>(a, env);
  else wide ? launch_stream_blocks<T, T2, 1, 2>(a, env) : launch_stream_blocks<T, T2, 1, 1>(a, env);
}

template <DType T, DType T2 = T>
bool fits(const MatmulArgs& a) {
  const int cols = static_cast<int>(a.cols);
  const int total = a.x_bits == 16 ? stream_layout<T, T2, 2>(cols).total : stream_layout<T, T2, 1>(cols).total;
  return total <= a.max_smem_bytes - kFusionStaticSmemBytes;
}

template <DType T, DType T2, int kMinBlocks>
void allow_blocks(int max_smem_bytes) {
  allow_dynamic_smem(gemv_stream_kernel<T, T2, kMinBlocks, 1>, max_smem_bytes, kFusionStaticSmemBytes,
                     "gemv_stream: static shared memory exceeds kFusionStaticSmemBytes");
  allow_dynamic_smem(gemv_stream_kernel<T, T2, kMinBlocks, 2>, max_smem_bytes, kFusionStaticSmemBytes,
                     "gemv_stream: static shared memory exceeds kFusionStaticSmemBytes");
}

template <DType T, DType T2 = T>
void allow_instance(int max_smem_bytes) {
  allow_blocks<T, T2, 1>(max_smem_bytes);
  allow_blocks<T, T2, 2>(max_smem_bytes);
}

}  // namespace

bool gemv_stream_supports(const MatmulArgs& a) {
  if (a.n != 1 || a.gemv_path == static_cast<int32_t>(GemvPath::kLegacy)) return false;
  if (a.cols <= 0 || a.cols >= (int64_t{1} << 31) || (a.cols + kStepElems - 1) / kStepElems > kMaxSteps) return false;
  // Fusion: the RMSNorm prologue, the residual and SwiGLU epilogues; not the SwiGLU prologue.
  if (a.fuse.prologue == GemvPrologue::kSwiglu) return false;
  if (a.fuse.glu_out != nullptr && (a.n_mats != 2 || a.rows[0] != a.rows[1] || a.tail_mat > 0)) return false;
  if (a.tail_mat > 0) return gemv_rows_mixed_supports(a) && fits<DType::Q4_K, DType::Q6_K>(a);
  // Every step a whole number of 16-byte pieces (bulk_eligible), so a lane's run is whole.
  switch (a.dtype) {
    case DType::Q8_0: return a.cols % 32 == 0 && bulk_eligible<DType::Q8_0>(a) && fits<DType::Q8_0>(a);
    case DType::Q4_K: return a.cols % 256 == 0 && bulk_eligible<DType::Q4_K>(a) && fits<DType::Q4_K>(a);
    case DType::Q5_K: return a.cols % 256 == 0 && bulk_eligible<DType::Q5_K>(a) && fits<DType::Q5_K>(a);
    case DType::Q6_K: return a.cols % 256 == 0 && bulk_eligible<DType::Q6_K>(a) && fits<DType::Q6_K>(a);
    default: return false;
  }
}

// Where the n = 1 quantized products go (the one routing place; gemv_quant.cu and matmul.cu ask
// it): GemvPath::kStream sends every product the streamed kernel takes to it, kAuto the shapes
// where it measured faster (gemv_stream_default), the rest keep gemv_rows_default's choice;
// GemvPath::kPrev is kAuto as it was before this kernel (A/B).
// Measured (H200, gpu_bench --gemv, 8B products, us, multi-row kernel -> streamed kernel at its
// default blocks, two rounds): q4_k gate+up 19.0 -> 18.4, o 5.45 -> 5.12; q6_k down 18.2 -> 17.5,
// v 4.5 -> 4.5; q8_0 gate+up 32.6 -> 32.4. Not taken, no faster or slower: q4_k q+k 5.81 ->
// 5.88, q4_k down 13.33 -> 13.37, q8_0 down 19.4 -> 19.4, q8_0 q+k+v 8.6 -> 8.9, the mixed q/k/v.
// In-model, serialized (ncu, one 8B Q4_K_M decode step at ctx 1024), the streamed kernel is
// faster on every product: mixed q/k/v 12.46 -> 11.62 us, gate+up 25.20 -> 24.51, q6_k down
// 21.46 -> 21.16, the other q4_k products 11.55 -> 10.94 on average, the q6_k head 120.8 -> 114.1.
// But whole decode steps (CUDA graph, PDL overlap between launches) measured slower with those
// shapes streamed: 8B Q4_K_M 435.4 -> 427.4 tok/s with q6_k, o and gate+up streamed, 435.2 ->
// 428.5 with every product streamed; 435.2 -> 437.4 with gate+up alone (gpu_bench --gemv-path
// "prev;default;stream", 128 steps, two rounds). Q8_0 with gate+up streamed: 332.6 -> 332.4, so
// not taken. So: q4_k launches of at least 16384 rows (gate+up, with the model's RMSNorm prologue
// and SwiGLU epilogue 22.0 -> 20.8 us alone), up to 64k rows (the vocabulary head keeps the
// single-row kernel, as gemv_rows_default).
// At 16-bit activations (session 13) the balance turns: the multi-row kernel shares a lane's
// activation group between rows, which at 64 registers spills or starves it, and every Q4_K_M
// product streamed measured faster in the whole decode step: 405.7 -> 434.0 tok/s at ctx 1024
// (--gemv-path "default;stream"). So at 16 bits every q4_k / q6_k product, and Q4_K_M's mixed
// q/k/v launch, streams; q8_0 keeps the 8-bit choice.
bool gemv_stream_default(const MatmulArgs& a) {
  if (a.n != 1) return false;
  if (a.x_bits == 16) return a.tail_mat > 0 || a.dtype == DType::Q4_K || a.dtype == DType::Q6_K;
  if (a.tail_mat > 0 || a.total_rows() > 65536 || a.total_rows() < 16384) return false;
  return a.dtype == DType::Q4_K;
}

bool gemv_stream_chosen(const MatmulArgs& a) {
  const bool wanted = a.gemv_path == static_cast<int32_t>(GemvPath::kStream) ||
                      (a.gemv_path == static_cast<int32_t>(GemvPath::kAuto) && gemv_stream_default(a));
  return wanted && gemv_stream_supports(a);
}

void launch_gemv_stream(const MatmulArgs& a, const LaunchEnv& env) {
  if (a.tail_mat > 0) {
    launch_stream_instance<DType::Q4_K, DType::Q6_K>(a, env);
    return;
  }
  switch (a.dtype) {
    case DType::Q8_0: launch_stream_instance<DType::Q8_0>(a, env); break;
    case DType::Q4_K: launch_stream_instance<DType::Q4_K>(a, env); break;
    case DType::Q5_K: launch_stream_instance<DType::Q5_K>(a, env); break;
    case DType::Q6_K: launch_stream_instance<DType::Q6_K>(a, env); break;
    default: TERN_CHECK_MSG(false, "launch_gemv_stream: unsupported dtype (check gemv_stream_supports)");
  }
}

void init_gemv_stream(int max_smem_bytes) {
  allow_instance<DType::Q8_0>(max_smem_bytes);
  allow_instance<DType::Q4_K>(max_smem_bytes);
  allow_instance<DType::Q5_K>(max_smem_bytes);
  allow_instance<DType::Q6_K>(max_smem_bytes);
  allow_instance<DType::Q4_K, DType::Q6_K>(max_smem_bytes);
}

}  // namespace tern::cuda
