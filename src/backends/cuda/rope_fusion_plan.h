// The rope fusion peephole, run on a step's recorded ops as the backend records them: the rope of
// k joins the rope of q (one launch, RopeArgs::x2), the K/V row write joins that launch
// (RopeArgs::kv), and a fused decode attention takes the whole launch into its own
// (AttentionArgs::rope, attention_fused.cuh). Each fold is taken only where the joined launch
// reads nothing it writes elsewhere (address-range checks), so every element gets the same
// expression either way (tests/gpu GpuOps rope / kv-write tests, GpuAttentionFused).
#pragma once

#include "backends/cuda/kernels.h"
#include "backends/cuda/step_queue.h"
#include "core/tensor.h"
#include "ops/backend.h"

namespace tern::cuda {

// The rope of x (n_heads heads) as the second half of the rope record right before it, when that
// one rotates the same positions the same way and touches other memory. True when taken.
bool join_second_rope(StepQueue& queue, const DevicePlan& plan, const Tensor& x, int n_heads, int head_dim,
                      const RopeParams& rope);
// The rope record right before a kv_write of k and v that can write the cache in its launch (k
// is one of the record's rotated tensors, and v overlaps neither), with k_first_head set; the
// caller fills its kv. nullptr: the write needs its own launch.
RopeArgs* rope_taking_kv_write(StepQueue& queue, const DevicePlan& plan, const Tensor& k, const Tensor& v);
// A fused decode attention's rope: the record right before it, when it rotates exactly this q and
// k and writes this attention's cache, and a's output overlaps none of its inputs. Then the
// record is popped, a.rope filled and kAttnFusedRope set; true when taken.
bool take_rope_into_attention(StepQueue& queue, const DevicePlan& plan, AttentionArgs& a);

}  // namespace tern::cuda
