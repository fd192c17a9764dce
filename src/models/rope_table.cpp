#include "models/rope_table.h"

#include <algorithm>
#include <cmath>

namespace tern {
namespace {

constexpr double kPi = 3.14159265358979323846;

// YaRN (Peng et al. 2023): dims rotating faster than beta_fast turns over the original context
// keep their frequency, those slower than beta_slow are interpolated by 1/factor, with a linear
// ramp between; cos/sin are scaled by 0.1 ln(factor) + 1.
void apply_yarn(std::vector<double>& inv_freq, double base, int n_rot, double factor, int orig_ctx, float& mscale) {
  const double beta_fast = 32.0, beta_slow = 1.0;
  auto correction_dim = [&](double n_rotations) {
    return n_rot * std::log(orig_ctx / (n_rotations * 2.0 * kPi)) / (2.0 * std::log(base));
  };
  double low = std::floor(correction_dim(beta_fast));
  double high = std::ceil(correction_dim(beta_slow));
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(n_rot - 1));
  if (low == high) high += 0.001;
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_weight = 1.0 - ramp;
    inv_freq[i] = inv_freq[i] / factor * (1.0 - extrapolation_weight) + inv_freq[i] * extrapolation_weight;
  }
  mscale = static_cast<float>(0.1 * std::log(factor) + 1.0);
}

}  // namespace

RopeTable make_rope_table(const ModelConfig& config, const std::vector<float>& freq_factors, int n_ctx) {
  const int half = config.n_rot / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i)
    inv_freq[i] = 1.0 / std::pow(static_cast<double>(config.rope_theta), 2.0 * i / config.n_rot);

  RopeTable table;
  switch (config.rope_scaling) {
    case RopeScaling::kNone:
      break;
    case RopeScaling::kLinear:
      for (double& f : inv_freq) f /= config.rope_factor;
      break;
    case RopeScaling::kLlama3:
      break;  // expressed by the per-dim factors below
    case RopeScaling::kYarn:
      apply_yarn(inv_freq, config.rope_theta, config.n_rot, config.rope_factor,
                 config.rope_orig_ctx > 0 ? config.rope_orig_ctx : config.n_ctx_train, table.mscale);
      break;
  }
  if (!freq_factors.empty()) {
    for (int i = 0; i < half; ++i) inv_freq[i] /= freq_factors[i];
  }
  if (config.rope_scaling == RopeScaling::kNone && n_ctx > config.n_ctx_train && config.n_ctx_train > 0) {
    apply_yarn(inv_freq, config.rope_theta, config.n_rot, static_cast<double>(n_ctx) / config.n_ctx_train,
               config.n_ctx_train, table.mscale);
  }
  table.inv_freq.resize(half);
  for (int i = 0; i < half; ++i) table.inv_freq[i] = static_cast<float>(inv_freq[i]);
  return table;
}

}  // namespace tern
