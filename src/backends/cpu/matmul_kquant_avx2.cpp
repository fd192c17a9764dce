#include "backends/cpu/matmul_kernels.h"
namespace tern::cpu::detail {
Kernel avx2_find_kquant_kernel(DType) { return {}; }
}
