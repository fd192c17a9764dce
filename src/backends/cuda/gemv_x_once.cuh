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
// Carry (gemv_x_once 5 / 6): a launch with an RMSNorm prologue keeps its tile for the next one
// (its last block writes a key -- its record's tag, the norm's input and weight, cols, eps -- and
// sets the flag to kept, 2, instead of 0); the launch that carries the same norm (v after q+k;
// cuda_backend.cpp gives both records the tag, MatmulArgs::x_once_tag / x_once_carry_tag)
// copies that tile in every block, block 0 included, when the flag is kept and the key is its
// own, and forms nothing. The carried norm's inputs are untouched between the two launches (the
// recorder checks it before carrying), and any other launch of the scratch in between leaves the
// flag at 0 or its own key, so a kept tile is taken only by the launch right after its keeper.
// Status: written without a device (session 6); default off until a device run validates it.
#pragma once

#include <cstdint>

#include "backends/cuda/common.cuh"
#include "backends/cuda/kernels.h"

namespace tern::cuda::gemv_tile {

// Word offsets in the sync header: the ready flag (0 none, kXOncePublished: block 0 of this launch
// published its tile, kXOnceKept: the previous launch kept its tile), the blocks counted in (zero
// between launches), three diagnostics that only grow (never reset; gpu_bench --gemv and
// CudaBackendStats report them: blocks that copied block 0's tile, that formed their own after
// the wait, that took a kept tile), and the kept tile's key (words 5-6: cols, eps bits; 8-13: the
// keeper's record tag, the norm's input and weight, as 64-bit values).
constexpr int kXOnceReady = 0, kXOnceDone = 1, kXOnceCopied = 2, kXOnceLate = 3, kXOnceCarried = 4;
constexpr int kXOnceKeyCols = 5, kXOnceKeyEps = 6, kXOnceKeyW = 8, kXOnceKeySrc = 10, kXOnceKeySrc2 = 12;
constexpr unsigned kXOncePublished = 1, kXOnceKept = 2;
// The launcher's flags: kXOnceKeep, the launch keeps its tile for the next one; kXOnceCarry, it
// may take the previous launch's kept tile (its key: MatmulArgs::x_once_carry_tag and a.fuse).
constexpr int kXOnceKeep = 1, kXOnceCarry = 2;
// How long a block waits for block 0's tile before forming its own (the tile takes ~2 us to form);
// MatmulArgs::gemv_x_once 4 (tests) waits not at all: a block copies the tile only if it is
// already there, so both paths run in one launch.
constexpr int kXOnceWaitNs = 20000;

// What identifies a kept tile (all from the launch's parameters).
struct XOnceKey {
  uint64_t tag;  // the keeper's MatmulArgs::x_once_tag (the carrier passes its x_once_carry_tag)
  const float* src;
  const float* src2;
  unsigned cols, eps_bits;
};

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

__device__ __forceinline__ uint64_t load_u64_cg(const unsigned* p) {
  return __ldcg(reinterpret_cast<const unsigned long long*>(p));
}

// A launch's key: its RMSNorm's input and weight, cols and eps, with tag its own record's (a
// keeper) or the carried-from record's (a carrier).
__device__ __forceinline__ XOnceKey x_once_key(const MatmulArgs& a, uint64_t tag) {
  return XOnceKey{tag, a.fuse.src, a.fuse.src2, static_cast<unsigned>(a.cols), __float_as_uint(a.fuse.eps)};
}

// Whether the kept tile's key (after an acquire of kXOnceKept) is k.
__device__ __forceinline__ bool x_once_key_is(const unsigned* sync, const XOnceKey& k) {
  return __ldcg(sync + kXOnceKeyCols) == k.cols && __ldcg(sync + kXOnceKeyEps) == k.eps_bits &&
         load_u64_cg(sync + kXOnceKeyW) == k.tag &&
         load_u64_cg(sync + kXOnceKeySrc) == reinterpret_cast<uint64_t>(k.src) &&
         load_u64_cg(sync + kXOnceKeySrc2) == reinterpret_cast<uint64_t>(k.src2);
}

// True when the block's tile is now in tile[0, bytes) of shared memory, copied from the scratch
// (visible to the block: ends with __syncthreads); false: the caller forms the tile (and block 0
// publishes it). With carry, any block (block 0 too) takes a kept tile whose key is k; else a
// block other than 0 waits up to wait_ns for block 0's tile of this launch. Every thread of the
// block calls it. bytes is a multiple of 16.
// Not inlined: the prologue path then costs the one-row instances no registers (inlined, their
// 64-80 spilled a few bytes; ptxas -v, sm_90a). Internal linkage keeps the header safe to include
// anywhere.
static __device__ __noinline__ bool x_once_acquire(uint8_t* buf, uint8_t* tile, int bytes, int wait_ns, bool carry,
                                                   XOnceKey k) {
  __shared__ int got;
  unsigned* sync = reinterpret_cast<unsigned*>(buf);
  if (threadIdx.x == 0) {
    int ok = 0;
    // A kept flag whose key matches stays kept for the whole launch (only last blocks set it
    // kept, and block 0 then publishes nothing), so every block of the launch takes it; under
    // another key, block 0 publishes over it and the others wait for that, whichever they see.
    if (carry && load_acquire_gpu(sync + kXOnceReady) == kXOnceKept && x_once_key_is(sync, k)) ok = 2;
    if (ok == 0 && blockIdx.x != 0) {
      const uint64_t t0 = global_ns();
      for (;;) {
        if (load_acquire_gpu(sync + kXOnceReady) == kXOncePublished) {
          ok = 1;
          break;
        }
        if (global_ns() - t0 >= static_cast<uint64_t>(wait_ns)) break;
        __nanosleep(32);
      }
    }
    got = ok;
    if (ok != 0 || blockIdx.x != 0) atomicAdd(sync + (ok == 2 ? kXOnceCarried : (ok == 1 ? kXOnceCopied : kXOnceLate)), 1u);
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
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * blockDim.x;
      if (i < n) v[j] = __ldcg(src + i);
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * blockDim.x;
      if (i < n) dst[i] = v[j];
    }
  }
  __syncthreads();
  return true;
}

// The producer (block 0), after it formed its tile in shared memory and the block has synced:
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
    store_release_gpu(reinterpret_cast<unsigned*>(buf) + kXOnceReady, kXOncePublished);
  }
}

// Every block, after its tile is in shared memory and the block has synced (so its reads of the
// scratch are complete; the kernel calls it as the block exits): counts itself in; the last block
// of the grid resets the counter and leaves the flag at 0, or with keep writes k and leaves it
// kept (the scratch holds this launch's tile: block 0 published it or took it kept). Block 0
// calls it after x_once_publish (thread 0's order: flag, fence, count).
__device__ __forceinline__ void x_once_count_in(uint8_t* buf, bool keep, const XOnceKey& k) {
  if (threadIdx.x != 0) return;
  unsigned* sync = reinterpret_cast<unsigned*>(buf);
  __threadfence();
  const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
  if (atomicAdd(sync + kXOnceDone, 1u) == blocks - 1) {
    __threadfence();
    if (keep) {
      sync[kXOnceKeyCols] = k.cols;
      sync[kXOnceKeyEps] = k.eps_bits;
      *reinterpret_cast<unsigned long long*>(sync + kXOnceKeyW) = k.tag;
      *reinterpret_cast<unsigned long long*>(sync + kXOnceKeySrc) = reinterpret_cast<uint64_t>(k.src);
      *reinterpret_cast<unsigned long long*>(sync + kXOnceKeySrc2) = reinterpret_cast<uint64_t>(k.src2);
      __threadfence();
    }
    atomicExch(sync + kXOnceReady, keep ? kXOnceKept : 0u);
    atomicExch(sync + kXOnceDone, 0u);
  }
}
#endif

}  // namespace tern::cuda::gemv_tile
