// `tern bench`: prefill and decode speed of a model, llama-bench style, against this machine's
// limits.
//
//   ppP  one prefill of P random tokens into an empty KV cache (one forward).
//   tgN  N single-token decode steps, each a forward with logits, starting after a 1-token
//        prompt (llama-bench's tg also decodes from an empty context), or with -d D after a
//        D-token prompt (llama-bench's -d): decode at depth, where attention reads D tokens of
//        KV per step. The depth prompt is prefilled once; repetitions reuse it from the cache.
// Each test runs once untimed (warm-up: page faults, caches, thread spin-up), then --reps times;
// tok/s is the median. Decode also reports the weight (and, at depth, KV) bytes streamed per second and that as a
// share of the memory read bandwidth measured by the same tool with the same thread count;
// prefill reports GFLOP/s (2 per weight per token, plus attention). --profile adds a per-op
// breakdown of a decode step and of a prefill (OpProfiler). Decode bytes count every weight once
// except an untied token_embd, of which a token reads one row. --cpu-time (with -t 1) times by
// CPU time, for machines shared with other work.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "cli/commands.h"
#include "cli/membw.h"
#include "cli/model_setup.h"
#include "cli/op_profile.h"
#include "engine/session.h"
#include "formats/synth.h"

namespace tern::cli {
namespace {

struct BenchOptions {
  std::string model_path;    // default model when empty and no --synth
  std::string synth;         // "PRESET:TYPE": synthesize into a temp file instead
  std::string threads;       // "1,2"; empty = 1 and all cores
  int n_prompt = 512;        // P of ppP; 0 skips prefill
  int n_gen = 128;           // N of tgN; 0 skips decode
  int depth = 0;             // decode after a prompt of this many tokens
  int reps = 5;
  int membw_mib = 1024;      // read-bandwidth buffer; 0 skips the measurement
  bool profile = false;
  bool cpu_time = false;     // time by the calling thread's CPU time (needs -t 1)
  uint64_t seed = 1;         // random token ids (and the synthesized weights)
};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// With one thread the whole step runs on the calling thread, so its CPU time is the step's time
// minus the periods it was descheduled: a fair measure on a machine shared with other work.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Bytes of last-level cache (0 when unknown): a model that fits is not memory-bound.
uint64_t last_level_cache_bytes() {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? static_cast<uint64_t>(l3) : 0;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}

Result<std::vector<int>> parse_threads(const std::string& list) {
  std::vector<int> out;
  if (list.empty()) {
    out.push_back(1);
    if (default_thread_count() > 1) out.push_back(default_thread_count());
    return out;
  }
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    const std::string item = list.substr(pos, comma - pos);
    char* end = nullptr;
    const long n = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || n < 1 || n > 1024)
      return error("-t: expected a comma-separated list of thread counts, got '" + list + "'");
    out.push_back(static_cast<int>(n));
    pos = comma + 1;
  }
  return out;
}

// A synthesized model in a temp file, removed when the benchmark ends.
class TempModel {
 public:
  ~TempModel() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  Status create(const std::string& spec, uint64_t seed) {
    const size_t colon = spec.find(':');
    if (colon == std::string::npos) return error("--synth: expected PRESET:TYPE, got '" + spec + "'");
    const synth::ModelShape* shape = synth::find_preset(spec.substr(0, colon));
    if (shape == nullptr) return error("--synth: unknown preset '" + spec.substr(0, colon) + "' (tern synth --list)");
    TERN_ASSIGN_OR_RETURN(synth::QuantMix mix, synth::parse_quant_mix(spec.substr(colon + 1)));
    const char* tmp = std::getenv("TMPDIR");
    std::string path = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/tern-bench-XXXXXX.gguf";
    const int fd = ::mkstemps(path.data(), 5);
    if (fd < 0) return error("--synth: cannot create a temp file in " + path);
    ::close(fd);
    path_ = path;
    std::fprintf(stderr, "synthesizing %s into %s ...\n", spec.c_str(), path.c_str());
    return synth::write_model(*shape, mix, synth::SynthOptions{seed, 0}, path);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Per-token costs of the model, from its tensor table.
struct ModelCosts {
  uint64_t decode_bytes = 0;  // weight bytes one decode token reads
  double matmul_flops = 0;    // 2 * weights used as matmuls, per token
};

ModelCosts model_costs(const gguf::File& file, const Model& model) {
  ModelCosts c;
  c.decode_bytes = model.weight_bytes();
  const gguf::TensorInfo* embd = file.find_tensor("token_embd.weight");
  // An untied embedding table is only gathered from (one row per token), not streamed.
  if (!model.config().tied_embeddings && embd != nullptr) c.decode_bytes -= embd->n_bytes;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.shape.size() < 2 || (t.name == "token_embd.weight" && !model.config().tied_embeddings)) continue;
    c.matmul_flops += 2.0 * static_cast<double>(t.numel());
  }
  return c;
}

// Attention FLOPs of a P-token prefill: QK^T and PV over the causal triangle, every layer.
double attention_flops(const ModelConfig& c, int n_prompt) {
  const double pairs = 0.5 * n_prompt * (n_prompt + 1.0);
  return 4.0 * c.n_layers * c.n_heads * c.head_dim * pairs;
}

template <typename T>
Status status_of(const Result<T>& r) {
  return r.is_ok() ? Status::ok() : r.status();
}

struct Stats {
  double median = 0, min = 0, max = 0;
};
Stats summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v.front(), v.back()};
}

class Runner {
 public:
  Runner(Model& model, KvPool& kv, uint64_t seed, int n_prompt, bool cpu_time = false, int depth = 0)
      : session_(model, kv), n_vocab_(model.config().n_vocab), rng_state_(seed),
        clock_(cpu_time ? thread_cpu_seconds : now_seconds) {
    options_.prefill_chunk_tokens = std::max(1, n_prompt);
    depth_prompt_.resize(static_cast<size_t>(std::max(1, depth)));
    for (int32_t& id : depth_prompt_) id = next_token();
  }
  // Seconds for one prefill of n tokens into an empty cache.
  Result<double> prefill(int n_tokens) {
    session_.reset();
    std::vector<int32_t> prompt(n_tokens);
    for (int32_t& id : prompt) id = next_token();
    const double t0 = clock_();
    TERN_RETURN_IF_ERROR(step(prompt));
    return clock_() - t0;
  }
  // Seconds for n decode steps after a 1-token prompt. Each step extends the held tokens by one,
  // so Session::prefill runs exactly one single-token forward with logits. `on_start` runs just
  // before the timed part (the profiler resets there).
  Result<double> decode(int n_steps, const std::function<void()>& on_start = {}) {
    // The depth prompt stays in the session between calls: each call trims back to it (reusing
    // its KV) instead of prefilling it again.
    std::vector<int32_t> tokens = depth_prompt_;
    TERN_RETURN_IF_ERROR(step(tokens));
    if (on_start) on_start();
    const double t0 = clock_();
    for (int i = 0; i < n_steps; ++i) {
      tokens.push_back(next_token());
      TERN_RETURN_IF_ERROR(step(tokens));
    }
    return clock_() - t0;
  }

 private:
  Status step(const std::vector<int32_t>& tokens) { return status_of(session_.prefill(tokens, options_)); }
  int32_t next_token() {  // splitmix64; any id is a valid input to a vocab-less benchmark
    uint64_t x = (rng_state_ += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return static_cast<int32_t>((x ^ (x >> 31)) % static_cast<uint64_t>(n_vocab_));
  }
  Session session_;
  int n_vocab_;
  uint64_t rng_state_;
  std::vector<int32_t> depth_prompt_;  // decode starts after these tokens (1 unless -d)
  double (*clock_)();
  GenerateOptions options_;
};

struct Row {
  int n_threads = 0;
  std::string test;      // "pp512", "tg128"
  Stats tok_per_s;
  double gbs = 0;        // decode: weight GB/s at the median
  double peak_gbs = 0;   // measured read bandwidth at this thread count (0 = not measured)
  double gflops = 0;     // prefill: GFLOP/s at the median
};

void print_table(const std::string& label, const std::vector<Row>& rows) {
  std::printf("\n| model | threads | test | tok/s | min - max | ms/tok | weights+KV GB/s | %% of read BW | GFLOP/s |\n");
  std::printf("|---|---:|---|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    char gbs[32] = "", pct[32] = "", gflops[32] = "";
    if (r.gbs > 0) std::snprintf(gbs, sizeof(gbs), "%.1f", r.gbs);
    if (r.gbs > 0 && r.peak_gbs > 0) std::snprintf(pct, sizeof(pct), "%.0f%%", 100.0 * r.gbs / r.peak_gbs);
    if (r.gflops > 0) std::snprintf(gflops, sizeof(gflops), "%.1f", r.gflops);
    std::printf("| %s | %d | %s | %.2f | %.2f - %.2f | %.2f | %s | %s | %s |\n", label.c_str(), r.n_threads,
                r.test.c_str(), r.tok_per_s.median, r.tok_per_s.min, r.tok_per_s.max, 1e3 / r.tok_per_s.median, gbs,
                pct, gflops);
  }
}

// Times every op of one prefill and of n_gen decode steps through an OpProfiler-wrapped backend.
Status profile(const LoadedModel& lm, int n_threads, const BenchOptions& o) {
  cpu::CpuBackend cpu(cpu::CpuBackendOptions{n_threads, false});
  OpProfiler prof(cpu);
  ModelOptions mo;
  mo.n_ctx = lm.model->n_ctx();
  TERN_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, load_model(lm.file, prof, mo));
  TERN_ASSIGN_OR_RETURN(std::unique_ptr<KvPool> kv, KvPool::create(prof, lm.kv->config()));
  Runner runner(*model, *kv, o.seed, o.n_prompt, false, o.depth);
  // Decode rows show weight GB/s (memory-bound); prefill rows show GFLOP/s (compute-bound).
  auto report = [&](const std::string& what, double seconds, int n_tokens, int n_forwards, bool decode) {
    double op_seconds = 0;
    for (const OpProfiler::Entry& e : prof.entries()) op_seconds += e.seconds;
    std::printf("\n%s, %d thread(s): %.3f ms/token; ops account for %.1f%% of the time\n", what.c_str(), n_threads,
                1e3 * seconds / n_tokens, 100.0 * op_seconds / seconds);
    std::printf("| op | calls/forward | ms/token | %% of time | %s |\n|---|---:|---:|---:|---:|\n",
                decode ? "weights GB/s" : "GFLOP/s");
    for (const OpProfiler::Entry& e : prof.entries()) {
      char rate[32] = "";
      if (decode && e.weight_bytes > 0) std::snprintf(rate, sizeof(rate), "%.1f", e.weight_bytes / e.seconds / 1e9);
      if (!decode && e.flops > 0) std::snprintf(rate, sizeof(rate), "%.1f", e.flops / e.seconds / 1e9);
      std::printf("| %s | %.1f | %.3f | %.1f%% | %s |\n", e.name.c_str(), static_cast<double>(e.calls) / n_forwards,
                  1e3 * e.seconds / n_tokens, 100.0 * e.seconds / seconds, rate);
    }
  };
  if (o.n_gen > 0) {
    TERN_RETURN_IF_ERROR(status_of(runner.decode(std::min(o.n_gen, 4))));  // warm-up
    TERN_ASSIGN_OR_RETURN(double seconds, runner.decode(o.n_gen, [&] { prof.reset(); }));
    report("decode (tg" + std::to_string(o.n_gen) + ")", seconds, o.n_gen, o.n_gen, true);
  }
  if (o.n_prompt > 0) {
    prof.reset();
    TERN_ASSIGN_OR_RETURN(double seconds, runner.prefill(o.n_prompt));
    report("prefill (pp" + std::to_string(o.n_prompt) + ")", seconds, o.n_prompt, 1, false);
  }
  return Status::ok();
}

Status run_bench(const BenchOptions& o) {
  TERN_ASSIGN_OR_RETURN(std::vector<int> thread_counts, parse_threads(o.threads));
  if (o.reps < 1) return error("--reps: expected at least 1, got " + std::to_string(o.reps));
  if (o.n_prompt < 0 || o.n_gen < 0) return error("-p and -n must be >= 0");
  if (o.cpu_time && std::any_of(thread_counts.begin(), thread_counts.end(), [](int n) { return n != 1; }))
    return error("--cpu-time times the calling thread, which is the whole step only with -t 1");
  TempModel temp;
  std::string path = o.model_path.empty() ? default_model_path() : o.model_path;
  std::string label;
  if (!o.synth.empty()) {
    if (!o.model_path.empty()) return error("give either -m or --synth, not both");
    const double t0 = now_seconds();
    TERN_RETURN_IF_ERROR(temp.create(o.synth, o.seed));
    std::fprintf(stderr, "synthesized in %.1f s\n", now_seconds() - t0);
    path = temp.path();
    label = o.synth;
  } else {
    label = path.substr(path.rfind('/') + 1);
  }

  std::printf("tern bench: %s\nCPU: %s, %d cores available\n", path.c_str(), cpu_model_name().c_str(),
              default_thread_count());
  std::vector<double> peak_gbs(thread_counts.size(), 0.0);
  if (o.membw_mib > 0) {
    std::printf("memory read bandwidth (%d MiB buffer, best of 5%s):", o.membw_mib, o.cpu_time ? ", CPU time" : "");
    for (size_t i = 0; i < thread_counts.size(); ++i) {
      MemBandwidthOptions mo;
      mo.buffer_bytes = static_cast<size_t>(o.membw_mib) << 20;
      mo.cpu_time = o.cpu_time;
      peak_gbs[i] = measure_read_bandwidth_gbs(thread_counts[i], mo);
      const char* sep = i + 1 < thread_counts.size() ? "," : "\n";
      std::printf(" %d thread(s) %.1f GB/s%s", thread_counts[i], peak_gbs[i], sep);
    }
  }

  std::vector<Row> rows;
  for (size_t ti = 0; ti < thread_counts.size(); ++ti) {
    const int nt = thread_counts[ti];
    ModelSetupOptions so;
    so.path = path;
    so.n_threads = nt;
    so.n_ctx = std::max({o.n_prompt, o.depth + o.n_gen + 1, 16});
    so.need_tokenizer = false;  // token ids are random; synthesized models have no vocabulary
    TERN_ASSIGN_OR_RETURN(LoadedModel lm, load_for_inference(so));
    const ModelCosts costs = model_costs(*lm.file, *lm.model);
    if (ti == 0) {
      const ModelConfig& c = lm.model->config();
      std::printf("model: %s %s, %d layers, d %d, vocab %d; %.3f GB of weights read per decode token\n",
                  c.arch.c_str(), c.name.c_str(), c.n_layers, c.n_embd, c.n_vocab, costs.decode_bytes / 1e9);
      const uint64_t llc = last_level_cache_bytes();
      if (llc > 0 && costs.decode_bytes < llc)
        std::printf("note: the weights fit in the %.0f MB last-level cache, so decode can beat DRAM bandwidth\n",
                    llc / 1e6);
    }
    Runner runner(*lm.model, *lm.kv, o.seed, o.n_prompt, o.cpu_time, o.depth);
    if (o.n_prompt > 0) {
      TERN_RETURN_IF_ERROR(status_of(runner.prefill(o.n_prompt)));  // warm-up
      std::vector<double> tps;
      for (int r = 0; r < o.reps; ++r) {
        TERN_ASSIGN_OR_RETURN(double seconds, runner.prefill(o.n_prompt));
        tps.push_back(o.n_prompt / seconds);
      }
      Row row{nt, "pp" + std::to_string(o.n_prompt), summarize(tps)};
      const double flops = costs.matmul_flops * o.n_prompt + attention_flops(lm.model->config(), o.n_prompt);
      row.gflops = flops / (o.n_prompt / row.tok_per_s.median) / 1e9;
      rows.push_back(row);
    }
    if (o.n_gen > 0) {
      TERN_RETURN_IF_ERROR(status_of(runner.decode(std::min(o.n_gen, 8))));  // warm-up
      std::vector<double> tps;
      for (int r = 0; r < o.reps; ++r) {
        TERN_ASSIGN_OR_RETURN(double seconds, runner.decode(o.n_gen));
        tps.push_back(o.n_gen / seconds);
      }
      Row row{nt, "tg" + std::to_string(o.n_gen) + (o.depth > 0 ? " @ d" + std::to_string(o.depth) : ""),
              summarize(tps)};
      // KV read per step: every position before it, on average depth + n_gen / 2.
      const double kv_bytes = static_cast<double>(lm.kv->bytes_per_token()) * (o.depth + 0.5 * o.n_gen);
      row.gbs = (costs.decode_bytes + kv_bytes) * row.tok_per_s.median / 1e9;
      row.peak_gbs = peak_gbs[ti];
      rows.push_back(row);
    }
    std::fflush(stdout);
    if (o.profile) TERN_RETURN_IF_ERROR(profile(lm, nt, o));
  }
  print_table(label, rows);
  return Status::ok();
}

}  // namespace

void register_bench(CLI::App& app, CommandRunner* run) {
  auto opts = std::make_shared<BenchOptions>();
  auto* cmd = app.add_subcommand("bench", "prefill and decode speed against the machine's memory bandwidth");
  cmd->add_option("-m,--model", opts->model_path, "GGUF model (default: the default model)");
  cmd->add_option("--synth", opts->synth, "benchmark a synthesized model PRESET:TYPE, e.g. llama3-8b:q4_k_m");
  cmd->add_option("-t,--threads", opts->threads, "comma-separated thread counts (default: 1 and all cores)");
  cmd->add_option("-p,--n-prompt", opts->n_prompt, "prefill test length P (ppP); 0 skips")->capture_default_str();
  cmd->add_option("-n,--n-gen", opts->n_gen, "decode test length N (tgN); 0 skips")->capture_default_str();
  cmd->add_option("-d,--depth", opts->depth, "decode after a prompt of D tokens (KV read per step grows with D)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-r,--reps", opts->reps, "timed repetitions per test (median reported)")->capture_default_str();
  cmd->add_option("--membw-mib", opts->membw_mib, "read-bandwidth buffer in MiB; 0 skips")->capture_default_str();
  cmd->add_flag("--profile", opts->profile, "per-op time breakdown of decode and prefill");
  cmd->add_flag("--cpu-time", opts->cpu_time,
                "time by CPU time instead of wall time (-t 1 only): for machines shared with other work");
  cmd->add_option("--seed", opts->seed, "seed of the random token ids and synthesized weights")->capture_default_str();
  cmd->callback([run, opts] {
    *run = [opts] {
      if (Status st = run_bench(*opts); !st.is_ok()) {
        std::fprintf(stderr, "tern bench: %s\n", st.message().c_str());
        return 1;
      }
      return 0;
    };
  });
}

}  // namespace tern::cli
