#include "spec/suffix_automaton.h"

namespace tern {

SuffixAutomaton::SuffixAutomaton() { states_.emplace_back(); }

void SuffixAutomaton::extend(int32_t token) {
  corpus_.push_back(token);
  const int64_t end = static_cast<int64_t>(corpus_.size());
  const int32_t cur = static_cast<int32_t>(states_.size());
  states_.emplace_back();
  states_[cur].len = states_[last_].len + 1;
  states_[cur].end = end;
  int32_t p = last_;
  while (p != -1 && !states_[p].next.count(token)) {
    states_[p].next[token] = cur;
    p = states_[p].link;
  }
  if (p == -1) {
    states_[cur].link = 0;
  } else {
    const int32_t q = states_[p].next[token];
    if (states_[p].len + 1 == states_[q].len) {
      states_[cur].link = q;
    } else {
      const int32_t clone = static_cast<int32_t>(states_.size());
      State copy = states_[q];  // copy first: emplace_back may reallocate
      copy.len = states_[p].len + 1;
      copy.end = end;  // the clone's occurrences include the one ending here, the latest
      states_.push_back(std::move(copy));
      while (p != -1) {
        auto it = states_[p].next.find(token);
        if (it == states_[p].next.end() || it->second != q) break;
        it->second = clone;
        p = states_[p].link;
      }
      states_[q].link = clone;
      states_[cur].link = clone;
    }
  }
  last_ = cur;
  // note: states on the suffix-link path of `cur` also gain this occurrence; their `end` is left
  // at an earlier one (still a valid occurrence). Updating them would cost O(depth) per token.
}

void SuffixAutomaton::add_document(std::span<const int32_t> tokens) {
  for (int32_t t : tokens) extend(t);
  extend(next_sentinel_--);
}

void SuffixAutomaton::advance(Cursor& c, int32_t token) const {
  for (;;) {
    const auto& next = states_[c.state].next;
    auto it = next.find(token);
    if (it != next.end()) {
      c.state = it->second;
      ++c.length;
      return;
    }
    if (c.state == 0) {
      c.length = 0;
      return;
    }
    c.state = states_[c.state].link;
    c.length = states_[c.state].len;
  }
}

}  // namespace tern
