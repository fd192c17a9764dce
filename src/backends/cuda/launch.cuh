// Kernel launches with programmatic dependent launch (PDL, sm_90+).
//
// Inside a decode step's CUDA graph most kernels are short (a few microseconds), so the gap
// between one kernel's last block and the next kernel's first block is a large share of a step.
// With PDL the next kernel is launched while its predecessor still runs: its blocks start, do
// the work that depends on nothing earlier (a GEMV issues its first weight loads), and then wait
// in pdl_wait() (common.cuh) until the predecessor has completed and its writes are visible.
// Results are unchanged: every kernel waits before it reads or writes anything shared, and since
// each kernel's wait completes only after its predecessor completed, completion stays ordered
// along the stream.
//
// Where a kernel lets its successor launch (pdl_launch_dependents) is a timing choice, never a
// correctness one, as long as it comes after its own wait: most kernels call it right after, the
// merges of attention_span.cu after their last fold where their successor's early weight loads
// would slow them (attention_span_merge.cuh kMergeTrigger*).
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels.h"
#include "core/check.h"

namespace tern::cuda {

// Lets `kernel` take up to max_smem_bytes - static_budget bytes of dynamic shared memory (the
// device's opt-in limit less the static part its launcher budgets for), once it is checked that
// the kernel's static shared memory fits that budget; `what` names the budget in the failure.
template <typename... Params>
void allow_dynamic_smem(void (*kernel)(Params...), int max_smem_bytes, int static_budget, const char* what) {
  cudaFuncAttributes attr{};
  TERN_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  TERN_CHECK_MSG(attr.sharedSizeBytes <= static_cast<size_t>(static_budget), what);
  TERN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem_bytes - static_budget));
}

template <typename... Params, typename... Args>
void launch_kernel(const LaunchEnv& env, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                   Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = env.stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = env.pdl ? 1 : 0;
  TERN_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace tern::cuda
