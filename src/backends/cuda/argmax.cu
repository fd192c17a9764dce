// Greedy sampling on the device: the first index of each row's largest value (core/argmax.h),
// so only one int per row crosses to the host instead of the vocabulary (~0.5 MB per row for
// Llama 3).
//
// Each element becomes a 64-bit key that orders like the pick: the float's bits mapped to an
// unsigned order (negative values flipped, -0 taken as +0) in the high word, 0xffffffff - index
// in the low word (ties: the lower index wins). NaNs never win, except a NaN at index 0, which
// gets the largest key there is (index 0) -- the scan in core/argmax.h keeps a leading NaN and
// skips all others. max() over keys is exact and order-free, so the blocks' keys combine in any
// order and the result does not depend on the grid.
#include <cstdint>

#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"

namespace tern::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kElemsPerThread = 16;  // a block covers 4096 elements per pass

__device__ __forceinline__ unsigned long long argmax_key(float v, int64_t index) {
  // -0 and +0 compare equal, so they must get one key (the scan keeps the first of them).
  const uint32_t bits = v == 0.0f ? 0u : __float_as_uint(v);
  const uint32_t ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<unsigned long long>(ordered) << 32) | (0xffffffffu - static_cast<uint32_t>(index));
}

__device__ __forceinline__ unsigned long long warp_max(unsigned long long v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const unsigned long long o = __shfl_xor_sync(0xffffffffu, v, off);
    v = o > v ? o : v;
  }
  return v;
}

// grid (blocks_per_row, rows): each block folds a strided share of its row into one key.
__global__ void __launch_bounds__(kThreads) argmax_partial_kernel(ArgmaxArgs a) {
  pdl_enter();
  const int r = blockIdx.y;
  const float* x = a.x + r * a.x_stride;
  unsigned long long best = 0;  // below every real key
  for (int64_t c = blockIdx.x * int64_t{kThreads} + threadIdx.x; c < a.cols; c += int64_t{gridDim.x} * kThreads) {
    const float v = x[c];
    unsigned long long key = v != v ? 0ull : argmax_key(v, c);
    if (c == 0 && v != v) key = ~0ull;  // a leading NaN is never replaced
    best = key > best ? key : best;
  }
  best = warp_max(best);
  __shared__ unsigned long long warp_best[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = best;
  __syncthreads();
  if (threadIdx.x < 32) {
    best = warp_max(threadIdx.x < kThreads / 32 ? warp_best[threadIdx.x] : 0ull);
    if (threadIdx.x == 0) a.partials[int64_t{r} * a.blocks_per_row + blockIdx.x] = best;
  }
}

// One warp per row: the max of its blocks' keys.
__global__ void __launch_bounds__(32) argmax_final_kernel(ArgmaxArgs a) {
  pdl_enter();
  const int r = blockIdx.x;
  unsigned long long best = 0;
  for (int b = threadIdx.x; b < a.blocks_per_row; b += 32) {
    const unsigned long long key = a.partials[int64_t{r} * a.blocks_per_row + b];
    best = key > best ? key : best;
  }
  best = warp_max(best);
  if (threadIdx.x == 0) a.keys[r] = best;
}

}  // namespace

int argmax_blocks_per_row(int64_t cols) {
  const int64_t per_block = int64_t{kThreads} * kElemsPerThread;
  const int64_t blocks = (cols + per_block - 1) / per_block;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > 128 ? 128 : blocks));
}

void launch_argmax_rows(const ArgmaxArgs& a, const LaunchEnv& env) {
  if (a.rows == 0) return;
  launch_kernel(env, argmax_partial_kernel, dim3(static_cast<unsigned>(a.blocks_per_row), static_cast<unsigned>(a.rows)),
                kThreads, 0, a);
  launch_kernel(env, argmax_final_kernel, static_cast<unsigned>(a.rows), 32, 0, a);
}

}  // namespace tern::cuda
