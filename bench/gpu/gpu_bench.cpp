// gpu_bench: end-to-end speed of the CUDA backend against the device's measured limits.
//
//   gpu_bench [--model FILE | --preset NAME --mix MIX] [--ctx 1024,32768] [--decode-steps 64]
//             [--prefill 512,4096] [--batch 8,32] [--batch-ctx 1024] [--chunk 512] [--no-graphs]
//             [--tc-prefill] [--append 30720+2048] [--full-logits] [--gemm-peak]
//             [--small-gemv "default;off;pipe;pre"] [--split-ring "3;4"] [--gemv-path "default;stream"]
//             [--timeline 16] [--timeline-top 24] [--timeline-order 12]
//   gpu_bench --attn [--attn-ctx 1024,32768] [--attn-prefill 0+512,0+4096,30720+2048] [--tc-prefill]
//             [--attn-shape 32/8/128] [--attn-batch 1,8] [--attn-reps 10] [--attn-env "A=1;A=0,B=2"]
//             [--attn-rounds 2]
//   gpu_bench --gemv [--gemv-filter STR] [--gemv-n 1] [--gemv-iters 50] [--gemv-stage-bytes 8192,16384]
//             [--gemv-no-legacy] [--gemv-rows auto,2x1,4x1,1x2,1x4 | none]
//             [--gemv-float prev,1x8,1x16,2x4,2x8,4x4,2x8/2 | none]
//   gpu_bench --sampling [--sampling-vocab 128256] [--sampling-rows 1,8,32] [--sampling-count 64,256,1024]
//
// --preset synthesizes the model (formats/synth.h) into $TMPDIR once; random weights decode at
// the same speed as real ones. Sections, each one line per measurement:
//   device   name, SMs, memory; HBM copy bandwidth (device-to-device, bytes read + written): the
//            ceiling for decode; with prefill / append rows (or --gemm-peak) the bf16 GEMM rate
//            (cuBLASLt, 8192^3): the ceiling for prefill
//   decode   batch-1 tok/s at each context; bytes read per token = weights + the KV of the
//            context; % of copy bandwidth
//   prefill  tok/s of a P-token prompt fed in --chunk-token forwards from an empty cache, the
//            projections' and attention's TFLOP/s (2 * weight params * tokens / time, causal
//            attention FLOPs) and their sum's share of the measured bf16 GEMM rate
//            (--tc-prefill: the opt-in cuBLASLt path, CudaBackendOptions::tc_prefill)
//   append   time to first token of N new tokens on C cached ones (--append C+N): the N tokens in
//            --chunk-token forwards on a sequence already holding C, median of 3 (an agent's turn)
//   batch    tok/s of B sequences decoding together (each at --batch-ctx tokens of context)
//            --small-gemv: decode and batch rows once per setting of the small-GEMV switches
//            (cuda::set_small_gemv; ';'-separated): off / on (both), pipe (the float kernel's two
//            buffers only), pre (the quantized norm-weight preload only), default; on the same model
//            and context: two rounds (the second in reverse order), each setting's median over both;
//            --split-ring likewise per TERN_CUDA_ATTN_SPLIT_RING value (cuda::set_attention_split_ring),
//            e.g. "3;4"; --gemv-path likewise per GEMV family (cuda::set_gemv_path: default / rows /
//            single / stream / prev, as TERN_CUDA_GEMV); --act-bits likewise per quantized
//            activation precision (cuda::set_act_bits: "16;8")
//   timeline (--timeline N) after each decode row, N more steps recorded through CUPTI
//            (step_timeline.h): per kernel and grid, launches per step, duration and marginal time
//            (how far it moves the step's end) inside the graph, as the step runs. The recording
//            starts before the first graph capture and stays on, so the decode rows of such a run
//            are traced too: take tok/s from a run without it; --timeline-order N lists the last
//            step's first and last N kernels in launch order
//   gemv     (--gemv, instead of the model) each GEMV kernel alone per type and shape: us, GB/s,
//            % of copy bandwidth, previous vs default kernels, then the multi-row / split-row
//            kernel (TERN_CUDA_GEMV=rows) per --gemv-rows shape, the float kernels per
//            --gemv-float variant (gemv_bench.h)
//   attn     (--attn, instead of the model) the attention op alone (attention_bench.h)
//   sampling (--sampling, instead of the model) argmax / candidates / whole rows (sampling_bench.h)
// A forward's time includes its sync point: the copy of each logit row's argmax to the host
// (greedy sampling on the device, as the engine's greedy steps do), or with --full-logits the
// whole rows (as steps that sample from the logits do).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attention_bench.h"
#include "backends/cuda/cuda_backend.h"
#include "formats/gguf.h"
#include "formats/synth.h"
#include "gemv_bench.h"
#include "sampling_bench.h"
#include "step_timeline.h"
#include "kv/kv_pool.h"
#include "models/model.h"

namespace tern::bench {
namespace {

struct Options {
  std::string model, preset = "smollm2-135m", mix = "q4_1";
  std::vector<int> ctx = {1024};
  std::vector<int> prefill = {512};
  std::vector<int> batch = {};
  std::vector<std::pair<int, int>> append;  // (cached, new) tokens
  int batch_ctx = 1024;
  int decode_steps = 64;
  int chunk = 512;
  bool graphs = true;
  bool tc_prefill = false;
  bool full_logits = false;  // copy whole logit rows to the host, not just their argmax
  bool gemm_peak = false;    // measure the bf16 GEMM rate even without prefill / append rows
  bool attn = false;
  AttentionBenchOptions attn_options;
  bool gemv = false;
  GemvBenchOptions gemv_options;
  bool sampling = false;
  SamplingBenchOptions sampling_options;
  int timeline = 0;      // steps recorded per decode row (0: off)
  int timeline_top = 24;  // kernels listed per recording
  int timeline_order = 0;  // the last step's first and last N kernels in launch order
  std::vector<std::string> ab;  // --small-gemv "sg:NAME" / --split-ring "sr:N" settings (empty: the backend's own)
};

std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return v;
}

// The A/B settings of "s1;s2;..." (empty entries dropped), each as tag + setting: the form the
// decode benchmark's use_setting recognises.
std::vector<std::string> ab_list(const std::string& list, const char* tag) {
  std::vector<std::string> v;
  for (std::string rest = list; !rest.empty();) {
    const size_t semi = rest.find(';');
    if (semi != 0) v.push_back(tag + rest.substr(0, semi));
    rest = semi == std::string::npos ? "" : rest.substr(semi + 1);
  }
  return v;
}

// "a,b,c" as strings; "" and "none" give an empty list.
std::vector<std::string> split_list(const char* s) {
  std::vector<std::string> v;
  if (std::string(s) == "none") return v;
  for (const char* p = s; *p;) {
    const char* e = p;
    while (*e && *e != ',') ++e;
    if (e > p) v.emplace_back(p, e);
    p = *e == ',' ? e + 1 : e;
  }
  return v;
}

// "C+P,C+P": (cached tokens, new tokens) pairs.
std::vector<std::pair<int, int>> parse_pairs(const char* s) {
  std::vector<std::pair<int, int>> v;
  for (const char* p = s; *p;) {
    const int cached = std::atoi(p);
    while (*p && *p != '+' && *p != ',') ++p;
    const int n = *p == '+' ? std::atoi(++p) : 0;
    v.emplace_back(cached, n);
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return v;
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--model") o.model = next();
    else if (a == "--preset") o.preset = next();
    else if (a == "--mix") o.mix = next();
    else if (a == "--ctx") o.ctx = parse_list(next());
    else if (a == "--prefill") o.prefill = parse_list(next());
    else if (a == "--batch") o.batch = parse_list(next());
    else if (a == "--batch-ctx") o.batch_ctx = std::atoi(next());
    else if (a == "--decode-steps") o.decode_steps = std::atoi(next());
    else if (a == "--timeline") o.timeline = std::atoi(next());
    else if (a == "--timeline-top") o.timeline_top = std::atoi(next());
    else if (a == "--timeline-order") o.timeline_order = std::atoi(next());
    else if (a == "--chunk") o.chunk = std::atoi(next());
    else if (a == "--no-graphs") o.graphs = false;
    else if (a == "--tc-prefill") o.tc_prefill = true;
    else if (a == "--full-logits") o.full_logits = true;
    else if (a == "--gemm-peak") o.gemm_peak = true;
    else if (a == "--append") o.append = parse_pairs(next());
    else if (a == "--attn") o.attn = true;
    else if (a == "--attn-ctx") o.attn_options.decode_ctx = parse_list(next());
    else if (a == "--attn-prefill") o.attn_options.prefill = parse_pairs(next());
    else if (a == "--attn-batch") o.attn_options.batch = parse_list(next());
    else if (a == "--attn-reps") o.attn_options.reps = std::max(1, std::atoi(next()));
    else if (a == "--attn-rounds") o.attn_options.rounds = std::max(1, std::atoi(next()));
    else if (a == "--attn-env") {
      o.attn_options.env_variants.clear();
      std::string rest = next();
      for (;;) {
        const size_t semi = rest.find(';');
        o.attn_options.env_variants.push_back(rest.substr(0, semi));
        if (semi == std::string::npos) break;
        rest = rest.substr(semi + 1);
      }
    }
    else if (a == "--attn-shape") {
      const char* v = next();
      if (std::sscanf(v, "%d/%d/%d", &o.attn_options.n_heads, &o.attn_options.n_kv_heads, &o.attn_options.head_dim) != 3) {
        std::fprintf(stderr, "gpu_bench: --attn-shape wants Q/KV/D, e.g. 9/3/64\n");
        return false;
      }
    }
    else if (a == "--gemv") o.gemv = true;
    else if (a == "--small-gemv") o.ab = ab_list(next(), "sg:");  // entries "sg:NAME"
    else if (a == "--split-ring") o.ab = ab_list(next(), "sr:");  // entries "sr:N"
    else if (a == "--gemv-path") o.ab = ab_list(next(), "gp:");  // entries "gp:NAME"
    else if (a == "--act-bits") o.ab = ab_list(next(), "ab:");  // entries "ab:N"
    else if (a == "--sampling") o.sampling = true;
    else if (a == "--sampling-vocab") o.sampling_options.vocab = std::atoi(next());
    else if (a == "--sampling-rows") o.sampling_options.rows = parse_list(next());
    else if (a == "--sampling-count") o.sampling_options.counts = parse_list(next());
    else if (a == "--gemv-filter") o.gemv_options.filter = next();
    else if (a == "--gemv-n") o.gemv_options.n = std::atoi(next());
    else if (a == "--gemv-iters") o.gemv_options.iters = std::atoi(next());
    else if (a == "--gemv-stage-bytes") o.gemv_options.stage_bytes = parse_list(next());
    else if (a == "--gemv-no-legacy") o.gemv_options.skip_legacy = true;
    else if (a == "--gemv-rows") o.gemv_options.rows_shapes = split_list(next());
    else if (a == "--gemv-float") o.gemv_options.float_shapes = split_list(next());
    else {
      std::fprintf(stderr, "gpu_bench: unknown argument '%s'\n", a.c_str());
      return false;
    }
  }
  return true;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A model on the GPU with a KV pool big enough for every measurement.
struct Engine {
  std::shared_ptr<const gguf::File> file;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  std::unique_ptr<KvPool> kv;
  bool full_logits = false;     // Options::full_logits
  std::vector<int32_t> argmax;  // the last forward's argmax per logit row
};

// Runs one forward of `ids` for each sequence (tokens of sequence s at its next positions);
// logits of the last token of each sequence.
void forward(Engine& e, const std::vector<KvSequence*>& seqs, const std::vector<std::vector<int32_t>>& ids,
             std::vector<float>& logits) {
  BatchPlan p;
  p.block_offsets.push_back(0);
  for (size_t s = 0; s < seqs.size(); ++s) {
    KvSequence& q = *seqs[s];
    const int n0 = q.n_tokens(), n = static_cast<int>(ids[s].size());
    if (!q.reserve(n0 + n).is_ok()) {
      std::fprintf(stderr, "gpu_bench: KV pool too small\n");
      std::exit(1);
    }
    for (int i = 0; i < n; ++i) {
      p.token_ids.push_back(ids[s][i]);
      p.seq_index.push_back(static_cast<int32_t>(s));
      p.positions.push_back(n0 + i);
      p.kv_slots.push_back(static_cast<int32_t>(q.slot(n0 + i)));
    }
    p.logit_rows.push_back(static_cast<int32_t>(p.token_ids.size()) - 1);
    p.block_ids.insert(p.block_ids.end(), q.blocks().begin(), q.blocks().end());
    p.block_offsets.push_back(static_cast<int32_t>(p.block_ids.size()));
  }
  e.argmax.resize(p.logit_rows.size());
  logits.resize(e.full_logits ? p.logit_rows.size() * static_cast<size_t>(e.model->config().n_vocab) : 0);
  e.model->forward(p, *e.kv, Model::Outputs{e.full_logits ? logits.data() : nullptr, e.argmax.data()});
  for (size_t s = 0; s < seqs.size(); ++s) seqs[s]->set_n_tokens(seqs[s]->n_tokens() + static_cast<int>(ids[s].size()));
}

std::vector<int32_t> random_ids(int n, int vocab, std::mt19937& rng) {
  std::vector<int32_t> v(n);
  for (int32_t& id : v) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return v;
}

// Fills a sequence to n tokens in chunk-sized forwards; returns seconds.
double fill(Engine& e, KvSequence& seq, int n, int chunk, std::mt19937& rng) {
  std::vector<float> logits;
  const double t0 = now_s();
  for (int done = 0; done < n;) {
    const int step = std::min(chunk, n - done);
    forward(e, {&seq}, {random_ids(step, e.model->config().n_vocab, rng)}, logits);
    done += step;
  }
  return now_s() - t0;
}

int run(const Options& o) {
  auto info = cuda::device_info(0);
  if (!info.is_ok()) {
    std::fprintf(stderr, "gpu_bench: %s\n", info.status().message().c_str());
    return 1;
  }
  auto bw = cuda::copy_bandwidth_gbs(0, size_t{2} << 30);
  const double copy_gbs = bw.is_ok() ? bw.value() : 0.0;
  std::printf("device   %s, %d SMs, %.1f GiB; copy bandwidth %.0f GB/s (2 GiB device-to-device, read+write)\n",
              info->name.c_str(), info->sm_count, info->memory_bytes / double(1 << 30), copy_gbs);
  // The compute ceiling, measured in the same run as the prefill figures held against it.
  double peak_tflops = 0.0;
  if (!o.prefill.empty() || !o.append.empty() || o.gemm_peak) {
    auto peak = cuda::bf16_gemm_tflops(0);
    if (peak.is_ok()) {
      peak_tflops = peak.value();
      std::printf("device   bf16 GEMM %.0f TFLOP/s (cuBLASLt, 8192^3, random bf16 in, fp32 out, median of 10)\n",
                  peak_tflops);
    } else {
      std::printf("device   bf16 GEMM not measured: %s\n", peak.status().message().c_str());
    }
  }

  StepTimeline timeline;
  if (o.timeline > 0) {
    std::string why;
    if (!timeline.start(&why)) {
      std::printf("timeline not recorded: %s\n", why.c_str());
    }
  }

  Engine e;
  e.full_logits = o.full_logits;
  std::string path = o.model;
  if (path.empty()) {
    path = (std::filesystem::temp_directory_path() / ("tern_bench_" + o.preset + "_" + o.mix + ".gguf")).string();
    if (!std::filesystem::exists(path)) {
      const synth::ModelShape* shape = synth::find_preset(o.preset);
      auto mix = synth::parse_quant_mix(o.mix);
      if (shape == nullptr || !mix.is_ok()) {
        std::fprintf(stderr, "gpu_bench: unknown preset '%s' or mix '%s'\n", o.preset.c_str(), o.mix.c_str());
        return 1;
      }
      const double t0 = now_s();
      const Status st = synth::write_model(*shape, mix.value(), synth::SynthOptions{}, path);
      if (!st.is_ok()) {
        std::fprintf(stderr, "gpu_bench: %s\n", st.message().c_str());
        return 1;
      }
      std::printf("synth    %s %s -> %s in %.1f s\n", o.preset.c_str(), o.mix.c_str(), path.c_str(), now_s() - t0);
    }
  }
  auto file = gguf::File::open(path);
  if (!file.is_ok()) {
    std::fprintf(stderr, "gpu_bench: %s\n", file.status().message().c_str());
    return 1;
  }
  e.file = std::make_shared<const gguf::File>(std::move(file).value());
  cuda::CudaBackendOptions bo;
  bo.use_graphs = o.graphs;
  bo.tc_prefill = o.tc_prefill;
  auto backend = cuda::create_backend(bo);
  if (!backend.is_ok()) {
    std::fprintf(stderr, "gpu_bench: %s\n", backend.status().message().c_str());
    return 1;
  }
  e.backend = std::move(backend).value();
  int max_ctx = o.batch_ctx + o.decode_steps + 8;
  for (int c : o.ctx) max_ctx = std::max(max_ctx, c + o.decode_steps + o.timeline + 8);
  for (int p : o.prefill) max_ctx = std::max(max_ctx, p);
  for (const auto& [cached, n] : o.append) max_ctx = std::max(max_ctx, cached + n);
  const int max_batch = o.batch.empty() ? 1 : *std::max_element(o.batch.begin(), o.batch.end());
  const double t_load = now_s();
  ModelOptions mo;
  mo.n_ctx = max_ctx;
  auto model = load_model(e.file, *e.backend, mo);
  if (!model.is_ok()) {
    std::fprintf(stderr, "gpu_bench: %s\n", model.status().message().c_str());
    return 1;
  }
  e.model = std::move(model).value();
  const ModelConfig& c = e.model->config();
  KvPoolConfig kc;
  kc.n_layers = c.n_layers;
  kc.n_kv_heads = c.n_kv_heads;
  kc.head_dim = c.head_dim;
  const int per_seq_blocks = (max_ctx + kc.block_tokens - 1) / kc.block_tokens + 1;
  kc.n_blocks = per_seq_blocks * std::max(max_batch, 1) +
                ((o.batch_ctx + o.decode_steps) / kc.block_tokens + 2) * std::max(max_batch, 1);
  auto kv = KvPool::create(*e.backend, kc);
  if (!kv.is_ok()) {
    std::fprintf(stderr, "gpu_bench: %s\n", kv.status().message().c_str());
    return 1;
  }
  e.kv = std::move(kv).value();
  const double weight_gb = e.model->weight_bytes() * 1e-9;
  std::printf("model    %s (%s): %d layers, d=%d, vocab %d; weights %.3f GB; load %.1f s; KV f16 %.1f KiB/token\n",
              c.name.c_str(), c.arch.c_str(), c.n_layers, c.n_embd, c.n_vocab, weight_gb, now_s() - t_load,
              e.kv->bytes_per_token() / 1024.0);

  std::mt19937 rng(1);
  std::vector<float> logits;
  for (int p : o.prefill) {
    KvSequence seq(*e.kv);
    fill(e, seq, std::min(p, o.chunk), o.chunk, rng);  // warm-up (kernels, graphs, allocations)
    seq.truncate(0);
    const double t = fill(e, seq, p, o.chunk, rng);
    // Projection FLOPs (the logits head runs on one row per chunk and is left out) and causal
    // attention FLOPs (QK^T and PV over an average context of p / 2).
    const double proj_params = double(c.n_layers) * (double(c.n_embd) * c.head_dim * (2.0 * c.n_heads + 2.0 * c.n_kv_heads) +
                                                     3.0 * c.n_embd * c.n_ff);
    const double proj_tflops = 2.0 * proj_params * p / t * 1e-12;
    const double attn_tflops = 4.0 * c.n_layers * c.n_heads * c.head_dim * (p / 2.0) * p / t * 1e-12;
    std::printf("prefill  %6d tokens in %d-token chunks%s: %8.1f ms, %8.0f tok/s; projections %.0f TFLOP/s + "
                "attention %.0f TFLOP/s",
                p, o.chunk, o.tc_prefill ? " (tensor cores)" : "", t * 1e3, p / t, proj_tflops, attn_tflops);
    if (peak_tflops > 0.0) std::printf(" = %.1f%% of the bf16 GEMM rate", 100.0 * (proj_tflops + attn_tflops) / peak_tflops);
    std::printf("\n");
  }
  // The settings to compare (--small-gemv / --split-ring); one empty entry: the backend's own.
  const std::vector<std::string> ab = o.ab.empty() ? std::vector<std::string>{""} : o.ab;
  const int rounds = o.ab.empty() ? 1 : 2;
  auto use_setting = [&](const std::string& spec) {
    if (spec.empty()) return;
    if (spec.rfind("sr:", 0) == 0) {
      cuda::set_attention_split_ring(*e.backend, std::atoi(spec.c_str() + 3));
      return;
    }
    if (spec.rfind("ab:", 0) == 0) {
      const int bits = std::atoi(spec.c_str() + 3);
      if (bits != 8 && bits != 16) {
        std::fprintf(stderr, "gpu_bench: --act-bits: expected 8 or 16, found '%s'\n", spec.c_str() + 3);
        std::exit(2);
      }
      cuda::set_act_bits(*e.backend, bits);
      return;
    }
    if (spec.rfind("gp:", 0) == 0) {
      const std::string v = spec.substr(3);
      const int path = v == "rows" ? 2 : (v == "single" ? 3 : (v == "stream" ? 4 : (v == "prev" ? 5 : 0)));
      if (v != "default" && v != "rows" && v != "single" && v != "stream" && v != "prev") {
        std::fprintf(stderr, "gpu_bench: --gemv-path: expected default / rows / single / stream / prev, found '%s'\n", v.c_str());
        std::exit(2);
      }
      cuda::set_gemv_path(*e.backend, path);
      return;
    }
    // "sg:NAME" (the only other kind of entry)
    const std::string v = spec.substr(3);
    const int pipe = v == "on" || v == "pipe" ? 1 : (v == "default" ? 0 : 2);
    const int pre = v == "on" || v == "pre" ? 1 : (v == "default" ? 0 : 2);
    if (v != "on" && v != "off" && v != "pipe" && v != "pre" && v != "default") {
      std::fprintf(stderr, "gpu_bench: --small-gemv: expected off / on / pipe / pre / default, found '%s'\n", v.c_str());
      std::exit(2);
    }
    cuda::set_small_gemv(*e.backend, pipe, pre);
  };
  auto setting_label = [](const std::string& spec) {
    if (spec.rfind("sg:", 0) == 0) return " [small-gemv " + spec.substr(3) + "]";
    if (spec.rfind("sr:", 0) == 0) return " [split-ring " + spec.substr(3) + "]";
    if (spec.rfind("gp:", 0) == 0) return " [gemv " + spec.substr(3) + "]";
    if (spec.rfind("ab:", 0) == 0) return " [act-bits " + spec.substr(3) + "]";
    return std::string();
  };
  for (int ctx : o.ctx) {
    KvSequence seq(*e.kv);
    fill(e, seq, ctx, o.chunk, rng);
    const std::vector<KvSequence*> seqs = {&seq};
    std::vector<std::vector<double>> times(ab.size());
    for (int round = 0; round < rounds; ++round) {
      for (size_t k = 0; k < ab.size(); ++k) {
        const size_t v = round == 0 ? k : ab.size() - 1 - k;
        use_setting(ab[v]);
        int32_t next = 1;
        for (int w = 0; w < 4; ++w) forward(e, seqs, {{next}}, logits);  // graph capture happens here
        const int steps = o.decode_steps / rounds;
        for (int s = 0; s < steps; ++s) {
          const double t0 = now_s();
          forward(e, seqs, {{next}}, logits);
          times[v].push_back(now_s() - t0);
          next = e.argmax[0];
        }
        if (o.timeline > 0) {
          timeline.take();  // what ran before these steps
          for (int s = 0; s < o.timeline; ++s) {
            forward(e, seqs, {{next}}, logits);
            next = e.argmax[0];
          }
          const std::string label = "ctx " + std::to_string(ctx) + setting_label(ab[v]);
          const std::vector<KernelSpan> spans = timeline.take();
          print_timeline(spans, o.timeline, label, o.timeline_top);
          print_timeline_order(spans, label, o.timeline_order);
        }
        seq.truncate(ctx);  // every setting decodes from the same context
      }
    }
    for (size_t v = 0; v < ab.size(); ++v) {
      std::sort(times[v].begin(), times[v].end());
      const double median = times[v][times[v].size() / 2];
      const double kv_gb = static_cast<double>(e.kv->bytes_per_token()) * (ctx + o.decode_steps / (2 * rounds)) * 1e-9;
      const double gbs = (weight_gb + kv_gb) / median;
      std::printf("decode   ctx %6d%s: %7.3f ms/token, %8.1f tok/s; %.3f GB read/token -> %6.0f GB/s = %4.1f%% of copy bw\n",
                  ctx, setting_label(ab[v]).c_str(), median * 1e3, 1.0 / median, weight_gb + kv_gb, gbs,
                  copy_gbs > 0 ? 100.0 * gbs / copy_gbs : 0.0);
    }
  }
  for (const auto& [cached, n] : o.append) {
    if (n <= 0) continue;
    KvSequence seq(*e.kv);
    fill(e, seq, cached, o.chunk, rng);
    fill(e, seq, std::min(n, o.chunk), o.chunk, rng);  // warm-up at this depth (graphs, allocations)
    seq.truncate(cached);
    std::vector<double> times;
    for (int r = 0; r < 3; ++r) {
      times.push_back(fill(e, seq, n, o.chunk, rng));
      seq.truncate(cached);
    }
    std::sort(times.begin(), times.end());
    std::printf("append   %6d tokens on %6d cached in %d-token chunks%s: %8.1f ms to first token (median of 3), "
                "%8.0f tok/s\n",
                n, cached, o.chunk, o.tc_prefill ? " (tensor cores)" : "", times[1] * 1e3, n / times[1]);
  }
  for (int b : o.batch) {
    std::vector<std::unique_ptr<KvSequence>> owned;
    std::vector<KvSequence*> seqs;
    for (int s = 0; s < b; ++s) {
      owned.push_back(std::make_unique<KvSequence>(*e.kv));
      seqs.push_back(owned.back().get());
      fill(e, *seqs.back(), o.batch_ctx, o.chunk, rng);
    }
    std::vector<std::vector<int32_t>> ids(b, std::vector<int32_t>{1});
    for (const std::string& spec : ab) {
      use_setting(spec);
      for (int w = 0; w < 4; ++w) forward(e, seqs, ids, logits);
      const int steps = std::max(8, o.decode_steps / 2);
      const double t0 = now_s();
      for (int s = 0; s < steps; ++s) forward(e, seqs, ids, logits);
      const double t = (now_s() - t0) / steps;
      std::printf("batch    %3d sequences at ctx %d%s: %7.3f ms/step, %8.1f tok/s total\n", b, o.batch_ctx,
                  setting_label(spec).c_str(), t * 1e3, b / t);
      for (KvSequence* q : seqs) q->truncate(o.batch_ctx);
    }
  }
  const cuda::CudaBackendStats st = cuda::backend_stats(*e.backend);
  std::printf("graphs   %lld steps replayed, %lld eager, %lld graphs built\n", static_cast<long long>(st.steps_graph),
              static_cast<long long>(st.steps_eager), static_cast<long long>(st.graphs_built));
  std::printf("attn ops %lld chunk split, %lld fused decode (%lld early K/V), %lld compact\n",
              static_cast<long long>(st.chunk_splits), static_cast<long long>(st.fused_attentions),
              static_cast<long long>(st.fused_early_kv), static_cast<long long>(st.compact_attentions));
  return 0;
}

}  // namespace
}  // namespace tern::bench

int main(int argc, char** argv) {
  tern::bench::Options o;
  if (!tern::bench::parse(argc, argv, o)) return 2;
  if (o.attn) {
    o.attn_options.tc = o.tc_prefill;
    return tern::bench::run_attention_bench(o.attn_options);
  }
  if (o.gemv) return tern::bench::run_gemv_bench(o.gemv_options);
  if (o.sampling) return tern::bench::run_sampling_bench(o.sampling_options);
  return tern::bench::run(o);
}
