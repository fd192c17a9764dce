// Restoring a chain of blocks as one run (KvPool::acquire_cached_chain): device hits, host RAM
// and SSD mixed in one chain, SSD files read several at a time, a damaged file in the middle of
// a run, and the recycling of block buffers. Every restored block is checked byte for byte.
#include <gtest/gtest.h>

#include "kv/kv_blob_recycler.h"
#include "kv_tier_test_util.h"

namespace tern::testing {
namespace {

namespace fs = std::filesystem;

// Checks that `blocks` hold the patterns of keys[0..blocks.size()).
void expect_patterns(const KvPool& pool, const std::vector<int32_t>& blocks, const std::vector<BlockKey>& keys) {
  ASSERT_LE(blocks.size(), keys.size());
  for (size_t i = 0; i < blocks.size(); ++i)
    EXPECT_EQ(block_bytes(pool, blocks[i]), pattern_for(pool, keys[i])) << "block " << i << " of the chain";
}

TEST(KvTierRun, AChainMixingDeviceHostAndDiskComesBackWholeAndInOrder) {
  cpu::CpuBackend backend({1, false});
  TempDir dir;
  WarningLog log;
  const std::vector<BlockKey> keys = chain(3, 40);
  write_blocks(backend, dir.path, keys);  // every block on disk
  KvTierOptions o = disk_options(dir.path, log);
  o.host_bytes = 1ull << 20;
  o.disk_readers = 3;
  auto pool = make_pool(backend, 48, o);
  // Blocks 0-4 on the device, 5-9 spilled to host RAM (evicted by later fills), the rest on disk.
  for (int i = 0; i < 10; ++i) put_cached(*pool, keys[i]);
  std::vector<int32_t> held;
  for (int i = 0; i < 5; ++i) held.push_back(*pool->acquire_cached(keys[i].hash));  // keep 0-4 on the device
  while (auto b = pool->allocate()) held.push_back(*b);  // evicts 5-9 into host RAM
  for (size_t i = 5; i < held.size(); ++i) pool->release(held[i]);
  held.resize(5);
  ASSERT_EQ(pool->tiers()->host()->n_blocks(), 5u);

  std::vector<bool> restored;
  const std::vector<int32_t> blocks = pool->acquire_cached_chain(keys, &restored);
  ASSERT_EQ(blocks.size(), keys.size());
  expect_patterns(*pool, blocks, keys);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(restored[i], i >= 5) << "block " << i;
  const KvTierStats& st = pool->tiers()->stats();
  EXPECT_EQ(st.restored_from_host_blocks, 5u);
  EXPECT_EQ(st.restored_from_disk_blocks, 30u);
  for (int32_t b : blocks) pool->release(b);
  for (int32_t b : held) pool->release(b);
  EXPECT_EQ(log.lines.size(), 0u) << log.all();
}

TEST(KvTierRun, ADamagedFileEndsTheRunThereAndTheBlocksAfterItStayCached) {
  cpu::CpuBackend backend({1, false});
  TempDir dir;
  const std::vector<BlockKey> keys = chain(4, 12);
  write_blocks(backend, dir.path, keys);
  const std::string bad = file_of(dir.path, keys[5]);
  flip_byte(bad, static_cast<long>(fs::file_size(bad)) - 5);
  WarningLog log;
  auto pool = make_pool(backend, 16, disk_options(dir.path, log));
  std::vector<bool> restored;
  const std::vector<int32_t> blocks = pool->acquire_cached_chain(keys, &restored);
  ASSERT_EQ(blocks.size(), 5u) << "the chain ends at the damaged block";
  expect_patterns(*pool, blocks, keys);
  EXPECT_EQ(log.count("payload checksum"), 1) << log.all();
  EXPECT_FALSE(fs::exists(bad));
  EXPECT_FALSE(pool->contains(keys[5].hash));
  for (size_t i = 6; i < keys.size(); ++i) {
    EXPECT_TRUE(pool->contains(keys[i].hash)) << "block " << i << " was read and checked: it stays cached";
    bool from_tier = true;
    const std::optional<int32_t> b = pool->acquire_cached(keys[i], &from_tier);
    ASSERT_TRUE(b.has_value());
    EXPECT_FALSE(from_tier);
    EXPECT_EQ(block_bytes(*pool, *b), pattern_for(*pool, keys[i]));
    pool->release(*b);
  }
  for (int32_t b : blocks) pool->release(b);
  EXPECT_EQ(pool->n_used_blocks(), 0);
}

TEST(KvTierRun, APoolTooSmallForTheRunRestoresWhatFitsAndLosesNothing) {
  cpu::CpuBackend backend({1, false});
  TempDir dir;
  WarningLog log;
  const std::vector<BlockKey> keys = chain(5, 10);
  KvTierOptions o = disk_options(dir.path, log);
  o.write_behind = false;
  o.disk_dir.clear();
  o.host_bytes = 1ull << 20;
  auto pool = make_pool(backend, 4, o);
  for (const BlockKey& k : keys) put_cached(*pool, k);  // 0-5 spill to host RAM, 6-9 stay
  ASSERT_EQ(pool->tiers()->host()->n_blocks(), 6u);
  const std::vector<int32_t> blocks = pool->acquire_cached_chain(keys);
  ASSERT_EQ(blocks.size(), 4u) << "4 device blocks in all";
  expect_patterns(*pool, blocks, keys);
  for (int32_t b : blocks) pool->release(b);
  // Nothing was dropped on the way: every block is on the device or in host RAM.
  for (const BlockKey& k : keys) EXPECT_TRUE(pool->contains(k.hash) || pool->tiers()->contains(k.hash));
  EXPECT_EQ(log.lines.size(), 0u) << log.all();
}

TEST(KvBlobRecycler, BuffersComeBackUpToTheIdleCap) {
  auto r = KvBlobRecycler::create(3 * 1000);
  const BlockKey key = chain(1, 1)[0];
  std::vector<KvBlobPtr> blobs;
  for (int i = 0; i < 5; ++i) blobs.push_back(r->make(key, 1000));
  EXPECT_EQ(r->reused(), 0u);
  blobs.clear();  // five come back; three are kept
  EXPECT_EQ(r->idle_bytes(), 3000u);
  for (int i = 0; i < 4; ++i) {
    blobs.push_back(r->make(key, 1000));
    EXPECT_EQ(blobs.back()->payload.size(), 1000u);
    EXPECT_EQ(blobs.back()->key, key);
  }
  EXPECT_EQ(r->reused(), 3u);
  EXPECT_EQ(r->idle_bytes(), 0u);
  // A buffer of another size is not handed out for this one.
  blobs.clear();
  auto other = r->make(key, 500);
  EXPECT_EQ(other->payload.size(), 500u);
  // A blob outliving its recycler is simply freed.
  r.reset();
  other.reset();
}

}  // namespace
}  // namespace tern::testing
