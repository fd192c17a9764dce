#include "spec/ngram_drafter.h"

#include <algorithm>

namespace tern {

uint64_t NgramDrafter::key(std::span<const int32_t> gram) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ gram.size();
  for (int32_t t : gram) {
    h ^= static_cast<uint32_t>(t);
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
  }
  return h;
}

void NgramDrafter::prefill(std::span<const int32_t> prompt) {
  seen_.clear();
  last_end_.clear();
  index_up_to(prompt);
}

void NgramDrafter::index_up_to(std::span<const int32_t> context) {
  // Within one generation each context extends the previous one (prefill() starts a new one), so
  // checking the length and the last indexed token is enough to catch misuse cheaply.
  if (context.size() < seen_.size() || (!seen_.empty() && context[seen_.size() - 1] != seen_.back())) {
    seen_.clear();
    last_end_.clear();
  }
  // seen_ = context[0, L) means n-grams with exclusive end e <= L are indexed. Index up to
  // e = size - 1: every n-gram that ends before the last token, so a match always has a
  // continuation and the live suffix never matches itself.
  const size_t limit = context.empty() ? 0 : context.size() - 1;
  for (size_t e = seen_.size() + 1; e <= limit; ++e) {
    for (int ng = options_.ngram_min; ng <= options_.ngram_max && static_cast<size_t>(ng) <= e; ++ng)
      last_end_[key(context.subspan(e - ng, ng))] = static_cast<int32_t>(e);
  }
  if (limit > seen_.size())
    seen_.insert(seen_.end(), context.begin() + static_cast<std::ptrdiff_t>(seen_.size()),
                 context.begin() + static_cast<std::ptrdiff_t>(limit));
}

Draft NgramDrafter::draft(std::span<const int32_t> context, int max_tokens) {
  Draft d;
  index_up_to(context);
  const int width = std::min(max_tokens, ema_ >= options_.wide_threshold ? options_.max_draft : options_.probe_draft);
  const size_t n = context.size();
  if (width <= 0 || n < 2) return d;
  for (int ng = std::min<int>(options_.ngram_max, static_cast<int>(n) - 1); ng >= options_.ngram_min; --ng) {
    auto suffix = context.subspan(n - ng, ng);
    auto it = last_end_.find(key(suffix));
    if (it == last_end_.end()) continue;
    const size_t end = static_cast<size_t>(it->second);
    if (!std::equal(suffix.begin(), suffix.end(), context.begin() + static_cast<std::ptrdiff_t>(end - ng)))
      continue;  // hash collision
    const size_t take = std::min<size_t>(width, n - end);
    d.tokens.assign(context.begin() + static_cast<std::ptrdiff_t>(end),
                    context.begin() + static_cast<std::ptrdiff_t>(end + take));
    if (!d.tokens.empty()) return d;
  }
  return d;
}

void NgramDrafter::commit(int n_drafted, int n_accepted) {
  if (n_drafted <= 0) return;
  ema_ = options_.ema_decay * ema_ + (1.0f - options_.ema_decay) * static_cast<float>(n_accepted) / n_drafted;
}

}  // namespace tern
