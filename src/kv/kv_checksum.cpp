#include "kv/kv_checksum.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tern {
namespace {

// Reflected CRC-32C (Castagnoli) table, the polynomial the SSE4.2 crc32 instruction uses; the
// portable path and the instruction give identical lanes.
constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

uint32_t crc_byte(uint32_t crc, uint8_t b) { return kTable[(crc ^ b) & 0xff] ^ (crc >> 8); }
uint32_t crc_word_portable(uint32_t crc, uint64_t w) {
  for (int i = 0; i < 8; ++i) crc = crc_byte(crc, static_cast<uint8_t>(w >> (8 * i)));
  return crc;
}

// Feeds n_words 8-byte words to the lanes round-robin, starting at lane `first`.
void words_portable(uint32_t* lanes, const uint8_t* p, size_t n_words, unsigned first) {
  for (size_t i = 0; i < n_words; ++i) {
    uint64_t w;
    std::memcpy(&w, p + 8 * i, 8);
    uint32_t& lane = lanes[(first + i) & 3];
    lane = crc_word_portable(lane, w);
  }
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) void words_sse42(uint32_t* lanes, const uint8_t* p, size_t n_words, unsigned first) {
  size_t i = 0;
  // Rotate into lane order so the unrolled loop always starts at lane 0.
  for (; i < n_words && ((first + i) & 3) != 0; ++i) {
    uint64_t w;
    std::memcpy(&w, p + 8 * i, 8);
    lanes[(first + i) & 3] = static_cast<uint32_t>(_mm_crc32_u64(lanes[(first + i) & 3], w));
  }
  uint64_t a = lanes[0], b = lanes[1], c = lanes[2], d = lanes[3];
  for (; i + 4 <= n_words; i += 4) {
    uint64_t w[4];
    std::memcpy(w, p + 8 * i, 32);
    a = _mm_crc32_u64(a, w[0]);
    b = _mm_crc32_u64(b, w[1]);
    c = _mm_crc32_u64(c, w[2]);
    d = _mm_crc32_u64(d, w[3]);
  }
  lanes[0] = static_cast<uint32_t>(a);
  lanes[1] = static_cast<uint32_t>(b);
  lanes[2] = static_cast<uint32_t>(c);
  lanes[3] = static_cast<uint32_t>(d);
  for (; i < n_words; ++i) {
    uint64_t w;
    std::memcpy(&w, p + 8 * i, 8);
    lanes[(first + i) & 3] = static_cast<uint32_t>(_mm_crc32_u64(lanes[(first + i) & 3], w));
  }
}
bool have_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

}  // namespace

void KvChecksum::update(const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  const size_t n_words = bytes / 8;
  const unsigned first = static_cast<unsigned>(n_words_ & 3);
#if defined(__x86_64__)
  if (have_sse42()) {
    words_sse42(lanes_, p, n_words, first);
  } else {
    words_portable(lanes_, p, n_words, first);
  }
#else
  words_portable(lanes_, p, n_words, first);
#endif
  n_words_ += n_words;
  for (size_t i = n_words * 8; i < bytes; ++i) lanes_[0] = crc_byte(lanes_[0], p[i]);
  n_bytes_ += bytes;
}

uint64_t KvChecksum::digest() const {
  // Lanes 0/1 and 2/3 form two 64-bit halves; the length is mixed in so that appended zero
  // words (which a CRC lane without a final xor would absorb) still change the digest.
  const uint64_t lo = (uint64_t{~lanes_[1]} << 32) | ~lanes_[0];
  const uint64_t hi = (uint64_t{~lanes_[3]} << 32) | ~lanes_[2];
  uint64_t z = lo ^ ((hi << 23) | (hi >> 41)) ^ (n_bytes_ * 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
  return z ^ (z >> 29);
}

uint64_t kv_checksum(const void* data, size_t bytes) {
  KvChecksum c;
  c.update(data, bytes);
  return c.digest();
}

}  // namespace tern
