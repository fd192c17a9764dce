// Inner loops of CPU attention over one KV row (F16 or F32), dispatched once by CPU features.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tern::cpu {

struct KvRowOps {
  // sum_i q[i] * row[i]
  float (*dot)(const float* q, const void* row, int n);
  // acc[i] += a * row[i]
  void (*axpy)(float a, const void* row, float* acc, int n);
};

// Ops for a KV dtype (F16 or F32), for the best ISA this CPU has (TERN_CPU_ISA may lower it).
const KvRowOps& kv_row_ops(DType kv_dtype);

// ISA-specific tables; nullptr-free only where compiled and supported.
const KvRowOps* kv_row_ops_avx512(DType kv_dtype);

}  // namespace tern::cpu
