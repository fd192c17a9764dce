#include "backends/cpu/kv_row.h"

#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "core/fp16.h"

namespace tern::cpu {
namespace {

float dot_f32(const float* q, const void* row, int n) {
  const float* r = static_cast<const float*>(row);
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += q[i] * r[i];
  return s;
}
void axpy_f32(float a, const void* row, float* acc, int n) {
  const float* r = static_cast<const float*>(row);
  for (int i = 0; i < n; ++i) acc[i] += a * r[i];
}
float dot_f16(const float* q, const void* row, int n) {
  const uint16_t* r = static_cast<const uint16_t*>(row);
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += q[i] * fp16_to_f32(r[i]);
  return s;
}
void axpy_f16(float a, const void* row, float* acc, int n) {
  const uint16_t* r = static_cast<const uint16_t*>(row);
  for (int i = 0; i < n; ++i) acc[i] += a * fp16_to_f32(r[i]);
}

constexpr KvRowOps kScalarF32{dot_f32, axpy_f32};
constexpr KvRowOps kScalarF16{dot_f16, axpy_f16};

bool allow_avx512() {
  const char* isa = std::getenv("TERN_CPU_ISA");
  if (isa != nullptr && (std::strcmp(isa, "scalar") == 0 || std::strcmp(isa, "avx2") == 0)) return false;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("f16c");
}

}  // namespace

const KvRowOps& kv_row_ops(DType kv_dtype) {
  TERN_CHECK(kv_dtype == DType::F16 || kv_dtype == DType::F32);
  static const bool use_avx512 = allow_avx512();
  if (use_avx512) {
    if (const KvRowOps* ops = kv_row_ops_avx512(kv_dtype)) return *ops;
  }
  return kv_dtype == DType::F16 ? kScalarF16 : kScalarF32;
}

}  // namespace tern::cpu
