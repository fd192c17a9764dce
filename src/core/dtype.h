// Tensor element types. The numeric values are the GGML/GGUF type ids, so a GGUF tensor
// info's type field converts directly (after validation with dtype_from_gguf_id).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tern {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
};

struct DTypeInfo {
  std::string_view name;   // "q4_k", as llama.cpp prints it
  int64_t block_elems;     // elements per block (1 for plain types)
  size_t block_bytes;      // bytes per block
  bool quantized;
};

// Info for a known type; nullopt for ids tern does not know.
std::optional<DTypeInfo> dtype_info(DType t);
// Validates a raw GGUF type id.
std::optional<DType> dtype_from_gguf_id(uint32_t id);
// Parses "q4_k", "Q4_K", "f16", "bf16", ... (case-insensitive).
std::optional<DType> dtype_from_name(std::string_view name);
std::string_view dtype_name(DType t);

// Bytes of a row of n elements. Precondition: n is a multiple of the block size.
size_t row_bytes(DType t, int64_t n);
int64_t block_elems(DType t);

}  // namespace tern
