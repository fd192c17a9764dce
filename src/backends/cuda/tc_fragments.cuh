// Fragment helpers of the tensor-core attention kernels (attention_tc.cu, attention_mma.cu):
// ldmatrix / mma.sync m16n8k16 wrappers in the PTX ISA's fragment layouts, f16 packing, ex2, and
// the paged K/V tile copy through a sequence's block table.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/async_copy.cuh"
#include "backends/cuda/kernels.h"

namespace tern::cuda {

constexpr int kTcKeys = 64;  // keys per K/V tile (= kAttnChunkTokens: a tile is one softmax chunk)
static_assert(kTcKeys == kAttnChunkTokens, "a K/V tile of the tensor-core kernels is one attention chunk");
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldmatrix_x4(const __half* p, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(const __half* p, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
// c[16x8] += a[16x16] b[16x8] (fragments in the PTX ISA's m16n8k16 layouts).
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ float exp2_approx(float x) {  // ex2.approx(-inf) = +0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Block-table arithmetic for a position: a shift and a mask when block_tokens is a power of two
// (the usual case), else a division.
struct ShiftBlocks {
  int shift, mask;
  __device__ int block(int j) const { return j >> shift; }
  __device__ int offset(int j) const { return j & mask; }
};
struct DivBlocks {
  int n;
  __device__ int block(int j) const { return j / n; }
  __device__ int offset(int j) const { return j % n; }
};

// Which caches load_kv_tile copies.
constexpr int kLoadK = 1;
constexpr int kLoadV = 2;

// Starts copying K and V rows [j0, j0 + kKeys) of the sequence into k_dst / v_dst (kParts: both,
// or only one of them); rows past last_row are zero-filled (masked, but V must not hold NaN: p = 0
// times NaN is NaN). Thread i copies 16-byte piece i % (HD / 8) of rows i / (HD / 8) + k *
// kRowsPerPass: one block-table lookup per row and thread, all independent (the loop is unrolled).
template <int HD, int kThreads, int kKeys, int kParts = kLoadK | kLoadV, typename Blocks>
__device__ __forceinline__ void load_kv_tile(const AttentionArgs& a, const int32_t* blocks, Blocks bt, int64_t kv_col,
                                             int j0, int last_row, __half* k_dst, __half* v_dst) {
  constexpr int kPerRow = HD / 8;
  constexpr int kRowsPerPass = kThreads / kPerRow;
  static_assert(kThreads % kPerRow == 0 && kKeys % kRowsPerPass == 0, "pieces must tile the K/V tile");
  constexpr int kRow = HD + 8;
  const int piece = static_cast<int>(threadIdx.x) % kPerRow, r0 = static_cast<int>(threadIdx.x) / kPerRow;
  const __half* k_src = static_cast<const __half*>(a.k_cache) + kv_col + piece * 8;
  const __half* v_src = static_cast<const __half*>(a.v_cache) + kv_col + piece * 8;
#pragma unroll
  for (int k = 0; k < kKeys / kRowsPerPass; ++k) {
    const int jj = r0 + k * kRowsPerPass, j = j0 + jj;
    const bool live = j <= last_row;
    int64_t slot = 0;
    if (live) slot = int64_t{blocks[bt.block(j)]} * a.block_tokens + bt.offset(j);
    if constexpr ((kParts & kLoadK) != 0) {
      cp_async16_zfill(k_dst + jj * kRow + piece * 8, k_src + slot * a.k_cache_stride, live ? 16 : 0);
    }
    if constexpr ((kParts & kLoadV) != 0) {
      cp_async16_zfill(v_dst + jj * kRow + piece * 8, v_src + slot * a.v_cache_stride, live ? 16 : 0);
    }
  }
}

}  // namespace tern::cuda
