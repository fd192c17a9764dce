// Quantized products with many activation rows on the tensor cores, with the GEMV's bits.
//
// The quantized GEMV family (gemv.h) serves every n with one per-row arithmetic, so its rows
// are batch-invariant, but at prefill sizes it multiplies on the CUDA cores: ~250 warp
// instructions per 4096-element step and activation row (bench/RESULTS.md, session 12), about
// 1k tok/s of 8B prefill. This path computes the same canonical sum (gemv.h, steps 1-2) with
// integer mma for the exact unit dot products:
//   1. a quantize kernel rounds x [n, cols] per 32-element unit with the GEMV's quantizer
//      (gemv_tile.cuh: q = rint(x * (q_max / amax)), d = amax / q_max, the int sum s) into a
//      scratch buffer. At 16 bits each q is split into a low byte (unsigned) and a high byte
//      (signed, q >> 8), two planes of int8 mma operands: q = 256 hi + lo.
//   2. the product kernel: a block of 8 warps takes 32 activation rows x 64 weight rows and
//      stages them 16 units at a time through shared memory (cp.async, double-buffered: the
//      tokens' quantized pieces and scales, the rows' block bytes as stored, and a table of each
//      (row, unit)'s scales formed once from them). A warp holds 16 tokens x 16 rows. Per unit it forms
//      the weight codes of its rows as int8 mma operands (q4: the nibble; q5_k: five bits;
//      q6_k: the 6-bit code minus 32; q8_0: the byte), takes each (row, token) integer dot with
//      mma.sync m16n8k32 (q6_k: m16n8k16 per 16-element half, whose sub-block scales differ),
//      and evaluates the unit's float expression c_u exactly as gemv_items.cuh does.
//      The integer is exact: each mma accumulates in int32 from a bias of 1.5 * 2^23, so the
//      float whose bits are the sum is 1.5 * 2^23 + dot (|dot| < 2^22) and one subtraction gives
//      float(dot) exactly; at 16 bits float(isum) = fma(float(dot_hi), 256, float(dot_lo)), a
//      single rounding of the exact integer, i.e. the GEMV's int-to-float conversion. q6_k's
//      isum (sc_a * dot_a + sc_b * dot_b, which at 16 bits may pass 2^31) is rounded the same
//      way from two exact parts.
//   3. the tree is the GEMV's: items of 4 units ((c0 + c1) + (c2 + c3)), a binary counter over
//      the 32 items of a 128-unit step (missing items are +0 leaves, as the GEMV's idle lanes),
//      then gemv_tile.cuh's counter over steps.
// So every row equals the GEMV's bit for bit, whatever n and whichever kernel ran it
// (tests/gpu/qmma_test.cpp compares them on every type, both precisions, odd shapes and raw
// quant bytes). Products the GEMV does not take (gemv_quant_takes) are never taken here.
//
// Fusions: a prologue runs as its own kernel first (launch_prologue_op: the same values), the
// residual epilogue is applied in-kernel, a SwiGLU epilogue as its own kernel after. A stage takes
// 126-158 KiB of shared memory (two of them), so devices with less (an RTX 4090's 99 KiB) keep
// these products on the GEMV.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cuda/kernels.h"
#include "core/dtype.h"

namespace tern::cuda {

// Scratch bytes the quantized activations of x [n, cols] take (MatmulArgs::qmma_x).
size_t qmma_scratch_bytes(int64_t n, int64_t cols);
// True when the weight type has a tensor-core kernel here.
bool qmma_supports(DType t);
// Whether launch_matmul_qmma takes the product: a.qmma_x set, a supported type the GEMV takes
// too (so that n = 1 has the same arithmetic), rows of at most kQmmaMaxSteps steps, one type.
bool qmma_takes(const MatmulArgs& a);
// Launches the product (with its prologue and epilogues) if qmma_takes(a); false otherwise.
bool launch_matmul_qmma(const MatmulArgs& a, const LaunchEnv& env);
// Sets the product kernels' dynamic shared-memory limit (once per device).
void init_qmma(int max_smem_bytes);

// Steps (4096 columns) a row may span: the step counter has 3 levels (28672 columns; wider
// rows stay on the GEMV).
constexpr int kQmmaStepLevels = 3;
constexpr int kQmmaMaxSteps = (1 << kQmmaStepLevels) - 1;

}  // namespace tern::cuda
