// The DraftSource seam: anything that proposes tokens for the verify executor (engine/session.cpp)
// to check in one batched forward. Sources: n-gram prompt lookup, suffix tree, a draft model.
// The invariant the engine keeps for every source: greedy output with speculation equals greedy
// output without it; so does seeded sampled output for point-mass proposals (empty probs: the
// coupled rule, spec/verify.h); sampled drafts with a distribution keep the output distribution
// (rejection sampling) but not the tokens.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "sampling/sampler.h"

namespace tern {

struct Draft {
  std::vector<int32_t> tokens;
  // The draft's distribution q_i at each proposed token, for sampled drafts (a draft model);
  // empty when each token is proposed with certainty (lookup drafters, a greedy draft model:
  // q = a point mass, verified by the coupled rule and token-identical to plain decoding).
  std::vector<Candidates> probs;
};

class DraftSource {
 public:
  virtual ~DraftSource() = default;
  virtual std::string_view name() const = 0;
  // A new generation starts from `prompt` (every token before the first generated one).
  virtual void prefill(std::span<const int32_t> prompt) = 0;
  // Proposes at most max_tokens tokens to follow `context` (prompt + generated so far, ending
  // with the pending token). Zero tokens means: skip drafting this step.
  virtual Draft draft(std::span<const int32_t> context, int max_tokens) = 0;
  // Outcome of the last draft(): n_drafted proposed (its returned length), n_accepted kept.
  virtual void commit(int n_drafted, int n_accepted) = 0;
  // The generation ended; context = prompt + every generated token. Sources that learn across
  // requests (the suffix drafter) record it here.
  virtual void end(std::span<const int32_t> context) {}
};

}  // namespace tern
