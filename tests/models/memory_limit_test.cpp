// A model or KV cache that does not fit its backend's memory is an error that says so (what was
// asked for, what was free, what it was for), never a crash: load_model checks a device's free
// memory before uploading, an upload that still runs out names its tensor, and KvPool::create
// names its size. The device here is a CPU backend behind a byte budget (tests/common/
// budget_backend.h) that uploads weights like a GPU backend does (copies it owns).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "../common/budget_backend.h"
#include "backends/cpu/cpu_backend.h"
#include "core/bytes.h"
#include "formats/gguf.h"
#include "kv/kv_pool.h"
#include "models/model.h"

namespace tern {
namespace {

using testing::BudgetBackend;

std::shared_ptr<const gguf::File> tiny_model() {
  auto file = gguf::File::open(std::string(TERN_TEST_DATA) + "/models/llama_tiny.gguf");
  EXPECT_TRUE(file.is_ok()) << file.status().message();
  if (!file.is_ok()) return nullptr;
  return std::make_shared<const gguf::File>(std::move(file).value());
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(MemoryLimit, WeightsOverTheFreeMemoryAreRefusedBeforeAnyUpload) {
  auto file = tiny_model();
  ASSERT_NE(file, nullptr);
  const uint64_t need = file->tensor_bytes();
  BudgetBackend backend(need * 4, need - 1);  // one byte short of free memory
  auto model = load_model(file, backend, ModelOptions{});
  ASSERT_FALSE(model.is_ok());
  const std::string& m = model.status().message();
  EXPECT_TRUE(contains(m, "the weights need " + human_bytes(need))) << m;
  EXPECT_TRUE(contains(m, human_bytes(need - 1) + " of its " + human_bytes(need * 4) + " are free")) << m;
  EXPECT_EQ(backend.used(), 0u) << "nothing is uploaded";
}

TEST(MemoryLimit, AnUploadThatRunsOutNamesItsTensor) {
  auto file = tiny_model();
  ASSERT_NE(file, nullptr);
  const uint64_t need = file->tensor_bytes();
  BudgetBackend backend(need / 2, need);  // reports enough free, holds half
  auto model = load_model(file, backend, ModelOptions{});
  ASSERT_FALSE(model.is_ok());
  const std::string& m = model.status().message();
  EXPECT_TRUE(contains(m, "model: tensor '")) << m;
  EXPECT_TRUE(contains(m, "of weights): out of budget memory: cannot allocate")) << m;
}

TEST(MemoryLimit, ModelThatFitsLoadsAndKvPoolOverTheRestIsAnError) {
  auto file = tiny_model();
  ASSERT_NE(file, nullptr);
  const uint64_t need = file->tensor_bytes();
  const uint64_t capacity = need + (uint64_t{1} << 20);  // the weights (and the rope table) and ~1 MiB
  BudgetBackend backend(capacity, capacity);
  auto model = load_model(file, backend, ModelOptions{});
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  const ModelConfig& c = model.value()->config();
  KvPoolConfig kc;
  kc.n_layers = c.n_layers;
  kc.n_kv_heads = c.n_kv_heads;
  kc.head_dim = c.head_dim;
  kc.n_blocks = 1;
  auto small = KvPool::create(backend, kc);
  ASSERT_TRUE(small.is_ok()) << small.status().message();
  small.value().reset();
  const uint64_t used = backend.used();
  // Each layer's K and V take a quarter of the ~1 MiB left: the fourth allocation does not fit.
  const uint64_t per_buffer = (capacity - used) / 4 + 1;
  kc.n_blocks = static_cast<int>(per_buffer / (uint64_t{2} * kc.block_tokens * kc.n_kv_heads * kc.head_dim) + 1);
  ASSERT_EQ(c.n_layers, 2);
  auto pool = KvPool::create(backend, kc);
  ASSERT_FALSE(pool.is_ok());
  const std::string& m = pool.status().message();
  EXPECT_TRUE(contains(m, "kv cache: " + std::to_string(kc.n_blocks) + " blocks of " + std::to_string(kc.block_tokens) + " tokens")) << m;
  EXPECT_TRUE(contains(m, "do not fit: out of budget memory")) << m;
  EXPECT_TRUE(contains(m, "--ctx")) << m;
  EXPECT_EQ(backend.used(), used) << "the layers allocated before the one that did not fit are freed";
}

TEST(MemoryLimit, HostKvPoolOverTheAvailableMemoryIsRefusedBeforeAllocating) {
  cpu::CpuBackend backend({1, false});
  const std::optional<MemoryInfo> mem = backend.memory_info();
  ASSERT_TRUE(mem.has_value()) << "/proc/meminfo has MemAvailable and MemTotal on Linux";
  EXPECT_GT(mem->total_bytes, 0u);
  EXPECT_LE(mem->free_bytes, mem->total_bytes);
  KvPoolConfig kc;
  kc.n_layers = 4;
  kc.n_kv_heads = 8;
  kc.head_dim = 128;
  kc.dtype = DType::F32;  // 4 KiB per row and layer, 32 KiB per token for K and V of 4 layers
  kc.n_blocks = static_cast<int>(std::min<uint64_t>(mem->total_bytes / (uint64_t{32} << 10) / kc.block_tokens * 2 + 1,
                                                    INT32_MAX));  // twice the machine's memory
  auto pool = KvPool::create(backend, kc);
  ASSERT_FALSE(pool.is_ok());
  const std::string& m = pool.status().message();
  EXPECT_TRUE(contains(m, "kv cache: " + std::to_string(kc.n_blocks) + " blocks")) << m;
  EXPECT_TRUE(contains(m, "of the cpu backend's " + human_bytes(mem->total_bytes) + " are free")) << m;
}

TEST(MemoryLimit, KvPoolWhoseSizeOverflowsIsAnError) {
  cpu::CpuBackend backend({1, false});
  KvPoolConfig kc;
  kc.n_layers = 64;
  kc.n_kv_heads = 1 << 12;
  kc.head_dim = 1 << 12;
  kc.dtype = DType::F32;
  kc.block_tokens = 1 << 20;
  kc.n_blocks = 1 << 30;
  auto pool = KvPool::create(backend, kc);
  ASSERT_FALSE(pool.is_ok());
  EXPECT_TRUE(contains(pool.status().message(), "exceed any memory")) << pool.status().message();
}

TEST(HumanBytes, BinaryUnits) {
  EXPECT_EQ(human_bytes(0), "0 B");
  EXPECT_EQ(human_bytes(1023), "1023 B");
  EXPECT_EQ(human_bytes(1536), "1.50 KiB");
  EXPECT_EQ(human_bytes(uint64_t{3} << 20), "3.00 MiB");
  EXPECT_EQ(human_bytes(uint64_t{17253859328}), "16.07 GiB");
  EXPECT_EQ(human_bytes(uint64_t{1} << 48), "256.00 TiB");
}

}  // namespace
}  // namespace tern
