// tern bench serve: the serving benchmark. Several recorded agent sessions
// (shared/data/agentic/swe-sessions.jsonl) replay at once through one in-process Engine, each as
// a client thread that sends its turns one after another (teacher-forced prompts, as in
// `tern bench replay`), the way concurrent agents drive a server. Then the same sessions run one
// by one through a fresh Engine and pool, for comparison.
//
// Reported per mode: wall time, generated tokens and aggregate tok/s (generated / wall, prefill
// included), aggregate decode tok/s (tokens after each turn's first over the time at least one
// stream was decoding: what batching the decoders buys), TTFT p50/p99 (submit to first token,
// queueing included), per-stream decode tok/s (each turn's tokens after the first over its own
// decode time), the cache hit rate (cached / prompt tokens), forwards and mean tokens per
// forward, preemptions. Greedy output must not depend on batching, so the two modes' tokens are
// compared turn by turn.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli/agentic_sessions.h"
#include "cli/backend_choice.h"
#include "cli/commands.h"
#include "cli/model_setup.h"
#include "engine/engine.h"

namespace tern::cli {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// CPU time of the whole process (engine and client threads): on a shared machine it shows the
// work a mode did apart from the time it waited for a core.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct ServeArgs {
  std::string model;
  std::string sessions_path;
  int n_sessions = 4;
  int max_turns = 3;          // per session
  int max_tokens = 32;        // per turn
  int threads = 0;            // 0 = all cores
  std::string backend = "cpu";  // --backend (cli/backend_choice.h)
  int act_bits = 16;        // --act-bits (cli/backend_choice.h)
  int ctx = 4096;             // tokens; sessions are cut off where a turn no longer fits
  int prefill_chunk = 512;    // EngineOptions::prefill_chunk_tokens
  bool speculate = true;      // n-gram drafting in the engine
  bool sequential = true;     // also run the sessions one by one
  bool json = false;
};

// A session's teacher-forced turn prompts.
struct Script {
  std::string id;
  std::vector<std::vector<int32_t>> prompts;
};

struct TurnResult {
  int session = 0, turn = 0;
  bool ok = false;
  std::string error;
  GenStats stats;
  std::vector<int32_t> tokens;
  double finished_s = 0;  // steady clock when kFinished arrived
};

struct RunResult {
  std::vector<TurnResult> turns;  // by session, then turn
  double wall_seconds = 0;
  double cpu_seconds = 0;
  int64_t steps = 0, step_tokens = 0, preempted = 0;
};


Result<std::vector<Script>> build_scripts(const LoadedModel& lm, const ServeArgs& a) {
  TERN_ASSIGN_OR_RETURN(const chat::ChatTemplate tmpl, load_chat_template(*lm.file));
  const std::string path = a.sessions_path.empty() ? default_sessions_path() : a.sessions_path;
  TERN_ASSIGN_OR_RETURN(const std::vector<Conversation> convs, read_sessions(path, a.n_sessions));
  std::vector<Script> scripts;
  for (const Conversation& conv : convs) {
    Script s{conv.id, {}};
    for (const size_t k : user_turns(conv)) {
      if (static_cast<int>(s.prompts.size()) >= a.max_turns) break;
      TERN_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, turn_prompt(tmpl, *lm.tokenizer, conv, k));
      if (static_cast<int>(prompt.size()) + a.max_tokens > lm.model->n_ctx()) break;  // cut off at the context
      s.prompts.push_back(std::move(prompt));
    }
    if (!s.prompts.empty()) scripts.push_back(std::move(s));
  }
  if (scripts.empty()) return error("no session has a turn that fits a context of " + std::to_string(lm.model->n_ctx()));
  return scripts;
}

// One client: the session's turns in order, each submitted when the previous one has finished.
void run_client(Engine& engine, const Script& script, int session, const ServeArgs& a, std::vector<TurnResult>& out) {
  for (size_t t = 0; t < script.prompts.size(); ++t) {
    TurnResult r;
    r.session = session;
    r.turn = static_cast<int>(t);
    auto done = std::make_shared<std::promise<void>>();
    EngineRequest req;
    req.prompt = script.prompts[t];
    req.params.max_tokens = a.max_tokens;
    req.params.speculate = a.speculate;
    req.on_event = [&r, done](EngineEvent&& e) {
      if (e.kind == EngineEvent::Kind::kFinished) {
        r.ok = true;
        r.stats = e.stats;
        r.tokens = std::move(e.tokens);
        r.finished_s = now_seconds();
        done->set_value();
      } else if (e.kind == EngineEvent::Kind::kError) {
        r.error = e.text;
        done->set_value();
      }
    };
    Status s = engine.submit(std::move(req));
    if (!s.is_ok()) {
      r.error = s.message();
    } else {
      done->get_future().wait();
    }
    const bool ok = r.ok;
    out.push_back(std::move(r));
    if (!ok) return;
  }
}

// Runs every script through a fresh pool and Engine: all at once (clients on their own
// threads) or one after another.
Result<RunResult> run_mode(LoadedModel& lm, const KvPoolConfig& kc, const std::vector<Script>& scripts,
                           const ServeArgs& a, bool concurrent) {
  TERN_ASSIGN_OR_RETURN(std::unique_ptr<KvPool> pool, KvPool::create(*lm.backend, kc));
  EngineOptions eo;
  eo.max_running = concurrent ? static_cast<int>(scripts.size()) : 1;
  eo.max_queued = static_cast<int>(scripts.size()) + 1;
  eo.prefill_chunk_tokens = a.prefill_chunk;
  RunResult result;
  std::vector<std::vector<TurnResult>> per_client(scripts.size());
  {
    Engine engine(*lm.model, *pool, *lm.tokenizer, eo);
    const double t0 = now_seconds(), c0 = cpu_seconds();
    if (concurrent) {
      std::vector<std::thread> clients;
      for (size_t s = 0; s < scripts.size(); ++s)
        clients.emplace_back([&, s] { run_client(engine, scripts[s], static_cast<int>(s), a, per_client[s]); });
      for (auto& c : clients) c.join();
    } else {
      for (size_t s = 0; s < scripts.size(); ++s) run_client(engine, scripts[s], static_cast<int>(s), a, per_client[s]);
    }
    result.wall_seconds = now_seconds() - t0;
    result.cpu_seconds = cpu_seconds() - c0;
    result.steps = engine.metrics().steps.load();
    result.step_tokens = engine.metrics().step_tokens.load();
    result.preempted = engine.metrics().requests_preempted.load();
  }
  for (auto& c : per_client)
    for (auto& t : c) {
      if (!t.ok) return error("session " + scripts[t.session].id + " turn " + std::to_string(t.turn) + ": " + t.error);
      result.turns.push_back(std::move(t));
    }
  return result;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double rank = p * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(rank);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

struct Summary {
  int turns = 0;
  int64_t prompt = 0, cached = 0, generated = 0;
  double wall_s = 0, cpu_s = 0, aggregate_tok_s = 0, decode_busy_s = 0, aggregate_decode_tok_s = 0, ttft_p50 = 0, ttft_p99 = 0, stream_p50 = 0, stream_mean = 0;
  double hit_rate = 0, tokens_per_forward = 0;
  int64_t forwards = 0, preempted = 0;
};

Summary summarise(const RunResult& r) {
  Summary s;
  std::vector<double> ttft, stream;
  std::vector<std::pair<double, double>> decoding;  // [start, end) of each turn's decode
  int64_t decoded = 0;
  for (const TurnResult& t : r.turns) {
    ++s.turns;
    s.prompt += t.stats.prompt_tokens;
    s.cached += t.stats.cached_tokens;
    s.generated += t.stats.generated_tokens;
    ttft.push_back(t.stats.time_to_first_token_seconds);
    // The first token comes with the prefill; the rest are the stream's decode.
    if (t.stats.generated_tokens > 1 && t.stats.decode_seconds > 0) {
      stream.push_back((t.stats.generated_tokens - 1) / t.stats.decode_seconds);
      decoding.emplace_back(t.finished_s - t.stats.decode_seconds, t.finished_s);
      decoded += t.stats.generated_tokens - 1;
    }
  }
  // The union of the decode intervals: time in which some stream was decoding.
  std::sort(decoding.begin(), decoding.end());
  double end = -1e300;
  for (const auto& [a, b] : decoding) {
    s.decode_busy_s += std::max(0.0, b - std::max(a, end));
    end = std::max(end, b);
  }
  s.aggregate_decode_tok_s = s.decode_busy_s > 0 ? decoded / s.decode_busy_s : 0.0;
  s.wall_s = r.wall_seconds;
  s.cpu_s = r.cpu_seconds;
  s.aggregate_tok_s = r.wall_seconds > 0 ? s.generated / r.wall_seconds : 0.0;
  s.ttft_p50 = percentile(ttft, 0.5);
  s.ttft_p99 = percentile(ttft, 0.99);
  s.stream_p50 = percentile(stream, 0.5);
  for (double x : stream) s.stream_mean += x / static_cast<double>(stream.size());
  s.hit_rate = s.prompt > 0 ? static_cast<double>(s.cached) / static_cast<double>(s.prompt) : 0.0;
  s.forwards = r.steps;
  s.tokens_per_forward = r.steps > 0 ? static_cast<double>(r.step_tokens) / static_cast<double>(r.steps) : 0.0;
  s.preempted = r.preempted;
  return s;
}

int count_identical(const RunResult& a, const RunResult& b) {
  int same = 0;
  for (size_t i = 0; i < std::min(a.turns.size(), b.turns.size()); ++i) same += a.turns[i].tokens == b.turns[i].tokens;
  return same;
}

void print_row(const char* mode, const Summary& s) {
  std::printf("| %s | %d | %.1f | %.1f | %ld | %.2f | %.1f | %.2f | %.2f | %.1f | %.1f | %.1f%% | %ld | %.1f | %ld |\n", mode,
              s.turns, s.wall_s, s.cpu_s, static_cast<long>(s.generated), s.aggregate_tok_s, s.aggregate_decode_tok_s, s.ttft_p50, s.ttft_p99, s.stream_p50,
              s.stream_mean, 100.0 * s.hit_rate, static_cast<long>(s.forwards), s.tokens_per_forward,
              static_cast<long>(s.preempted));
}

void print_json_summary(const char* mode, const Summary& s, bool last) {
  std::printf("  \"%s\": {\"turns\": %d, \"wall_s\": %.3f, \"cpu_s\": %.3f, \"prompt_tokens\": %ld, \"cached_tokens\": %ld, "
              "\"generated_tokens\": %ld, \"aggregate_tok_s\": %.2f, \"aggregate_decode_tok_s\": %.2f, "
              "\"decode_busy_s\": %.3f, \"ttft_p50_s\": %.4f, \"ttft_p99_s\": %.4f, "
              "\"stream_decode_tok_s_p50\": %.2f, \"stream_decode_tok_s_mean\": %.2f, \"cache_hit_rate\": %.4f, "
              "\"forwards\": %ld, \"tokens_per_forward\": %.2f, \"preemptions\": %ld}%s\n",
              mode, s.turns, s.wall_s, s.cpu_s, static_cast<long>(s.prompt), static_cast<long>(s.cached),
              static_cast<long>(s.generated), s.aggregate_tok_s, s.aggregate_decode_tok_s, s.decode_busy_s, s.ttft_p50,
              s.ttft_p99, s.stream_p50, s.stream_mean,
              s.hit_rate, static_cast<long>(s.forwards), s.tokens_per_forward, static_cast<long>(s.preempted),
              last ? "" : ",");
}

int run_serve_bench(const ServeArgs& a) {
  ModelSetupOptions so;
  so.path = a.model.empty() ? default_model_path() : a.model;
  so.n_threads = a.threads;
  so.backend = a.backend;
  so.act_bits = a.act_bits;
  so.n_ctx = a.ctx;
  auto loaded = load_for_inference(so);
  if (!loaded.is_ok()) {
    std::fprintf(stderr, "tern bench serve: %s\n", loaded.status().message().c_str());
    return 1;
  }
  LoadedModel& lm = loaded.value();
  auto scripts = build_scripts(lm, a);
  if (!scripts.is_ok()) {
    std::fprintf(stderr, "tern bench serve: %s\n", scripts.status().message().c_str());
    return 1;
  }
  // Room for every session's full context at once, as `tern serve --parallel N` sizes its pool.
  KvPoolConfig kc = lm.kv->config();
  kc.n_blocks = static_cast<int>(scripts.value().size()) * ((lm.model->n_ctx() + kc.block_tokens - 1) / kc.block_tokens);
  lm.kv.reset();
  int64_t prompt_tokens = 0;
  int n_turns = 0;
  for (const Script& s : scripts.value()) {
    n_turns += static_cast<int>(s.prompts.size());
    for (const auto& p : s.prompts) prompt_tokens += static_cast<int64_t>(p.size());
  }
  std::fprintf(stderr, "tern bench serve: %zu sessions, %d turns, %ld prompt tokens, %d threads\n",
               scripts.value().size(), n_turns, static_cast<long>(prompt_tokens), lm.n_threads);

  std::fprintf(stderr, "batched run...\n");
  auto batched = run_mode(lm, kc, scripts.value(), a, true);
  if (!batched.is_ok()) {
    std::fprintf(stderr, "tern bench serve: batched: %s\n", batched.status().message().c_str());
    return 1;
  }
  std::optional<RunResult> sequential;
  if (a.sequential) {
    std::fprintf(stderr, "sequential run...\n");
    auto seq = run_mode(lm, kc, scripts.value(), a, false);
    if (!seq.is_ok()) {
      std::fprintf(stderr, "tern bench serve: sequential: %s\n", seq.status().message().c_str());
      return 1;
    }
    sequential = std::move(seq).value();
  }
  const Summary b = summarise(batched.value());
  const Summary q = sequential ? summarise(*sequential) : Summary{};
  const int identical = sequential ? count_identical(batched.value(), *sequential) : 0;
  if (a.json) {
    std::printf("{\"model\": \"%s\", \"sessions\": %zu, \"max_turns\": %d, \"max_tokens\": %d, \"ctx\": %d, "
                "\"threads\": %d, \"speculate\": %s,\n",
                so.path.c_str(), scripts.value().size(), a.max_turns, a.max_tokens, lm.model->n_ctx(), lm.n_threads,
                a.speculate ? "true" : "false");
    print_json_summary("batched", b, !sequential);
    if (sequential) {
      print_json_summary("sequential", q, false);
      std::printf("  \"aggregate_speedup\": %.3f, \"aggregate_decode_speedup\": %.3f, \"identical_turns\": %d}\n",
                  q.aggregate_tok_s > 0 ? b.aggregate_tok_s / q.aggregate_tok_s : 0.0,
                  q.aggregate_decode_tok_s > 0 ? b.aggregate_decode_tok_s / q.aggregate_decode_tok_s : 0.0, identical);
    } else {
      std::printf("}\n");
    }
    return 0;
  }
  std::printf("%zu sessions x up to %d turns, max %d tokens per turn, ctx %d, %d threads, speculation %s\n\n",
              scripts.value().size(), a.max_turns, a.max_tokens, lm.model->n_ctx(), lm.n_threads,
              a.speculate ? "on" : "off");
  std::printf("| mode | turns | wall s | CPU s | generated | aggregate tok/s | aggregate decode tok/s | TTFT p50 s | TTFT p99 s | stream decode tok/s p50 "
              "| mean | cache hit | forwards | tokens/forward | preempted |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  print_row("batched", b);
  if (sequential) {
    print_row("sequential", q);
    std::printf("\nbatched / sequential: aggregate tok/s %.2fx, aggregate decode tok/s %.2fx; greedy tokens identical in "
                "%d of %d turns\n",
                q.aggregate_tok_s > 0 ? b.aggregate_tok_s / q.aggregate_tok_s : 0.0,
                q.aggregate_decode_tok_s > 0 ? b.aggregate_decode_tok_s / q.aggregate_decode_tok_s : 0.0, identical,
                b.turns);
  }
  return 0;
}

}  // namespace

void register_bench_serve(CLI::App& bench, CommandRunner* runner) {
  auto args = std::make_shared<ServeArgs>();
  auto* cmd = bench.add_subcommand("serve", "replay agent sessions concurrently through the engine (continuous batching)");
  cmd->add_option("-m,--model", args->model, "GGUF model with a chat template (default: the default model)");
  cmd->add_option("--sessions", args->sessions_path, "sessions JSONL (default: ../shared/data/agentic/swe-sessions.jsonl)");
  cmd->add_option("--n-sessions", args->n_sessions, "sessions replayed at once, from the first")->check(CLI::PositiveNumber);
  cmd->add_option("--max-turns", args->max_turns, "turns per session at most")->check(CLI::PositiveNumber);
  cmd->add_option("--max-tokens", args->max_tokens, "tokens generated per turn")->check(CLI::Range(1, 4096));
  cmd->add_option("-t,--threads", args->threads, "threads (default: all cores)")->check(CLI::NonNegativeNumber);
  add_backend_flags(*cmd, args->backend, args->act_bits);
  cmd->add_option("-c,--ctx", args->ctx, "context in tokens; sessions are cut off there")->check(CLI::PositiveNumber);
  cmd->add_option("--prefill-chunk", args->prefill_chunk, "prompt tokens per step")->check(CLI::PositiveNumber);
  cmd->add_flag("!--no-speculation", args->speculate, "turn n-gram drafting off");
  cmd->add_flag("!--no-sequential", args->sequential, "skip the one-by-one comparison run");
  cmd->add_flag("--json", args->json, "print JSON");
  cmd->callback([runner, args] { *runner = [args] { return run_serve_bench(*args); }; });
}

}  // namespace tern::cli
