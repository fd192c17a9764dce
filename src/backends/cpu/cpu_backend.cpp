#include "backends/cpu/cpu_backend.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "backends/cpu/elementwise.h"
#include "backends/cpu/matmul.h"
#include "backends/cpu/ops_ref.h"
#include "core/argmax.h"
#include "core/bytes.h"
#include "core/check.h"

namespace tern::cpu {
namespace {

class HostBuffer final : public Buffer {
 public:
  explicit HostBuffer(size_t bytes) : bytes_(bytes) {
    // 64-byte alignment: a cache line and an AVX-512 register.
    data_ = bytes <= kMaxBytes ? std::aligned_alloc(64, (bytes + 63) / 64 * 64) : nullptr;
    if (data_ == nullptr) throw OutOfMemory("out of host memory: cannot allocate " + human_bytes(bytes));
    std::memset(data_, 0, bytes);
  }
  ~HostBuffer() override { std::free(data_); }
  void* data() const override { return data_; }
  size_t bytes() const override { return bytes_; }

 private:
  static constexpr size_t kMaxBytes = SIZE_MAX / 2;  // (the rounding up must not wrap)
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// A weight's decode pack; unregisters itself from the backend when the model releases it.
class PackBuffer final : public Buffer {
 public:
  PackBuffer(size_t bytes, std::shared_ptr<CpuBackend::PackRegistry> registry, const void* key)
      : host_(bytes), registry_(std::move(registry)), key_(key) {}
  ~PackBuffer() override {
    std::lock_guard<std::mutex> lock(registry_->mutex);
    auto it = registry_->packs.find(key_);
    if (it != registry_->packs.end() && it->second == data()) registry_->packs.erase(it);
  }
  void* data() const override { return host_.data(); }
  size_t bytes() const override { return host_.bytes(); }

 private:
  HostBuffer host_;
  std::shared_ptr<CpuBackend::PackRegistry> registry_;
  const void* key_;
};

bool decode_packs_from_env(bool requested) {
  const char* env = std::getenv("TERN_CPU_DECODE_PACK");
  if (env == nullptr || *env == '\0') return requested;
  return std::strcmp(env, "0") != 0;
}

}  // namespace

CpuBackend::CpuBackend(CpuBackendOptions options)
    : options_(options), isa_(active_isa()), pool_(options.n_threads) {
  TERN_CHECK_MSG(options.activation_bits == 8 || options.activation_bits == 16,
                 "CpuBackendOptions::activation_bits must be 8 or 16");
  const ActBits requested = options.activation_bits == 8 ? ActBits::k8 : ActBits::k16;
  options_.activation_bits = static_cast<int>(act_bits_from_env(requested));
  options_.decode_packs = decode_packs_from_env(options.decode_packs) && !options.reference;
}

std::unique_ptr<Buffer> CpuBackend::alloc(size_t bytes) { return std::make_unique<HostBuffer>(bytes); }

std::optional<MemoryInfo> CpuBackend::memory_info() const {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return std::nullopt;
  uint64_t available_kb = 0, total_kb = 0;
  bool have_available = false, have_total = false;
  char line[256];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    unsigned long long kb = 0;
    if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) available_kb = kb, have_available = true;
    if (std::sscanf(line, "MemTotal: %llu kB", &kb) == 1) total_kb = kb, have_total = true;
  }
  std::fclose(f);
  if (!have_available || !have_total) return std::nullopt;
  return MemoryInfo{available_kb * 1024, total_kb * 1024};
}

Tensor CpuBackend::upload_weight(const Tensor& host, std::unique_ptr<Buffer>& owner) {
  owner.reset();
  // The weight stays in the memory map (embed reads rows of it); matmuls of few rows read its
  // decode pack instead, where it has one.
  const size_t pack_bytes = options_.decode_packs ? decode_pack_bytes(isa_, host) : 0;
  if (pack_bytes > 0) {
    auto pack = std::make_unique<PackBuffer>(pack_bytes, packs_, host.data);
    make_decode_pack(isa_, host, static_cast<uint8_t*>(pack->data()));
    {
      std::lock_guard<std::mutex> lock(packs_->mutex);
      packs_->packs[host.data] = static_cast<const uint8_t*>(pack->data());
    }
    owner = std::move(pack);
  }
  return host;
}

const uint8_t* CpuBackend::pack_of(const Tensor& w) {
  std::lock_guard<std::mutex> lock(packs_->mutex);
  if (packs_->packs.empty()) return nullptr;
  auto it = packs_->packs.find(w.data);
  return it == packs_->packs.end() ? nullptr : it->second;
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
    cpu::matmul(w, x.f32(), x.rows, out.f32(), pool_, static_cast<ActBits>(options_.activation_bits), pack_of(w));
  }
}

void CpuBackend::matmul_group(const Tensor* const* ws, Tensor* const* outs, int n, const Tensor& x) {
  if (options_.reference) return Backend::matmul_group(ws, outs, n, x);
  float* ys[8];
  const uint8_t* packs[8];
  TERN_CHECK(n >= 1 && n <= 8);
  for (int i = 0; i < n; ++i) {
    ys[i] = outs[i]->f32();
    packs[i] = pack_of(*ws[i]);
  }
  const size_t count = static_cast<size_t>(n);
  cpu::matmul_group(std::span<const Tensor* const>(ws, count), x.f32(), x.rows, std::span<float* const>(ys, count), pool_,
                    static_cast<ActBits>(options_.activation_bits), std::span<const uint8_t* const>(packs, count));
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

void CpuBackend::argmax_rows(const Tensor& x, int32_t* host_ids) {
  for (int64_t r = 0; r < x.rows; ++r) host_ids[r] = first_argmax(x.row<float>(r), static_cast<size_t>(x.cols));
}

void CpuBackend::top_candidates(const Tensor& x, const CandidateRows& out) {
  // Rows are independent and write disjoint entries of out.
  pool_.parallel_for(x.rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) top_candidates_row(x.row<float>(r), x.cols, out, static_cast<int>(r));
  });
}

}  // namespace tern::cpu
