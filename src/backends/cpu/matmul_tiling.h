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

// Activation rows in full groups of NA use (NA x NW) tiles, weight rows outermost so a weight tile
// stays in L1 while all activation rows stream past it (prefill). Left-over activation rows (all of
// them at n < NA, i.e. decode) use (1 x NW1) tiles: NW1 independent weight rows give the
// instruction-level parallelism a single activation row lacks.
template <int NA, int NW, int NW1, class K>
void run_tiles(const K& k, int64_t n_rows, int64_t n) {
  const int64_t n_full = n / NA * NA;
  if (n_full > 0) {
    int64_t r = 0;
    for (; r + NW <= n_rows; r += NW)
      for (int64_t i = 0; i < n_full; i += NA) k.template tile<NA, NW>(r, i);
    for (; r < n_rows; ++r)
      for (int64_t i = 0; i < n_full; i += NA) k.template tile<NA, 1>(r, i);
  }
  if (n_full < n) {
    int64_t r = 0;
    for (; r + NW1 <= n_rows; r += NW1)
      for (int64_t i = n_full; i < n; ++i) k.template tile<1, NW1>(r, i);
    for (; r < n_rows; ++r)
      for (int64_t i = n_full; i < n; ++i) k.template tile<1, 1>(r, i);
  }
}

}  // namespace
}  // namespace tern::cpu::detail
