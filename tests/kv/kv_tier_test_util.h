// Helpers for the KV tier tests: a tiny pool (no model) whose blocks hold a pattern derived from
// their key, so a restored block can be checked byte for byte, and a warning recorder.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
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

// On-disk fixtures of the tier tests (tiny pool, SSD tier in `dir`).
inline KvTierOptions disk_options(const std::filesystem::path& dir, WarningLog& log, uint64_t fingerprint = 42) {
  KvTierOptions o;
  o.disk_dir = dir.string();
  o.disk_bytes = 1ull << 30;
  o.model_id = "tiny";
  o.model_fingerprint = fingerprint;
  o.tokenizer_fingerprint = 7;
  o.warn = log.sink();
  return o;
}

inline std::unique_ptr<KvPool> make_pool(cpu::CpuBackend& backend, int n_blocks, const KvTierOptions& o) {
  auto pool = std::move(KvPool::create(backend, tiny_pool_config(n_blocks))).value();
  pool->enable_tiers(o);
  return pool;
}

inline void flip_byte(const std::string& file, long offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.read(&c, 1);
  c ^= 0x40;
  f.seekp(offset);
  f.write(&c, 1);
}

// Writes `keys` to a fresh directory and returns the block files.
inline std::vector<std::filesystem::path> write_blocks(cpu::CpuBackend& backend, const std::filesystem::path& dir,
                                                     const std::vector<BlockKey>& keys, uint64_t fingerprint = 42) {
  WarningLog log;
  auto pool = make_pool(backend, 16, disk_options(dir, log, fingerprint));
  for (const BlockKey& k : keys) put_cached(*pool, k);
  pool->tiers()->disk()->flush();
  return block_files(dir);
}

inline std::string file_of(const std::filesystem::path& dir, const BlockKey& key) {
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.kvb", static_cast<unsigned long long>(key.hash));
  for (const std::filesystem::path& p : block_files(dir))
    if (p.filename() == name) return p.string();
  return {};
}

}  // namespace tern::testing
