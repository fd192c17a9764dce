// A CPU backend with a device's memory rules, for the out-of-memory paths without a device: every
// allocation and weight upload draws from a budget of `capacity` bytes (given back when its buffer
// goes) and throws OutOfMemory past it, weights are uploaded as copies the backend owns (as a GPU
// backend does), and memory_info reports `reported_free` (a device shared with other processes
// can have less free than it reported). The ops run on the CPU backend, so a model that fits runs.
#pragma once

#include <cstring>
#include <memory>
#include <optional>

#include "backends/cpu/cpu_backend.h"
#include "core/bytes.h"
#include "ops/backend.h"

namespace tern::testing {

class BudgetBackend final : public Backend {
 public:
  BudgetBackend(uint64_t capacity, uint64_t reported_free)
      : inner_(cpu::CpuBackendOptions{1, false}),
        capacity_(capacity),
        reported_free_(reported_free),
        used_(std::make_shared<uint64_t>(0)) {}
  uint64_t used() const { return *used_; }
  int steps_cancelled() const { return steps_cancelled_; }

  std::string_view name() const override { return "budget"; }
  Device device() const override { return inner_.device(); }
  std::optional<MemoryInfo> memory_info() const override { return MemoryInfo{reported_free_, capacity_}; }
  bool holds_weights() const override { return true; }
  std::unique_ptr<Buffer> alloc(size_t bytes) override {
    if (bytes > capacity_ - *used_) {
      throw OutOfMemory("out of budget memory: cannot allocate " + human_bytes(bytes) + " (" +
                        human_bytes(capacity_ - *used_) + " free of " + human_bytes(capacity_) + ")");
    }
    *used_ += bytes;
    return std::make_unique<Counted>(inner_.alloc(bytes), used_);
  }
  Tensor upload_weight(const Tensor& host, std::unique_ptr<Buffer>& owner) override {
    owner = alloc(host.bytes());
    std::memcpy(owner->data(), host.data, host.bytes());
    Tensor t = host;
    t.data = owner->data();
    return t;
  }
  void copy_from_host(const void* src, Tensor& dst) override { inner_.copy_from_host(src, dst); }
  void copy_to_host(const Tensor& src, void* dst) override { inner_.copy_to_host(src, dst); }
  void begin_step(const BatchPlan& plan) override { inner_.begin_step(plan); }
  void cancel_step() override { ++steps_cancelled_; }
  void embed(const Tensor& table, Tensor& out) override { inner_.embed(table, out); }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override { inner_.rms_norm(x, w, eps, out); }
  void matmul(const Tensor& w, const Tensor& x, Tensor& out) override { inner_.matmul(w, x, out); }
  void add_bias(Tensor& x, const Tensor& bias) override { inner_.add_bias(x, bias); }
  void add(const Tensor& a, const Tensor& b, Tensor& out) override { inner_.add(a, b, out); }
  void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) override { inner_.swiglu(gate, up, out); }
  void rope(Tensor& x, int n_heads, int head_dim, const RopeParams& rope) override {
    inner_.rope(x, n_heads, head_dim, rope);
  }
  void kv_write(const Tensor& k, const Tensor& v, KvLayerView& kv) override { inner_.kv_write(k, v, kv); }
  void attention(const Tensor& q, const KvLayerView& kv, const AttentionParams& p, Tensor& out) override {
    inner_.attention(q, kv, p, out);
  }
  void gather_logit_rows(const Tensor& x, Tensor& out) override { inner_.gather_logit_rows(x, out); }

 private:
  // A buffer of the budget: its bytes go back when it is freed.
  class Counted final : public Buffer {
   public:
    Counted(std::unique_ptr<Buffer> inner, std::shared_ptr<uint64_t> used) : inner_(std::move(inner)), used_(std::move(used)) {}
    ~Counted() override { *used_ -= inner_->bytes(); }
    void* data() const override { return inner_->data(); }
    size_t bytes() const override { return inner_->bytes(); }

   private:
    std::unique_ptr<Buffer> inner_;
    std::shared_ptr<uint64_t> used_;
  };

  cpu::CpuBackend inner_;
  uint64_t capacity_ = 0, reported_free_ = 0;
  std::shared_ptr<uint64_t> used_;
  int steps_cancelled_ = 0;
};

}  // namespace tern::testing
