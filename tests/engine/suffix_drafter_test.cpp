#include "spec/suffix_drafter.h"

#include <gtest/gtest.h>

#include <random>

namespace tern {
namespace {

// Brute force: the longest suffix of `query` that occurs in some document.
int brute_longest(const std::vector<std::vector<int32_t>>& docs, const std::vector<int32_t>& query) {
  int best = 0;
  for (const auto& d : docs) {
    for (size_t end = 1; end <= d.size(); ++end) {
      int len = 0;
      while (len < static_cast<int>(std::min(end, query.size())) && d[end - 1 - len] == query[query.size() - 1 - len])
        ++len;
      best = std::max(best, len);
    }
  }
  return best;
}

TEST(SuffixAutomaton, LongestMatchAgreesWithBruteForce) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> tok(0, 3);  // a small alphabet: many repeats
  SuffixAutomaton sam;
  std::vector<std::vector<int32_t>> docs;
  for (int d = 0; d < 5; ++d) {
    std::vector<int32_t> doc(40);
    for (auto& t : doc) t = tok(rng);
    sam.add_document(doc);
    docs.push_back(doc);
  }
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> query;
    SuffixAutomaton::Cursor c;
    for (int i = 0; i < 30; ++i) {
      query.push_back(tok(rng));
      sam.advance(c, query.back());
      ASSERT_EQ(c.length, brute_longest(docs, query)) << "trial " << trial << " step " << i;
      if (c.length > 0) {
        // The recorded end really is an occurrence of the match.
        const int64_t end = sam.end_of(c);
        for (int k = 0; k < c.length; ++k)
          ASSERT_EQ(sam.corpus()[end - 1 - k], query[query.size() - 1 - k]);
      }
    }
  }
}

TEST(SuffixDrafter, ProposesWhatFollowedInAnEarlierGeneration) {
  auto corpus = std::make_shared<SuffixCorpus>();
  const std::vector<int32_t> earlier = {100, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  {
    SuffixDrafter first(corpus);
    first.prefill(std::vector<int32_t>{100});
    first.end(earlier);
  }
  SuffixDrafter d(corpus);
  std::vector<int32_t> ctx = {50, 51, 52, 3, 4, 5, 6};
  d.prefill(ctx);
  // Match "3 4 5 6" (length 4 = min_match) -> up to alpha * 4 tokens: 7 8 9 10.
  EXPECT_EQ(d.draft(ctx, 16).tokens, (std::vector<int32_t>{7, 8, 9, 10}));
  // A longer match drafts more, capped by the caller's max.
  ctx = {2, 3, 4, 5, 6, 7};
  EXPECT_EQ(d.draft(ctx, 3).tokens, (std::vector<int32_t>{8, 9, 10}));
  // Too short a match drafts nothing.
  ctx = {99, 98, 5, 6};
  EXPECT_TRUE(d.draft(ctx, 16).tokens.empty());
}

TEST(SuffixDrafter, UsesThePromptAndStopsAtDocumentEnds) {
  SuffixDrafter d(nullptr);
  const std::vector<int32_t> prompt = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 42};
  d.prefill(prompt);
  std::vector<int32_t> ctx = prompt;
  for (int32_t t : {9, 8, 7, 6}) ctx.push_back(t);
  EXPECT_EQ(d.draft(ctx, 16).tokens, (std::vector<int32_t>{5, 4, 3, 2}));
  // The prompt's last token is not indexed, so a continuation never runs past the prompt.
  ctx = prompt;
  for (int32_t t : {3, 2, 1, 0}) ctx.push_back(t);
  EXPECT_TRUE(d.draft(ctx, 16).tokens.empty());
}

}  // namespace
}  // namespace tern
