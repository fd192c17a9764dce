// The host side of a forward step's results, shared by Session::generate (one runner) and the
// Engine (many): the step computes what its richest runner needs (OutputNeed: each row's argmax,
// or its candidates, or the whole logits), and a runner that sampled from candidates but could
// not prove them enough fetches its row afterwards (Model::copy_logit_row).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/top_candidates.h"
#include "kv/kv_pool.h"
#include "models/model.h"
#include "ops/batch_plan.h"
#include "sampling/sampler.h"

namespace tern {

class SequenceRunner;

// What one step returns to its runners; rows are the plan's logit rows.
struct StepOutputs {
  std::span<const float> logits;              // [rows, n_vocab], or empty
  std::span<const int32_t> argmax;            // [rows], or empty
  const CandidateRows* candidates = nullptr;  // or null
  std::function<std::span<const float>(int row)> fetch_logits;  // the row's logits on demand
};

class StepRunner {
 public:
  // Runs model.forward(plan) for `runners` (those with rows in the plan) and returns their
  // outputs, valid until the next call. A backend that runs out of memory for the step (its
  // activations grow with the step's tokens) is an error naming the step; the runners' rows
  // were not computed, and the model and pool stay usable for smaller steps.
  Result<StepOutputs> forward(Model& model, const BatchPlan& plan, KvPool& pool,
                              std::span<SequenceRunner* const> runners);

 private:
  std::vector<float> logits_;
  std::vector<int32_t> argmax_;
  std::vector<int32_t> cand_ids_;
  std::vector<float> cand_logits_;
  std::vector<uint32_t> cand_flags_;
  std::vector<float> temperatures_;
  std::vector<double> exp_sums_;
  std::vector<float> fetched_;
  CandidateRows candidates_;
};

}  // namespace tern
