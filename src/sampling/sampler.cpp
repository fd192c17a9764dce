#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "core/argmax.h"
#include "core/check.h"
#include "core/top_candidates.h"
#include "sampling/stages.h"

namespace tern {

namespace stages {

void softmax_in_place(Candidates& c) {
  c.sort_descending();
  const float mx = c.logits.empty() ? 0.0f : c.logits[0];
  double sum = 0.0;
  for (float& l : c.logits) {
    l = std::exp(l - mx);
    sum += l;
  }
  for (float& l : c.logits) l = static_cast<float>(l / sum);
}

void top_k(Candidates& c, int k) {
  if (k <= 0 || static_cast<size_t>(k) >= c.size()) return;
  c.sort_descending();
  c.ids.resize(k);
  c.logits.resize(k);
}

void top_p(Candidates& c, float p) {
  if (p >= 1.0f || c.size() <= 1) return;
  Candidates probs = c;
  softmax_in_place(probs);
  c.sort_descending();
  double cum = 0.0;
  size_t keep = c.size();
  for (size_t i = 0; i < probs.size(); ++i) {
    cum += probs.logits[i];
    if (cum >= p) {
      keep = i + 1;
      break;
    }
  }
  c.ids.resize(keep);
  c.logits.resize(keep);
}

// Probability >= p times the top one: logit >= max + ln(p).
void min_p(Candidates& c, float p) {
  if (p <= 0.0f || c.size() <= 1) return;
  c.sort_descending();
  const float threshold = c.logits[0] + std::log(p);
  size_t keep = 1;
  while (keep < c.size() && c.logits[keep] >= threshold) ++keep;
  c.ids.resize(keep);
  c.logits.resize(keep);
}

}  // namespace stages

namespace {

using stages::softmax_in_place;

class TopK final : public SamplerStage {
 public:
  explicit TopK(int k) : k_(k) {}
  void apply(Candidates& c) override { stages::top_k(c, k_); }

 private:
  int k_;
};

class TopP final : public SamplerStage {
 public:
  explicit TopP(float p) : p_(p) {}
  void apply(Candidates& c) override { stages::top_p(c, p_); }

 private:
  float p_;
};

class MinP final : public SamplerStage {
 public:
  explicit MinP(float p) : p_(p) {}
  void apply(Candidates& c) override { stages::min_p(c, p_); }

 private:
  float p_;
};

}  // namespace

void Candidates::sort_descending() {
  if (sorted) return;
  std::vector<size_t> order(ids.size());
  std::iota(order.begin(), order.end(), 0);
  // Stable on ties by id, so results never depend on the sort implementation.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : ids[a] < ids[b];
  });
  std::vector<int32_t> new_ids(ids.size());
  std::vector<float> new_logits(ids.size());
  for (size_t i = 0; i < order.size(); ++i) {
    new_ids[i] = ids[order[i]];
    new_logits[i] = logits[order[i]];
  }
  ids.swap(new_ids);
  logits.swap(new_logits);
  sorted = true;
}

int32_t argmax(std::span<const float> logits) { return first_argmax(logits.data(), logits.size()); }

Sampler::Sampler(const SamplerParams& params) : params_(params) {
  if (params_.top_k > 0) stages_.push_back(std::make_unique<TopK>(params_.top_k));
  if (params_.top_p < 1.0f) stages_.push_back(std::make_unique<TopP>(params_.top_p));
  if (params_.min_p > 0.0f) stages_.push_back(std::make_unique<MinP>(params_.min_p));
}

void Sampler::build(std::span<const float> logits, std::span<const int32_t> history, Candidates& c) {
  c.ids.resize(logits.size());
  std::iota(c.ids.begin(), c.ids.end(), 0);
  c.logits.assign(logits.begin(), logits.end());
  c.sorted = false;

  const bool penalise = params_.repeat_penalty != 1.0f || params_.presence_penalty != 0.0f ||
                        params_.frequency_penalty != 0.0f;
  if (penalise && !history.empty()) {
    const size_t window = params_.penalty_last_n < 0 ? history.size()
                                                     : std::min(history.size(), static_cast<size_t>(params_.penalty_last_n));
    std::unordered_map<int32_t, int> counts;
    for (size_t i = history.size() - window; i < history.size(); ++i) ++counts[history[i]];
    for (const auto& [id, count] : counts) {
      if (id < 0 || static_cast<size_t>(id) >= c.logits.size()) continue;
      float& l = c.logits[id];
      if (params_.repeat_penalty != 1.0f) l = l > 0.0f ? l / params_.repeat_penalty : l * params_.repeat_penalty;
      l -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(count);
    }
  }
  if (!greedy()) {
    for (float& l : c.logits) l /= params_.temperature;
  }
  for (auto& stage : stages_) stage->apply(c);
}

Candidates Sampler::distribution(std::span<const float> logits, std::span<const int32_t> history) {
  Candidates c;
  build(logits, history, c);
  softmax_in_place(c);
  return c;
}

bool Sampler::penalised() const {
  return params_.repeat_penalty != 1.0f || params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f;
}

bool Sampler::argmax_only() const { return greedy() && !penalised(); }

std::span<const float> Sampler::fetch(const LogitRow& row) const {
  if (!row.logits.empty()) return row.logits;
  TERN_CHECK_MSG(row.fetch_logits != nullptr, "sampler: this sampler needs the logits, the step did not keep them");
  const std::span<const float> logits = row.fetch_logits();
  TERN_CHECK(!logits.empty());
  return logits;
}

int32_t Sampler::sample(const LogitRow& row, std::span<const int32_t> history) {
  if (!row.logits.empty()) return sample(row.logits, history);
  if (argmax_only() && row.argmax >= 0) return row.argmax;
  if (!greedy() && !row.candidates.ids.empty()) {
    // The position's uniform on either path, so both pick the same token.
    const double u01 = uniform_at(history.size());
    Candidates c;
    bool open = false;
    if (build_from_candidates(row.candidates, c, &open)) {
      int32_t token = -1;
      if (!open) {
        softmax_in_place(c);
        ++candidate_stats_.exact;
        return draw_at(c, u01);
      }
      if (draw_from_candidates(row.candidates, c, u01, &token)) {
        ++candidate_stats_.exact;
        return token;
      }
    }
    ++candidate_stats_.fallback;
    return draw_at(distribution(fetch(row), history), u01);
  }
  return sample(fetch(row), history);
}

Candidates Sampler::distribution(const LogitRow& row, std::span<const int32_t> history) {
  if (row.logits.empty() && !greedy() && !row.candidates.ids.empty()) {
    Candidates c;
    bool open = false;
    if (build_from_candidates(row.candidates, c, &open) && !open) {
      softmax_in_place(c);
      ++candidate_stats_.exact;
      return c;
    }
    ++candidate_stats_.fallback;
  }
  return distribution(fetch(row), history);
}

OutputNeed Sampler::need(bool whole_distribution) const {
  if (argmax_only()) return OutputNeed::kArgmax;
  // Penalties change logits anywhere in the vocabulary; greedy with penalties is rare.
  if (greedy() || penalised()) return OutputNeed::kLogits;
  if (params_.top_k > 0 && candidates_wanted() > kMaxCandidates) return OutputNeed::kLogits;
  const bool truncates = params_.top_k > 0 || params_.top_p < 1.0f || params_.min_p > 0.0f;
  if (whole_distribution && !truncates) return OutputNeed::kLogits;
  return OutputNeed::kCandidates;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  if (greedy()) {
    if (argmax_only()) return argmax(logits);
    Candidates c;
    build(logits, history, c);
    return c.ids[argmax(c.logits)];
  }
  return draw_at(distribution(logits, history), uniform_at(history.size()));
}

namespace {
// splitmix64's finalizer: a bijection on 64 bits whose every output bit depends on every input bit.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

double Sampler::uniform_at(uint64_t seed, uint64_t position, Stream stream) {
  // Counter-based: the key hashes (seed, stream), so nearby seeds and the two streams give
  // unrelated sequences; the counter is the position, stepped by splitmix64's odd increment.
  const uint64_t key = mix64(mix64(seed) ^ (static_cast<uint64_t>(stream) * 0xD1B54A32D192ED03ull + 1));
  const uint64_t bits = mix64(key + (position + 1) * 0x9E3779B97F4A7C15ull);
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);  // 53 bits
}

double Sampler::uniform_at(uint64_t position, Stream stream) const {
  return uniform_at(params_.seed, position, stream);
}

int32_t Sampler::draw_at(const Candidates& probs, double u01) {
  // Inverse-CDF draw with a 53-bit uniform. Probabilities need not sum exactly to 1 (residual
  // distributions): scale the uniform by their total.
  double total = 0.0;
  for (float p : probs.logits) total += p;
  const double u = u01 * total;
  double cum = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    cum += probs.logits[i];
    if (u < cum) return probs.ids[i];
  }
  return probs.ids.back();
}

}  // namespace tern
