// CUDA runtime error checks. A failing runtime call inside the backend is a bug or a dead device,
// never bad user input (inputs are validated before they reach a launch), so it aborts with the
// call, the CUDA error string and file:line, like TERN_CHECK.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

namespace tern::cuda::detail {
[[noreturn]] inline void cuda_failed(cudaError_t err, const char* expr, const char* file, int line) {
  std::fprintf(stderr, "tern: CUDA call failed: %s: %s (%s) at %s:%d\n", expr, cudaGetErrorString(err),
               cudaGetErrorName(err), file, line);
  std::fflush(stderr);
  std::abort();
}
}  // namespace tern::cuda::detail

#define TERN_CUDA_CHECK(expr)                                                            \
  do {                                                                                   \
    const cudaError_t tern_cuda_err_ = (expr);                                           \
    if (tern_cuda_err_ != cudaSuccess)                                                   \
      ::tern::cuda::detail::cuda_failed(tern_cuda_err_, #expr, __FILE__, __LINE__);      \
  } while (0)

// After a kernel launch: reports launch-configuration errors (not asynchronous faults).
#define TERN_CUDA_CHECK_LAUNCH() TERN_CUDA_CHECK(cudaGetLastError())
