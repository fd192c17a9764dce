// The sampler chain: penalties -> temperature -> top-k -> top-p -> min-p -> draw. Each stage is a
// SamplerStage (the seam for new stages); temperature 0 means greedy (argmax, lowest id on ties,
// like torch.argmax). A seed makes runs reproducible: the same seed, logits and history give the
// same token.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <vector>

namespace tern {

struct SamplerParams {
  float temperature = 0.0f;        // 0 = greedy
  int top_k = 0;                   // 0 = off
  float top_p = 1.0f;              // 1 = off
  float min_p = 0.0f;              // 0 = off; keeps tokens with p >= min_p * p_max
  float repeat_penalty = 1.0f;     // 1 = off; CTRL-style: logit / penalty if > 0 else * penalty
  float presence_penalty = 0.0f;   // OpenAI-style: minus this once per token present in history
  float frequency_penalty = 0.0f;  // minus this times the token's count in history
  int penalty_last_n = 64;         // history window for the penalties (-1 = all)
  uint64_t seed = 0xC0FFEE;
};

// Candidate tokens with their logits; stages filter and rescale in place.
struct Candidates {
  std::vector<int32_t> ids;
  std::vector<float> logits;
  bool sorted = false;  // by logit, descending
  void sort_descending();
  size_t size() const { return ids.size(); }
};

class SamplerStage {
 public:
  virtual ~SamplerStage() = default;
  virtual void apply(Candidates& c) = 0;
};

// One forward result for one position: its logits, or only their argmax when the step skipped the
// logits because every sampler in it was argmax_only() (Model::Outputs).
struct LogitRow {
  std::span<const float> logits;  // [n_vocab], or empty: argmax only
  int32_t argmax = -1;            // first_argmax(logits) (core/argmax.h), or -1: not computed
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& params);
  const SamplerParams& params() const { return params_; }
  bool greedy() const { return params_.temperature <= 0.0f; }
  // Greedy with no penalties: the pick is the argmax of the raw logits, so the host needs no
  // logits at all (the device reduces them).
  bool argmax_only() const;

  // Picks the next token from logits [n_vocab]; history = prompt + generated tokens (penalties).
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  // The same pick from a forward's row: an argmax_only() sampler takes row.argmax when it is
  // known; every other sampler needs row.logits (a precondition).
  int32_t sample(const LogitRow& row, std::span<const int32_t> history);
  // The probability distribution after penalties and truncation (for speculative sampling and
  // tests); returns the candidates with logits replaced by probabilities.
  Candidates distribution(std::span<const float> logits, std::span<const int32_t> history);
  // Draws from a distribution (candidates holding probabilities) with this sampler's RNG.
  int32_t draw(const Candidates& probs);
  // A uniform double in [0, 1) from this sampler's RNG (speculative acceptance tests).
  double uniform();

 private:
  void build(std::span<const float> logits, std::span<const int32_t> history, Candidates& c);
  SamplerParams params_;
  std::vector<std::unique_ptr<SamplerStage>> stages_;
  std::mt19937_64 rng_;
};

int32_t argmax(std::span<const float> logits);

}  // namespace tern
