// The scatter / gather of the KV tiers' batched transfers (kv_transfer.h): a chunk of packed
// rows arrives in device staging by one DMA and this kernel puts every piece in place (or
// collects them before one DMA back). Replaces one cudaMemcpy2DAsync per piece: a KV block is
// 2 * n_layers pieces of 16 short rows, and ~100k tiny 2D DMAs ran at under 2 GB/s.
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"

namespace tern::cuda {
namespace {

constexpr int kThreads = 256;

// Moves the item as words of type Word: the flattened index e covers row e / row_words and
// word e % row_words, so short rows (a 64-dim f16 head is 128 bytes) still keep every thread busy.
template <typename Word>
__device__ __forceinline__ void copy_item(const PackedCopyItem& it, uint8_t* packed, bool scatter) {
  const uint32_t row_words = it.row_bytes / static_cast<uint32_t>(sizeof(Word));
  const uint64_t n = static_cast<uint64_t>(row_words) * it.rows;
  uint8_t* base = packed + it.packed_offset;
  for (uint64_t e = threadIdx.x; e < n; e += blockDim.x) {
    const uint64_t r = e / row_words, w = e - r * row_words;
    Word* s = reinterpret_cast<Word*>(it.strided + r * it.row_stride_bytes) + w;
    Word* p = reinterpret_cast<Word*>(base + r * it.row_bytes) + w;
    if (scatter) {
      *s = *p;
    } else {
      *p = *s;
    }
  }
}

__global__ void packed_copy_kernel(PackedCopyArgs a) {
  const PackedCopyItem it = a.items[blockIdx.x];
  // Every address the item touches is one of these plus multiples of the strides / widths.
  const uint64_t bits = reinterpret_cast<uintptr_t>(it.strided) | reinterpret_cast<uintptr_t>(a.packed) |
                        it.packed_offset | it.row_stride_bytes | it.row_bytes;
  const bool scatter = a.scatter != 0;
  if (bits % 16 == 0) {
    copy_item<uint4>(it, a.packed, scatter);
  } else if (bits % 4 == 0) {
    copy_item<uint32_t>(it, a.packed, scatter);
  } else {
    copy_item<uint8_t>(it, a.packed, scatter);
  }
}

}  // namespace

void launch_packed_copy(const PackedCopyArgs& a, const LaunchEnv& env) {
  if (a.n_items == 0) return;
  launch_kernel(env, packed_copy_kernel, dim3(static_cast<unsigned>(a.n_items)), dim3(kThreads), 0, a);
}

}  // namespace tern::cuda
