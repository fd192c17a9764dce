#include "spec/verify.h"

#include <algorithm>

namespace tern {
namespace {

float prob_of(const Candidates& c, int32_t id) {
  for (size_t i = 0; i < c.size(); ++i)
    if (c.ids[i] == id) return c.logits[i];
  return 0.0f;
}

// norm(max(0, p - q)): q is a point mass at `draft_token` when q_dist is null.
Candidates residual(const Candidates& p, const Candidates* q_dist, int32_t draft_token) {
  Candidates r = p;
  for (size_t i = 0; i < r.size(); ++i) {
    const float q = q_dist ? prob_of(*q_dist, r.ids[i]) : (r.ids[i] == draft_token ? 1.0f : 0.0f);
    r.logits[i] = std::max(0.0f, r.logits[i] - q);
  }
  return r;
}

}  // namespace

VerifyOutcome verify_draft(const Draft& draft, const std::function<LogitRow(int)>& row, Sampler& sampler,
                           std::vector<int32_t>& history) {
  const size_t base = history.size();
  const int k = static_cast<int>(draft.tokens.size());
  VerifyOutcome out;
  for (int i = 0; i < k; ++i) {
    const int32_t d = draft.tokens[i];
    if (sampler.greedy()) {
      const int32_t t = sampler.sample(row(i), history);
      if (t != d) {
        out.next = t;
        break;
      }
    } else {
      const Candidates p = sampler.distribution(row(i), history);
      const Candidates* q = draft.probs.empty() ? nullptr : &draft.probs[i];
      const float pd = prob_of(p, d);
      const float qd = q ? prob_of(*q, d) : 1.0f;
      const bool accept = qd > 0.0f && sampler.uniform() < std::min(1.0, static_cast<double>(pd) / qd);
      if (!accept) {
        Candidates r = residual(p, q, d);
        double mass = 0.0;
        for (float v : r.logits) mass += v;
        out.next = mass > 0.0 ? sampler.draw(r) : sampler.draw(p);
        break;
      }
    }
    history.push_back(d);
    ++out.n_accepted;
  }
  if (out.n_accepted == k) out.next = sampler.sample(row(k), history);
  history.resize(base);
  return out;
}

}  // namespace tern
