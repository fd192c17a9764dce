// Device facts and the copy-bandwidth probe used by benchmarks (cuda_backend.h).
#include <algorithm>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"

namespace tern::cuda {

Result<DeviceInfo> device_info(int device) {
  if (device < 0 || device >= device_count()) return error("cuda: no device " + std::to_string(device));
  cudaDeviceProp prop{};
  TERN_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  DeviceInfo info;
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  info.memory_bytes = prop.totalGlobalMem;
  info.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
  info.cc_major = prop.major;
  return info;
}

Result<double> copy_bandwidth_gbs(int device, size_t bytes, int reps) {
  if (device < 0 || device >= device_count()) return error("cuda: no device " + std::to_string(device));
  TERN_CUDA_CHECK(cudaSetDevice(device));
  void* src = nullptr;
  void* dst = nullptr;
  if (cudaMalloc(&src, bytes) != cudaSuccess || cudaMalloc(&dst, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    cudaFree(src);
    return error("cuda: cannot allocate 2 x " + std::to_string(bytes) + " bytes for the bandwidth probe");
  }
  TERN_CUDA_CHECK(cudaMemset(src, 1, bytes));
  cudaEvent_t start, stop;
  TERN_CUDA_CHECK(cudaEventCreate(&start));
  TERN_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int i = 0; i < reps + 2; ++i) {
    TERN_CUDA_CHECK(cudaEventRecord(start));
    TERN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice));
    TERN_CUDA_CHECK(cudaEventRecord(stop));
    TERN_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0.0f;
    TERN_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    if (i >= 2) ms.push_back(t);  // two warm-ups
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(src);
  cudaFree(dst);
  std::sort(ms.begin(), ms.end());
  const double median_s = ms[ms.size() / 2] * 1e-3;
  return 2.0 * static_cast<double>(bytes) / median_s * 1e-9;
}

}  // namespace tern::cuda
