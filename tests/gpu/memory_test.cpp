// Device memory that runs out is an error with sizes, and the backend keeps working: the CUDA
// backend reports its free memory (memory_info), a KV pool larger than the device is refused
// before anything is allocated with what was free, an allocation larger than the device throws
// OutOfMemory ("out of GPU memory" and what was free), and a pool that fits is created afterwards
// on the same backend. (The host-side rules, with a CPU backend behind a byte budget: tests/models/
// memory_limit_test.cpp.)
#include <gtest/gtest.h>

#include <string>

#include "gpu_test_util.h"
#include "kv/kv_pool.h"

namespace tern {
namespace {

TEST(GpuMemory, KvPoolLargerThanTheDeviceIsAnErrorAndTheBackendGoesOn) {
  TERN_REQUIRE_GPU();
  std::unique_ptr<Backend> backend = gputest::make_cuda();
  ASSERT_NE(backend, nullptr);
  const std::optional<MemoryInfo> mem = backend->memory_info();
  ASSERT_TRUE(mem.has_value());
  EXPECT_GT(mem->total_bytes, 0u);
  EXPECT_LE(mem->free_bytes, mem->total_bytes);

  KvPoolConfig kc;
  kc.n_layers = 2;
  kc.n_kv_heads = 8;
  kc.head_dim = 128;
  kc.dtype = DType::F16;
  const uint64_t block_bytes = static_cast<uint64_t>(kc.block_tokens) * kc.n_kv_heads * kc.head_dim * 2;
  kc.n_blocks = static_cast<int>(mem->total_bytes / block_bytes + 1);  // one layer's K alone exceeds the device
  auto pool = KvPool::create(*backend, kc);
  ASSERT_FALSE(pool.is_ok());
  const std::string& m = pool.status().message();
  EXPECT_NE(m.find("kv cache: " + std::to_string(kc.n_blocks) + " blocks"), std::string::npos) << m;
  EXPECT_NE(m.find("do not fit: only "), std::string::npos) << m;
  EXPECT_NE(m.find("of the cuda backend's"), std::string::npos) << m;

  // Past KvPool's check, the device's own refusal: an OutOfMemory that names the size and what
  // the device had free.
  try {
    std::unique_ptr<Buffer> huge = backend->alloc(mem->total_bytes + (size_t{1} << 30));
    ADD_FAILURE() << "an allocation larger than the device succeeded";
  } catch (const OutOfMemory& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("out of GPU memory: cannot allocate"), std::string::npos) << w;
    EXPECT_NE(w.find("free of"), std::string::npos) << w;
  }

  kc.n_blocks = 64;
  auto small = KvPool::create(*backend, kc);
  ASSERT_TRUE(small.is_ok()) << small.status().message();
}

}  // namespace
}  // namespace tern
