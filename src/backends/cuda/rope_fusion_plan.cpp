// The rope fusion peephole (rope_fusion_plan.h).
#include "backends/cuda/rope_fusion_plan.h"

#include "backends/cuda/gemv_fusion_plan.h"

namespace tern::cuda {

bool join_second_rope(StepQueue& queue, const DevicePlan& plan, const Tensor& x, int n_heads, int head_dim,
                      const RopeParams& rope) {
  RopeArgs* prev = queue.last_if<RopeArgs>(OpKind::kRope);
  if (prev == nullptr || prev->x2 != nullptr || prev->kv.cols != 0 || prev->n_tokens != plan.n_tokens ||
      prev->head_dim != head_dim || prev->n_rot != rope.n_rot || prev->neox != (rope.neox ? 1 : 0) ||
      prev->mscale != rope.mscale || prev->inv_freq != rope.inv_freq.f32() || prev->positions != plan.positions ||
      !disjoint_rows(prev->x, prev->x_stride, prev->n_heads * prev->head_dim, x.f32(), f32_stride(x),
                     int64_t{n_heads} * head_dim, plan.n_tokens)) {
    return false;
  }
  prev->x2 = x.f32();
  prev->x2_stride = f32_stride(x);
  prev->n_heads2 = n_heads;
  return true;
}

RopeArgs* rope_taking_kv_write(StepQueue& queue, const DevicePlan& plan, const Tensor& k, const Tensor& v) {
  RopeArgs* prev = queue.last_if<RopeArgs>(OpKind::kRope);
  if (prev == nullptr || prev->kv.cols != 0 || prev->n_tokens != plan.n_tokens || prev->positions != plan.positions) {
    return nullptr;
  }
  int k_first_head = -1;
  if (prev->x2 == k.f32() && prev->x2_stride == f32_stride(k) && int64_t{prev->n_heads2} * prev->head_dim == k.cols) {
    k_first_head = prev->n_heads;
  } else if (prev->x2 == nullptr && prev->x == k.f32() && prev->x_stride == f32_stride(k) &&
             int64_t{prev->n_heads} * prev->head_dim == k.cols) {
    k_first_head = 0;
  }
  // v is read while the ropes write q and k: it must not overlap them.
  const bool v_apart =
      disjoint_rows(prev->x, prev->x_stride, int64_t{prev->n_heads} * prev->head_dim, v.f32(), f32_stride(v), v.cols,
                    plan.n_tokens) &&
      (prev->x2 == nullptr || disjoint_rows(prev->x2, prev->x2_stride, int64_t{prev->n_heads2} * prev->head_dim, v.f32(),
                                            f32_stride(v), v.cols, plan.n_tokens));
  if (k_first_head < 0 || !v_apart) return nullptr;
  prev->k_first_head = k_first_head;
  return prev;
}

bool take_rope_into_attention(StepQueue& queue, const DevicePlan& plan, AttentionArgs& a) {
  const RopeArgs* r = queue.last_if<RopeArgs>(OpKind::kRope);
  if (r == nullptr || r->x2 == nullptr || r->kv.cols == 0) return false;
  const int64_t q_cols = int64_t{a.n_heads} * a.head_dim, kv_cols = int64_t{a.n_kv_heads} * a.head_dim;
  const int n = plan.n_tokens;
  const bool same_op = r->x == a.q && r->x_stride == a.q_stride && r->n_heads == a.n_heads &&
                       r->head_dim == a.head_dim && r->n_heads2 == a.n_kv_heads && r->n_tokens == n &&
                       r->positions == plan.positions && r->k_first_head == r->n_heads && r->kv.cols == kv_cols &&
                       r->kv.k == r->x2 && r->kv.k_stride == r->x2_stride && r->kv.n_tokens == n &&
                       r->kv.kv_slots == plan.kv_slots && r->kv.k_cache == a.k_cache && r->kv.v_cache == a.v_cache &&
                       r->kv.k_cache_stride == a.k_cache_stride && r->kv.v_cache_stride == a.v_cache_stride &&
                       r->kv.cache_dtype == a.kv_dtype;
  if (!same_op) return false;
  // The fused blocks read the un-rotated q, k and v while they write out.
  const int64_t out_cols = q_cols;
  if (!disjoint_rows(a.out, a.out_stride, out_cols, a.q, a.q_stride, q_cols, n) ||
      !disjoint_rows(a.out, a.out_stride, out_cols, r->kv.k, r->kv.k_stride, kv_cols, n) ||
      !disjoint_rows(a.out, a.out_stride, out_cols, r->kv.v, r->kv.v_stride, kv_cols, n)) {
    return false;
  }
  AttentionRope& rope = a.rope;
  rope.inv_freq = r->inv_freq;
  rope.k = r->kv.k;
  rope.v = r->kv.v;
  rope.k_stride = r->kv.k_stride;
  rope.v_stride = r->kv.v_stride;
  rope.n_rot = r->n_rot;
  rope.neox = r->neox;
  rope.mscale = r->mscale;
  queue.pop();  // the rope launch runs inside the attention's
  a.fused |= kAttnFusedRope;
  return true;
}

}  // namespace tern::cuda
