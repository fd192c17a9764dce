// The bf16 GEMM rate probe used by benchmarks (cuda_backend.h bf16_gemm_tflops): the other
// ceiling next to copy_bandwidth_gbs, measured in the same run as the figures held against it.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/tc_gemm.h"

namespace tern::cuda {
namespace {

// Pseudo-random bf16 values in about [-1, 1): all-zero or constant inputs would let the tensor
// cores draw less power and run at clocks a real prefill never sees.
std::vector<uint16_t> random_bf16(size_t count, uint32_t seed) {
  std::vector<uint16_t> v(count);
  uint32_t s = seed;
  for (uint16_t& x : v) {
    s = s * 1664525u + 1013904223u;
    // Exponent 126 or 127 (magnitudes in [0.5, 2)), random sign and mantissa.
    x = static_cast<uint16_t>(((s >> 16) & 0x807Fu) | (0x3F00u + ((s >> 8) & 0x80u)));
  }
  return v;
}

struct DeviceBuffers {
  void* a = nullptr;
  void* b = nullptr;
  void* d = nullptr;
  ~DeviceBuffers() {
    cudaFree(a);
    cudaFree(b);
    cudaFree(d);
  }
};

}  // namespace

Result<double> bf16_gemm_tflops(int device, int64_t n, int reps) {
  if (device < 0 || device >= device_count()) return error("cuda: no device " + std::to_string(device));
  if (n <= 0 || reps <= 0) return error("cuda: bf16 GEMM probe needs n > 0 and reps > 0");
  TERN_CUDA_CHECK(cudaSetDevice(device));
  auto gemm = TcGemm::create();
  if (!gemm.is_ok()) return gemm.status();
  const size_t elems = static_cast<size_t>(n) * static_cast<size_t>(n);
  DeviceBuffers buf;
  if (cudaMalloc(&buf.a, elems * 2) != cudaSuccess || cudaMalloc(&buf.b, elems * 2) != cudaSuccess ||
      cudaMalloc(&buf.d, elems * 4) != cudaSuccess) {
    (void)cudaGetLastError();
    return error("cuda: cannot allocate the bf16 GEMM probe's " + std::to_string(elems * 8 >> 20) + " MiB");
  }
  const std::vector<uint16_t> host_a = random_bf16(elems, 1), host_b = random_bf16(elems, 2);
  TERN_CUDA_CHECK(cudaMemcpy(buf.a, host_a.data(), elems * 2, cudaMemcpyHostToDevice));
  TERN_CUDA_CHECK(cudaMemcpy(buf.b, host_b.data(), elems * 2, cudaMemcpyHostToDevice));
  TcGemmShape shape{n, n, n, n, n, n, pointer_alignment(buf.a), pointer_alignment(buf.b), pointer_alignment(buf.d)};
  cudaStream_t stream = nullptr;
  TERN_CUDA_CHECK(cudaStreamCreate(&stream));
  cudaEvent_t start, stop;
  TERN_CUDA_CHECK(cudaEventCreate(&start));
  TERN_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int i = 0; i < reps + 3; ++i) {  // three warm-ups: plan choice, clocks
    TERN_CUDA_CHECK(cudaEventRecord(start, stream));
    gemm.value()->run(shape, buf.a, buf.b, static_cast<float*>(buf.d), stream);
    TERN_CUDA_CHECK(cudaEventRecord(stop, stream));
    TERN_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0.0f;
    TERN_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    if (i >= 3) ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  std::sort(ms.begin(), ms.end());
  const double median_s = ms[ms.size() / 2] * 1e-3;
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / median_s * 1e-12;
}

}  // namespace tern::cuda
