// Acceptance of a draft against the target model's logits: the verify executor's rule.
//
// Every draw's uniform is a function of (seed, absolute position) (sampling/sampler.h), so plain
// decoding's token at a position is fixed before anyone drafts. Two rules follow:
//
// - Coupled verification, for greedy and for every point-mass proposal (Draft::probs empty: the
//   n-gram and suffix drafters, a draft model under greedy): sample the target's token at each
//   draft position exactly as plain decoding would (Sampler::sample, the position's uniform),
//   accept the draft token iff it equals that token, and stop at the first mismatch, emitting the
//   sampled token. The emitted tokens are by construction the non-speculative ones, so output is
//   token-identical with speculation on or off, whatever was drafted (drafting depends on
//   wall-clock cost models and on the other sequences of an Engine step). It is also the
//   rejection rule for a point mass: P(accept d) = p(d) = min(1, p(d) / q(d)) with q(d) = 1, and
//   on a mismatch the sampled token is distributed as p restricted to tokens != d, which is
//   norm(max(0, p - q)).
// - Standard speculative rejection sampling (Leviathan et al. 2023; Chen et al. 2023) for
//   proposals with a distribution q (a draft model that samples): accept d_i when
//   u_accept(pos) < min(1, p(d_i) / q(d_i)), else draw norm(max(0, p - q)) with u_draw(pos). The
//   output distribution equals the target's (distribution-exact) but the tokens are NOT the
//   non-speculative ones for a given seed.
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

// Whether verify_draft checks `draft` by the coupled rule (it then needs only what
// Sampler::sample needs of each row, not whole distributions).
bool coupled_verify(const Draft& draft, const Sampler& sampler);

// row(i): the target's result after feed[i], where feed = [pending] + draft.tokens (k + 1 rows);
// logits, or only the argmax when the sampler is argmax_only(), or candidates (Sampler::sample).
// history: every token before the draft (prompt + generated + pending), so draft token i sits at
// absolute position history.size() + i; left as it was.
VerifyOutcome verify_draft(const Draft& draft, const std::function<LogitRow(int)>& row, Sampler& sampler,
                           std::vector<int32_t>& history);

}  // namespace tern
