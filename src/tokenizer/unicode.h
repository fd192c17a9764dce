// Code points for the tokenizers: UTF-8 decoding that never fails, and O(1) class lookup.
//
// Invalid UTF-8 is not an error here: each byte that does not start a well-formed sequence becomes
// one "raw byte" code point (kRawByteBase + byte) with no class bits, so the pre-tokenizers treat
// it like an unclassified symbol and byte-level BPE still encodes the exact bytes (decode then
// round-trips them). Surrogates and over-long forms count as invalid, as in strict UTF-8.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tern::tok {

// Class bits, measured from Hugging Face's regex engine (see tools/gen_unicode_tables.py).
enum CpClass : uint16_t {
  kLetter = 1 << 0,       // \p{L}
  kNumber = 1 << 1,       // \p{N}
  kPunct = 1 << 2,        // \p{P}
  kSymbol = 1 << 3,       // \p{S}
  kMark = 1 << 4,         // \p{M}
  kSpace = 1 << 5,        // \s
  kUpper = 1 << 6,        // \p{Lu}
  kLower = 1 << 7,        // \p{Ll}
  kTitle = 1 << 8,        // \p{Lt}
  kModifier = 1 << 9,     // \p{Lm}
  kOtherLetter = 1 << 10, // \p{Lo}
  kHan = 1 << 11,         // \p{Han}
  kDigit = 1 << 12,       // \d
};

struct CpRange {
  uint32_t first;
  uint32_t last;  // inclusive
  uint16_t flags;
};
extern const CpRange kCpRanges[];
extern const int kNumCpRanges;

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr uint32_t kRawByteBase = 0x110000;  // raw byte b (from invalid UTF-8) is kRawByteBase + b

extern const uint16_t kAsciiFlags[128];  // cp_flags() of U+0000..U+007F, filled from kCpRanges
uint16_t cp_flags_slow(uint32_t cp);

// Class bits of a code point (0 for raw bytes and unassigned code points).
inline uint16_t cp_flags(uint32_t cp) { return cp < 0x80 ? kAsciiFlags[cp] : cp_flags_slow(cp); }

inline bool is_raw_byte(uint32_t cp) { return cp >= kRawByteBase; }

// Decodes one code point at text[pos]; sets *n_bytes to its length (1 for a raw byte).
uint32_t decode_utf8(std::string_view text, size_t pos, size_t* n_bytes);

// Decodes all of `text`. offsets_bytes gets cps.size() + 1 entries: the byte offset of each code
// point and then text.size().
void decode_utf8_all(std::string_view text, std::vector<uint32_t>* cps, std::vector<uint32_t>* offsets_bytes);

// Appends the UTF-8 form of cp (raw bytes are appended as the byte itself).
void append_utf8(uint32_t cp, std::string* out);

// Length of the longest prefix of `bytes` that ends on a code-point boundary, treating a trailing
// sequence that could still become valid UTF-8 as incomplete. Invalid bytes count as complete (they
// can never become valid), so a decoder that emits this prefix never splits a character.
size_t complete_utf8_prefix(std::string_view bytes);

}  // namespace tern::tok
