// bf16 tensor-core GEMMs through cuBLASLt, for the opt-in tensor-core prefill (matmul_tc.h).
//
// cuBLASLt is loaded at run time (dlopen), not linked: tern binaries keep needing only the
// driver, and the library (~540 MB) is mapped only by a backend that turned the path on.
// TcGemm owns the handle, a fixed workspace and one cached plan (layouts + algorithm) per
// shape. Plans are made on the host before a step is flushed (prepare), so a flush, and a CUDA
// graph capture of it, only launches: cublasLtMatmul with a caller-owned workspace is
// capturable.
//
// Not batch-invariant: cuBLASLt picks its kernel (tile shape, split-K) per (m, n, k), so a
// product row's bits depend on how many rows share the GEMM.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "core/status.h"

namespace tern::cuda {

struct CublasLtApi;  // the loaded entry points (tc_gemm.cpp)

// D[m, n] = A^T B in column-major terms: A bf16 stored [k, m] (lda >= k), B bf16 stored [k, n]
// (ldb >= k), D fp32 stored [m, n] (ldd >= m), fp32 accumulation. In tern's row-major terms:
// A is the weight [m rows, k cols], B the activations [n, k], D the output [n, m].
struct TcGemmShape {
  int64_t m, n, k;
  int64_t lda, ldb, ldd;  // elements
  // Largest power of two (<= 256) dividing each pointer: cuBLASLt's kernels are chosen for it.
  uint32_t align_a, align_b, align_d;

  auto key() const { return std::tie(m, n, k, lda, ldb, ldd, align_a, align_b, align_d); }
  bool operator<(const TcGemmShape& o) const { return key() < o.key(); }
};

uint32_t pointer_alignment(const void* p);

class TcGemm {
 public:
  // Loads cuBLASLt and allocates the workspace on the current device. Error naming the library
  // when it cannot be found or does not start.
  static Result<std::unique_ptr<TcGemm>> create();
  ~TcGemm();
  TcGemm(const TcGemm&) = delete;
  TcGemm& operator=(const TcGemm&) = delete;

  // Chooses and caches the algorithm for `s` (host only; idempotent).
  void prepare(const TcGemmShape& s);
  // Enqueues D = A^T B on `stream`. Prepares `s` first if nobody did (never inside a capture:
  // the backend prepares at record time).
  void run(const TcGemmShape& s, const void* a, const void* b, float* d, cudaStream_t stream);

 private:
  struct Plan;
  TcGemm() = default;
  const Plan& plan_for(const TcGemmShape& s);

  const CublasLtApi* api_ = nullptr;
  void* handle_ = nullptr;      // cublasLtHandle_t
  void* matmul_desc_ = nullptr; // cublasLtMatmulDesc_t: bf16 x bf16 -> fp32, A transposed
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<TcGemmShape, std::unique_ptr<Plan>> plans_;
};

}  // namespace tern::cuda
