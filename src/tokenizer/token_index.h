// Lookup structures shared by the encoders: token text -> id, and a longest-match trie for the
// tokens that are matched as a whole before any splitting (special and added tokens).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tern::tok {

// Token text -> id. Views point into the Vocab, which must outlive the index. When two tokens
// share a text the lower id wins.
class TokenIndex {
 public:
  void build(const std::vector<std::string>& tokens);
  int32_t find(std::string_view text) const {
    auto it = map_.find(text);
    return it == map_.end() ? -1 : it->second;
  }

 private:
  std::unordered_map<std::string_view, int32_t> map_;
};

// Leftmost-longest matcher over a fixed set of strings (HF splits added tokens this way).
class TokenTrie {
 public:
  void add(std::string_view text, int32_t id);
  bool empty() const { return nodes_.size() <= 1; }
  // Length of the longest entry that text[pos..] starts with (0 if none); sets *id.
  size_t longest_at(std::string_view text, size_t pos, int32_t* id) const;
  // Whether any entry starts with this byte (a cheap pre-check per position).
  bool may_start(uint8_t byte) const { return first_byte_[byte]; }

 private:
  struct Node {
    int32_t token_id = -1;
    std::vector<std::pair<uint8_t, uint32_t>> children;  // sorted by byte
  };
  std::vector<Node> nodes_{1};
  bool first_byte_[256] = {};
};

}  // namespace tern::tok
