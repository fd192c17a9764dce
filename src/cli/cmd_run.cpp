// tern run: generate from a raw prompt. Only generated text goes to stdout (streamed); stats go
// to stderr.
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cli/backend_choice.h"
#include "cli/model_setup.h"
#include "engine/session.h"

namespace tern::cli {
namespace {

struct RunArgs {
  std::string model;
  std::string prompt;
  int n_predict = 128;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repeat_penalty = 1.0f;
  uint64_t seed = 0xC0FFEE;
  int threads = 0;
  int ctx = 4096;
  int chunk = 512;
  std::string kv_type = "f16";
  std::string backend = "cpu";
  int act_bits = 16;        // --act-bits (cli/backend_choice.h)
  bool parse_special = true;
};

int run(const RunArgs& a) {
  const auto kv_dtype = dtype_from_name(a.kv_type);
  if (!kv_dtype || (*kv_dtype != DType::F16 && *kv_dtype != DType::F32)) {
    std::fprintf(stderr, "tern run: --kv-type must be f16 or f32, got '%s'\n", a.kv_type.c_str());
    return 2;
  }
  ModelSetupOptions so;
  so.path = a.model.empty() ? default_model_path() : a.model;
  so.n_threads = a.threads;
  so.backend = a.backend;
  so.act_bits = a.act_bits;
  so.n_ctx = a.ctx;
  so.kv_dtype = *kv_dtype;
  so.show_progress = stderr_is_terminal();
  auto loaded = load_for_inference(so);
  if (!loaded.is_ok()) {
    std::fprintf(stderr, "tern run: %s\n", loaded.status().message().c_str());
    return 1;
  }
  LoadedModel& lm = loaded.value();
  const tok::Tokenizer& tok = *lm.tokenizer;
  std::vector<int32_t> prompt = tok.encode(a.prompt, /*add_bos_eos=*/true, a.parse_special);
  if (prompt.empty()) {
    std::fprintf(stderr, "tern run: the prompt is empty after tokenization\n");
    return 2;
  }
  if (static_cast<int>(prompt.size()) + 1 > lm.model->n_ctx()) {
    std::fprintf(stderr, "tern run: the prompt has %zu tokens; the context holds %d (raise --ctx)\n", prompt.size(),
                 lm.model->n_ctx());
    return 2;
  }

  Session session(*lm.model, *lm.kv, lm.tokenizer.get());
  GenerateOptions go;
  go.max_tokens = std::min(a.n_predict, lm.model->n_ctx() - static_cast<int>(prompt.size()));
  go.prefill_chunk_tokens = a.chunk;
  go.sampling.temperature = a.temperature;
  go.sampling.top_k = a.top_k;
  go.sampling.top_p = a.top_p;
  go.sampling.min_p = a.min_p;
  go.sampling.repeat_penalty = a.repeat_penalty;
  go.sampling.seed = a.seed;
  go.on_text = [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
  const bool progress = stderr_is_terminal() && prompt.size() > 256;
  if (progress) {
    go.on_prefill_progress = [](int done, int total) {
      std::fprintf(stderr, "\rprefill %d/%d", done, total);
      if (done == total) std::fprintf(stderr, "\r\033[K");
    };
  }
  auto gen = session.generate(prompt, go);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!gen.is_ok()) {
    std::fprintf(stderr, "tern run: %s\n", gen.status().message().c_str());
    return 1;
  }
  const GenStats& s = gen.value().stats;
  const double prefill_tps = s.prefill_seconds > 0 ? (s.prompt_tokens - s.cached_tokens) / s.prefill_seconds : 0.0;
  const int decoded = std::max(0, s.generated_tokens - 1);  // the first token comes from the prefill
  const double decode_tps = s.decode_seconds > 0 ? decoded / s.decode_seconds : 0.0;
  std::fprintf(stderr,
               "\nprompt: %d tokens, %.1f tok/s | decode: %d tokens, %.1f tok/s | load %.2f s | %s, %d threads, "
               "%d-bit activations | stop: %s\n",
               s.prompt_tokens, prefill_tps, s.generated_tokens, decode_tps, lm.load_seconds,
               std::string(lm.backend->name()).c_str(), lm.n_threads, lm.backend->activation_bits(),
               stop_reason_name(s.stop_reason));
  return 0;
}

}  // namespace

void register_run(CLI::App& app, CommandRunner* runner) {
  auto args = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand("run", "generate text from a prompt (stdout: generated text; stderr: stats)");
  cmd->add_option("-m,--model", args->model, "GGUF model (default: models/SmolLM2-135M-Instruct.Q4_1.gguf)");
  cmd->add_option("-p,--prompt", args->prompt, "prompt text (special tokens like <|im_start|> are recognised)")->required();
  cmd->add_option("-n,--n-predict", args->n_predict, "tokens to generate at most")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--temp", args->temperature, "temperature (0 = greedy)")->check(CLI::Range(0.0f, 100.0f));
  cmd->add_option("--top-k", args->top_k, "top-k (0 = off)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", args->top_p, "top-p (1 = off)")->check(CLI::Range(0.0f, 1.0f));
  cmd->add_option("--min-p", args->min_p, "min-p (0 = off)")->check(CLI::Range(0.0f, 1.0f));
  cmd->add_option("--repeat-penalty", args->repeat_penalty, "repetition penalty (1 = off)")->check(CLI::PositiveNumber);
  cmd->add_option("--seed", args->seed, "sampling seed");
  cmd->add_option("-t,--threads", args->threads, "threads (default: all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_option("-c,--ctx", args->ctx, "context size in tokens (0 = the model's own)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--chunk", args->chunk, "prefill chunk size in tokens")->check(CLI::PositiveNumber);
  cmd->add_option("--kv-type", args->kv_type, "KV cache type: f16 or f32");
  add_backend_flags(*cmd, args->backend, args->act_bits);
  cmd->add_flag("!--no-special", args->parse_special, "treat special-token text in the prompt as plain text");
  cmd->callback([runner, args] { *runner = [args] { return run(*args); }; });
}

}  // namespace tern::cli
