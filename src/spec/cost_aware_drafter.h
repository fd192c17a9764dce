// The speculation cost model: a DraftSource that wraps another and decides, each step, how many
// tokens drafting is worth, so that speculation never slows decoding down much.
//
// A verify forward with k draft tokens costs more than a plain decode step (more rows through the
// weights and attention) and yields, if each draft token is accepted with probability a
// (independently), E(k) = 1 + a + a^2 + ... + a^k tokens. The model is
//     step_seconds(k) = base_seconds + extra_seconds_per_token * k
//     rate(k)         = E(k) / step_seconds(k)
// and the width is the k in [0, max_tokens] that maximises rate(k), provided it beats plain
// decoding by min_gain; otherwise the step does not draft. All three quantities are measured
// online: a from commit() outcomes (each draft is `accepted` successes and, if cut short, one
// failure), the step costs from the wall time between draft() and the commit() of the same step
// (drafting, the forward and the verification), attributed to the width drafted. Steps where the
// caller did not ask for a draft (the Engine suppresses drafting in prefill-heavy steps) are not
// timed, so they cannot distort the model. While the model says "don't draft", every probe_interval-th
// step still drafts probe_width tokens, so a change (the agent starts quoting a file) is noticed.
//
// The wrapper changes only how many tokens are proposed, never which, so the verify executor's
// invariant (greedy and seeded point-mass-drafted sampled output identical with speculation on or
// off, spec/verify.h) is untouched.
#pragma once

#include <functional>
#include <optional>

#include "spec/draft_source.h"

namespace tern {

struct CostAwareDrafterOptions {
  int max_width = 16;        // never propose more than this
  int probe_width = 2;       // width of the probes made while drafting does not pay
  int probe_interval = 16;   // steps between probes
  float min_gain = 1.05f;    // drafting must promise this speedup over plain decoding
  float ema_decay = 0.9f;    // weight of the old estimate
};

class CostAwareDrafter final : public DraftSource {
 public:
  using Clock = std::function<double()>;  // seconds, monotonic
  // inner must outlive this wrapper. clock defaults to std::chrono::steady_clock.
  explicit CostAwareDrafter(DraftSource& inner, CostAwareDrafterOptions options = {}, Clock clock = {});

  std::string_view name() const override { return inner_->name(); }
  void prefill(std::span<const int32_t> prompt) override;
  Draft draft(std::span<const int32_t> context, int max_tokens) override;
  void commit(int n_drafted, int n_accepted) override;
  void end(std::span<const int32_t> context) override;

  // The model's current estimates (for stats and tests).
  float acceptance() const;
  std::optional<double> base_seconds() const { return base_seconds_; }
  std::optional<double> extra_seconds_per_token() const { return extra_seconds_; }
  // The width the model would choose now, before probing: 0 = do not draft.
  int chosen_width(int max_tokens) const;

 private:
  void observe_step(double seconds, int width);

  DraftSource* inner_;
  CostAwareDrafterOptions options_;
  Clock clock_;
  // Acceptance as decayed counts of per-token successes and failures (prior: a = 0.5).
  double successes_ = 1.0;
  double failures_ = 1.0;
  std::optional<double> base_seconds_;
  std::optional<double> extra_seconds_;
  std::optional<double> step_start_;  // when this step's draft() was called (until its commit())
  int step_width_ = 0;                 // tokens it proposed
  int steps_since_probe_ = 0;
};

}  // namespace tern
