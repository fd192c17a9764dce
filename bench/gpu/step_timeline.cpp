#include "step_timeline.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <regex>
#include <utility>

#include <cuda_runtime.h>

#if defined(TERN_HAVE_CUPTI)
#include <cupti.h>
#include <cxxabi.h>
#endif

namespace tern::bench {
namespace {

#if defined(TERN_HAVE_CUPTI)
// "void tern::cuda::(anonymous namespace)::gemv_rows_kernel<(tern::DType)12, 2, true>(tern::cuda::MatmulArgs)"
// -> "gemv_rows_kernel<12, 2, true>".
std::string short_name(std::string n) {
  if (n.rfind("void ", 0) == 0) n.erase(0, 5);
  static const std::regex scopes(R"(\(anonymous namespace\)::|tern::cuda::|tern::)");
  static const std::regex casts(R"(\([A-Za-z_][A-Za-z_0-9 ]*\)(?=-?[0-9]))");  // "(DType)12" -> "12"
  n = std::regex_replace(std::regex_replace(n, scopes, ""), casts, "");
  // Drop the parameter list: the last top-level '(' (template arguments may hold parentheses).
  int depth = 0;
  for (size_t i = 0; i < n.size(); ++i) {
    if (n[i] == '<') ++depth;
    if (n[i] == '>') --depth;
    if (n[i] == '(' && depth == 0) return n.substr(0, i);
  }
  return n;
}

std::mutex g_mutex;
std::vector<KernelSpan> g_spans;  // filled by CUPTI's buffer callback, on its own thread

constexpr size_t kBufferBytes = size_t{8} << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_size) {
  CUpti_Activity* rec = nullptr;
  std::vector<KernelSpan> got;
  while (cuptiActivityGetNextRecord(buffer, valid_size, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
    KernelSpan s;
    int status = 0;
    char* demangled = abi::__cxa_demangle(k->name, nullptr, nullptr, &status);
    s.name = short_name(status == 0 && demangled != nullptr ? demangled : k->name);
    std::free(demangled);
    s.grid = {k->gridX, k->gridY, k->gridZ};
    s.start_ns = k->start;
    s.end_ns = k->end;
    got.push_back(std::move(s));
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_spans.insert(g_spans.end(), got.begin(), got.end());
}
#endif

}  // namespace

bool StepTimeline::start(std::string* why) {
#if defined(TERN_HAVE_CUPTI)
  const char* err = nullptr;
  CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  if (r == CUPTI_SUCCESS) r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (r != CUPTI_SUCCESS) {
    cuptiGetResultString(r, &err);
    *why = std::string("CUPTI: ") + (err != nullptr ? err : "unknown error");
    return false;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  g_spans.clear();
  running_ = true;
  return true;
#else
  *why = "built without CUPTI (the CUDA toolkit's CUDA::cupti target was not found)";
  return false;
#endif
}

StepTimeline::~StepTimeline() {
#if defined(TERN_HAVE_CUPTI)
  if (running_) {
    cuptiActivityFlushAll(1);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  }
#endif
}

std::vector<KernelSpan> StepTimeline::take() {
  std::vector<KernelSpan> out;
#if defined(TERN_HAVE_CUPTI)
  if (!running_) return out;
  cudaDeviceSynchronize();
  cuptiActivityFlushAll(1);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    out.swap(g_spans);
  }
  std::sort(out.begin(), out.end(), [](const KernelSpan& a, const KernelSpan& b) { return a.start_ns < b.start_ns; });
#endif
  return out;
}

bool print_timeline(const std::vector<KernelSpan>& spans, int steps, const std::string& label, int top) {
  const std::optional<StepSummary> sum = summarize_steps(spans, steps);
  if (!sum) {
    std::printf("timeline %s: no decode step recorded (%zu kernels)\n", label.c_str(), spans.size());
    return false;
  }
  std::printf("timeline %s: %d steps, %.0f kernels/step; step on the GPU %.1f us (first kernel start to last end), "
              "of it no kernel running %.1f us\n",
              label.c_str(), sum->steps, sum->kernels_per_step, sum->span_us, sum->idle_us);
  std::printf("timeline   %-44s %-14s %6s %10s %10s %10s %6s\n", "kernel", "grid", "n/step", "dur us",
              "marg us", "marg/step", "share");
  for (size_t k = 0; k < sum->rows.size() && static_cast<int>(k) < top; ++k) {
    const KernelRow& r = sum->rows[k];
    char grid[48];
    std::snprintf(grid, sizeof grid, "(%d,%d,%d)", r.grid[0], r.grid[1], r.grid[2]);
    std::printf("timeline   %-44.44s %-14s %6.1f %10.2f %10.2f %10.1f %5.1f%%\n", r.name.c_str(), grid,
                r.launches_per_step, r.mean_duration_us, r.mean_marginal_us, r.marginal_per_step_us, 100.0 * r.share);
  }
  return true;
}

void print_timeline_order(const std::vector<KernelSpan>& spans, const std::string& label, int n) {
  const size_t begin = last_step_begin(spans);
  if (begin == spans.size() || n <= 0) return;
  const std::vector<StepKernel> step = step_kernels(spans, begin, spans.size());
  std::printf("order    %s, the last step: kernel, grid, start / end us from the step's first start, marginal us\n",
              label.c_str());
  for (size_t k = 0; k < step.size(); ++k) {
    if (k >= static_cast<size_t>(n) && k + n < step.size()) {
      if (k == static_cast<size_t>(n)) std::printf("order      ... %zu kernels ...\n", step.size() - 2 * n);
      continue;
    }
    const KernelSpan& s = *step[k].span;
    std::printf("order    %4zu %-44.44s (%d,%d,%d) %9.2f %9.2f %8.2f\n", k, s.name.c_str(), s.grid[0], s.grid[1],
                s.grid[2], step[k].start_us, step[k].end_us, step[k].marginal_us);
  }
}

}  // namespace tern::bench
