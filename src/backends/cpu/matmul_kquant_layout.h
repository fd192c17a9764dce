// Scale unpacking for the k-quant kernels of every level (q2_k .. q6_k super-blocks of 256).
// The bit layouts are the GGUF block definitions (see core/quant_blocks.h).
//
// note: everything here has internal linkage on purpose. This header is included by files built
// with different ISA flags; an inline function with external linkage would be emitted once per
// flag set and the linker could keep an AVX-512 copy for the scalar path.
#pragma once

#include <cstdint>

namespace tern::cpu::detail {
namespace {

// q4_k / q5_k: eight 6-bit scales and eight 6-bit mins (one per 32 elements) packed in 12 bytes:
// bytes 0-3 hold scale j (j < 4) in bits 0-5 and the top 2 bits of scale j+4 in bits 6-7; bytes
// 4-7 the same for the mins; bytes 8-11 the low nibbles of scale j+4 (bits 0-3) and min j+4 (4-7).
inline void unpack_q4k_scales(const uint8_t* packed, uint8_t* scales, uint8_t* mins) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = packed[j] & 0x3f;
    mins[j] = packed[j + 4] & 0x3f;
    scales[j + 4] = static_cast<uint8_t>((packed[j + 8] & 0x0f) | ((packed[j] >> 6) << 4));
    mins[j + 4] = static_cast<uint8_t>((packed[j + 8] >> 4) | ((packed[j + 4] >> 6) << 4));
  }
}

// q3_k: sixteen 6-bit scales (one per 16 elements), stored +32: the low nibble of scale j is
// nibble j / 8 of byte j % 8, its top 2 bits are bit pair j / 4 of byte 8 + j % 4.
inline void unpack_q3k_scales(const uint8_t* packed, int8_t* scales) {
  for (int j = 0; j < 16; ++j) {
    const int low = (packed[j % 8] >> (4 * (j / 8))) & 0x0f;
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 0x03;
    scales[j] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
}

}  // namespace
}  // namespace tern::cpu::detail
