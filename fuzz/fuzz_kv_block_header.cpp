// libFuzzer target for the SSD tier's block-file header (untrusted bytes from disk). Two modes,
// chosen by the first input byte:
//   raw       the input is a header as read from a file: decoding never crashes or reads out of
//             bounds, whatever it holds;
//   resealed  the input is laid over a valid header's body and the header checksum recomputed, so
//             the field checks behind the checksum (identity, layout, key, hash chain, payload
//             size) are what the fuzzer explores.
// Properties (a failed one is a TERN_CHECK, which aborts, so libFuzzer records it):
//   - an accepted header re-encodes to exactly the bytes that were decoded;
//   - flipping any single byte of an accepted header makes it rejected.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "kv/kv_block_file.h"
#include "kv/kv_checksum.h"

namespace {

tern::KvTierIdentity identity() {
  tern::KvTierIdentity id;
  id.model_id = "fuzz-model";
  id.model_fingerprint = 0x1234567890abcdefull;
  id.tokenizer_fingerprint = 0x0fedcba987654321ull;
  id.dtype = tern::DType::F16;
  id.n_layers = 2;
  id.n_kv_heads = 2;
  id.head_dim = 8;
  id.block_tokens = 4;
  return id;
}

void check_accepted(const std::vector<uint8_t>& header, const tern::BlockFileHeader& h, const tern::KvTierIdentity& id) {
  const std::vector<uint8_t> again = tern::encode_block_header(id, h.key, h.payload_checksum);
  TERN_CHECK_MSG(again == header, "an accepted header does not re-encode to its own bytes");
  for (size_t i = 0; i < header.size(); ++i) {
    std::vector<uint8_t> flipped = header;
    flipped[i] ^= 0x01;
    TERN_CHECK_MSG(!tern::decode_block_header(flipped, id).is_ok(), "a one-byte change went unnoticed");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tern::KvTierIdentity id = identity();
  if (size == 0) return 0;
  const bool reseal = (data[0] & 1) != 0;
  std::vector<uint8_t> bytes(data + 1, data + size);
  if (!reseal) {
    auto h = tern::decode_block_header(bytes, id);
    if (h.is_ok()) check_accepted(std::vector<uint8_t>(bytes.begin(), bytes.begin() + tern::block_header_bytes(id.block_tokens)), h.value(), id);
    return 0;
  }
  // Start from a valid header (tokens 1..4 after a fixed root), overlay the input after the
  // fixed prefix (magic, version, header size), then reseal.
  tern::BlockKey key;
  key.root = tern::root_block_hash(7);
  key.parent = key.root;
  key.tokens = {1, 2, 3, 4};
  key.hash = tern::hash_block(key.parent, key.tokens);
  std::vector<uint8_t> header = tern::encode_block_header(id, key, 0x55);
  constexpr size_t kFixedPrefix = 16;
  for (size_t i = 0; i < bytes.size() && kFixedPrefix + i + 8 < header.size(); ++i) header[kFixedPrefix + i] = bytes[i];
  const uint64_t c = tern::kv_checksum(header.data(), header.size() - 8);
  for (int b = 0; b < 8; ++b) header[header.size() - 8 + b] = static_cast<uint8_t>(c >> (8 * b));
  auto h = tern::decode_block_header(header, id);
  if (h.is_ok()) check_accepted(header, h.value(), id);
  return 0;
}
