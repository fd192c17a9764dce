#include "backends/cuda/device_buffer.h"

#include <cstdint>
#include <string>
#include <utility>

#include "backends/cuda/cuda_check.h"
#include "core/bytes.h"

namespace tern::cuda {
namespace {

// What an allocation that failed says: the size asked for, and what the device had free.
std::string out_of_memory_message(size_t bytes, cudaError_t err) {
  std::string m = "out of GPU memory: cannot allocate " + human_bytes(bytes);
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    m += " (" + human_bytes(free_bytes) + " free of " + human_bytes(total_bytes) + ")";
  } else {
    (void)cudaGetLastError();
  }
  if (err != cudaErrorMemoryAllocation) m += std::string(": ") + cudaGetErrorString(err);
  return m;
}

}  // namespace

DeviceBuffer::DeviceBuffer(size_t bytes, cudaStream_t stream, std::weak_ptr<StepQueue> queue)
    : bytes_(bytes), queue_(std::move(queue)) {
  // A little slack past the end: kernels may over-read up to one 16-byte word of a weight row.
  const cudaError_t err = bytes <= SIZE_MAX - 64 ? cudaMalloc(&data_, bytes + 64) : cudaErrorMemoryAllocation;
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw OutOfMemory(out_of_memory_message(bytes, err));
  }
  TERN_CUDA_CHECK(cudaMemsetAsync(data_, 0, bytes + 64, stream));
}

DeviceBuffer::~DeviceBuffer() {
  if (auto q = queue_.lock()) q->flush();
  cudaFree(data_);  // synchronizes with the device; errors at teardown are not actionable
}

}  // namespace tern::cuda
