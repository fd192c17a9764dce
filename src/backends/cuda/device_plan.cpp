#include "backends/cuda/device_plan.h"

#include <algorithm>

#include "core/check.h"

namespace tern::cuda {
namespace {

// Runs of consecutive tokens of one sequence, cut every tile_tokens: (first token, count).
void cut_tiles(const BatchPlan& plan, int tile_tokens, std::vector<int32_t>& begin, std::vector<int32_t>& count) {
  const int n = plan.n_tokens();
  for (int t = 0; t < n;) {
    int end = t + 1;
    while (end < n && end - t < tile_tokens && plan.seq_index[end] == plan.seq_index[t]) ++end;
    begin.push_back(t);
    count.push_back(end - t);
    t = end;
  }
}

}  // namespace

PackedPlanLayout pack_plan(const BatchPlan& plan, const AttentionPlanSizes& sizes, std::vector<int32_t>& words) {
  const int n = plan.n_tokens();
  TERN_CHECK(plan.seq_index.size() == static_cast<size_t>(n) && plan.positions.size() == static_cast<size_t>(n) &&
             plan.kv_slots.size() == static_cast<size_t>(n));
  TERN_CHECK(sizes.span_tokens > 0 && sizes.tile_tokens > 0 && sizes.tc_tile_tokens > 0);

  std::vector<int32_t> tile_begin, tile_count, tile_spans, split_tile, split_span, partial_begin(n);
  std::vector<int32_t> tc_begin, tc_count;
  cut_tiles(plan, sizes.tile_tokens, tile_begin, tile_count);
  cut_tiles(plan, sizes.tc_tile_tokens, tc_begin, tc_count);
  int max_tile = 0, max_spans = 0, max_position = 0;
  for (size_t tile = 0; tile < tile_begin.size(); ++tile) {
    int max_pos = 0;
    for (int i = tile_begin[tile]; i < tile_begin[tile] + tile_count[tile]; ++i) {
      max_pos = std::max(max_pos, plan.positions[i]);
    }
    const int n_spans = max_pos / sizes.span_tokens + 1;
    max_tile = std::max(max_tile, tile_count[tile]);
    tile_spans.push_back(n_spans);
    max_spans = std::max(max_spans, n_spans);
    max_position = std::max(max_position, max_pos);
    for (int s = 0; s < n_spans; ++s) {
      split_tile.push_back(static_cast<int32_t>(tile));
      split_span.push_back(s);
    }
  }
  int64_t n_partials = 0;
  for (int t = 0; t < n; ++t) {
    TERN_CHECK(plan.positions[t] >= 0);
    partial_begin[t] = static_cast<int32_t>(n_partials);
    n_partials += plan.positions[t] / sizes.span_tokens + 1;
  }
  TERN_CHECK(n_partials < (int64_t{1} << 31));

  PackedPlanLayout l;
  l.n_tokens = n;
  l.n_seqs = plan.n_seqs();
  l.n_logit_rows = static_cast<int>(plan.logit_rows.size());
  l.n_tiles = static_cast<int>(tile_begin.size());
  l.n_split_items = static_cast<int>(split_tile.size());
  l.n_partials = static_cast<int>(n_partials);
  l.max_tile_tokens = max_tile;
  l.max_tile_spans = max_spans;
  l.max_position = max_position;
  l.n_tc_tiles = static_cast<int>(tc_begin.size());

  words.clear();
  auto append = [&words](const std::vector<int32_t>& v) {
    const int64_t offset = static_cast<int64_t>(words.size());
    words.insert(words.end(), v.begin(), v.end());
    return offset;
  };
  // Arrays whose length is fixed by the batch shape come first and the ones that grow with the
  // context last, so a decode loop keeps the same device addresses (and its CUDA graph) until
  // the context crosses a span boundary.
  l.token_ids = append(plan.token_ids);
  l.seq_index = append(plan.seq_index);
  l.positions = append(plan.positions);
  l.kv_slots = append(plan.kv_slots);
  l.token_partial_begin = append(partial_begin);
  l.logit_rows = append(plan.logit_rows);
  l.block_offsets = append(plan.block_offsets);
  l.tile_token_begin = append(tile_begin);
  l.tile_n_tokens = append(tile_count);
  l.tile_n_spans = append(tile_spans);
  l.tc_tile_token_begin = append(tc_begin);
  l.tc_tile_n_tokens = append(tc_count);
  l.split_tile = append(split_tile);
  l.split_span = append(split_span);
  l.block_ids = append(plan.block_ids);
  l.total = static_cast<int64_t>(words.size());
  return l;
}

}  // namespace tern::cuda
