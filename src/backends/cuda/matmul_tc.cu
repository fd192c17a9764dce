// The tensor-core prefill matmul (matmul_tc.h): activation rounding and weight dequantization to
// bf16, then cuBLASLt GEMMs over weight row tiles.
#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/matmul_tc.h"
#include "backends/cuda/tc_gemm.h"
#include "core/check.h"

namespace tern::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint16_t to_bf16_bits(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

// out[i] = bf16(x[i]) for i < count.
__global__ void __launch_bounds__(kThreads) round_activations_kernel(const float* x, uint16_t* out, int64_t count) {
  pdl_enter();
  const int64_t i = int64_t{blockIdx.x} * kThreads + threadIdx.x;
  if (i < count) out[i] = to_bf16_bits(x[i]);
}

// A tile of weight rows to dequantize: rows [0, rows) starting at w, into out [rows, cols].
struct DequantTile {
  const uint8_t* w;
  size_t stride_bytes;
  int64_t cols;
  uint16_t* out;
};

// Elements e0 .. e0 + 7 of a row (e0 % 8 == 0, all in one block), the floats of
// dequant_element (hence of dequantize_row_ref): the same expressions with the block scales
// computed once per 8 elements instead of once per element.
template <DType T>
__device__ __forceinline__ void dequant8(const uint8_t* row, int64_t e0, float (&v)[8]) {
  if constexpr (T == DType::Q4_0 || T == DType::Q4_1) {
    const bool q41 = T == DType::Q4_1;
    const uint8_t* b = row + (e0 / 32) * (q41 ? 20 : 18);
    const int i0 = static_cast<int>(e0 % 32);
    const float d = half_bits_to_float(load_u16(b));
    const float m = q41 ? half_bits_to_float(load_u16(b + 2)) : 0.0f;
    const uint8_t* qs = b + (q41 ? 4 : 2);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int i = i0 + j;
      const int q = nibble(qs, i % 16, 4 * (i / 16));
      v[j] = q41 ? __fadd_rn(__fmul_rn(d, static_cast<float>(q)), m) : __fmul_rn(d, static_cast<float>(q - 8));
    }
  } else if constexpr (T == DType::Q8_0) {
    const uint8_t* b = row + (e0 / 32) * 34;
    const int i0 = static_cast<int>(e0 % 32);
    const float d = half_bits_to_float(load_u16(b));
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = __fmul_rn(static_cast<float>(static_cast<int8_t>(b[2 + i0 + j])), d);
  } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    const bool q5 = T == DType::Q5_K;
    const uint8_t* b = row + (e0 / 256) * (q5 ? 176 : 144);
    const int i0 = static_cast<int>(e0 % 256);
    const float d = half_bits_to_float(load_u16(b)), dmin = half_bits_to_float(load_u16(b + 2));
    int sc, m;
    scale_min_k4(b + 4, i0 / 32, &sc, &m);
    const float dl = __fmul_rn(d, static_cast<float>(sc));
    const float ml = __fmul_rn(dmin, static_cast<float>(m));
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int i = i0 + j;
      const int q = q5 ? (k_nibble(b + 48, i) | (k_bit(b + 16, i) << 4)) : k_nibble(b + 16, i);
      v[j] = __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
    }
  } else if constexpr (T == DType::Q6_K) {
    const uint8_t* b = row + (e0 / 256) * 210;
    const int i0 = static_cast<int>(e0 % 256);
    const float d = half_bits_to_float(load_u16(b + 208));
    const float dl = __fmul_rn(d, static_cast<float>(static_cast<int8_t>(b[192 + i0 / 16])));
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int i = i0 + j;
      const int q = (q6k_nibble(b, i) | (k_crumb(b + 128, i) << 4)) - 32;
      v[j] = __fmul_rn(dl, static_cast<float>(q));
    }
  } else {  // F32, F16 and the types without a dedicated decoder
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = dequant_element(T, row, e0 + j);
  }
}

// Thread per 8 consecutive elements of a row (cols % 8 == 0); block row = blockIdx.y.
template <DType T>
__global__ void __launch_bounds__(kThreads) dequant_bf16_kernel(DequantTile a) {
  pdl_enter();  // the previous GEMM may still read `out`
  const int64_t e0 = (int64_t{blockIdx.x} * kThreads + threadIdx.x) * 8;
  if (e0 >= a.cols) return;
  const int64_t r = blockIdx.y;
  float v[8];
  dequant8<T>(a.w + r * a.stride_bytes, e0, v);
  uint4 packed;
  packed.x = to_bf16_bits(v[0]) | (uint32_t{to_bf16_bits(v[1])} << 16);
  packed.y = to_bf16_bits(v[2]) | (uint32_t{to_bf16_bits(v[3])} << 16);
  packed.z = to_bf16_bits(v[4]) | (uint32_t{to_bf16_bits(v[5])} << 16);
  packed.w = to_bf16_bits(v[6]) | (uint32_t{to_bf16_bits(v[7])} << 16);
  *reinterpret_cast<uint4*>(a.out + r * a.cols + e0) = packed;
}

// Any type dequant_element knows, any cols: thread per element.
__global__ void __launch_bounds__(kThreads) dequant_bf16_generic_kernel(DequantTile a, DType t) {
  pdl_enter();
  const int64_t e = int64_t{blockIdx.x} * kThreads + threadIdx.x;
  if (e >= a.cols) return;
  const int64_t r = blockIdx.y;
  a.out[r * a.cols + e] = to_bf16_bits(dequant_element(t, a.w + r * a.stride_bytes, e));
}

void launch_dequant(DType t, const DequantTile& tile, int64_t rows, const LaunchEnv& env) {
  TERN_CHECK(rows <= 65535);  // tc_weight_tile_rows caps tiles (grid.y)
  const bool vec = tile.cols % 8 == 0;
  const int64_t per_row = vec ? tile.cols / 8 : tile.cols;
  const dim3 grid(static_cast<unsigned>((per_row + kThreads - 1) / kThreads), static_cast<unsigned>(rows));
  if (vec) {
    switch (t) {
      case DType::Q4_0: launch_kernel(env, dequant_bf16_kernel<DType::Q4_0>, grid, kThreads, 0, tile); return;
      case DType::Q4_1: launch_kernel(env, dequant_bf16_kernel<DType::Q4_1>, grid, kThreads, 0, tile); return;
      case DType::Q8_0: launch_kernel(env, dequant_bf16_kernel<DType::Q8_0>, grid, kThreads, 0, tile); return;
      case DType::Q4_K: launch_kernel(env, dequant_bf16_kernel<DType::Q4_K>, grid, kThreads, 0, tile); return;
      case DType::Q5_K: launch_kernel(env, dequant_bf16_kernel<DType::Q5_K>, grid, kThreads, 0, tile); return;
      case DType::Q6_K: launch_kernel(env, dequant_bf16_kernel<DType::Q6_K>, grid, kThreads, 0, tile); return;
      case DType::F16: launch_kernel(env, dequant_bf16_kernel<DType::F16>, grid, kThreads, 0, tile); return;
      case DType::F32: launch_kernel(env, dequant_bf16_kernel<DType::F32>, grid, kThreads, 0, tile); return;
      default: break;  // the rest are rare in prefill-sized models: one element per thread
    }
  }
  const dim3 grid1(static_cast<unsigned>((tile.cols + kThreads - 1) / kThreads), static_cast<unsigned>(rows));
  launch_kernel(env, dequant_bf16_generic_kernel, grid1, kThreads, 0, tile, t);
}

// Largest power of two <= 256 dividing `bytes`.
uint32_t step_alignment(int64_t bytes) {
  uint32_t align = 256;
  while (align > 1 && bytes % align != 0) align /= 2;
  return align;
}

// Calls fn(r0, shape, a_ptr) for every GEMM of the record, in launch order: one per weight row
// tile (one in all for an in-place BF16 weight).
template <typename Fn>
void for_each_gemm(const TcMatmulArgs& t, Fn&& fn) {
  const MatmulArgs& a = t.mm;
  const int64_t rows = a.rows[0];
  const bool in_place = tc_weight_in_place(a.dtype);
  const int64_t tile_rows = in_place ? rows : t.w16_rows;
  for (int64_t r0 = 0; r0 < rows; r0 += tile_rows) {
    const void* w = in_place ? static_cast<const void*>(static_cast<const uint8_t*>(a.w[0]) + r0 * a.w_stride_bytes[0])
                             : static_cast<const void*>(t.w16);
    TcGemmShape s;
    s.m = std::min(tile_rows, rows - r0);
    s.n = a.n;
    s.k = a.cols;
    s.lda = in_place ? static_cast<int64_t>(a.w_stride_bytes[0] / 2) : a.cols;
    s.ldb = a.cols;
    s.ldd = rows;
    // Every column starts at base + j * ld: the alignment a kernel may assume is the base's and
    // the column step's together.
    s.align_a = std::min(pointer_alignment(w), step_alignment(s.lda * 2));
    s.align_b = std::min(pointer_alignment(t.x16), step_alignment(s.ldb * 2));
    s.align_d = std::min(pointer_alignment(a.y[0] + r0), step_alignment(s.ldd * 4));
    fn(r0, s, w);
  }
}

}  // namespace

bool tc_matmul_supports(DType t) { return dequant_element_supports(t); }

bool tc_weight_in_place(DType t) { return t == DType::BF16; }

int64_t tc_weight_tile_rows(int64_t rows, int64_t cols) {
  int64_t tile = std::min<int64_t>({rows, std::max<int64_t>(1, kTcWeightTileElems / cols), 65535});
  // Whole 128-row multiples keep every tile's output columns 512-byte aligned.
  if (tile < rows && tile >= 128) tile -= tile % 128;
  return tile;
}

void prepare_matmul_tc(const TcMatmulArgs& t) {
  TERN_CHECK(t.mm.n_mats == 1);
  for_each_gemm(t, [&](int64_t, const TcGemmShape& s, const void*) { t.gemm->prepare(s); });
}

void launch_matmul_tc(const TcMatmulArgs& t, const LaunchEnv& env) {
  const MatmulArgs& a = t.mm;
  if (a.n == 0 || a.rows[0] == 0) return;
  if (t.convert_x) {
    const int64_t count = a.n * a.cols;
    launch_kernel(env, round_activations_kernel, dim3(static_cast<unsigned>((count + kThreads - 1) / kThreads)),
                  kThreads, 0, a.x, t.x16, count);
  }
  const bool in_place = tc_weight_in_place(a.dtype);
  for_each_gemm(t, [&](int64_t r0, const TcGemmShape& s, const void* w) {
    if (!in_place) {
      DequantTile tile;
      tile.w = static_cast<const uint8_t*>(a.w[0]) + r0 * a.w_stride_bytes[0];
      tile.stride_bytes = a.w_stride_bytes[0];
      tile.cols = a.cols;
      tile.out = t.w16;
      launch_dequant(a.dtype, tile, s.m, env);
    }
    t.gemm->run(s, w, t.x16, a.y[0] + r0, env.stream);
  });
}

}  // namespace tern::cuda
