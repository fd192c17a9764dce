// Page-locked host staging and lazily created events, shared by the backend's transfers.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>

#include "backends/cuda/cuda_check.h"

namespace tern::cuda {

// Page-locked host memory that only grows (staging for transfers).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { cudaFreeHost(data_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* reserve(size_t bytes) {
    if (bytes > bytes_) {
      TERN_CUDA_CHECK(cudaFreeHost(data_));
      data_ = nullptr;
      bytes_ = std::max(bytes, bytes_ * 2);
      TERN_CUDA_CHECK(cudaMallocHost(&data_, bytes_));
    }
    return data_;
  }
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// A CUDA event (timing off) created on first use; never recorded = already complete.
class LazyEvent {
 public:
  LazyEvent() = default;
  ~LazyEvent() {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }
  LazyEvent(const LazyEvent&) = delete;
  LazyEvent& operator=(const LazyEvent&) = delete;
  cudaEvent_t get() {
    if (event_ == nullptr) TERN_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    return event_;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace tern::cuda
