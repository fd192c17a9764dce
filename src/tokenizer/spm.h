// SentencePiece-style BPE ("llama" vocabularies: llama, mistral, phi-3, gemma): characters merge
// pairwise, the pair whose concatenation is the highest-scoring piece first (leftmost on ties);
// what is left unknown falls back to <0xAB> byte pieces, else to unk. Input is already normalized
// (spaces as "▁", prefix added by the caller).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/token_index.h"
#include "tokenizer/vocab.h"

namespace tern::tok {

class SpmEncoder {
 public:
  // vocab and index must outlive the encoder.
  SpmEncoder(const Vocab& vocab, const TokenIndex& index);
  SpmEncoder(const SpmEncoder&) = delete;
  SpmEncoder& operator=(const SpmEncoder&) = delete;

  void encode(std::string_view normalized, std::vector<int32_t>* out) const;

 private:
  // The id of a piece that merging may produce or emit (normal or user-defined), else -1.
  int32_t piece_id(std::string_view text) const;

  const Vocab& vocab_;
  const TokenIndex& index_;
  std::array<int32_t, 256> byte_piece_ids_;  // <0xAB> -> id, -1 when the vocab has none
};

}  // namespace tern::tok
