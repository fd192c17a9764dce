// Bulk copies global -> shared memory on the sm_90 TMA engine, completing on an mbarrier: the
// weight pipelines of the GEMV kernels (gemv_quant.cu, gemv_float.cu). One lane issues a copy of a
// whole step and the warp waits on the stage's barrier, so the issue cost of a step is a few
// instructions whatever its size. Sources, destinations and lengths must be multiples of 16 bytes.
#pragma once

#include <cstdint>

#include "backends/cuda/common.cuh"

namespace tern::cuda {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_addr(bar)) : "memory");
}
// Makes the initialized barriers visible to the async proxy (the TMA engine completes them).
__device__ __forceinline__ void mbar_fence_init() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
// One arrival that expects `bytes` of transactions, then the copy that delivers them. Called by
// one lane. The proxy fence orders the warp's earlier generic reads of dst before the copy's
// writes (the stage is being refilled).
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, int bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
#else
  __trap();  // launchers pick bulk copies only on sm_90+
#endif
}
// Several copies completing one barrier (the multi-row GEMV stages a step of each of its rows):
// one arrival expecting all their bytes, then the copies. Called by one lane.
__device__ __forceinline__ void mbar_expect_bytes(uint64_t* bar, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void bulk_copy_no_arrive(void* dst, const void* src, int bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  }
#endif
}

}  // namespace tern::cuda
