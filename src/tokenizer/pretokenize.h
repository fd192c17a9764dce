// Pre-tokenizers: the regex splits that byte-level BPE tokenizers apply before merging, written as
// hand-coded scanners over code points (std::regex has no \p{L}).
//
// Each tokenizer.ggml.pre name maps to a PreTokenizer: a sequence of split stages, applied as
// Hugging Face applies a Sequence of Split(..., behavior=Isolated) pre-tokenizers: each stage
// re-splits every piece of the previous stage independently (a stage's lookahead and `$` see only
// the piece), and both the matches and the unmatched gaps between them become pieces. A scanner
// returns, for a start position, the end of the regex's leftmost-first match there, so the split
// equals the regex's find-all.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tern::tok {

// One split stage. The comment on each is the regex it reproduces exactly (HF / Oniguruma syntax).
enum class Split : uint8_t {
  kGpt2,          // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,        // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kQwen2,         // as kLlama3 with \p{N} (one digit per piece)
  kQwen35,        // as kQwen2 with [\p{L}\p{M}]+ words and [^\s\p{L}\p{M}\p{N}]+ punctuation
  kSeedCoder,     // as kQwen2 without the [\r\n]* after punctuation
  kGpt4o,         // [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
                  // |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
                  // |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kTekken,        // as kGpt4o without the contraction suffixes and with \p{N} (one digit)
  kKimiK2,        // as kGpt4o with Han excluded from both letter classes and [\r\n]* after punctuation
  kDeepseekV3,    // [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
                  // | ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kBloom,         //  ?[^(\s|[.,!?…。，、।۔،])]+
  kDigit,         // \p{N}
  kDigitRun,      // \p{N}+
  kDigits1to3,    // \p{N}{1,3}
  kNewline,       // [\r\n]
  kSpaceLetters,  // \s?\p{L}+
  kSpacePunct,    // \s?\p{P}+
  kCjkDeepseek,   // [一-龥ࠀ-一가-퟿]+
  kCjkKana,       // [一-龥぀-ゟ゠-ヿ]+
  kHanRun,        // [\p{Han}]+
  kFalconPunct,   // HF Punctuation(behavior=contiguous): runs of ASCII punctuation or \p{P}
  kDeepseekLatin, // \s?[A-Za-zµÀ-ÖØ-öø-ƺ...𞤀-𞥃]+ (deepseek-llm's list of cased-script letters)
  kDeepseekPunct, // \s?[!-/:-~！-／：-～‘-‟　-。]+
  kTrailingSpace, // \s+$
  kDigitGroups3,  // (?=(\d{3})+(?!\d)) : zero-width, splits digit runs into threes from the right
  kChameleonSentinel,  // <sentinel:[0-9]+>
  kChameleonImage,     // (IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z
  kChameleonSpaces,    // ([\t\n]|    |  )
  kPunctChar,          // [\p{P}!-/:-@\[-`{-~] (one character)
};

// Stages that HF runs after ByteLevel, on the byte-level characters (falcon's Digits and
// [0-9]{3} splits): they see bytes 0xB2 0xB3 0xB9 0xBC-0xBE as the numerals ² ³ ¹ ¼ ½ ¾.
enum class ByteSplit : uint8_t {
  kNumericRun,    // Digits(individual_digits=false) over byte-level chars
  kAsciiDigits3,  // [0-9][0-9][0-9]
};

struct PreTokenizer {
  std::string name;                  // canonical family name
  std::vector<Split> stages;         // over code points, in order
  std::vector<ByteSplit> byte_stages;  // then over bytes, in order
  bool ignore_merges = false;        // a piece that is itself a token skips merging (llama3)
  bool nfc = false;                  // the tokenizer.json normalizes to NFC first (qwen2)
};

// Maps tokenizer.ggml.pre to its family. Unknown names are an error naming the value; "default"
// (written by old converters) falls back to GPT-2's regex and sets *warning.
Result<PreTokenizer> pre_tokenizer_for(std::string_view pre_name, std::string* warning);

// Every tokenizer.ggml.pre name that pre_tokenizer_for() accepts (for tests and --help).
std::vector<std::string> known_pre_tokenizer_names();

// A half-open range of code-point indices.
struct CpSpan {
  uint32_t begin;
  uint32_t end;
};

// Runs one code-point stage over cps[span) and appends the resulting pieces (matches and gaps, in
// order, none empty) to *out. flags[i] == cp_flags(cps[i]).
void split_span(Split stage, const uint32_t* cps, const uint16_t* flags, CpSpan span, std::vector<CpSpan>* out);

// Runs all code-point stages over the whole of cps and returns the pieces.
void pre_tokenize(const PreTokenizer& pre, const std::vector<uint32_t>& cps, const std::vector<uint16_t>& flags,
                  std::vector<CpSpan>* pieces, std::vector<CpSpan>* scratch);

// A half-open byte range.
struct ByteSpan {
  uint32_t begin;
  uint32_t end;
};
// Runs one byte stage over text[span) and appends the pieces to *out.
void split_bytes(ByteSplit stage, std::string_view text, ByteSpan span, std::vector<ByteSpan>* out);

}  // namespace tern::tok
