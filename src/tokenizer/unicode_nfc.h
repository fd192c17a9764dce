// Unicode Normalization Form C, for the tokenizers whose tokenizer.json normalizes to NFC
// (Qwen2 and its derivatives). Tables are generated (tools/gen_unicode_tables.py).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tern::tok {

struct NfdEntry {
  uint32_t cp;
  uint32_t offset;  // into kNfdData
  uint32_t length;
};
struct CccRange {
  uint32_t first;
  uint32_t last;
  uint8_t ccc;
};
struct Composite {
  uint32_t first;
  uint32_t second;
  uint32_t composite;
};
extern const uint32_t kNfdData[];
extern const NfdEntry kNfdEntries[];
extern const int kNumNfdEntries;
extern const CccRange kCccRanges[];
extern const int kNumCccRanges;
extern const Composite kComposites[];
extern const int kNumComposites;

// True when `text` is certainly already NFC (no code point at or above U+0300), which lets the
// caller skip the copy; false means "maybe not".
bool nfc_quick_check(std::string_view text);

// NFC of `text`. Invalid UTF-8 bytes are kept as they are and act as starters.
std::string to_nfc(std::string_view text);

}  // namespace tern::tok
