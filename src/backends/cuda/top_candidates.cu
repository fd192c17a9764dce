// Sampling candidates on the device: each logit row's best `count` entries in the host sampler's
// order (core/top_candidates.h, bit for bit), its NaN flags and, per row with a temperature, the
// softmax normalizer, so that a few KiB per row cross to the host instead of the vocabulary.
//
// Every element becomes the 64-bit key of core/top_candidates.h (float order in the high word,
// 0xffffffff - id in the low word; NaN lowest); the top keys are exact and order-free, so the
// result does not depend on the grid. Three launches:
//   1. grid (parts, rows): each block keeps the top `cap` keys (cap = count rounded up to a power
//      of two) of its share of the row in shared memory, a chunk of 4096 elements at a time: the
//      keys above the current cap-th key are compacted, sorted (bitonic) and merged into the list
//      (elementwise max of the list and the reversed chunk is bitonic, then one bitonic merge).
//      Past the first chunk few elements of a real logit row beat the cap-th key, so most chunks
//      cost one read and one compare per element.
//   2. grid (rows): the same loop over the parts' lists gives the row's top keys; writes ids,
//      the logits at them (re-read: the original bits, -0 included) and the flags.
//   3. grid (parts, rows), rows with a temperature only: each block sums exp(x / T - max / T)
//      over its share as the host sampler computes each term (IEEE division and subtraction,
//      expf: within 2 ulp), in double; the host adds the parts.
#include <cstdint>

#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"
#include "core/top_candidates.h"

namespace tern::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kPerThread = 8;
constexpr int kChunk = kThreads * kPerThread;  // elements per pass of a block
constexpr int kSumThreads = 256;
static_assert(kMaxCandidates <= kChunk, "a chunk must hold a whole list");

using Key = unsigned long long;

// core/top_candidates.h candidate_key, on the device.
__device__ __forceinline__ Key candidate_key_dev(float v, int64_t id) {
  uint32_t ordered = 0;
  if (v == v) {
    const uint32_t bits = v == 0.0f ? 0u : __float_as_uint(v);
    ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  }
  return (static_cast<Key>(ordered) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}

struct TopShared {
  Key top[kMaxCandidates];  // the best keys so far, descending; 0 = empty (below every key)
  Key buf[kChunk];          // this chunk's keys above top[cap - 1]
  int count;
};

__device__ __forceinline__ int next_pow2(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

// Sorts buf[0, p) descending (p a power of two). Ends synchronized.
__device__ void bitonic_sort_desc(Key* buf, int p) {
  for (int k = 2; k <= p; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int t = threadIdx.x; t < p / 2; t += kThreads) {
        const int i = 2 * t - (t & (j - 1));  // bit j of i clear; its partner is i + j
        const Key a = buf[i], b = buf[i + j];
        const bool desc = (i & k) == 0;
        if (desc ? a < b : a > b) {
          buf[i] = b;
          buf[i + j] = a;
        }
      }
      __syncthreads();
    }
  }
}

// Sorts a bitonic top[0, cap) descending. Ends synchronized.
__device__ void bitonic_merge_desc(Key* top, int cap) {
  for (int j = cap >> 1; j > 0; j >>= 1) {
    for (int t = threadIdx.x; t < cap / 2; t += kThreads) {
      const int i = 2 * t - (t & (j - 1));
      const Key a = top[i], b = top[i + j];
      if (a < b) {
        top[i] = b;
        top[i + j] = a;
      }
    }
    __syncthreads();
  }
}

__device__ void top_init(TopShared& s, int cap) {
  for (int i = threadIdx.x; i < cap; i += kThreads) s.top[i] = 0;
  if (threadIdx.x == 0) s.count = 0;
  __syncthreads();
}

// Merges this thread's keys (0 = none) into s.top[0, cap). Called by every thread; ends
// synchronized with s.count == 0.
__device__ void top_absorb(const Key (&k)[kPerThread], TopShared& s, int cap) {
  const Key threshold = s.top[cap - 1];
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    if (k[e] > threshold) s.buf[atomicAdd(&s.count, 1)] = k[e];
  }
  __syncthreads();
  const int n = s.count;
  __syncthreads();  // everyone has read the count before it is reset
  if (n == 0) return;
  if (threadIdx.x == 0) s.count = 0;
  const int p = max(cap, next_pow2(n));  // <= kChunk
  for (int i = n + threadIdx.x; i < p; i += kThreads) s.buf[i] = 0;
  __syncthreads();
  bitonic_sort_desc(s.buf, p);
  // The top cap of the union: max(list[i], chunk[cap - 1 - i]) is bitonic and holds them.
  for (int i = threadIdx.x; i < cap; i += kThreads) {
    const Key a = s.top[i], b = s.buf[cap - 1 - i];
    s.top[i] = a > b ? a : b;
  }
  __syncthreads();
  bitonic_merge_desc(s.top, cap);
}

__device__ __forceinline__ int64_t part_begin(const TopCandidatesArgs& a, int part) { return part * a.part_cols; }
__device__ __forceinline__ int64_t part_end(const TopCandidatesArgs& a, int part) {
  const int64_t e = (part + int64_t{1}) * a.part_cols;
  return e < a.cols ? e : a.cols;
}

__global__ void __launch_bounds__(kThreads) top_part_kernel(TopCandidatesArgs a) {
  pdl_enter();
  __shared__ TopShared s;
  const int r = blockIdx.y, part = blockIdx.x;
  const float* x = a.x + r * a.x_stride;
  const int64_t begin = part_begin(a, part), end = part_end(a, part);
  top_init(s, a.cap);
  int nan = 0;
  for (int64_t base = begin; base < end; base += kChunk) {
    Key k[kPerThread];
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) {
      const int64_t c = base + e * kThreads + threadIdx.x;
      k[e] = 0;
      if (c < end) {
        const float v = x[c];
        nan |= v != v;
        k[e] = candidate_key_dev(v, c);
      }
    }
    top_absorb(k, s, a.cap);
  }
  nan = __syncthreads_or(nan);
  Key* out = a.partial_keys + (int64_t{r} * a.parts + part) * a.cap;
  for (int i = threadIdx.x; i < a.cap; i += kThreads) out[i] = s.top[i];
  if (threadIdx.x == 0) a.partial_flags[int64_t{r} * a.parts + part] = nan ? kRowHasNan : 0u;
}

__global__ void __launch_bounds__(kThreads) top_merge_kernel(TopCandidatesArgs a) {
  pdl_enter();
  __shared__ TopShared s;
  const int r = blockIdx.x;
  const Key* keys = a.partial_keys + int64_t{r} * a.parts * a.cap;
  const int total = a.parts * a.cap;
  top_init(s, a.cap);
  for (int base = 0; base < total; base += kChunk) {
    Key k[kPerThread];
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) {
      const int i = base + e * kThreads + threadIdx.x;
      k[e] = i < total ? keys[i] : 0;
    }
    top_absorb(k, s, a.cap);
  }
  const float* x = a.x + r * a.x_stride;
  for (int i = threadIdx.x; i < a.count; i += kThreads) {
    const int32_t id = static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(s.top[i]));
    a.ids[int64_t{r} * a.count + i] = id;
    a.logits[int64_t{r} * a.count + i] = x[id];
  }
  if (threadIdx.x == 0) {
    uint32_t flags = 0;
    for (int p = 0; p < a.parts; ++p) flags |= a.partial_flags[int64_t{r} * a.parts + p];
    const float first = x[0];
    if (first != first) flags |= kFirstIsNan;
    a.flags[r] = flags;
  }
}

__global__ void __launch_bounds__(kSumThreads) top_exp_sum_kernel(TopCandidatesArgs a) {
  pdl_enter();
  const int r = blockIdx.y, part = blockIdx.x;
  const float t = a.temperatures[r];
  const float* x = a.x + r * a.x_stride;
  double sum = 0.0;
  if (t > 0.0f) {
    // The host sampler: l /= T; then exp(l - max) with max the largest scaled logit, which is
    // the best candidate's (division by T > 0 is monotone).
    const float mx = __fdiv_rn(x[a.ids[int64_t{r} * a.count]], t);
    for (int64_t c = part_begin(a, part) + threadIdx.x; c < part_end(a, part); c += kSumThreads) {
      sum += static_cast<double>(expf(__fsub_rn(__fdiv_rn(x[c], t), mx)));
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  __shared__ double warp_sum[kSumThreads / 32];
  if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < kSumThreads / 32; ++w) total += warp_sum[w];
    a.exp_partials[int64_t{r} * a.parts + part] = total;
  }
}

}  // namespace

TopCandidatesShape top_candidates_shape(int64_t cols, int count) {
  TopCandidatesShape s;
  s.cap = 1;
  while (s.cap < count) s.cap <<= 1;
  // About two chunks per part, at most 64 parts (the merge reads parts * cap keys).
  int64_t parts = (cols + 2 * kChunk - 1) / (2 * kChunk);
  parts = parts < 1 ? 1 : (parts > 64 ? 64 : parts);
  int64_t part_cols = (cols + parts - 1) / parts;
  part_cols = (part_cols + kChunk - 1) / kChunk * kChunk;
  s.part_cols = part_cols;
  s.parts = static_cast<int>((cols + part_cols - 1) / part_cols);
  return s;
}

void launch_top_candidates(const TopCandidatesArgs& a, const LaunchEnv& env) {
  if (a.rows == 0) return;
  const dim3 per_part(static_cast<unsigned>(a.parts), static_cast<unsigned>(a.rows));
  launch_kernel(env, top_part_kernel, per_part, kThreads, 0, a);
  launch_kernel(env, top_merge_kernel, static_cast<unsigned>(a.rows), kThreads, 0, a);
  if (a.temperatures != nullptr) launch_kernel(env, top_exp_sum_kernel, per_part, kSumThreads, 0, a);
}

}  // namespace tern::cuda
