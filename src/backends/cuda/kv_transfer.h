// KvTransfer: the CUDA backend's many-piece copies between host memory and strided device rows
// (Backend::copy_from_host_n / copy_to_host_n: KV tier restores and spills, where a block is
// 2 * n_layers pieces of block_tokens rows each).
//
// A run is cut into chunks of about 16 MiB. Each chunk is packed into pinned staging as
// [PackedCopyItem descriptors | each piece's rows, packed, 16-byte aligned] and crosses PCIe as
// one DMA; one packed_copy kernel (kv_copy.cu) then scatters it into place (or, for spills,
// gathers it before one DMA back). Two pinned buffers alternate, so the host packs (or unpacks)
// one chunk while the other is on the wire. Restores never wait for the device: the stream
// orders them before any later kernel. TERN_CUDA_KV_COPY_2D=1 takes the older path, one
// cudaMemcpy2DAsync per piece, for A/B timing.
//
// Not graph-safe by design: it allocates and synchronizes; the backend flushes its step queue
// before each call and these run outside decode graphs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "backends/cuda/host_staging.h"
#include "ops/backend.h"

namespace tern::cuda {

class KvTransfer {
 public:
  explicit KvTransfer(cudaStream_t stream);
  ~KvTransfer();
  KvTransfer(const KvTransfer&) = delete;
  KvTransfer& operator=(const KvTransfer&) = delete;

  // Returns once every source has been read (the copies may still be in flight).
  void to_device(std::span<const Backend::HostToDevice> copies);
  // Returns once every destination holds its bytes.
  void to_host(std::span<const Backend::DeviceToHost> copies);

 private:
  void to_device_per_piece(std::span<const Backend::HostToDevice> copies);
  void to_host_per_piece(std::span<const Backend::DeviceToHost> copies);
  // Device staging of at least `bytes`; growing it waits for the stream first.
  uint8_t* device_staging(size_t bytes);

  cudaStream_t stream_;
  bool per_piece_dma_;  // TERN_CUDA_KV_COPY_2D=1
  // Rule for both directions: wait for done_[h] before writing staging_[h]; done_[h] is recorded
  // after the last DMA that reads or writes staging_[h].
  PinnedBuffer staging_[2];
  LazyEvent done_[2];
  uint8_t* device_ = nullptr;
  size_t device_bytes_ = 0;
};

}  // namespace tern::cuda
