#include "attention_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "backends/cuda/attention.h"
#include "backends/cuda/cuda_backend.h"
#include "ops/backend.h"

namespace tern::bench {
namespace {

constexpr int kLayers = 32, kBlockTokens = 16;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One sequence: tokens at positions [first, first + n), blocks 0, 1, 2, ... in order.
BatchPlan plan_of(int first, int n) {
  BatchPlan p;
  const int n_blocks = (first + n + kBlockTokens - 1) / kBlockTokens;
  p.block_offsets = {0, n_blocks};
  for (int b = 0; b < n_blocks; ++b) p.block_ids.push_back(b);
  for (int i = 0; i < n; ++i) {
    p.token_ids.push_back(1);
    p.seq_index.push_back(0);
    p.positions.push_back(first + i);
    p.kv_slots.push_back(first + i);
  }
  p.logit_rows.push_back(n - 1);
  return p;
}

}  // namespace

int run_attention_bench(const AttentionBenchOptions& o) {
  const int kHeads = o.n_heads, kKvHeads = o.n_kv_heads, kHeadDim = o.head_dim;
  if (kHeads <= 0 || kKvHeads <= 0 || kHeads % kKvHeads != 0 || kHeadDim <= 0 || kHeadDim % 8 != 0) {
    std::fprintf(stderr, "gpu_bench: --attn-shape wants Q/KV/D with Q a multiple of KV and D of 8\n");
    return 1;
  }
  cuda::CudaBackendOptions bo;
  bo.tc_prefill = o.tc;
  auto made = cuda::create_backend(bo);
  if (!made.is_ok()) {
    std::fprintf(stderr, "gpu_bench: %s\n", made.status().message().c_str());
    return 1;
  }
  Backend& b = *made.value();
  auto bw = cuda::copy_bandwidth_gbs(0, size_t{2} << 30);
  const double copy_gbs = bw.is_ok() ? bw.value() : 0.0;
  int max_tokens = 1, max_rows = 1;
  for (int c : o.decode_ctx) max_tokens = std::max(max_tokens, c + 1);
  for (const auto& [cached, n] : o.prefill) {
    max_tokens = std::max(max_tokens, cached + n);
    max_rows = std::max(max_rows, n);
  }
  const int64_t kv_rows = (int64_t{max_tokens} + kBlockTokens) / kBlockTokens * kBlockTokens;
  const int64_t kv_cols = int64_t{kKvHeads} * kHeadDim;
  std::vector<std::unique_ptr<Buffer>> owners;
  std::vector<KvLayerView> layers;
  for (int l = 0; l < kLayers; ++l) {  // zero-filled: the data does not change the work
    owners.push_back(b.alloc(static_cast<size_t>(kv_rows * kv_cols) * 2));
    owners.push_back(b.alloc(static_cast<size_t>(kv_rows * kv_cols) * 2));
    layers.push_back(KvLayerView{Tensor::view(owners[owners.size() - 2]->data(), DType::F16, kv_rows, kv_cols, Device::kCuda),
                                 Tensor::view(owners.back()->data(), DType::F16, kv_rows, kv_cols, Device::kCuda),
                                 kBlockTokens});
  }
  auto q_buf = b.alloc(sizeof(float) * static_cast<size_t>(max_rows) * kHeads * kHeadDim);
  auto out_buf = b.alloc(sizeof(float) * static_cast<size_t>(max_rows) * kHeads * kHeadDim);
  // The decode layer's rope and K/V write (decode+rope lines): k and v rows, the rotation's
  // frequencies (zero-filled like q: the values do not change the work).
  auto k_buf = b.alloc(sizeof(float) * static_cast<size_t>(kv_cols));
  auto v_buf = b.alloc(sizeof(float) * static_cast<size_t>(kv_cols));
  auto freq_buf = b.alloc(sizeof(float) * static_cast<size_t>(kHeadDim / 2));
  RopeParams rope;
  rope.n_rot = kHeadDim;
  rope.inv_freq = Tensor::view(freq_buf->data(), DType::F32, 1, kHeadDim / 2, Device::kCuda);
  AttentionParams params;
  params.n_heads = kHeads;
  params.n_kv_heads = kKvHeads;
  params.head_dim = kHeadDim;
  params.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  std::vector<float> sink(static_cast<size_t>(kHeads) * kHeadDim);

  // Seconds per step of kLayers attention calls (median over reps, after two warm-up steps
  // that capture the graph).
  auto time_steps = [&](const BatchPlan& plan, bool with_rope = false) {
    const int n = plan.n_tokens();
    const Tensor q = Tensor::view(q_buf->data(), DType::F32, n, int64_t{kHeads} * kHeadDim, Device::kCuda);
    Tensor out = Tensor::view(out_buf->data(), DType::F32, n, int64_t{kHeads} * kHeadDim, Device::kCuda);
    const Tensor first_row = Tensor::view(out_buf->data(), DType::F32, 1, int64_t{kHeads} * kHeadDim, Device::kCuda);
    std::vector<double> times;
    for (int r = 0; r < o.reps + 2; ++r) {
      const double t0 = now_s();
      b.begin_step(plan);
      for (int l = 0; l < kLayers; ++l) {
        if (with_rope) {  // what a model records per layer before its attention
          Tensor qr = q;
          Tensor k = Tensor::view(k_buf->data(), DType::F32, 1, kv_cols, Device::kCuda);
          const Tensor v = Tensor::view(v_buf->data(), DType::F32, 1, kv_cols, Device::kCuda);
          b.rope(qr, kHeads, kHeadDim, rope);
          b.rope(k, kKvHeads, kHeadDim, rope);
          b.kv_write(k, v, layers[l]);
        }
        b.attention(q, layers[l], params, out);
      }
      b.copy_to_host(first_row, sink.data());
      if (r >= 2) times.push_back(now_s() - t0);
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  };

  std::printf("attn     %d/%d heads, head_dim %d (f16 KV), %d layers per step; copy bw %.0f GB/s\n", kHeads, kKvHeads,
              kHeadDim, kLayers, copy_gbs);
  for (int ctx : o.decode_ctx) {
    const double t = time_steps(plan_of(ctx, 1));
    const double kv_bytes = double(ctx + 1) * kv_cols * 2 * 2;  // K and V, per layer
    const double gbs = kv_bytes * kLayers / t * 1e-9;
    std::printf("attn     decode ctx %6d: %7.1f us/layer, %6.3f ms/token (32 layers); KV %.1f MB/layer -> %5.0f GB/s = "
                "%4.1f%% of copy bw\n",
                ctx, t / kLayers * 1e6, t * 1e3, kv_bytes * 1e-6, gbs, copy_gbs > 0 ? 100.0 * gbs / copy_gbs : 0.0);
    const int64_t fused_before = cuda::backend_stats(b).fused_attentions;
    const int64_t cluster_before = cuda::backend_stats(b).cluster_attentions;
    const double tr = time_steps(plan_of(ctx, 1), true);
    std::printf("attn     decode+rope ctx %6d: %7.1f us/layer (rope q, rope k, K/V write, attention)%s%s\n", ctx,
                tr / kLayers * 1e6, cuda::backend_stats(b).fused_attentions > fused_before ? ", fused" : "",
                cuda::backend_stats(b).cluster_attentions > cluster_before ? ", clusters" : "");
  }
  for (const auto& [cached, n] : o.prefill) {
    const double t = time_steps(plan_of(cached, n));
    double attended = 0.0;  // sum over the new tokens of the positions each attends
    for (int i = 0; i < n; ++i) attended += cached + i + 1;
    const double flops = 4.0 * kHeads * kHeadDim * attended * kLayers;
    std::printf("attn     prefill %5d tokens on %6d cached%s: %7.3f ms/layer, %8.2f ms for 32 layers, %6.1f TFLOP/s\n", n,
                cached, o.tc ? " (tensor cores)" : "", t / kLayers * 1e3, t * 1e3, flops / t * 1e-12);
  }
  const cuda::CudaBackendStats st = cuda::backend_stats(b);
  std::printf("attn     %lld tensor-core attention ops recorded\n", static_cast<long long>(st.tc_attentions));
  // The opt-in warp-specialized span kernel (span_kernel + 512): 0 here means it fell back.
  std::printf("attn     %lld warp-specialized span kernel launches\n",
              static_cast<long long>(cuda::attention_span_ws_launches()));
  return 0;
}

}  // namespace tern::bench
