// SequenceRunner: one generation as a state machine that contributes rows to a shared forward
// step instead of running forwards itself. Session::generate drives one runner alone; the
// Engine's scheduler drives many, packing all of them into one BatchPlan per step. Both go
// through this code, so a request's tokens do not depend on who drives it (every kernel is
// batch-invariant, docs/ARCHITECTURE.md).
//
//   kSync ──sync()──> kPrefill ──(last chunk consumed)──> kDecode ──(stop)──> kDone
//     ^                  │  plan_prefill / consume           │  plan_decode / consume
//     └──── preempt() ───┴───────────────────────────────────┘
//
// A step is plan, forward, apply: plan_prefill/plan_decode append this sequence's rows to the
// plan and reserve its KV; the caller runs the forward; consume() applies the logits (commits
// tokens, verifies drafts, registers full blocks). No state changes between plan and consume
// except the KV reservation, so a runner that could not get KV room simply waits.
//
// Preemption (the Engine, when the KV pool runs dry) releases the runner's KV; its full blocks
// stay cached in the prefix index. The runner keeps its sampler, drafter, text and pending token,
// and after the next sync() re-prefills prompt + committed tokens (mostly index hits) and
// continues decoding exactly where it was.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/session.h"
#include "engine/step_outputs.h"
#include "engine/stop_matcher.h"
#include "engine/think_tracker.h"
#include "ops/batch_plan.h"
#include "sampling/sampler.h"
#include "spec/draft_source.h"
#include "tokenizer/tokenizer.h"

namespace tern {

// Empties `plan` so that runners can append their sequences to it.
void begin_plan(BatchPlan& plan);

class SequenceRunner {
 public:
  enum class Phase : uint8_t {
    kSync,     // not yet matched against cached KV (new, or preempted and waiting to resume)
    kPrefill,  // computing the uncached rest of the prompt, a chunk per step
    kDecode,   // a pending token (+ a draft) per step
    kDone,     // result() is final
  };
  enum class Mode : uint8_t {
    kGenerate,     // prefill, then decode
    kPrefillOnly,  // stop once the prompt's last logits are computed (Session::prefill)
  };
  enum class DecodePlan : uint8_t {
    kPlanned,   // rows appended; call consume() after the forward
    kFinished,  // generation ended while planning (stop on the pending token); nothing appended
    kNoRoom,    // the KV pool cannot hold the next token; nothing changed
  };

  // session, prompt and options must outlive the runner. options.cancel is the driver's to
  // check (Session::generate turns it into an error or StopReason::kCancelled; the Engine too).
  SequenceRunner(Session& session, std::span<const int32_t> prompt, const GenerateOptions& options,
                 Mode mode = Mode::kGenerate);
  SequenceRunner(const SequenceRunner&) = delete;
  SequenceRunner& operator=(const SequenceRunner&) = delete;

  // kSync -> kPrefill (or straight on when everything is cached): trims the session to the
  // longest cached prefix of target() (its own tokens, then the prefix index). Errors: an empty
  // prompt, a prompt over the context.
  Status sync();
  // kPrefill: appends up to max_tokens of the uncomputed prompt (fewer when the KV pool has less
  // room) as one sequence of `plan`. Returns how many were appended; 0 = no KV room now.
  Result<int> plan_prefill(BatchPlan& plan, int max_tokens);
  // kDecode: commits the pending token (text, stop checks) and appends [pending] + draft.
  // allow_draft = false skips the drafter this step (the Engine, when the step is compute-bound
  // anyway: verifying drafts next to a prefill chunk costs their full compute). Greedy output is
  // the same either way.
  Result<DecodePlan> plan_decode(BatchPlan& plan, bool allow_draft = true);
  // Applies the forward of a plan this runner appended rows to: out holds every logit row of that
  // plan (StepOutputs), with at least what need() asked for.
  Status consume(const StepOutputs& out);
  // What consume() needs of this step's rows (StepRunner takes the richest need of a step):
  // the argmax (greedy), the candidates (sampling; the row itself is fetched when they do not
  // provably suffice), or the logits (penalties, speculative sampling without truncation, or a
  // prefill whose caller wants the last logits: Mode::kPrefillOnly). Call after planning.
  OutputNeed need() const;
  // Whether a result with only the argmax falls short: anything but argmax-only greedy.
  bool needs_logits() const { return mode_ == Mode::kPrefillOnly || !sampler_.argmax_only(); }
  int candidates_wanted() const { return sampler_.candidates_wanted(); }
  float exp_sum_temperature() const { return sampler_.exp_sum_temperature(); }
  // This runner's rows among the plan's logit rows (valid between planning and consume()).
  int first_logit_row() const { return first_logit_row_; }
  int n_logit_rows() const { return n_logit_rows_; }
  const CandidateStats& candidate_stats() const { return sampler_.candidate_stats(); }
  // Releases the session's KV and returns to kSync; the generation resumes after the next sync().
  // Precondition: kPrefill or kDecode, no rows planned.
  void preempt();
  // Ends the generation now with `reason` (cancellation, shutdown, KV exhausted); flushes text.
  void finish(StopReason reason);

  Phase phase() const { return phase_; }
  bool done() const { return phase_ == Phase::kDone; }
  bool planned() const { return planned_rows_ > 0; }
  bool synced_once() const { return synced_once_; }
  bool preempted() const { return resuming_; }
  // Tokens the KV must hold before decoding: the prompt, or after a preemption the prompt plus
  // every token committed since.
  std::span<const int32_t> target() const;
  // Tokens of target() not yet in KV (all of them before sync()).
  int tokens_to_prefill() const;
  const Session& session() const { return *session_; }
  const GenStats& stats() const { return result_.stats; }
  GenResult& result() { return result_; }

 private:
  // Prefill complete (last logits valid; last: the last prompt token's result): start decoding,
  // resume it, or stop (kPrefillOnly).
  void finish_prefill(const LogitRow& last);
  void start_decode(const LogitRow& last);
  // Commits one generated token; false when generation must end (stop reason set).
  bool commit(int32_t token, bool forced);
  void end_generation();
  // The result after feed_[i]'s logit row (i < n_logit_rows_) of a step.
  LogitRow row(const StepOutputs& out, int i) const;

  Session* session_;
  std::span<const int32_t> prompt_;
  const GenerateOptions* options_;
  Mode mode_;
  Phase phase_ = Phase::kSync;
  GenResult result_;
  int n_vocab_;

  // Timing (steady clock, seconds).
  double t_start_ = 0, t_prefill_end_ = 0;
  bool synced_once_ = false;
  bool decode_started_ = false;
  // Preemption: the KV to rebuild before decoding goes on.
  bool resuming_ = false;
  std::vector<int32_t> resume_tokens_;
  // Prefill progress of the current sync, for on_prefill_progress.
  int prefill_base_ = 0, prefill_total_ = 0;

  // The rows of the current step.
  std::vector<int32_t> feed_;  // prefill chunk, or [pending] + draft
  int planned_rows_ = 0;
  int first_logit_row_ = 0, n_logit_rows_ = 0;
  size_t base_ = 0;  // session tokens before the feed
  Draft draft_;
  bool forced_ = false;  // the draft is the thinking budget's forced close, not a proposal

  // Decode state.
  Sampler sampler_;
  std::vector<int32_t> history_;  // prompt + generated (the sampler's and drafters' context)
  StopMatcher stops_;
  std::optional<tok::StreamDecoder> stream_;
  ThinkTracker think_;
  std::vector<int32_t> think_close_ids_;
  bool think_closed_by_budget_ = false;
  int32_t pending_ = -1;  // sampled, not yet committed nor in KV
};

}  // namespace tern
