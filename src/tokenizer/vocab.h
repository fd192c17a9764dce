// The tokenizer's vocabulary as stored in GGUF metadata (tokenizer.ggml.*), kept apart from the
// encoding algorithms so the loader can be tested and fuzzed on its own.
//
// Invariants after load_vocab() succeeds: tokens, types (and scores, when present) have the same
// length n_vocab > 0; every special id is -1 or in [0, n_vocab); for BPE every merge names two
// tokens whose concatenation is also a token, and `merges` holds those ids in rank order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace tern::gguf {
class File;
}

namespace tern::tok {

// tokenizer.ggml.model
enum class VocabModel : uint8_t {
  kBpe,  // "gpt2": byte-level BPE driven by merge ranks
  kSpm,  // "llama": SentencePiece BPE driven by piece scores, with byte fallback
};

// tokenizer.ggml.token_type values (SentencePiece's piece types).
enum class TokenType : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // special tokens: <s>, <|im_end|>, ...
  kUserDefined = 4,  // added tokens that always match as a whole
  kUnused = 5,
  kByte = 6,         // <0xAB> byte-fallback pieces
};

struct BpeMerge {
  int32_t left_id;
  int32_t right_id;
  int32_t merged_id;
};

struct Vocab {
  VocabModel model = VocabModel::kBpe;
  std::string model_name;  // tokenizer.ggml.model as written
  std::string pre = "default";  // tokenizer.ggml.pre
  std::vector<std::string> tokens;     // [n_vocab] token text (byte-level alphabet for BPE)
  std::vector<TokenType> types;        // [n_vocab]
  std::vector<float> scores;           // [n_vocab] or empty (SPM merge priority)
  std::vector<BpeMerge> merges;        // BPE only, rank order (index = rank)
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  int32_t sep_id = -1;
  int32_t eot_id = -1;  // end of turn, when the file names one
  int32_t eom_id = -1;  // end of message (tool call), when the file names one
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;  // SPM: prepend "▁" to the text (llama, mistral yes; gemma no)

  int32_t n_vocab() const { return static_cast<int32_t>(tokens.size()); }
};

// Reads and validates tokenizer.ggml.* from a GGUF file. Errors name the key and what was wrong:
// a missing or mistyped key, arrays of different lengths, a merge naming an unknown token, an
// out-of-range special id, tokenizer.ggml.model "no_vocab" or an unsupported model.
Result<Vocab> load_vocab(const gguf::File& file);

}  // namespace tern::tok
