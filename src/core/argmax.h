// The greedy pick: the first index of the largest value. One definition for the host sampler
// (sampling/sampler.h) and every backend's argmax_rows (ops/backend.h), so device-side greedy
// sampling picks exactly the token the host would.
//
// As a left-to-right scan with a strict `>`: ties go to the lowest index, a NaN never replaces the
// running best, and a NaN at index 0 is never replaced (nothing compares greater than it). A
// parallel reduction gets the same answer as: 0 if x[0] is NaN, else the lowest index holding the
// maximum of the non-NaN values.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tern {

inline int32_t first_argmax(const float* x, size_t n) {
  int32_t best = 0;
  for (size_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = static_cast<int32_t>(i);
  return best;
}

}  // namespace tern
