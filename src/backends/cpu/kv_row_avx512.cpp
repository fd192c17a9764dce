// AVX-512 versions of the KV row loops. Requires head_dim % 16 == 0 for the vector body; a scalar
// tail handles the rest.
#include <immintrin.h>

#include "backends/cpu/kv_row.h"
#include "core/fp16.h"

namespace tern::cpu {
namespace {

float dot_f16(const float* q, const void* row, int n) {
  const uint16_t* r = static_cast<const uint16_t*>(row);
  __m512 acc = _mm512_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 k = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r + i)));
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), k, acc);
  }
  float s = _mm512_reduce_add_ps(acc);
  for (; i < n; ++i) s += q[i] * fp16_to_f32(r[i]);
  return s;
}
void axpy_f16(float a, const void* row, float* acc, int n) {
  const uint16_t* r = static_cast<const uint16_t*>(row);
  const __m512 va = _mm512_set1_ps(a);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r + i)));
    _mm512_storeu_ps(acc + i, _mm512_fmadd_ps(va, v, _mm512_loadu_ps(acc + i)));
  }
  for (; i < n; ++i) acc[i] += a * fp16_to_f32(r[i]);
}
float dot_f32(const float* q, const void* row, int n) {
  const float* r = static_cast<const float*>(row);
  __m512 acc = _mm512_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_loadu_ps(r + i), acc);
  float s = _mm512_reduce_add_ps(acc);
  for (; i < n; ++i) s += q[i] * r[i];
  return s;
}
void axpy_f32(float a, const void* row, float* acc, int n) {
  const float* r = static_cast<const float*>(row);
  const __m512 va = _mm512_set1_ps(a);
  int i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(acc + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(r + i), _mm512_loadu_ps(acc + i)));
  for (; i < n; ++i) acc[i] += a * r[i];
}

constexpr KvRowOps kAvx512F32{dot_f32, axpy_f32};
constexpr KvRowOps kAvx512F16{dot_f16, axpy_f16};

}  // namespace

const KvRowOps* kv_row_ops_avx512(DType kv_dtype) {
  return kv_dtype == DType::F16 ? &kAvx512F16 : &kAvx512F32;
}

}  // namespace tern::cpu
