// Test helper: builds GGUF images byte by byte, so tests can write files the Writer never would
// (v2 headers, corrupt fields) and know the exact byte offset of every field they corrupt.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "formats/gguf.h"

namespace tern::gguf::testing {

class ByteBuilder {
 public:
  size_t size() const { return bytes_.size(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

  template <typename T>
  ByteBuilder& put(T v) {
    uint8_t raw[sizeof(T)];
    std::memcpy(raw, &v, sizeof(T));
    bytes_.insert(bytes_.end(), raw, raw + sizeof(T));
    return *this;
  }
  ByteBuilder& u32(uint32_t v) { return put(v); }
  ByteBuilder& u64(uint64_t v) { return put(v); }
  ByteBuilder& raw(const std::string& s) {
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  ByteBuilder& str(const std::string& s) { return u64(s.size()).raw(s); }
  ByteBuilder& type(ValueType t) { return u32(static_cast<uint32_t>(t)); }

  // "GGUF", version, tensor count, kv count.
  ByteBuilder& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
  }
  ByteBuilder& kv_u32(const std::string& key, uint32_t v) { return str(key).type(ValueType::U32).u32(v); }
  ByteBuilder& kv_string(const std::string& key, const std::string& v) {
    return str(key).type(ValueType::STRING).str(v);
  }
  ByteBuilder& tensor_info(const std::string& name, const std::vector<uint64_t>& dims, DType type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(static_cast<uint32_t>(type)).u64(offset);
  }
  ByteBuilder& pad_to(size_t alignment) {
    while (bytes_.size() % alignment != 0) bytes_.push_back(0);
    return *this;
  }
  ByteBuilder& fill(size_t n_bytes, uint8_t value) {
    bytes_.insert(bytes_.end(), n_bytes, value);
    return *this;
  }

 private:
  std::vector<uint8_t> bytes_;
};

inline Result<File> parse_bytes(const std::vector<uint8_t>& bytes) {
  return File::parse(bytes.data(), bytes.size(), "test.gguf");
}

}  // namespace tern::gguf::testing
