// The sampler chain: penalties -> temperature -> top-k -> top-p -> min-p -> draw. Each stage is a
// SamplerStage (the seam for new stages); temperature 0 means greedy (argmax, lowest id on ties,
// like torch.argmax). Sampling is a pure function of (seed, logits, history): each draw's uniform
// is a counter-based hash of the seed and the absolute position of the token being sampled
// (history.size(), history = every token before it), not the next value of a sequential RNG. So
// a token never depends on how many draws came before it: speculation (spec/verify.h), batching
// and candidate sampling all see the uniform plain decoding sees at that position.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
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

// What a sampler needs from a forward step, from least to most: the argmax of each row, the
// row's best candidates (core/top_candidates.h; the whole row only when candidate_sampling.cpp
// cannot prove the candidates suffice), or the whole row.
enum class OutputNeed : uint8_t { kArgmax, kCandidates, kLogits };

// A row's candidates (core/top_candidates.h): its best entries, logit descending, ties to the
// lower id.
struct CandidateRow {
  std::span<const int32_t> ids;  // empty: the step computed no candidates
  std::span<const float> logits;
  uint32_t flags = 0;             // kRowHasNan | kFirstIsNan
  double exp_sum = 0.0;           // the softmax normalizer at sum_temperature (0: not computed)
  float sum_temperature = 0.0f;
  int64_t n_vocab = 0;            // the row's length
};

// One forward result for one position: its logits, or only their argmax when the step skipped the
// logits because every sampler in it was argmax_only() (Model::Outputs), or the argmax and the
// candidates when every sampler in it could sample from candidates.
struct LogitRow {
  LogitRow() = default;
  LogitRow(std::span<const float> row_logits, int32_t row_argmax) : logits(row_logits), argmax(row_argmax) {}
  std::span<const float> logits;  // [n_vocab], or empty: argmax only
  int32_t argmax = -1;            // first_argmax(logits) (core/argmax.h), or -1: not computed
  CandidateRow candidates;
  // The whole row on demand (the candidates' fallback; valid while the step's outputs are), or
  // empty.
  std::function<std::span<const float>()> fetch_logits;
};

// Counts of candidate-path outcomes (tests, metrics).
struct CandidateStats {
  uint64_t exact = 0;     // sampled from the candidates alone
  uint64_t fallback = 0;  // the whole row was fetched
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& params);
  const SamplerParams& params() const { return params_; }
  bool greedy() const { return params_.temperature <= 0.0f; }
  // Greedy with no penalties: the pick is the argmax of the raw logits, so the host needs no
  // logits at all (the device reduces them).
  bool argmax_only() const;
  bool penalised() const;
  // What a step must return for this sampler (OutputNeed); whole_distribution: distribution()
  // will be called (speculative sampling), which the candidates serve only after a truncation.
  OutputNeed need(bool whole_distribution = false) const;
  // With OutputNeed::kCandidates: how many candidates per row to ask for (at most
  // kMaxCandidates), and the temperature the step's normalizer (CandidateRows::exp_sums) should
  // be computed at (0: not needed).
  int candidates_wanted() const;
  float exp_sum_temperature() const;
  const CandidateStats& candidate_stats() const { return candidate_stats_; }

  // Picks the next token from logits [n_vocab]; history = prompt + generated tokens (penalties).
  // The draw uses uniform_at(history.size()).
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  // The same pick from a forward's row: an argmax_only() sampler takes row.argmax when it is
  // known; a sampler given candidates samples from them when that provably picks the token the
  // logits would (candidate_sampling.cpp); otherwise it needs row.logits or row.fetch_logits (a
  // precondition). The token is the same in every case (one uniform, that of the position).
  int32_t sample(const LogitRow& row, std::span<const int32_t> history);
  // The probability distribution after penalties and truncation (for speculative sampling and
  // tests); returns the candidates with logits replaced by probabilities.
  Candidates distribution(std::span<const float> logits, std::span<const int32_t> history);
  // The same from a forward's row (from its candidates when they provably give the same set).
  Candidates distribution(const LogitRow& row, std::span<const int32_t> history);
  // Inverse-CDF draw from a distribution (candidates holding probabilities) with a uniform in
  // [0, 1).
  static int32_t draw_at(const Candidates& probs, double u01);
  // Independent uniform streams per position: kDraw picks the token (sample(), and the residual
  // draw of speculative rejection sampling), kAccept is rejection sampling's acceptance test.
  enum class Stream : uint64_t { kDraw = 0, kAccept = 1 };
  // The uniform in [0, 1) of the token at absolute `position` (a pure function of the seed, the
  // position and the stream).
  double uniform_at(uint64_t position, Stream stream = Stream::kDraw) const;
  static double uniform_at(uint64_t seed, uint64_t position, Stream stream);

 private:
  void build(std::span<const float> logits, std::span<const int32_t> history, Candidates& c);
  // candidate_sampling.cpp: the truncated set from the candidates alone; false when not provably
  // the set build() makes from the whole row. When *open is set (no truncating stage cut inside
  // the candidates), c holds every candidate and draw_from_candidates decides per draw.
  bool build_from_candidates(const CandidateRow& row, Candidates& c, bool* open) const;
  // The token draw_at(distribution of the whole row, u01) picks, when provable from the open set.
  bool draw_from_candidates(const CandidateRow& row, const Candidates& c, double u01, int32_t* token) const;
  std::span<const float> fetch(const LogitRow& row) const;
  SamplerParams params_;
  std::vector<std::unique_ptr<SamplerStage>> stages_;
  CandidateStats candidate_stats_;
};

int32_t argmax(std::span<const float> logits);

}  // namespace tern
