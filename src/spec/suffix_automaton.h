// A suffix automaton over a growing token corpus (Blumer et al. 1985): every substring of the
// corpus is a path from the root, built online in amortised O(1) per token. The suffix drafter
// walks it with the live context to find the longest context suffix that occurred in the corpus
// and where (an end position), then proposes what followed.
// Documents are separated by unique negative sentinels so that no match crosses a boundary.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace tern {

class SuffixAutomaton {
 public:
  SuffixAutomaton();

  // Appends a document (its tokens, then a sentinel).
  void add_document(std::span<const int32_t> tokens);
  const std::vector<int32_t>& corpus() const { return corpus_; }
  size_t n_states() const { return states_.size(); }

  // Streaming longest match: feed tokens one at a time; after each, `length` is the longest
  // suffix of what was fed that occurs in the corpus and `end` is the corpus index just past one
  // of its occurrences (the latest recorded for that state).
  struct Cursor {
    int32_t state = 0;
    int32_t length = 0;
  };
  void advance(Cursor& c, int32_t token) const;
  // Corpus index just past an occurrence of the cursor's match.
  int64_t end_of(const Cursor& c) const { return states_[c.state].end; }

 private:
  struct State {
    int32_t len = 0;
    int32_t link = -1;
    int64_t end = 0;  // corpus index just past the latest occurrence recorded for this state
    std::unordered_map<int32_t, int32_t> next;
  };
  void extend(int32_t token);

  std::vector<State> states_;
  std::vector<int32_t> corpus_;
  int32_t last_ = 0;
  int32_t next_sentinel_ = -1;
};

}  // namespace tern
