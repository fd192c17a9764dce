// Byte-level BPE over one pre-token: bytes -> byte-level symbols -> merges applied lowest rank
// first (leftmost on ties, as HF's heap does) -> ids.
//
// Speed: merge lookup is one probe of an open-addressing table keyed by the (left, right) id pair;
// short words merge with a linear scan, long ones (base64, rulers of '=') with a heap; finished
// words are cached per thread (see encode_piece).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/token_index.h"
#include "tokenizer/vocab.h"

namespace tern::tok {

// GPT-2's reversible byte <-> printable character map: bytes that are printable Latin-1 map to
// themselves, the other 68 to U+0100.. in byte order.
uint32_t byte_to_char(uint8_t byte);
// Inverse of byte_to_char; -1 for characters outside the alphabet.
int byte_from_char(uint32_t cp);

class BpeEncoder {
 public:
  // vocab and index must outlive the encoder.
  BpeEncoder(const Vocab& vocab, const TokenIndex& index, bool ignore_merges);
  BpeEncoder(const BpeEncoder&) = delete;
  BpeEncoder& operator=(const BpeEncoder&) = delete;

  // Appends the ids of one pre-token, given as raw bytes.
  void encode_piece(std::string_view bytes, std::vector<int32_t>* out) const;

 private:
  struct MergeEntry {
    uint64_t key = kEmpty;  // (left << 32) | right
    int32_t rank = 0;
    int32_t merged_id = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  const MergeEntry* find_merge(int32_t left, int32_t right) const;
  void merge_word(std::vector<int32_t>* symbols) const;
  void merge_word_heap(std::vector<int32_t>* symbols) const;

  const Vocab& vocab_;
  const TokenIndex& index_;
  bool ignore_merges_;
  uint64_t instance_id_;                // keys the per-thread word cache
  std::array<int32_t, 256> byte_ids_;   // id of each byte's single-character token, -1 if none
  std::array<std::string, 256> byte_chars_;  // UTF-8 of each byte's character
  std::vector<MergeEntry> merge_table_;  // open addressing, power-of-two size
  uint64_t merge_mask_ = 0;
};

}  // namespace tern::tok
