#include "spec/suffix_drafter.h"

#include <algorithm>
#include <cmath>

namespace tern {

void SuffixCorpus::add(std::span<const int32_t> tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  automaton_.add_document(tokens);
}

void SuffixDrafter::prefill(std::span<const int32_t> prompt) {
  prompt_ = SuffixAutomaton();
  // All but the last token: a match must have a continuation inside the prompt.
  if (prompt.size() > 1) prompt_.add_document(prompt.first(prompt.size() - 1));
}

SuffixAutomaton::Cursor SuffixDrafter::match(const SuffixAutomaton& sam, std::span<const int32_t> context) {
  SuffixAutomaton::Cursor c;
  const size_t from = context.size() > kWindow ? context.size() - kWindow : 0;
  for (size_t i = from; i < context.size(); ++i) sam.advance(c, context[i]);
  return c;
}

std::vector<int32_t> SuffixDrafter::continuation(const SuffixAutomaton& sam, const SuffixAutomaton::Cursor& c, int n) {
  std::vector<int32_t> out;
  const auto& corpus = sam.corpus();
  for (int64_t i = sam.end_of(c); i < static_cast<int64_t>(corpus.size()) && static_cast<int>(out.size()) < n; ++i) {
    if (corpus[i] < 0) break;  // document sentinel
    out.push_back(corpus[i]);
  }
  return out;
}

Draft SuffixDrafter::draft(std::span<const int32_t> context, int max_tokens) {
  Draft d;
  auto width = [&](int length) {
    return std::min({max_tokens, options_.max_draft, static_cast<int>(std::ceil(options_.alpha * length))});
  };
  const SuffixAutomaton::Cursor local = match(prompt_, context);
  if (local.length >= options_.min_match) d.tokens = continuation(prompt_, local, width(local.length));
  if (corpus_ != nullptr) {
    corpus_->with([&](const SuffixAutomaton& sam) {
      const SuffixAutomaton::Cursor shared = match(sam, context);
      if (shared.length >= options_.min_match && (shared.length > local.length || d.tokens.empty())) {
        std::vector<int32_t> alt = continuation(sam, shared, width(shared.length));
        if (!alt.empty()) d.tokens = std::move(alt);
      }
      return 0;
    });
  }
  return d;
}

void SuffixDrafter::end(std::span<const int32_t> context) {
  if (corpus_ != nullptr && !context.empty()) corpus_->add(context);
}

}  // namespace tern
