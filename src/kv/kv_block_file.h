// The on-disk unit of the SSD tier: one file per full KV block, named by its chained hash.
//
//   header  magic "TERNKVB1", version, header size, model id, model fingerprint, tokenizer
//           fingerprint, KV dtype and layout (layers, kv heads, head dim, block tokens, segment
//           order), the block's key (hash, parent, chain root = namespace, first position, token
//           ids), payload size, payload checksum, then a checksum of all the header bytes before it
//   payload for each layer: K rows then V rows of the block, [block_tokens, n_kv_heads * head_dim]
//
// All integers little-endian. Why per block: a block is the pool's unit of sharing, so a file
// serves exactly the prompts whose chain passes through it (nothing to trim, nothing to supersede:
// a prefix shared by many conversations is stored once), and LRU works at the same grain as the
// device pool's. Decoding validates everything against what the reader expects and names the
// first field that differs.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "kv/block_key.h"

namespace tern {

// What a tier's blocks belong to. Two processes may share files only if all of it is equal.
struct KvTierIdentity {
  std::string model_id;             // human-readable (file stem); at most 63 bytes are stored
  uint64_t model_fingerprint = 0;   // architecture, hyperparameters, tensor table
  uint64_t tokenizer_fingerprint = 0;
  DType dtype = DType::F16;
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_tokens = 0;

  // Payload bytes of one block: K and V rows of every layer.
  uint64_t block_payload_bytes() const;
  // Bytes of one K (or V) segment: block_tokens rows of one layer.
  uint64_t segment_bytes() const;
  // A short hex digest of all of the above: the tier's subdirectory name.
  std::string directory_name() const;
};

struct BlockFileHeader {
  BlockKey key;
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;
};

constexpr uint32_t kBlockFileVersion = 1;
constexpr size_t kModelIdBytes = 64;

// Size of the header for blocks of `block_tokens` tokens (the payload starts there).
size_t block_header_bytes(int block_tokens);

std::vector<uint8_t> encode_block_header(const KvTierIdentity& identity, const BlockKey& key,
                                         uint64_t payload_checksum);

// Parses a header and checks it against `expected` (magic, version, header checksum, model id,
// fingerprints, dtype, layout, payload size, and that the key's hash is the hash of its parent
// and tokens). The error names the first mismatch: "model fingerprint: expected ..., found ...".
Result<BlockFileHeader> decode_block_header(std::span<const uint8_t> bytes, const KvTierIdentity& expected);

}  // namespace tern
