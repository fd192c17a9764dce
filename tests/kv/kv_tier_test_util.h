// Helpers for the KV tier tests: a tiny pool (no model) whose blocks hold a pattern derived from
// their key, so a restored block can be checked byte for byte, and a warning recorder.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>
#include <string>
#include <unistd.h>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "kv/kv_pool.h"

namespace tern::testing {

inline KvPoolConfig tiny_pool_config(int n_blocks) {
  KvPoolConfig c;
  c.n_layers = 2;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.block_tokens = 4;
  c.n_blocks = n_blocks;
  return c;
}

// The i-th block of a chain in namespace `salt` over tokens 100*i + j.
inline BlockKey chain_key(uint64_t salt, int i, const std::vector<BlockKey>& earlier, int block_tokens = 4) {
  BlockKey k;
  k.root = root_block_hash(salt);
  k.parent = i == 0 ? k.root : earlier[i - 1].hash;
  for (int j = 0; j < block_tokens; ++j) k.tokens.push_back(100 * i + j + static_cast<int>(salt % 7));
  k.hash = hash_block(k.parent, k.tokens);
  k.first_position = i * block_tokens;
  return k;
}

inline std::vector<BlockKey> chain(uint64_t salt, int n) {
  std::vector<BlockKey> keys;
  for (int i = 0; i < n; ++i) keys.push_back(chain_key(salt, i, keys));
  return keys;
}

inline std::vector<uint8_t> pattern_for(const KvPool& pool, const BlockKey& key) {
  std::vector<uint8_t> p(pool.block_payload_bytes());
  uint64_t x = key.hash;
  for (uint8_t& b : p) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<uint8_t>(x >> 56);
  }
  return p;
}

inline std::vector<uint8_t> block_bytes(const KvPool& pool, int32_t block) {
  std::vector<uint8_t> p(pool.block_payload_bytes());
  pool.copy_block_to_host(block, p.data());
  return p;
}

// Allocates a block, fills it with key's pattern, registers it and releases it (now cached).
inline void put_cached(KvPool& pool, const BlockKey& key) {
  const int32_t b = *pool.allocate();
  const std::vector<uint8_t> p = pattern_for(pool, key);
  pool.copy_block_from_host(p.data(), b);
  ASSERT_TRUE(pool.register_block(b, key));
  pool.release(b);
}

struct WarningLog {
  std::mutex mu;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& m) {
      std::lock_guard<std::mutex> lock(mu);
      lines.push_back(m);
    };
  }
  int count(const std::string& needle) {
    std::lock_guard<std::mutex> lock(mu);
    int n = 0;
    for (const std::string& l : lines) n += l.find(needle) != std::string::npos;
    return n;
  }
  std::string all() {
    std::lock_guard<std::mutex> lock(mu);
    std::string s;
    for (const std::string& l : lines) s += l + "\n";
    return s;
  }
};

// A fresh directory under /tmp, removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("tern_kv_tier_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

// Every block file under `dir` (recursively).
inline std::vector<std::filesystem::path> block_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.path().extension() == ".kvb") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace tern::testing
