#include "core/dtype.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

#include "core/check.h"

namespace tern {
namespace {

struct Entry {
  DType type;
  DTypeInfo info;
};

// Block sizes and byte counts follow the GGUF block definitions (ggml-common.h in ggml).
constexpr std::array<Entry, 20> kTable = {{
    {DType::F32, {"f32", 1, 4, false}},
    {DType::F16, {"f16", 1, 2, false}},
    {DType::Q4_0, {"q4_0", 32, 18, true}},
    {DType::Q4_1, {"q4_1", 32, 20, true}},
    {DType::Q5_0, {"q5_0", 32, 22, true}},
    {DType::Q5_1, {"q5_1", 32, 24, true}},
    {DType::Q8_0, {"q8_0", 32, 34, true}},
    {DType::Q8_1, {"q8_1", 32, 36, true}},
    {DType::Q2_K, {"q2_k", 256, 84, true}},
    {DType::Q3_K, {"q3_k", 256, 110, true}},
    {DType::Q4_K, {"q4_k", 256, 144, true}},
    {DType::Q5_K, {"q5_k", 256, 176, true}},
    {DType::Q6_K, {"q6_k", 256, 210, true}},
    {DType::Q8_K, {"q8_k", 256, 292, true}},
    {DType::I8, {"i8", 1, 1, false}},
    {DType::I16, {"i16", 1, 2, false}},
    {DType::I32, {"i32", 1, 4, false}},
    {DType::I64, {"i64", 1, 8, false}},
    {DType::F64, {"f64", 1, 8, false}},
    {DType::BF16, {"bf16", 1, 2, false}},
}};

}  // namespace

std::optional<DTypeInfo> dtype_info(DType t) {
  for (const auto& e : kTable)
    if (e.type == t) return e.info;
  return std::nullopt;
}

std::optional<DType> dtype_from_gguf_id(uint32_t id) {
  for (const auto& e : kTable)
    if (static_cast<uint32_t>(e.type) == id) return e.type;
  return std::nullopt;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const auto& e : kTable)
    if (e.info.name == lower) return e.type;
  return std::nullopt;
}

std::string_view dtype_name(DType t) {
  auto info = dtype_info(t);
  return info ? info->name : std::string_view("unknown");
}

int64_t block_elems(DType t) {
  auto info = dtype_info(t);
  TERN_CHECK(info.has_value());
  return info->block_elems;
}

size_t row_bytes(DType t, int64_t n) {
  auto info = dtype_info(t);
  TERN_CHECK(info.has_value());
  TERN_CHECK(n % info->block_elems == 0);
  return static_cast<size_t>(n / info->block_elems) * info->block_bytes;
}

}  // namespace tern
