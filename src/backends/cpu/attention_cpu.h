// Fast CPU attention over the paged KV cache.
//
// Each (token, kv head) attends to its positions in fixed chunks of kAttentionChunkTokens; each
// chunk gives a partial softmax (max, sum, weighted V) for the q heads that share the kv head, and
// the partials are merged in chunk order. Chunk boundaries are absolute positions, never derived
// from the thread count or the batch, so one long decode still spreads over every thread
// (flash-decoding style split-K) while a row's result stays bitwise the same however the batch is
// composed or split (the batch-invariance contract).
//
// Work units are (tile of up to kAttentionTileTokens consecutive tokens of one sequence, kv head,
// chunk): the tile's tokens share one conversion of the chunk's K and V rows (prefill reuses each
// K/V row across the tile instead of re-reading it per token), but every query's arithmetic is its
// own fixed sequence (attention_kernel.h). Threads take work items dynamically: one unit, or,
// when there are enough (tile, chunk) pairs to go round (long decodes), all kv heads of a
// (tile, chunk), so that a thread streams whole K/V rows. Which thread computes a unit, and with
// which others, never changes its bits.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "core/thread_pool.h"
#include "ops/backend.h"

namespace tern::cpu {

constexpr int kAttentionChunkTokens = 256;
constexpr int kAttentionTileTokens = 16;

class AttentionScratch {
 public:
  struct Free {
    void operator()(float* p) const;
  };
  struct ThreadBuffer {
    std::unique_ptr<float, Free> mem;
    int64_t floats = 0;
  };
  std::vector<float> partial;       // per (token, kv head, chunk): [group] max, [group] sum, [group * head_dim] acc
  std::vector<int64_t> unit_begin;  // first partial of each (token, kv head), then the total
  struct Item {
    int32_t t0, t1;  // tokens [t0, t1) of one sequence
    int32_t kv_head0, kv_head1;  // kv heads [kv_head0, kv_head1), one unit each, in order
    int32_t chunk;
  };
  std::vector<Item> items;
  struct Tile {
    int64_t t0, t1;      // tokens [t0, t1) of one sequence
    int32_t c_lo, c_hi;  // the chunks its tokens attend to, [c_lo, c_hi]
  };
  std::vector<Tile> tiles;
  std::vector<ThreadBuffer> thread_buffers;  // per thread: one unit's scratch
};

// Attention at active_isa(). Shapes as Backend::attention (validated by ops::attention).
void attention_fast(const Tensor& q, const KvLayerView& kv, const AttentionParams& p, const BatchPlan& plan,
                    Tensor& out, ThreadPool& pool, AttentionScratch& scratch);
// At a chosen level (tests). Precondition: isa_supported(isa). Levels may differ in the last bits.
void attention_fast_isa(Isa isa, const Tensor& q, const KvLayerView& kv, const AttentionParams& p,
                        const BatchPlan& plan, Tensor& out, ThreadPool& pool, AttentionScratch& scratch);

}  // namespace tern::cpu
