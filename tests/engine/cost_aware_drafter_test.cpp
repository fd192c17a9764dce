// The speculation cost model: it drafts wide when drafts are accepted and verify rows are cheap,
// stops drafting (except for sparse probes) when they are rejected or rows are expensive, and
// notices when acceptance comes back.
#include "spec/cost_aware_drafter.h"

#include <gtest/gtest.h>

namespace tern {
namespace {

// Proposes max_tokens tokens (or none when `silent`), and records what it was asked.
class FixedDrafter final : public DraftSource {
 public:
  std::string_view name() const override { return "fixed"; }
  void prefill(std::span<const int32_t>) override { ++prefills; }
  Draft draft(std::span<const int32_t>, int max_tokens) override {
    ++calls;
    Draft d;
    if (!silent) d.tokens.assign(static_cast<size_t>(max_tokens), 7);
    return d;
  }
  void commit(int n_drafted, int n_accepted) override {
    drafted += n_drafted;
    accepted += n_accepted;
  }
  bool silent = false;
  int prefills = 0, calls = 0, drafted = 0, accepted = 0;
};

// Drives the wrapper like the verify executor would, on a simulated clock where a step with k
// draft rows takes base + per_row * k seconds, and `accept(k)` drafts are accepted.
struct Simulation {
  double now = 0.0;
  double base = 1.0, per_row = 0.05;
  FixedDrafter inner;
  CostAwareDrafter drafter{inner, CostAwareDrafterOptions{}, [this] { return now; }};
  int drafted_steps = 0;
  int total_width = 0;

  template <typename Accept>
  void run(int steps, Accept accept, int max_tokens = 10) {
    std::vector<int32_t> ctx{1, 2, 3};
    for (int i = 0; i < steps; ++i) {
      Draft d = drafter.draft(ctx, max_tokens);
      const int k = static_cast<int>(d.tokens.size());
      const int a = std::min(k, accept(k));
      now += base + per_row * k;  // the forward
      drafter.commit(k, a);
      if (k > 0) ++drafted_steps;
      total_width += k;
      now += 0.5;  // sampling, streaming, other sequences' work: not part of the step's cost
    }
  }
};

TEST(CostAwareDrafter, StepsWithoutADraftRequestAreNotTimed) {
  // The caller skipped draft() (drafting suppressed): its commit(0, 0) must not count the time
  // since the last draft() as a step.
  Simulation s;
  s.run(3, [](int k) { return k; });
  ASSERT_TRUE(s.drafter.base_seconds().has_value());
  const double base = *s.drafter.base_seconds();
  s.now += 100.0;
  s.drafter.commit(0, 0);
  EXPECT_EQ(*s.drafter.base_seconds(), base);
}

TEST(CostAwareDrafter, MeasuresBaseFirstThenDraftsWideWhenEverythingIsAccepted) {
  Simulation s;
  s.drafter.prefill(std::vector<int32_t>{1, 2, 3});
  EXPECT_EQ(s.inner.prefills, 1);
  s.run(1, [](int k) { return k; });
  EXPECT_EQ(s.drafted_steps, 0) << "the first step measures a plain decode step";
  s.run(50, [](int k) { return k; });
  ASSERT_TRUE(s.drafter.base_seconds().has_value());
  EXPECT_NEAR(*s.drafter.base_seconds(), 1.0, 1e-9);
  ASSERT_TRUE(s.drafter.extra_seconds_per_token().has_value());
  EXPECT_NEAR(*s.drafter.extra_seconds_per_token(), 0.05, 1e-9);
  EXPECT_GT(s.drafter.acceptance(), 0.9f);
  EXPECT_EQ(s.drafter.chosen_width(10), 10);
  EXPECT_EQ(s.drafted_steps, 50);
}

TEST(CostAwareDrafter, StopsDraftingWhenNothingIsAcceptedButKeepsProbing) {
  Simulation s;
  s.run(400, [](int) { return 0; });
  EXPECT_EQ(s.drafter.chosen_width(10), 0);
  // After learning, only probes draft: about one step in probe_interval, probe_width wide.
  const int learned_steps = 400;
  EXPECT_LE(s.drafted_steps, learned_steps / 16 + 12);
  EXPECT_GE(s.drafted_steps, learned_steps / 16 - 2);
  EXPECT_LE(s.drafter.acceptance(), 0.1f);
}

TEST(CostAwareDrafter, ExpensiveRowsNeedHighAcceptance) {
  // Rows cost as much as a whole step (a compute-bound verify): a = 0.5 does not pay...
  Simulation s;
  s.per_row = 1.0;
  int step = 0;
  s.run(300, [&step](int k) { return (step++ % 2 == 0) ? k : 0; });  // half the drafts fully accepted
  EXPECT_EQ(s.drafter.chosen_width(10), 0);
  // ...while with cheap rows the same acceptance does.
  Simulation cheap;
  cheap.per_row = 0.02;
  step = 0;
  cheap.run(300, [&step](int k) { return (step++ % 2 == 0) ? k : 0; });
  EXPECT_GT(cheap.drafter.chosen_width(10), 0);
}

TEST(CostAwareDrafter, RecoversWhenAcceptanceReturns) {
  Simulation s;
  s.run(200, [](int) { return 0; });
  ASSERT_EQ(s.drafter.chosen_width(10), 0);
  // The agent starts quoting: probes get accepted and the width opens up again.
  s.run(200, [](int k) { return k; });
  EXPECT_GT(s.drafter.chosen_width(10), 4);
}

TEST(CostAwareDrafter, NeverProposesMoreThanAskedAndForwardsCommitAndEnd) {
  Simulation s;
  s.run(20, [](int k) { return k; }, /*max_tokens=*/3);
  EXPECT_LE(s.total_width, 3 * 20);
  EXPECT_EQ(s.inner.drafted, s.total_width);
  EXPECT_EQ(s.inner.accepted, s.total_width);
  // A silent inner drafter (no match) costs nothing and counts as a plain step.
  s.inner.silent = true;
  const int before = s.drafted_steps;
  s.run(10, [](int k) { return k; });
  EXPECT_EQ(s.drafted_steps, before);
}

}  // namespace
}  // namespace tern
