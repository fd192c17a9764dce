// The op vocabulary model code is written in. Each wrapper checks shapes and dtypes (a mismatch
// is a bug in the caller, so it is a TERN_CHECK) and forwards to the backend.
// Letters used in comments: n = tokens in the step, d = model width, h = heads, hd = head dim.
#pragma once

#include <initializer_list>

#include "ops/backend.h"

namespace tern::ops {

// out [n, d] F32 = table[token_ids] (any table dtype).
void embed(Backend& b, const Tensor& table, Tensor& out);
// out [r, c] = x / rms(x) * w, w: [1, c] F32.
void rms_norm(Backend& b, const Tensor& x, const Tensor& w, float eps, Tensor& out);
// out [n, w.rows] = x [n, w.cols] @ w^T.
void matmul(Backend& b, const Tensor& w, const Tensor& x, Tensor& out);
// outs[i] [n, ws[i].rows] = x @ ws[i]^T: several projections of one input (at most 8).
void matmul_group(Backend& b, const Tensor& x, std::initializer_list<const Tensor*> ws, std::initializer_list<Tensor*> outs);
void add_bias(Backend& b, Tensor& x, const Tensor& bias);
void add(Backend& b, const Tensor& a, const Tensor& x, Tensor& out);
void swiglu(Backend& b, const Tensor& gate, const Tensor& up, Tensor& out);
void rope(Backend& b, Tensor& x, int n_heads, int head_dim, const RopeParams& rope);
void kv_write(Backend& b, const Tensor& k, const Tensor& v, KvLayerView& kv);
void attention(Backend& b, const Tensor& q, const KvLayerView& kv, const AttentionParams& p, Tensor& out);
void gather_logit_rows(Backend& b, const Tensor& x, Tensor& out);
// host_ids[r] = first index of the largest value of x[r, :] (core/argmax.h); waits for the step.
void argmax_rows(Backend& b, const Tensor& x, int32_t* host_ids);
// Each row's best candidates into out (core/top_candidates.h); waits for the step.
void top_candidates(Backend& b, const Tensor& x, const CandidateRows& out);

}  // namespace tern::ops
