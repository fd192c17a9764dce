#include "cli/model_setup.h"

#include "cli/backend_choice.h"

#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

namespace tern::cli {

int default_thread_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

bool stderr_is_terminal() { return isatty(STDERR_FILENO) != 0; }

Result<LoadedModel> load_for_inference(const ModelSetupOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  LoadedModel lm;
  if (o.show_progress) std::fprintf(stderr, "loading %s ...", o.path.c_str());
  TERN_ASSIGN_OR_RETURN(gguf::File file, gguf::File::open(o.path));
  lm.file = std::make_shared<const gguf::File>(std::move(file));
  if (o.need_tokenizer) {
    auto tokenizer = tok::Tokenizer::from_gguf(*lm.file);
    if (!tokenizer.is_ok()) return error("tokenizer of '" + o.path + "': " + tokenizer.status().message());
    lm.tokenizer = std::move(tokenizer).value();
  }
  lm.n_threads = o.n_threads > 0 ? o.n_threads : default_thread_count();
  TERN_ASSIGN_OR_RETURN(lm.backend, make_backend(o.backend, lm.n_threads, o.act_bits));
  ModelOptions mo;
  mo.n_ctx = o.n_ctx;
  TERN_ASSIGN_OR_RETURN(lm.model, load_model(lm.file, *lm.backend, mo));
  const ModelConfig& c = lm.model->config();
  KvPoolConfig kc;
  kc.n_layers = c.n_layers;
  kc.n_kv_heads = c.n_kv_heads;
  kc.head_dim = c.head_dim;
  kc.dtype = o.kv_dtype;
  kc.n_blocks = (lm.model->n_ctx() + kc.block_tokens - 1) / kc.block_tokens;
  TERN_ASSIGN_OR_RETURN(lm.kv, KvPool::create(*lm.backend, kc));
  lm.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (o.show_progress) std::fprintf(stderr, "\r\033[K");
  return lm;
}

}  // namespace tern::cli
