// The L2 prefetch kernel (l2_prefetch.h): each thread hands the L2 its share of the ranges and is
// done; the L2 moves the bytes while the attention runs. L2PrefetchArgs::issue picks how it asks.
#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/l2_prefetch.h"
#include "backends/cuda/launch.cuh"

namespace tern::cuda {
namespace {

constexpr uint32_t kPieceBytes = 16384;  // one bulk prefetch (issue 0)
constexpr int kBulkThreads = 32;
constexpr int kLoadThreads = 256;

enum Issue : int { kBulkPieces = 0, kBulkSpread = 1, kLoad128 = 2, kLoad32 = 3, kDry = 4 };

__device__ __forceinline__ void bulk_prefetch(const char* p, uint32_t bytes, bool evict_last, uint64_t policy) {
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

__device__ __forceinline__ void line_prefetch(const char* p, bool evict_last) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (evict_last) {
    asm volatile("prefetch.global.L2::evict_last [%0];\n" ::"l"(p));
  } else {
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
  }
#endif
}

// The kernel reads and writes no memory any kernel of the stream touches (weights are constant
// while a step runs; a prefetch only warms the L2), so it lets its successor (the attention)
// launch at once instead of after its own wait, and it waits for its predecessor only before it
// exits: the successor's wait, which returns once this kernel completed, therefore still covers
// the predecessor's writes (completion stays ordered along the stream, launch.cuh).
__global__ void __launch_bounds__(kLoadThreads) l2_prefetch_kernel(L2PrefetchArgs a) {
  pdl_launch_dependents();
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (a.evict_last) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
#endif
  // Before sm_90 the prefetch helpers are empty (the backend never records the op there).
  const uint64_t tid = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const uint64_t threads = uint64_t{gridDim.x} * blockDim.x;
  const bool last = a.evict_last != 0;
  // Range by range, so the o projection's bytes are asked for before the gate / up bytes.
  for (int r = 0; r < a.n_ranges; ++r) {
    const char* base = static_cast<const char*>(a.ptr[r]);
    const uint64_t bytes = a.bytes[r];
    if (a.issue == kBulkPieces) {
      for (uint64_t off = tid * kPieceBytes; off < bytes; off += threads * kPieceBytes) {
        bulk_prefetch(base + off, static_cast<uint32_t>(min(uint64_t{kPieceBytes}, bytes - off)), last, policy);
      }
    } else if (a.issue == kBulkSpread) {
      const uint64_t share = ((bytes + threads - 1) / threads + 15) & ~uint64_t{15};
      const uint64_t end = min(bytes, (tid + 1) * share);
      for (uint64_t off = tid * share; off < end; off += kPieceBytes) {
        bulk_prefetch(base + off, static_cast<uint32_t>(min(uint64_t{kPieceBytes}, end - off)), last, policy);
      }
    } else if (a.issue == kLoad128 || a.issue == kLoad32) {
      const uint64_t step = a.issue == kLoad128 ? 128 : 32;
      for (uint64_t off = tid * step; off < bytes; off += threads * step) line_prefetch(base + off, last);
    }
  }
  pdl_wait();
}

}  // namespace

void launch_l2_prefetch(const L2PrefetchArgs& a, const LaunchEnv& env) {
  if (a.n_ranges == 0) return;
  const int n_sm = std::max(a.n_sm, 1);
  if (a.issue == kBulkPieces) {
    uint64_t pieces = 0;
    for (int r = 0; r < a.n_ranges; ++r) pieces += (a.bytes[r] + kPieceBytes - 1) / kPieceBytes;
    // A piece per thread, on at most one block per SM.
    const uint64_t blocks = std::clamp<uint64_t>((pieces + kBulkThreads - 1) / kBulkThreads, 1, n_sm);
    launch_kernel(env, l2_prefetch_kernel, static_cast<unsigned>(blocks), kBulkThreads, 0, a);
    return;
  }
  const bool loads = a.issue == kLoad128 || a.issue == kLoad32;
  launch_kernel(env, l2_prefetch_kernel, static_cast<unsigned>(n_sm), loads ? kLoadThreads : kBulkThreads, 0, a);
}

}  // namespace tern::cuda
