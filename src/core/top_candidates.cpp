#include "core/top_candidates.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "core/check.h"

namespace tern {

void top_candidates_row(const float* x, int64_t n, const CandidateRows& out, int r) {
  TERN_CHECK(out.count >= 1 && out.count <= n && out.count <= kMaxCandidates);
  const size_t c = static_cast<size_t>(out.count);
  // A min-heap of the best c keys so far. Ids grow along the scan, so a later element can only
  // enter a full heap with a strictly larger value than the heap's worst: one float compare for
  // nearly every element of a real logit row.
  std::vector<uint64_t> heap;
  heap.reserve(c);
  uint32_t flags = 0;
  for (int64_t j = 0; j < n; ++j) {
    const float v = x[j];
    if (v != v) flags |= kRowHasNan;
    const uint64_t key = candidate_key(v, j);
    if (heap.size() < c) {
      heap.push_back(key);
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    } else if (key > heap.front()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      heap.back() = key;
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  }
  if (x[0] != x[0]) flags |= kFirstIsNan;
  std::sort(heap.begin(), heap.end(), std::greater<>());
  int32_t* ids = out.ids + static_cast<int64_t>(r) * out.count;
  float* logits = out.logits + static_cast<int64_t>(r) * out.count;
  for (size_t i = 0; i < c; ++i) {
    ids[i] = candidate_key_id(heap[i]);
    logits[i] = x[ids[i]];
  }
  out.flags[r] = flags;
  if (out.exp_sums != nullptr) {
    const float t = out.temperatures != nullptr ? out.temperatures[r] : 0.0f;
    double sum = 0.0;
    if (t > 0.0f) {
      // The host sampler's terms (sampler.cpp: l /= T, then exp(l - max) in float).
      const float mx = logits[0] / t;
      for (int64_t j = 0; j < n; ++j) sum += static_cast<double>(std::exp(x[j] / t - mx));
    }
    out.exp_sums[r] = sum;
  }
}

}  // namespace tern
