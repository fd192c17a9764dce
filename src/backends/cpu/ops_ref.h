// Plain reference implementations of the non-matmul ops: scalar, single-threaded, written to be
// obviously right. They are the test oracle for the fast paths (and for the CUDA backend).
// The paged-KV layout: slot s of a layer holds token data at row s of kv.k / kv.v.
#pragma once

#include "ops/backend.h"

namespace tern::cpu::ref {

void embed(const Tensor& table, const BatchPlan& plan, Tensor& out);
void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out);
void add_bias(Tensor& x, const Tensor& bias);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void swiglu(const Tensor& gate, const Tensor& up, Tensor& out);
void rope(Tensor& x, int n_heads, int head_dim, const RopeParams& rope, const BatchPlan& plan);
void kv_write(const Tensor& k, const Tensor& v, KvLayerView& kv, const BatchPlan& plan);
void attention(const Tensor& q, const KvLayerView& kv, const AttentionParams& p, const BatchPlan& plan, Tensor& out);
void gather_logit_rows(const Tensor& x, const BatchPlan& plan, Tensor& out);

// Reads `n` elements of a KV row (F16 or F32) at column `col` as floats.
void load_kv(const Tensor& cache, int64_t slot, int64_t col, int64_t n, float* dst);

}  // namespace tern::cpu::ref
