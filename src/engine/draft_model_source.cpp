#include "engine/draft_model_source.h"

namespace tern {
namespace {
SamplerParams draft_sampling(SamplerParams p) {
  p.seed ^= 0x5DEECE66Dull;  // its own random stream, independent of the verifier's
  return p;
}
}  // namespace

DraftModelSource::DraftModelSource(Model& draft, KvPool& pool, const SamplerParams& sampling)
    : session_(draft, pool, nullptr, SessionOptions{0, false}), sampler_(draft_sampling(sampling)) {}

void DraftModelSource::prefill(std::span<const int32_t> prompt) {
  // The prompt's last token is the first thing the draft feeds, so prefill everything before it.
  if (prompt.size() > 1) {
    GenerateOptions o;
    (void)session_.prefill(prompt.first(prompt.size() - 1), o);
  }
}

Draft DraftModelSource::draft(std::span<const int32_t> context, int max_tokens) {
  Draft d;
  scratch_.assign(context.begin(), context.end());
  GenerateOptions o;
  for (int i = 0; i < max_tokens; ++i) {
    // Reuses everything but the newest token: one forward per drafted token.
    auto logits = session_.prefill(scratch_, o);
    if (!logits.is_ok()) break;  // e.g. the draft's context is full: draft fewer tokens
    if (sampler_.greedy()) {
      d.tokens.push_back(sampler_.sample(logits.value(), scratch_));
    } else {
      Candidates q = sampler_.distribution(logits.value(), scratch_);
      // The draft's own seed (draft_sampling), at the drafted token's position.
      d.tokens.push_back(Sampler::draw_at(q, sampler_.uniform_at(scratch_.size())));
      d.probs.push_back(std::move(q));
    }
    scratch_.push_back(d.tokens.back());
  }
  return d;
}

}  // namespace tern
