// A draft model that shares the target's tokenizer proposes tokens autoregressively (mlx-lm's
// two-model speculative decoding, as the seed describes it): drafts are sampled with the request's
// sampler settings (greedy under greedy), their distributions are returned for the rejection
// rule (distribution-exact, not token-identical: spec/verify.h), and the draft's KV rewinds to
// the accepted prefix on the next call (its Session keeps the longest common prefix and trims the
// rest; its blocks are private, so a trim never has to back off to a block boundary). Built with
// greedy settings (temperature 0) under a sampled target it proposes point masses, which the
// coupled rule verifies: seeded sampled output is then token-identical to plain decoding's.
#pragma once

#include <memory>

#include "engine/session.h"
#include "spec/draft_source.h"

namespace tern {

class DraftModelSource final : public DraftSource {
 public:
  // draft and pool must outlive this source; pool holds the draft model's KV.
  DraftModelSource(Model& draft, KvPool& pool, const SamplerParams& sampling);
  std::string_view name() const override { return "draft-model"; }
  void prefill(std::span<const int32_t> prompt) override;
  Draft draft(std::span<const int32_t> context, int max_tokens) override;
  void commit(int n_drafted, int n_accepted) override {}

 private:
  Session session_;
  Sampler sampler_;
  std::vector<int32_t> scratch_;
};

}  // namespace tern
