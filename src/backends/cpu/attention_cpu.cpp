// The attention scheduler: plans the units of one call, runs them on the pool (dynamically, with
// whichever threads join: a unit's result does not depend on the thread that computes it) and merges each (token, kv
// head)'s chunk partials in chunk order.
#include "backends/cpu/attention_cpu.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>

#include "backends/cpu/attention_kernel.h"
#include "core/check.h"

namespace tern::cpu {
namespace {

// Work items per thread below which kv heads get one item each (parallelism before locality).
constexpr int64_t kItemsPerThread = 4;

// A token's attended positions [first, n_ctx) and its chunks [c0, c1].
struct TokenSpan {
  int first, n_ctx, c0, c1;
};

TokenSpan token_span(const BatchPlan& plan, const AttentionParams& p, int64_t t) {
  TokenSpan s;
  s.n_ctx = plan.positions[t] + 1;
  s.first = p.sliding_window > 0 ? std::max(0, s.n_ctx - p.sliding_window) : 0;
  s.c0 = s.first / kAttentionChunkTokens;
  s.c1 = (s.n_ctx - 1) / kAttentionChunkTokens;
  return s;
}

float* thread_buffer(AttentionScratch::ThreadBuffer& b, int64_t floats) {
  if (b.floats < floats) {
    const size_t bytes = (static_cast<size_t>(floats) * sizeof(float) + 63) / 64 * 64;
    b.mem.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    TERN_CHECK(b.mem != nullptr);
    b.floats = floats;
  }
  return b.mem.get();
}

// out[t, heads of kv head g] = the merge of the pair's chunk partials, in chunk order.
void merge_pair(const AttentionScratch& s, const AttentionParams& p, int64_t pair, int64_t floats_per_partial,
                Tensor& out) {
  const int group = p.n_heads / p.n_kv_heads, hd = p.head_dim;
  const int64_t t = pair / p.n_kv_heads;
  const int g = static_cast<int>(pair % p.n_kv_heads);
  const int64_t u0 = s.unit_begin[pair], u1 = s.unit_begin[pair + 1];
  for (int h = 0; h < group; ++h) {
    float* o = out.row<float>(t) + static_cast<int64_t>(g * group + h) * hd;
    const float* first = s.partial.data() + u0 * floats_per_partial;
    if (u1 - u0 == 1) {  // one chunk: no rescaling
      const float inv = 1.0f / first[group + h];
      const float* acc = first + 2 * group + static_cast<int64_t>(h) * hd;
      for (int d = 0; d < hd; ++d) o[d] = acc[d] * inv;
      continue;
    }
    float mx = -INFINITY;
    for (int64_t un = u0; un < u1; ++un) mx = std::max(mx, s.partial[un * floats_per_partial + h]);
    float denom = 0.0f;
    std::fill(o, o + hd, 0.0f);
    for (int64_t un = u0; un < u1; ++un) {
      const float* part = s.partial.data() + un * floats_per_partial;
      const float w = std::exp(part[h] - mx);
      denom += part[group + h] * w;
      const float* acc = part + 2 * group + static_cast<int64_t>(h) * hd;
      for (int d = 0; d < hd; ++d) o[d] += acc[d] * w;
    }
    const float inv = 1.0f / denom;
    for (int d = 0; d < hd; ++d) o[d] *= inv;
  }
}

}  // namespace

void AttentionScratch::Free::operator()(float* p) const { std::free(p); }

void attention_fast(const Tensor& q, const KvLayerView& kv, const AttentionParams& p, const BatchPlan& plan,
                    Tensor& out, ThreadPool& pool, AttentionScratch& scratch) {
  attention_fast_isa(active_isa(), q, kv, p, plan, out, pool, scratch);
}

void attention_fast_isa(Isa isa, const Tensor& q, const KvLayerView& kv, const AttentionParams& p,
                        const BatchPlan& plan, Tensor& out, ThreadPool& pool, AttentionScratch& s) {
  TERN_CHECK(isa_supported(isa));
  const int group = p.n_heads / p.n_kv_heads;
  const int hd = p.head_dim;
  const int64_t n_tokens = q.rows;
  const int64_t floats_per_partial = 2 * group + static_cast<int64_t>(group) * hd;

  // Partials: per (token, kv head), one per chunk of the token's span.
  s.unit_begin.resize(static_cast<size_t>(n_tokens * p.n_kv_heads + 1));
  int64_t n_partials = 0;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const TokenSpan span = token_span(plan, p, t);
    for (int g = 0; g < p.n_kv_heads; ++g) {
      s.unit_begin[t * p.n_kv_heads + g] = n_partials;
      n_partials += span.c1 - span.c0 + 1;
    }
  }
  s.unit_begin.back() = n_partials;
  s.partial.resize(static_cast<size_t>(n_partials * floats_per_partial));

  // Units: tiles of consecutive tokens of one sequence, x kv heads x the tile's chunks. When there
  // are enough (tile, chunk) pairs to keep every thread busy, one work item takes all kv heads of
  // its chunk: a thread then reads whole K/V rows of consecutive positions (sequential memory, one
  // stream for the prefetchers) instead of each head's slice being fetched by whichever thread
  // took it. Neither grouping nor order changes any unit's bits.
  std::vector<AttentionScratch::Tile>& tiles = s.tiles;
  tiles.clear();
  int64_t n_tile_chunks = 0;
  for (int64_t t0 = 0; t0 < n_tokens;) {
    int64_t t1 = t0 + 1;
    while (t1 < n_tokens && t1 - t0 < kAttentionTileTokens && plan.seq_index[t1] == plan.seq_index[t0]) ++t1;
    int c_lo = INT32_MAX, c_hi = -1;
    for (int64_t t = t0; t < t1; ++t) {
      const TokenSpan span = token_span(plan, p, t);
      c_lo = std::min(c_lo, span.c0);
      c_hi = std::max(c_hi, span.c1);
    }
    tiles.push_back({t0, t1, c_lo, c_hi});
    n_tile_chunks += c_hi - c_lo + 1;
    t0 = t1;
  }
  const int heads_per_item = n_tile_chunks >= kItemsPerThread * pool.n_threads() ? p.n_kv_heads : 1;
  s.items.clear();
  for (const AttentionScratch::Tile& tile : tiles)
    for (int c = tile.c_lo; c <= tile.c_hi; ++c)
      for (int g = 0; g < p.n_kv_heads; g += heads_per_item)
        s.items.push_back({static_cast<int32_t>(tile.t0), static_cast<int32_t>(tile.t1), g, g + heads_per_item, c});

  const detail::AttendUnitFn kernel = detail::attend_unit_for(isa);
  const int64_t scratch_floats =
      detail::unit_scratch_floats(hd, group, kAttentionTileTokens, kAttentionChunkTokens);
  const int64_t n_items = static_cast<int64_t>(s.items.size());
  const int n_threads = static_cast<int>(std::min<int64_t>(pool.n_threads(), n_items));
  s.thread_buffers.resize(std::max<size_t>(s.thread_buffers.size(), static_cast<size_t>(pool.n_threads())));
  std::atomic<int64_t> next_item{0};
  // One unit: the item's tokens that attend to its chunk, at kv head g.
  auto run_unit = [&](const AttentionScratch::Item& item, int g, detail::UnitQuery* queries, float* buffer) {
    const int chunk_lo = item.chunk * kAttentionChunkTokens, chunk_hi = chunk_lo + kAttentionChunkTokens;
    detail::AttentionUnit u;
    u.kv = &kv;
    u.blocks = plan.block_ids.data() + plan.block_offsets[plan.seq_index[item.t0]];
    u.kv_col = static_cast<int64_t>(g) * hd;
    u.head_dim = hd;
    u.group = group;
    u.scale = p.scale;
    u.softcap = p.logit_softcap;
    u.key_lo = INT32_MAX;
    u.key_hi = -1;
    u.scratch = buffer;
    int n = 0;
    for (int64_t t = item.t0; t < item.t1; ++t) {
      const TokenSpan span = token_span(plan, p, t);
      if (item.chunk < span.c0 || item.chunk > span.c1) continue;
      detail::UnitQuery& uq = queries[n++];
      uq.q = q.row<float>(t) + static_cast<int64_t>(g * group) * hd;
      uq.j0 = std::max(span.first, chunk_lo);
      uq.j1 = std::min(span.n_ctx, chunk_hi);
      const int64_t pair = t * p.n_kv_heads + g;
      uq.partial = s.partial.data() + (s.unit_begin[pair] + item.chunk - span.c0) * floats_per_partial;
      u.key_lo = std::min(u.key_lo, uq.j0);
      u.key_hi = std::max(u.key_hi, uq.j1);
    }
    if (n == 0) return;
    u.queries = queries;
    u.n_queries = n;
    kernel(u);
  };
  pool.run_dynamic([&](int thread) {
    if (thread >= n_threads) return;
    float* buffer = thread_buffer(s.thread_buffers[thread], scratch_floats);
    detail::UnitQuery queries[kAttentionTileTokens];
    for (int64_t i = next_item.fetch_add(1, std::memory_order_relaxed); i < n_items;
         i = next_item.fetch_add(1, std::memory_order_relaxed)) {
      const AttentionScratch::Item& item = s.items[i];
      for (int g = item.kv_head0; g < item.kv_head1; ++g) run_unit(item, g, queries, buffer);
    }
  });

  // Merge. Prefill-sized calls merge in parallel (pairs are independent); decode on this thread.
  const int64_t n_pairs = n_tokens * p.n_kv_heads;
  auto merge_range = [&](int64_t b, int64_t e) {
    for (int64_t pair = b; pair < e; ++pair) merge_pair(s, p, pair, floats_per_partial, out);
  };
  if (n_tokens >= 16) {
    pool.parallel_for(n_pairs, 8, merge_range);
  } else {
    merge_range(0, n_pairs);
  }
}

}  // namespace tern::cpu
