// The attention kernels that walk the plan's tensor-core tiles (DevicePlan::tc_tile_*: up to
// kAttnTcTileTokens consecutive tokens of one sequence): the opt-in tensor-core prefill
// (attention_tc.cu), the invariant tensor-core attention's fused mode (attention_mma.cu) and the
// register-tiled attention (attention_tiled.cu). What they share: the cache shapes they are
// compiled for, and how blocks map onto (KV head, slice of its q heads, tile, token sub-tile).
#pragma once

#include <cstdint>

#include "backends/cuda/kernels.h"

namespace tern::cuda {

// f16 caches at head_dim 64 or 128, whole GQA groups, 16-byte aligned K/V rows.
inline bool tc_tile_shape_supported(const AttentionArgs& a) {
  return a.kv_dtype == DType::F16 && (a.head_dim == 64 || a.head_dim == 128) && a.n_kv_heads > 0 &&
         a.n_heads % a.n_kv_heads == 0 && a.k_cache_stride % 8 == 0 && a.v_cache_stride % 8 == 0 &&
         reinterpret_cast<uintptr_t>(a.k_cache) % 16 == 0 && reinterpret_cast<uintptr_t>(a.v_cache) % 16 == 0;
}

// blockIdx.y = KV head x slice (a group's q heads cut into balanced slices of at most max_heads),
// blockIdx.x = tile x sub-tile of rows / heads_per_block tokens. The same on the host (grids) and
// in the kernels.
struct TcTileMap {
  int group, n_slices, heads_per_block, tokens_per_block, n_sub;
  TERN_HOST_DEVICE TcTileMap(const AttentionArgs& a, int max_heads, int rows) {
    group = a.n_heads / a.n_kv_heads;
    n_slices = (group + max_heads - 1) / max_heads;
    heads_per_block = (group + n_slices - 1) / n_slices;  // the last slice may have fewer
    tokens_per_block = rows / heads_per_block;
    n_sub = (kAttnTcTileTokens + tokens_per_block - 1) / tokens_per_block;
  }
};

// One block's rows: plan tokens [t0, t0 + nt), q heads [h0, h0 + nh) of KV head kv_head; row r is
// token r / nh, head r % nh.
struct TcTileWork {
  int kv_head, h0, nh, t0, nt;
};

#ifdef __CUDACC__
// Block (x, y)'s rows, x taking the longest contexts (the last tiles, their last sub-tiles) first,
// which shortens the causal tail. False where the tile is shorter than this sub-tile.
__device__ __forceinline__ bool tc_tile_work(const TcTileMap& map, const DevicePlan& P, int x, int y, TcTileWork& w) {
  w.kv_head = y / map.n_slices;
  const int slice = y % map.n_slices;
  w.h0 = w.kv_head * map.group + slice * map.heads_per_block;
  w.nh = min(map.heads_per_block, map.group - slice * map.heads_per_block);
  const int tile = P.n_tc_tiles - 1 - x / map.n_sub;
  const int sub = map.n_sub - 1 - x % map.n_sub;
  const int tile_nt = P.tc_tile_n_tokens[tile];
  if (sub * map.tokens_per_block >= tile_nt) return false;
  w.t0 = P.tc_tile_token_begin[tile] + sub * map.tokens_per_block;
  w.nt = min(map.tokens_per_block, tile_nt - sub * map.tokens_per_block);
  return true;
}
#endif

}  // namespace tern::cuda
