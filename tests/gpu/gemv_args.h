// The launch record of one plain quantized product, for host-side questions about which kernel
// and tile the GEMV would take (gemv.h gemv_quant_takes / gemv_quant_tile_rows).
#pragma once

#include <cstdint>

#include "backends/cuda/gemv.h"
#include "core/dtype.h"

namespace tern::gputest {

// `rows` x `cols` weights of type t, rows packed and 16-byte aligned, against n activation rows at
// `bits`, on a device allowing `smem` bytes of shared memory per block.
inline cuda::MatmulArgs plain_product(DType t, int64_t rows, int64_t cols, int bits, int smem, int64_t n) {
  cuda::MatmulArgs a{};
  a.dtype = t;
  a.n_mats = 1;
  a.cols = cols;
  a.n = n;
  a.max_smem_bytes = smem;
  a.n_sm = 132;
  a.x_bits = bits;
  a.w[0] = reinterpret_cast<const void*>(uintptr_t{1} << 20);
  a.w_stride_bytes[0] = row_bytes(t, cols);
  a.rows[0] = rows;
  return a;
}

}  // namespace tern::gputest
