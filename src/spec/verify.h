// Acceptance of a draft against the target model's logits: the verify executor's rule.
// Greedy: accept while the target's choice equals the draft token; the first disagreement (or
// the token after a fully accepted draft) is the target's own choice, so the output is exactly
// the non-speculative greedy output. Sampling: standard speculative rejection sampling
// (Leviathan et al. 2023; Chen et al. 2023): accept d_i with probability min(1, p(d_i)/q(d_i));
// on rejection draw from norm(max(0, p - q)); the output distribution equals the target's.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "sampling/sampler.h"
#include "spec/draft_source.h"

namespace tern {

struct VerifyOutcome {
  int n_accepted = 0;  // draft tokens kept
  int32_t next = -1;   // the target's token after them (becomes the pending token)
};

// row(i): the target's result after feed[i], where feed = [pending] + draft.tokens (k + 1 rows);
// logits, or only the argmax when the sampler is argmax_only(), or candidates (Sampler::sample).
// history: every token before the draft (prompt + generated + pending); left as it was.
VerifyOutcome verify_draft(const Draft& draft, const std::function<LogitRow(int)>& row, Sampler& sampler,
                           std::vector<int32_t>& history);

}  // namespace tern
