// Packing of the per-step plan for the device (no GPU needed): attention tiles, split work
// items, partial slots and tensor-core tiles follow the rules in backends/cuda/device_plan.h.
#include <gtest/gtest.h>

#include "backends/cuda/device_plan.h"

namespace tern::cuda {
namespace {

BatchPlan plan_of(const std::vector<int32_t>& seq, const std::vector<int32_t>& pos) {
  BatchPlan p;
  p.seq_index = seq;
  p.positions = pos;
  p.token_ids.assign(seq.size(), 0);
  p.kv_slots.assign(seq.size(), 0);
  p.block_offsets = {0, 1, 2, 3};
  p.block_ids = {4, 5, 6};
  p.logit_rows = {static_cast<int32_t>(seq.size()) - 1};
  return p;
}

std::vector<int32_t> slice(const std::vector<int32_t>& w, int64_t offset, int n) {
  return std::vector<int32_t>(w.begin() + offset, w.begin() + offset + n);
}

TEST(DevicePlan, TilesSplitRunsOfOneSequence) {
  // Sequence 0: 11 tokens (a tile of 4 then 4 then 3 at tile size 4), sequence 1: one decode
  // token at position 130, sequence 0 again: a separate tile.
  std::vector<int32_t> seq(11, 0), pos(11);
  for (int i = 0; i < 11; ++i) pos[i] = 60 + i;
  seq.push_back(1);
  pos.push_back(130);
  seq.push_back(0);
  pos.push_back(71);
  std::vector<int32_t> words;
  const PackedPlanLayout l = pack_plan(plan_of(seq, pos), AttentionPlanSizes{64, 4, 8}, words);
  EXPECT_EQ(l.n_tokens, 13);
  EXPECT_EQ(l.n_tiles, 5);
  EXPECT_EQ(l.max_tile_tokens, 4);
  EXPECT_EQ(slice(words, l.tile_token_begin, 5), (std::vector<int32_t>{0, 4, 8, 11, 12}));
  EXPECT_EQ(slice(words, l.tile_n_tokens, 5), (std::vector<int32_t>{4, 4, 3, 1, 1}));
  // Spans per tile: max position / 64 + 1 (positions 63, 67, 70, 130, 71).
  EXPECT_EQ(slice(words, l.tile_n_spans, 5), (std::vector<int32_t>{1, 2, 2, 3, 2}));
  EXPECT_EQ(l.n_split_items, 10);
  EXPECT_EQ(slice(words, l.split_tile, 10), (std::vector<int32_t>{0, 1, 1, 2, 2, 3, 3, 3, 4, 4}));
  EXPECT_EQ(slice(words, l.split_span, 10), (std::vector<int32_t>{0, 0, 1, 0, 1, 0, 1, 2, 0, 1}));
  // Partial slots: positions 60..63 own 1, 64..70 own 2, 130 owns 3, 71 owns 2.
  EXPECT_EQ(l.n_partials, 4 * 1 + 7 * 2 + 3 + 2);
  EXPECT_EQ(slice(words, l.token_partial_begin, 6), (std::vector<int32_t>{0, 1, 2, 3, 4, 6}));
  EXPECT_EQ(slice(words, l.block_ids, 3), (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(slice(words, l.positions, 13), pos);
  // Tensor-core tiles (8 tokens here): 8 + 3 of sequence 0, then the two single tokens.
  EXPECT_EQ(l.n_tc_tiles, 4);
  EXPECT_EQ(slice(words, l.tc_tile_token_begin, 4), (std::vector<int32_t>{0, 8, 11, 12}));
  EXPECT_EQ(slice(words, l.tc_tile_n_tokens, 4), (std::vector<int32_t>{8, 3, 1, 1}));
}

TEST(DevicePlan, DecodeAddressesStayFixedWithinASpan) {
  // One decode token whose context grows: every array but the context-sized ones keeps its
  // offset, which is what lets a CUDA graph be replayed.
  std::vector<int32_t> words;
  const AttentionPlanSizes sizes{256, 8, 16};
  const PackedPlanLayout a = pack_plan(plan_of({0}, {70}), sizes, words);
  BatchPlan longer = plan_of({0}, {71});
  longer.block_ids = {4, 5, 6, 7, 8};
  longer.block_offsets = {0, 5, 5, 5};
  const PackedPlanLayout b = pack_plan(longer, sizes, words);
  EXPECT_EQ(a.logit_rows, b.logit_rows);
  EXPECT_EQ(a.tile_n_spans, b.tile_n_spans);
  EXPECT_EQ(a.tc_tile_n_tokens, b.tc_tile_n_tokens);
  EXPECT_EQ(a.split_span, b.split_span);
  EXPECT_EQ(a.block_ids, b.block_ids);
  EXPECT_EQ(a.n_split_items, b.n_split_items);
}

}  // namespace
}  // namespace tern::cuda
