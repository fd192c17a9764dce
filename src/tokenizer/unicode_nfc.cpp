// NFC: decompose canonically, order combining marks by class, recompose primary composites.
// Hangul syllables are decomposed and composed arithmetically (Unicode ch. 3.12).
#include "tokenizer/unicode_nfc.h"

#include <algorithm>
#include <vector>

#include "tokenizer/unicode.h"

namespace tern::tok {
namespace {

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t combining_class(uint32_t cp) {
  if (cp < 0x300 || is_raw_byte(cp)) return 0;
  auto it = std::upper_bound(kCccRanges, kCccRanges + kNumCccRanges, cp,
                             [](uint32_t c, const CccRange& r) { return c < r.first; });
  if (it == kCccRanges) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

void decompose(uint32_t cp, std::vector<uint32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  if (cp >= 0xC0 && !is_raw_byte(cp)) {
    auto it = std::lower_bound(kNfdEntries, kNfdEntries + kNumNfdEntries, cp,
                               [](const NfdEntry& e, uint32_t c) { return e.cp < c; });
    if (it != kNfdEntries + kNumNfdEntries && it->cp == cp) {
      out->insert(out->end(), kNfdData + it->offset, kNfdData + it->offset + it->length);
      return;
    }
  }
  out->push_back(cp);
}

// The primary composite of (a, b), or 0 when they do not compose.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  auto it = std::lower_bound(kComposites, kComposites + kNumComposites, std::pair{a, b},
                             [](const Composite& c, const std::pair<uint32_t, uint32_t>& key) {
                               return c.first != key.first ? c.first < key.first : c.second < key.second;
                             });
  if (it != kComposites + kNumComposites && it->first == a && it->second == b) return it->composite;
  return 0;
}

}  // namespace

bool nfc_quick_check(std::string_view text) {
  // U+0300 is the first code point that can change under NFC; its UTF-8 lead byte is 0xCC.
  for (char ch : text) {
    if (static_cast<uint8_t>(ch) >= 0xCC) return false;
  }
  return true;
}

std::string to_nfc(std::string_view text) {
  if (nfc_quick_check(text)) return std::string(text);
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t len = 1;
    decompose(decode_utf8(text, pos, &len), &cps);
    pos += len;
  }
  // Canonical ordering: a stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (combining_class(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && combining_class(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(j),
                     [](uint32_t a, uint32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  // Canonical composition: a character joins the last starter unless a character of the same or
  // higher class (or a starter) stands between them.
  std::vector<uint32_t> out;
  out.reserve(cps.size());
  size_t starter = SIZE_MAX;  // index in out of the last starter
  int last_ccc = 0;           // class of the last character appended after that starter
  for (uint32_t cp : cps) {
    const int ccc = combining_class(cp);
    if (starter != SIZE_MAX) {
      const bool adjacent = out.size() == starter + 1;
      if (adjacent || (ccc != 0 && last_ccc < ccc)) {
        if (const uint32_t composite = compose(out[starter], cp); composite != 0) {
          out[starter] = composite;
          continue;
        }
      }
    }
    if (ccc == 0) starter = out.size();
    last_ccc = ccc;
    out.push_back(cp);
  }
  std::string result;
  result.reserve(text.size());
  for (uint32_t cp : out) append_utf8(cp, &result);
  return result;
}

}  // namespace tern::tok
