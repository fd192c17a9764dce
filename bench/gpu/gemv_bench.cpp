// gpu_bench --gemv: the GEMV kernels alone, per weight type and shape, against the copy bandwidth.
//
// Each case launches launch_matmul (kernels.h) on device buffers with the previous kernels
// (GemvPath::kLegacy), the single-row kernels alone (GemvPath::kSingle, the default before the
// multi-row kernel took some n = 1 products) and the default path, and prints microseconds per product,
// weight GB/s and the % of the measured device-to-device copy bandwidth. The weight is
// replicated into enough copies that the launches cycle through more than 3x the L2 cache, so
// every launch streams from HBM as in a decode step. Launches go back to back on one stream with
// programmatic dependent launch, as inside the decode graph, so a kernel's ramp overlaps its
// predecessor's tail as it does there. The outputs of the paths are compared bit for bit.
#include "gemv_bench.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels.h"
#include "core/dtype.h"

namespace tern::bench {
namespace {

struct Shape {
  const char* label;  // where the shape occurs
  DType dtype;
  int64_t cols;
  std::vector<int64_t> rows;  // one entry per fused matrix
};

// Llama-3-8B (Q4_K_M: q/k/o/gate/up q4_k, v/down/head q6_k; Q8_0; F16) and SmolLM2-135M (Q4_1,
// q8_0 tied head) products of one decode step.
std::vector<Shape> default_shapes() {
  std::vector<Shape> s = {
      {"8b q (+k fused)", DType::Q4_K, 4096, {4096, 1024}},
      {"8b o", DType::Q4_K, 4096, {4096}},
      {"8b gate+up", DType::Q4_K, 4096, {14336, 14336}},
      {"8b v", DType::Q6_K, 4096, {1024}},
      {"8b down", DType::Q6_K, 14336, {4096}},
      {"8b down", DType::Q4_K, 14336, {4096}},  // Q4_K_M's ffn_down in the layers that keep q4_k
      {"8b head", DType::Q6_K, 4096, {128256}},
      {"8b q+k+v", DType::Q8_0, 4096, {4096, 1024, 1024}},
      {"8b gate+up", DType::Q8_0, 4096, {14336, 14336}},
      {"8b down", DType::Q8_0, 14336, {4096}},
      {"8b q+k+v", DType::F16, 4096, {4096, 1024, 1024}},
      {"8b o", DType::F16, 4096, {4096}},
      {"8b gate+up", DType::F16, 4096, {14336, 14336}},
      {"8b down", DType::F16, 14336, {4096}},
      {"8b head", DType::F16, 4096, {128256}},
      {"8b q+k+v", DType::BF16, 4096, {4096, 1024, 1024}},
      {"8b gate+up", DType::BF16, 4096, {14336, 14336}},
      {"8b down", DType::BF16, 14336, {4096}},
      {"smol q+k+v", DType::F32, 576, {576, 192, 192}},
      {"8b gate+up", DType::Q4_1, 4096, {14336, 14336}},
      {"smol q+k+v", DType::Q4_1, 576, {576, 192, 192}},
      {"smol gate+up", DType::Q4_1, 576, {1536, 1536}},
      {"smol down", DType::Q4_1, 1536, {576}},
      {"smol head", DType::Q8_0, 576, {49152}},
  };
  return s;
}

#define BENCH_CUDA(expr)                                                                       \
  do {                                                                                         \
    const cudaError_t e_ = (expr);                                                             \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "gpu_bench --gemv: %s: %s\n", #expr, cudaGetErrorString(e_));       \
      return false;                                                                            \
    }                                                                                          \
  } while (0)

struct Timing {
  double us = 0.0;
  std::vector<float> y;  // outputs of the last launch, all matrices
};

// Runs `iters` products cycling through `copies` replicas; the median of 5 such runs.
bool time_path(const cuda::MatmulArgs& base, const std::vector<std::vector<void*>>& copies, int iters,
               cudaStream_t stream, Timing& t) {
  cuda::LaunchEnv env{stream, true};
  auto run = [&](int n) {
    for (int i = 0; i < n; ++i) {
      cuda::MatmulArgs a = base;
      for (int m = 0; m < a.n_mats; ++m) a.w[m] = copies[i % copies.size()][m];
      cuda::launch_matmul(a, env);
    }
  };
  run(static_cast<int>(copies.size()));  // warm-up
  cudaEvent_t e0, e1;
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  std::vector<double> runs;
  for (int r = 0; r < 5; ++r) {
    BENCH_CUDA(cudaEventRecord(e0, stream));
    run(iters);
    BENCH_CUDA(cudaEventRecord(e1, stream));
    BENCH_CUDA(cudaEventSynchronize(e1));
    float ms = 0.0f;
    BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    runs.push_back(1e3 * ms / iters);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(runs.begin(), runs.end());
  t.us = runs[2];
  t.y.clear();
  for (int m = 0; m < base.n_mats; ++m) {
    std::vector<float> part(static_cast<size_t>(base.n * base.rows[m]));
    BENCH_CUDA(cudaMemcpy(part.data(), base.y[m], part.size() * sizeof(float), cudaMemcpyDeviceToHost));
    t.y.insert(t.y.end(), part.begin(), part.end());
  }
  return true;
}

bool run_shape(const Shape& s, const GemvBenchOptions& o, const cudaDeviceProp& prop, double copy_gbs,
               cudaStream_t stream) {
  const size_t rb = row_bytes(s.dtype, s.cols);
  size_t bytes = 0;
  for (int64_t r : s.rows) bytes += rb * static_cast<size_t>(r);
  const size_t footprint = std::max<size_t>(size_t{3} * prop.l2CacheSize, size_t{256} << 20);
  const int n_copies = static_cast<int>(std::min<size_t>(64, (footprint + bytes - 1) / bytes));
  // Random bytes: the kernels' speed does not depend on the values (NaN scales included).
  std::mt19937 rng(7);
  std::vector<std::vector<void*>> copies(n_copies);
  std::vector<uint8_t> host;
  for (int c = 0; c < n_copies; ++c) {
    for (int64_t r : s.rows) {
      const size_t b = rb * static_cast<size_t>(r);
      if (host.size() < b) {
        const size_t old_size = host.size();
        host.resize(b);
        for (size_t i = old_size; i < b; i += 4) {
          const uint32_t word = static_cast<uint32_t>(rng());
          std::memcpy(host.data() + i, &word, std::min<size_t>(4, b - i));
        }
        // Keep float weights finite so the bitwise comparison below is meaningful.
        if (s.dtype == DType::F16 || s.dtype == DType::BF16) {
          for (size_t i = old_size | 1; i < host.size(); i += 2) host[i] &= 0x3f;
        }
        if (s.dtype == DType::F32) {
          for (size_t i = old_size | 3; i < host.size(); i += 4) host[i] &= 0x3f;
        }
      }
      void* p = nullptr;
      BENCH_CUDA(cudaMalloc(&p, b));
      BENCH_CUDA(cudaMemcpy(p, host.data(), b, cudaMemcpyHostToDevice));
      copies[c].push_back(p);
    }
  }
  const int64_t n = o.n;
  std::vector<float> xh(static_cast<size_t>(n * s.cols));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& v : xh) v = nd(rng);
  void* x_mem = nullptr;
  BENCH_CUDA(cudaMalloc(&x_mem, xh.size() * sizeof(float)));
  float* x = static_cast<float*>(x_mem);
  BENCH_CUDA(cudaMemcpy(x, xh.data(), xh.size() * sizeof(float), cudaMemcpyHostToDevice));
  // For the "norm:" / "res:" variants: an RMSNorm weight (the prologue normalizes x itself, so
  // a.x is left unread) and a residual row.
  std::vector<float> gh(static_cast<size_t>(s.cols));
  for (float& v : gh) v = 1.0f + 0.1f * nd(rng);
  void* g_mem = nullptr;
  BENCH_CUDA(cudaMalloc(&g_mem, gh.size() * sizeof(float)));
  BENCH_CUDA(cudaMemcpy(g_mem, gh.data(), gh.size() * sizeof(float), cudaMemcpyHostToDevice));
  int64_t all_rows = 0;
  for (int64_t r : s.rows) all_rows += r;
  void* res_mem = nullptr;
  BENCH_CUDA(cudaMalloc(&res_mem, sizeof(float) * n * all_rows));
  BENCH_CUDA(cudaMemset(res_mem, 0, sizeof(float) * n * all_rows));
  // Strips the fusion / variant prefixes of a --gemv-rows or --gemv-float entry into a; true when
  // the entry has the RMSNorm prologue (its outputs are compared with the first such entry's).
  auto take_prefixes = [&](std::string& shape, cuda::MatmulArgs& args) {
    bool norm = false;
    for (bool more = true; more;) {
      more = false;
      auto take = [&](const char* p) {
        const size_t len = std::strlen(p);
        if (shape.compare(0, len, p) != 0) return false;
        shape = shape.substr(len);
        more = true;
        return true;
      };
      if (take("norm:")) {
        norm = true;
        args.fuse.prologue = cuda::GemvPrologue::kRmsNorm;
        args.fuse.src = static_cast<const float*>(x_mem);
        args.fuse.src_stride = s.cols;
        args.fuse.src2 = static_cast<const float*>(g_mem);
        args.fuse.eps = 1e-5f;
      }
      if (take("res:") && args.n_mats == 1) {
        args.fuse.residual = static_cast<float*>(res_mem);
        args.fuse.residual_stride = all_rows;
      }
      if (take("pipe:")) args.gemv_float_pipe = 1;
      if (take("one:")) args.gemv_float_pipe = 2;
      if (take("pre:")) args.gemv_norm_preload = 1;
      if (take("nopre:")) args.gemv_norm_preload = 2;
      if (take("sb1:")) args.gemv_stream_blocks = 1;
      if (take("sb2:")) args.gemv_stream_blocks = 2;
    }
    return norm;
  };
  auto clear_prefixes = [&](cuda::MatmulArgs& args) {
    args.fuse = cuda::GemvFusion{};
    args.gemv_float_pipe = 0;
    args.gemv_norm_preload = 0;
    args.gemv_stream_blocks = 0;
  };
  std::vector<float> norm_y;  // the first "norm:" entry's outputs
  auto check = [&](bool norm, const Timing& t, const std::vector<float>& ref, double ref_us) {
    const std::vector<float>& want = norm ? norm_y : ref;
    if (norm && norm_y.empty()) {
      norm_y = t.y;
      std::printf("gemv       -> (the RMSNorm-prologue reference)\n");
      return true;
    }
    const bool same = want.size() == t.y.size() && std::memcmp(want.data(), t.y.data(), t.y.size() * sizeof(float)) == 0;
    std::printf("gemv       -> %.2fx vs default; outputs %s\n", ref_us / t.us, same ? "bitwise equal" : "DIFFER (bug)");
    return same;
  };
  cuda::MatmulArgs a = {};
  a.dtype = s.dtype;
  a.n_mats = static_cast<int>(s.rows.size());
  a.cols = s.cols;
  a.x = x;
  a.n = n;
  a.max_smem_bytes = static_cast<int>(prop.sharedMemPerBlockOptin);
  a.n_sm = prop.multiProcessorCount;
  // The backend's activation precision: TERN_CUDA_ACT_BITS=8 or 16 (the default).
  const char* bits_env = std::getenv("TERN_CUDA_ACT_BITS");
  a.x_bits = bits_env != nullptr && std::strcmp(bits_env, "8") == 0 ? 8 : 16;
  for (int m = 0; m < a.n_mats; ++m) {
    a.w_stride_bytes[m] = rb;
    a.rows[m] = s.rows[m];
    void* y_mem = nullptr;
    BENCH_CUDA(cudaMalloc(&y_mem, sizeof(float) * n * s.rows[m]));
    a.y[m] = static_cast<float*>(y_mem);
  }
  std::string rows_str;
  for (int64_t r : s.rows) rows_str += (rows_str.empty() ? "" : "+") + std::to_string(r);
  auto line = [&](const char* path, const Timing& t) {
    const double gbs = bytes / (t.us * 1e3);
    std::printf("gemv     %-5s %-16s %13s x %5lld n=%lld %-14s %8.2f us %7.0f GB/s %5.1f%% of copy bw\n",
                std::string(dtype_name(s.dtype)).c_str(), s.label, rows_str.c_str(), static_cast<long long>(s.cols),
                static_cast<long long>(n), path, t.us, gbs, copy_gbs > 0 ? 100.0 * gbs / copy_gbs : 0.0);
  };
  const int iters = std::max(o.iters, 2 * n_copies);
  bool ok = true;
  Timing legacy, fresh;
  a.gemv_path = static_cast<int32_t>(cuda::GemvPath::kLegacy);
  if (!o.skip_legacy) {
    ok = ok && time_path(a, copies, iters, stream, legacy);
    if (ok) line("legacy", legacy);
  }
  // The single-row kernels alone (the default before the multi-row kernel took the n = 1
  // products where it is faster), then the default's per-shape choice.
  Timing single;
  a.gemv_path = static_cast<int32_t>(cuda::GemvPath::kSingle);
  ok = ok && time_path(a, copies, iters, stream, single);
  if (ok) line("single", single);
  a.gemv_path = static_cast<int32_t>(cuda::GemvPath::kAuto);
  const std::vector<int> budgets = o.stage_bytes.empty() ? std::vector<int>{0} : o.stage_bytes;
  for (int budget : budgets) {
    a.stage_bytes_per_warp = budget;
    ok = ok && time_path(a, copies, iters, stream, fresh);
    if (!ok) break;
    const std::string name = budget > 0 ? "default/" + std::to_string(budget / 1024) + "K" : "default";
    line(name.c_str(), fresh);
    const bool same_single = single.y.size() == fresh.y.size() &&
                             std::memcmp(single.y.data(), fresh.y.data(), single.y.size() * sizeof(float)) == 0;
    std::printf("gemv       -> %.2fx vs single; outputs %s\n", single.us / fresh.us,
                same_single ? "bitwise equal" : "DIFFER (bug)");
    if (!same_single) ok = false;
    if (!o.skip_legacy) {
      const bool same = legacy.y.size() == fresh.y.size() &&
                        std::memcmp(legacy.y.data(), fresh.y.data(), legacy.y.size() * sizeof(float)) == 0;
      std::printf("gemv       -> %.2fx vs legacy; outputs %s\n", legacy.us / fresh.us,
                  same ? "bitwise equal" : "DIFFER (bug)");
    }
  }
  // The multi-row / split-row kernel (n = 1, long quantized rows; other products take the
  // default kernels under this path too), per requested shape.
  a.stage_bytes_per_warp = 0;
  const std::vector<float> default_y = fresh.y;
  for (const std::string& shape : o.rows_shapes) {
    if (!ok) break;
    a.gemv_path = static_cast<int32_t>(cuda::GemvPath::kRows);
    a.gemv_rows_per_step = 0;
    a.gemv_parts_per_row = 0;
    std::string bare = shape;
    // "glu:" (the SwiGLU epilogue of a gate+up pair; its output to a scratch row), before the others.
    const bool glu = bare.rfind("glu:", 0) == 0;
    if (glu) bare = bare.substr(4);
    if (glu && (a.n_mats != 2 || a.rows[0] != a.rows[1])) continue;
    const bool norm = take_prefixes(bare, a);
    float* glu_rows = nullptr;
    if (glu) {
      void* p = nullptr;
      BENCH_CUDA(cudaMalloc(&p, sizeof(float) * a.rows[0]));
      glu_rows = static_cast<float*>(p);
      a.fuse.glu_out = glu_rows;
    }
    // "@B" after the shape: a pipeline budget of B bytes per warp for this entry.
    if (const size_t at = bare.find('@'); at != std::string::npos) {
      a.stage_bytes_per_warp = std::atoi(bare.c_str() + at + 1);
      bare = bare.substr(0, at);
    }
    // "single" / "default" / "stream": those paths (with the prefixes' fusions) instead of
    // GemvPath::kRows ("stream": the register-streamed kernel, gemv_stream.cu, where it takes the
    // product).
    if (bare == "single") a.gemv_path = static_cast<int32_t>(cuda::GemvPath::kSingle);
    if (bare == "default") a.gemv_path = static_cast<int32_t>(cuda::GemvPath::kAuto);
    if (bare == "stream") a.gemv_path = static_cast<int32_t>(cuda::GemvPath::kStream);
    if (bare == "prev") a.gemv_path = static_cast<int32_t>(cuda::GemvPath::kPrev);
    if (bare != "auto" && bare != "single" && bare != "default" && bare != "stream" && bare != "prev" &&
        std::sscanf(bare.c_str(), "%dx%d", &a.gemv_rows_per_step, &a.gemv_parts_per_row) != 2) {
      std::fprintf(stderr, "gpu_bench --gemv-rows: expected auto or RxP (e.g. 2x1), found '%s'\n", shape.c_str());
      return false;
    }
    Timing rows;
    ok = time_path(a, copies, iters, stream, rows);
    clear_prefixes(a);
    if (glu_rows != nullptr) cudaFree(glu_rows);
    a.stage_bytes_per_warp = 0;
    if (!ok) break;
    line(("rows/" + shape).c_str(), rows);
    if (!check(norm, rows, default_y, fresh.us)) ok = false;
  }
  // The float kernels at n = 1: the previous ones and the streamed kernel's shapes.
  a.gemv_path = static_cast<int32_t>(cuda::GemvPath::kAuto);
  const bool is_float = s.dtype == DType::F32 || s.dtype == DType::F16 || s.dtype == DType::BF16;
  for (const std::string& variant : o.float_shapes) {
    if (!ok || !is_float || n != 1 || variant == "none") break;
    // Prefixes "glu:" (the SwiGLU epilogue, two equal matrices; its output to a scratch row) and
    // "dyn:" (dynamic units: a zeroed work counter), in any order.
    std::string shape = variant;
    const bool norm = take_prefixes(shape, a);
    bool glu = false, dyn = false;
    for (bool more = true; more;) {
      more = false;
      if (shape.rfind("glu:", 0) == 0) glu = more = true, shape = shape.substr(4);
      if (shape.rfind("dyn:", 0) == 0) dyn = more = true, shape = shape.substr(4);
    }
    if (glu && (a.n_mats != 2 || a.rows[0] != a.rows[1])) continue;
    float* glu_out = nullptr;
    if (glu) {
      void* p = nullptr;
      BENCH_CUDA(cudaMalloc(&p, sizeof(float) * a.rows[0]));
      glu_out = static_cast<float*>(p);
    }
    int* counter = nullptr;
    if (dyn) {
      void* p = nullptr;
      BENCH_CUDA(cudaMalloc(&p, 64));
      BENCH_CUDA(cudaMemset(p, 0, 64));
      counter = static_cast<int*>(p);
    }
    a.fuse.glu_out = glu_out;
    a.gemv_float_counter = counter;
    a.gemv_float_kernel = shape == "prev" ? 1 : 0;
    a.gemv_float_rows = a.gemv_float_unroll = a.gemv_float_blocks = 0;
    if (shape != "prev" && shape != "auto" &&
        std::sscanf(shape.c_str(), "%dx%d/%d", &a.gemv_float_rows, &a.gemv_float_unroll, &a.gemv_float_blocks) < 2) {
      std::fprintf(stderr, "gpu_bench --gemv-float: expected prev or RxU[/B] (e.g. 2x8), found '%s'\n", variant.c_str());
      return false;
    }
    Timing t;
    ok = time_path(a, copies, iters, stream, t);
    clear_prefixes(a);
    a.gemv_float_counter = nullptr;
    if (glu_out != nullptr) cudaFree(glu_out);
    if (counter != nullptr) cudaFree(counter);
    if (!ok) break;
    line(("float/" + variant).c_str(), t);
    if (!check(norm, t, default_y, fresh.us)) ok = false;
  }
  a.gemv_float_kernel = a.gemv_float_rows = a.gemv_float_unroll = a.gemv_float_blocks = 0;
  for (auto& c : copies) {
    for (void* p : c) cudaFree(p);
  }
  cudaFree(x);
  cudaFree(g_mem);
  cudaFree(res_mem);
  for (int m = 0; m < a.n_mats; ++m) cudaFree(a.y[m]);
  return ok;
}

}  // namespace

int run_gemv_bench(const GemvBenchOptions& o) {
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::fprintf(stderr, "gpu_bench --gemv: no CUDA device\n");
    return 1;
  }
  auto bw = cuda::copy_bandwidth_gbs(0, size_t{2} << 30);
  const double copy_gbs = bw.is_ok() ? bw.value() : 0.0;
  std::printf("device   %s, %d SMs, L2 %d MiB; copy bandwidth %.0f GB/s (2 GiB device-to-device, read+write)\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, copy_gbs);
  cuda::init_matmul(static_cast<int>(prop.sharedMemPerBlockOptin));
  cudaStream_t stream;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return 1;
  int failures = 0;
  for (const Shape& s : default_shapes()) {
    const std::string name = std::string(dtype_name(s.dtype)) + " " + s.label;
    bool wanted = o.filter.empty();
    for (size_t b = 0; !wanted && b <= o.filter.size();) {  // comma-separated alternatives
      const size_t e = std::min(o.filter.find(',', b), o.filter.size());
      wanted = e > b && name.find(o.filter.substr(b, e - b)) != std::string::npos;
      b = e + 1;
    }
    if (!wanted) continue;
    if (!run_shape(s, o, prop, copy_gbs, stream)) ++failures;
  }
  cudaStreamDestroy(stream);
  return failures == 0 ? 0 : 1;
}

}  // namespace tern::bench
