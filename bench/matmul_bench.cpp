// matmul_bench: speed of cpu::matmul against the machine's measured limits.
//
//   matmul_bench [--threads=1,2] [--isa=scalar|avx2|avx512] [--act-bits=8|16] [--reps=N] [--quick] [--hot]
//                [--cpu-time] [--decode-pack]
//
// --act-bits: activation precision of the quantized kernels (matmul.h ActBits; default: the
// library default, or TERN_CPU_ACT_BITS if set).
// --hot: decode weights are not rotated (cache-resident): the kernels' compute speed, an upper
// bound for the memory-bound numbers. --decode-pack: decode matvecs read the weights' decode packs
// (matmul.h), as the backend's do. --cpu-time: time the calling thread's CPU time instead of
// wall time (use with --threads=1 on a busy machine).
//
// Sections:
//   peak      read bandwidth of a 512 MiB stream (1 and 2 threads): the decode speed of light.
//   decode    n = 1 matvecs on the default model's shapes (SmolLM2-135M Q4_1 + Q8_0 head) and
//             Llama-3-8B Q4_K_M shapes; weights rotate through >= 400 MiB of copies so every call
//             streams from memory, as a decode step does. Reports weight GB/s and % of peak.
//   model     one whole decode token of SmolLM2-135M (210 Q4_1 matvecs + the Q8_0 head): ms/token
//             and tok/s (matmuls only).
//   prefill   n = 64..512 on the same shapes: GOP/s (2 * n * rows * cols / time) and the
//             135M model's matmul-only prefill tok/s.
// Times are medians over repeats. Weights are random blocks with sane fp16 scales (speed does
// not depend on the values).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/matmul.h"
#include "core/fp16.h"
#include "core/quant_blocks.h"
#include "core/thread_pool.h"

namespace tern::bench {
namespace {

using cpu::Isa;

struct Options {
  std::vector<int> threads = {1, 2};
  Isa isa = cpu::active_isa();
  cpu::ActBits act_bits = cpu::act_bits_from_env(cpu::kDefaultActBits);
  int reps = 21;
  bool quick = false;
  bool hot = false;       // decode weights stay cache-resident
  bool decode_pack = false;  // decode section: weights with a decode pack (matmul.h) use it
  bool cpu_time = false;  // calling thread's CPU time instead of wall time
};

bool g_cpu_time = false;

double now_seconds() {
  if (g_cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median wall time of fn over `reps` runs (after one warm-up).
double median_seconds(int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> t(static_cast<size_t>(reps));
  for (double& s : t) {
    const double t0 = now_seconds();
    fn();
    s = now_seconds() - t0;
  }
  std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
  return t[reps / 2];
}

// ---- peak read bandwidth ----

__attribute__((target("avx2"))) uint64_t read_stream_avx2(const uint8_t* p, size_t bytes) {
  __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
  for (size_t i = 0; i + 128 <= bytes; i += 128) {
    acc0 = _mm256_xor_si256(acc0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    acc1 = _mm256_xor_si256(acc1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    acc0 = _mm256_xor_si256(acc0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    acc1 = _mm256_xor_si256(acc1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i x = _mm256_xor_si256(acc0, acc1);
  return static_cast<uint64_t>(_mm256_extract_epi64(x, 0) ^ _mm256_extract_epi64(x, 3));
}

uint64_t read_stream_plain(const uint8_t* p, size_t bytes) {
  uint64_t acc = 0;
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    acc ^= v;
  }
  return acc;
}

// Read bandwidth in GB/s of a 512 MiB buffer split across the pool's threads.
double measure_peak_gbps(ThreadPool& pool, int reps) {
  constexpr size_t kBytes = size_t{512} << 20;
  auto* buf = static_cast<uint8_t*>(std::aligned_alloc(64, kBytes));
  std::memset(buf, 1, kBytes);
  const bool avx2 = cpu::isa_supported(Isa::kAvx2);
  volatile uint64_t sink = 0;
  const double t = median_seconds(std::max(3, reps / 4), [&] {
    pool.run([&](int tid) {
      const size_t share = kBytes / pool.n_threads() / 128 * 128;
      const uint8_t* p = buf + share * tid;
      sink = sink ^ (avx2 ? read_stream_avx2(p, share) : read_stream_plain(p, share));
    });
  });
  std::free(buf);
  return kBytes / t * 1e-9;
}

// ---- weights ----

// Byte offsets of the fp16 scale fields in one block (kept finite and small).
std::vector<size_t> scale_offsets(DType t) {
  switch (t) {
    case DType::Q4_0: return {offsetof(BlockQ4_0, d)};
    case DType::Q4_1: return {offsetof(BlockQ4_1, d), offsetof(BlockQ4_1, m)};
    case DType::Q5_0: return {offsetof(BlockQ5_0, d)};
    case DType::Q5_1: return {offsetof(BlockQ5_1, d), offsetof(BlockQ5_1, m)};
    case DType::Q8_0: return {offsetof(BlockQ8_0, d)};
    case DType::Q2_K: return {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)};
    case DType::Q3_K: return {offsetof(BlockQ3_K, d)};
    case DType::Q4_K: return {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)};
    case DType::Q5_K: return {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)};
    case DType::Q6_K: return {offsetof(BlockQ6_K, d)};
    default: return {};
  }
}

struct WeightSet {
  DType dtype;
  int64_t rows, cols;
  size_t bytes_per_copy;
  std::vector<std::vector<uint8_t>> copies;
  std::vector<std::vector<uint8_t>> packs{};  // per copy: decode pack storage (--decode-pack), 64 bytes of slack
  Tensor tensor(size_t copy) const {
    return Tensor::view(const_cast<uint8_t*>(copies[copy].data()), dtype, rows, cols);
  }
  // The copy's decode pack (64-byte aligned inside its storage), or nullptr.
  const uint8_t* pack(size_t copy) const {
    if (copy >= packs.size() || packs[copy].empty()) return nullptr;
    const auto p = reinterpret_cast<uintptr_t>(packs[copy].data());
    return reinterpret_cast<const uint8_t*>((p + 63) / 64 * 64);
  }
  void make_packs(Isa isa) {
    const size_t bytes = cpu::decode_pack_bytes(isa, tensor(0));
    if (bytes == 0) return;
    packs.resize(copies.size());
    for (size_t c = 0; c < copies.size(); ++c) {
      packs[c].resize(bytes + 64);
      cpu::make_decode_pack(isa, tensor(c), const_cast<uint8_t*>(pack(c)));
    }
  }
};

void fill_random(std::vector<uint8_t>& buf, DType t, uint64_t seed) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i + 8 <= buf.size(); i += 8) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    std::memcpy(&buf[i], &s, 8);
  }
  const uint16_t small = f32_to_fp16(0.01f);
  if (t == DType::F32) {
    const float v = 0.01f;
    for (size_t i = 0; i + 4 <= buf.size(); i += 4) std::memcpy(&buf[i], &v, 4);
  } else if (t == DType::F16 || t == DType::BF16) {
    const uint16_t h = t == DType::F16 ? small : f32_to_bf16(0.01f);
    for (size_t i = 0; i + 2 <= buf.size(); i += 2) std::memcpy(&buf[i], &h, 2);
  } else {
    const size_t block = dtype_info(t)->block_bytes;
    for (size_t b = 0; b + block <= buf.size(); b += block)
      for (size_t off : scale_offsets(t)) std::memcpy(&buf[b + off], &small, 2);
  }
}

// Enough copies of a [rows, cols] weight to span min_bytes, so a rotation never hits in cache.
WeightSet make_weights(DType t, int64_t rows, int64_t cols, size_t min_bytes) {
  WeightSet w{t, rows, cols, row_bytes(t, cols) * static_cast<size_t>(rows), {}};
  const size_t n_copies = std::max<size_t>(1, (min_bytes + w.bytes_per_copy - 1) / w.bytes_per_copy);
  w.copies.resize(n_copies);
  for (size_t c = 0; c < n_copies; ++c) {
    w.copies[c].resize(w.bytes_per_copy);
    fill_random(w.copies[c], t, c + 1);
  }
  return w;
}

std::vector<float> random_activations(int64_t n, int64_t cols) {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * cols));
  for (float& v : x) v = normal(rng);
  return x;
}

struct Shape {
  const char* name;
  DType dtype;
  int64_t rows, cols;
};

// SmolLM2-135M-Instruct.Q4_1.gguf (30 layers) and Llama-3-8B Q4_K_M.
constexpr Shape kSmolShapes[] = {
    {"smol attn_q/o", DType::Q4_1, 576, 576},   {"smol attn_k/v", DType::Q4_1, 192, 576},
    {"smol ffn_gate/up", DType::Q4_1, 1536, 576}, {"smol ffn_down", DType::Q4_1, 576, 1536},
    {"smol output", DType::Q8_0, 49152, 576},
};
constexpr Shape kLlamaShapes[] = {
    {"8B attn_q/o", DType::Q4_K, 4096, 4096},    {"8B ffn_gate/up", DType::Q4_K, 14336, 4096},
    {"8B ffn_down", DType::Q6_K, 4096, 14336},   {"8B output", DType::Q6_K, 128256, 4096},
};
// Per layer: q, k, v, o, gate, up, down.
constexpr int kSmolLayers = 30;
constexpr Shape kSmolLayer[] = {
    {"q", DType::Q4_1, 576, 576},     {"k", DType::Q4_1, 192, 576},    {"v", DType::Q4_1, 192, 576},
    {"o", DType::Q4_1, 576, 576},     {"gate", DType::Q4_1, 1536, 576}, {"up", DType::Q4_1, 1536, 576},
    {"down", DType::Q4_1, 576, 1536},
};
constexpr Shape kSmolHead = {"output", DType::Q8_0, 49152, 576};

constexpr size_t kColdBytes = size_t{400} << 20;

void bench_decode(const Options& o, const std::vector<double>& peak) {
  std::printf("\n== decode: n = 1 matvec, weights %s (isa %s, %s-bit activations) ==\n",
              o.hot ? "cache-resident (--hot)" : "streamed from memory", std::string(cpu::isa_name(o.isa)).c_str(),
              std::string(cpu::act_bits_name(o.act_bits)).c_str());
  std::printf("%-18s %-5s %13s %3s %10s %9s %7s %8s\n", "case", "type", "rows x cols", "thr", "median_us", "GB/s",
              "%peak", "GOP/s");
  std::vector<Shape> shapes(std::begin(kSmolShapes), std::end(kSmolShapes));
  if (!o.quick) shapes.insert(shapes.end(), std::begin(kLlamaShapes), std::end(kLlamaShapes));
  for (const Shape& s : shapes) {
    WeightSet w = make_weights(s.dtype, s.rows, s.cols, o.hot ? 0 : kColdBytes);
    if (o.decode_pack) w.make_packs(o.isa);
    const std::vector<float> x = random_activations(1, s.cols);
    std::vector<float> y(static_cast<size_t>(s.rows));
    for (size_t ti = 0; ti < o.threads.size(); ++ti) {
      ThreadPool pool(o.threads[ti]);
      size_t copy = 0;
      const int reps = std::max<int>(o.reps, static_cast<int>(2 * w.copies.size()));
      const double t = median_seconds(reps, [&] {
        cpu::matmul_isa(o.isa, w.tensor(copy), x.data(), 1, y.data(), pool, o.act_bits, w.pack(copy));
        copy = (copy + 1) % w.copies.size();
      });
      const double gbps = w.bytes_per_copy / t * 1e-9;
      std::printf("%-18s %-5s %6lld x %-5lld %3d %10.1f %9.1f %6.0f%% %8.1f\n", s.name,
                  std::string(dtype_name(s.dtype)).c_str(), static_cast<long long>(s.rows),
                  static_cast<long long>(s.cols), o.threads[ti], t * 1e6, gbps, 100.0 * gbps / peak[ti],
                  2.0 * s.rows * s.cols / t * 1e-9);
    }
  }
}

// All matrices of the model, once (a real decode step reads each once per token).
struct ModelWeights {
  std::vector<WeightSet> layers;  // kSmolLayers * 7
  WeightSet head;
  size_t total_bytes = 0;
};

ModelWeights make_smol_model() {
  ModelWeights m{{}, make_weights(kSmolHead.dtype, kSmolHead.rows, kSmolHead.cols, 0), 0};
  m.total_bytes = m.head.bytes_per_copy;
  for (int l = 0; l < kSmolLayers; ++l)
    for (const Shape& s : kSmolLayer) {
      m.layers.push_back(make_weights(s.dtype, s.rows, s.cols, 0));
      m.total_bytes += m.layers.back().bytes_per_copy;
    }
  return m;
}

void bench_model(const Options& o, const std::vector<double>& peak, const ModelWeights& m) {
  std::printf("\n== model: one SmolLM2-135M decode token, matmuls only (%zu matvecs, %.1f MB) ==\n",
              m.layers.size() + 1, m.total_bytes * 1e-6);
  std::printf("%3s %10s %9s %9s %7s\n", "thr", "ms/token", "tok/s", "GB/s", "%peak");
  const std::vector<float> x = random_activations(1, 1536);
  std::vector<float> y(static_cast<size_t>(kSmolHead.rows));
  for (size_t ti = 0; ti < o.threads.size(); ++ti) {
    ThreadPool pool(o.threads[ti]);
    const double t = median_seconds(o.reps, [&] {
      for (const WeightSet& w : m.layers) cpu::matmul_isa(o.isa, w.tensor(0), x.data(), 1, y.data(), pool, o.act_bits);
      cpu::matmul_isa(o.isa, m.head.tensor(0), x.data(), 1, y.data(), pool, o.act_bits);
    });
    const double gbps = m.total_bytes / t * 1e-9;
    std::printf("%3d %10.3f %9.1f %9.1f %6.0f%%\n", o.threads[ti], t * 1e3, 1.0 / t, gbps, 100.0 * gbps / peak[ti]);
  }
}

void bench_prefill(const Options& o, const ModelWeights& m) {
  std::printf("\n== prefill: n activation rows per call ==\n");
  std::printf("%-18s %-5s %13s %4s %3s %10s %8s\n", "case", "type", "rows x cols", "n", "thr", "median_ms", "GOP/s");
  const std::vector<int64_t> ns = o.quick ? std::vector<int64_t>{64, 256} : std::vector<int64_t>{64, 128, 256, 512};
  const int reps = std::max(3, o.reps / 3);
  std::vector<Shape> shapes;
  for (const Shape& s : kSmolShapes)
    if (s.dtype == DType::Q4_1) shapes.push_back(s);  // the head runs for sampled rows only
  if (!o.quick)
    for (const Shape& s : kLlamaShapes)
      if (s.rows < 100000) shapes.push_back(s);
  for (const Shape& s : shapes) {
    const WeightSet w = make_weights(s.dtype, s.rows, s.cols, 0);
    for (int64_t n : ns) {
      if (s.rows * s.cols > 20'000'000 && n > 128) continue;  // keep the run short
      const std::vector<float> x = random_activations(n, s.cols);
      std::vector<float> y(static_cast<size_t>(n * s.rows));
      for (int threads : o.threads) {
        ThreadPool pool(threads);
        const double t =
            median_seconds(reps, [&] { cpu::matmul_isa(o.isa, w.tensor(0), x.data(), n, y.data(), pool, o.act_bits); });
        std::printf("%-18s %-5s %6lld x %-5lld %4lld %3d %10.3f %8.1f\n", s.name, std::string(dtype_name(s.dtype)).c_str(),
                    static_cast<long long>(s.rows), static_cast<long long>(s.cols), static_cast<long long>(n), threads,
                    t * 1e3, 2.0 * n * s.rows * s.cols / t * 1e-9);
      }
    }
  }
  // Whole-model prefill chunk: every layer matrix at n rows (the head only for one row).
  std::printf("\n%-34s %4s %3s %10s %9s %8s\n", "SmolLM2-135M prefill (matmuls)", "n", "thr", "ms/chunk", "tok/s",
              "GOP/s");
  double ops_per_token = 2.0 * kSmolHead.rows * kSmolHead.cols / 1e9;  // head amortised below
  double layer_ops = 0;
  for (const Shape& s : kSmolLayer) layer_ops += 2.0 * s.rows * s.cols;
  for (int64_t n : ns) {
    const std::vector<float> x = random_activations(n, 1536);
    std::vector<float> y(static_cast<size_t>(std::max<int64_t>(n * 1536, kSmolHead.rows)));
    for (int threads : o.threads) {
      ThreadPool pool(threads);
      const double t = median_seconds(reps, [&] {
        for (const WeightSet& w : m.layers)
          cpu::matmul_isa(o.isa, w.tensor(0), x.data(), n, y.data(), pool, o.act_bits);
        cpu::matmul_isa(o.isa, m.head.tensor(0), x.data(), 1, y.data(), pool, o.act_bits);
      });
      const double ops = layer_ops * kSmolLayers * n + ops_per_token * 1e9;
      std::printf("%-34s %4lld %3d %10.2f %9.1f %8.1f\n", "", static_cast<long long>(n), threads, t * 1e3, n / t,
                  ops / t * 1e-9);
    }
  }
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--threads=", 0) == 0) {
      o.threads.clear();
      size_t pos = 10;
      while (pos < a.size()) {
        const size_t comma = a.find(',', pos);
        o.threads.push_back(std::max(1, std::stoi(a.substr(pos, comma - pos))));
        if (comma == std::string::npos) break;
        pos = comma + 1;
      }
    } else if (a.rfind("--isa=", 0) == 0) {
      const auto isa = cpu::isa_from_name(a.substr(6));
      if (!isa || !cpu::isa_supported(*isa)) {
        std::fprintf(stderr, "unsupported --isa=%s\n", a.substr(6).c_str());
        return false;
      }
      o.isa = *isa;
    } else if (a == "--act-bits=8" || a == "--act-bits=16") {
      o.act_bits = a == "--act-bits=8" ? cpu::ActBits::k8 : cpu::ActBits::k16;
    } else if (a.rfind("--reps=", 0) == 0) {
      o.reps = std::max(3, std::stoi(a.substr(7)));
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--hot") {
      o.hot = true;
    } else if (a == "--decode-pack") {
      o.decode_pack = true;
    } else if (a == "--cpu-time") {
      o.cpu_time = true;
    } else {
      std::fprintf(stderr,
                   "usage: matmul_bench [--threads=1,2] [--isa=scalar|avx2|avx512] [--act-bits=8|16] [--reps=N] [--quick] "
                   "[--hot] [--cpu-time] [--decode-pack]\n");
      return false;
    }
  }
  return true;
}

}  // namespace
}  // namespace tern::bench

int main(int argc, char** argv) {
  using namespace tern::bench;
  Options o;
  if (!parse(argc, argv, o)) return 2;
  g_cpu_time = o.cpu_time;
  std::printf("== peak: read bandwidth, 512 MiB stream ==\n");
  std::vector<double> peak;
  for (int threads : o.threads) {
    tern::ThreadPool pool(threads);
    peak.push_back(measure_peak_gbps(pool, o.reps));
    std::printf("threads %d: %.1f GB/s\n", threads, peak.back());
  }
  bench_decode(o, peak);
  const ModelWeights model = make_smol_model();
  bench_model(o, peak, model);
  bench_prefill(o, model);
  return 0;
}
