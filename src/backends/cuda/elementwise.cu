// The small ops: embedding lookup, RMSNorm, add / bias / SwiGLU, RoPE, KV writes and the logit
// row gather. Each matches its reference in backends/cpu/ops_ref.cpp: same expressions, and
// reductions in an order fixed by the row length only (never by the number of rows).
#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/gemv_fusion.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/rope.cuh"

namespace tern::cuda {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t work, int per_block = kThreads) {
  const int64_t blocks = (work + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > (1 << 20) ? (1 << 20) : blocks));
}

// Blocks (token, column slice); each thread dequantizes one column per grid stride. A block per
// token with its threads looping over a 4096-wide row took ~10 us in a decode step (H200, 8B
// Q4_K_M, gpu_bench --timeline): each element's loads waited behind the previous element's store.
__global__ void embed_kernel(EmbedArgs a) {
  pdl_enter();
  const int t = blockIdx.x;
  const int32_t id = a.token_ids[t];
  const uint8_t* row = static_cast<const uint8_t*>(a.table) + static_cast<size_t>(id) * a.table_stride_bytes;
  float* out = a.out + t * a.out_stride;
  const int64_t step = int64_t{gridDim.y} * blockDim.x;
  for (int64_t c = int64_t{blockIdx.y} * blockDim.x + threadIdx.x; c < a.cols; c += step) {
    out[c] = dequant_element(a.dtype, row, c);
  }
}

// Columns per thread that rms_norm keeps in registers (rows up to 32 * kThreads = 8192 wide).
constexpr int kNormRegs = 32;

// The tree of rms_norm's per-thread sums (gemv_fusion.cuh, shared with the GEMVs' fused norm):
// warp butterflies, then the warps' sums in warp order. Returns 1 / rms(x) to every thread.
__device__ __forceinline__ float rms_inv(double sum, int64_t cols, float eps) {
  const double part[1] = {sum};
  return rms_inv_combine<kThreads>(part, cols, eps);
}

// One block per row. Sum of squares in double like the reference: each thread adds its strided
// elements (c = thread, thread + kThreads, ...) in order, then rms_inv's fixed tree. Rows up to
// kNormRegs * kThreads wide are read into registers by unrolled loads, all in flight at once: a
// decode step's norms are single-block kernels, where a loop that waits on each load in turn
// took 10-17 us for 4096 columns. Wider rows take the plain loop; both give the same bits.
__global__ void rms_norm_kernel(RmsNormArgs a) {
  pdl_enter();
  const int64_t r = blockIdx.x;
  float* x = a.x + r * a.x_stride;
  float* out = a.out + r * a.out_stride;
  const bool add = a.add_a != nullptr;  // fused residual add
  const float* xa = add ? a.add_a + r * a.add_a_stride : nullptr;
  const float* xb = add ? a.add_b + r * a.add_b_stride : nullptr;
  if (a.cols <= int64_t{kNormRegs} * kThreads) {
    float v[kNormRegs];
#pragma unroll
    for (int k = 0; k < kNormRegs; ++k) {
      const int64_t c = threadIdx.x + int64_t{k} * kThreads;
      v[k] = c < a.cols ? (add ? __fadd_rn(xa[c], xb[c]) : x[c]) : 0.0f;
    }
    double sum = 0.0;
#pragma unroll
    for (int k = 0; k < kNormRegs; ++k) {
      const int64_t c = threadIdx.x + int64_t{k} * kThreads;
      if (c < a.cols) {
        if (add) x[c] = v[k];
        const double d = v[k];
        sum = __dadd_rn(sum, __dmul_rn(d, d));  // product then sum, as the reference
      }
    }
    const float inv = rms_inv(sum, a.cols, a.eps);
#pragma unroll
    for (int k = 0; k < kNormRegs; ++k) {
      const int64_t c = threadIdx.x + int64_t{k} * kThreads;
      if (c < a.cols) out[c] = rms_norm_value(v[k], inv, a.w[c]);
    }
    return;
  }
  if (add) {  // each thread rereads only what it wrote
    for (int64_t c = threadIdx.x; c < a.cols; c += kThreads) x[c] = __fadd_rn(xa[c], xb[c]);
  }
  double sum = 0.0;
  for (int64_t c = threadIdx.x; c < a.cols; c += kThreads) {
    const double v = x[c];
    sum = __dadd_rn(sum, __dmul_rn(v, v));
  }
  const float inv = rms_inv(sum, a.cols, a.eps);
  for (int64_t c = threadIdx.x; c < a.cols; c += kThreads) out[c] = rms_norm_value(x[c], inv, a.w[c]);
}

__global__ void elementwise_kernel(ElementwiseArgs a) {
  pdl_enter();
  const int64_t total = a.rows * a.cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / a.cols, c = i % a.cols;
    const float x = a.a[r * a.a_stride + c];
    float y;
    switch (a.op) {
      case ElementwiseOp::kAdd:
        y = __fadd_rn(x, a.b[r * a.b_stride + c]);
        break;
      case ElementwiseOp::kAddBias:
        y = __fadd_rn(x, a.b[c]);
        break;
      default:  // kSwiglu: silu(gate) * up, as g / (1 + exp(-g)) * u
        y = swiglu_value(x, a.b[r * a.b_stride + c]);
        break;
    }
    a.out[r * a.out_stride + c] = y;
  }
}

// A cache element as kv_write stores it (f16: round to nearest even; f32: as is).
__device__ __forceinline__ void store_cache(void* cache, DType dtype, int64_t index, float value) {
  if (dtype == DType::F16) {
    static_cast<__half*>(cache)[index] = __float2half_rn(value);
  } else {
    static_cast<float*>(cache)[index] = value;
  }
}

// One thread per (token, head, rotated pair); x2's heads follow x's. With a fused kv_write
// (a.kv.cols > 0) the index space goes on with one thread per (token, cache column): V, and the
// K columns rope leaves alone (head dims from n_rot on); the rotated K pairs go to the cache from
// the rope threads, so no thread reads an element another one writes.
__global__ void rope_kernel(RopeArgs a) {
  pdl_enter();
  const int half = a.n_rot / 2;
  const int heads = a.n_heads + a.n_heads2;
  const int64_t total = int64_t{a.n_tokens} * heads * half;
  const int64_t kv_total = int64_t{a.n_tokens} * a.kv.cols;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total + kv_total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    if (idx >= total) {
      const int64_t j = idx - total, t = j / a.kv.cols, c = j % a.kv.cols;
      const int64_t slot = a.kv.kv_slots[t];
      store_cache(a.kv.v_cache, a.kv.cache_dtype, slot * a.kv.v_cache_stride + c, a.kv.v[t * a.kv.v_stride + c]);
      if (c % a.head_dim >= 2 * half) {
        store_cache(a.kv.k_cache, a.kv.cache_dtype, slot * a.kv.k_cache_stride + c, a.kv.k[t * a.kv.k_stride + c]);
      }
      continue;
    }
    const int i = static_cast<int>(idx % half);
    const int hh = static_cast<int>((idx / half) % heads);
    const int t = static_cast<int>(idx / (int64_t{half} * heads));
    const bool second = hh >= a.n_heads;
    const int h = second ? hh - a.n_heads : hh;
    float* v = (second ? a.x2 + t * a.x2_stride : a.x + t * a.x_stride) + int64_t{h} * a.head_dim;
    const int i0 = rope_i0(i, half, a.neox != 0), i1 = rope_i1(i, half, a.neox != 0);
    float y0, y1;
    rope_rotate(a.positions[t], a.inv_freq[i], a.mscale, v[i0], v[i1], y0, y1);
    v[i0] = y0;
    v[i1] = y1;
    if (a.kv.cols > 0 && hh >= a.k_first_head) {
      const int64_t base = a.kv.kv_slots[t] * a.kv.k_cache_stride + int64_t{hh - a.k_first_head} * a.head_dim;
      store_cache(a.kv.k_cache, a.kv.cache_dtype, base + i0, y0);
      store_cache(a.kv.k_cache, a.kv.cache_dtype, base + i1, y1);
    }
  }
}

__global__ void kv_write_kernel(KvWriteArgs a) {
  pdl_enter();
  const int64_t total = int64_t{a.n_tokens} * a.cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / a.cols, c = i % a.cols;
    const int64_t slot = a.kv_slots[t];
    store_cache(a.k_cache, a.cache_dtype, slot * a.k_cache_stride + c, a.k[t * a.k_stride + c]);
    store_cache(a.v_cache, a.cache_dtype, slot * a.v_cache_stride + c, a.v[t * a.v_stride + c]);
  }
}

__global__ void gather_rows_kernel(GatherRowsArgs a) {
  pdl_enter();
  const int64_t total = int64_t{a.n_rows} * a.cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / a.cols, c = i % a.cols;
    a.out[r * a.out_stride + c] = a.x[a.rows[r] * a.x_stride + c];
  }
}

}  // namespace

void launch_embed(const EmbedArgs& a, const LaunchEnv& env) {
  if (a.n_tokens == 0) return;
  const unsigned slices = static_cast<unsigned>(std::min<int64_t>((a.cols + kThreads - 1) / kThreads, 64));
  launch_kernel(env, embed_kernel, dim3(static_cast<unsigned>(a.n_tokens), std::max(1u, slices)), kThreads, 0, a);
}

void launch_rms_norm(const RmsNormArgs& a, const LaunchEnv& env) {
  if (a.rows == 0) return;
  launch_kernel(env, rms_norm_kernel, static_cast<unsigned>(a.rows), kThreads, 0, a);
}

void launch_elementwise(const ElementwiseArgs& a, const LaunchEnv& env) {
  if (a.rows * a.cols == 0) return;
  launch_kernel(env, elementwise_kernel, grid_for(a.rows * a.cols), kThreads, 0, a);
}

void launch_rope(const RopeArgs& a, const LaunchEnv& env) {
  const int64_t total = int64_t{a.n_tokens} * ((a.n_heads + a.n_heads2) * (a.n_rot / 2) + a.kv.cols);
  if (total == 0) return;
  launch_kernel(env, rope_kernel, grid_for(total), kThreads, 0, a);
}

void launch_kv_write(const KvWriteArgs& a, const LaunchEnv& env) {
  if (a.n_tokens == 0) return;
  launch_kernel(env, kv_write_kernel, grid_for(a.n_tokens * a.cols), kThreads, 0, a);
}

void launch_gather_rows(const GatherRowsArgs& a, const LaunchEnv& env) {
  if (a.n_rows == 0) return;
  launch_kernel(env, gather_rows_kernel, grid_for(a.n_rows * a.cols), kThreads, 0, a);
}

}  // namespace tern::cuda
