// The small ops that a GEMV launch can take in (MatmulArgs::fuse, cuda_backend.cpp's peephole),
// written once for both the op's own kernel (elementwise.cu) and the GEMV kernels, so the fused
// and the separate launches give the same bits:
//   - RMSNorm: 1 / rms(x) by a fixed tree (rms_inv_row), then out = (x * inv) * w;
//   - SwiGLU: silu(g) * u as g / (1 + exp(-g)) * u.
// Fusing them removes a launch and its round trip through memory between two kernels of a decode
// step; the GEMV's blocks each form the activations they need and one of them stores them, so
// later readers of the op's output still find it.
#pragma once

#include "backends/cuda/common.cuh"
#include "backends/cuda/kernels.h"

namespace tern::cuda {

// RMSNorm's sum of squares is defined on 256 virtual threads: virtual thread v adds the squares
// of elements v, v + 256, v + 512, ... in order (double), the 32 virtual threads of each virtual
// warp meet in a butterfly (warp_sum_tree), and the 8 warp sums are added in warp order. A block
// of kBlock threads (kBlock divides 256) plays virtual threads t + k * kBlock, k < 256 / kBlock.
constexpr int kRmsTreeThreads = 256;

// The square sum of virtual thread v of a row (the canonical per-thread order). Loads go out in
// batches of kBatch (all in flight together) before their squares are added in order: a loop that
// waits on each load in turn costs a memory latency per element. With keep set, the elements
// read are also stored to keep[c] (a caller that needs x again after the tree).
template <int kBatch = 8>
__device__ __forceinline__ double rms_partial(const float* x, int64_t cols, int v, float* keep = nullptr) {
  double sum = 0.0;
  for (int64_t c0 = v; c0 < cols; c0 += int64_t{kBatch} * kRmsTreeThreads) {
    float t[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int64_t c = c0 + int64_t{k} * kRmsTreeThreads;
      t[k] = c < cols ? x[c] : 0.0f;
    }
    if (keep != nullptr) {
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int64_t c = c0 + int64_t{k} * kRmsTreeThreads;
        if (c < cols) keep[c] = t[k];
      }
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      if (c0 + int64_t{k} * kRmsTreeThreads < cols) {
        const double d = t[k];
        sum = __dadd_rn(sum, __dmul_rn(d, d));  // product then sum, as the CPU reference
      }
    }
  }
  return sum;
}

// Combines the virtual threads' partial sums (part[k]: virtual thread threadIdx.x + k * kBlock)
// into 1 / rms(x), returned to every thread of the block. Every thread must call it (two
// __syncthreads); consecutive calls are safe.
template <int kBlock>
__device__ __forceinline__ float rms_inv_combine(const double (&part)[kRmsTreeThreads / kBlock], int64_t cols,
                                                 float eps) {
  static_assert(kRmsTreeThreads % kBlock == 0 && kBlock % 32 == 0, "block size must divide 256");
  __shared__ double warp_sums[kRmsTreeThreads / 32];
  __shared__ float inv_shared;
#pragma unroll
  for (int k = 0; k < kRmsTreeThreads / kBlock; ++k) {
    const double s = warp_sum_tree(part[k]);
    if (threadIdx.x % 32 == 0) warp_sums[(threadIdx.x + k * kBlock) / 32] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = warp_sums[0];
    for (int w = 1; w < kRmsTreeThreads / 32; ++w) total = __dadd_rn(total, warp_sums[w]);
    const float mean = static_cast<float>(__ddiv_rn(total, static_cast<double>(cols)));
    inv_shared = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
  }
  __syncthreads();
  return inv_shared;
}

// 1 / rms of one row, computed by a whole block of kBlock threads.
template <int kBlock>
__device__ __forceinline__ float rms_inv_row(const float* x, int64_t cols, float eps) {
  double part[kRmsTreeThreads / kBlock];
#pragma unroll
  for (int k = 0; k < kRmsTreeThreads / kBlock; ++k) part[k] = rms_partial(x, cols, threadIdx.x + k * kBlock);
  return rms_inv_combine<kBlock>(part, cols, eps);
}

__device__ __forceinline__ float rms_norm_value(float x, float inv, float w) { return __fmul_rn(__fmul_rn(x, inv), w); }

__device__ __forceinline__ float swiglu_value(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

// 16 consecutive floats; one 16-byte load per 4 where the address allows.
__device__ __forceinline__ void load_floats16(const float* p, float (&v)[16]) {
  if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float4 f = reinterpret_cast<const float4*>(p)[k];
      v[4 * k] = f.x;
      v[4 * k + 1] = f.y;
      v[4 * k + 2] = f.z;
      v[4 * k + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < 16; ++k) v[k] = p[k];
  }
}

__device__ __forceinline__ void store_floats16(float* p, const float (&v)[16]) {
  if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
#pragma unroll
    for (int k = 0; k < 4; ++k) reinterpret_cast<float4*>(p)[k] = make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
  } else {
#pragma unroll
    for (int k = 0; k < 16; ++k) p[k] = v[k];
  }
}

// A GEMV block's RMSNorm prologue: 1 / rms of activation rows x0 .. x0 + nt - 1 into inv[j]
// (shared memory, visible to the block on return). Every thread of the block calls it.
template <int kBlock>
__device__ __forceinline__ void fused_rms_inv_rows(const MatmulArgs& a, int64_t x0, int nt, float* inv) {
  for (int j = 0; j < nt; ++j) {
    const float r = rms_inv_row<kBlock>(a.fuse.src + (x0 + j) * a.fuse.src_stride, a.cols, a.fuse.eps);
    if (threadIdx.x == 0) inv[j] = r;
  }
  __syncthreads();
}

// Elements [c, c + 16) of fused activation row i (the prologue's output), for a GEMV that forms
// its activations itself. With an RMSNorm prologue and store set, also stores them to a.x.
// With use_pre, an RMSNorm prologue takes the norm weight's elements [c, c + 16) from w_pre (the
// caller loaded them before its PDL wait: the weight is constant) instead of loading them.
__device__ __forceinline__ void fused_x16(const MatmulArgs& a, int64_t i, int64_t c, float inv, bool store,
                                          float (&v)[16], const float (&w_pre)[16], bool use_pre) {
  const GemvFusion& f = a.fuse;
  load_floats16(f.src + i * f.src_stride + c, v);
  float w[16];
  if (f.prologue == GemvPrologue::kRmsNorm) {
    if (use_pre) {
#pragma unroll
      for (int k = 0; k < 16; ++k) w[k] = w_pre[k];
    } else {
      load_floats16(f.src2 + c, w);
    }
#pragma unroll
    for (int k = 0; k < 16; ++k) v[k] = rms_norm_value(v[k], inv, w[k]);
    if (store) store_floats16(const_cast<float*>(a.x) + i * a.cols + c, v);
  } else {
    load_floats16(f.src2 + i * f.src2_stride + c, w);
#pragma unroll
    for (int k = 0; k < 16; ++k) v[k] = swiglu_value(v[k], w[k]);
  }
}

// The SwiGLU prologue's store (write_x): the output may be the gate itself (in place), which the
// other blocks read while they form their activations, so it is stored only once every block has
// passed that point: each block counts itself in after forming its tile (its reads are done),
// and the last one stores all a.n rows (the peephole fuses SwiGLU only for n <= one tile, so
// every block read all of them) and resets the counter for the next launch. Kernels that use the
// counter touch it only after pdl_wait(), when the previous one has completed. Every thread of
// every block calls this, after the __syncthreads that ends the block's reads.
__device__ __forceinline__ void fused_store_after_readers(const MatmulArgs& a) {
  __shared__ int last;
  if (threadIdx.x == 0) {
    __threadfence();
    const int blocks = static_cast<int>(gridDim.x * gridDim.y * gridDim.z);
    last = atomicAdd(a.fuse.done_blocks, 1) == blocks - 1 ? 1 : 0;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const GemvFusion& f = a.fuse;
  float* x = const_cast<float*>(a.x);
  const int cols = static_cast<int>(a.cols), n = static_cast<int>(a.n);
  const bool vec = cols % 4 == 0 && f.src_stride % 4 == 0 && f.src2_stride % 4 == 0 &&
                   ((reinterpret_cast<uintptr_t>(f.src) | reinterpret_cast<uintptr_t>(f.src2) |
                     reinterpret_cast<uintptr_t>(x)) & 15) == 0;
  if (vec) {  // 4 float4 of gate and of up per thread in flight at once
    constexpr int kBatch = 4;
    const int per_row = cols / 4, total = n * per_row;
    for (int base = threadIdx.x; base < total; base += kBatch * blockDim.x) {
      float4 g[kBatch], u[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int e = base + k * blockDim.x;
        if (e < total) {
          const int i = e / per_row, c = 4 * (e % per_row);
          g[k] = *reinterpret_cast<const float4*>(f.src + i * f.src_stride + c);
          u[k] = *reinterpret_cast<const float4*>(f.src2 + i * f.src2_stride + c);
        }
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int e = base + k * blockDim.x;
        if (e < total) {
          const int i = e / per_row, c = 4 * (e % per_row);
          *reinterpret_cast<float4*>(x + int64_t{i} * cols + c) =
              make_float4(swiglu_value(g[k].x, u[k].x), swiglu_value(g[k].y, u[k].y), swiglu_value(g[k].z, u[k].z),
                          swiglu_value(g[k].w, u[k].w));
        }
      }
    }
  } else {
    for (int i = 0; i < n; ++i) {
      for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        x[int64_t{i} * cols + c] = swiglu_value(f.src[i * f.src_stride + c], f.src2[i * f.src2_stride + c]);
      }
    }
  }
  if (threadIdx.x == 0) atomicExch(a.fuse.done_blocks, 0);
}

// The residual epilogue: residual[i, r] += y (the add that followed the product, same rounding;
// addition commutes, so x + y and y + x give the same bits).
__device__ __forceinline__ void fused_residual(const MatmulArgs& a, int64_t i, int64_t r, float y) {
  if (a.fuse.residual != nullptr) {
    float* p = a.fuse.residual + i * a.fuse.residual_stride + r;
    *p = __fadd_rn(*p, y);
  }
}

}  // namespace tern::cuda
