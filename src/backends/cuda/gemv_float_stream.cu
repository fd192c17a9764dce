// F32 / F16 / BF16 weight rows (16-byte aligned, cols % 8 == 0) at n = 1: the register-streamed
// GEMV, with the fused ops of kernels.h GemvFusion done in the kernel.
//
// Arithmetic (gemv.h): lane l owns elements 8l .. 8l + 7 of every 256-element chunk of a row,
// accumulates them into one fp32 sum with fmaf in element order, chunk after chunk, and the
// lanes' sums meet in warp_sum_tree: the order of matmul.cu's one-row-per-warp kernel and of
// gemv_float.cu's bulk-staged one, so all three give the same bits.
//
// Speed: the weights are a pure stream and x is small, so each block copies x (or forms it: the
// RMSNorm / SwiGLU prologue) into shared memory once, in fp32, and each warp reads its weight
// rows straight from global memory into registers with 16-byte non-coherent loads that skip L1
// (no staging ring to shrink L1, no per-chunk re-read of x through L1: what made the bulk kernel
// lose on 14336-wide rows). A warp takes kRows rows at once (their loads interleaved, x read once
// for all of them) and kUnroll chunks of each per batch, so kRows * kUnroll 16-byte loads per lane
// are in flight; each row's chunks are still added in order, so splitting the work this way does
// not change a row's sum. The first batch is issued before the kernel waits for its predecessor
// (PDL): the weights depend on nothing earlier. The grid is the resident blocks (each warp walks
// units w, w + warps, ...), or fewer when the units split evenly over fewer. On the H200 this
// streams 8B F16 gate+up at 93.5% of the copy bandwidth, down at 89%, the head at 98%, q+k+v and
// o at 73-75% (bench/RESULTS.md). Measured and left off: half the blocks per SM so that the next
// kernel's blocks fit beside them (180.5 against 211.2 tok/s on 8B F16 decode) and dynamic units
// (float_gemv_dynamic, 200.8).
//
// Fused ops (gemv_fusion.cuh, the same functions as the ops' own kernels, so the same bits): the
// RMSNorm prologue (every block recomputes 1 / rms by the norm kernel's tree; block 0 stores the
// normalized row when write_x), the residual epilogue, and the SwiGLU epilogue (kPair: a warp's
// two rows are gate row r and up row r, and lane 0 stores silu(g) * u after both). A SwiGLU
// prologue runs as its own kernel before this one (matmul.cu; see form_x).
#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/gemv.h"
#include "backends/cuda/gemv_fusion.cuh"
#include "backends/cuda/launch.cuh"
#include "core/check.h"

namespace tern::cuda {
namespace {

constexpr int kThreads = kGemvWarps * 32;  // 256: the RMSNorm tree's block size
constexpr int kStaticSmemBytes = 256;      // rms_inv_combine's warp sums, the SwiGLU store's flag

template <DType T>
constexpr int vecs_per_chunk() {  // 16-byte loads per lane per 256-element chunk
  return T == DType::F32 ? 2 : 1;
}

// Lane's 8 elements of a chunk, from its kVecs loaded words, as floats in element order.
template <DType T>
__device__ __forceinline__ void unpack8(const uint4 (&v)[vecs_per_chunk<T>()], float (&w)[8]) {
  if constexpr (T == DType::F32) {
    w[0] = __uint_as_float(v[0].x); w[1] = __uint_as_float(v[0].y);
    w[2] = __uint_as_float(v[0].z); w[3] = __uint_as_float(v[0].w);
    w[4] = __uint_as_float(v[1].x); w[5] = __uint_as_float(v[1].y);
    w[6] = __uint_as_float(v[1].z); w[7] = __uint_as_float(v[1].w);
  } else {
    const uint32_t words[4] = {v[0].x, v[0].y, v[0].z, v[0].w};
    unpack_half8<T == DType::BF16>(words, w);
  }
}

// Forms the activation row in shared memory (xs, cols floats): a.x as given, or the RMSNorm
// prologue's output (rms_inv_row's tree and rms_norm_value of gemv_fusion.cuh: the norm kernel's
// bits). x is the previous kernel's output, and its loads queue behind the weight words already
// in flight, so each round trip after the PDL wait is a bubble in the stream: the norm weight
// (constant) goes to shared memory (gs) before the wait (preload_norm_weight), the tree's pass
// over the input keeps what it read (rms_partial's keep), and the normalized row is formed from
// shared memory: one round trip, as for a plain x. (A SwiGLU prologue, an exp and a division per
// element, left the weight words no room: 64-register instances spilled ~250 bytes; matmul.cu
// runs the SwiGLU kernel first instead.) Every thread of the block calls these; xs is visible to
// the block on return.
__device__ __forceinline__ float4 load_float4(const float* p, bool vec) {
  if (vec) return *reinterpret_cast<const float4*>(p);
  return make_float4(p[0], p[1], p[2], p[3]);
}
__device__ __forceinline__ void preload_norm_weight(const MatmulArgs& a, float* gs) {
  if (a.fuse.prologue != GemvPrologue::kRmsNorm) return;
  const int cols = static_cast<int>(a.cols);
  const bool vec = (reinterpret_cast<uintptr_t>(a.fuse.src2) & 15) == 0;
  for (int c = 4 * threadIdx.x; c < cols; c += 4 * kThreads) {
    *reinterpret_cast<float4*>(gs + c) = load_float4(a.fuse.src2 + c, vec);
  }
}
__device__ __forceinline__ void form_x(const MatmulArgs& a, float* xs, const float* gs) {
  const int cols = static_cast<int>(a.cols);  // a multiple of 8
  const GemvFusion& f = a.fuse;
  if (f.prologue == GemvPrologue::kNone) {
    // Four float4 per thread in flight (a 4096-wide row in one round trip).
    const bool vec = (reinterpret_cast<uintptr_t>(a.x) & 15) == 0;
    for (int c0 = 4 * threadIdx.x; c0 < cols; c0 += 16 * kThreads) {
      float4 v[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int c = c0 + k * 4 * kThreads;
        if (c < cols) v[k] = load_float4(a.x + c, vec);
      }
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int c = c0 + k * 4 * kThreads;
        if (c < cols) *reinterpret_cast<float4*>(xs + c) = v[k];
      }
    }
    __syncthreads();
    return;
  }
  // The norm kernel's tree on 256 virtual threads: thread t is virtual thread t (kThreads == 256).
  double part[1];
  part[0] = rms_partial<16>(f.src, cols, threadIdx.x, xs);
  const float inv = rms_inv_combine<kThreads>(part, cols, f.eps);  // its barriers publish xs and gs
  const bool store = f.write_x != 0 && blockIdx.x == 0;
  const bool vec = (reinterpret_cast<uintptr_t>(a.x) & 15) == 0;
  for (int c = 4 * threadIdx.x; c < cols; c += 4 * kThreads) {
    const float4 u = *reinterpret_cast<const float4*>(xs + c), g = *reinterpret_cast<const float4*>(gs + c);
    const float4 o = make_float4(rms_norm_value(u.x, inv, g.x), rms_norm_value(u.y, inv, g.y),
                                 rms_norm_value(u.z, inv, g.z), rms_norm_value(u.w, inv, g.w));
    *reinterpret_cast<float4*>(xs + c) = o;
    if (store) {
      float* out = const_cast<float*>(a.x) + c;
      if (vec) {
        *reinterpret_cast<float4*>(out) = o;
      } else {
        out[0] = o.x; out[1] = o.y; out[2] = o.z; out[3] = o.w;
      }
    }
  }
  __syncthreads();
}

// Chunk c of a unit: the lane's 8 x values from shared memory, then each row's 8 products fused
// into its accumulator in element order (the per-row chain of both kernels below).
template <DType T, int kRows, int kUnroll>
__device__ __forceinline__ void fma_chunk(const float* xs, int c, int lane,
                                          const uint4 (&b)[kRows][kUnroll][vecs_per_chunk<T>()], int k,
                                          float (&acc)[kRows]) {
  const float4 p = *reinterpret_cast<const float4*>(xs + c * 256 + 8 * lane);
  const float4 q = *reinterpret_cast<const float4*>(xs + c * 256 + 8 * lane + 4);
  const float xv[8] = {p.x, p.y, p.z, p.w, q.x, q.y, q.z, q.w};
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float w[8];
    unpack8<T>(b[r][k], w);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[r] = __fmaf_rn(w[i], xv[i], acc[r]);
  }
}

// A unit's rows are complete: each row's butterfly into sums (the accumulators start again from
// 0), and lane 0 stores the rows that exist (exists(r) false: a missing row of the last unit),
// joint row row_of(r), with the residual epilogue.
template <int kRows, typename Exists, typename RowOf>
__device__ __forceinline__ void finish_unit(const MatmulArgs& a, int lane, float (&acc)[kRows], float (&sums)[kRows],
                                            Exists exists, RowOf row_of) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    sums[r] = warp_sum_tree(acc[r]);
    acc[r] = 0.0f;
  }
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (exists(r)) {
        const MatRow row = mat_row(a, row_of(r));
        row.y[row.r] = sums[r];
        fused_residual(a, 0, row.r, sums[r]);
      }
    }
  }
}

// Blocks per SM the register budget is sized for: left alone, ptxas hoists the shared-memory
// loads of x for a whole batch and needs 110-160 registers (1-2 blocks per SM). Capped, a lane
// keeps its loaded words plus one chunk's work: 4 blocks (64 registers) for 8 words in flight,
// 2 (128) for 16, 1 for 32 (F32 at 16 chunks).
template <DType T, int kRows, int kUnroll>
constexpr int min_blocks() {
  constexpr int words = kRows * kUnroll * vecs_per_chunk<T>();
  return words <= 8 ? 4 : (words <= 16 ? 2 : 1);
}

template <DType T, int kRows, int kUnroll, bool kPair>
__global__ void __launch_bounds__(kThreads, (min_blocks<T, kRows, kUnroll>())) gemv_float_stream_kernel(MatmulArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  float* xs = reinterpret_cast<float*>(smem);
  constexpr int kVecs = vecs_per_chunk<T>();
  constexpr int kChunkBytes = 256 * (T == DType::F32 ? 4 : 2);
  static_assert(!kPair || kRows == 2, "the SwiGLU epilogue pairs gate row r with up row r");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int cols = static_cast<int>(a.cols);
  const int n_chunks = (cols + 255) / 256;
  // Unit u: joint rows u * kRows .. + kRows - 1 (kPair: gate row u and up row u).
  const int64_t total_rows = a.total_rows();
  const int64_t n_units = kPair ? a.rows[0] : (total_rows + kRows - 1) / kRows;
  const int64_t unit_stride = int64_t{gridDim.x} * kGemvWarps;
  auto unit_row = [&](int64_t u, int r) -> int64_t { return kPair ? u + r * a.rows[0] : u * kRows + r; };
  // Lane's byte offset within a chunk, and whether its elements exist in chunk c (the last chunk
  // of a row that is not a multiple of 256 wide is partial; cols % 8 == 0 keeps lanes whole).
  const int lane_off = lane * 16 * kVecs;
  auto lane_in = [&](int c) { return c * 256 + 8 * lane < cols; };

  const uint8_t* wr[kRows];
  bool valid[kRows];
  auto set_unit = [&](int64_t u) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t gr = unit_row(u, r);
      valid[r] = gr < total_rows;
      // A missing row (the last unit of an odd split) re-reads row 0 of the unit; never stored.
      wr[r] = mat_row(a, valid[r] ? gr : unit_row(u, 0)).w + lane_off;
    }
  };
  uint4 buf[kRows][kUnroll][kVecs];
  auto load_batch = [&](int c0) {
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      if (c0 + k < n_chunks && lane_in(c0 + k)) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
#pragma unroll
          for (int v = 0; v < kVecs; ++v) buf[r][k][v] = load_stream16(wr[r] + int64_t{c0 + k} * kChunkBytes + 16 * v);
        }
      }
    }
  };

  int64_t unit = int64_t{blockIdx.x} * kGemvWarps + warp;
  if (unit < n_units) {
    set_unit(unit);
    load_batch(0);  // before the wait: the weights depend on no earlier kernel
  }
  float* gs = xs + cols;  // the RMSNorm weight (smem_bytes: only with that prologue)
  preload_norm_weight(a, gs);
  pdl_enter();
  form_x(a, xs, gs);
  // Dynamic units (a.gemv_float_counter): after its first unit a warp takes unit
  // unit_stride + k, k claimed from the counter while the current unit streams, so warps that
  // run faster take more units and all finish within about one unit of each other.
  int* const counter = a.gemv_float_counter;
  if (unit < n_units) {
    int claim = 0;
    if (counter != nullptr && lane == 0) claim = atomicAdd(counter, 1);
    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
    int c0 = 0;
    while (true) {
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int c = c0 + k;
        if (c < n_chunks && lane_in(c)) fma_chunk<T, kRows, kUnroll>(xs, c, lane, buf, k, acc);
      }
      c0 += kUnroll;
      if (c0 >= n_chunks) {  // the unit's rows are complete
        float sums[kRows];
        finish_unit(a, lane, acc, sums, [&](int r) { return valid[r]; }, [&](int r) { return unit_row(unit, r); });
        if constexpr (kPair) {  // after both stores, so an in-place output wins
          if (lane == 0) a.fuse.glu_out[unit] = swiglu_value(sums[0], sums[1]);
        }
        unit = counter != nullptr ? unit_stride + __shfl_sync(kFullMask, claim, 0) : unit + unit_stride;
        if (unit >= n_units) break;
        if (counter != nullptr && lane == 0) claim = atomicAdd(counter, 1);
        set_unit(unit);
        c0 = 0;
      }
      load_batch(c0);
    }
  }
  if (counter != nullptr) {
    // Every claim of the launch is made once all blocks got here: the last one resets the
    // counter for the next launch (which touches it only after its PDL wait).
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      if (atomicAdd(counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
        counter[0] = 0;
        counter[1] = 0;
      }
    }
  }
}

// The two-buffer variant (MatmulArgs::gemv_float_pipe; no SwiGLU epilogue, no dynamic units).
// A warp's work is a sequence of (unit, batch) items: its units w, w + warps, ... as above, each
// cut into batches of kUnroll chunks of its kRows rows. Two batches are in registers: the lane
// multiplies one while the next one's words are on their way, and refills a buffer as soon as it
// is consumed, so a warp's loads in flight never drop to zero between batches or between rows
// (the one-buffer kernel issues a unit's next batch only after multiplying the previous one: with
// every warp starting together after the PDL wait, the launch streams in bursts). Both buffers
// go out before the wait. The per-row order of chunks and the butterfly are the same, so the
// bits are too.
template <DType T, int kRows, int kUnroll>
__global__ void __launch_bounds__(kThreads, (min_blocks<T, kRows, 2 * kUnroll>())) gemv_float_pipe_kernel(MatmulArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  float* xs = reinterpret_cast<float*>(smem);
  constexpr int kVecs = vecs_per_chunk<T>();
  constexpr int kChunkBytes = 256 * (T == DType::F32 ? 4 : 2);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int cols = static_cast<int>(a.cols);
  const int n_chunks = (cols + 255) / 256;
  const int n_batches = (n_chunks + kUnroll - 1) / kUnroll;
  const int64_t total_rows = a.total_rows();
  const int64_t n_units = (total_rows + kRows - 1) / kRows;
  const int64_t unit_stride = int64_t{gridDim.x} * kGemvWarps;
  const int64_t first_unit = int64_t{blockIdx.x} * kGemvWarps + warp;
  const int my_units =
      first_unit < n_units ? static_cast<int>((n_units - first_unit + unit_stride - 1) / unit_stride) : 0;
  const int total = my_units * n_batches;
  const int lane_off = lane * 16 * kVecs;
  auto lane_in = [&](int c) { return c * 256 + 8 * lane < cols; };

  // Issue cursor: unit in_k of the warp, batch in_b; its rows' addresses (a missing row of the
  // last unit re-reads the unit's first row, never stored).
  int in_k = 0, in_b = 0;
  const uint8_t* wr[kRows];
  auto set_rows = [&](int k) {
    const int64_t u = first_unit + int64_t{k} * unit_stride;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t gr = u * kRows + r;
      wr[r] = mat_row(a, gr < total_rows ? gr : u * kRows).w + lane_off;
    }
  };
  using Batch = uint4[kRows][kUnroll][kVecs];
  auto issue = [&](Batch& b) {
    const int c0 = in_b * kUnroll;
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      if (c0 + k < n_chunks && lane_in(c0 + k)) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
#pragma unroll
          for (int v = 0; v < kVecs; ++v) b[r][k][v] = load_stream16_now(wr[r] + int64_t{c0 + k} * kChunkBytes + 16 * v);
        }
      }
    }
    if (++in_b == n_batches) {
      in_b = 0;
      if (++in_k < my_units) set_rows(in_k);
    }
  };
  int out_k = 0, out_b = 0;
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
  auto consume = [&](const Batch& b) {
    const int c0 = out_b * kUnroll;
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int c = c0 + k;
      if (c < n_chunks && lane_in(c)) fma_chunk<T, kRows, kUnroll>(xs, c, lane, b, k, acc);
    }
    if (++out_b == n_batches) {  // the unit's rows are complete
      out_b = 0;
      const int64_t u = first_unit + int64_t{out_k} * unit_stride;
      ++out_k;
      float sums[kRows];
      finish_unit(
          a, lane, acc, sums, [&](int r) { return u * kRows + r < total_rows; }, [&](int r) { return u * kRows + r; });
    }
  };

  Batch buf0, buf1;
  if (total > 0) {  // both buffers before the wait: the weights depend on no earlier kernel
    set_rows(0);
    issue(buf0);
    if (total > 1) issue(buf1);
  }
  float* gs = xs + cols;  // the RMSNorm weight (smem_bytes: only with that prologue)
  preload_norm_weight(a, gs);
  pdl_enter();
  form_x(a, xs, gs);
  for (int it = 0; it < total; it += 2) {
    consume(buf0);
    if (it + 2 < total) issue(buf0);
    if (it + 1 < total) {
      consume(buf1);
      if (it + 3 < total) issue(buf1);
    }
  }
}

// x, and the RMSNorm weight when the launch has that prologue.
int smem_bytes(const MatmulArgs& a) {
  return static_cast<int>(a.cols) * 4 * (a.fuse.prologue == GemvPrologue::kRmsNorm ? 2 : 1);
}

// Blocks per SM of a kernel at this launch's shared memory (at most gemv_float_blocks).
template <typename Kernel>
int blocks_per_sm_of(Kernel kernel, const MatmulArgs& a) {
  int per_sm = 0;
  TERN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem_bytes(a)));
  per_sm = std::max(per_sm, 1);
  return a.gemv_float_blocks > 0 ? std::min(per_sm, a.gemv_float_blocks) : per_sm;
}
template <DType T, int kRows, int kUnroll, bool kPair>
int blocks_per_sm(const MatmulArgs& a) {
  return blocks_per_sm_of(gemv_float_stream_kernel<T, kRows, kUnroll, kPair>, a);
}

int64_t units_of(const MatmulArgs& a, int rows, bool pair) { return pair ? a.rows[0] : (a.total_rows() + rows - 1) / rows; }

// The share of the warps' unit slots that hold work when every resident warp takes
// ceil(units / warps) units: 1 when the units split evenly.
double balance(const MatmulArgs& a, int rows, int per_sm) {
  const int64_t units = units_of(a, rows, false), warps = int64_t{per_sm} * a.n_sm * kGemvWarps;
  const int64_t rounds = (units + warps - 1) / warps;
  return static_cast<double>(units) / static_cast<double>(rounds * warps);
}

template <DType T, int kRows, int kUnroll, bool kPair>
void launch_instance(const MatmulArgs& a, const LaunchEnv& env) {
  auto* kernel = gemv_float_stream_kernel<T, kRows, kUnroll, kPair>;
  const int64_t n_units = units_of(a, kRows, kPair);
  const int64_t resident = int64_t{blocks_per_sm<T, kRows, kUnroll, kPair>(a)} * a.n_sm;
  // Each warp takes ceil(units / resident warps) units; no more blocks than that needs.
  const int64_t per_warp = (n_units + resident * kGemvWarps - 1) / (resident * kGemvWarps);
  const int64_t blocks = std::max<int64_t>(1, (n_units + per_warp * kGemvWarps - 1) / (per_warp * kGemvWarps));
  launch_kernel(env, kernel, dim3(static_cast<unsigned>(blocks)), kThreads, static_cast<size_t>(smem_bytes(a)), a);
}

// The two-buffer kernel, on the same balanced grid.
template <DType T, int kRows, int kUnroll>
void launch_pipe_instance(const MatmulArgs& a, const LaunchEnv& env) {
  auto* kernel = gemv_float_pipe_kernel<T, kRows, kUnroll>;
  const int64_t n_units = units_of(a, kRows, false);
  const int64_t resident = int64_t{blocks_per_sm_of(kernel, a)} * a.n_sm;
  // Each warp takes ceil(units / resident warps) units; no more blocks than that needs.
  const int64_t per_warp = (n_units + resident * kGemvWarps - 1) / (resident * kGemvWarps);
  const int64_t blocks = std::max<int64_t>(1, (n_units + per_warp * kGemvWarps - 1) / (per_warp * kGemvWarps));
  launch_kernel(env, kernel, dim3(static_cast<unsigned>(blocks)), kThreads, static_cast<size_t>(smem_bytes(a)), a);
}

// The shapes compiled: kRows x kUnroll (kRows * kUnroll 16-byte loads per lane for 2-byte types,
// twice that for F32). rows == 0: per shape. On the H200 (gpu_bench --gemv, 8B F16, us at 1x8 /
// 1x16 / 2x8 / 4x4): q+k+v 17.6 / 15.3 / 16.2 / 15.5, o 11.8 / 12.1 / 10.5 / 11.6, gate+up
// 60.5 / 60.2 / 59.0 / 62.6, down 40.9 / 32.8 / 31.1 / 32.3 (the previous kernels: 22.1, 17.0,
// 68.2, 54.0). 2x8 wins but where its units split badly over the warps (q+k+v: 3072 units over
// 2112 warps, a second round for half of them); 1x16 has the same words in flight and twice the
// units, so it takes those shapes.
// Whether a launch takes the two-buffer kernel: asked for (gemv_float_pipe), or the default, for
// the products it can take (no SwiGLU epilogue, no dynamic units). On by default: H200, 8B F16
// decode at 1k 213.3 -> 215.1 tok/s; alone, q+k+v 16.1 -> 15.6 us (BF16 with the norm prologue
// 17.5 -> 16.4), o with its residual 12.4 -> 11.8, down level (bench/RESULTS.md, session 6).
bool use_pipe(const MatmulArgs& a) {
  constexpr bool kPipeDefault = true;
  const bool wanted = a.gemv_float_pipe == 1 || (a.gemv_float_pipe == 0 && kPipeDefault);
  return wanted && a.fuse.glu_out == nullptr && a.gemv_float_counter == nullptr;
}

// Shapes of the two-buffer kernel (two batches of kRows x kUnroll words per lane): 1x8 and 2x4
// (sixteen 16-byte words of 2-byte types in registers, two blocks per SM) and 1x4 (eight, four
// blocks). rows == 0: 2x4 unless one-row units split better over the warps (alone on the H200 the
// 8B F16 o projection, whose units split equally well both ways, took 10.56 us at 2x4 against
// 11.64 at 1x8; q+k+v, whose two-row units leave a second round to half the warps, 15.84
// against 15.56: bench/RESULTS.md, session 10).
template <DType T>
void launch_pipe_shape(const MatmulArgs& a, const LaunchEnv& env, int rows, int unroll) {
  if (rows <= 0) {
    const double b24 = balance(a, 2, blocks_per_sm_of(gemv_float_pipe_kernel<T, 2, 4>, a));
    const double b18 = balance(a, 1, blocks_per_sm_of(gemv_float_pipe_kernel<T, 1, 8>, a));
    rows = b24 >= b18 ? 2 : 1;
    unroll = rows == 1 ? 8 : 4;
  }
  if (rows >= 2) launch_pipe_instance<T, 2, 4>(a, env);
  else if (unroll <= 4) launch_pipe_instance<T, 1, 4>(a, env);
  else launch_pipe_instance<T, 1, 8>(a, env);
}

template <DType T>
void launch_shape(const MatmulArgs& a, const LaunchEnv& env, int rows, int unroll) {
  const bool pair = a.fuse.glu_out != nullptr;
  if (use_pipe(a)) {
    launch_pipe_shape<T>(a, env, rows, unroll);
    return;
  }
  if (pair) {
    if (rows > 0 && unroll <= 4) launch_instance<T, 2, 4, true>(a, env);
    else launch_instance<T, 2, 8, true>(a, env);
    return;
  }
  if (rows <= 0) {
    const double b28 = balance(a, 2, blocks_per_sm<T, 2, 8, false>(a));
    const double b116 = balance(a, 1, blocks_per_sm<T, 1, 16, false>(a));
    rows = b116 > 1.05 * b28 ? 1 : 2;
    unroll = rows == 1 ? 16 : 8;
  }
  if (rows == 1 && unroll >= 16) launch_instance<T, 1, 16, false>(a, env);
  else if (rows == 1) launch_instance<T, 1, 8, false>(a, env);
  else if (rows == 2 && unroll <= 4) launch_instance<T, 2, 4, false>(a, env);
  else if (rows == 2) launch_instance<T, 2, 8, false>(a, env);
  else launch_instance<T, 4, 4, false>(a, env);
}

template <DType T, int kRows, int kUnroll, bool kPair>
void allow_instance(int max_smem_bytes) {
  allow_dynamic_smem(gemv_float_stream_kernel<T, kRows, kUnroll, kPair>, max_smem_bytes, kStaticSmemBytes,
                     "gemv_float_stream: static shared memory exceeds kStaticSmemBytes");
}

template <DType T, int kRows, int kUnroll>
void allow_pipe_instance(int max_smem_bytes) {
  allow_dynamic_smem(gemv_float_pipe_kernel<T, kRows, kUnroll>, max_smem_bytes, kStaticSmemBytes,
                     "gemv_float_stream: static shared memory exceeds kStaticSmemBytes");
}

template <DType T>
void allow_typed(int max_smem_bytes) {
  allow_pipe_instance<T, 1, 4>(max_smem_bytes);
  allow_pipe_instance<T, 1, 8>(max_smem_bytes);
  allow_pipe_instance<T, 2, 4>(max_smem_bytes);
  allow_instance<T, 1, 8, false>(max_smem_bytes);
  allow_instance<T, 1, 16, false>(max_smem_bytes);
  allow_instance<T, 2, 4, false>(max_smem_bytes);
  allow_instance<T, 2, 8, false>(max_smem_bytes);
  allow_instance<T, 4, 4, false>(max_smem_bytes);
  allow_instance<T, 2, 4, true>(max_smem_bytes);
  allow_instance<T, 2, 8, true>(max_smem_bytes);
}

}  // namespace

bool gemv_float_stream_supports(const MatmulArgs& a) {
  if (a.n != 1 || a.gemv_path == static_cast<int32_t>(GemvPath::kLegacy) || a.gemv_float_kernel != 0) return false;
  if (a.dtype != DType::F32 && a.dtype != DType::F16 && a.dtype != DType::BF16) return false;
  if (a.cols % 8 != 0 || a.cols * 8 > a.max_smem_bytes - kStaticSmemBytes) return false;  // x and gs
  for (int m = 0; m < a.n_mats; ++m) {
    if (reinterpret_cast<uintptr_t>(a.w[m]) % 16 != 0 || a.w_stride_bytes[m] % 16 != 0) return false;
  }
  // The SwiGLU epilogue pairs the rows of two equal matrices. A SwiGLU prologue is the caller's
  // to run first (form_x).
  return a.fuse.prologue != GemvPrologue::kSwiglu &&
         (a.fuse.glu_out == nullptr || (a.n_mats == 2 && a.rows[0] == a.rows[1]));
}

void launch_gemv_float_stream(const MatmulArgs& a, const LaunchEnv& env) {
  const int rows = a.gemv_float_rows, unroll = a.gemv_float_unroll;
  switch (a.dtype) {
    case DType::F32: launch_shape<DType::F32>(a, env, rows, unroll); break;
    case DType::F16: launch_shape<DType::F16>(a, env, rows, unroll); break;
    default: launch_shape<DType::BF16>(a, env, rows, unroll); break;
  }
}

void init_gemv_float_stream(int max_smem_bytes) {
  allow_typed<DType::F32>(max_smem_bytes);
  allow_typed<DType::F16>(max_smem_bytes);
  allow_typed<DType::BF16>(max_smem_bytes);
}

}  // namespace tern::cuda
