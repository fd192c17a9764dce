// Internal to CPU attention: the interface between the scheduler (attention_cpu.cpp) and the
// per-ISA unit kernels (attention_kernel.cpp, attention_kernel_avx512.cpp).
//
// A unit is (a tile of consecutive tokens of one sequence, one kv head, one chunk of context
// positions). Its kernel converts the chunk's K and V rows once and computes, for every query
// vector (token, q head of the kv head's group) a partial softmax over the query's own positions
// in the chunk. The tile only shares those conversions: each query vector's float operations are
// a fixed sequence that depends only on its q row, its position range and the KV contents, so
// the result is bitwise the same whether the token is decoded alone or prefilled in any tile
// (batch invariance; see attention_cpu.h). A kernel may move data differently for small and big
// units (the AVX-512 one reads V straight from the cache for decode-sized units and from
// converted scratch otherwise), never the arithmetic. The per-query sequence, at a given ISA:
//   s_j   = (sum over d in order of q[d] * k_j[d]) * scale     (then softcap, if on)
//   m     = max_j s_j,  p_j = exp(s_j - m),  l = sum of p_j in 16-lane groups by j, reduced once
//   acc   = sum over j in order of p_j * v_j                    (per column)
// for j in [j0, j1), the query's positions in this chunk.
#pragma once

#include <cstdint>

#include "backends/cpu/cpu_features.h"
#include "ops/backend.h"

namespace tern::cpu::detail {

// Positions are handled in 16-key tiles aligned to absolute multiples of 16.
constexpr int kKeyTile = 16;

// One token of a unit's tile.
struct UnitQuery {
  const float* q = nullptr;  // the token's q row at the kv head's first q head: [group, head_dim]
  int j0 = 0, j1 = 0;        // its positions in this chunk, [j0, j1), non-empty
  float* partial = nullptr;  // out: [group] max, [group] sum, [group, head_dim] unnormalized acc
};

struct AttentionUnit {
  const KvLayerView* kv = nullptr;
  const int32_t* blocks = nullptr;  // the sequence's block table
  int64_t kv_col = 0;               // first column of the kv head in a K/V row
  int head_dim = 0;
  int group = 0;                    // q heads per kv head
  float scale = 0.0f;
  float softcap = 0.0f;             // 0 = off
  const UnitQuery* queries = nullptr;
  int n_queries = 0;
  int key_lo = 0, key_hi = 0;       // the union of the queries' ranges
  float* scratch = nullptr;         // unit_scratch_floats(...) floats, 64-byte aligned
};

// Scratch one unit needs (converted K and V of up to kv_chunk positions and the scores).
int64_t unit_scratch_floats(int head_dim, int group, int max_queries, int kv_chunk);

using AttendUnitFn = void (*)(const AttentionUnit& u);
void attend_unit_portable(const AttentionUnit& u);
void attend_unit_avx512(const AttentionUnit& u);

// The kernel for `isa` (the AVX-512 one needs only F + F16C, which kAvx512 implies).
AttendUnitFn attend_unit_for(Isa isa);

}  // namespace tern::cpu::detail
