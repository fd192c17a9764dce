#include "spec/ngram_drafter.h"

#include <gtest/gtest.h>

namespace tern {
namespace {

TEST(NgramDrafter, LongestSuffixWinsAndMostRecentOnTies) {
  NgramDrafter d;
  // "1 2 3 9 9 | 5 2 3 7 7 | 1 2 3": the 3-gram "1 2 3" occurred at the start -> propose "9 9 ...".
  std::vector<int32_t> ctx = {1, 2, 3, 9, 9, 5, 2, 3, 7, 7, 1, 2, 3};
  d.prefill(ctx);
  Draft out = d.draft(ctx, 2);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{9, 9}));
  // Only "2 3" matches (twice): the most recent occurrence wins -> "7 7".
  std::vector<int32_t> ctx2 = {1, 2, 3, 9, 9, 5, 2, 3, 7, 7, 4, 2, 3};
  d.prefill(ctx2);
  EXPECT_EQ(d.draft(ctx2, 2).tokens, (std::vector<int32_t>{7, 7}));
}

TEST(NgramDrafter, NoMatchNoDraftAndIncrementalContext) {
  NgramDrafter d;
  std::vector<int32_t> ctx = {1, 2, 3, 4};
  d.prefill(ctx);
  EXPECT_TRUE(d.draft(ctx, 4).tokens.empty());
  ctx.push_back(1);  // "1" occurred at 0 -> propose "2 3 4 1"
  EXPECT_EQ(d.draft(ctx, 4).tokens, (std::vector<int32_t>{2, 3, 4, 1}));
}

TEST(NgramDrafter, WidthFollowsAcceptance) {
  NgramDrafterOptions o;
  o.max_draft = 6;
  o.probe_draft = 2;
  NgramDrafter d(o);
  std::vector<int32_t> ctx;
  for (int i = 0; i < 40; ++i) ctx.push_back(i % 10);
  d.prefill(ctx);
  EXPECT_EQ(d.draft(ctx, 100).tokens.size(), 6u);
  for (int i = 0; i < 20; ++i) d.commit(6, 0);
  EXPECT_LT(d.acceptance_ema(), 0.25f);
  EXPECT_EQ(d.draft(ctx, 100).tokens.size(), 2u);
  for (int i = 0; i < 20; ++i) d.commit(2, 2);
  EXPECT_EQ(d.draft(ctx, 100).tokens.size(), 6u);
}

}  // namespace
}  // namespace tern
