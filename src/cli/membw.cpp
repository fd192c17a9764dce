#include "cli/membw.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <vector>

#include <sys/mman.h>

#include "core/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tern::cli {
namespace {

constexpr size_t kAlign = size_t{2} << 20;  // huge-page aligned
constexpr size_t kStepBytes = 512;  // bytes per loop iteration: eight 64-byte (or 16 32-byte) loads

// XOR-folds every byte (so the loads cannot be optimised away) into 8 independent accumulators,
// enough loads in flight to saturate the memory system from one core. 64-byte loads measure
// ~15% more than 32-byte ones on AVX-512 Xeons: one load per cache line.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) uint64_t read_avx512(const uint8_t* p, size_t n_bytes) {
  __m512i acc[8];
  for (__m512i& a : acc) a = _mm512_setzero_si512();
  for (size_t i = 0; i + kStepBytes <= n_bytes; i += kStepBytes) {
    for (int k = 0; k < 8; ++k) acc[k] = _mm512_xor_si512(acc[k], _mm512_load_si512(p + i + 64 * k));
  }
  for (int k = 1; k < 8; ++k) acc[0] = _mm512_xor_si512(acc[0], acc[k]);
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, acc[0]);
  return lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3] ^ lanes[4] ^ lanes[5] ^ lanes[6] ^ lanes[7];
}

__attribute__((target("avx2"))) uint64_t read_avx2(const uint8_t* p, size_t n_bytes) {
  __m256i acc[8];
  for (__m256i& a : acc) a = _mm256_setzero_si256();
  for (size_t i = 0; i + kStepBytes / 2 <= n_bytes; i += kStepBytes / 2) {
    for (int k = 0; k < 8; ++k)
      acc[k] = _mm256_xor_si256(acc[k], _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32 * k)));
  }
  for (int k = 1; k < 8; ++k) acc[0] = _mm256_xor_si256(acc[0], acc[k]);
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc[0]);
  return lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3];
}
#endif

uint64_t read_portable(const uint8_t* p, size_t n_bytes) {
  uint64_t acc[8] = {};
  for (size_t i = 0; i + 64 <= n_bytes; i += 64) {
    for (int k = 0; k < 8; ++k) {
      uint64_t v;
      std::memcpy(&v, p + i + 8 * k, sizeof(v));
      acc[k] ^= v;
    }
  }
  return acc[0] ^ acc[1] ^ acc[2] ^ acc[3] ^ acc[4] ^ acc[5] ^ acc[6] ^ acc[7];
}

uint64_t read_all(const uint8_t* p, size_t n_bytes) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return read_avx512(p, n_bytes);
  if (__builtin_cpu_supports("avx2")) return read_avx2(p, n_bytes);
#endif
  return read_portable(p, n_bytes);
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

}  // namespace

double measure_read_bandwidth_gbs(int n_threads, const MemBandwidthOptions& options) {
  n_threads = std::max(1, n_threads);
  // Each thread's slice is a whole number of loop steps so every byte counted is read.
  const size_t slice = options.buffer_bytes / n_threads / kStepBytes * kStepBytes;
  const size_t total = slice * n_threads;
  const size_t alloc_bytes = (total + kAlign - 1) / kAlign * kAlign;  // aligned_alloc wants a multiple
  std::unique_ptr<uint8_t, FreeDeleter> buffer(static_cast<uint8_t*>(std::aligned_alloc(kAlign, alloc_bytes)));
  if (!buffer || slice == 0) return 0.0;
  // Huge pages where the kernel allows them (madvise mode): 4 KiB pages cost ~25% of the
  // measured bandwidth in TLB walks, which would understate the machine's limit.
  ::madvise(buffer.get(), alloc_bytes, MADV_HUGEPAGE);
  ThreadPool pool(n_threads);
  // First touch from the thread that will read the slice (pages land near it on NUMA hosts).
  pool.run([&](int t) { std::memset(buffer.get() + t * slice, t + 1, slice); });

  volatile uint64_t sink = 0;  // keeps the reads observable
  double best_seconds = 0.0;
  for (int pass = 0; pass < std::max(1, options.n_passes); ++pass) {
    std::vector<uint64_t> folds(n_threads);
    std::vector<double> cpu_seconds(n_threads);
    const auto t0 = std::chrono::steady_clock::now();
    pool.run([&](int t) {
      const double c0 = thread_cpu_seconds();
      folds[t] = read_all(buffer.get() + t * slice, slice);
      cpu_seconds[t] = thread_cpu_seconds() - c0;
    });
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (options.cpu_time) seconds = *std::max_element(cpu_seconds.begin(), cpu_seconds.end());
    for (uint64_t f : folds) sink = sink ^ f;
    if (pass == 0 || seconds < best_seconds) best_seconds = seconds;
  }
  return static_cast<double>(total) / best_seconds / 1e9;
}

}  // namespace tern::cli
