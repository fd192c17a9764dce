// The matmul driver: validates, quantizes the activation rows once into thread-local scratch, and
// runs one parallel region in which each thread takes a contiguous run of weight rows (of the
// concatenated rows of every weight, for a group).
#include "backends/cpu/matmul.h"

#include <emmintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "backends/cpu/matmul_kernels.h"
#include "core/check.h"
#include "core/quant_ref.h"

namespace tern::cpu {
namespace {

using detail::ActFormat;
using detail::Activations;
using detail::Kernel;
using detail::WeightRows;

// Below this many multiply-adds a call runs on the calling thread: a fork-join (~1 us) would cost
// more than it saves.
constexpr int64_t kMinParallelMacs = 16 * 1024;
// Thread shares are multiples of this many weight rows, so every share but the last is whole
// 16-row panels (the AVX-512 kernels' unit).
constexpr int64_t kRowGrain = 16;
// From this many activation rows on, threads quantize their share of rows in parallel.
constexpr int64_t kSplitQuantizationRows = 16;

struct Level {
  detail::QuantizeQ8x32Fn quantize_x32[detail::kMaxDigits];  // [D - 1]
  detail::QuantizeQ8x256Fn quantize_x256[detail::kMaxDigits];
  Kernel (*find[3])(DType, int digits);  // tried in order; nullptr entries skipped
};

const Level& level(Isa isa) {
  using namespace detail;
  static const Level kScalar = {{scalar_quantize_q8x32, scalar_quantize_q16x32},
                                {scalar_quantize_q8x256, scalar_quantize_q16x256},
                                {scalar_find_kernel, nullptr, nullptr}};
  static const Level kAvx2 = {{avx2_quantize_q8x32, avx2_quantize_q16x32},
                              {avx2_quantize_q8x256, avx2_quantize_q16x256},
                              {avx2_find_float_kernel, avx2_find_legacy_kernel, avx2_find_kquant_kernel}};
  static const Level kAvx512 = {{avx512_quantize_q8x32, avx512_quantize_q16x32},
                                {avx512_quantize_q8x256, avx512_quantize_q16x256},
                                {avx512_find_float_kernel, avx512_find_legacy_kernel, avx512_find_kquant_kernel}};
  switch (isa) {
    case Isa::kAvx512: return kAvx512;
    case Isa::kAvx2: return kAvx2;
    case Isa::kScalar: break;
  }
  return kScalar;
}

// The kernel for t and D activation digits at `isa`, or the nearest lower level's. Borrowing is
// sound because every level quantizes activations to the same bytes (matmul_kernels.h).
Kernel find_kernel(Isa isa, DType t, int digits) {
  for (int l = static_cast<int>(isa); l >= 0; --l) {
    for (auto find : level(static_cast<Isa>(l)).find) {
      if (find == nullptr) continue;
      const Kernel k = find(t, digits);
      if (k.gemm != nullptr) return k;
    }
  }
  return {};
}

// Per-thread activation scratch: one 64-byte-aligned allocation that only grows, carved into the
// arrays of the current call.
class ActScratch {
 public:
  uint8_t* reserve(size_t bytes) {
    if (bytes > capacity_) {
      capacity_ = std::max(bytes, capacity_ * 2);
      mem_.reset(static_cast<uint8_t*>(std::aligned_alloc(kAlign, round_up(capacity_))));
      TERN_CHECK(mem_ != nullptr);
    }
    return mem_.get();
  }
  static size_t round_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
  static constexpr size_t kAlign = 64;

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> mem_;
  size_t capacity_ = 0;
};

// Lays out the quantized activations (D digits) of one call in the calling thread's scratch
// (contents not yet written; see quantize_rows).
Activations layout_activations(ActFormat format, int digits, const float* x, int64_t n, int64_t cols) {
  Activations a;
  a.n = n;
  a.cols = cols;
  a.digits = digits;
  if (format == ActFormat::kF32) {
    a.f32 = x;
    return a;
  }
  thread_local ActScratch scratch;
  const size_t qs_bytes = ActScratch::round_up(static_cast<size_t>(n * digits * cols));
  if (format == ActFormat::kQ8x32) {
    const int64_t nb = cols / detail::kQ8x32Block;
    const size_t ds_bytes = ActScratch::round_up(static_cast<size_t>(n * nb) * 2 * sizeof(float));
    uint8_t* base = scratch.reserve(qs_bytes + ds_bytes);
    a.q8x32 = {reinterpret_cast<int8_t*>(base), reinterpret_cast<float*>(base + qs_bytes)};
  } else {
    const int64_t nb = cols / detail::kQ8x256Block;
    const int64_t ng = cols / detail::kQ8x256SumGroup;
    const size_t d_bytes = ActScratch::round_up(static_cast<size_t>(n * nb) * sizeof(float));
    const size_t sums_bytes = ActScratch::round_up(static_cast<size_t>(n * digits * ng) * sizeof(int16_t));
    uint8_t* base = scratch.reserve(qs_bytes + d_bytes + sums_bytes);
    a.q8x256 = {reinterpret_cast<int8_t*>(base), reinterpret_cast<float*>(base + qs_bytes),
                reinterpret_cast<int16_t*>(base + qs_bytes + d_bytes)};
  }
  return a;
}

// Quantizes activation rows [i0, i1) into the layout `a` (no-op for float activations). Rows are
// independent, so any split across threads writes the same bytes.
void quantize_rows(const Level& lv, ActFormat format, const float* x, const Activations& a, int64_t i0, int64_t i1) {
  const int64_t cols = a.cols;
  const int digits = a.digits;
  if (format == ActFormat::kQ8x32) {
    const int64_t nb = cols / detail::kQ8x32Block;
    auto* qs = const_cast<int8_t*>(a.q8x32.qs);
    auto* ds = const_cast<float*>(a.q8x32.ds);
    const auto quantize = lv.quantize_x32[digits - 1];
    for (int64_t i = i0; i < i1; ++i) quantize(x + i * cols, cols, qs + i * digits * cols, ds + i * nb * 2);
  } else if (format == ActFormat::kQ8x256) {
    const int64_t nb = cols / detail::kQ8x256Block;
    const int64_t ng = cols / detail::kQ8x256SumGroup;
    auto* qs = const_cast<int8_t*>(a.q8x256.qs);
    auto* d = const_cast<float*>(a.q8x256.d);
    auto* bsums = const_cast<int16_t*>(a.q8x256.bsums);
    const auto quantize = lv.quantize_x256[digits - 1];
    for (int64_t i = i0; i < i1; ++i)
      quantize(x + i * cols, cols, qs + i * digits * cols, d + i * nb, bsums + i * digits * ng);
  }
}

// A one-shot barrier for the threads of one parallel region (one pool.run). It spins briefly,
// then yields: on an oversubscribed machine the thread being waited for may share this core,
// and pure spinning would burn the whole time slice it needs (measured: 20 ms stalls).
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  void arrive_and_wait() {
    arrived_.fetch_add(1, std::memory_order_acq_rel);
    for (int spin = 0; arrived_.load(std::memory_order_acquire) < n_; ++spin) {
      if (spin < kSpins) {
        _mm_pause();
      } else {
        std::this_thread::yield();
      }
    }
  }
  static constexpr int kSpins = 2000;  // ~10-50 us of pause instructions

 private:
  const int n_;
  std::atomic<int> arrived_{0};
};

void check_args(const Tensor& w, const float* x, int64_t n, const float* y) {
  TERN_CHECK_MSG(matmul_supports(w.dtype), "matmul: unsupported weight dtype");
  TERN_CHECK(w.device == Device::kCpu);
  TERN_CHECK(n >= 0 && w.rows >= 0 && w.cols > 0);
  TERN_CHECK(w.cols % block_elems(w.dtype) == 0);
  TERN_CHECK(w.row_stride >= row_bytes(w.dtype, w.cols));
  TERN_CHECK(n == 0 || (x != nullptr && y != nullptr));
}

int digits_of(ActBits bits) {
  TERN_CHECK(bits == ActBits::k8 || bits == ActBits::k16);
  return bits == ActBits::k16 ? 2 : 1;
}

}  // namespace

ActBits act_bits_from_env(ActBits requested) {
  const char* env = std::getenv("TERN_CPU_ACT_BITS");
  if (env == nullptr || *env == '\0') return requested;
  if (std::strcmp(env, "8") == 0) return ActBits::k8;
  if (std::strcmp(env, "16") == 0) return ActBits::k16;
  std::fprintf(stderr, "tern: ignoring TERN_CPU_ACT_BITS=%s (expected 8 or 16)\n", env);
  return requested;
}

std::string_view act_bits_name(ActBits bits) { return bits == ActBits::k8 ? "8" : "16"; }

bool matmul_supports(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

void matmul_ref(const Tensor& w, const float* x, int64_t n, float* y) {
  check_args(w, x, n, y);
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    TERN_CHECK(dequantize_row_ref(w.dtype, w.row(r), row.data(), w.cols));
    for (int64_t i = 0; i < n; ++i) {
      const float* xi = x + i * w.cols;
      float acc = 0.0f;
      for (int64_t j = 0; j < w.cols; ++j) acc += row[j] * xi[j];
      y[i * w.rows + r] = acc;
    }
  }
}

size_t decode_pack_bytes(Isa isa, const Tensor& w) {
  if (isa != Isa::kAvx512 || w.dtype != DType::Q4_K || w.device != Device::kCpu || w.rows < kRowGrain) return 0;
  if (w.row_stride * kRowGrain >= (size_t{1} << 31)) return 0;  // the transposes' int32 offsets
  return detail::avx512_q4k_decode_pack_bytes(w.rows, w.cols);
}

void make_decode_pack(Isa isa, const Tensor& w, uint8_t* out) {
  TERN_CHECK(decode_pack_bytes(isa, w) > 0 && reinterpret_cast<uintptr_t>(out) % 64 == 0);
  detail::avx512_pack_q4k_for_decode(static_cast<const uint8_t*>(w.data), w.row_stride, w.rows, w.cols, out);
}

void matmul_isa(Isa isa, const Tensor& w, const float* x, int64_t n, float* y, ThreadPool& pool, ActBits act_bits,
                const uint8_t* pack) {
  const Tensor* ws[] = {&w};
  float* ys[] = {y};
  const uint8_t* packs[] = {pack};
  matmul_group_isa(isa, ws, x, n, ys, pool, act_bits, packs);
}

void matmul_group_isa(Isa isa, std::span<const Tensor* const> ws, const float* x, int64_t n, std::span<float* const> ys,
                      ThreadPool& pool, ActBits act_bits, std::span<const uint8_t* const> packs) {
  TERN_CHECK(ws.size() == ys.size() && !ws.empty());
  TERN_CHECK(packs.empty() || packs.size() == ws.size());
  TERN_CHECK(isa_supported(isa));
  const int digits = digits_of(act_bits);
  const int64_t cols = ws[0]->cols;
  // One activation form for the whole group, or one call per weight.
  const ActFormat format = find_kernel(isa, ws[0]->dtype, digits).act;
  for (const Tensor* w : ws) {
    if (w->cols != cols || find_kernel(isa, w->dtype, digits).act != format) {
      for (size_t i = 0; i < ws.size(); ++i)
        matmul_isa(isa, *ws[i], x, n, ys[i], pool, act_bits, packs.empty() ? nullptr : packs[i]);
      return;
    }
  }
  struct Part {
    const Tensor* w;
    Kernel kernel;
    float* y;
    int64_t grain_begin;  // first grain of this weight in the group's grain sequence
    const uint8_t* pack;  // decode pack or nullptr
    size_t pack_grain_bytes;  // pack bytes per grain (16 rows)
  };
  constexpr size_t kMaxGroup = 8;
  TERN_CHECK(ws.size() <= kMaxGroup);
  Part parts[kMaxGroup];
  int64_t n_grains = 0, macs = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    check_args(*ws[i], x, n, ys[i]);
    const uint8_t* pack = packs.empty() ? nullptr : packs[i];
    const size_t pack_bytes = pack != nullptr ? decode_pack_bytes(isa, *ws[i]) : 0;
    TERN_CHECK(pack == nullptr || pack_bytes > 0);
    parts[i] = {ws[i], find_kernel(isa, ws[i]->dtype, digits), ys[i], n_grains, pack,
                pack != nullptr ? pack_bytes / static_cast<size_t>(ws[i]->rows / kRowGrain) : 0};
    TERN_CHECK(parts[i].kernel.gemm != nullptr);
    n_grains += (ws[i]->rows + kRowGrain - 1) / kRowGrain;
    macs += n * ws[i]->rows * cols;
  }
  if (n == 0 || n_grains == 0) return;
  const Level& lv = level(isa);
  const Activations act = layout_activations(format, digits, x, n, cols);

  // Grains [g0, g1) of the group: each weight's overlap, as contiguous runs of its rows.
  auto run_grains = [&](int64_t g0, int64_t g1) {
    for (size_t i = 0; i < ws.size(); ++i) {
      const Part& p = parts[i];
      const int64_t own = (p.w->rows + kRowGrain - 1) / kRowGrain;
      const int64_t b = std::max(g0, p.grain_begin), e = std::min(g1, p.grain_begin + own);
      if (b >= e) continue;
      const int64_t r0 = (b - p.grain_begin) * kRowGrain, r1 = std::min(p.w->rows, (e - p.grain_begin) * kRowGrain);
      // r0 is a multiple of the grain, so the run starts at a packed panel.
      const uint8_t* pack = p.pack != nullptr ? p.pack + static_cast<size_t>(r0 / kRowGrain) * p.pack_grain_bytes : nullptr;
      const WeightRows rows{static_cast<const uint8_t*>(p.w->row(r0)), p.w->row_stride, r1 - r0, cols, pack};
      p.kernel.gemm(rows, act, p.y + r0, p.w->rows);
    }
  };
  const int n_threads = static_cast<int>(std::min<int64_t>(pool.n_threads(), n_grains));
  if (n_threads <= 1 || macs < kMinParallelMacs) {
    quantize_rows(lv, format, x, act, 0, n);
    run_grains(0, n_grains);
    return;
  }
  // Prefill-sized calls also split the activation quantization (else a serial ~10% of the work)
  // and meet at a barrier, so every thread takes part.
  if (format != ActFormat::kF32 && n >= kSplitQuantizationRows) {
    SpinBarrier quantized(n_threads);
    pool.run([&](int t) {
      if (t >= n_threads) return;
      quantize_rows(lv, format, x, act, n * t / n_threads, n * (t + 1) / n_threads);
      quantized.arrive_and_wait();
      run_grains(n_grains * t / n_threads, n_grains * (t + 1) / n_threads);
    });
    return;
  }
  // Decode: the calling thread quantizes, then the threads that show up claim runs of grains
  // (a descheduled worker on a shared machine no longer stalls the step; results do not depend
  // on who computes a row). ~8 claims per thread balance the load at one atomic add each.
  quantize_rows(lv, format, x, act, 0, n);
  const int64_t claim = std::max<int64_t>(1, n_grains / (8 * n_threads));
  std::atomic<int64_t> next{0};
  pool.run_dynamic([&](int) {
    for (int64_t g = next.fetch_add(claim); g < n_grains; g = next.fetch_add(claim))
      run_grains(g, std::min(n_grains, g + claim));
  });
}

void matmul(const Tensor& w, const float* x, int64_t n, float* y, ThreadPool& pool, ActBits act_bits,
            const uint8_t* pack) {
  matmul_isa(active_isa(), w, x, n, y, pool, act_bits, pack);
}

void matmul_group(std::span<const Tensor* const> ws, const float* x, int64_t n, std::span<float* const> ys,
                  ThreadPool& pool, ActBits act_bits, std::span<const uint8_t* const> packs) {
  matmul_group_isa(active_isa(), ws, x, n, ys, pool, act_bits, packs);
}

}  // namespace tern::cpu
