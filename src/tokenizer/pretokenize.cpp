// Hand-coded scanners for the pre-tokenizer regexes, and the tokenizer.ggml.pre name table.
//
// Every scanner answers "where does the regex's leftmost-first match starting at i end?" (i when
// there is none). Alternatives are tried in the regex's order; where a greedy quantifier would
// backtrack, the comment says which position the backtracking settles on.
#include "tokenizer/pretokenize.h"

#include <array>

#include "tokenizer/unicode.h"

namespace tern::tok {
namespace {

struct Text {
  const uint32_t* cp;
  const uint16_t* fl;
  uint32_t end;  // scanners never look at or past end (HF runs each stage on the piece alone)

  bool has(uint32_t i, uint16_t mask) const { return i < end && (fl[i] & mask) != 0; }
  bool is(uint32_t i, uint32_t c) const { return i < end && cp[i] == c; }
  bool is_crlf(uint32_t i) const { return i < end && (cp[i] == '\r' || cp[i] == '\n'); }
  // [^\s\p{L}\p{N}]
  bool is_other(uint32_t i) const { return i < end && (fl[i] & (kSpace | kLetter | kNumber)) == 0; }
  // [^\r\n\p{L}\p{N}]
  bool is_letter_prefix(uint32_t i) const { return i < end && !is_crlf(i) && (fl[i] & (kLetter | kNumber)) == 0; }

  uint32_t run(uint32_t i, uint16_t mask) const {
    while (i < end && (fl[i] & mask) != 0) ++i;
    return i;
  }
  template <typename Pred>
  uint32_t run_if(uint32_t i, Pred pred) const {
    while (i < end && pred(i)) ++i;
    return i;
  }
};

bool is_ascii_punct(uint32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
}
bool is_ascii_alpha(uint32_t c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }

// 's|'t|'re|'ve|'m|'ll|'d, optionally under (?i:...). Oniguruma's case folding also lets the long
// s (U+017F) match 's' (measured against HF), so it is folded too.
uint32_t contraction(const Text& t, uint32_t i, bool ignore_case) {
  if (!t.is(i, '\'') || i + 1 >= t.end) return i;
  auto fold = [ignore_case](uint32_t c) -> uint32_t {
    if (!ignore_case) return c;
    if (c >= 'A' && c <= 'Z') return c + 32;
    return c == 0x17F ? 's' : c;
  };
  const uint32_t c1 = fold(t.cp[i + 1]);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return i + 2;
  if (i + 2 < t.end) {
    const uint32_t c2 = fold(t.cp[i + 2]);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return i + 3;
  }
  return i;
}

// ` ?X+` where X is a class given by pred.
template <typename Pred>
uint32_t opt_space_run(const Text& t, uint32_t i, Pred pred) {
  const uint32_t start = (t.is(i, ' ') && pred(i + 1)) ? i + 1 : i;
  return pred(start) ? t.run_if(start, pred) : i;
}

// \s*[\r\n]+ : the greedy \s* gives back characters until [\r\n]+ can match, so the match ends just
// after the last \r or \n of the whitespace run.
uint32_t space_then_newlines(const Text& t, uint32_t i) {
  uint32_t k = i;
  uint32_t after_last_newline = i;
  while (t.has(k, kSpace)) {
    if (t.is_crlf(k)) after_last_newline = k + 1;
    ++k;
  }
  return after_last_newline;
}

// \s+(?!\S)|\s+ : a whitespace run that stops before a non-space leaves its last character for the
// next match (" word"), unless it is a single character.
uint32_t trailing_spaces(const Text& t, uint32_t i) {
  if (!t.has(i, kSpace)) return i;
  const uint32_t k = t.run(i, kSpace);
  if (k == t.end) return k;
  return k - i >= 2 ? k - 1 : k;
}

uint32_t match_gpt2(const Text& t, uint32_t i) {
  uint32_t m = contraction(t, i, false);
  if (m > i) return m;
  if ((m = opt_space_run(t, i, [&](uint32_t j) { return t.has(j, kLetter); })) > i) return m;
  if ((m = opt_space_run(t, i, [&](uint32_t j) { return t.has(j, kNumber); })) > i) return m;
  if ((m = opt_space_run(t, i, [&](uint32_t j) { return t.is_other(j); })) > i) return m;
  return trailing_spaces(t, i);
}

// The cl100k-style regex of llama3 (max_digits 3), qwen2 (1) and seed-coder (1, no newline tail);
// qwen3.5 counts marks as word characters (word = kLetter | kMark).
uint32_t match_llama3_like(const Text& t, uint32_t i, uint32_t max_digits, bool newline_tail,
                           uint16_t word = kLetter) {
  uint32_t m = contraction(t, i, true);
  if (m > i) return m;
  // [^\r\n\p{L}\p{N}]?\p{L}+  (or [\p{L}\p{M}]+)
  if (t.is_letter_prefix(i) && !t.has(i, word) && t.has(i + 1, word)) return t.run(i + 1, word);
  if (t.has(i, word)) return t.run(i, word);
  // \p{N}{1,max}
  if (t.has(i, kNumber)) {
    uint32_t k = i;
    while (k - i < max_digits && t.has(k, kNumber)) ++k;
    return k;
  }
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  if ((m = opt_space_run(t, i, [&](uint32_t j) { return t.is_other(j) && !t.has(j, word); })) > i) {
    if (newline_tail) m = t.run_if(m, [&](uint32_t j) { return t.is_crlf(j); });
    return m;
  }
  if ((m = space_then_newlines(t, i)) > i) return m;
  return trailing_spaces(t, i);
}

// The o200k-style regex of gpt-4o, tekken and kimi-k2, which splits words at case changes.
struct CaseSplitOptions {
  uint32_t max_digits;       // \p{N}{1,max}
  bool contraction_suffix;   // (?i:'s|...)? after a word
  bool slash_tail;           // [\r\n/]* (else [\r\n]*) after punctuation
  uint16_t excluded;         // class bits removed from both letter classes (kimi: kHan)
};

uint32_t match_case_split(const Text& t, uint32_t i, const CaseSplitOptions& o) {
  constexpr uint16_t kUpperish = kUpper | kTitle | kModifier | kOtherLetter | kMark;  // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
  constexpr uint16_t kLowerish = kLower | kModifier | kOtherLetter | kMark;           // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
  auto upper = [&](uint32_t j) { return t.has(j, kUpperish) && !t.has(j, o.excluded); };
  auto lower = [&](uint32_t j) { return t.has(j, kLowerish) && !t.has(j, o.excluded); };
  // U*L+ from j: U* gives back characters until L+ can start, so the match ends either after the
  // lower run that follows the upper run, or just after the last L-class character inside it.
  auto upper_star_lower_plus = [&](uint32_t j) -> uint32_t {
    const uint32_t k = t.run_if(j, upper);
    if (lower(k)) return t.run_if(k, lower);
    for (uint32_t p = k; p > j; --p) {
      if (lower(p - 1)) return p;
    }
    return j;  // no match
  };
  auto upper_plus_lower_star = [&](uint32_t j) -> uint32_t {
    const uint32_t k = t.run_if(j, upper);
    return k > j ? t.run_if(k, lower) : j;
  };
  auto with_suffix = [&](uint32_t m) {
    if (!o.contraction_suffix) return m;
    return contraction(t, m, true);
  };
  const bool prefix = t.is_letter_prefix(i);
  uint32_t m;
  if (prefix && (m = upper_star_lower_plus(i + 1)) > i + 1) return with_suffix(m);
  if ((m = upper_star_lower_plus(i)) > i) return with_suffix(m);
  if (prefix && (m = upper_plus_lower_star(i + 1)) > i + 1) return with_suffix(m);
  if ((m = upper_plus_lower_star(i)) > i) return with_suffix(m);
  if (t.has(i, kNumber)) {
    uint32_t k = i;
    while (k - i < o.max_digits && t.has(k, kNumber)) ++k;
    return k;
  }
  if ((m = opt_space_run(t, i, [&](uint32_t j) { return t.is_other(j); })) > i) {
    return t.run_if(m, [&](uint32_t j) { return t.is_crlf(j) || (o.slash_tail && t.is(j, '/')); });
  }
  if ((m = space_then_newlines(t, i)) > i) return m;
  return trailing_spaces(t, i);
}

uint32_t match_deepseek_v3(const Text& t, uint32_t i) {
  // [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
  if (i < t.end && is_ascii_punct(t.cp[i]) && i + 1 < t.end && is_ascii_alpha(t.cp[i + 1])) {
    return t.run_if(i + 1, [&](uint32_t j) { return is_ascii_alpha(t.cp[j]); });
  }
  // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
  const bool prefix = i < t.end && !t.is_crlf(i) && !t.has(i, kLetter | kPunct | kSymbol);
  if (prefix && t.has(i + 1, kLetter | kMark)) return t.run(i + 1, kLetter | kMark);
  if (t.has(i, kLetter | kMark)) return t.run(i, kLetter | kMark);
  // ` ?[\p{P}\p{S}]+[\r\n]*`
  uint32_t m = opt_space_run(t, i, [&](uint32_t j) { return t.has(j, kPunct | kSymbol); });
  if (m > i) return t.run_if(m, [&](uint32_t j) { return t.is_crlf(j); });
  if ((m = space_then_newlines(t, i)) > i) return m;
  return trailing_spaces(t, i);
}

// \s?X+ : any whitespace character may lead, not only ' '.
uint32_t opt_space_run_ws(const Text& t, uint32_t i, uint16_t cls) {
  const uint32_t start = (t.has(i, kSpace) && t.has(i + 1, cls)) ? i + 1 : i;
  return t.has(start, cls) ? t.run(start, cls) : i;
}

bool is_bloom_word_char(const Text& t, uint32_t j) {
  if (j >= t.end || t.has(j, kSpace)) return false;
  switch (t.cp[j]) {
    case '(': case ')': case '|': case '.': case ',': case '!': case '?':
    case 0x2026: case 0x3002: case 0xFF0C: case 0x3001: case 0x0964: case 0x06D4: case 0x060C:
      return false;
    default:
      return true;
  }
}

bool in_ranges(uint32_t c, std::initializer_list<std::array<uint32_t, 2>> ranges) {
  for (const auto& r : ranges) {
    if (c >= r[0] && c <= r[1]) return true;
  }
  return false;
}

// The letter class of deepseek-llm's second Split, as its tokenizer.json lists it.
constexpr std::array<uint32_t, 2> kDeepseekLatinRanges[] = {
    {0x41, 0x5A},       {0x61, 0x7A},       {0xB5, 0xB5},       {0xC0, 0xD6},       {0xD8, 0xF6},
    {0xF8, 0x1BA},      {0x1BC, 0x1BF},     {0x1C4, 0x293},     {0x295, 0x2AF},     {0x370, 0x373},
    {0x376, 0x377},     {0x37B, 0x37D},     {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},
    {0x38C, 0x38C},     {0x38E, 0x3A1},     {0x3A3, 0x3F5},     {0x3F7, 0x481},     {0x48A, 0x52F},
    {0x531, 0x556},     {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},   {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},   {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},
    {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},   {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},
    {0x1F5B, 0x1F5B},   {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},   {0x1FD6, 0x1FDB},
    {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},   {0x2102, 0x2102},   {0x2107, 0x2107},
    {0x210A, 0x2113},   {0x2115, 0x2115},   {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},
    {0x2128, 0x2128},   {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},   {0x2C7E, 0x2CE4},
    {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},   {0xA680, 0xA69B},   {0xA722, 0xA76F},
    {0xA771, 0xA787},   {0xA78B, 0xA78E},   {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},
    {0xFF21, 0xFF3A},   {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};

bool is_deepseek_latin(uint32_t c) {
  for (const auto& r : kDeepseekLatinRanges) {
    if (c >= r[0] && c <= r[1]) return true;
  }
  return false;
}

// [!-/:-~！-／：-～‘-‟　-。]
bool is_deepseek_punct(uint32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x7E) || (c >= 0xFF01 && c <= 0xFF0F) ||
         (c >= 0xFF1A && c <= 0xFF5E) || (c >= 0x2018 && c <= 0x201F) || (c >= 0x3000 && c <= 0x3002);
}

// \s?X+ where X is a predicate on code points.
template <typename Pred>
uint32_t opt_ws_run_if(const Text& t, uint32_t i, Pred pred) {
  auto in_class = [&](uint32_t j) { return j < t.end && pred(t.cp[j]); };
  const uint32_t start = (t.has(i, kSpace) && in_class(i + 1)) ? i + 1 : i;
  return in_class(start) ? t.run_if(start, in_class) : i;
}

bool literal_at(const Text& t, uint32_t i, std::string_view lit) {
  if (i + lit.size() > t.end) return false;
  for (size_t k = 0; k < lit.size(); ++k) {
    if (t.cp[i + k] != static_cast<uint8_t>(lit[k])) return false;
  }
  return true;
}

uint32_t match_chameleon_sentinel(const Text& t, uint32_t i) {
  constexpr std::string_view kPrefix = "<sentinel:";
  if (!literal_at(t, i, kPrefix)) return i;
  uint32_t k = i + static_cast<uint32_t>(kPrefix.size());
  const uint32_t digits = k;
  while (k < t.end && t.cp[k] >= '0' && t.cp[k] <= '9') ++k;
  return (k > digits && t.is(k, '>')) ? k + 1 : i;
}

// IMGIMG, one to four of A..I, Z. The {1,4} gives back letters only to find the Z, and a letter
// is never a Z, so the run must be at most four letters long and end at the Z.
uint32_t match_chameleon_image(const Text& t, uint32_t i) {
  if (!literal_at(t, i, "IMGIMG")) return i;
  uint32_t k = i + 6;
  while (k < t.end && k - (i + 6) < 4 && t.cp[k] >= 'A' && t.cp[k] <= 'I') ++k;
  return (k > i + 6 && t.is(k, 'Z')) ? k + 1 : i;
}

uint32_t match_at(Split stage, const Text& t, uint32_t i) {
  switch (stage) {
    case Split::kGpt2: return match_gpt2(t, i);
    case Split::kLlama3: return match_llama3_like(t, i, 3, true);
    case Split::kQwen2: return match_llama3_like(t, i, 1, true);
    case Split::kQwen35: return match_llama3_like(t, i, 1, true, kLetter | kMark);
    case Split::kSeedCoder: return match_llama3_like(t, i, 1, false);
    case Split::kGpt4o: return match_case_split(t, i, {3, true, true, 0});
    case Split::kTekken: return match_case_split(t, i, {1, false, true, 0});
    case Split::kKimiK2: return match_case_split(t, i, {3, true, false, kHan});
    case Split::kDeepseekV3: return match_deepseek_v3(t, i);
    case Split::kBloom: return opt_space_run(t, i, [&](uint32_t j) { return is_bloom_word_char(t, j); });
    case Split::kDigit: return t.has(i, kNumber) ? i + 1 : i;
    case Split::kDigitRun: return t.run(i, kNumber);
    case Split::kDigits1to3: {
      uint32_t k = i;
      while (k - i < 3 && t.has(k, kNumber)) ++k;
      return k;
    }
    case Split::kNewline: return t.is_crlf(i) ? i + 1 : i;
    case Split::kSpaceLetters: return opt_space_run_ws(t, i, kLetter);
    case Split::kSpacePunct: return opt_space_run_ws(t, i, kPunct);
    case Split::kCjkDeepseek:
      return t.run_if(i, [&](uint32_t j) {
        return in_ranges(t.cp[j], {{0x4E00, 0x9FA5}, {0x0800, 0x4E00}, {0xAC00, 0xD7FF}});
      });
    case Split::kCjkKana:
      return t.run_if(i, [&](uint32_t j) {
        return in_ranges(t.cp[j], {{0x4E00, 0x9FA5}, {0x3040, 0x309F}, {0x30A0, 0x30FF}});
      });
    case Split::kHanRun: return t.run(i, kHan);
    case Split::kFalconPunct:
      return t.run_if(i, [&](uint32_t j) { return is_ascii_punct(t.cp[j]) || t.has(j, kPunct); });
    case Split::kDeepseekLatin: return opt_ws_run_if(t, i, is_deepseek_latin);
    case Split::kDeepseekPunct: return opt_ws_run_if(t, i, is_deepseek_punct);
    case Split::kTrailingSpace: {
      const uint32_t k = t.run(i, kSpace);
      return k == t.end ? k : i;
    }
    case Split::kDigitGroups3: return i;  // zero-width: handled by split_span
    case Split::kChameleonSentinel: return match_chameleon_sentinel(t, i);
    case Split::kChameleonImage: return match_chameleon_image(t, i);
    case Split::kChameleonSpaces:
      if (t.is(i, '\t') || t.is(i, '\n')) return i + 1;
      if (literal_at(t, i, "    ")) return i + 4;
      return literal_at(t, i, "  ") ? i + 2 : i;
    case Split::kPunctChar: return (i < t.end && (is_ascii_punct(t.cp[i]) || t.has(i, kPunct))) ? i + 1 : i;
  }
  return i;
}

}  // namespace

// (?=(\d{3})+(?!\d)) matches the empty string before every position from which a whole number of
// digit triples runs to the end of a digit run; the piece is cut at those positions.
void split_digit_groups(const Text& t, CpSpan span, std::vector<CpSpan>* out) {
  uint32_t piece_begin = span.begin;
  for (uint32_t i = span.begin; i < span.end;) {
    if (!t.has(i, kDigit)) {
      ++i;
      continue;
    }
    const uint32_t run_end = t.run(i, kDigit);
    for (uint32_t cut = i + (run_end - i) % 3; cut < run_end; cut += 3) {
      if (cut > piece_begin) {
        out->push_back({piece_begin, cut});
        piece_begin = cut;
      }
    }
    i = run_end;
  }
  if (piece_begin < span.end) out->push_back({piece_begin, span.end});
}

void split_span(Split stage, const uint32_t* cps, const uint16_t* flags, CpSpan span, std::vector<CpSpan>* out) {
  const Text t{cps, flags, span.end};
  if (stage == Split::kDigitGroups3) {
    split_digit_groups(t, span, out);
    return;
  }
  uint32_t gap_begin = span.begin;
  uint32_t i = span.begin;
  while (i < span.end) {
    const uint32_t m = match_at(stage, t, i);
    if (m == i) {  // no match starts here: i joins the gap
      ++i;
      continue;
    }
    if (gap_begin < i) out->push_back({gap_begin, i});
    out->push_back({i, m});
    i = gap_begin = m;
  }
  if (gap_begin < span.end) out->push_back({gap_begin, span.end});
}

void pre_tokenize(const PreTokenizer& pre, const std::vector<uint32_t>& cps, const std::vector<uint16_t>& flags,
                  std::vector<CpSpan>* pieces, std::vector<CpSpan>* scratch) {
  pieces->clear();
  if (cps.empty()) return;
  pieces->push_back({0, static_cast<uint32_t>(cps.size())});
  for (Split stage : pre.stages) {
    scratch->clear();
    for (const CpSpan& piece : *pieces) split_span(stage, cps.data(), flags.data(), piece, scratch);
    pieces->swap(*scratch);
  }
}

void split_bytes(ByteSplit stage, std::string_view text, ByteSpan span, std::vector<ByteSpan>* out) {
  auto byte = [&](uint32_t i) { return static_cast<uint8_t>(text[i]); };
  // Bytes whose byte-level character is numeric (Rust's char::is_numeric): 0-9 and ² ³ ¹ ¼ ½ ¾.
  auto numeric = [&](uint32_t i) {
    const uint8_t b = byte(i);
    return (b >= '0' && b <= '9') || b == 0xB2 || b == 0xB3 || b == 0xB9 || (b >= 0xBC && b <= 0xBE);
  };
  auto ascii_digit = [&](uint32_t i) { return byte(i) >= '0' && byte(i) <= '9'; };
  uint32_t gap_begin = span.begin;
  uint32_t i = span.begin;
  while (i < span.end) {
    uint32_t m = i;
    if (stage == ByteSplit::kNumericRun) {
      while (m < span.end && numeric(m)) ++m;
    } else if (i + 3 <= span.end && ascii_digit(i) && ascii_digit(i + 1) && ascii_digit(i + 2)) {
      m = i + 3;
    }
    if (m == i) {
      ++i;
      continue;
    }
    if (gap_begin < i) out->push_back({gap_begin, i});
    out->push_back({i, m});
    i = gap_begin = m;
  }
  if (gap_begin < span.end) out->push_back({gap_begin, span.end});
}

namespace {

struct Family {
  const char* name;
  std::vector<Split> stages;
  std::vector<ByteSplit> byte_stages;
  bool ignore_merges;
  bool nfc = false;
};

// The distinct pre-tokenizers, as the original Hugging Face tokenizer.json files define them.
const std::vector<Family>& families() {
  static const std::vector<Family> list = {
      {"gpt2", {Split::kGpt2}, {}, false},
      {"llama3", {Split::kLlama3}, {}, true},
      {"cl100k", {Split::kLlama3}, {}, false},
      {"qwen2", {Split::kQwen2}, {}, false, /*nfc=*/true},
      {"qwen2-regex", {Split::kQwen2}, {}, false},
      {"qwen35", {Split::kQwen35}, {}, false, /*nfc=*/true},
      {"seed-coder", {Split::kSeedCoder}, {}, false},
      {"starcoder", {Split::kDigit, Split::kGpt2}, {}, false},
      {"deepseek-coder",
       {Split::kNewline, Split::kSpaceLetters, Split::kSpacePunct, Split::kCjkDeepseek, Split::kDigit},
       {},
       false},
      {"deepseek-v3", {Split::kDigits1to3, Split::kCjkKana, Split::kDeepseekV3}, {}, false},
      {"falcon", {Split::kFalconPunct, Split::kGpt2}, {ByteSplit::kNumericRun, ByteSplit::kAsciiDigits3}, false},
      {"bloom", {Split::kBloom}, {}, false},
      {"viking", {Split::kBloom, Split::kDigit}, {}, false},
      {"tekken", {Split::kTekken}, {}, true},
      {"deepseek-llm",
       {Split::kNewline, Split::kDeepseekLatin, Split::kDeepseekPunct, Split::kTrailingSpace, Split::kCjkDeepseek,
        Split::kDigitRun},
       {},
       false},
      {"superbpe", {Split::kDigitRun, Split::kDigitGroups3}, {}, false},
      {"chameleon",
       {Split::kChameleonSentinel, Split::kChameleonImage, Split::kChameleonSpaces, Split::kDigit, Split::kPunctChar,
        Split::kGpt2},
       {},
       false},
      {"gpt-4o", {Split::kGpt4o}, {}, false},
      {"kimi-k2", {Split::kHanRun, Split::kKimiK2}, {}, false},
  };
  return list;
}

// tokenizer.ggml.pre value -> family name. Names that share a family are models whose
// tokenizer.json carries the same pre-tokenizer.
struct Alias {
  const char* pre;
  const char* family;
};
constexpr Alias kAliases[] = {
    {"gpt-2", "gpt2"}, {"gpt2", "gpt2"}, {"mpt", "gpt2"}, {"olmo", "gpt2"}, {"jais", "gpt2"},
    {"trillion", "gpt2"}, {"granite-docling", "gpt2"}, {"phi-2", "gpt2"}, {"jina-es", "gpt2"},
    {"jina-de", "gpt2"}, {"gigachat", "gpt2"}, {"jina-v1-en", "gpt2"}, {"jina-v2-en", "gpt2"},
    {"jina-v2-es", "gpt2"}, {"jina-v2-de", "gpt2"}, {"jina-v2-code", "gpt2"}, {"roberta-bpe", "gpt2"},
    {"a.x-4.0", "gpt2"}, {"mellum", "gpt2"}, {"modern-bert", "gpt2"}, {"exaone4", "gpt2"},
    {"llama3", "llama3"}, {"llama-v3", "llama3"}, {"llama-bpe", "llama3"}, {"falcon3", "llama3"},
    {"falcon-h1", "llama3"}, {"pixtral", "llama3"}, {"midm-2.0", "llama3"}, {"lfm2", "llama3"},
    {"jina-v5-nano", "llama3"},
    {"dbrx", "cl100k"}, {"smaug-bpe", "cl100k"}, {"chatglm-bpe", "cl100k"}, {"glm4", "cl100k"},
    {"qwen2", "qwen2"}, {"deepseek-r1-qwen", "qwen2"}, {"f2llmv2", "qwen2"}, {"kormo", "qwen2"},
    {"stablelm2", "qwen2-regex"}, {"megrez", "qwen2-regex"}, {"hunyuan", "qwen2-regex"},
    {"grok-2", "qwen2-regex"}, {"bailingmoe", "qwen2-regex"}, {"bailingmoe2", "qwen2-regex"},
    {"llada-moe", "qwen2-regex"}, {"solar-open", "qwen2-regex"},
    {"qwen35", "qwen35"},
    {"seed-coder", "seed-coder"},
    {"starcoder", "starcoder"}, {"refact", "starcoder"}, {"command-r", "starcoder"}, {"smollm", "starcoder"},
    {"codeshell", "starcoder"}, {"exaone", "starcoder"}, {"minerva-7b", "starcoder"},
    {"deepseek-llm", "deepseek-llm"},
    {"deepseek-coder", "deepseek-coder"},
    {"deepseek-v3", "deepseek-v3"}, {"hunyuan-dense", "deepseek-v3"}, {"joyai-llm", "deepseek-v3"},
    {"falcon", "falcon"},
    {"bloom", "bloom"}, {"poro-chat", "bloom"}, {"gpt3-finnish", "bloom"},
    {"viking", "viking"},
    {"tekken", "tekken"},
    {"gpt-4o", "gpt-4o"}, {"llama4", "gpt-4o"}, {"minimax-m2", "gpt-4o"}, {"kanana2", "gpt-4o"},
    {"talkie", "gpt-4o"},
    {"kimi-k2", "kimi-k2"},
    {"superbpe", "superbpe"},
    {"chameleon", "chameleon"},
};

}  // namespace

Result<PreTokenizer> pre_tokenizer_for(std::string_view pre_name, std::string* warning) {
  std::string_view family_name;
  if (pre_name == "default" || pre_name.empty()) {
    family_name = "gpt2";
    if (warning != nullptr) {
      *warning = "tokenizer.ggml.pre is \"default\" (an old converter did not record the pre-tokenizer); "
                 "using GPT-2's split, which may not match the original tokenizer";
    }
  } else {
    for (const Alias& a : kAliases) {
      if (pre_name == a.pre) family_name = a.family;
    }
  }
  if (family_name.empty()) {
    std::string names;
    for (const Alias& a : kAliases) names += std::string(names.empty() ? "" : ", ") + a.pre;
    return error("tokenizer.ggml.pre: unsupported pre-tokenizer \"" + std::string(pre_name) + "\" (known: " + names +
                 ")");
  }
  for (const Family& f : families()) {
    if (family_name == f.name) return PreTokenizer{f.name, f.stages, f.byte_stages, f.ignore_merges, f.nfc};
  }
  return error("tokenizer.ggml.pre: family \"" + std::string(family_name) + "\" has no definition");  // unreachable
}

std::vector<std::string> known_pre_tokenizer_names() {
  std::vector<std::string> names;
  for (const Alias& a : kAliases) names.emplace_back(a.pre);
  return names;
}

}  // namespace tern::tok
