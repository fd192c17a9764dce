// The CPU backend: host memory, a thread pool, fast kernels for the hot ops (matmul, attention)
// and the plain reference kernels for the rest. With `reference = true` every op runs its
// reference kernel: that backend is the oracle the fast one is tested against end to end.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "backends/cpu/attention_cpu.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/elementwise.h"
#include "core/thread_pool.h"
#include "ops/backend.h"

namespace tern::cpu {

struct CpuBackendOptions {
  int n_threads = 1;       // threads including the caller
  bool reference = false;  // run the reference kernels only (tests)
  // 8 or 16: precision of the activations that meet quantized weights in the fast matmul (matmul.h,
  // ActBits). The environment variable TERN_CPU_ACT_BITS=8|16 overrides it (benchmarks).
  int activation_bits = 16;
  // Keep a decode pack of each weight that has one (matmul.h: q4_k at AVX-512; costs that
  // weight's size again in RAM, saves rearranging it on every decode step). TERN_CPU_DECODE_PACK=0
  // turns it off (A/B benchmarks).
  bool decode_packs = true;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(CpuBackendOptions options);

  std::string_view name() const override { return options_.reference ? "cpu-reference" : "cpu"; }
  int activation_bits() const override { return options_.reference ? 0 : options_.activation_bits; }
  Device device() const override { return Device::kCpu; }
  int n_threads() const { return pool_.n_threads(); }

  // Decode packs by weight data pointer (see CpuBackendOptions::decode_packs).
  struct PackRegistry {
    std::mutex mutex;
    std::unordered_map<const void*, const uint8_t*> packs;
  };

  std::unique_ptr<Buffer> alloc(size_t bytes) override;
  Tensor upload_weight(const Tensor& host, std::unique_ptr<Buffer>& owner) override;
  // The host's available memory (MemAvailable and MemTotal of /proc/meminfo), where readable.
  std::optional<MemoryInfo> memory_info() const override;
  void copy_from_host(const void* src, Tensor& dst) override;
  void copy_to_host(const Tensor& src, void* dst) override;

  void begin_step(const BatchPlan& plan) override;

  void embed(const Tensor& table, Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override;
  void matmul(const Tensor& w, const Tensor& x, Tensor& out) override;
  void matmul_group(const Tensor* const* ws, Tensor* const* outs, int n, const Tensor& x) override;
  void add_bias(Tensor& x, const Tensor& bias) override;
  void add(const Tensor& a, const Tensor& b, Tensor& out) override;
  void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) override;
  void rope(Tensor& x, int n_heads, int head_dim, const RopeParams& rope) override;
  void kv_write(const Tensor& k, const Tensor& v, KvLayerView& kv) override;
  void attention(const Tensor& q, const KvLayerView& kv, const AttentionParams& p, Tensor& out) override;
  void gather_logit_rows(const Tensor& x, Tensor& out) override;
  void argmax_rows(const Tensor& x, int32_t* host_ids) override;  // in place: the rows are host memory
  void top_candidates(const Tensor& x, const CandidateRows& out) override;  // in place, a row per task

 private:
  CpuBackendOptions options_;
  Isa isa_;  // kernel level of the fast row-wise ops (active_isa())
  ThreadPool pool_;
  BatchPlan plan_;  // the current step's plan (a host copy; the CPU needs no upload)
  AttentionScratch attention_scratch_;
  RopeTableCache rope_table_;  // this step's cos/sin, built by its first rope op
  // Shared with the pack buffers, which unregister themselves when the model that owns them
  // goes away.
  std::shared_ptr<PackRegistry> packs_ = std::make_shared<PackRegistry>();
  const uint8_t* pack_of(const Tensor& w);
};

}  // namespace tern::cpu
