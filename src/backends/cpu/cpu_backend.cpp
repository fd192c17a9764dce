#include "backends/cpu/cpu_backend.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "backends/cpu/elementwise.h"
#include "backends/cpu/matmul.h"
#include "backends/cpu/ops_ref.h"
#include "core/check.h"

namespace tern::cpu {
namespace {

class HostBuffer final : public Buffer {
 public:
  explicit HostBuffer(size_t bytes) : bytes_(bytes) {
    // 64-byte alignment: a cache line and an AVX-512 register.
    data_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (data_ == nullptr) throw std::bad_alloc();
    std::memset(data_, 0, bytes);
  }
  ~HostBuffer() override { std::free(data_); }
  void* data() const override { return data_; }
  size_t bytes() const override { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace

CpuBackend::CpuBackend(CpuBackendOptions options)
    : options_(options), isa_(active_isa()), pool_(options.n_threads) {
  TERN_CHECK_MSG(options.activation_bits == 8 || options.activation_bits == 16,
                 "CpuBackendOptions::activation_bits must be 8 or 16");
  const ActBits requested = options.activation_bits == 8 ? ActBits::k8 : ActBits::k16;
  options_.activation_bits = static_cast<int>(act_bits_from_env(requested));
}

std::unique_ptr<Buffer> CpuBackend::alloc(size_t bytes) { return std::make_unique<HostBuffer>(bytes); }

Tensor CpuBackend::upload_weight(const Tensor& host, std::unique_ptr<Buffer>& owner) {
  owner.reset();
  return host;  // used in place from the memory map
}

void CpuBackend::copy_from_host(const void* src, Tensor& dst) { std::memcpy(dst.data, src, dst.bytes()); }
void CpuBackend::copy_to_host(const Tensor& src, void* dst) { std::memcpy(dst, src.data, src.bytes()); }

void CpuBackend::begin_step(const BatchPlan& plan) {
  plan_ = plan;
  rope_table_.invalidate();
}

void CpuBackend::embed(const Tensor& table, Tensor& out) { ref::embed(table, plan_, out); }

void CpuBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  if (options_.reference) return ref::rms_norm(x, w, eps, out);
  rms_norm_fast(isa_, x, w, eps, out);
}

void CpuBackend::matmul(const Tensor& w, const Tensor& x, Tensor& out) {
  if (options_.reference) {
    matmul_ref(w, x.f32(), x.rows, out.f32());
  } else {
    cpu::matmul(w, x.f32(), x.rows, out.f32(), pool_, static_cast<ActBits>(options_.activation_bits));
  }
}

void CpuBackend::matmul_group(const Tensor* const* ws, Tensor* const* outs, int n, const Tensor& x) {
  if (options_.reference) return Backend::matmul_group(ws, outs, n, x);
  float* ys[8];
  TERN_CHECK(n >= 1 && n <= 8);
  for (int i = 0; i < n; ++i) ys[i] = outs[i]->f32();
  cpu::matmul_group(std::span<const Tensor* const>(ws, static_cast<size_t>(n)), x.f32(), x.rows,
                    std::span<float* const>(ys, static_cast<size_t>(n)), pool_, static_cast<ActBits>(options_.activation_bits));
}

void CpuBackend::add_bias(Tensor& x, const Tensor& bias) { ref::add_bias(x, bias); }

void CpuBackend::add(const Tensor& a, const Tensor& b, Tensor& out) {
  if (options_.reference) return ref::add(a, b, out);
  add_fast(isa_, a, b, out);
}

void CpuBackend::swiglu(const Tensor& gate, const Tensor& up, Tensor& out) {
  if (options_.reference) return ref::swiglu(gate, up, out);
  swiglu_fast(isa_, gate, up, out);
}

void CpuBackend::rope(Tensor& x, int n_heads, int head_dim, const RopeParams& rope) {
  if (options_.reference) return ref::rope(x, n_heads, head_dim, rope, plan_);
  rope_table_.prepare(rope, plan_.positions);
  rope_with_table(x, n_heads, head_dim, rope, rope_table_);
}

void CpuBackend::kv_write(const Tensor& k, const Tensor& v, KvLayerView& kv) { ref::kv_write(k, v, kv, plan_); }

void CpuBackend::attention(const Tensor& q, const KvLayerView& kv, const AttentionParams& p, Tensor& out) {
  if (options_.reference) {
    ref::attention(q, kv, p, plan_, out);
  } else {
    attention_fast(q, kv, p, plan_, out, pool_, attention_scratch_);
  }
}

void CpuBackend::gather_logit_rows(const Tensor& x, Tensor& out) { ref::gather_logit_rows(x, plan_, out); }

}  // namespace tern::cpu
