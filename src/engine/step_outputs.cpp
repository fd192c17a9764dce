#include "engine/step_outputs.h"

#include <algorithm>
#include <string>

#include "engine/sequence_runner.h"

namespace tern {

Result<StepOutputs> StepRunner::forward(Model& model, const BatchPlan& plan, KvPool& pool,
                                        std::span<SequenceRunner* const> runners) {
  const size_t rows = plan.logit_rows.size();
  const int n_vocab = model.config().n_vocab;
  OutputNeed need = OutputNeed::kArgmax;
  int count = 1;
  for (const SequenceRunner* r : runners) {
    const OutputNeed n = r->need();
    need = std::max(need, n);
    if (n == OutputNeed::kCandidates) count = std::max(count, r->candidates_wanted());
  }
  count = std::min({count, kMaxCandidates, n_vocab});

  Model::Outputs out;
  StepOutputs step;
  if (need == OutputNeed::kLogits) {
    logits_.resize(rows * static_cast<size_t>(n_vocab));
    out.logits = logits_.data();
    step.logits = logits_;
  } else {
    // Only each row's argmax (and candidates) cross to the host: the logits stay where they are.
    argmax_.resize(rows);
    out.argmax = argmax_.data();
    step.argmax = argmax_;
  }
  if (need == OutputNeed::kCandidates) {
    const size_t entries = rows * static_cast<size_t>(count);
    cand_ids_.resize(entries);
    cand_logits_.resize(entries);
    cand_flags_.resize(rows);
    temperatures_.assign(rows, 0.0f);
    exp_sums_.assign(rows, 0.0);
    bool any_sum = false;
    for (const SequenceRunner* r : runners) {
      const float t = r->need() == OutputNeed::kCandidates ? r->exp_sum_temperature() : 0.0f;
      if (t <= 0.0f) continue;
      any_sum = true;
      for (int i = 0; i < r->n_logit_rows(); ++i) temperatures_[static_cast<size_t>(r->first_logit_row() + i)] = t;
    }
    candidates_ = CandidateRows{static_cast<int>(rows), count, cand_ids_.data(), cand_logits_.data(), cand_flags_.data(),
                                any_sum ? temperatures_.data() : nullptr, any_sum ? exp_sums_.data() : nullptr};
    out.candidates = &candidates_;
    step.candidates = &candidates_;
    step.fetch_logits = [this, &model, n_vocab](int row) {
      fetched_.resize(static_cast<size_t>(n_vocab));
      model.copy_logit_row(row, fetched_.data());
      return std::span<const float>(fetched_);
    };
  }
  try {
    model.forward(plan, pool, out);
  } catch (const OutOfMemory& e) {
    return error("a step of " + std::to_string(plan.n_tokens()) + " tokens: " + e.what());
  }
  return step;
}

}  // namespace tern
