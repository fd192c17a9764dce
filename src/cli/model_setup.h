// Loading shared by the commands that run a model: the GGUF file, the CPU backend, the model,
// a KV pool sized for the requested context, and (when the file has one) the tokenizer.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "formats/gguf.h"
#include "kv/kv_pool.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace tern::cli {

struct ModelSetupOptions {
  std::string path;
  std::string backend = "cpu"; // "cpu" or "cuda" (cli/backend_choice.h)
  int act_bits = 16;           // --act-bits: 8 or 16 (cli/backend_choice.h)
  int n_threads = 0;          // CPU threads; 0 = all cores
  int n_ctx = 4096;           // tokens; 0 = the model's native context
  DType kv_dtype = DType::F16;
  bool need_tokenizer = true;
  bool show_progress = false;  // a progress line on stderr while loading
};

struct LoadedModel {
  std::shared_ptr<const gguf::File> file;
  std::unique_ptr<Backend> backend;
  int n_threads = 0;  // CPU threads in use
  std::unique_ptr<Model> model;
  std::unique_ptr<KvPool> kv;
  std::unique_ptr<tok::Tokenizer> tokenizer;  // null when not needed / vocab-less
  double load_seconds = 0.0;
};

Result<LoadedModel> load_for_inference(const ModelSetupOptions& options);

// Threads to use when the user gave none: every core this process may run on.
int default_thread_count();
// True when stderr is a terminal (progress output is only shown there).
bool stderr_is_terminal();

}  // namespace tern::cli
