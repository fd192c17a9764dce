// libFuzzer target for building a tokenizer from GGUF metadata (untrusted file). Each input is a
// GGUF image; if the reader accepts it, load_vocab() + Tokenizer::from_vocab() must either fail
// with a message naming a tokenizer.ggml.* key (or the vocab) or produce a tokenizer that encodes
// and decodes a fixed text with every id in range. Seeds: fuzz/corpus/tokenizer_vocab/.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/check.h"
#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = tern::gguf::File::parse(data, size, "fuzz");
  if (!file) return 0;
  auto tok = tern::tok::Tokenizer::from_gguf(*file);
  if (!tok) {
    const std::string& msg = tok.status().message();
    TERN_CHECK_MSG(msg.find("tokenizer.ggml.") != std::string::npos || msg.find("vocab") != std::string::npos,
                   "a rejected vocabulary must name the offending key");
    return 0;
  }
  const tern::tok::Tokenizer& t = **tok;
  const std::string text = "Hello, world! <|im_end|> 123 \xE4\xBD\xA0\xE5\xA5\xBD \xFF";
  for (bool special : {false, true}) {
    const auto ids = t.encode(text, special, special);
    for (int32_t id : ids) TERN_CHECK(id >= 0 && id < t.n_vocab());
    (void)t.decode(ids, special);
  }
  (void)t.fingerprint();
  return 0;
}
