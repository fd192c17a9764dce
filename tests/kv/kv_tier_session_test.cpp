// KV tiers under real sessions on the default model: a warm restart from the SSD tier, and a
// device pool far smaller than several sessions' working set spilling to host RAM and SSD. In
// both, greedy output must be token-identical to a cold, unconstrained run, and the stats must
// show the reuse (cached and restored tokens).
#include <gtest/gtest.h>

#include "../common/model_fixture.h"
#include "engine/session.h"
#include "kv_tier_test_util.h"

namespace tern::testing {
namespace {

std::vector<int32_t> ids(int n, uint32_t seed) {
  std::vector<int32_t> out(n);
  uint32_t x = seed * 2654435761u + 7;
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    out[i] = static_cast<int32_t>((x >> 8) % 20000) + 100;
  }
  return out;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class KvTierSession : public ::testing::Test {
 public:
  void SetUp() override {
    m_ = load_test_model(default_model_path(), 2, false, 1024);
    ASSERT_NE(m_.model, nullptr);
  }
  std::unique_ptr<KvPool> pool(int n_blocks, const KvTierOptions* tiers) {
    KvPoolConfig c = m_.kv->config();
    c.n_blocks = n_blocks;
    auto p = std::move(KvPool::create(*m_.backend, c)).value();
    if (tiers != nullptr) p->enable_tiers(*tiers);
    return p;
  }
  KvTierOptions tier_options(WarningLog& log) {
    KvTierOptions o;
    o.model_id = "SmolLM2-135M-Instruct";
    o.model_fingerprint = m_.model->config().fingerprint;
    o.warn = log.sink();
    return o;
  }
  GenResult run(Session& s, const std::vector<int32_t>& prompt, int max_tokens = 12) {
    GenerateOptions g;
    g.max_tokens = max_tokens;
    g.prefill_chunk_tokens = 128;
    auto r = s.generate(prompt, g);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    return r.is_ok() ? std::move(r).value() : GenResult{};
  }
  LoadedTestModel m_;
};

TEST_F(KvTierSession, RestartOnTheSameDirectoryPrefillsOnlyTheNewTurn) {
  TempDir dir;
  WarningLog log;
  KvTierOptions o = tier_options(log);
  o.disk_dir = dir.path.string();
  o.disk_bytes = 1ull << 30;
  const std::vector<int32_t> turn1 = ids(150, 1);
  std::vector<int32_t> turn2;
  {
    auto p = pool(64, &o);
    Session s(*m_.model, *p);
    const GenResult r1 = run(s, turn1);
    turn2 = concat(concat(turn1, r1.tokens), ids(40, 2));
  }  // the pool's end finishes the queued writes
  ASSERT_FALSE(block_files(dir.path).empty());

  // Cold: a fresh pool, no tiers.
  auto cold_pool = pool(64, nullptr);
  Session cold(*m_.model, *cold_pool);
  const GenResult want = run(cold, turn2, 20);
  EXPECT_EQ(want.stats.cached_tokens, 0);

  // Warm: a new pool (as after a server restart) on the same directory.
  auto warm_pool = pool(64, &o);
  Session warm(*m_.model, *warm_pool);
  const GenResult got = run(warm, turn2, 20);
  const int earlier = static_cast<int>(turn2.size()) - 40;  // turn 1 and its answer
  EXPECT_GE(got.stats.cached_tokens, earlier / 16 * 16);
  EXPECT_EQ(got.stats.restored_tokens, got.stats.cached_tokens);
  EXPECT_LE(static_cast<int>(turn2.size()) - got.stats.cached_tokens, 40 + 16) << "only the new turn is prefilled";
  EXPECT_EQ(got.tokens, want.tokens) << "greedy output after a restore must equal the cold run";
  EXPECT_EQ(log.lines.size(), 0u) << log.all();
}

// Several sessions take turns on a device pool that holds about one of them; between turns a
// session is parked (reset), so its blocks become evictable and spill. Every turn's output must
// match a run on a pool large enough for everything.
void spill_round_trip(KvTierSession& t, LoadedTestModel& m, const KvTierOptions& tiers, bool expect_host) {
  const std::vector<int32_t> system = ids(64, 9);  // a prefix all sessions share
  constexpr int kSessions = 3, kTurns = 3;
  auto play = [&](KvPool& p, std::vector<std::vector<int32_t>>& outputs, int& restored) {
    std::vector<std::unique_ptr<Session>> sessions;
    std::vector<std::vector<int32_t>> history(kSessions, system);
    for (int s = 0; s < kSessions; ++s) sessions.push_back(std::make_unique<Session>(*m.model, p));
    for (int turn = 0; turn < kTurns; ++turn) {
      for (int s = 0; s < kSessions; ++s) {
        history[s] = concat(history[s], ids(48, 100 * s + turn));
        GenerateOptions g;
        g.max_tokens = 10;
        g.prefill_chunk_tokens = 64;
        auto r = sessions[s]->generate(history[s], g);
        ASSERT_TRUE(r.is_ok()) << r.status().message();
        outputs.push_back(r->tokens);
        restored += r->stats.restored_tokens;
        history[s] = concat(history[s], r->tokens);
        sessions[s]->reset();  // parked: its blocks are now only cached
      }
    }
  };
  std::vector<std::vector<int32_t>> want, got;
  int restored_big = 0, restored_small = 0;
  auto big = t.pool(256, nullptr);
  play(*big, want, restored_big);
  auto small = t.pool(20, &tiers);  // 320 tokens; the sessions reach ~280 tokens each
  play(*small, got, restored_small);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "turn " << i;
  EXPECT_GT(small->stats().evictions, 0);
  EXPECT_GT(restored_small, 0);
  const KvTierStats& st = small->tiers()->stats();
  EXPECT_EQ(st.restored_from_host_blocks + st.restored_from_disk_blocks, static_cast<uint64_t>(restored_small / 16));
  if (expect_host) EXPECT_GT(st.restored_from_host_blocks, 0u);
  else EXPECT_GT(st.restored_from_disk_blocks, 0u);
}

TEST_F(KvTierSession, SmallDevicePoolSpillsToHostRamWithIdenticalOutputs) {
  WarningLog log;
  KvTierOptions o = tier_options(log);
  o.host_bytes = 64ull << 20;
  spill_round_trip(*this, m_, o, /*expect_host=*/true);
  EXPECT_EQ(log.lines.size(), 0u) << log.all();
}

TEST_F(KvTierSession, SmallDevicePoolSpillsToDiskWithIdenticalOutputs) {
  TempDir dir;
  WarningLog log;
  KvTierOptions o = tier_options(log);
  o.disk_dir = dir.path.string();
  o.disk_bytes = 1ull << 30;
  spill_round_trip(*this, m_, o, /*expect_host=*/false);
  EXPECT_EQ(log.lines.size(), 0u) << log.all();
}

}  // namespace
}  // namespace tern::testing
