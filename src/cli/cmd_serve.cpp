// `tern serve`: the OpenAI- and Anthropic-compatible HTTP server (server/server.h) over one
// Engine. Prints "tern serve: listening on http://HOST:PORT" on stdout once it accepts requests
// (with --port 0, the port the system picked). SIGINT/SIGTERM: stop accepting, let requests in
// flight finish for up to --shutdown-grace seconds, then end the rest with an explicit error
// event; a second signal ends them at once.
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "cli/backend_choice.h"
#include "cli/commands.h"
#include "cli/kv_tier_flags.h"
#include "cli/model_setup.h"
#include "engine/engine.h"
#include "server/allocator_policy.h"
#include "server/server.h"

namespace tern::cli {
namespace {

struct ServeArgs {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  std::vector<std::string> aliases;
  int parallel = 4;
  int queue = 64;
  int ctx = 8192;
  std::string kv_mem;  // "" = room for --parallel full contexts
  int threads = 0;
  std::string backend = "cpu";  // --backend (cli/backend_choice.h)
  int act_bits = 16;        // --act-bits (cli/backend_choice.h)
  int chunk = 512;
  double max_body_mb = 16;
  int shutdown_grace_s = 30;
  KvTierArgs tiers;
};

// A size with an optional K/M/G suffix (powers of 1024; a trailing "B" or "iB" is allowed).
Result<uint64_t> parse_size(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (...) {
    return error("--kv-mem: expected a size such as 512M or 2G, got '" + text + "'");
  }
  std::string suffix = text.substr(used);
  for (const char* tail : {"iB", "B"})
    if (suffix.size() > 1 && suffix.ends_with(tail)) suffix.resize(suffix.size() - std::string_view(tail).size());
  double scale = 1;
  if (suffix == "K" || suffix == "k") scale = 1024.0;
  else if (suffix == "M" || suffix == "m") scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g") scale = 1024.0 * 1024 * 1024;
  else if (!suffix.empty() && suffix != "B") return error("--kv-mem: unknown size suffix in '" + text + "' (K, M or G)");
  if (!(value > 0) || !std::isfinite(value)) return error("--kv-mem: expected a positive size, got '" + text + "'");
  return static_cast<uint64_t>(value * scale);
}

// The text of the special token whose id the GGUF stores under `key` ("" when absent).
std::string special_token_text(const gguf::File& file, const std::string& key) {
  auto id = file.get_uint_opt(key);
  auto tokens = file.get_array("tokenizer.ggml.tokens", gguf::ValueType::STRING);
  if (!id.is_ok() || !id.value() || !tokens.is_ok() || *id.value() >= tokens.value()->items.size()) return {};
  const std::string* s = tokens.value()->items[*id.value()].as_string();
  return s != nullptr ? *s : std::string();
}

// For models without tokenizer.chat_template: plain ChatML.
constexpr const char* kChatMlTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

sigset_t shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

// Waits up to `timeout` for SIGINT/SIGTERM (blocked in every thread); true when one came.
bool wait_signal(const sigset_t& set, std::chrono::milliseconds timeout) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000) * 1000000L;
  return sigtimedwait(&set, nullptr, &ts) > 0;
}

int serve(const ServeArgs& a) {
  // Before the model loads: startup's large temporaries must not raise malloc's mmap threshold
  // (server/allocator_policy.h; measured: RSS creeps under load otherwise).
  server::apply_serving_allocator_policy();
  // Signals are handled by this thread alone (sigtimedwait); every thread started from here on
  // (engine, thread pool, connections) inherits the mask. A client that hangs up must not kill
  // the process with SIGPIPE either.
  const sigset_t signals = shutdown_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  ModelSetupOptions so;
  so.path = a.model.empty() ? default_model_path() : a.model;
  so.n_threads = a.threads;
  so.backend = a.backend;
  so.act_bits = a.act_bits;
  so.n_ctx = a.ctx;
  so.show_progress = stderr_is_terminal();
  auto loaded = load_for_inference(so);
  if (!loaded.is_ok()) {
    std::fprintf(stderr, "tern serve: %s\n", loaded.status().message().c_str());
    return 1;
  }
  LoadedModel& lm = loaded.value();

  // The pool loaded with the model holds one context; the server sizes its own.
  KvPoolConfig kc = lm.kv->config();
  const uint64_t block_bytes = lm.kv->bytes_per_token() * static_cast<uint64_t>(kc.block_tokens);
  uint64_t kv_bytes = static_cast<uint64_t>(lm.model->n_ctx()) * lm.kv->bytes_per_token() * static_cast<uint64_t>(a.parallel);
  if (!a.kv_mem.empty()) {
    auto parsed = parse_size(a.kv_mem);
    if (!parsed.is_ok()) {
      std::fprintf(stderr, "tern serve: %s\n", parsed.status().message().c_str());
      return 2;
    }
    kv_bytes = parsed.value();
  }
  kc.n_blocks = static_cast<int>(std::max<uint64_t>(1, kv_bytes / block_bytes));
  lm.kv.reset();
  auto pool = KvPool::create(*lm.backend, kc);
  if (!pool.is_ok()) {
    std::fprintf(stderr, "tern serve: KV pool of %d blocks: %s\n", kc.n_blocks, pool.status().message().c_str());
    return 1;
  }

  auto tiers = enable_kv_tiers(a.tiers, lm, *pool.value());
  if (!tiers.is_ok()) {
    std::fprintf(stderr, "tern serve: %s\n", tiers.status().message().c_str());
    return 2;
  }
  if (!tiers.value().empty()) std::fprintf(stderr, "tern serve: KV tiers: %s\n", tiers.value().c_str());

  auto embedded = lm.file->get_string_opt("tokenizer.chat_template");
  std::string template_source = embedded.is_ok() && embedded.value() ? *embedded.value() : std::string();
  if (template_source.empty()) {
    std::fprintf(stderr, "tern serve: %s has no chat template; using ChatML\n", so.path.c_str());
    template_source = kChatMlTemplate;
  }
  auto format = server::ChatFormat::from_template(template_source, special_token_text(*lm.file, "tokenizer.ggml.bos_token_id"),
                                                  special_token_text(*lm.file, "tokenizer.ggml.eos_token_id"));
  if (!format.is_ok()) {
    std::fprintf(stderr, "tern serve: %s\n", format.status().message().c_str());
    return 1;
  }

  EngineOptions eo;
  eo.max_running = a.parallel;
  eo.max_queued = a.queue;
  eo.prefill_chunk_tokens = a.chunk;
  Engine engine(*lm.model, *pool.value(), *lm.tokenizer, eo);

  server::ServerOptions opts;
  opts.model_id = std::filesystem::path(so.path).stem().string();
  opts.model_aliases = a.aliases;
  opts.api_key = a.api_key;
  opts.http.host = a.host;
  opts.http.port = a.port;
  opts.http.max_body_bytes = static_cast<uint64_t>(a.max_body_mb * 1024 * 1024);
  server::Server server(engine, std::move(format).value(), opts);
  if (Status s = server.listen(); !s.is_ok()) {
    std::fprintf(stderr, "tern serve: %s\n", s.message().c_str());
    return 1;
  }
  std::fprintf(stderr,
               "tern serve: model %s on %s, %d-bit activations (context %d tokens, KV %d blocks = %.0f MiB, %d "
               "parallel), load %.2f s\n",
               opts.model_id.c_str(), std::string(lm.backend->name()).c_str(), lm.backend->activation_bits(),
               lm.model->n_ctx(), kc.n_blocks, static_cast<double>(block_bytes) * kc.n_blocks / (1024.0 * 1024.0),
               a.parallel, lm.load_seconds);
  std::thread http_thread([&] { server.run(); });
  std::printf("tern serve: listening on http://%s:%d\n", a.host.c_str(), server.port());
  std::fflush(stdout);

  while (!wait_signal(signals, std::chrono::milliseconds(500))) {
  }
  std::fprintf(stderr, "tern serve: shutting down (%d requests in flight)\n", server.n_active_requests());
  server.stop();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(a.shutdown_grace_s);
  while (server.n_active_requests() > 0 && std::chrono::steady_clock::now() < deadline) {
    if (wait_signal(signals, std::chrono::milliseconds(100))) break;  // a second signal: stop now
  }
  server.cancel_all();  // what still runs ends with a "shutting down" event
  engine.shutdown(/*drain=*/false);
  http_thread.join();
  std::fprintf(stderr, "tern serve: stopped\n");
  return 0;
}

}  // namespace

void register_serve(CLI::App& app, CommandRunner* runner) {
  auto a = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "OpenAI- and Anthropic-compatible HTTP server");
  cmd->add_option("-m,--model", a->model, "GGUF model (default: models/SmolLM2-135M-Instruct.Q4_1.gguf)");
  cmd->add_option("--host", a->host, "address to bind (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", a->port, "port (0 = any free port; the chosen one is printed)")->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", a->api_key, "require this key (Authorization: Bearer KEY or x-api-key: KEY)")
      ->envname("TERN_API_KEY");
  cmd->add_option("--alias", a->aliases, "another model name to accept (repeatable; '*' accepts any name)");
  cmd->add_option("--parallel", a->parallel, "requests decoding at once")->check(CLI::Range(1, 1024));
  cmd->add_option("--queue", a->queue, "requests waiting beyond --parallel before 429s")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-c,--ctx", a->ctx, "context per request in tokens (0 = the model's own)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--kv-mem", a->kv_mem, "KV cache size, e.g. 2G (default: --parallel full contexts)");
  add_kv_tier_flags(*cmd, a->tiers);
  cmd->add_option("-t,--threads", a->threads, "compute threads (default: all cores)")->check(CLI::NonNegativeNumber);
  add_backend_flags(*cmd, a->backend, a->act_bits);
  cmd->add_option("--chunk", a->chunk, "prefill chunk in tokens")->check(CLI::PositiveNumber);
  cmd->add_option("--max-body-mb", a->max_body_mb, "largest request body in MiB")->check(CLI::Range(0.001, 4096.0));
  cmd->add_option("--shutdown-grace", a->shutdown_grace_s, "seconds requests in flight may finish after a signal")
      ->check(CLI::Range(0, 3600));
  cmd->callback([runner, a] { *runner = [a] { return serve(*a); }; });
}

}  // namespace tern::cli
