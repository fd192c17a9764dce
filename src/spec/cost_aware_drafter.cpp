#include "spec/cost_aware_drafter.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace tern {
namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// 1 + a + ... + a^k: expected tokens from a verify forward of k drafts (the +1 is the token the
// forward always yields: the correction, or the bonus after a fully accepted draft).
double expected_tokens(double a, int k) {
  if (a >= 1.0) return k + 1.0;
  return (1.0 - std::pow(a, k + 1)) / (1.0 - a);
}

}  // namespace

CostAwareDrafter::CostAwareDrafter(DraftSource& inner, CostAwareDrafterOptions options, Clock clock)
    : inner_(&inner), options_(options), clock_(clock ? std::move(clock) : Clock(steady_seconds)) {}

void CostAwareDrafter::prefill(std::span<const int32_t> prompt) {
  // The estimates carry over (same model, same machine).
  step_start_.reset();
  inner_->prefill(prompt);
}

float CostAwareDrafter::acceptance() const { return static_cast<float>(successes_ / (successes_ + failures_)); }

void CostAwareDrafter::observe_step(double seconds, int width) {
  const double d = options_.ema_decay;
  if (width == 0) {
    base_seconds_ = base_seconds_ ? d * *base_seconds_ + (1 - d) * seconds : seconds;
    return;
  }
  if (!base_seconds_) return;  // the per-token cost is measured against the base
  const double per_token = std::max(0.0, (seconds - *base_seconds_) / width);
  extra_seconds_ = extra_seconds_ ? d * *extra_seconds_ + (1 - d) * per_token : per_token;
}

int CostAwareDrafter::chosen_width(int max_tokens) const {
  const int k_max = std::min(max_tokens, options_.max_width);
  if (k_max <= 0 || !base_seconds_) return 0;  // first measure what a plain step costs
  if (!extra_seconds_) return k_max;            // then what drafting adds
  const double a = acceptance();
  const double plain_rate = 1.0 / *base_seconds_;
  int best_k = 0;
  double best_rate = plain_rate;
  for (int k = 1; k <= k_max; ++k) {
    const double rate = expected_tokens(a, k) / (*base_seconds_ + *extra_seconds_ * k);
    if (rate > best_rate) {
      best_rate = rate;
      best_k = k;
    }
  }
  return best_rate >= options_.min_gain * plain_rate ? best_k : 0;
}

Draft CostAwareDrafter::draft(std::span<const int32_t> context, int max_tokens) {
  step_start_ = clock_();
  int width = chosen_width(max_tokens);
  if (width == 0 && base_seconds_ && extra_seconds_ && ++steps_since_probe_ >= options_.probe_interval) {
    width = std::min({options_.probe_width, max_tokens, options_.max_width});
  }
  if (width > 0) steps_since_probe_ = 0;
  Draft d;
  if (width > 0) d = inner_->draft(context, width);
  if (static_cast<int>(d.tokens.size()) > width) {  // a source that ignores max_tokens
    d.tokens.resize(width);
    if (d.probs.size() > d.tokens.size()) d.probs.resize(d.tokens.size());
  }
  step_width_ = static_cast<int>(d.tokens.size());
  return d;
}

void CostAwareDrafter::commit(int n_drafted, int n_accepted) {
  if (step_start_) {  // a step this wrapper was asked to draft for (commit(0, 0) may come without one)
    observe_step(clock_() - *step_start_, step_width_);
    step_start_.reset();
  }
  if (n_drafted > 0) {
    const double d = options_.ema_decay;
    successes_ = d * successes_ + n_accepted;
    failures_ = d * failures_ + (n_accepted < n_drafted ? 1.0 : 0.0);
  }
  inner_->commit(n_drafted, n_accepted);
}

void CostAwareDrafter::end(std::span<const int32_t> context) { inner_->end(context); }

}  // namespace tern
