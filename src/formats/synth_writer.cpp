// The tensor table, metadata and random contents of synthesized models (synth.h explains the
// distributions and the block-pool scheme).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <thread>
#include <utility>

#include "core/quant_ref.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "formats/synth.h"

namespace tern::synth {
namespace {

// Elements per pool: 256 k-quant super-blocks or 2048 legacy blocks. Small enough that the
// reference k-quant encoders (about 1 us per element) build a pool in well under 0.1 s and that
// it stays in L2 while copied from; large enough that no two rows of a tensor are alike.
constexpr int64_t kPoolElems = int64_t{1} << 16;
// Copies move at least this many bytes (several float elements at once; one quant block).
constexpr size_t kMinCopyBytes = 64;

uint64_t mix64(uint64_t x) {  // splitmix64's finalizer: a bijection that scrambles every bit
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// splitmix64: tiny state, fast, and good enough to pick pool blocks and draw Gaussians.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix64(state_ += 0x9e3779b97f4a7c15ull); }
  // Uniform in [0, n), n < 2^32.
  uint32_t below(uint32_t n) { return static_cast<uint32_t>(((next() >> 32) * n) >> 32); }
  // Uniform in (0, 1].
  double unit() { return (static_cast<double>(next() >> 11) + 1.0) * 0x1.0p-53; }
  // Standard normal (Box-Muller; one of the pair is enough here).
  float gaussian() {
    const double r = std::sqrt(-2.0 * std::log(unit()));
    return static_cast<float>(r * std::cos(6.283185307179586 * unit()));
  }

 private:
  uint64_t state_;
};

// Seed of an independent stream for (a, b), e.g. (tensor index, row).
uint64_t stream_seed(uint64_t seed, uint64_t a, uint64_t b) {
  return mix64(seed ^ mix64(a * 0x100000001b3ull ^ mix64(b)));
}

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// Quantized blocks of N(0, std^2) values, shared by every tensor of one (type, std).
struct BlockPool {
  DType type;
  float std;
  std::vector<uint8_t> bytes;
  size_t block_bytes = 0;
  uint32_t n_blocks = 0;
};

BlockPool make_pool(DType type, float std, uint64_t seed) {
  BlockPool p{type, std, {}, dtype_info(type)->block_bytes, 0};
  Rng rng(stream_seed(seed, static_cast<uint64_t>(type), float_bits(std)));
  std::vector<float> values(kPoolElems);
  for (float& v : values) v = std * rng.gaussian();
  p.bytes.resize(row_bytes(type, kPoolElems));
  TERN_CHECK(quantize_row_ref(type, values.data(), p.bytes.data(), kPoolElems));
  p.n_blocks = static_cast<uint32_t>(kPoolElems / block_elems(type));
  return p;
}

std::string blk(int layer, const char* suffix) { return "blk." + std::to_string(layer) + "." + suffix; }

class Synthesizer {
 public:
  Synthesizer(const ModelShape& shape, const QuantMix& mix, const SynthOptions& options)
      : shape_(shape),
        mix_(mix),
        seed_(options.seed),
        pool_(options.n_threads > 0 ? options.n_threads
                                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))),
        plan_(plan_tensors(shape, mix)) {
    build_pools();
  }

  // Adds metadata and a generated tensor per plan entry. The writer must not outlive *this.
  void add_to(gguf::Writer& w) const {
    add_metadata(w);
    for (size_t i = 0; i < plan_.size(); ++i) {
      const TensorPlan& t = plan_[i];
      w.add_tensor_generated(t.name, t.type, t.shape, [this, i](uint8_t* dst) { fill(i, dst); });
    }
  }

 private:
  static bool pooled(const TensorPlan& t) { return t.role != TensorRole::kNorm && t.role != TensorRole::kBias; }

  void build_pools() {
    std::vector<std::pair<DType, float>> keys;
    for (const TensorPlan& t : plan_) {
      if (!pooled(t)) continue;
      const std::pair<DType, float> key{t.type, t.std};
      if (pool_index_.emplace(key, keys.size()).second) keys.push_back(key);
    }
    pools_.resize(keys.size());
    pool_.parallel_for(static_cast<int64_t>(keys.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) pools_[k] = make_pool(keys[k].first, keys[k].second, seed_);
    });
  }

  void fill(size_t index, uint8_t* dst) const {
    const TensorPlan& t = plan_[index];
    const int64_t cols = t.shape[0];
    int64_t numel = 1;
    for (int64_t dim : t.shape) numel *= dim;
    const int64_t rows = numel / cols;  // cols > 0: validate() checked every width
    if (!pooled(t)) {  // small F32 vectors: draw every value
      Rng rng(stream_seed(seed_, index, ~uint64_t{0}));
      auto* out = reinterpret_cast<float*>(dst);
      for (int64_t i = 0; i < rows * cols; ++i) {
        const float v = t.mean + t.std * rng.gaussian();
        std::memcpy(out + i, &v, sizeof(v));
      }
      return;
    }
    const BlockPool& pool = pools_[pool_index_.at({t.type, t.std})];
    const size_t bb = pool.block_bytes;
    const int64_t row_blocks = cols / block_elems(t.type);
    const int64_t span = static_cast<int64_t>(std::max<size_t>(1, kMinCopyBytes / bb));
    const size_t bytes_per_row = row_bytes(t.type, cols);
    // Each row has its own stream, so the bytes do not depend on how rows split across threads.
    pool_.parallel_for(rows, 64, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        Rng rng(stream_seed(seed_, index, static_cast<uint64_t>(r)));
        uint8_t* out = dst + static_cast<size_t>(r) * bytes_per_row;
        for (int64_t b = 0; b < row_blocks; b += span) {
          const int64_t n = std::min(span, row_blocks - b);
          const uint32_t pick = rng.below(pool.n_blocks - static_cast<uint32_t>(n) + 1);
          std::memcpy(out + b * bb, pool.bytes.data() + pick * bb, n * bb);
        }
      }
    });
  }

  void add_metadata(gguf::Writer& w) const {
    using gguf::Value;
    const ModelShape& s = shape_;
    const std::string a = s.arch + ".";
    w.set("general.architecture", Value::string(s.arch));
    w.set("general.type", Value::string("model"));
    w.set("general.name", Value::string(s.name));
    w.set("general.description",
          Value::string("random weights written by tern synth (seed " + std::to_string(seed_) + ", type " + mix_.name +
                        (mix_.pure ? ", pure" : "") + ")"));
    w.set("general.file_type", Value::u32(static_cast<uint32_t>(mix_.file_type)));
    w.set("general.quantization_version", Value::u32(2));
    w.set(a + "vocab_size", Value::u32(static_cast<uint32_t>(s.n_vocab)));
    w.set(a + "context_length", Value::u32(static_cast<uint32_t>(s.n_ctx_train)));
    w.set(a + "embedding_length", Value::u32(static_cast<uint32_t>(s.n_embd)));
    w.set(a + "block_count", Value::u32(static_cast<uint32_t>(s.n_layers)));
    w.set(a + "feed_forward_length", Value::u32(static_cast<uint32_t>(s.n_ff)));
    w.set(a + "attention.head_count", Value::u32(static_cast<uint32_t>(s.n_heads)));
    w.set(a + "attention.head_count_kv", Value::u32(static_cast<uint32_t>(s.n_kv_heads)));
    w.set(a + "attention.key_length", Value::u32(static_cast<uint32_t>(s.head_dim)));
    w.set(a + "attention.value_length", Value::u32(static_cast<uint32_t>(s.head_dim)));
    w.set(a + "attention.layer_norm_rms_epsilon", Value::f32(s.rms_eps));
    w.set(a + "rope.dimension_count", Value::u32(static_cast<uint32_t>(s.head_dim)));
    w.set(a + "rope.freq_base", Value::f32(s.rope_theta));
    // No vocabulary: engines load the weights and take token ids directly.
    w.set("tokenizer.ggml.model", Value::string("no_vocab"));
  }

  ModelShape shape_;
  QuantMix mix_;
  uint64_t seed_;
  mutable ThreadPool pool_;  // fill() runs from the writer's const path
  std::vector<TensorPlan> plan_;
  std::map<std::pair<DType, float>, size_t> pool_index_;
  std::vector<BlockPool> pools_;
};

}  // namespace

std::vector<TensorPlan> plan_tensors(const ModelShape& s, const QuantMix& mix) {
  std::vector<TensorPlan> plan;
  const int64_t d = s.n_embd, f = s.n_ff, hd = s.head_dim;
  const int64_t q_cols = int64_t{s.n_heads} * hd, kv_cols = int64_t{s.n_kv_heads} * hd;
  auto inv_sqrt = [](int64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); };
  // A weight [rows, cols] (GGUF shape [cols, rows]) with std 1/sqrt(cols) unless given.
  auto weight = [&](std::string name, TensorRole role, int layer, int64_t cols, int64_t rows, float std) {
    plan.push_back({std::move(name), role, layer, weight_type(mix, s, role, layer, cols), {cols, rows}, 0.0f, std});
  };
  auto vec = [&](std::string name, TensorRole role, int layer, int64_t n, float mean, float std) {
    plan.push_back({std::move(name), role, layer, DType::F32, {n}, mean, std});
  };
  const float head_std = 2.0f * inv_sqrt(d);  // logits with std ~2
  weight("token_embd.weight", TensorRole::kTokenEmbd, -1, d, s.n_vocab, head_std);
  for (int l = 0; l < s.n_layers; ++l) {
    vec(blk(l, "attn_norm.weight"), TensorRole::kNorm, l, d, 1.0f, 0.02f);
    weight(blk(l, "attn_q.weight"), TensorRole::kAttnQ, l, d, q_cols, inv_sqrt(d));
    weight(blk(l, "attn_k.weight"), TensorRole::kAttnK, l, d, kv_cols, inv_sqrt(d));
    weight(blk(l, "attn_v.weight"), TensorRole::kAttnV, l, d, kv_cols, inv_sqrt(d));
    if (s.qkv_bias) {
      vec(blk(l, "attn_q.bias"), TensorRole::kBias, l, q_cols, 0.0f, 0.1f);
      vec(blk(l, "attn_k.bias"), TensorRole::kBias, l, kv_cols, 0.0f, 0.1f);
      vec(blk(l, "attn_v.bias"), TensorRole::kBias, l, kv_cols, 0.0f, 0.1f);
    }
    if (s.qk_norm) {
      vec(blk(l, "attn_q_norm.weight"), TensorRole::kNorm, l, hd, 1.0f, 0.02f);
      vec(blk(l, "attn_k_norm.weight"), TensorRole::kNorm, l, hd, 1.0f, 0.02f);
    }
    weight(blk(l, "attn_output.weight"), TensorRole::kAttnOutput, l, q_cols, d, inv_sqrt(q_cols));
    vec(blk(l, "ffn_norm.weight"), TensorRole::kNorm, l, d, 1.0f, 0.02f);
    weight(blk(l, "ffn_gate.weight"), TensorRole::kFfnGate, l, d, f, inv_sqrt(d));
    weight(blk(l, "ffn_up.weight"), TensorRole::kFfnUp, l, d, f, inv_sqrt(d));
    weight(blk(l, "ffn_down.weight"), TensorRole::kFfnDown, l, f, d, inv_sqrt(f));
  }
  vec("output_norm.weight", TensorRole::kNorm, -1, d, 1.0f, 0.02f);
  if (!s.tied_embeddings) weight("output.weight", TensorRole::kOutput, -1, d, s.n_vocab, head_std);
  return plan;
}

Status write_model(const ModelShape& shape, const QuantMix& mix, const SynthOptions& options,
                   const std::string& path) {
  TERN_RETURN_IF_ERROR(validate(shape));
  Synthesizer synth(shape, mix, options);
  gguf::Writer writer;
  synth.add_to(writer);
  return writer.write(path);
}

Result<std::vector<uint8_t>> model_bytes(const ModelShape& shape, const QuantMix& mix, const SynthOptions& options) {
  TERN_RETURN_IF_ERROR(validate(shape));
  Synthesizer synth(shape, mix, options);
  gguf::Writer writer;
  synth.add_to(writer);
  return writer.to_bytes();
}

}  // namespace tern::synth
