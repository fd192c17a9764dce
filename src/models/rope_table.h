// Rotary frequencies: inv_freq[i] for i in [0, n_rot/2) and the attention (m)scale, following the
// Hugging Face definitions of the default, linear, llama3 and YaRN rope types.
#pragma once

#include <vector>

#include "models/model.h"

namespace tern {

struct RopeTable {
  std::vector<float> inv_freq;  // [n_rot / 2]
  float mscale = 1.0f;          // multiplies cos and sin (YaRN attention factor)
};

// freq_factors: llama3-style per-dim divisors from rope_freqs.weight, or empty.
// n_ctx: the context the caller wants; above the native one (with no scaling in the file), YaRN
// extends the model as the seed engine does (factor = n_ctx / n_ctx_train).
RopeTable make_rope_table(const ModelConfig& config, const std::vector<float>& freq_factors, int n_ctx);

}  // namespace tern
