// Checksum of KV block files: four interleaved CRC-32C lanes over 8-byte words.
//
// Why not one CRC: a single CRC chain is bound by the crc32 instruction's 3-cycle latency
// (~8 GB/s); four independent lanes run at the instruction's throughput, so verifying a restored
// block costs a fraction of reading it. Why CRC: it detects every burst error up to 32 bits per
// lane and all odd bit counts, which is what disk and truncation faults look like; it is not a
// defence against a deliberate forger (the cache directory is trusted to the server's user).
//
// The digest depends on how the bytes are split into update() calls only through the < 8-byte
// tails of each call; writer and reader feed the same segments (one per layer's K or V rows).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tern {

class KvChecksum {
 public:
  void update(const void* data, size_t bytes);
  uint64_t digest() const;

 private:
  uint32_t lanes_[4] = {~0u, ~0u, ~0u, ~0u};
  uint64_t n_words_ = 0;  // 8-byte words fed so far (picks the next word's lane)
  uint64_t n_bytes_ = 0;
};

uint64_t kv_checksum(const void* data, size_t bytes);

}  // namespace tern
