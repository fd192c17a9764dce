// Fast CPU attention over the paged KV cache.
//
// Work is split into units of (token, kv head, context chunk of kChunkTokens positions). Each unit
// computes a partial softmax (max, sum, weighted V) for the q heads that share the kv head; the
// partials of a (token, kv head) are then merged in chunk order. Chunk boundaries are fixed
// positions, never derived from the thread count or the batch, so a row's result is bitwise the
// same however the batch is composed or split (the batch-invariance contract), and one long
// decode still spreads over every thread (flash-decoding style split-K).
#pragma once

#include <vector>

#include "core/thread_pool.h"
#include "ops/backend.h"

namespace tern::cpu {

constexpr int kAttentionChunkTokens = 256;

class AttentionScratch {
 public:
  std::vector<float> partial;  // per unit: [group] max, [group] sum, [group * head_dim] acc
  std::vector<int64_t> unit_begin;  // first unit of each (token, kv head)
  std::vector<std::vector<float>> thread_scores;  // per thread: [group, kAttentionChunkTokens]
};

void attention_fast(const Tensor& q, const KvLayerView& kv, const AttentionParams& p, const BatchPlan& plan,
                    Tensor& out, ThreadPool& pool, AttentionScratch& scratch);

}  // namespace tern::cpu
