// The multi-row GEMV's activation tile formed once per launch (MatmulArgs::gemv_x_once,
// TERN_CUDA_GEMV_X_ONCE; gemv_rows.cu). Without it every block forms the quantized tile itself:
// for an RMSNorm prologue a sum of squares of the whole row, then the normed row quantized to int8
// (1.6-1.8 us of a small product on the H200, bench/RESULTS.md session 6), and more blocks repeat
// it more often, which is why a grid over every SM measured slower. With it:
//   - block 0 forms the tile as before, copies those shared-memory bytes to the backend's scratch
//     (x_once_buf + kGemvXOnceSyncBytes) and sets the ready flag with release semantics;
//   - every other block's thread 0 polls the flag (acquire) for at most kXOnceWaitNs, and the
//     block copies the bytes into its shared memory; if the flag is late (block 0 not resident
//     yet, e.g. another stream holds the SMs) the block forms the tile itself. Nobody ever waits
//     without a bound, so co-residency is not needed for progress, and the tile's bytes are the
//     same whoever formed them (the same code on the same inputs), so the dot products and their
//     trees see the same bits either way;
//   - every block counts itself in as it exits (its reads of the scratch were done when its tile
//     was in shared memory; counting then would put an L2 round trip before warp 0's first dot
//     product); the last one resets the flag and the counter, so the next launch, and every
//     replay of a captured graph, starts from zero.
// The scratch is touched only after the PDL wait: the previous launch that used it has completed.
// A launch that runs alongside its predecessor (GemvFusion::concurrent) does not use it.
// Status: written without a device (session 6); default off until a device run validates it.
#pragma once

#include <cstdint>

#include "backends/cuda/common.cuh"
#include "backends/cuda/kernels.h"

namespace tern::cuda::gemv_tile {

// Word offsets in the sync header: the ready flag, the blocks counted in (both zero between
// launches), and two diagnostics that only grow (never reset; gpu_bench --gemv reports them):
// blocks that copied the tile, blocks that formed it themselves after the wait timed out.
constexpr int kXOnceReady = 0, kXOnceDone = 1, kXOnceCopied = 2, kXOnceLate = 3;
// How long a block waits for block 0's tile before forming its own (the tile takes ~2 us to form);
// MatmulArgs::gemv_x_once 4 (tests) waits not at all: a block copies the tile only if it is
// already there, so both paths run in one launch.
constexpr int kXOnceWaitNs = 20000;

#if defined(__CUDACC__)
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ unsigned load_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_release_gpu(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// A consumer block (blockIdx.x != 0): true when block 0's tile arrived in time and is now in
// tile[0, bytes) of shared memory (visible to the block: ends with __syncthreads); false: the
// caller forms the tile. Every thread of the block calls it. bytes is a multiple of 16.
// Not inlined: the prologue path then costs the one-row instances no registers (inlined, their 64-80
// spilled a few bytes; ptxas -v, sm_90a). Internal linkage keeps the header safe to include anywhere.
static __device__ __noinline__ bool x_once_acquire(uint8_t* buf, uint8_t* tile, int bytes, int wait_ns) {
  __shared__ int got;
  unsigned* sync = reinterpret_cast<unsigned*>(buf);
  if (threadIdx.x == 0) {
    const uint64_t t0 = global_ns();
    int ok = 0;
    for (;;) {
      if (load_acquire_gpu(sync + kXOnceReady) != 0) {
        ok = 1;
        break;
      }
      if (global_ns() - t0 >= static_cast<uint64_t>(wait_ns)) break;
      __nanosleep(32);
    }
    got = ok;
    atomicAdd(sync + (ok ? kXOnceCopied : kXOnceLate), 1u);
  }
  // Orders the other threads' loads after thread 0's acquire (the barrier is the CTA's
  // synchronization; the loads bypass L1, which may not be coherent with other SMs' stores).
  __syncthreads();
  if (!got) return false;
  const uint4* src = reinterpret_cast<const uint4*>(buf + kGemvXOnceSyncBytes);
  uint4* dst = reinterpret_cast<uint4*>(tile);
  const int n = bytes / 16;
  constexpr int kBatch = 4;  // loads in flight per thread before their stores
  for (int base = threadIdx.x; base < n; base += kBatch * blockDim.x) {
    uint4 v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int i = base + k * blockDim.x;
      if (i < n) v[k] = __ldcg(src + i);
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int i = base + k * blockDim.x;
      if (i < n) dst[i] = v[k];
    }
  }
  __syncthreads();
  return true;
}

// The producer (block 0), after its tile is formed in shared memory and the block has synced:
// stores it to the scratch and sets the flag. Every thread of the block calls it.
static __device__ __noinline__ void x_once_publish(uint8_t* buf, const uint8_t* tile, int bytes) {
  const uint4* src = reinterpret_cast<const uint4*>(tile);
  uint4* dst = reinterpret_cast<uint4*>(buf + kGemvXOnceSyncBytes);
  for (int i = threadIdx.x; i < bytes / 16; i += blockDim.x) __stcg(dst + i, src[i]);
  __syncthreads();
  // The barrier orders the block's stores before thread 0's fence, which is cumulative: a block
  // that acquires the flag sees them all (the pattern of a grid-wide barrier).
  if (threadIdx.x == 0) {
    __threadfence();
    store_release_gpu(reinterpret_cast<unsigned*>(buf) + kXOnceReady, 1u);
  }
}

// Every block, after its tile is in shared memory and the block has synced (so its reads of the
// scratch are complete; the kernel calls it as the block exits): counts itself in; the last block
// of the grid resets the flag and the counter. Block 0 calls it after x_once_publish (thread 0's
// order: flag, fence, count).
__device__ __forceinline__ void x_once_count_in(uint8_t* buf) {
  if (threadIdx.x != 0) return;
  unsigned* sync = reinterpret_cast<unsigned*>(buf);
  __threadfence();
  const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
  if (atomicAdd(sync + kXOnceDone, 1u) == blocks - 1) {
    __threadfence();
    atomicExch(sync + kXOnceReady, 0u);
    atomicExch(sync + kXOnceDone, 0u);
  }
}
#endif

}  // namespace tern::cuda::gemv_tile
