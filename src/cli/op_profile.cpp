#include "cli/op_profile.h"

#include <algorithm>
#include <chrono>

namespace tern::cli {

template <typename Fn>
void OpProfiler::timed(const std::string& key, uint64_t weight_bytes, double flops, Fn&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Entry& e = entries_[key];
  if (e.name.empty()) e.name = key;
  e.calls += 1;
  e.seconds += seconds;
  e.weight_bytes += weight_bytes;
  e.flops += flops;
}

std::vector<OpProfiler::Entry> OpProfiler::entries() const {
  std::vector<Entry> out;
  for (const auto& kv : entries_) out.push_back(kv.second);
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.seconds > b.seconds; });
  return out;
}

void OpProfiler::copy_from_host(const void* src, Tensor& dst) {
  timed("copy_from_host", 0, 0, [&] { inner_->copy_from_host(src, dst); });
}
void OpProfiler::copy_to_host(const Tensor& src, void* dst) {
  timed("copy_to_host", 0, 0, [&] { inner_->copy_to_host(src, dst); });
}
void OpProfiler::begin_step(const BatchPlan& plan) {
  timed("begin_step", 0, 0, [&] { inner_->begin_step(plan); });
}
void OpProfiler::embed(const Tensor& table, Tensor& out) {
  timed("embed", 0, 0, [&] { inner_->embed(table, out); });
}
void OpProfiler::rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  timed("rms_norm", 0, 0, [&] { inner_->rms_norm(x, w, eps, out); });
}
void OpProfiler::matmul(const Tensor& w, const Tensor& x, Tensor& out) {
  // Weight shape as [out features x in features].
  const std::string key = "matmul " + std::string(dtype_name(w.dtype)) + " [" + std::to_string(w.rows) + " x " +
                          std::to_string(w.cols) + "]";
  const double flops = 2.0 * static_cast<double>(w.rows) * static_cast<double>(w.cols) * static_cast<double>(x.rows);
  timed(key, w.bytes(), flops, [&] { inner_->matmul(w, x, out); });
}
void OpProfiler::add_bias(Tensor& x, const Tensor& bias) {
  timed("add_bias", 0, 0, [&] { inner_->add_bias(x, bias); });
}
void OpProfiler::add(const Tensor& a, const Tensor& b, Tensor& out) {
  timed("add", 0, 0, [&] { inner_->add(a, b, out); });
}
void OpProfiler::swiglu(const Tensor& gate, const Tensor& up, Tensor& out) {
  timed("swiglu", 0, 0, [&] { inner_->swiglu(gate, up, out); });
}
void OpProfiler::rope(Tensor& x, int n_heads, int head_dim, const RopeParams& rope) {
  timed("rope", 0, 0, [&] { inner_->rope(x, n_heads, head_dim, rope); });
}
void OpProfiler::kv_write(const Tensor& k, const Tensor& v, KvLayerView& kv) {
  timed("kv_write", 0, 0, [&] { inner_->kv_write(k, v, kv); });
}
void OpProfiler::attention(const Tensor& q, const KvLayerView& kv, const AttentionParams& p, Tensor& out) {
  timed("attention", 0, 0, [&] { inner_->attention(q, kv, p, out); });
}
void OpProfiler::gather_logit_rows(const Tensor& x, Tensor& out) {
  timed("gather_logit_rows", 0, 0, [&] { inner_->gather_logit_rows(x, out); });
}

}  // namespace tern::cli
