#include "backends/cuda/step_queue.h"

#include <algorithm>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/matmul_tc.h"
#include "core/check.h"

namespace tern::cuda {
namespace {

bool same_ops(const std::vector<OpRecord>& a, const std::vector<OpRecord>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(OpRecord)) == 0;
}

template <typename Args>
const Args& args_of(const OpRecord& r) {
  return *reinterpret_cast<const Args*>(r.args);
}

void launch_one(const OpRecord& r, const LaunchEnv& s) {
  switch (r.kind) {
    case OpKind::kEmbed: launch_embed(args_of<EmbedArgs>(r), s); return;
    case OpKind::kRmsNorm: launch_rms_norm(args_of<RmsNormArgs>(r), s); return;
    case OpKind::kElementwise: launch_elementwise(args_of<ElementwiseArgs>(r), s); return;
    case OpKind::kRope: launch_rope(args_of<RopeArgs>(r), s); return;
    case OpKind::kKvWrite: launch_kv_write(args_of<KvWriteArgs>(r), s); return;
    case OpKind::kGatherRows: launch_gather_rows(args_of<GatherRowsArgs>(r), s); return;
    case OpKind::kMatmul: launch_matmul(args_of<MatmulArgs>(r), s); return;
    case OpKind::kAttention: launch_attention(args_of<AttentionArgs>(r), s); return;
    case OpKind::kMatmulTc: launch_matmul_tc(args_of<TcMatmulArgs>(r), s); return;
    case OpKind::kArgmaxRows: launch_argmax_rows(args_of<ArgmaxArgs>(r), s); return;
    case OpKind::kTopCandidates: launch_top_candidates(args_of<TopCandidatesArgs>(r), s); return;
  }
  TERN_CHECK_MSG(false, "unknown op record");
}

}  // namespace

StepQueue::~StepQueue() {
  for (CachedGraph& g : graphs_) cudaGraphExecDestroy(g.exec);  // best effort at teardown
}

void StepQueue::launch_all(const std::vector<OpRecord>& ops) {
  const LaunchEnv env{stream_, pdl_};
  for (const OpRecord& r : ops) launch_one(r, env);
}

StepQueue::CachedGraph& StepQueue::capture(const std::vector<OpRecord>& ops) {
  cudaGraph_t graph = nullptr;
  TERN_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  launch_all(ops);
  TERN_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));

  CachedGraph* slot = nullptr;
  if (graphs_.size() < kMaxGraphs) {
    slot = &graphs_.emplace_back();
  } else {
    // Reuse the least recently used entry; updating its executable in place is much cheaper
    // than a new instantiation when only launch parameters changed (a longer context).
    slot = &*std::min_element(graphs_.begin(), graphs_.end(),
                              [](const CachedGraph& a, const CachedGraph& b) { return a.last_used < b.last_used; });
  }
  bool updated = false;
  if (slot->exec != nullptr) {
    cudaGraphExecUpdateResultInfo info;
    updated = cudaGraphExecUpdate(slot->exec, graph, &info) == cudaSuccess;
    if (!updated) {
      (void)cudaGetLastError();  // clear the non-sticky update failure
      TERN_CUDA_CHECK(cudaGraphExecDestroy(slot->exec));
      slot->exec = nullptr;
    }
  }
  if (!updated) TERN_CUDA_CHECK(cudaGraphInstantiate(&slot->exec, graph, 0));
  TERN_CUDA_CHECK(cudaGraphDestroy(graph));
  slot->ops = ops;
  ++stats_.graphs_built;
  return *slot;
}

void StepQueue::flush() {
  if (pending_.empty()) return;
  CachedGraph* hit = nullptr;
  if (use_graphs_) {
    for (CachedGraph& g : graphs_) {
      if (same_ops(g.ops, pending_)) {
        hit = &g;
        break;
      }
    }
    if (hit == nullptr && same_ops(previous_, pending_)) hit = &capture(pending_);
  }
  if (hit != nullptr) {
    hit->last_used = ++clock_;
    TERN_CUDA_CHECK(cudaGraphLaunch(hit->exec, stream_));
    ++stats_.steps_graph;
  } else {
    launch_all(pending_);
    ++stats_.steps_eager;
  }
  previous_.swap(pending_);
  pending_.clear();
}

}  // namespace tern::cuda
