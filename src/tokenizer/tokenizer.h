// Tokenizer: text <-> token ids for the vocabularies GGUF files carry, matching Hugging Face
// `tokenizers` id for id.
//
//   byte-level BPE ("gpt2"): special-token split -> pre-tokenizer (pretokenize.h, chosen by
//     tokenizer.ggml.pre) -> merges by rank over the byte-level alphabet (bpe.h).
//   SentencePiece ("llama"): special-token split -> " " to "▁" (+ a leading "▁" when the model
//     adds a space prefix) -> merges by piece score, byte fallback for the rest (spm.h).
//
// decode() returns raw bytes: what the tokens spell, which may be invalid UTF-8 when the ids cut a
// character in two. StreamDecoder hands out the same bytes piecewise without ever splitting a
// character. A Tokenizer is immutable after construction and safe to share between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/vocab.h"

namespace tern::gguf {
class File;
}

namespace tern::tok {

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* from the file (model weights are not touched; vocab-only files work).
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const gguf::File& file);
  // Builds from an already loaded (or hand-made, in tests) vocabulary; validates it like the loader.
  static Result<std::unique_ptr<Tokenizer>> from_vocab(Vocab vocab);
  ~Tokenizer();

  // add_bos_eos: apply the model's add_bos/add_eos rules. parse_special: text such as
  // "<|im_end|>" that spells a control token becomes that token; otherwise it is plain text.
  // User-defined (added) tokens always match as a whole, as in HF.
  std::vector<int32_t> encode(std::string_view text, bool add_bos_eos, bool parse_special) const;
  // skip_special drops control and unknown tokens (HF's skip_special_tokens).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The token's text as stored in the vocabulary (byte-level alphabet or "▁" form); "" if out of range.
  std::string_view piece(int32_t id) const;
  // The bytes this token contributes to decode() (before the SPM leading-space strip).
  std::string_view token_bytes(int32_t id) const;
  int32_t n_vocab() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  bool is_special(int32_t id) const;  // control or unknown type: skipped by skip_special
  // End of generation: eos, eot, eom and control tokens named like <|im_end|>, <|eot_id|>,
  // <end_of_turn>, <|end|>, <|endoftext|>.
  bool is_eog(int32_t id) const;
  // Hash of everything that decides the ids (model, pre-tokenizer, tokens, types, scores, merges,
  // special ids and flags); equal fingerprints mean equal tokenization. For cache keys.
  uint64_t fingerprint() const;
  const Vocab& vocab() const;
  // The pre-tokenizer family in use ("" for SentencePiece).
  const std::string& pre_tokenizer_name() const;
  // Non-fatal notes from loading (e.g. a "default" pre-tokenizer fallback), for the CLI to print.
  const std::vector<std::string>& warnings() const;
  // Text is normalized to NFC before splitting (qwen2), so decode(encode(t)) == NFC(t), not t.
  bool normalizes_to_nfc() const;
  // SPM models that add a space prefix strip one leading space from decoded text.
  bool strips_leading_space() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Incremental detokenizer: push ids as they are generated, get back only complete UTF-8 text.
// A character whose bytes span several tokens is held until its last byte arrives; bytes that can
// never become valid UTF-8 are passed through. The concatenation of every push() and the final
// flush() equals tokenizer.decode(all ids, skip_special).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);
  std::string push(int32_t id);
  std::string flush();  // what is still held back (an incomplete character at the end)

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  bool at_start_ = true;
  std::string pending_;
};

}  // namespace tern::tok

namespace tern {
// The public names, as the engine and CLI spell them.
using tok::StreamDecoder;
using tok::Tokenizer;
}  // namespace tern
