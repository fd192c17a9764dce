// gpu_bench --timeline's arithmetic (bench/gpu/step_summary.h), on the host: runs in CI without a
// device. Spans in ns, results in us.
#include "../../bench/gpu/step_summary.h"

#include <gtest/gtest.h>

namespace tern::bench {
namespace {

KernelSpan span(const char* name, int grid_x, uint64_t start_us, uint64_t end_us) {
  return KernelSpan{name, {grid_x, 1, 1}, start_us * 1000, end_us * 1000};
}

const KernelRow* row(const StepSummary& s, const std::string& name) {
  for (const KernelRow& r : s.rows) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

// Two steps: the first with a gap (idle) before b, the second with c overlapping a (PDL: it starts
// before a ends) and ending under b. Marginal times add up to each step's span.
std::vector<KernelSpan> two_steps() {
  return {span("embed_kernel", 16, 0, 1), span("a", 2, 1, 5), span("b", 2, 6, 7),
          span("embed_kernel", 16, 10, 11), span("a", 2, 11, 12), span("b", 2, 11, 13), span("c", 4, 11, 12)};
}

TEST(StepSummary, MarginalTimesAddUpToTheStep) {
  const auto s = summarize_steps(two_steps(), 2);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->steps, 2);
  EXPECT_DOUBLE_EQ(s->kernels_per_step, 3.5);
  EXPECT_DOUBLE_EQ(s->span_us, (7.0 + 3.0) / 2);
  EXPECT_DOUBLE_EQ(s->idle_us, 1.0 / 2);  // 5 -> 6 in the first step
  double marginal = 0;
  for (const KernelRow& r : s->rows) marginal += r.marginal_per_step_us;
  EXPECT_DOUBLE_EQ(marginal, s->span_us);

  const KernelRow* a = row(*s, "a");
  const KernelRow* b = row(*s, "b");
  const KernelRow* c = row(*s, "c");
  ASSERT_TRUE(a && b && c);
  EXPECT_DOUBLE_EQ(a->launches_per_step, 1.0);
  EXPECT_DOUBLE_EQ(a->mean_duration_us, (4.0 + 1.0) / 2);
  EXPECT_DOUBLE_EQ(a->mean_marginal_us, (4.0 + 1.0) / 2);
  EXPECT_DOUBLE_EQ(b->mean_marginal_us, (2.0 + 1.0) / 2);  // the gap counts to the kernel after it
  EXPECT_DOUBLE_EQ(c->mean_marginal_us, 0.0);               // ended under b
  EXPECT_DOUBLE_EQ(c->launches_per_step, 0.5);
  EXPECT_DOUBLE_EQ(a->share, 5.0 / 10.0);
  // Largest marginal time first.
  for (size_t k = 1; k < s->rows.size(); ++k) {
    EXPECT_GE(s->rows[k - 1].marginal_per_step_us, s->rows[k].marginal_per_step_us);
  }
}

TEST(StepSummary, TakesTheLastStepsAndTellsGridsApart) {
  std::vector<KernelSpan> spans = two_steps();
  spans.push_back(span("a", 8, 13, 20));  // the same kernel on another grid: its own row
  const auto s = summarize_steps(spans, 1);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->steps, 1);
  EXPECT_DOUBLE_EQ(s->span_us, 10.0);  // 10 -> 20
  ASSERT_EQ(s->rows.size(), 5u);
  EXPECT_EQ(s->rows[0].name, "a");
  EXPECT_EQ(s->rows[0].grid[0], 8);
  EXPECT_DOUBLE_EQ(s->rows[0].marginal_per_step_us, 7.0);

  const auto more = summarize_steps(two_steps(), 5);  // asks for more steps than were recorded
  ASSERT_TRUE(more.has_value());
  EXPECT_EQ(more->steps, 2);
}

TEST(StepSummary, LastStepInLaunchOrder) {
  const std::vector<KernelSpan> spans = two_steps();
  const size_t begin = last_step_begin(spans);
  EXPECT_EQ(begin, 3u);
  const std::vector<StepKernel> step = step_kernels(spans, begin, spans.size());
  ASSERT_EQ(step.size(), 4u);
  EXPECT_EQ(step[2].span->name, "b");
  EXPECT_DOUBLE_EQ(step[2].start_us, 1.0);
  EXPECT_DOUBLE_EQ(step[2].end_us, 3.0);
  EXPECT_DOUBLE_EQ(step[2].marginal_us, 1.0);
  EXPECT_DOUBLE_EQ(step[3].marginal_us, 0.0);
  const std::vector<StepKernel> first = step_kernels(spans, 0, begin);
  EXPECT_DOUBLE_EQ(first[2].idle_before_us, 1.0);
  EXPECT_EQ(last_step_begin({span("a", 2, 0, 1)}), 1u);  // none: the end
}

TEST(StepSummary, NoStepWithoutAnEmbeddingLookup) {
  EXPECT_FALSE(summarize_steps({span("a", 2, 0, 1)}, 1).has_value());
  EXPECT_FALSE(summarize_steps({}, 1).has_value());
  EXPECT_FALSE(summarize_steps(two_steps(), 0).has_value());
}

}  // namespace
}  // namespace tern::bench
