// KvTransfer (kv_transfer.h): chunking, the staging layout, and the two directions.
#include "backends/cuda/kv_transfer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels.h"
#include "core/check.h"

namespace tern::cuda {
namespace {

// Copies are staged in chunks of about this size: large enough that a chunk's DMA dwarfs the
// launch overheads, small enough that pinned staging stays modest whatever the run length.
constexpr size_t kTransferChunkBytes = size_t{16} << 20;
// A piece is split into items of about this many bytes (whole rows, at least one), one thread
// block each: a KV piece (16 rows of one head group) is a few KiB, but a caller may pass one
// large tensor, which must not fall to a single block.
constexpr size_t kItemBytes = size_t{32} << 10;
// Payload alignment in staging, so 16-byte words apply whenever the device side allows them.
constexpr size_t kPayloadAlign = 16;

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Bytes of t's rows packed without stride padding (what a host side of a copy holds).
size_t packed_bytes(const Tensor& t) { return row_bytes(t.dtype, t.cols) * static_cast<size_t>(t.rows); }

const Tensor& tensor_of(const Backend::HostToDevice& c) { return c.dst; }
const Tensor& tensor_of(const Backend::DeviceToHost& c) { return c.src; }

// End of the run of copies starting at `first` that fits one chunk (at least one copy).
template <typename Copy>
size_t chunk_end(std::span<const Copy> copies, size_t first) {
  size_t end = first, bytes = 0;
  while (end < copies.size()) {
    const size_t b = packed_bytes(tensor_of(copies[end]));
    if (end > first && bytes + b > kTransferChunkBytes) break;
    bytes += b;
    ++end;
  }
  return end;
}

size_t rows_per_item(size_t width) { return std::max<size_t>(1, kItemBytes / width); }

// Where a chunk's parts lie in staging (host and device alike).
struct ChunkLayout {
  size_t n_items = 0;
  size_t items_bytes = 0;  // descriptors, from offset 0
  size_t total_bytes = 0;  // descriptors + payload
};

template <typename Copy>
ChunkLayout measure(std::span<const Copy> copies, size_t first, size_t end) {
  ChunkLayout l;
  size_t payload = 0;
  for (size_t i = first; i < end; ++i) {
    const Tensor& t = tensor_of(copies[i]);
    TERN_CHECK_MSG(t.device == Device::kCuda, "copy_*_host_n: the device side must be CUDA memory");
    const size_t width = row_bytes(t.dtype, t.cols), rows = static_cast<size_t>(t.rows);
    if (width == 0 || rows == 0) continue;
    const size_t per = rows_per_item(width);
    l.n_items += (rows + per - 1) / per;
    payload += align_up(width * rows, kPayloadAlign);
  }
  l.items_bytes = align_up(l.n_items * sizeof(PackedCopyItem), kPayloadAlign);
  l.total_bytes = l.items_bytes + payload;
  return l;
}

// Calls fn(i, payload offset) for each non-empty copy of the chunk, in staging order.
template <typename Copy, typename Fn>
void for_each_payload(std::span<const Copy> copies, size_t first, size_t end, const ChunkLayout& l, Fn fn) {
  size_t offset = l.items_bytes;
  for (size_t i = first; i < end; ++i) {
    const size_t bytes = packed_bytes(tensor_of(copies[i]));
    if (bytes == 0) continue;
    fn(i, offset);
    offset += align_up(bytes, kPayloadAlign);
  }
}

// Writes the chunk's descriptors at the front of `host`.
template <typename Copy>
void write_items(std::span<const Copy> copies, size_t first, size_t end, const ChunkLayout& l, uint8_t* host) {
  auto* item = reinterpret_cast<PackedCopyItem*>(host);
  for_each_payload(copies, first, end, l, [&](size_t i, size_t offset) {
    const Tensor& t = tensor_of(copies[i]);
    const size_t width = row_bytes(t.dtype, t.cols), rows = static_cast<size_t>(t.rows), per = rows_per_item(width);
    for (size_t r = 0; r < rows; r += per) {
      PackedCopyItem& it = *item++;
      it.strided = static_cast<uint8_t*>(t.data) + r * t.row_stride;
      it.packed_offset = offset + r * width;
      it.row_stride_bytes = t.row_stride;
      it.row_bytes = static_cast<uint32_t>(width);
      it.rows = static_cast<uint32_t>(std::min(per, rows - r));
    }
  });
  TERN_CHECK(item == reinterpret_cast<PackedCopyItem*>(host) + l.n_items);
}

bool per_piece_dma_requested() {
  const char* env = std::getenv("TERN_CUDA_KV_COPY_2D");
  return env != nullptr && std::strcmp(env, "1") == 0;
}

}  // namespace

KvTransfer::KvTransfer(cudaStream_t stream) : stream_(stream), per_piece_dma_(per_piece_dma_requested()) {}

KvTransfer::~KvTransfer() {
  if (device_ != nullptr) cudaFree(device_);  // synchronizes; errors at teardown are not actionable
}

uint8_t* KvTransfer::device_staging(size_t bytes) {
  if (bytes > device_bytes_) {
    TERN_CUDA_CHECK(cudaStreamSynchronize(stream_));  // earlier chunks may still use the old one
    TERN_CUDA_CHECK(cudaFree(device_));
    device_ = nullptr;
    device_bytes_ = std::max(bytes, device_bytes_ * 2);
    void* p = nullptr;
    TERN_CUDA_CHECK(cudaMalloc(&p, device_bytes_));
    device_ = static_cast<uint8_t*>(p);
  }
  return device_;
}

void KvTransfer::to_device(std::span<const Backend::HostToDevice> copies) {
  if (per_piece_dma_) return to_device_per_piece(copies);
  int half = 0;
  for (size_t first = 0; first < copies.size();) {
    const size_t end = chunk_end(copies, first);
    const ChunkLayout l = measure(copies, first, end);
    TERN_CUDA_CHECK(cudaEventSynchronize(done_[half].get()));  // this buffer's last chunk has left
    auto* host = static_cast<uint8_t*>(staging_[half].reserve(l.total_bytes));
    write_items(copies, first, end, l, host);
    for_each_payload(copies, first, end, l, [&](size_t i, size_t offset) {
      std::memcpy(host + offset, copies[i].src, packed_bytes(copies[i].dst));
    });
    uint8_t* dev = device_staging(l.total_bytes);
    // Same stream: this DMA starts after the previous chunk's scatter has read the device staging.
    TERN_CUDA_CHECK(cudaMemcpyAsync(dev, host, l.total_bytes, cudaMemcpyHostToDevice, stream_));
    TERN_CUDA_CHECK(cudaEventRecord(done_[half].get(), stream_));
    launch_packed_copy({reinterpret_cast<const PackedCopyItem*>(dev), dev, static_cast<int>(l.n_items), 1},
                       {stream_, false});
    half ^= 1;
    first = end;
  }
}

void KvTransfer::to_host(std::span<const Backend::DeviceToHost> copies) {
  if (per_piece_dma_) return to_host_per_piece(copies);
  // The previous chunk is unpacked while this one is gathered and on the wire.
  struct Pending {
    size_t first, end;
    int half;
    ChunkLayout layout;
  };
  auto unpack = [&](const Pending& p) {
    TERN_CUDA_CHECK(cudaEventSynchronize(done_[p.half].get()));
    const auto* host = static_cast<const uint8_t*>(staging_[p.half].data());
    for_each_payload(copies, p.first, p.end, p.layout, [&](size_t i, size_t offset) {
      std::memcpy(copies[i].dst, host + offset, packed_bytes(copies[i].src));
    });
  };
  bool has_pending = false;
  Pending pending{};
  int half = 0;
  for (size_t first = 0; first < copies.size();) {
    const size_t end = chunk_end(copies, first);
    const ChunkLayout l = measure(copies, first, end);
    TERN_CUDA_CHECK(cudaEventSynchronize(done_[half].get()));
    auto* host = static_cast<uint8_t*>(staging_[half].reserve(l.total_bytes));
    write_items(copies, first, end, l, host);
    uint8_t* dev = device_staging(l.total_bytes);
    TERN_CUDA_CHECK(cudaMemcpyAsync(dev, host, l.items_bytes, cudaMemcpyHostToDevice, stream_));
    launch_packed_copy({reinterpret_cast<const PackedCopyItem*>(dev), dev, static_cast<int>(l.n_items), 0},
                       {stream_, false});
    TERN_CUDA_CHECK(cudaMemcpyAsync(host + l.items_bytes, dev + l.items_bytes, l.total_bytes - l.items_bytes,
                                    cudaMemcpyDeviceToHost, stream_));
    TERN_CUDA_CHECK(cudaEventRecord(done_[half].get(), stream_));
    if (has_pending) unpack(pending);
    pending = {first, end, half, l};
    has_pending = true;
    half ^= 1;
    first = end;
  }
  if (has_pending) unpack(pending);
}

// The older path: the same chunks, one 2D DMA per piece.
void KvTransfer::to_device_per_piece(std::span<const Backend::HostToDevice> copies) {
  int half = 0;
  for (size_t first = 0; first < copies.size();) {
    const size_t end = chunk_end(copies, first);
    size_t bytes = 0;
    for (size_t i = first; i < end; ++i) bytes += packed_bytes(copies[i].dst);
    TERN_CUDA_CHECK(cudaEventSynchronize(done_[half].get()));
    auto* staging = static_cast<uint8_t*>(staging_[half].reserve(bytes));
    for (size_t i = first; i < end; ++i) {
      const Tensor& d = copies[i].dst;
      TERN_CHECK(d.device == Device::kCuda);
      const size_t width = row_bytes(d.dtype, d.cols);
      std::memcpy(staging, copies[i].src, packed_bytes(d));
      TERN_CUDA_CHECK(cudaMemcpy2DAsync(d.data, d.row_stride, staging, width, width, static_cast<size_t>(d.rows),
                                        cudaMemcpyHostToDevice, stream_));
      staging += packed_bytes(d);
    }
    TERN_CUDA_CHECK(cudaEventRecord(done_[half].get(), stream_));
    half ^= 1;
    first = end;
  }
}

void KvTransfer::to_host_per_piece(std::span<const Backend::DeviceToHost> copies) {
  TERN_CUDA_CHECK(cudaEventSynchronize(done_[0].get()));
  for (size_t first = 0; first < copies.size();) {
    const size_t end = chunk_end(copies, first);
    size_t bytes = 0;
    for (size_t i = first; i < end; ++i) bytes += packed_bytes(copies[i].src);
    auto* staging = static_cast<uint8_t*>(staging_[0].reserve(bytes));
    uint8_t* p = staging;
    for (size_t i = first; i < end; ++i) {
      const Tensor& s = copies[i].src;
      TERN_CHECK(s.device == Device::kCuda);
      const size_t width = row_bytes(s.dtype, s.cols);
      TERN_CUDA_CHECK(cudaMemcpy2DAsync(p, width, s.data, s.row_stride, width, static_cast<size_t>(s.rows),
                                        cudaMemcpyDeviceToHost, stream_));
      p += packed_bytes(s);
    }
    TERN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    p = staging;
    for (size_t i = first; i < end; ++i) {
      std::memcpy(copies[i].dst, p, packed_bytes(copies[i].src));
      p += packed_bytes(copies[i].src);
    }
    first = end;
  }
}

}  // namespace tern::cuda
