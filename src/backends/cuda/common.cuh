// Device helpers shared by the kernels: warp reductions, fp16/bf16 reads and unaligned shared
// memory word loads. Float arithmetic that fixes a result bit for bit is written with the
// explicit-rounding intrinsics (__fadd_rn, __fmul_rn, __fmaf_rn, ...): nvcc never contracts them,
// so the same expression gives the same bits in every kernel that uses it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tern::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, off));
  return v;
}

// Butterfly sum: lanes l and l ^ off combine, offsets 1, 2, 4, 8, 16. Every lane ends with the
// same value, and the tree is a perfect pairwise tree over the lanes in lane order (float
// addition is commutative, so l + (l ^ off) equals (l ^ off) + l bit for bit).
__device__ __forceinline__ float warp_sum_tree(float v) {
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) v = __fadd_rn(v, __shfl_xor_sync(kFullMask, v, off));
  return v;
}

__device__ __forceinline__ double warp_sum_tree(double v) {
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) v = __dadd_rn(v, __shfl_xor_sync(kFullMask, v, off));
  return v;
}

__device__ __forceinline__ float half_bits_to_float(uint16_t bits) {
  return __half2float(__ushort_as_half(bits));
}

__device__ __forceinline__ float bf16_bits_to_float(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

// Eight 16-bit floats (bf16 when kBf16, else f16) packed two to a word, low half first, as
// floats in element order: one 16-byte load of an f16 / bf16 weight row.
template <bool kBf16>
__device__ __forceinline__ void unpack_half8(const uint32_t (&words)[4], float (&w)[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint16_t lo = static_cast<uint16_t>(words[i] & 0xffffu), hi = static_cast<uint16_t>(words[i] >> 16);
    w[2 * i] = kBf16 ? bf16_bits_to_float(lo) : half_bits_to_float(lo);
    w[2 * i + 1] = kBf16 ? bf16_bits_to_float(hi) : half_bits_to_float(hi);
  }
}

__device__ __forceinline__ uint16_t load_u16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }

// N 32-bit little-endian words from a 16-byte (a16) or 8-byte (a8) aligned address: vector loads.
template <int N>
__device__ __forceinline__ void load_words_a16(const uint8_t* p, uint32_t (&out)[N]) {
  static_assert(N % 4 == 0, "whole 16-byte vectors");
#pragma unroll
  for (int k = 0; k < N / 4; ++k) {
    const uint4 v = reinterpret_cast<const uint4*>(p)[k];
    out[4 * k] = v.x;
    out[4 * k + 1] = v.y;
    out[4 * k + 2] = v.z;
    out[4 * k + 3] = v.w;
  }
}
template <int N>
__device__ __forceinline__ void load_words_a8(const uint8_t* p, uint32_t (&out)[N]) {
  static_assert(N % 2 == 0, "whole 8-byte vectors");
#pragma unroll
  for (int k = 0; k < N / 2; ++k) {
    const uint2 v = reinterpret_cast<const uint2*>(p)[k];
    out[2 * k] = v.x;
    out[2 * k + 1] = v.y;
  }
}
// N 32-bit little-endian words starting at a 2-byte-aligned shared-memory address. Reads the
// aligned words covering [p, p + 4N) plus one more, which must lie inside the buffer (the callers'
// staging buffers keep 16 bytes of slack). 16- and 8-byte aligned addresses take vector loads.
template <int N>
__device__ __forceinline__ void load_words_2aligned(const uint8_t* p, uint32_t (&out)[N]) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  if constexpr (N % 4 == 0) {
    if ((addr & 15) == 0) {  // 16-byte loads (q4_k / q5_k blocks of aligned rows)
      load_words_a16(p, out);
      return;
    }
  }
  if constexpr (N % 2 == 0) {
    if ((addr & 7) == 0) {  // 8-byte loads (q8_0 / q4_0 lane items of 16-byte aligned rows)
      load_words_a8(p, out);
      return;
    }
  }
  const uint32_t* w = reinterpret_cast<const uint32_t*>(addr & ~uintptr_t{3});
  const uint32_t shift = static_cast<uint32_t>(addr & 2) * 8;  // 0 or 16 bits
  uint32_t prev = w[0];
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const uint32_t next = w[i + 1];
    out[i] = __funnelshift_r(prev, next, shift);
    prev = next;
  }
}

// One 16-byte load of weights read once (the register-streamed GEMVs, gemv_float_stream.cu and
// gemv_stream.cu): non-coherent, not allocated in L1 (nothing is reused), and asking L2 to fetch
// 256-byte sectors ahead (a warp's chunk is 512 or more contiguous bytes).
__device__ __forceinline__ uint4 load_stream16(const uint8_t* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}
// The same load as volatile asm, so the compiler issues it where the source puts it (a refill
// must go out before the other buffer's arithmetic, not be sunk to its first use).
__device__ __forceinline__ uint4 load_stream16_now(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Programmatic dependent launch (launch.cuh). Every kernel calls pdl_wait() before it touches
// memory an earlier kernel of the stream writes or reads (its inputs, and its outputs: a
// predecessor may still be reading them), and pdl_launch_dependents() once it has passed that
// wait, so at most one kernel runs ahead of its predecessor. Both are no-ops for a kernel
// launched without the attribute and on GPUs before sm_90.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
// Both, for kernels with nothing to do before their inputs are ready.
__device__ __forceinline__ void pdl_enter() {
  pdl_wait();
  pdl_launch_dependents();
}

// Byte k (runtime, 0..11) of a 12-byte field held in three words, without indexing a register
// array (which would move it to local memory).
__device__ __forceinline__ uint32_t byte_of3(uint32_t w0, uint32_t w1, uint32_t w2, int k) {
  const uint32_t w = k < 4 ? w0 : (k < 8 ? w1 : w2);
  return (w >> (8 * (k & 3))) & 0xffu;
}

}  // namespace tern::cuda
