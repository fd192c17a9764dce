#include "kv/kv_block_file.h"

#include <cstdio>
#include <cstring>

#include "kv/kv_checksum.h"

namespace tern {
namespace {

constexpr char kMagic[8] = {'T', 'E', 'R', 'N', 'K', 'V', 'B', '1'};
constexpr uint32_t kLayoutLayerKThenV = 1;  // segment order: layer 0 K, layer 0 V, layer 1 K, ...

// Fixed fields before the token ids: magic, version, header size, model id, 2 fingerprints,
// 6 layout words, 3 hashes, first position, token count.
constexpr size_t kFixedBytes = 8 + 4 + 4 + kModelIdBytes + 8 + 8 + 6 * 4 + 3 * 8 + 4 + 4;
// After the token ids: payload size, payload checksum, header checksum.
constexpr size_t kTrailerBytes = 3 * 8;

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>& out) : out_(out) {}
  void bytes(const void* p, size_t n) { out_.insert(out_.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n); }
  void u32(uint32_t v) { for (int i = 0; i < 4; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i))); }
  void u64(uint64_t v) { for (int i = 0; i < 8; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i))); }

 private:
  std::vector<uint8_t>& out_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  const uint8_t* bytes(size_t n) {
    TERN_CHECK(pos_ + n <= in_.size());  // callers check the total size first
    const uint8_t* p = in_.data() + pos_;
    pos_ += n;
    return p;
  }
  uint32_t u32() {
    const uint8_t* p = bytes(4);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{p[i]} << (8 * i);
    return v;
  }
  uint64_t u64() {
    const uint8_t* p = bytes(8);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
    return v;
  }
  size_t pos() const { return pos_; }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

Status mismatch(const char* field, const std::string& expected, const std::string& found) {
  return error(std::string(field) + ": expected " + expected + ", found " + found);
}

}  // namespace

uint64_t KvTierIdentity::segment_bytes() const {
  return row_bytes(dtype, int64_t{n_kv_heads} * head_dim) * static_cast<uint64_t>(block_tokens);
}

uint64_t KvTierIdentity::block_payload_bytes() const { return 2 * static_cast<uint64_t>(n_layers) * segment_bytes(); }

std::string KvTierIdentity::directory_name() const {
  std::vector<uint8_t> bytes;
  Writer w(bytes);
  w.bytes(model_id.data(), model_id.size());
  w.u64(model_fingerprint);
  w.u64(tokenizer_fingerprint);
  for (int v : {static_cast<int>(dtype), n_layers, n_kv_heads, head_dim, block_tokens}) w.u32(static_cast<uint32_t>(v));
  w.u32(kBlockFileVersion);
  return hex(kv_checksum(bytes.data(), bytes.size()));
}

size_t block_header_bytes(int block_tokens) { return kFixedBytes + 4 * static_cast<size_t>(block_tokens) + kTrailerBytes; }

std::vector<uint8_t> encode_block_header(const KvTierIdentity& id, const BlockKey& key, uint64_t payload_checksum) {
  TERN_CHECK(static_cast<int>(key.tokens.size()) == id.block_tokens);
  std::vector<uint8_t> out;
  out.reserve(block_header_bytes(id.block_tokens));
  Writer w(out);
  w.bytes(kMagic, sizeof kMagic);
  w.u32(kBlockFileVersion);
  w.u32(static_cast<uint32_t>(block_header_bytes(id.block_tokens)));
  char model_id[kModelIdBytes] = {};
  std::memcpy(model_id, id.model_id.data(), std::min(id.model_id.size(), kModelIdBytes - 1));
  w.bytes(model_id, kModelIdBytes);
  w.u64(id.model_fingerprint);
  w.u64(id.tokenizer_fingerprint);
  for (uint32_t v : {static_cast<uint32_t>(id.dtype), static_cast<uint32_t>(id.n_layers), static_cast<uint32_t>(id.n_kv_heads),
                     static_cast<uint32_t>(id.head_dim), static_cast<uint32_t>(id.block_tokens), kLayoutLayerKThenV})
    w.u32(v);
  w.u64(key.hash);
  w.u64(key.parent);
  w.u64(key.root);
  w.u32(static_cast<uint32_t>(key.first_position));
  w.u32(static_cast<uint32_t>(key.tokens.size()));
  for (int32_t t : key.tokens) w.u32(static_cast<uint32_t>(t));
  w.u64(id.block_payload_bytes());
  w.u64(payload_checksum);
  w.u64(kv_checksum(out.data(), out.size()));
  TERN_CHECK(out.size() == block_header_bytes(id.block_tokens));
  return out;
}

Result<BlockFileHeader> decode_block_header(std::span<const uint8_t> bytes, const KvTierIdentity& expected) {
  const size_t want = block_header_bytes(expected.block_tokens);
  if (bytes.size() < 16) return mismatch("header size", std::to_string(want) + " bytes", std::to_string(bytes.size()) + " bytes");
  Reader r(bytes);
  if (std::memcmp(r.bytes(8), kMagic, 8) != 0) return error("magic: expected TERNKVB1, found other bytes (not a tern KV block file)");
  if (uint32_t v = r.u32(); v != kBlockFileVersion) return mismatch("version", std::to_string(kBlockFileVersion), std::to_string(v));
  if (uint32_t n = r.u32(); n != want) return mismatch("header size", std::to_string(want), std::to_string(n));
  if (bytes.size() < want) return mismatch("header size", std::to_string(want) + " bytes", std::to_string(bytes.size()) + " bytes (truncated)");
  // The checksum first: a damaged header must be reported as damage, not as a foreign model.
  const uint64_t stored = [&] {
    Reader t(bytes.subspan(want - 8, 8));
    return t.u64();
  }();
  if (uint64_t c = kv_checksum(bytes.data(), want - 8); c != stored) return mismatch("header checksum", hex(stored), hex(c));

  const char* model_id = reinterpret_cast<const char*>(r.bytes(kModelIdBytes));
  const std::string found_id(model_id, strnlen(model_id, kModelIdBytes));
  // The field is the id, NUL, zeros: anything else is not a header this code wrote (one
  // encoding per header, so a file and its re-encoding agree byte for byte).
  if (found_id.size() == kModelIdBytes) return mismatch("model id", std::string("a NUL-terminated string"), std::string("64 bytes without a NUL"));
  for (size_t i = found_id.size(); i < kModelIdBytes; ++i)
    if (model_id[i] != 0) return mismatch("model id padding", std::string("zero bytes"), "a non-zero byte at offset " + std::to_string(i));
  const std::string want_id = expected.model_id.substr(0, kModelIdBytes - 1);
  if (found_id != want_id) return mismatch("model id", "'" + want_id + "'", "'" + found_id + "'");
  if (uint64_t v = r.u64(); v != expected.model_fingerprint) return mismatch("model fingerprint", hex(expected.model_fingerprint), hex(v));
  if (uint64_t v = r.u64(); v != expected.tokenizer_fingerprint)
    return mismatch("tokenizer fingerprint", hex(expected.tokenizer_fingerprint), hex(v));
  const std::pair<const char*, uint32_t> layout[] = {
      {"kv dtype", static_cast<uint32_t>(expected.dtype)}, {"n_layers", static_cast<uint32_t>(expected.n_layers)},
      {"n_kv_heads", static_cast<uint32_t>(expected.n_kv_heads)}, {"head_dim", static_cast<uint32_t>(expected.head_dim)},
      {"block_tokens", static_cast<uint32_t>(expected.block_tokens)}, {"kv layout", kLayoutLayerKThenV}};
  for (const auto& [field, want_value] : layout)
    if (uint32_t v = r.u32(); v != want_value) return mismatch(field, std::to_string(want_value), std::to_string(v));

  BlockFileHeader h;
  h.key.hash = r.u64();
  h.key.parent = r.u64();
  h.key.root = r.u64();
  h.key.first_position = static_cast<int32_t>(r.u32());
  if (uint32_t n = r.u32(); n != static_cast<uint32_t>(expected.block_tokens))
    return mismatch("token count", std::to_string(expected.block_tokens), std::to_string(n));
  h.key.tokens.resize(expected.block_tokens);
  for (int32_t& t : h.key.tokens) t = static_cast<int32_t>(r.u32());
  if (h.key.first_position < 0 || h.key.first_position % expected.block_tokens != 0)
    return mismatch("first position", "a non-negative multiple of " + std::to_string(expected.block_tokens),
                    std::to_string(h.key.first_position));
  if (BlockHash c = hash_block(h.key.parent, h.key.tokens); c != h.key.hash)
    return mismatch("block hash", hex(c) + " (of its parent and tokens)", hex(h.key.hash));
  h.payload_bytes = r.u64();
  if (h.payload_bytes != expected.block_payload_bytes())
    return mismatch("payload size", std::to_string(expected.block_payload_bytes()), std::to_string(h.payload_bytes));
  h.payload_checksum = r.u64();
  TERN_CHECK(r.pos() == want - 8);
  return h;
}

}  // namespace tern
