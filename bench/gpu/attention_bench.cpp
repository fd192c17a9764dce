#include "attention_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
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

// n_seqs sequences, each with tokens at positions [first, first + n) and its own blocks
// seq * seq_blocks, seq * seq_blocks + 1, ... in order.
BatchPlan plan_of(int first, int n, int n_seqs = 1, int seq_blocks = 0) {
  BatchPlan p;
  const int n_blocks = (first + n + kBlockTokens - 1) / kBlockTokens;
  p.block_offsets = {0};
  for (int seq = 0; seq < n_seqs; ++seq) {
    for (int b = 0; b < n_blocks; ++b) p.block_ids.push_back(seq * seq_blocks + b);
    p.block_offsets.push_back(static_cast<int32_t>(p.block_ids.size()));
    for (int i = 0; i < n; ++i) {
      p.token_ids.push_back(1);
      p.seq_index.push_back(seq);
      p.positions.push_back(first + i);
      p.kv_slots.push_back((seq * seq_blocks) * kBlockTokens + first + i);
    }
    p.logit_rows.push_back(static_cast<int32_t>(p.token_ids.size()) - 1);
  }
  return p;
}

// Sets the variables of one --attn-env variant ("A=1,B=2"); restore() puts the previous values back.
struct EnvVariant {
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  explicit EnvVariant(const std::string& spec) {
    size_t at = 0;
    while (at < spec.size()) {
      size_t comma = spec.find(',', at);
      if (comma == std::string::npos) comma = spec.size();
      const std::string item = spec.substr(at, comma - at);
      at = comma + 1;
      const size_t eq = item.find('=');
      if (item.empty() || eq == std::string::npos) continue;
      const std::string name = item.substr(0, eq);
      const char* old = std::getenv(name.c_str());
      saved.emplace_back(name, old != nullptr ? std::optional<std::string>(old) : std::nullopt);
      ::setenv(name.c_str(), item.substr(eq + 1).c_str(), 1);
    }
  }
  ~EnvVariant() {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
      if (it->second) ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else ::unsetenv(it->first.c_str());
    }
  }
};

int run_variant(const AttentionBenchOptions& o, const std::string& label, double copy_gbs);

}  // namespace

int run_attention_bench(const AttentionBenchOptions& o) {
  if (o.n_heads <= 0 || o.n_kv_heads <= 0 || o.n_heads % o.n_kv_heads != 0 || o.head_dim <= 0 || o.head_dim % 8 != 0) {
    std::fprintf(stderr, "gpu_bench: --attn-shape wants Q/KV/D with Q a multiple of KV and D of 8\n");
    return 1;
  }
  auto bw = cuda::copy_bandwidth_gbs(0, size_t{2} << 30);
  const double copy_gbs = bw.is_ok() ? bw.value() : 0.0;
  for (int round = 0; round < o.rounds; ++round) {
    std::vector<std::string> order = o.env_variants;
    if (round % 2 == 1) std::reverse(order.begin(), order.end());
    for (const std::string& v : order) {
      const EnvVariant env(v);
      const int rc = run_variant(o, v, copy_gbs);
      if (rc != 0) return rc;
    }
  }
  return 0;
}

namespace {

int run_variant(const AttentionBenchOptions& o, const std::string& label, double copy_gbs) {
  const int kHeads = o.n_heads, kKvHeads = o.n_kv_heads, kHeadDim = o.head_dim;
  cuda::CudaBackendOptions bo;
  bo.tc_prefill = o.tc;
  auto made = cuda::create_backend(bo);
  if (!made.is_ok()) {
    std::fprintf(stderr, "gpu_bench: %s\n", made.status().message().c_str());
    return 1;
  }
  Backend& b = *made.value();
  int max_tokens = 1, max_rows = 1;
  for (int c : o.decode_ctx) max_tokens = std::max(max_tokens, c + 1);
  for (int n : o.batch) max_rows = std::max(max_rows, n);
  for (const auto& [cached, n] : o.prefill) {
    max_tokens = std::max(max_tokens, cached + n);
    max_rows = std::max(max_rows, n);
  }
  int max_batch = 1;
  for (int n : o.batch) max_batch = std::max(max_batch, n);
  const int seq_blocks = (max_tokens + kBlockTokens - 1) / kBlockTokens;  // block stride per sequence
  const int64_t kv_rows = (int64_t{max_batch} * seq_blocks + 1) * kBlockTokens;
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
  auto k_buf = b.alloc(sizeof(float) * static_cast<size_t>(max_rows) * kv_cols);
  auto v_buf = b.alloc(sizeof(float) * static_cast<size_t>(max_rows) * kv_cols);
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
          Tensor k = Tensor::view(k_buf->data(), DType::F32, n, kv_cols, Device::kCuda);
          const Tensor v = Tensor::view(v_buf->data(), DType::F32, n, kv_cols, Device::kCuda);
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

  std::printf("attn     %d/%d heads, head_dim %d (f16 KV), %d layers per step; copy bw %.0f GB/s%s%s%s\n", kHeads,
              kKvHeads, kHeadDim, kLayers, copy_gbs, label.empty() ? "" : "; env [", label.c_str(),
              label.empty() ? "" : "]");
  for (int ctx : o.decode_ctx) {
    for (int n_seqs : o.batch) {
      const BatchPlan plan = plan_of(ctx, 1, n_seqs, seq_blocks);
      char what[48] = "";
      if (n_seqs > 1) std::snprintf(what, sizeof what, " batch %d", n_seqs);
      const int64_t split_before = cuda::backend_stats(b).chunk_splits;
      const double t = time_steps(plan);
      const double kv_bytes = double(ctx + 1) * kv_cols * 2 * 2 * n_seqs;  // K and V, per layer
      const double gbs = kv_bytes * kLayers / t * 1e-9;
      std::printf("attn     decode ctx %6d%s: %7.1f us/layer, %6.3f ms/step (32 layers); KV %.1f MB/layer -> %5.0f GB/s = "
                  "%4.1f%% of copy bw%s\n",
                  ctx, what, t / kLayers * 1e6, t * 1e3, kv_bytes * 1e-6, gbs, copy_gbs > 0 ? 100.0 * gbs / copy_gbs : 0.0,
                  cuda::backend_stats(b).chunk_splits > split_before ? ", chunk split" : "");
      const int64_t fused_before = cuda::backend_stats(b).fused_attentions;
      const int64_t early_before = cuda::backend_stats(b).fused_early_kv;
      const double tr = time_steps(plan, true);
      std::printf("attn     decode+rope ctx %6d%s: %7.1f us/layer (rope q, rope k, K/V write, attention)%s%s\n", ctx,
                  what, tr / kLayers * 1e6, cuda::backend_stats(b).fused_attentions > fused_before ? ", fused" : "",
                  cuda::backend_stats(b).fused_early_kv > early_before ? ", early K/V" : "");
    }
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

}  // namespace
}  // namespace tern::bench
