// Device memory for the CUDA backend's Buffers: zero-filled on the backend's stream, a little
// slack past the end, and an out-of-memory error that names the size and what was free.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>

#include "backends/cuda/step_queue.h"
#include "ops/backend.h"

namespace tern::cuda {

// Device memory. Freeing first flushes the queue: pending (not yet launched) records may still
// point into this allocation.
class DeviceBuffer final : public Buffer {
 public:
  // Zero-filled like the CPU backend's buffers. The fill is ordered on the backend's stream,
  // which does not synchronize with the legacy default stream.
  // Throws OutOfMemory naming the size and the device's free memory.
  DeviceBuffer(size_t bytes, cudaStream_t stream, std::weak_ptr<StepQueue> queue);
  ~DeviceBuffer() override;
  void* data() const override { return data_; }
  size_t bytes() const override { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  std::weak_ptr<StepQueue> queue_;
};

}  // namespace tern::cuda
