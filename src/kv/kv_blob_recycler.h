// Payload buffers of blocks copied off the device, reused. A spill, or a write-behind copy, takes
// a buffer; the blob's last reference (a restore, a finished SSD write, a host eviction) hands it
// back. Why: a fresh block buffer costs its page faults and zero fill on the engine thread (about
// 1 ms for a 368 KB block on the loaded dev VM) and its free an munmap (about 0.1 ms), which a
// spill under pressure, a write-behind copy per registered block and a long restore each paid
// per block. At most max_idle_bytes of idle buffers are kept (on top of the host tier's cap).
// Thread-safe: the SSD writer thread drops blob references too.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "kv/kv_host_tier.h"

namespace tern {

class KvBlobRecycler : public std::enable_shared_from_this<KvBlobRecycler> {
 public:
  static std::shared_ptr<KvBlobRecycler> create(uint64_t max_idle_bytes);

  // A blob for `key` with payload_bytes of payload, whose contents are unspecified (an idle
  // buffer's old bytes, or zeros).
  std::shared_ptr<KvBlockBlob> make(const BlockKey& key, size_t payload_bytes);
  uint64_t idle_bytes() const;
  uint64_t reused() const;  // blobs made on an idle buffer

 private:
  explicit KvBlobRecycler(uint64_t max_idle_bytes) : max_idle_bytes_(max_idle_bytes) {}
  void give_back(std::vector<uint8_t>&& payload);

  const uint64_t max_idle_bytes_;
  mutable std::mutex mu_;
  std::vector<std::vector<uint8_t>> idle_;
  uint64_t idle_bytes_ = 0;
  uint64_t reused_ = 0;
};

}  // namespace tern
