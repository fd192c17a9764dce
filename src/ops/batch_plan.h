// The one batch shape. Every forward pass (prefill chunk, decode step, speculative verify, a
// mixed multi-session batch) is a flat list of tokens, each with (sequence, position) and the KV
// slot its K/V go to, plus per-sequence block tables in CSR form and the rows that need logits.
// The host builds one plan per step; the backend uploads it once (Backend::begin_step) and every
// layer reuses it.
#pragma once

#include <cstdint>
#include <vector>

namespace tern {

struct BatchPlan {
  // Per token, [n_tokens]:
  std::vector<int32_t> token_ids;  // vocabulary ids
  std::vector<int32_t> seq_index;  // index into the per-sequence arrays below
  std::vector<int32_t> positions;  // absolute position in its sequence; attends to 0..position
  std::vector<int32_t> kv_slots;   // block_id * block_tokens + offset where its K/V are written
  // Per sequence, CSR: blocks of sequence s are block_ids[block_offsets[s] .. block_offsets[s+1]).
  std::vector<int32_t> block_offsets;  // [n_seqs + 1]
  std::vector<int32_t> block_ids;
  // Rows (token indices) whose logits the caller wants, ascending.
  std::vector<int32_t> logit_rows;

  int n_tokens() const { return static_cast<int>(token_ids.size()); }
  int n_seqs() const { return block_offsets.empty() ? 0 : static_cast<int>(block_offsets.size()) - 1; }
  int max_position() const {
    int m = -1;
    for (int32_t p : positions) m = p > m ? p : m;
    return m;
  }
};

}  // namespace tern
