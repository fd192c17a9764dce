// UTF-8 decoding and the two-stage class lookup built from the generated range table.
#include "tokenizer/unicode.h"

#include <array>
#include <memory>

namespace tern::tok {
namespace {

// Two-stage table: stage1[cp >> 8] picks a 256-entry block in stage2; identical blocks are shared,
// so the ~4,400 blocks of the code space collapse to a few hundred. Built once, on first use.
struct ClassTable {
  std::vector<uint16_t> stage1;  // [kMaxCodePoint / 256 + 1] block index
  std::vector<uint16_t> stage2;  // [n_blocks * 256] flags
};

const ClassTable& class_table() {
  static const ClassTable table = [] {
    constexpr uint32_t kBlock = 256;
    constexpr uint32_t n_blocks_total = (kMaxCodePoint + 1) / kBlock;
    std::vector<uint16_t> flat(kMaxCodePoint + 1, 0);
    for (int i = 0; i < kNumCpRanges; ++i) {
      for (uint32_t cp = kCpRanges[i].first; cp <= kCpRanges[i].last; ++cp) flat[cp] = kCpRanges[i].flags;
    }
    ClassTable t;
    t.stage1.resize(n_blocks_total);
    std::vector<std::array<uint16_t, kBlock>> blocks;
    for (uint32_t b = 0; b < n_blocks_total; ++b) {
      std::array<uint16_t, kBlock> block;
      for (uint32_t i = 0; i < kBlock; ++i) block[i] = flat[b * kBlock + i];
      size_t found = blocks.size();
      for (size_t k = 0; k < blocks.size(); ++k) {
        if (blocks[k] == block) {
          found = k;
          break;
        }
      }
      if (found == blocks.size()) blocks.push_back(block);
      t.stage1[b] = static_cast<uint16_t>(found);
    }
    t.stage2.reserve(blocks.size() * kBlock);
    for (const auto& block : blocks) t.stage2.insert(t.stage2.end(), block.begin(), block.end());
    return t;
  }();
  return table;
}

}  // namespace

uint16_t cp_flags_slow(uint32_t cp) {
  if (cp > kMaxCodePoint) return 0;
  const ClassTable& t = class_table();
  return t.stage2[static_cast<size_t>(t.stage1[cp >> 8]) * 256 + (cp & 0xFF)];
}

uint32_t decode_utf8(std::string_view text, size_t pos, size_t* n_bytes) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  const uint8_t b0 = s[pos];
  *n_bytes = 1;
  if (b0 < 0x80) return b0;
  int n_cont = 0;
  uint32_t cp = 0;
  uint32_t min_cp = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n_cont = 1, cp = b0 & 0x1F, min_cp = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    n_cont = 2, cp = b0 & 0x0F, min_cp = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    n_cont = 3, cp = b0 & 0x07, min_cp = 0x10000;
  } else {
    return kRawByteBase + b0;  // a stray continuation byte or 0xF8..0xFF
  }
  if (pos + n_cont >= n) return kRawByteBase + b0;  // truncated at the end of the text
  for (int i = 1; i <= n_cont; ++i) {
    const uint8_t b = s[pos + i];
    if ((b & 0xC0) != 0x80) return kRawByteBase + b0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min_cp || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) return kRawByteBase + b0;
  *n_bytes = static_cast<size_t>(n_cont) + 1;
  return cp;
}

void decode_utf8_all(std::string_view text, std::vector<uint32_t>* cps, std::vector<uint32_t>* offsets_bytes) {
  cps->clear();
  offsets_bytes->clear();
  cps->reserve(text.size());
  offsets_bytes->reserve(text.size() + 1);
  size_t pos = 0;
  while (pos < text.size()) {
    const auto b = static_cast<uint8_t>(text[pos]);
    offsets_bytes->push_back(static_cast<uint32_t>(pos));
    if (b < 0x80) {  // fast path: ASCII
      cps->push_back(b);
      ++pos;
      continue;
    }
    size_t len = 1;
    cps->push_back(decode_utf8(text, pos, &len));
    pos += len;
  }
  offsets_bytes->push_back(static_cast<uint32_t>(text.size()));
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp >= kRawByteBase) {
    out->push_back(static_cast<char>(cp - kRawByteBase));
  } else if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t complete_utf8_prefix(std::string_view bytes) {
  // Only the last three bytes can belong to an unfinished sequence.
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<uint8_t>(bytes[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = 0;
    if ((b & 0xE0) == 0xC0) need = 2;
    else if ((b & 0xF0) == 0xE0) need = 3;
    else if ((b & 0xF8) == 0xF0) need = 4;
    if (need > back) {
      // Hold back only if what is there could still be a valid start of the sequence.
      size_t len = 0;
      std::string probe(bytes.substr(n - back));
      // Pad with a continuation byte that keeps any valid prefix valid, then check.
      probe.append(need - back, static_cast<char>(0x80));
      const uint32_t cp = decode_utf8(probe, 0, &len);
      bool could_complete = !is_raw_byte(cp);
      if (!could_complete) {  // 0x80 padding can fail where another byte would work (E0 A0, F0 90)
        probe.resize(back);
        probe.append(need - back, static_cast<char>(0xBF));
        could_complete = !is_raw_byte(decode_utf8(probe, 0, &len));
      }
      return could_complete ? n - back : n;
    }
    return n;
  }
  return n;
}

}  // namespace tern::tok
