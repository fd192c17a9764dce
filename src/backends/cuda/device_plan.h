// Host side of the per-step plan upload: packs a BatchPlan and the attention work lists derived
// from it into one int32 array, which begin_step copies to the device in a single transfer.
// Plain C++ (no CUDA), so the packing is testable anywhere.
//
// Attention work (attention.h): tokens are grouped into tiles of up to tile_tokens consecutive
// plan tokens of one sequence; a tile's context is cut at absolute positions into spans of
// span_tokens positions, 0 .. n_spans-1, n_spans = max position in the tile / span_tokens + 1.
// Split mode runs one block per (tile, span) item and stores one partial per (token, span), so
// each token owns position / span_tokens + 1 partial slots starting at token_partial_begin.
// The tensor-core prefill attention (attention_tc.h) has its own, larger tiles of up to
// tc_tile_tokens consecutive tokens of one sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/batch_plan.h"

namespace tern::cuda {

// The attention constants the packing depends on (kernels.h gives the backend's values).
struct AttentionPlanSizes {
  int span_tokens;     // context positions per split partial
  int tile_tokens;     // query tokens per tile of the batch-invariant kernel
  int tc_tile_tokens;  // query tokens per tile of the tensor-core prefill kernel
};

// Offsets (in int32 elements) of each array inside the packed plan, and the counts.
struct PackedPlanLayout {
  int64_t token_ids = 0, seq_index = 0, positions = 0, kv_slots = 0;
  int64_t block_offsets = 0, block_ids = 0, logit_rows = 0;
  int64_t tile_token_begin = 0, tile_n_tokens = 0, tile_n_spans = 0;
  int64_t split_tile = 0, split_span = 0, token_partial_begin = 0;
  int64_t tc_tile_token_begin = 0, tc_tile_n_tokens = 0;
  int64_t total = 0;  // elements in the packed array
  int n_tokens = 0, n_seqs = 0, n_logit_rows = 0;
  int n_tiles = 0, n_split_items = 0, n_partials = 0, max_tile_tokens = 0, n_tc_tiles = 0;
  int max_tile_spans = 0;  // host only: the most spans of one tile (the folded merge's plan)
  int max_position = 0;    // host only: the plan's last position (the chunk split's plan)
};

// Packs `plan` into `words` (resized).
// Preconditions (bugs if broken): the per-token arrays have n_tokens entries, positions >= 0.
PackedPlanLayout pack_plan(const BatchPlan& plan, const AttentionPlanSizes& sizes, std::vector<int32_t>& words);

}  // namespace tern::cuda
