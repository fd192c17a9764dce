// Suffix drafting (in the spirit of SuffixDecoding, Oliaro et al. 2024): a suffix automaton over
// earlier outputs and prompts (this session's earlier turns and other sessions', shared through a
// SuffixCorpus) plus one over the live context. Each step finds the longest suffix of the context
// that occurred before and proposes what followed it there. The draft length adapts to the match:
// a long match is strong evidence of a quote, so it drafts up to alpha * match_length tokens
// (capped); short matches draft nothing.
#pragma once

#include <memory>
#include <mutex>

#include "spec/draft_source.h"
#include "spec/suffix_automaton.h"

namespace tern {

// The shared corpus: outputs (and optionally prompts) of finished generations. Thread-safe.
class SuffixCorpus {
 public:
  void add(std::span<const int32_t> tokens);
  // Runs fn(automaton) under the lock.
  template <typename Fn>
  auto with(Fn&& fn) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return fn(automaton_);
  }

 private:
  mutable std::mutex mutex_;
  SuffixAutomaton automaton_;
};

struct SuffixDrafterOptions {
  int min_match = 4;        // shortest match worth drafting from
  float alpha = 1.0f;       // draft length per matched token
  int max_draft = 16;
};

class SuffixDrafter final : public DraftSource {
 public:
  // corpus may be null (only the live context is searched).
  explicit SuffixDrafter(std::shared_ptr<SuffixCorpus> corpus, SuffixDrafterOptions options = {})
      : corpus_(std::move(corpus)), options_(options) {}
  std::string_view name() const override { return "suffix"; }
  void prefill(std::span<const int32_t> prompt) override;
  Draft draft(std::span<const int32_t> context, int max_tokens) override;
  void commit(int n_drafted, int n_accepted) override {}
  // Publishes the finished generation (prompt + output) to the shared corpus.
  void end(std::span<const int32_t> context) override;

 private:
  // Longest match of the context's tail (at most kWindow tokens) in `sam`; the cursor is
  // recomputed each step, so the automaton may grow between steps.
  static constexpr int kWindow = 64;
  static SuffixAutomaton::Cursor match(const SuffixAutomaton& sam, std::span<const int32_t> context);
  static std::vector<int32_t> continuation(const SuffixAutomaton& sam, const SuffixAutomaton::Cursor& c, int n);

  std::shared_ptr<SuffixCorpus> corpus_;
  SuffixDrafterOptions options_;
  SuffixAutomaton prompt_;  // this request's prompt (SuffixDecoding's per-request tree)
};

}  // namespace tern
