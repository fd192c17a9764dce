// OpProfiler: a Backend decorator that times every op it forwards, for `tern bench --profile`.
// The CPU backend runs each op to completion before returning, so the wall time of a call is
// the op's cost. Matmuls are keyed by weight type and shape, so the report shows which
// projections dominate and how close each runs to memory bandwidth.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ops/backend.h"

namespace tern::cli {

class OpProfiler final : public Backend {
 public:
  struct Entry {
    std::string name;         // "matmul q4_k [14336 x 4096]", "attention", ...
    int64_t calls = 0;
    double seconds = 0.0;
    uint64_t weight_bytes = 0;  // weight bytes read by these calls (matmuls)
    double flops = 0;           // 2 * rows * cols * tokens (matmuls)
  };

  explicit OpProfiler(Backend& inner) : inner_(&inner) {}
  void reset() { entries_.clear(); }
  // Slowest first.
  std::vector<Entry> entries() const;

  std::string_view name() const override { return inner_->name(); }
  Device device() const override { return inner_->device(); }
  std::unique_ptr<Buffer> alloc(size_t bytes) override { return inner_->alloc(bytes); }
  std::optional<MemoryInfo> memory_info() const override { return inner_->memory_info(); }
  bool holds_weights() const override { return inner_->holds_weights(); }
  Tensor upload_weight(const Tensor& host, std::unique_ptr<Buffer>& owner) override {
    return inner_->upload_weight(host, owner);
  }
  void copy_from_host(const void* src, Tensor& dst) override;
  void copy_to_host(const Tensor& src, void* dst) override;
  void begin_step(const BatchPlan& plan) override;
  void cancel_step() override { inner_->cancel_step(); }

  void embed(const Tensor& table, Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override;
  void matmul(const Tensor& w, const Tensor& x, Tensor& out) override;
  void add_bias(Tensor& x, const Tensor& bias) override;
  void add(const Tensor& a, const Tensor& b, Tensor& out) override;
  void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) override;
  void rope(Tensor& x, int n_heads, int head_dim, const RopeParams& rope) override;
  void kv_write(const Tensor& k, const Tensor& v, KvLayerView& kv) override;
  void attention(const Tensor& q, const KvLayerView& kv, const AttentionParams& p, Tensor& out) override;
  void gather_logit_rows(const Tensor& x, Tensor& out) override;

 private:
  template <typename Fn>
  void timed(const std::string& key, uint64_t weight_bytes, double flops, Fn&& fn);

  Backend* inner_;
  std::map<std::string, Entry> entries_;
};

}  // namespace tern::cli
