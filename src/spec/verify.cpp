#include "spec/verify.h"

#include <algorithm>

namespace tern {
namespace {

float prob_of(const Candidates& c, int32_t id) {
  for (size_t i = 0; i < c.size(); ++i)
    if (c.ids[i] == id) return c.logits[i];
  return 0.0f;
}

// norm(max(0, p - q)) (unnormalized: Sampler::draw_at scales by the total).
Candidates residual(const Candidates& p, const Candidates& q_dist) {
  Candidates r = p;
  for (size_t i = 0; i < r.size(); ++i) {
    const float q = prob_of(q_dist, r.ids[i]);
    r.logits[i] = std::max(0.0f, r.logits[i] - q);
  }
  return r;
}

}  // namespace

bool coupled_verify(const Draft& draft, const Sampler& sampler) { return sampler.greedy() || draft.probs.empty(); }

VerifyOutcome verify_draft(const Draft& draft, const std::function<LogitRow(int)>& row, Sampler& sampler,
                           std::vector<int32_t>& history) {
  const size_t base = history.size();
  const int k = static_cast<int>(draft.tokens.size());
  const bool coupled = coupled_verify(draft, sampler);
  VerifyOutcome out;
  for (int i = 0; i < k; ++i) {
    const int32_t d = draft.tokens[i];
    if (coupled) {
      // Plain decoding's token at this position (verify.h): the argmax under greedy.
      const int32_t t = sampler.sample(row(i), history);
      if (t != d) {
        out.next = t;
        break;
      }
    } else {
      const uint64_t pos = history.size();
      const Candidates p = sampler.distribution(row(i), history);
      const Candidates& q = draft.probs[i];
      const float pd = prob_of(p, d);
      const float qd = prob_of(q, d);
      const bool accept =
          qd > 0.0f && sampler.uniform_at(pos, Sampler::Stream::kAccept) < std::min(1.0, static_cast<double>(pd) / qd);
      if (!accept) {
        Candidates r = residual(p, q);
        double mass = 0.0;
        for (float v : r.logits) mass += v;
        out.next = Sampler::draw_at(mass > 0.0 ? r : p, sampler.uniform_at(pos));
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
