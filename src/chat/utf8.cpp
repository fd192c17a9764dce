#include "chat/utf8.h"

namespace tern::chat::utf8 {

char32_t next(std::string_view s, size_t* pos) {
  const size_t i = *pos;
  const auto b0 = static_cast<unsigned char>(s[i]);
  auto cont = [&](size_t k) { return i + k < s.size() && (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80; };
  auto byte = [&](size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[i + k]) & 0x3F); };
  if (b0 < 0x80) {
    *pos = i + 1;
    return b0;
  }
  if (b0 >= 0xC2 && b0 < 0xE0 && cont(1)) {
    *pos = i + 2;
    return (static_cast<char32_t>(b0 & 0x1F) << 6) | byte(1);
  }
  if (b0 >= 0xE0 && b0 < 0xF0 && cont(1) && cont(2)) {
    const char32_t cp = (static_cast<char32_t>(b0 & 0x0F) << 12) | (byte(1) << 6) | byte(2);
    if (cp >= 0x800) {
      *pos = i + 3;
      return cp;
    }
  }
  if (b0 >= 0xF0 && b0 < 0xF5 && cont(1) && cont(2) && cont(3)) {
    const char32_t cp = (static_cast<char32_t>(b0 & 0x07) << 18) | (byte(1) << 12) | (byte(2) << 6) | byte(3);
    if (cp >= 0x10000 && cp <= 0x10FFFF) {
      *pos = i + 4;
      return cp;
    }
  }
  *pos = i + 1;
  return b0;  // an invalid byte stands for itself (Latin-1 reading), one code point wide
}

void append(std::string* out, char32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp <= 0x10FFFF) {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    append(out, 0xFFFD);
  }
}

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) out.push_back(next(s, &pos));
  return out;
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) append(&out, cp);
  return out;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (size_t pos = 0; pos < s.size(); ++n) next(s, &pos);
  return n;
}

std::vector<size_t> offsets(std::string_view s) {
  std::vector<size_t> out;
  out.reserve(s.size() + 1);
  for (size_t pos = 0; pos < s.size();) {
    out.push_back(pos);
    next(s, &pos);
  }
  out.push_back(s.size());
  return out;
}

bool is_space(char32_t cp) {
  if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F)) return true;
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

namespace {
// Case pairs that differ by a fixed offset within a range: {lo, hi, delta upper->lower}.
struct CaseRange {
  char32_t upper_lo, upper_hi;
  int32_t delta;
};
constexpr CaseRange kCaseRanges[] = {
    {'A', 'Z', 32},        {0xC0, 0xD6, 32},     {0xD8, 0xDE, 32},    {0x391, 0x3A1, 32},
    {0x3A3, 0x3AB, 32},    {0x410, 0x42F, 32},   {0x400, 0x40F, 80},
};
// Latin Extended-A and Cyrillic extensions alternate upper (even) / lower (odd).
bool alternating_upper(char32_t cp) {
  return (cp >= 0x100 && cp <= 0x17F && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149 && cp != 0x17F &&
          ((cp <= 0x137 && cp % 2 == 0) || (cp >= 0x139 && cp <= 0x148 && cp % 2 == 1) ||
           (cp >= 0x14A && cp <= 0x177 && cp % 2 == 0) || (cp >= 0x179 && cp <= 0x17E && cp % 2 == 1))) ||
         (cp >= 0x460 && cp <= 0x4FF && cp % 2 == 0 && !(cp >= 0x482 && cp <= 0x489));
}
}  // namespace

char32_t to_lower(char32_t cp) {
  for (const CaseRange& r : kCaseRanges) {
    if (cp >= r.upper_lo && cp <= r.upper_hi) return cp + r.delta;
  }
  if (alternating_upper(cp)) return cp + 1;
  return cp;
}

char32_t to_upper(char32_t cp) {
  for (const CaseRange& r : kCaseRanges) {
    if (cp >= r.upper_lo + r.delta && cp <= r.upper_hi + r.delta) return cp - r.delta;
  }
  if (cp == 0xFF) return 0x178;
  if (cp == 0xB5) return 0x39C;
  if (cp == 0x3C2) return 0x3A3;  // final sigma
  if (cp > 0 && alternating_upper(cp - 1)) return cp - 1;
  return cp;
}

bool is_alpha(char32_t cp) {
  if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return true;
  if (cp == 0xAA || cp == 0xB5 || cp == 0xBA) return true;
  if (cp >= 0xC0 && cp <= 0xFF) return cp != 0xD7 && cp != 0xF7;
  return cp > 0xFF && (to_upper(cp) != cp || to_lower(cp) != cp);
}

bool is_printable(char32_t cp) {
  if (cp < 0x20 || cp == 0x7F) return false;
  if (cp < 0x7F) return true;
  if (cp <= 0xA0 || cp == 0xAD) return false;                      // C1 controls, NBSP, soft hyphen
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F)) return false;  // spaces, zero-width, marks
  if (cp >= 0x2028 && cp <= 0x202F) return false;                    // separators, bidi embedding
  if (cp >= 0x205F && cp <= 0x206F) return false;                    // math space, invisible operators
  if (cp == 0x3000 || cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB)) return false;
  if (cp >= 0xD800 && cp <= 0xF8FF) return false;  // surrogates, private use
  if (cp >= 0xF0000) return false;                 // supplementary private use
  return true;
}

bool valid(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    const size_t start = pos;
    const char32_t cp = next(s, &pos);
    if (pos == start + 1 && cp >= 0x80) return false;
  }
  return true;
}

}  // namespace tern::chat::utf8
