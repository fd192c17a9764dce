// The L2 prefetch kernel (l2_prefetch.h): one warp per block, each thread hands the L2 a few
// 16 KB bulk prefetches and is done; the copy engine moves the bytes while the attention runs.
#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/l2_prefetch.h"
#include "backends/cuda/launch.cuh"

namespace tern::cuda {
namespace {

constexpr uint32_t kPieceBytes = 16384;
constexpr int kThreads = 32;

__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes, bool evict_last, uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (evict_last) {
    asm volatile(
        "{\n .reg .u64 g;\n cvta.to.global.u64 g, %0;\n"
        " cp.async.bulk.prefetch.L2.global.L2::cache_hint [g], %1, %2;\n}\n" ::"l"(p),
        "r"(bytes), "l"(policy));
  } else {
    asm volatile(
        "{\n .reg .u64 g;\n cvta.to.global.u64 g, %0;\n"
        " cp.async.bulk.prefetch.L2.global [g], %1;\n}\n" ::"l"(p),
        "r"(bytes));
  }
#endif
}

// The kernel reads and writes no memory any kernel of the stream touches (weights are constant
// while a step runs; a prefetch only warms the L2), so it lets its successor (the attention)
// launch at once instead of after its own wait, and it waits for its predecessor only before it
// exits: the successor's wait, which returns once this kernel completed, therefore still covers
// the predecessor's writes (completion stays ordered along the stream, launch.cuh).
__global__ void __launch_bounds__(kThreads) l2_prefetch_kernel(L2PrefetchArgs a) {
  pdl_launch_dependents();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint64_t policy = 0;
  if (a.evict_last) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  const uint64_t first = (uint64_t{blockIdx.x} * blockDim.x + threadIdx.x) * kPieceBytes;
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x * kPieceBytes;
  // Range by range, so the o projection's bytes are asked for before the gate / up bytes.
  for (int r = 0; r < a.n_ranges; ++r) {
    const char* base = static_cast<const char*>(a.ptr[r]);
    for (uint64_t off = first; off < a.bytes[r]; off += stride) {
      const uint64_t left = a.bytes[r] - off;
      prefetch_l2(base + off, static_cast<uint32_t>(left < kPieceBytes ? left : kPieceBytes), a.evict_last != 0, policy);
    }
  }
#endif
  pdl_wait();
}

}  // namespace

void launch_l2_prefetch(const L2PrefetchArgs& a, const LaunchEnv& env) {
  if (a.n_ranges == 0) return;
  uint64_t pieces = 0;
  for (int r = 0; r < a.n_ranges; ++r) pieces += (a.bytes[r] + kPieceBytes - 1) / kPieceBytes;
  // A piece per thread, on at most one block per SM: the more SMs' copy engines take a share,
  // the sooner the last byte is asked for.
  const uint64_t blocks = std::clamp<uint64_t>((pieces + kThreads - 1) / kThreads, 1, std::max(a.n_sm, 1));
  launch_kernel(env, l2_prefetch_kernel, static_cast<unsigned>(blocks), kThreads, 0, a);
}

}  // namespace tern::cuda
