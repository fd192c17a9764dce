// The arithmetic of gpu_bench --timeline (step_timeline.h), apart from the recording so that it
// is tested on the host (tests/gpu/step_summary_test.cpp): kernel spans in, per-kernel rows and
// step totals out.
//
// A decode step starts at its embedding lookup. A kernel's marginal time is its end minus the
// latest end before it in the step (0 when it ends under an earlier kernel), so the marginal
// times of a step add up to its span (first start to last end); idle time is where no kernel ran.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tern::bench {

struct KernelSpan {
  std::string name;  // demangled, template arguments kept, namespaces and parameters dropped
  std::array<int, 3> grid = {1, 1, 1};
  uint64_t start_ns = 0, end_ns = 0;
};

struct KernelRow {
  std::string name;
  std::array<int, 3> grid = {1, 1, 1};
  double launches_per_step = 0, mean_duration_us = 0, mean_marginal_us = 0, marginal_per_step_us = 0;
  double share = 0;  // of the steps' span
};

struct StepSummary {
  int steps = 0;
  double kernels_per_step = 0, span_us = 0, idle_us = 0;  // per step
  std::vector<KernelRow> rows;                           // by marginal time, largest first
};

inline bool starts_step(const KernelSpan& s) { return s.name.rfind("embed", 0) == 0; }

// One kernel of a step in launch order, in us from the step's first start.
struct StepKernel {
  const KernelSpan* span;
  double start_us, end_us, marginal_us, idle_before_us;  // idle: no kernel ran just before it
};

// The kernels spans[begin, end) of one step (sorted by start) with their marginal times.
inline std::vector<StepKernel> step_kernels(const std::vector<KernelSpan>& spans, size_t begin, size_t end) {
  std::vector<StepKernel> out;
  if (begin >= end) return out;
  const uint64_t first = spans[begin].start_ns;
  uint64_t latest_end = first;
  for (size_t i = begin; i < end; ++i) {
    const KernelSpan& s = spans[i];
    StepKernel k{&s, static_cast<double>(s.start_ns - first) * 1e-3, static_cast<double>(s.end_ns - first) * 1e-3, 0.0,
                 0.0};
    if (s.start_ns > latest_end) k.idle_before_us = static_cast<double>(s.start_ns - latest_end) * 1e-3;
    if (s.end_ns > latest_end) {
      k.marginal_us = static_cast<double>(s.end_ns - latest_end) * 1e-3;
      latest_end = s.end_ns;
    }
    out.push_back(k);
  }
  return out;
}

// Where the last step of `spans` starts (spans.size() when none does).
inline size_t last_step_begin(const std::vector<KernelSpan>& spans) {
  for (size_t i = spans.size(); i-- > 0;) {
    if (starts_step(spans[i])) return i;
  }
  return spans.size();
}

// The last `steps` steps of `spans` (sorted by start; the last step ends with the spans), or
// nothing when no step starts in them.
inline std::optional<StepSummary> summarize_steps(const std::vector<KernelSpan>& spans, int steps) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < spans.size(); ++i) {
    if (starts_step(spans[i])) starts.push_back(i);
  }
  if (starts.empty() || steps <= 0) return std::nullopt;
  starts.push_back(spans.size());
  StepSummary out;
  out.steps = std::min<int>(steps, static_cast<int>(starts.size()) - 1);
  struct Acc {
    double launches = 0, duration_us = 0, marginal_us = 0;
  };
  std::map<std::pair<std::string, std::array<int, 3>>, Acc> per_kernel;
  double span_us = 0, idle_us = 0, kernels = 0;
  for (size_t k = starts.size() - 1 - out.steps; k + 1 < starts.size(); ++k) {
    for (const StepKernel& sk : step_kernels(spans, starts[k], starts[k + 1])) {
      Acc& a = per_kernel[{sk.span->name, sk.span->grid}];
      a.launches += 1;
      a.duration_us += sk.end_us - sk.start_us;
      a.marginal_us += sk.marginal_us;
      span_us += sk.marginal_us;  // marginal times add up to the step's span
      idle_us += sk.idle_before_us;
      kernels += 1;
    }
  }
  const double n = out.steps;
  out.kernels_per_step = kernels / n;
  out.span_us = span_us / n;
  out.idle_us = idle_us / n;
  for (const auto& [key, a] : per_kernel) {
    KernelRow r;
    r.name = key.first;
    r.grid = key.second;
    r.launches_per_step = a.launches / n;
    r.mean_duration_us = a.duration_us / a.launches;
    r.mean_marginal_us = a.marginal_us / a.launches;
    r.marginal_per_step_us = a.marginal_us / n;
    r.share = span_us > 0 ? a.marginal_us / span_us : 0.0;
    out.rows.push_back(std::move(r));
  }
  std::stable_sort(out.rows.begin(), out.rows.end(),
                   [](const KernelRow& a, const KernelRow& b) { return a.marginal_per_step_us > b.marginal_per_step_us; });
  return out;
}

}  // namespace tern::bench
