// The kernels of decode steps as they really run: inside the CUDA graph, with programmatic
// dependent launch letting a kernel start before its predecessor ends.
//
// ncu serializes kernels and flushes caches between them, so its per-kernel times (~2.8 ms for
// an 8B Q4_K_M step at 1k) add up to more than the step takes (~2.3 ms), and a kernel made faster
// alone can leave the step as slow as before. This records each kernel's start and end through
// CUPTI's activity API (the hardware timestamps a tracer reads, kernel nodes of graphs included)
// and charges every kernel its marginal time: how far it moves the end of the step, i.e. its end
// minus the latest end before it (0 when it ends under an earlier kernel). Marginal times add up
// to the step exactly, so they say where a step's time goes, and what a launch costs on top of
// the one before it.
//
// Built only where the CUDA toolkit ships CUPTI (TERN_HAVE_CUPTI); elsewhere start() says so.
#pragma once

#include <string>
#include <vector>

#include "step_summary.h"

namespace tern::bench {

// Process-wide (CUPTI's activity buffers are). Started before the first graph is captured, so
// that every executable's kernel nodes are traced; recording costs each kernel a little, so the
// steps recorded say where time goes, while the untraced runs' tok/s stay the figures.
class StepTimeline {
 public:
  ~StepTimeline();
  // Starts recording kernel activity; false (with the reason in *why) if CUPTI is missing or
  // refuses (another profiler attached, no permission).
  bool start(std::string* why);
  // Waits for the device and returns the kernels recorded since start() or the last take(), by
  // start time.
  std::vector<KernelSpan> take();

 private:
  bool running_ = false;
};

// summarize_steps (step_summary.h) printed: per kernel (name and grid) launches per step, mean
// duration (end - start, the predecessor's wait included under PDL), mean marginal time, its
// share of the step; the step's mean span and the time no kernel ran. False when no step is in
// `spans`.
bool print_timeline(const std::vector<KernelSpan>& spans, int steps, const std::string& label, int top);

// The last step's first and last `n` kernels in launch order: start and end against the step's
// first start, and the marginal time, to see which kernel waits on which.
void print_timeline_order(const std::vector<KernelSpan>& spans, const std::string& label, int n);

}  // namespace tern::bench
