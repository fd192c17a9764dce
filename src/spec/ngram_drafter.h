// Prompt-lookup (n-gram) drafting: find the most recent earlier occurrence of the context's
// suffix and propose what followed it. Longest suffix wins (ngram_max down to ngram_min); ties go
// to the most recent occurrence, which favours the file the agent just read. Occurrences are
// indexed incrementally (hash of each n-gram -> its latest end position), so a step costs O(1)
// in the context length instead of a scan.
// The draft width adapts to an exponential moving average of acceptance, as in the seed engine:
// wide while drafts are being accepted, narrow (cheap probes) when they are not.
#pragma once

#include <unordered_map>
#include <vector>

#include "spec/draft_source.h"

namespace tern {

struct NgramDrafterOptions {
  int ngram_max = 3;
  int ngram_min = 1;
  int max_draft = 10;         // width while acceptance is good
  int probe_draft = 2;        // width while acceptance is poor
  float ema_decay = 0.85f;    // weight of the old average
  float wide_threshold = 0.25f;  // acceptance EMA above which drafts are wide
};

class NgramDrafter final : public DraftSource {
 public:
  explicit NgramDrafter(NgramDrafterOptions options = {}) : options_(options) {}
  std::string_view name() const override { return "ngram"; }
  void prefill(std::span<const int32_t> prompt) override;
  Draft draft(std::span<const int32_t> context, int max_tokens) override;
  void commit(int n_drafted, int n_accepted) override;

  float acceptance_ema() const { return ema_; }

 private:
  // Indexes n-grams ending before context.size() - 1 (never the live suffix itself).
  void index_up_to(std::span<const int32_t> context);
  static uint64_t key(std::span<const int32_t> gram);

  NgramDrafterOptions options_;
  std::vector<int32_t> seen_;  // the context indexed so far
  std::unordered_map<uint64_t, int32_t> last_end_;  // n-gram key -> end index (exclusive) of its latest occurrence
  float ema_ = 0.5f;
};

}  // namespace tern
