// KV tiers with the pool in GPU memory: blocks leave the device (host RAM, SSD) and come back
// through the Backend's batched copies (copy_to_host_n / copy_from_host_n) and copy-on-write
// goes through copy_on_device. Checked byte for byte on the pool, and end to end: sessions on a
// device pool far smaller than their working set give the same greedy tokens as on a pool that
// holds everything.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <unistd.h>

#include "engine/session.h"
#include "gpu_model_util.h"
#include "gpu_test_util.h"

namespace tern {
namespace {

using gputest::load_on;
using gputest::Loaded;
using gputest::prompt_ids;
using gputest::synthesized;

class GpuKvTiers : public ::testing::Test {
 protected:
  void SetUp() override { TERN_REQUIRE_GPU(); }
};

std::vector<uint8_t> pattern(size_t bytes, uint64_t seed) {
  std::vector<uint8_t> p(bytes);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (uint8_t& b : p) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<uint8_t>(x >> 56);
  }
  return p;
}

// A fresh directory under /tmp, removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int n = 0;
    path = std::filesystem::temp_directory_path() / ("tern_gpu_kv_tier_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

TEST_F(GpuKvTiers, BatchedBlockCopiesRoundTripAndCopyOnDeviceDuplicates) {
  auto backend = gputest::make_cuda();
  ASSERT_NE(backend, nullptr);
  KvPoolConfig c;
  c.n_layers = 3;
  c.n_kv_heads = 8;
  c.head_dim = 128;
  c.n_blocks = 300;  // 192 KiB per block: a 300-block run spans four 16 MiB transfer chunks
  auto pool = std::move(KvPool::create(*backend, c)).value();
  const size_t bytes = pool->block_payload_bytes();
  std::vector<std::vector<uint8_t>> want;
  std::vector<const uint8_t*> srcs;
  std::vector<int32_t> blocks;
  for (int32_t b = 0; b < c.n_blocks; ++b) {
    want.push_back(pattern(bytes, static_cast<uint64_t>(b)));
    blocks.push_back(c.n_blocks - 1 - b);  // not in address order
  }
  for (const auto& w : want) srcs.push_back(w.data());
  pool->copy_blocks_from_host(srcs, blocks);
  std::vector<uint8_t> got(bytes);
  for (size_t i = 0; i < blocks.size(); ++i) {
    pool->copy_block_to_host(blocks[i], got.data());
    ASSERT_EQ(got, want[i]) << "block " << blocks[i];
  }
  pool->copy_block(blocks[5], blocks[7]);
  pool->copy_block_to_host(blocks[7], got.data());
  EXPECT_EQ(got, want[5]);
  pool->copy_block_to_host(blocks[5], got.data());
  EXPECT_EQ(got, want[5]) << "the source of a device copy changed";
}

// One piece of a many-piece copy: rows at `offset` into the device buffer, `row_stride` apart.
struct Piece {
  DType dtype;
  int64_t rows, cols;
  size_t offset, row_stride;
  size_t width() const { return row_bytes(dtype, cols); }
  size_t extent() const { return (static_cast<size_t>(rows) - 1) * row_stride + width(); }
};

// Pieces laid out one after another with gaps, in F16 and F32: thousands of small ones (KV-like
// 16-row pieces, odd widths, strides padded by amounts that break 16- and 4-byte alignment, some
// at odd addresses) and a few large ones, one alone past the 16 MiB transfer chunk.
std::vector<Piece> odd_pieces(size_t* device_bytes) {
  std::vector<Piece> pieces;
  uint64_t x = 12345;
  auto next = [&x](uint64_t n) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return (x >> 33) % n;
  };
  const int64_t kCols[] = {1, 3, 7, 64, 96, 127, 192, 200, 513};
  const size_t kPads[] = {0, 0, 2, 4, 16, 34, 128, 258};
  size_t cursor = 0;
  auto add = [&](DType t, int64_t rows, int64_t cols, size_t pad, size_t misalign) {
    Piece p{t, rows, cols, 0, 0};
    p.row_stride = p.width() + pad;
    p.offset = (cursor + 15) / 16 * 16 + misalign;
    cursor = p.offset + p.extent() + next(40);
    pieces.push_back(p);
  };
  for (int i = 0; i < 4000; ++i) {
    const DType t = next(2) == 0 ? DType::F16 : DType::F32;
    const size_t elem = t == DType::F16 ? 2 : 4;
    const bool odd = next(16) == 0;  // byte path: an odd address and stride
    add(t, i % 3 == 0 ? 16 : 1 + static_cast<int64_t>(next(24)), kCols[next(9)], odd ? 1 + 2 * next(4) : kPads[next(8)],
        odd ? 1 : elem * next(4));
  }
  add(DType::F32, 2500, 1000, 48, 0);  // 16-byte words
  add(DType::F16, 5000, 1800, 4, 0);   // 18 MB: one piece larger than a chunk, 4-byte words
  add(DType::F32, 1200, 777, 0, 4);
  *device_bytes = (cursor + 64) / 2 * 2;  // even: the test views it as F16 pairs
  return pieces;
}

// copy_from_host_n / copy_to_host_n over many odd pieces, on the packed path and on the
// per-piece 2D path (TERN_CUDA_KV_COPY_2D=1): every piece's rows arrive exactly, the bytes
// around them (stride padding, gaps) keep their old values, and reading back in another order
// returns the sources.
TEST_F(GpuKvTiers, ManyOddPiecesRoundTripExactlyOnBothTransferPaths) {
  for (const bool per_piece : {false, true}) {
    SCOPED_TRACE(per_piece ? "TERN_CUDA_KV_COPY_2D=1" : "packed");
    if (per_piece) ::setenv("TERN_CUDA_KV_COPY_2D", "1", 1);
    auto backend = gputest::make_cuda();
    ::unsetenv("TERN_CUDA_KV_COPY_2D");
    ASSERT_NE(backend, nullptr);
    size_t device_bytes = 0;
    const std::vector<Piece> pieces = odd_pieces(&device_bytes);
    auto buf = backend->alloc(device_bytes);
    // The whole buffer as one byte-wide row of F16 pairs (device_bytes is even).
    Tensor whole = Tensor::view(buf->data(), DType::F16, 1, static_cast<int64_t>(device_bytes / 2), Device::kCuda);
    std::vector<uint8_t> image = pattern(device_bytes, 7);
    backend->copy_from_host(image.data(), whole);

    std::vector<std::vector<uint8_t>> src;
    std::vector<Backend::HostToDevice> up;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const Piece& p = pieces[i];
      src.push_back(pattern(p.width() * static_cast<size_t>(p.rows), 1000 + i));
      Tensor t = Tensor::view(static_cast<uint8_t*>(buf->data()) + p.offset, p.dtype, p.rows, p.cols, Device::kCuda);
      t.row_stride = p.row_stride;
      up.push_back({src.back().data(), t});
      for (int64_t r = 0; r < p.rows; ++r) {
        std::memcpy(image.data() + p.offset + static_cast<size_t>(r) * p.row_stride,
                    src.back().data() + static_cast<size_t>(r) * p.width(), p.width());
      }
    }
    backend->copy_from_host_n(up);
    std::vector<uint8_t> got(device_bytes);
    backend->copy_to_host(whole, got.data());
    size_t first_diff = 0;
    while (first_diff < device_bytes && got[first_diff] == image[first_diff]) ++first_diff;
    EXPECT_EQ(first_diff, device_bytes) << "first wrong byte at device offset " << first_diff;

    std::vector<std::vector<uint8_t>> back;
    std::vector<Backend::DeviceToHost> down;
    for (size_t k = 0; k < pieces.size(); ++k) {
      const size_t i = (k * 7919) % pieces.size();  // another order (7919 is prime, not a factor)
      back.emplace_back(src[i].size(), uint8_t{0xa5});
      down.push_back({up[i].dst, back.back().data()});
    }
    backend->copy_to_host_n(down);
    for (size_t k = 0; k < pieces.size(); ++k) {
      const size_t i = (k * 7919) % pieces.size();
      ASSERT_EQ(back[k], src[i]) << "piece " << i << " (" << pieces[i].rows << " x " << pieces[i].cols << " "
                                 << (pieces[i].dtype == DType::F16 ? "f16" : "f32") << ", stride "
                                 << pieces[i].row_stride << ", offset " << pieces[i].offset << ")";
    }
  }
}

// Sessions take turns on `pool`; between turns a session is parked (reset), so its blocks
// become evictable. Returns every turn's greedy tokens.
std::vector<std::vector<int32_t>> play(Loaded& m, KvPool& pool, int* restored_tokens) {
  const int V = m.model->config().n_vocab;
  const std::vector<int32_t> system = prompt_ids(64, V, 9);  // shared by every session
  constexpr int kSessions = 3, kTurns = 3;
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<std::vector<int32_t>> history(kSessions, system), outputs;
  for (int s = 0; s < kSessions; ++s) sessions.push_back(std::make_unique<Session>(*m.model, pool));
  for (int turn = 0; turn < kTurns; ++turn) {
    for (int s = 0; s < kSessions; ++s) {
      const std::vector<int32_t> more = prompt_ids(48, V, static_cast<uint32_t>(100 * s + turn));
      history[s].insert(history[s].end(), more.begin(), more.end());
      GenerateOptions g;
      g.max_tokens = 10;
      g.prefill_chunk_tokens = 64;
      auto r = sessions[s]->generate(history[s], g);
      EXPECT_TRUE(r.is_ok()) << r.status().message();
      if (!r.is_ok()) return outputs;
      outputs.push_back(r->tokens);
      *restored_tokens += r->stats.restored_tokens;
      history[s].insert(history[s].end(), r->tokens.begin(), r->tokens.end());
      sessions[s]->reset();
    }
  }
  return outputs;
}

void spill_and_restore(const KvTierOptions& tiers, bool expect_host) {
  auto file = synthesized("tiny-llama", "q4_k_m");
  ASSERT_NE(file, nullptr);
  Loaded m = load_on(file, gputest::make_cuda(), 1024);
  ASSERT_NE(m.model, nullptr);
  KvPoolConfig c = m.kv->config();
  c.n_blocks = 256;
  auto big = std::move(KvPool::create(*m.backend, c)).value();
  int restored_big = 0, restored_small = 0;
  const auto want = play(m, *big, &restored_big);
  c.n_blocks = 20;  // 320 tokens; the sessions reach ~280 tokens each
  auto small = std::move(KvPool::create(*m.backend, c)).value();
  KvTierOptions o = tiers;
  o.model_fingerprint = m.model->config().fingerprint;
  small->enable_tiers(o);
  const auto got = play(m, *small, &restored_small);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "turn " << i;
  EXPECT_EQ(restored_big, 0);
  EXPECT_GT(small->stats().evictions, 0);
  EXPECT_GT(restored_small, 0);
  const KvTierStats& st = small->tiers()->stats();
  if (expect_host) EXPECT_GT(st.restored_from_host_blocks, 0u);
  else EXPECT_GT(st.restored_from_disk_blocks, 0u);
}

TEST_F(GpuKvTiers, SmallDevicePoolSpillsToHostRamWithIdenticalOutputs) {
  KvTierOptions o;
  o.model_id = "tiny-llama";
  o.host_bytes = 64ull << 20;
  spill_and_restore(o, /*expect_host=*/true);
}

TEST_F(GpuKvTiers, SmallDevicePoolSpillsToDiskWithIdenticalOutputs) {
  TempDir dir;
  KvTierOptions o;
  o.model_id = "tiny-llama";
  o.disk_dir = dir.path.string();
  o.disk_bytes = 1ull << 30;
  spill_and_restore(o, /*expect_host=*/false);
}

// A block-aligned prompt another session computed: all but its last token come from the shared
// blocks (the last one copied on the device), and the output equals a cold run's.
TEST_F(GpuKvTiers, AlignedPromptCopiesTheSharedLastBlockOnTheDevice) {
  auto file = synthesized("tiny-llama", "q4_k_m");
  ASSERT_NE(file, nullptr);
  Loaded m = load_on(file, gputest::make_cuda(), 1024);
  ASSERT_NE(m.model, nullptr);
  const std::vector<int32_t> prompt = prompt_ids(64, m.model->config().n_vocab, 5);
  GenerateOptions g;
  g.max_tokens = 12;
  GenerateOptions cold = g;
  cold.reuse_prefix = false;
  Session a(*m.model, *m.kv), b(*m.model, *m.kv);
  auto want = a.generate(prompt, cold);
  ASSERT_TRUE(want.is_ok()) << want.status().message();
  Session c(*m.model, *m.kv);
  auto first = c.generate(prompt, g);  // registers the blocks and keeps holding them
  ASSERT_TRUE(first.is_ok());
  auto got = b.generate(prompt, g);
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  EXPECT_EQ(got->stats.cached_tokens, 63);
  EXPECT_EQ(got->tokens, want->tokens);
  EXPECT_EQ(first->tokens, want->tokens);
}

}  // namespace
}  // namespace tern
