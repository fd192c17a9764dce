// F32 / F16 / BF16 weight rows (16-byte aligned, cols % 8 == 0) on sm_90: the bulk-staged GEMV.
//
// Arithmetic (gemv.h): lane l owns elements 8l .. 8l + 7 of every 256-element chunk of a row,
// accumulates them into one fp32 sum per activation row with fmaf in element order, and the
// lanes' sums meet in warp_sum_tree. That is the order of the one-row-per-warp kernel in
// matmul.cu (GemvPath::kLegacy and pre-sm_90 devices), so both give the same bits.
//
// Speed: the weights are a pure stream (read once, nothing reused). The legacy kernel gives each
// warp one row and keeps four 16-byte loads per lane in flight: 48-52% of the copy bandwidth on
// 8B F16 q+k+v and ffn_down, 68% on gate+up (H200). A ring of sixteen 16-byte register loads per
// lane did worse (50% on gate+up). Here each warp streams its rows through shared memory in
// 2 KiB steps, one bulk copy per step (gemv_bulk.cuh) and n_stages of them in flight, as the
// quantized kernels do; the grid is the resident blocks, each warp walking rows
// b * kGemvWarps + w + k * (gridDim.y * kGemvWarps). matmul.cu routes to it only the shapes where
// it measured faster (one activation row, rows of at most 4096 elements).
#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/gemv.h"
#include "backends/cuda/gemv_bulk.cuh"
#include "backends/cuda/gemv_fusion.cuh"
#include "backends/cuda/launch.cuh"

namespace tern::cuda {
namespace {

constexpr int kStepBytes = 2048;  // one bulk copy
constexpr int kMaxStages = 16;
constexpr int kDefaultStageBytesPerWarp = 8192;
constexpr int kBarrierBytes = kGemvWarps * kMaxStages * 8;

template <DType T>
constexpr int elem_bytes() {
  return T == DType::F32 ? 4 : 2;
}

int smem_bytes(int n_stages) { return kBarrierBytes + kGemvWarps * n_stages * kStepBytes; }

// Elements 8 * lane .. + 7 of a 256-element chunk: one 16-byte shared load (2-byte types) or two.
template <DType T>
__device__ __forceinline__ void load_lane8(const uint8_t* chunk, int lane, float (&w)[8]) {
  if constexpr (T == DType::F32) {
    const float4 p = reinterpret_cast<const float4*>(chunk)[2 * lane];
    const float4 q = reinterpret_cast<const float4*>(chunk)[2 * lane + 1];
    w[0] = p.x; w[1] = p.y; w[2] = p.z; w[3] = p.w;
    w[4] = q.x; w[5] = q.y; w[6] = q.z; w[7] = q.w;
  } else {
    const uint4 v = reinterpret_cast<const uint4*>(chunk)[lane];
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    unpack_half8<T == DType::BF16>(words, w);
  }
}

template <DType T, int kTile>
__global__ void __launch_bounds__(kGemvWarps * 32, kTile == 1 ? 3 : 2) gemv_float_bulk_kernel(MatmulArgs a,
                                                                                              int n_stages) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int kStepElems = kStepBytes / elem_bytes<T>();
  constexpr int kChunkBytes = 256 * elem_bytes<T>();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t cols = a.cols;
  const int64_t x0 = int64_t{blockIdx.x} * kTile;
  const int nt = static_cast<int>(a.n - x0 < kTile ? a.n - x0 : kTile);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem) + warp * kMaxStages;
  uint8_t* stage = smem + kBarrierBytes + warp * n_stages * kStepBytes;
  const int64_t row_stride = int64_t{gridDim.y} * kGemvWarps;
  const int64_t first_row = int64_t{blockIdx.y} * kGemvWarps + warp;
  const int64_t total_rows = a.total_rows();
  const int n_rows = first_row < total_rows ? static_cast<int>((total_rows - first_row + row_stride - 1) / row_stride) : 0;
  const int n_steps = static_cast<int>((cols + kStepElems - 1) / kStepElems);
  const int total = n_rows * n_steps;

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
    if (++c.slot == n_stages) c.slot = 0;
  };
  auto issue = [&](const Cursor& c) {
    const int64_t e0 = int64_t{c.step} * kStepElems;
    const int elems = static_cast<int>(cols - e0 < kStepElems ? cols - e0 : kStepElems);
    if (lane == 0) {
      bulk_copy(stage + c.slot * kStepBytes, c.row_w + e0 * elem_bytes<T>(), elems * elem_bytes<T>(), &bars[c.slot]);
    }
  };
  if (lane == 0) {
    for (int k = 0; k < n_stages; ++k) mbar_init(&bars[k]);
    mbar_fence_init();
  }
  __syncwarp();
  Cursor in{0, 0, 0, n_rows > 0 ? mat_row(a, first_row).w : nullptr}, out = in;
  // The weights do not depend on earlier kernels: start the pipeline before waiting for x.
  for (int k = 0; k < n_stages - 1 && k < total; ++k) {
    issue(in);
    advance(in);
  }
  pdl_enter();
  const bool x_vec = (reinterpret_cast<uintptr_t>(a.x) & 15) == 0;
  float acc[kTile];
#pragma unroll
  for (int j = 0; j < kTile; ++j) acc[j] = 0.0f;
  uint32_t phases = 0;  // bit k: parity of stage k's next completion
  for (int it = 0; it < total; ++it) {
    if (it + n_stages - 1 < total) {
      issue(in);
      advance(in);
    }
    mbar_wait(&bars[out.slot], (phases >> out.slot) & 1u);
    phases ^= 1u << out.slot;
    const uint8_t* wstep = stage + out.slot * kStepBytes;
    const int64_t e0 = int64_t{out.step} * kStepElems;
#pragma unroll
    for (int c = 0; c < kStepElems / 256; ++c) {
      const int64_t e = e0 + c * 256 + 8 * lane;
      if (e < cols) {
        float w[8];
        load_lane8<T>(wstep + c * kChunkBytes, lane, w);
#pragma unroll
        for (int j = 0; j < kTile; ++j) {
          if (j >= nt) break;
          const float* xr = a.x + (x0 + j) * cols + e;
          float xv[8];
          if (x_vec) {
            const float4 p = __ldg(reinterpret_cast<const float4*>(xr));
            const float4 q = __ldg(reinterpret_cast<const float4*>(xr) + 1);
            xv[0] = p.x; xv[1] = p.y; xv[2] = p.z; xv[3] = p.w;
            xv[4] = q.x; xv[5] = q.y; xv[6] = q.z; xv[7] = q.w;
          } else {
#pragma unroll
            for (int i = 0; i < 8; ++i) xv[i] = xr[i];
          }
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[j] = __fmaf_rn(w[i], xv[i], acc[j]);
        }
      }
    }
    if (out.step == n_steps - 1) {
      const MatRow row = mat_row(a, first_row + int64_t{out.row_k} * row_stride);
#pragma unroll
      for (int j = 0; j < kTile; ++j) {
        if (j < nt) {  // uniform across the warp
          const float sum = warp_sum_tree(acc[j]);
          if (lane == 0) {
            row.y[(x0 + j) * row.rows + row.r] = sum;
            fused_residual(a, x0 + j, row.r, sum);
          }
        }
        acc[j] = 0.0f;
      }
    }
    advance(out);
    __syncwarp();  // every lane is done with this stage before lane 0 refills it
  }
}

template <DType T, int kTile>
void launch_instance(const MatmulArgs& a, const LaunchEnv& env, int n_stages) {
  auto* kernel = gemv_float_bulk_kernel<T, kTile>;
  const int smem = smem_bytes(n_stages);
  int per_sm = 0;
  TERN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kGemvWarps * 32, smem));
  const int64_t x_tiles = (a.n + kTile - 1) / kTile;
  const int64_t target = std::max<int64_t>(1, std::max(per_sm, 1) * int64_t{a.n_sm} / x_tiles);
  const int64_t row_blocks =
      std::min<int64_t>((a.total_rows() + kGemvWarps - 1) / kGemvWarps, std::min<int64_t>(target, 65535));
  const dim3 grid(static_cast<unsigned>(x_tiles), static_cast<unsigned>(row_blocks));
  launch_kernel(env, kernel, grid, kGemvWarps * 32, static_cast<size_t>(smem), a, n_stages);
}

template <DType T>
void launch_typed(const MatmulArgs& a, const LaunchEnv& env) {
  const int budget = a.stage_bytes_per_warp > 0 ? a.stage_bytes_per_warp : kDefaultStageBytesPerWarp;
  int n_stages = std::clamp(budget / kStepBytes, 2, kMaxStages);
  while (n_stages > 2 && smem_bytes(n_stages) > a.max_smem_bytes) --n_stages;
  if (a.n == 1) {
    launch_instance<T, 1>(a, env, n_stages);
  } else {
    launch_instance<T, kGemvMaxXRows>(a, env, n_stages);
  }
}

template <DType T>
void allow_smem(int max_smem_bytes) {
  TERN_CUDA_CHECK(cudaFuncSetAttribute(gemv_float_bulk_kernel<T, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       max_smem_bytes));
  TERN_CUDA_CHECK(cudaFuncSetAttribute(gemv_float_bulk_kernel<T, kGemvMaxXRows>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem_bytes));
}

}  // namespace

void launch_gemv_float(const MatmulArgs& a, const LaunchEnv& env) {
  switch (a.dtype) {
    case DType::F32: launch_typed<DType::F32>(a, env); break;
    case DType::F16: launch_typed<DType::F16>(a, env); break;
    default: launch_typed<DType::BF16>(a, env); break;
  }
}

void init_gemv_float(int max_smem_bytes) {
  allow_smem<DType::F32>(max_smem_bytes);
  allow_smem<DType::F16>(max_smem_bytes);
  allow_smem<DType::BF16>(max_smem_bytes);
}

}  // namespace tern::cuda
