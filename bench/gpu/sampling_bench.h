// gpu_bench --sampling: sampling a logit row on the device, at the Llama 3 vocabulary (128256)
// by default, for R rows per call (the rows of one step), each call timed with its sync:
//   argmax      Backend::argmax_rows (greedy)
//   candidates  Backend::top_candidates, C per row, without and with the softmax normalizer
//   full rows   copy_to_host of the rows (what sampling from the logits moves)
// and on the host, per row: the sampler on the whole row vs on its candidates (top-k 40,
// top-p 0.9, plain temperature). Median of --sampling-iters calls.
#pragma once

#include <vector>

namespace tern::bench {

struct SamplingBenchOptions {
  int vocab = 128256;
  std::vector<int> rows = {1, 8, 32};
  std::vector<int> counts = {64, 256, 1024};
  int iters = 30;
};

// Returns the process exit code.
int run_sampling_bench(const SamplingBenchOptions& o);

}  // namespace tern::bench
