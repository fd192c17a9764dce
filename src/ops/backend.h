// The Backend seam: memory, copies and the ops the model architectures use. Model code calls
// these through ops.h (which validates shapes) and never touches a device directly.
// A backend runs ops in issue order on its own stream; nothing here forces a host round trip
// except the explicit copy_to_host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/argmax.h"
#include "core/top_candidates.h"
#include "core/tensor.h"
#include "ops/batch_plan.h"

namespace tern {

// What Backend::alloc throws when the memory it allocates from cannot hold the request: a
// std::bad_alloc whose what() names the memory, the size asked for and, where the backend can
// tell, what was free. Loading a model and creating a KV pool turn it into an error Status that
// also names what the memory was for.
class OutOfMemory : public std::bad_alloc {
 public:
  explicit OutOfMemory(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// The memory a backend allocates from, where it can tell (a device's; the host's is not tracked).
struct MemoryInfo {
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
};

// An owned allocation on a backend's device.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() const = 0;
  virtual size_t bytes() const = 0;
};

// Rotary embedding, precomputed at load: angle(pos, i) = pos * inv_freq[i]; the rotated pair is
// scaled by mscale (YaRN attention factor; 1 otherwise). neox pairs (i, i + n_rot/2), otherwise
// adjacent pairs (2i, 2i + 1) as in GGUF llama weights.
struct RopeParams {
  int n_rot = 0;               // rotated dimensions per head (<= head_dim)
  bool neox = false;
  float mscale = 1.0f;
  Tensor inv_freq;             // F32 [1, n_rot / 2], on the backend's device
};

struct AttentionParams {
  int n_heads = 0;      // query heads
  int n_kv_heads = 0;   // key/value heads (GQA: n_heads % n_kv_heads == 0)
  int head_dim = 0;
  float scale = 0.0f;   // usually 1/sqrt(head_dim)
  int sliding_window = 0;  // 0 = full causal attention
  float logit_softcap = 0.0f;  // 0 = off
};

// One layer's paged KV: K and V are [n_blocks * block_tokens, n_kv_heads * head_dim] (F16 or F32).
struct KvLayerView {
  Tensor k;
  Tensor v;
  int block_tokens = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual Device device() const = 0;

  // Memory. alloc throws OutOfMemory when the request does not fit.
  virtual std::unique_ptr<Buffer> alloc(size_t bytes) = 0;
  // Free and total bytes of the memory alloc draws from (a device's; the host's available
  // memory for a CPU backend), or nothing where the backend cannot tell.
  virtual std::optional<MemoryInfo> memory_info() const { return std::nullopt; }
  // Bits of the activations that meet quantized weights (8 or 16, as resolved from the backend's
  // options and environment), 0 where quantized products compute in float (the reference).
  virtual int activation_bits() const { return 0; }
  // True when upload_weight copies every weight into that memory (a device), so a model must
  // fit it whole; false when weights stay in the file's mapping (the CPU backend).
  virtual bool holds_weights() const { return false; }
  // Makes a host weight usable by this backend. The CPU backend may return the view itself
  // (weights stay in the mmap); a GPU backend uploads into `owner` storage it keeps alive.
  virtual Tensor upload_weight(const Tensor& host, std::unique_ptr<Buffer>& owner) = 0;
  virtual void copy_from_host(const void* src, Tensor& dst) = 0;
  virtual void copy_to_host(const Tensor& src, void* dst) = 0;  // waits for prior work

  // Many small copies as one transfer (the KV tiers move a block as 2 * n_layers row ranges, and
  // a restore moves runs of blocks). A device backend stages them together and waits once
  // instead of once per copy. The defaults loop over the single-copy forms.
  struct HostToDevice {
    const void* src;  // dst.bytes() contiguous bytes
    Tensor dst;
  };
  struct DeviceToHost {
    Tensor src;
    void* dst;  // receives src.bytes() contiguous bytes
  };
  virtual void copy_from_host_n(std::span<const HostToDevice> copies) {
    for (const HostToDevice& c : copies) {
      Tensor dst = c.dst;
      copy_from_host(c.src, dst);
    }
  }
  virtual void copy_to_host_n(std::span<const DeviceToHost> copies) {
    for (const DeviceToHost& c : copies) copy_to_host(c.src, c.dst);
  }
  // dst = src, both this backend's memory, same dtype and shape (the KV pool's copy-on-write of
  // a shared block). Ordered after prior work. The default stages through host memory.
  virtual void copy_on_device(const Tensor& src, Tensor& dst) {
    std::vector<uint8_t> staging(row_bytes(src.dtype, src.cols) * static_cast<size_t>(src.rows));
    copy_to_host(src, staging.data());
    copy_from_host(staging.data(), dst);
  }

  // Step: uploads the plan once; the plan-dependent ops below use it.
  virtual void begin_step(const BatchPlan& plan) = 0;
  // Drops the current step's work that has not run yet: a step abandoned half-way (an op threw
  // OutOfMemory) must not run later. A backend that runs ops as they come has nothing to drop.
  virtual void cancel_step() {}

  // Ops. Shapes are validated in ops.h before they reach a backend.
  // out[t, :] = table[plan.token_ids[t], :] converted to F32.
  virtual void embed(const Tensor& table, Tensor& out) = 0;
  // out[r, :] = x[r, :] / rms(x[r, :]) * w  (w: [1, cols]); out may alias x.
  virtual void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) = 0;
  // out[n, w.rows] = x[n, w.cols] @ w^T, any weight dtype, F32 activations.
  virtual void matmul(const Tensor& w, const Tensor& x, Tensor& out) = 0;
  // outs[i] = x @ ws[i]^T for i < n: projections of one input (Q/K/V, gate/up). A backend may run
  // them as one operation (the CPU quantizes x once, in one parallel region); each outs[i] must be
  // bitwise what matmul writes. The default runs one matmul each.
  virtual void matmul_group(const Tensor* const* ws, Tensor* const* outs, int n, const Tensor& x) {
    for (int i = 0; i < n; ++i) matmul(*ws[i], x, *outs[i]);
  }
  // x[r, :] += bias[0, :]
  virtual void add_bias(Tensor& x, const Tensor& bias) = 0;
  // out = a + b (elementwise, same shape); out may alias a or b.
  virtual void add(const Tensor& a, const Tensor& b, Tensor& out) = 0;
  // out = silu(gate) * up; out may alias gate.
  virtual void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) = 0;
  // Rotates x [n_tokens, n_heads * head_dim] in place at plan.positions.
  virtual void rope(Tensor& x, int n_heads, int head_dim, const RopeParams& rope) = 0;
  // Writes k, v [n_tokens, n_kv_heads * head_dim] (F32) to the cache at plan.kv_slots.
  virtual void kv_write(const Tensor& k, const Tensor& v, KvLayerView& kv) = 0;
  // Causal attention of q [n_tokens, n_heads * head_dim] over each token's sequence KV,
  // positions 0..plan.positions[t]; out has q's shape.
  virtual void attention(const Tensor& q, const KvLayerView& kv, const AttentionParams& p, Tensor& out) = 0;
  // out[i, :] = x[plan.logit_rows[i], :]
  virtual void gather_logit_rows(const Tensor& x, Tensor& out) = 0;

  // host_ids[r] = first_argmax(x[r, :]) (core/argmax.h: the host sampler's greedy pick, bit for
  // bit). Waits for prior work, like copy_to_host. Greedy decoding needs only these ids, so a
  // device backend reduces the rows where they are and moves one int per row instead of the whole
  // vocabulary. The default copies the rows to the host and scans them there.
  virtual void argmax_rows(const Tensor& x, int32_t* host_ids) {
    std::vector<float> rows(static_cast<size_t>(x.rows * x.cols));
    copy_to_host(x, rows.data());
    for (int64_t r = 0; r < x.rows; ++r) {
      host_ids[r] = first_argmax(rows.data() + r * x.cols, static_cast<size_t>(x.cols));
    }
  }
  // Each row's best out.count candidates, its NaN flags and (where out.temperatures[r] > 0) its
  // softmax normalizer (core/top_candidates.h: top_candidates_row is the reference, which the
  // ids, logits and flags must equal bit for bit). Waits for prior work. Sampling from candidates
  // moves a few KiB per row instead of the vocabulary and spares the host a sort of it. The
  // default copies the rows to the host and runs the reference there.
  virtual void top_candidates(const Tensor& x, const CandidateRows& out) {
    std::vector<float> rows(static_cast<size_t>(x.rows * x.cols));
    copy_to_host(x, rows.data());
    for (int64_t r = 0; r < x.rows; ++r) top_candidates_row(rows.data() + r * x.cols, x.cols, out, static_cast<int>(r));
  }
};

}  // namespace tern
