// The sampler's truncating stages as functions (sampler.cpp wraps each in a SamplerStage), shared
// with candidate_sampling.cpp, which must apply them exactly as the whole-row path does.
#pragma once

#include "sampling/sampler.h"

namespace tern::stages {

// Sorts c (logit descending, ties to the lower id) and replaces its logits by their softmax.
void softmax_in_place(Candidates& c);
// Keeps the k best (no-op for k <= 0 or k >= c.size()).
void top_k(Candidates& c, int k);
// Keeps the smallest prefix (by probability) whose mass reaches p (no-op for p >= 1).
void top_p(Candidates& c, float p);
// Keeps tokens whose logit is at least max + ln(p) (no-op for p <= 0).
void min_p(Candidates& c, float p);

}  // namespace tern::stages
