// tern chat: an interactive multi-turn chat that keeps its KV between turns, so each turn
// prefills only its new tokens. The conversation is rendered with the model's chat template every
// turn; the session's prefix reuse finds the previous turn's tokens. Commands: /reset, /stats,
// /quit. Ctrl-C stops a generation without leaving the REPL (at the prompt it exits).
#include <atomic>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>

#include "chat/chat_template.h"
#include "cli/backend_choice.h"
#include "cli/commands.h"
#include "cli/kv_tier_flags.h"
#include "cli/model_setup.h"
#include "engine/session.h"
#include "spec/cost_aware_drafter.h"
#include "spec/ngram_drafter.h"

namespace tern::cli {
namespace {

std::atomic<bool> g_interrupt{false};
std::atomic<bool> g_generating{false};

void on_sigint(int) {
  if (!g_generating.load()) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
    return;
  }
  g_interrupt.store(true);
}

struct ChatArgs {
  std::string model;
  std::string system;
  int n_predict = 512;
  float temperature = 0.0f;
  uint64_t seed = 0xC0FFEE;
  int threads = 0;
  std::string backend = "cpu";  // --backend (cli/backend_choice.h)
  int act_bits = 16;        // --act-bits (cli/backend_choice.h)
  int ctx = 8192;
  bool speculate = true;
  KvTierArgs tiers;
};

chat::Value message(const std::string& role, const std::string& content) {
  chat::Object o;
  o.set("role", chat::Value(role));
  o.set("content", chat::Value(content));
  return chat::Value::object(std::move(o));
}

int run_chat(const ChatArgs& a) {
  ModelSetupOptions so;
  so.path = a.model.empty() ? default_model_path() : a.model;
  so.n_threads = a.threads;
  so.backend = a.backend;
  so.act_bits = a.act_bits;
  so.n_ctx = a.ctx;
  so.show_progress = stderr_is_terminal();
  auto loaded = load_for_inference(so);
  if (!loaded.is_ok()) {
    std::fprintf(stderr, "tern chat: %s\n", loaded.status().message().c_str());
    return 1;
  }
  LoadedModel& lm = loaded.value();
  auto source = lm.file->get_string("tokenizer.chat_template");
  if (!source.is_ok()) {
    std::fprintf(stderr, "tern chat: the model has no chat template (tokenizer.chat_template)\n");
    return 1;
  }
  auto tmpl = chat::ChatTemplate::parse(source.value());
  if (!tmpl.is_ok()) {
    std::fprintf(stderr, "tern chat: chat template: %s\n", tmpl.status().message().c_str());
    return 1;
  }
  auto tiers = enable_kv_tiers(a.tiers, lm, *lm.kv);
  if (!tiers.is_ok()) {
    std::fprintf(stderr, "tern chat: %s\n", tiers.status().message().c_str());
    return 2;
  }
  if (!tiers.value().empty()) std::fprintf(stderr, "tern chat: KV tiers: %s\n", tiers.value().c_str());
  const tok::Tokenizer& tok = *lm.tokenizer;
  Session session(*lm.model, *lm.kv, &tok);
  std::vector<chat::Value> history;
  if (!a.system.empty()) history.push_back(message("system", a.system));
  GenStats last;
  std::signal(SIGINT, on_sigint);
  const bool interactive = isatty(0) != 0;
  std::string line;
  for (;;) {
    if (interactive) std::fputs("> ", stdout), std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    if (line == "/quit" || line == "/exit") break;
    if (line == "/reset") {
      history.clear();
      if (!a.system.empty()) history.push_back(message("system", a.system));
      session.reset();
      std::fprintf(stderr, "[conversation reset]\n");
      continue;
    }
    if (line == "/stats") {
      std::fprintf(stderr, "[last turn: prompt %d, cached %d, new %d, generated %d, prefill %.2f s, decode %.2f s, drafts %d/%d; KV holds %zu tokens]\n",
                   last.prompt_tokens, last.cached_tokens, last.prompt_tokens - last.cached_tokens,
                   last.generated_tokens, last.prefill_seconds, last.decode_seconds, last.drafts_accepted,
                   last.drafts_proposed, session.tokens().size());
      continue;
    }
    history.push_back(message("user", line));
    chat::ChatRequest req;
    req.messages = chat::Value::array(history);
    req.add_generation_prompt = true;
    req.bos_token = std::string(tok.piece(tok.bos_id()));
    req.eos_token = std::string(tok.piece(tok.eos_id()));
    auto text = chat::apply_chat_template(tmpl.value(), req);
    if (!text.is_ok()) {
      std::fprintf(stderr, "tern chat: %s\n", text.status().message().c_str());
      history.pop_back();
      continue;
    }
    const std::vector<int32_t> prompt = tok.encode(text.value(), true, true);
    NgramDrafter ngram;
    CostAwareDrafter governed(ngram);  // drafts only while it pays
    GenerateOptions o;
    o.max_tokens = std::min(a.n_predict, lm.model->n_ctx() - static_cast<int>(prompt.size()));
    o.sampling.temperature = a.temperature;
    o.sampling.seed = a.seed;
    o.drafter = a.speculate ? &governed : nullptr;
    o.cancel = &g_interrupt;
    o.on_text = [](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    };
    if (o.max_tokens <= 0) {
      std::fprintf(stderr, "tern chat: the conversation (%zu tokens) fills the context of %d; /reset to start over\n",
                   prompt.size(), lm.model->n_ctx());
      history.pop_back();
      continue;
    }
    g_interrupt.store(false);
    g_generating.store(true);
    auto gen = session.generate(prompt, o);
    g_generating.store(false);
    std::fputc('\n', stdout);
    if (!gen.is_ok()) {
      std::fprintf(stderr, "tern chat: %s\n", gen.status().message().c_str());
      history.pop_back();
      continue;
    }
    last = gen.value().stats;
    history.push_back(message("assistant", gen.value().text));
    const double prefill_tps = last.prefill_seconds > 0 ? (last.prompt_tokens - last.cached_tokens) / last.prefill_seconds : 0;
    const double decode_tps = last.decode_seconds > 0 ? std::max(0, last.generated_tokens - 1) / last.decode_seconds : 0;
    std::fprintf(stderr, "[%d cached + %d new tokens, %.0f tok/s prefill | %d generated, %.1f tok/s%s]\n",
                 last.cached_tokens, last.prompt_tokens - last.cached_tokens, prefill_tps, last.generated_tokens,
                 decode_tps, last.stop_reason == StopReason::kCancelled ? " | interrupted" : "");
  }
  return 0;
}

}  // namespace

void register_chat(CLI::App& app, CommandRunner* runner) {
  auto args = std::make_shared<ChatArgs>();
  auto* cmd = app.add_subcommand("chat", "interactive multi-turn chat that keeps its KV between turns");
  cmd->add_option("-m,--model", args->model, "GGUF model (default: the default model)");
  cmd->add_option("-s,--system", args->system, "system prompt");
  cmd->add_option("-n,--n-predict", args->n_predict, "tokens per answer at most")->check(CLI::PositiveNumber);
  cmd->add_option("--temp", args->temperature, "temperature (0 = greedy)")->check(CLI::Range(0.0f, 100.0f));
  cmd->add_option("--seed", args->seed, "sampling seed");
  cmd->add_option("-t,--threads", args->threads, "threads (default: all cores)")->check(CLI::NonNegativeNumber);
  add_backend_flags(*cmd, args->backend, args->act_bits);
  cmd->add_option("-c,--ctx", args->ctx, "context size in tokens")->check(CLI::PositiveNumber);
  cmd->add_flag("!--no-speculate", args->speculate, "turn off n-gram speculative decoding");
  add_kv_tier_flags(*cmd, args->tiers);
  cmd->callback([runner, args] { *runner = [args] { return run_chat(*args); }; });
}

}  // namespace tern::cli
