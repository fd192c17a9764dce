#include "tokenizer/token_index.h"

#include <algorithm>

namespace tern::tok {

void TokenIndex::build(const std::vector<std::string>& tokens) {
  map_.clear();
  map_.reserve(tokens.size() * 2);
  for (size_t i = 0; i < tokens.size(); ++i) map_.emplace(tokens[i], static_cast<int32_t>(i));  // keeps the first
}

void TokenTrie::add(std::string_view text, int32_t id) {
  if (text.empty()) return;
  first_byte_[static_cast<uint8_t>(text[0])] = true;
  uint32_t node = 0;
  for (char ch : text) {
    const auto byte = static_cast<uint8_t>(ch);
    auto& children = nodes_[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), byte,
                               [](const auto& edge, uint8_t b) { return edge.first < b; });
    if (it != children.end() && it->first == byte) {
      node = it->second;
    } else {
      const auto child = static_cast<uint32_t>(nodes_.size());
      children.insert(it, {byte, child});  // `children` is not used after nodes_ grows
      nodes_.emplace_back();
      node = child;
    }
  }
  if (nodes_[node].token_id < 0) nodes_[node].token_id = id;  // lower id wins on duplicates
}

size_t TokenTrie::longest_at(std::string_view text, size_t pos, int32_t* id) const {
  size_t best = 0;
  uint32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto byte = static_cast<uint8_t>(text[i]);
    const auto& children = nodes_[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), byte,
                               [](const auto& edge, uint8_t b) { return edge.first < b; });
    if (it == children.end() || it->first != byte) break;
    node = it->second;
    if (nodes_[node].token_id >= 0) {
      best = i + 1 - pos;
      *id = nodes_[node].token_id;
    }
  }
  return best;
}

}  // namespace tern::tok
