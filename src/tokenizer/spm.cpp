#include "tokenizer/spm.h"

#include <cstdio>
#include <queue>

#include "tokenizer/unicode.h"

namespace tern::tok {

SpmEncoder::SpmEncoder(const Vocab& vocab, const TokenIndex& index) : vocab_(vocab), index_(index) {
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    const int32_t id = index_.find(name);
    byte_piece_ids_[b] = (id >= 0 && vocab_.types[id] == TokenType::kByte) ? id : -1;
  }
}

int32_t SpmEncoder::piece_id(std::string_view text) const {
  const int32_t id = index_.find(text);
  if (id < 0) return -1;
  const TokenType type = vocab_.types[id];
  // note: control, unknown, unused and byte pieces never come out of merging in SentencePiece.
  return (type == TokenType::kNormal || type == TokenType::kUserDefined || type == TokenType::kUndefined) ? id : -1;
}

void SpmEncoder::encode(std::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  // Symbols are byte ranges of `text` in a doubly linked list; each starts as one UTF-8 character
  // (a stray invalid byte is a symbol of its own).
  struct Symbol {
    uint32_t begin;
    uint32_t n_bytes;
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t len = 1;
    decode_utf8(text, pos, &len);
    const auto i = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(len), i - 1, -1});
    if (i > 0) symbols[i - 1].next = i;
    pos += len;
  }
  struct Bigram {
    float score;
    int32_t left;
    uint32_t n_bytes;  // of the merged piece, to detect stale entries
    bool operator<(const Bigram& o) const {  // max-heap: higher score, then leftmost
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::priority_queue<Bigram> heap;
  auto try_pair = [&](int32_t left) {
    if (left < 0 || symbols[left].next < 0) return;
    const Symbol& a = symbols[left];
    const Symbol& b = symbols[a.next];
    const int32_t id = piece_id(text.substr(a.begin, a.n_bytes + b.n_bytes));
    if (id < 0) return;
    const float score = vocab_.scores.empty() ? 0.0f : vocab_.scores[id];
    heap.push({score, left, a.n_bytes + b.n_bytes});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) try_pair(i);
  while (!heap.empty()) {
    const Bigram top = heap.top();
    heap.pop();
    Symbol& a = symbols[top.left];
    if (a.n_bytes == 0 || a.next < 0) continue;
    Symbol& b = symbols[a.next];
    if (a.n_bytes + b.n_bytes != top.n_bytes) continue;  // one side changed since this was queued
    a.n_bytes += b.n_bytes;
    b.n_bytes = 0;
    a.next = b.next;
    if (b.next >= 0) symbols[b.next].prev = top.left;
    try_pair(a.prev);
    try_pair(top.left);
  }
  bool last_was_unk = false;
  for (int32_t i = 0; i >= 0 && i < static_cast<int32_t>(symbols.size()); i = symbols[i].next) {
    const Symbol& s = symbols[i];
    const std::string_view piece = text.substr(s.begin, s.n_bytes);
    const int32_t id = piece_id(piece);
    if (id >= 0) {
      out->push_back(id);
      last_was_unk = false;
      continue;
    }
    for (char ch : piece) {
      const int32_t byte_id = byte_piece_ids_[static_cast<uint8_t>(ch)];
      if (byte_id >= 0) {
        out->push_back(byte_id);
        last_was_unk = false;
      } else if (vocab_.unk_id >= 0 && !last_was_unk) {  // consecutive unknowns fuse into one unk
        out->push_back(vocab_.unk_id);
        last_was_unk = true;
      }
    }
  }
}

}  // namespace tern::tok
