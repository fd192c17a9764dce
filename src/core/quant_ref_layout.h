// Where each element's quant bits and each sub-block's scale bits live inside a GGUF block.
// Internal to the reference (de)quantizers (quant_ref*.cpp): the decoder and the encoder read the
// layout from these same few functions, so they cannot disagree about it.
//
// Letters: e = element index inside the block (0..31 for legacy quants, 0..255 for k-quants),
// j = sub-block index. The layouts below are the GGUF block definitions, re-derived from the
// format description and checked bit for bit against the gguf Python package's decoder.
#pragma once

#include <cstdint>

namespace tern::quant_layout {

// Bits [shift, shift + width) of bytes[index] hold one element's field.
struct BitSlot {
  int index;
  int shift;
};

inline int get_bits(const uint8_t* bytes, BitSlot slot, int width) {
  return (bytes[slot.index] >> slot.shift) & ((1 << width) - 1);
}

// Precondition: the slot's bits are still zero (encoders clear the block first).
inline void put_bits(uint8_t* bytes, BitSlot slot, int width, int value) {
  bytes[slot.index] = static_cast<uint8_t>(bytes[slot.index] | ((value & ((1 << width) - 1)) << slot.shift));
}

// Legacy quants (q4_0 .. q5_1), 32 elements: qs[e % 16] holds e's low nibble for e < 16 and the
// high nibble for e >= 16 (the two halves of the block share bytes).
inline BitSlot legacy_nibble(int e) { return {e % 16, 4 * (e / 16)}; }
// q5_0 / q5_1: bit 4 of element e is bit e of the little-endian 32-bit word qh.
inline BitSlot legacy_high_bit(int e) { return {e / 8, e % 8}; }

// k-quants work on 128-element halves of the 256-element super-block. Within a half h, byte l
// (l < 32) of a 2-bit plane holds elements h*128 + l, +32, +64, +96 in bit pairs 0-1, 2-3, 4-5, 6-7.
// Used by q2_k and q3_k quants (qs) and by the high 2 bits of q6_k (qh).
inline BitSlot k_crumb(int e) { return {(e / 128) * 32 + e % 32, 2 * ((e % 128) / 32)}; }
// One bit per element over 32 bytes: bit e / 32 of byte e % 32. q3_k hmask, q5_k qh.
inline BitSlot k_bit(int e) { return {e % 32, e / 32}; }
// q4_k / q5_k low nibbles: 64-element groups share 32 bytes, low nibble first.
inline BitSlot k_nibble(int e) { return {(e / 64) * 32 + e % 32, 4 * ((e % 64) / 32)}; }
// q6_k low nibbles: 128-element halves share 64 bytes, low nibble for the first 64 elements.
inline BitSlot q6k_nibble(int e) { return {(e / 128) * 64 + e % 64, 4 * ((e % 128) / 64)}; }

// q4_k / q5_k: eight 6-bit scales and eight 6-bit mins packed in 12 bytes.
//   bytes 0-3:  scale j (j < 4) in bits 0-5; bits 6-7 = high 2 bits of scale j + 4
//   bytes 4-7:  min j (j < 4) in bits 0-5;   bits 6-7 = high 2 bits of min j + 4
//   bytes 8-11: low 4 bits of scale j + 4 in bits 0-3, low 4 bits of min j + 4 in bits 4-7
inline void get_scale_min_k4(const uint8_t* packed, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = packed[j] & 0x3f;
    *min = packed[j + 4] & 0x3f;
  } else {
    *scale = (packed[j + 4] & 0x0f) | ((packed[j - 4] >> 6) << 4);
    *min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

// Precondition: scale and min in [0, 63]; packed zeroed.
inline void put_scale_min_k4(uint8_t* packed, int j, int scale, int min) {
  if (j < 4) {
    packed[j] = static_cast<uint8_t>(packed[j] | scale);
    packed[j + 4] = static_cast<uint8_t>(packed[j + 4] | min);
  } else {
    packed[j + 4] = static_cast<uint8_t>((scale & 0x0f) | ((min & 0x0f) << 4));
    packed[j - 4] = static_cast<uint8_t>(packed[j - 4] | ((scale >> 4) << 6));
    packed[j] = static_cast<uint8_t>(packed[j] | ((min >> 4) << 6));
  }
}

// q3_k: sixteen 6-bit scales (stored biased by +32) packed in 12 bytes.
//   bytes 0-7:  low 4 bits of scale j in nibble j / 8 of byte j % 8
//   bytes 8-11: high 2 bits of scale j in bit pair j / 4 of byte 8 + j % 4
// Returns the signed scale in [-32, 31].
inline int get_scale_q3k(const uint8_t* packed, int j) {
  const int low = (packed[j % 8] >> (4 * (j / 8))) & 0x0f;
  const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 0x03;
  return (low | (high << 4)) - 32;
}

// Precondition: scale in [-32, 31]; packed zeroed.
inline void put_scale_q3k(uint8_t* packed, int j, int scale) {
  const int biased = scale + 32;
  put_bits(packed, {j % 8, 4 * (j / 8)}, 4, biased & 0x0f);
  put_bits(packed, {8 + j % 4, 2 * (j / 4)}, 2, biased >> 4);
}

}  // namespace tern::quant_layout
