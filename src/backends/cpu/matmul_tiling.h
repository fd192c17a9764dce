// The tile walk every SIMD matmul kernel shares. A kernel supplies
//   template <int NA, int NW> void tile(int64_t r0, int64_t i0) const;
// computing the outputs of activation rows [i0, i0 + NA) against weight rows [r0, r0 + NW).
// Tiles only decide which loads are shared; each output's arithmetic is the kernel's fixed
// per-output sequence, so any tiling gives the same bits (batch invariance, matmul.h).
//
// note: internal linkage on purpose; this header is compiled under several ISA flag sets.
#pragma once

#include <cstdint>

namespace tern::cpu::detail {
namespace {

// k.tile<R, NW>(r0, i0) for a runtime R in [2, NA), instantiated for each.
template <int NA, int NW, class K>
inline void tile_partial(const K& k, int rows, int64_t r0, int64_t i0) {
  if constexpr (NA > 2) {
    if (rows == NA - 1) {
      k.template tile<NA - 1, NW>(r0, i0);
    } else {
      tile_partial<NA - 1, NW>(k, rows, r0, i0);
    }
  }
}

// Activation rows in groups of NA use (NA x NW) tiles, weight rows outermost so a weight tile stays
// in L1 while every activation row streams past it (prefill); a last group of 2..NA-1 rows uses
// an (R x NW) tile. A single activation row (all of decode) uses (1 x NW1) tiles: NW1 independent
// weight rows give the instruction-level parallelism one activation row lacks.
template <int NA, int NW, int NW1, class K>
void run_tiles(const K& k, int64_t n_rows, int64_t n) {
  const int64_t n_full = n / NA * NA;
  const int rem = static_cast<int>(n - n_full);
  if (n_full > 0 || rem > 1) {
    int64_t r = 0;
    for (; r + NW <= n_rows; r += NW) {
      for (int64_t i = 0; i < n_full; i += NA) k.template tile<NA, NW>(r, i);
      if (rem > 1) tile_partial<NA, NW>(k, rem, r, n_full);
    }
    for (; r < n_rows; ++r) {
      for (int64_t i = 0; i < n_full; i += NA) k.template tile<NA, 1>(r, i);
      if (rem > 1) tile_partial<NA, 1>(k, rem, r, n_full);
    }
  }
  if (rem == 1) {
    int64_t r = 0;
    for (; r + NW1 <= n_rows; r += NW1) k.template tile<1, NW1>(r, n - 1);
    for (; r < n_rows; ++r) k.template tile<1, 1>(r, n - 1);
  }
}

}  // namespace
}  // namespace tern::cpu::detail
