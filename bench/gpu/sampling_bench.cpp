#include "sampling_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "core/top_candidates.h"
#include "sampling/sampler.h"

namespace tern::bench {
namespace {

double median_us(int iters, const std::function<void()>& fn) {
  fn();  // warm-up (buffers, graphs)
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// A language model's row: broad noise and a few strong candidates.
std::vector<float> logit_rows(int rows, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 2.5f);
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  std::vector<float> x(static_cast<size_t>(rows) * vocab);
  for (float& v : x) v = g(rng);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < 5; ++i) x[static_cast<size_t>(r) * vocab + pick(rng)] += 12.0f - 2.0f * i;
  return x;
}

}  // namespace

int run_sampling_bench(const SamplingBenchOptions& o) {
  auto created = cuda::create_backend(cuda::CudaBackendOptions{});
  if (!created.is_ok()) {
    std::fprintf(stderr, "%s\n", created.status().message().c_str());
    return 1;
  }
  Backend& b = *created.value();
  const int max_rows = *std::max_element(o.rows.begin(), o.rows.end());
  const std::vector<float> host = logit_rows(max_rows, o.vocab, 5);
  auto buf = b.alloc(host.size() * sizeof(float));
  Tensor all = Tensor::view(buf->data(), DType::F32, max_rows, o.vocab, Device::kCuda);
  b.copy_from_host(host.data(), all);

  std::printf("sampling on the device, vocabulary %d, median of %d calls (each with its sync)\n", o.vocab, o.iters);
  std::printf("%5s %6s %12s %14s %16s %14s\n", "rows", "C", "argmax us", "candidates us", "+normalizer us", "full rows us");
  std::vector<float> full(host.size());
  for (const int rows : o.rows) {
    const Tensor x = all.slice_rows(0, rows);
    std::vector<int32_t> ids_argmax(static_cast<size_t>(rows));
    const double t_argmax = median_us(o.iters, [&] { b.argmax_rows(x, ids_argmax.data()); });
    const double t_full = median_us(o.iters, [&] { b.copy_to_host(x, full.data()); });
    for (const int count : o.counts) {
      std::vector<int32_t> ids(static_cast<size_t>(rows) * count);
      std::vector<float> logits(ids.size());
      std::vector<uint32_t> flags(static_cast<size_t>(rows));
      std::vector<float> temps(static_cast<size_t>(rows), 0.8f);
      std::vector<double> sums(static_cast<size_t>(rows));
      CandidateRows plain{rows, count, ids.data(), logits.data(), flags.data(), nullptr, nullptr};
      CandidateRows with_sums{rows, count, ids.data(), logits.data(), flags.data(), temps.data(), sums.data()};
      const double t_cand = median_us(o.iters, [&] { b.top_candidates(x, plain); });
      const double t_sums = median_us(o.iters, [&] { b.top_candidates(x, with_sums); });
      std::printf("%5d %6d %12.1f %14.1f %16.1f %14.1f\n", rows, count, t_argmax, t_cand, t_sums, t_full);
    }
  }

  // The host's share per row: the sampler on the whole row vs on its candidates.
  std::printf("\nhost sampler per row (vocabulary %d): whole row vs candidates\n", o.vocab);
  const std::vector<float> row(host.begin(), host.begin() + o.vocab);
  struct Case {
    const char* name;
    float t;
    int k;
    float p;
  };
  for (const Case& c : {Case{"top_k 40", 0.8f, 40, 1.0f}, Case{"top_p 0.9", 0.8f, 0, 0.9f}, Case{"T 1", 1.0f, 0, 1.0f}}) {
    SamplerParams sp;
    sp.temperature = c.t;
    sp.top_k = c.k;
    sp.top_p = c.p;
    Sampler whole(sp), cand(sp);
    const int count = cand.candidates_wanted();
    std::vector<int32_t> ids(static_cast<size_t>(count));
    std::vector<float> logits(ids.size());
    uint32_t flags = 0;
    float t = cand.exp_sum_temperature();
    double sum = 0;
    const CandidateRows one{1, count, ids.data(), logits.data(), &flags, &t, &sum};
    b.top_candidates(all.slice_rows(0, 1), one);
    LogitRow lr;
    lr.candidates = CandidateRow{ids, logits, flags, sum, t, o.vocab};
    lr.fetch_logits = [&] { return std::span<const float>(row); };
    const double t_whole = median_us(o.iters, [&] { (void)whole.sample(row, {}); });
    const double t_cand = median_us(o.iters, [&] { (void)cand.sample(lr, {}); });
    std::printf("  %-10s C %4d: whole row %9.1f us, candidates %7.1f us (%llu exact, %llu fallbacks)\n", c.name, count,
                t_whole, t_cand, static_cast<unsigned long long>(cand.candidate_stats().exact),
                static_cast<unsigned long long>(cand.candidate_stats().fallback));
  }
  return 0;
}

}  // namespace tern::bench
