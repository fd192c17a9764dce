#include "backends/cpu/matmul_kernels.h"
namespace tern::cpu::detail {
Kernel avx2_find_float_kernel(DType) { return {}; }
Kernel avx2_find_legacy_kernel(DType) { return {}; }
Kernel avx2_find_kquant_kernel(DType) { return {}; }
void avx2_quantize_q8x32(const float* x, int64_t cols, int8_t* qs, float* ds) { scalar_quantize_q8x32(x, cols, qs, ds); }
void avx2_quantize_q8x256(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* b) { scalar_quantize_q8x256(x, cols, qs, d, b); }
}
