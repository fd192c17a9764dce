// libFuzzer target for encoding and decoding (untrusted text and ids). Beyond "no crash" it checks:
//   - every id is in [0, n_vocab);
//   - byte-level BPE round-trips exactly: decode(encode(text)) == text, for any bytes, under every
//     pre-tokenizer family, whenever the ids are all ordinary tokens;
//   - SentencePiece decode never fails and the streaming decoder's output equals decode();
//   - ids decoded from arbitrary integers stream to the same bytes as decode().
// Vocabularies: the llama.cpp vocab files in shared/data/tokenizer-vectors (TERN_TOKENIZER_VECTORS
// overrides the folder). Input: byte 0 picks the tokenizer, byte 1 the flags, the rest is text
// (or, with flag 4, little-endian int32 ids).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "formats/gguf.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

#ifndef TERN_SHARED_DATA
#define TERN_SHARED_DATA "../shared/data"
#endif

namespace {

using tern::tok::StreamDecoder;
using tern::tok::Tokenizer;

std::vector<std::unique_ptr<Tokenizer>> load_all() {
  std::vector<std::unique_ptr<Tokenizer>> out;
  const char* env = std::getenv("TERN_TOKENIZER_VECTORS");
  const std::string dir = env != nullptr ? env : std::string(TERN_SHARED_DATA) + "/tokenizer-vectors";
  for (const char* name : {"gpt-2", "llama-spm", "deepseek-coder", "phi-3"}) {
    auto file = tern::gguf::File::open(dir + "/ggml-vocab-" + name + ".gguf");
    if (!file) continue;
    auto vocab = tern::tok::load_vocab(*file);
    if (!vocab) continue;
    if (std::string(name) == "gpt-2") {
      // GPT-2's vocabulary under every pre-tokenizer family.
      for (const std::string& pre : tern::tok::known_pre_tokenizer_names()) {
        tern::tok::Vocab v = *vocab;
        v.pre = pre;
        if (auto tok = Tokenizer::from_vocab(std::move(v))) out.push_back(std::move(tok).value());
      }
    }
    if (auto tok = Tokenizer::from_vocab(std::move(vocab).value())) out.push_back(std::move(tok).value());
  }
  TERN_CHECK_MSG(!out.empty(), "no vocab-only GGUF found; set TERN_TOKENIZER_VECTORS");
  return out;
}

void check_stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  StreamDecoder stream(tok, skip_special);
  std::string joined;
  for (int32_t id : ids) joined += stream.push(id);
  joined += stream.flush();
  TERN_CHECK_MSG(joined == tok.decode(ids, skip_special), "stream decode differs from decode");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::unique_ptr<Tokenizer>> tokenizers = load_all();
  if (size < 2) return 0;
  const Tokenizer& tok = *tokenizers[data[0] % tokenizers.size()];
  const uint8_t flags = data[1];
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);

  if ((flags & 4) != 0) {  // arbitrary ids, some out of range
    std::vector<int32_t> ids;
    for (size_t i = 0; i + 4 <= text.size(); i += 4) {
      uint32_t v = 0;
      for (int b = 0; b < 4; ++b) v |= static_cast<uint32_t>(static_cast<uint8_t>(text[i + b])) << (8 * b);
      ids.push_back(static_cast<int32_t>(v % static_cast<uint32_t>(tok.n_vocab() + 8)) - 4);
    }
    check_stream(tok, ids, (flags & 8) != 0);
    return 0;
  }

  const bool add_bos_eos = (flags & 1) != 0;
  const bool parse_special = (flags & 2) != 0;
  const std::vector<int32_t> ids = tok.encode(text, add_bos_eos, parse_special);
  for (int32_t id : ids) TERN_CHECK(id >= 0 && id < tok.n_vocab());
  const bool byte_level = tok.vocab().model == tern::tok::VocabModel::kBpe;
  // Added tokens decode to their text as written, not through the byte alphabet (deepseek-coder
  // has added tokens such as "ÿ" that byte-level BPE also reaches for the raw byte FF), so the
  // exact round trip is only promised when every id is an ordinary token.
  bool all_normal = true;
  for (int32_t id : ids) all_normal &= tok.vocab().types[id] == tern::tok::TokenType::kNormal;
  if (byte_level && all_normal && !add_bos_eos && !tok.normalizes_to_nfc()) {
    TERN_CHECK_MSG(tok.decode(ids) == text, "byte-level BPE did not round-trip");
  }
  check_stream(tok, ids, false);
  check_stream(tok, ids, true);
  return 0;
}
