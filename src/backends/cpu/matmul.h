// Matrix products against GGUF weights, computed directly on the quantized blocks: the hot path of
// the CPU backend (every projection of every layer, prefill and decode).
//
//   y[n, w.rows] = x[n, w.cols] @ w^T
//
// w: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K or Q6_K, one GGUF row
//    per output feature, rows w.row_stride bytes apart. x, y: F32, row-major, contiguous.
//
// How the fast path computes (llama.cpp-style ideas, own code): each activation row is quantized
// once per call to integer blocks (32 elements with a float scale for the legacy quants, 256 with
// a float scale and 16-element sums for the k-quants); weight blocks and activation blocks meet in
// exact integer dot products (VNNI vpdpbusd / AVX2 maddubs), scaled in float. F32/F16/BF16 weights
// use float FMAs. The activation precision is a per-backend choice (ActBits): 8 bits (llama.cpp's
// precision) or 16 bits held as two int8 digits, which costs a second integer dot per block and
// brings the result within ~2^-15 relative of the float reference (matmul_kernels.h).
// At AVX-512 the quantized kernels work on panels of 16 weight rows, one per vector lane, so a
// block's integer dot needs no horizontal reduction; prefill repacks each panel once and streams
// the activation rows past it.
//
// Batch invariance (a hard guarantee, tested): y[i, j] is bitwise the same whatever n is, whichever
// other rows share the call and however many threads run it, for a given Isa and ActBits. The
// per-block integer sums are exact, so only each output's float operations need a fixed order, and
// that order depends only on (x row i, w row j, Isa, ActBits); tiles and panels share loads,
// never arithmetic, and threads split the weight rows, never the reduction.
// Different Isa levels may differ in the last bits (different lane counts).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "backends/cpu/cpu_features.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace tern::cpu {

// Precision of the activation rows that meet quantized weights (float weights always see float
// activations). Choose it once per backend, never per call: a row's arithmetic must not depend on
// the batch it is in.
enum class ActBits : uint8_t {
  k8 = 8,    // int8 per block: fastest; on SmolLM2-135M Q4_1 the logits move by up to ~1
  k16 = 16,  // two int8 digits per element, ~2^-15 relative per block: close to the reference
};
constexpr ActBits kDefaultActBits = ActBits::k16;

// `requested`, unless the environment sets TERN_CPU_ACT_BITS=8 or 16 (benchmarks, A/B runs);
// any other value is ignored with a warning on stderr.
ActBits act_bits_from_env(ActBits requested);
std::string_view act_bits_name(ActBits bits);  // "8" or "16"

// True for every weight dtype matmul accepts.
bool matmul_supports(DType t);

// The oracle: dequantizes each weight row with dequantize_row_ref and takes a plain float dot
// product in element order. Slow; tests and the reference backend only.
// Preconditions (bugs if broken): matmul_supports(w.dtype), w on the CPU, n >= 0.
void matmul_ref(const Tensor& w, const float* x, int64_t n, float* y);

// A weight's decode pack: a copy of its rows rearranged once (at load) for the kernels of small
// calls (n <= 3: decode), which otherwise rearrange them on every call. Today: q4_k at AVX-512,
// whose decode kernel transposes 16 rows' bytes per super-block (a load-time pack leaves it only
// aligned loads of one sequential stream). A pack changes where bytes are read, never the
// arithmetic: results are bitwise those without it.
// Bytes of w's pack at `isa` (0: no pack for this weight or level).
size_t decode_pack_bytes(Isa isa, const Tensor& w);
// Writes the pack; out: decode_pack_bytes(isa, w) bytes, 64-byte aligned.
void make_decode_pack(Isa isa, const Tensor& w, uint8_t* out);

// The fast path at active_isa(): one parallel region per call; activations quantized into
// scratch owned by the calling thread (reused across calls, no per-call allocation once warm).
// pack: w's decode pack made at active_isa(), or nullptr.
// Preconditions: as matmul_ref; x and y must not overlap.
void matmul(const Tensor& w, const float* x, int64_t n, float* y, ThreadPool& pool,
            ActBits act_bits = kDefaultActBits, const uint8_t* pack = nullptr);

// The fast path at a chosen level (tests, benchmarks). Precondition: isa_supported(isa).
void matmul_isa(Isa isa, const Tensor& w, const float* x, int64_t n, float* y, ThreadPool& pool,
                ActBits act_bits = kDefaultActBits, const uint8_t* pack = nullptr);

// y_i = x @ w_i^T for several weights of one input (Q/K/V, gate/up): x is quantized once and one
// parallel region splits the weights' rows together (a decode step saves a fork-join and a
// quantization per extra weight). Each y_i is bitwise what matmul would write. Weights whose
// kernels read different activation forms fall back to one call each.
// Preconditions: as matmul for each pair; 1 <= ws.size() == ys.size() <= 8.
// packs: empty, or one decode pack (or nullptr) per weight.
void matmul_group(std::span<const Tensor* const> ws, const float* x, int64_t n, std::span<float* const> ys,
                  ThreadPool& pool, ActBits act_bits = kDefaultActBits, std::span<const uint8_t* const> packs = {});
void matmul_group_isa(Isa isa, std::span<const Tensor* const> ws, const float* x, int64_t n,
                      std::span<float* const> ys, ThreadPool& pool, ActBits act_bits = kDefaultActBits,
                      std::span<const uint8_t* const> packs = {});

}  // namespace tern::cpu
