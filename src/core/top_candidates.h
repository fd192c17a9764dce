// Candidates for sampling: per logit row, the C entries the host sampler would see first (logit
// descending, ties to the lower id: sampling/sampler.cpp's order), plus what the host needs to
// prove that sampling from them alone picks the token the whole row would (sampling/
// candidate_sampling.h). One definition of the order for every backend's top_candidates
// (ops/backend.h) and the tests: the CUDA kernel (top_candidates.cu) must equal this bit for bit.
//
// The order is that of a 64-bit key: the float's bits mapped to an unsigned order (negative
// values flipped, -0 taken as +0: they compare equal, so ties go by id) in the high word,
// 0xffffffff - id in the low word. A NaN gets 0 in the high word: below every number, -inf
// included, and NaNs among themselves by id. Rows holding a NaN are flagged and the host sampler
// never uses their candidates (its own sort has no defined order for NaNs), so that ranking only
// needs to be the same everywhere, not meaningful.
#pragma once

#include <cstdint>

namespace tern {

inline constexpr uint32_t kRowHasNan = 1u;    // some element of the row is NaN
inline constexpr uint32_t kFirstIsNan = 2u;   // element 0 is NaN (then first_argmax is 0)
inline constexpr int kMaxCandidates = 1024;   // the most a backend returns per row

inline uint64_t candidate_key(float v, int64_t id) {
  uint32_t bits = 0;
  static_assert(sizeof(bits) == sizeof(v));
  __builtin_memcpy(&bits, &v, sizeof(bits));
  uint32_t ordered = 0;
  if (v != v) {
    ordered = 0;
  } else {
    if (v == 0.0f) bits = 0;
    ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  }
  return (static_cast<uint64_t>(ordered) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}
inline int32_t candidate_key_id(uint64_t key) { return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(key)); }

// Where a backend writes the candidates of `rows` logit rows (host memory).
struct CandidateRows {
  int rows = 0;
  int count = 0;              // C per row: 1 <= count <= min(kMaxCandidates, cols)
  int32_t* ids = nullptr;     // [rows, count], best first
  float* logits = nullptr;    // [rows, count]: the row's values at ids, bit for bit
  uint32_t* flags = nullptr;  // [rows]: kRowHasNan | kFirstIsNan
  // Optional (null: not computed): per row with temperatures[r] > 0, the softmax normalizer the
  // host computes, sum over every column j of exp(x[j] / T - x_max / T) with each division and
  // the subtraction rounded to float as the host does, summed in double. Backends may differ from
  // each other and from the host's sorted-order sum by the exp implementation (a few ulp per
  // term) and double rounding; candidate_sampling.h allows a relative 1e-5.
  const float* temperatures = nullptr;  // [rows]; <= 0: no sum for that row
  double* exp_sums = nullptr;           // [rows]
};

// The first_argmax (core/argmax.h) of a row, from its candidates: the best non-NaN entry unless
// element 0 is NaN.
inline int32_t candidates_argmax(const CandidateRows& c, int r) {
  return (c.flags[r] & kFirstIsNan) ? 0 : c.ids[static_cast<int64_t>(r) * c.count];
}

// The reference: one row of n values into entry r of `out` (in place: reads x only).
void top_candidates_row(const float* x, int64_t n, const CandidateRows& out, int r);

}  // namespace tern
