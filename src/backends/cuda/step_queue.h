// Deferred launches and the CUDA graph cache of the CUDA backend (cuda_backend.h explains why).
//
// The backend turns every op into an OpRecord: the op kind plus its launch arguments, stored in
// zero-filled bytes so two records of the same launch compare equal with memcmp. flush() runs
// the pending records on the stream:
//   - a list equal to a cached graph's list replays that graph;
//   - a list equal to the previous flush's list (seen twice in a row: a decode loop) is captured
//     into a graph, cached, and replayed from then on;
//   - anything else is launched op by op.
// Replays are exact: the records hold every launch argument, so equal lists are equal launches.
// Data that changes between equal steps (the plan, activations) lives in device buffers whose
// addresses stay fixed; the backend refreshes them with stream-ordered copies before flushing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels.h"

namespace tern::cuda {

enum class OpKind : uint32_t {
  kEmbed, kRmsNorm, kElementwise, kRope, kKvWrite, kGatherRows, kMatmul, kAttention, kMatmulTc, kArgmaxRows,
  kTopCandidates
};

struct OpRecord {
  static constexpr size_t kArgBytes = 416;  // AttentionArgs (<= 416 bytes) is the largest
  OpKind kind;
  uint32_t reserved;
  alignas(8) unsigned char args[kArgBytes];
};
static_assert(std::is_trivially_copyable_v<OpRecord>);

class StepQueue {
 public:
  StepQueue(cudaStream_t stream, bool use_graphs, bool pdl) : stream_(stream), use_graphs_(use_graphs), pdl_(pdl) {}
  ~StepQueue();
  StepQueue(const StepQueue&) = delete;
  StepQueue& operator=(const StepQueue&) = delete;

  // Appends a record and returns its zero-filled argument struct for the caller to fill in
  // field by field (padding bytes stay zero, so equal launches compare equal).
  template <typename Args>
  Args& push(OpKind kind) {
    static_assert(std::is_trivially_copyable_v<Args> && sizeof(Args) <= OpRecord::kArgBytes);
    OpRecord& r = pending_.emplace_back();
    std::memset(&r, 0, sizeof(r));
    r.kind = kind;
    return *reinterpret_cast<Args*>(r.args);
  }

  // The last pending record if it is of `kind` (for fusing an op into its predecessor), else
  // nullptr.
  template <typename Args>
  Args* last_if(OpKind kind) {
    if (pending_.empty() || pending_.back().kind != kind) return nullptr;
    return reinterpret_cast<Args*>(pending_.back().args);
  }

  // Drops the last pending record (it was fused into the one about to be pushed).
  void pop() { pending_.pop_back(); }

  // Runs every pending record on the stream (asynchronously). Never syncs the host.
  void flush();
  // Drops every pending record unrun (a step abandoned half-way: CudaBackend::cancel_step).
  void discard() { pending_.clear(); }
  bool empty() const { return pending_.empty(); }
  const CudaBackendStats& stats() const { return stats_; }

 private:
  struct CachedGraph {
    std::vector<OpRecord> ops;
    cudaGraphExec_t exec = nullptr;
    int64_t last_used = 0;
  };
  static constexpr size_t kMaxGraphs = 8;

  void launch_all(const std::vector<OpRecord>& ops);
  CachedGraph& capture(const std::vector<OpRecord>& ops);

  cudaStream_t stream_;
  bool use_graphs_;
  bool pdl_;  // programmatic dependent launch (launch.cuh)
  std::vector<OpRecord> pending_, previous_;
  std::vector<CachedGraph> graphs_;
  int64_t clock_ = 0;
  CudaBackendStats stats_;
};

}  // namespace tern::cuda
