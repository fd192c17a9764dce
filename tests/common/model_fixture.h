// Test helpers: load a GGUF model on a CPU backend with a KV pool, without a tokenizer.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "formats/gguf.h"
#include "kv/kv_pool.h"
#include "models/model.h"

namespace tern::testing {

struct LoadedTestModel {
  std::shared_ptr<const gguf::File> file;
  std::unique_ptr<cpu::CpuBackend> backend;
  std::unique_ptr<Model> model;
  std::unique_ptr<KvPool> kv;
};

inline std::string default_model_path() {
  if (const char* env = std::getenv("TERN_MODEL"); env != nullptr && *env) return env;
  return TERN_DEFAULT_MODEL;
}

// Loads `path`; on failure records a test failure and returns an empty model (model == nullptr).
// n_ctx = 0 uses the model's native context (no YaRN extension).
inline LoadedTestModel load_test_model(const std::string& path, int n_threads = 2, bool reference = false,
                                       int n_ctx = 2048, DType kv_dtype = DType::F16) {
  LoadedTestModel m;
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << "model file " << path << " is missing: run scripts/fetch-model";
    return m;
  }
  auto file = gguf::File::open(path);
  if (!file.is_ok()) {
    ADD_FAILURE() << file.status().message();
    return m;
  }
  m.file = std::make_shared<const gguf::File>(std::move(file).value());
  m.backend = std::make_unique<cpu::CpuBackend>(cpu::CpuBackendOptions{n_threads, reference});
  ModelOptions mo;
  mo.n_ctx = n_ctx;
  auto model = load_model(m.file, *m.backend, mo);
  if (!model.is_ok()) {
    ADD_FAILURE() << model.status().message();
    return m;
  }
  m.model = std::move(model).value();
  const ModelConfig& c = m.model->config();
  KvPoolConfig kc;
  kc.n_layers = c.n_layers;
  kc.n_kv_heads = c.n_kv_heads;
  kc.head_dim = c.head_dim;
  kc.dtype = kv_dtype;
  kc.n_blocks = (m.model->n_ctx() + kc.block_tokens - 1) / kc.block_tokens;
  auto kv = KvPool::create(*m.backend, kc);
  if (!kv.is_ok()) {
    ADD_FAILURE() << kv.status().message();
    m.model.reset();
    return m;
  }
  m.kv = std::move(kv).value();
  return m;
}

}  // namespace tern::testing
