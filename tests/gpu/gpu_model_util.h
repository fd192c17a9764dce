// Whole-model helpers of the GPU tests: a model with its KV pool on one backend, one sequence
// driven forward by hand, synthesized models written once per process.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "backends/cpu/cpu_backend.h"
#include "formats/gguf.h"
#include "formats/synth.h"
#include "gpu_test_util.h"
#include "kv/kv_pool.h"
#include "models/model.h"

namespace tern::gputest {

inline std::string test_data_dir() {
  if (const char* env = std::getenv("TERN_TEST_DATA"); env != nullptr && *env) return env;
  return TERN_TEST_DATA;
}

// A model with its KV pool on one backend, and a single sequence to drive it.
struct Loaded {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  std::unique_ptr<KvPool> kv;
  std::unique_ptr<KvSequence> seq;
};

// kv_tokens: the KV pool's size in tokens (0: n_ctx), for tests that hold several sequences.
inline Loaded load_on(std::shared_ptr<const gguf::File> file, std::unique_ptr<Backend> backend, int n_ctx = 1024,
               DType kv_dtype = DType::F16, int kv_tokens = 0) {
  Loaded l;
  l.backend = std::move(backend);
  ModelOptions mo;
  mo.n_ctx = n_ctx;
  auto model = load_model(file, *l.backend, mo);
  EXPECT_TRUE(model.is_ok()) << (model.is_ok() ? "" : model.status().message());
  if (!model.is_ok()) return l;
  l.model = std::move(model).value();
  const ModelConfig& c = l.model->config();
  KvPoolConfig kc;
  kc.n_layers = c.n_layers;
  kc.n_kv_heads = c.n_kv_heads;
  kc.head_dim = c.head_dim;
  const int pool_tokens = kv_tokens > 0 ? kv_tokens : n_ctx;
  kc.n_blocks = (pool_tokens + kc.block_tokens - 1) / kc.block_tokens;
  kc.dtype = kv_dtype;
  auto kv = KvPool::create(*l.backend, kc);
  EXPECT_TRUE(kv.is_ok());
  l.kv = std::move(kv).value();
  l.seq = std::make_unique<KvSequence>(*l.kv);
  return l;
}

inline std::unique_ptr<Backend> cpu_reference() {
  return std::make_unique<cpu::CpuBackend>(cpu::CpuBackendOptions{1, true});
}

// Feeds ids at the sequence's next positions in one forward; returns [ids.size(), V] logits.
inline std::vector<float> forward(Loaded& m, const std::vector<int32_t>& ids) {
  const int n0 = m.seq->n_tokens(), n = static_cast<int>(ids.size());
  EXPECT_TRUE(m.seq->reserve(n0 + n).is_ok());
  BatchPlan p;
  for (int i = 0; i < n; ++i) {
    p.token_ids.push_back(ids[i]);
    p.seq_index.push_back(0);
    p.positions.push_back(n0 + i);
    p.kv_slots.push_back(static_cast<int32_t>(m.seq->slot(n0 + i)));
    p.logit_rows.push_back(i);
  }
  p.block_offsets = {0, static_cast<int32_t>(m.seq->blocks().size())};
  p.block_ids = m.seq->blocks();
  std::vector<float> logits(static_cast<size_t>(n) * m.model->config().n_vocab);
  m.model->forward(p, *m.kv, logits.data());
  m.seq->set_n_tokens(n0 + n);
  return logits;
}

inline std::vector<int32_t> prompt_ids(int n, int vocab, uint32_t seed) {
  std::vector<int32_t> ids(n);
  std::mt19937 rng(seed);
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return ids;
}

inline int argmax(const float* v, int n) { return static_cast<int>(std::max_element(v, v + n) - v); }

inline std::shared_ptr<const gguf::File> open_file(const std::string& path) {
  auto f = gguf::File::open(path);
  EXPECT_TRUE(f.is_ok()) << path << ": " << (f.is_ok() ? "" : f.status().message());
  if (!f.is_ok()) return nullptr;
  return std::make_shared<const gguf::File>(std::move(f).value());
}

// A synthesized model of `shape` with `mix`. The file is unlinked once mapped (the mapping stays
// valid), and its name carries the process id: ctest runs the tests as parallel processes.
inline std::shared_ptr<const gguf::File> write_synthesized(const synth::ModelShape& shape, const std::string& mix) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("tern_gpu_test_" + shape.name + "_" + mix + "_" + std::to_string(::getpid()) + ".gguf"))
                               .string();
  auto qm = synth::parse_quant_mix(mix);
  EXPECT_TRUE(qm.is_ok()) << mix;
  if (!qm.is_ok()) return nullptr;
  synth::SynthOptions so;
  so.seed = 11;
  const Status st = synth::write_model(shape, qm.value(), so, path);
  EXPECT_TRUE(st.is_ok()) << st.message();
  auto file = st.is_ok() ? open_file(path) : nullptr;
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
  return file;
}

// A synthesized model, written once per process (keyed by the shape's name and the mix).
inline std::shared_ptr<const gguf::File> synthesized(const synth::ModelShape& shape, const std::string& mix) {
  static std::map<std::string, std::shared_ptr<const gguf::File>> cache;
  auto& slot = cache[shape.name + "/" + mix];
  if (slot == nullptr) slot = write_synthesized(shape, mix);
  return slot;
}
inline std::shared_ptr<const gguf::File> synthesized(const std::string& preset, const std::string& mix) {
  const synth::ModelShape* shape = synth::find_preset(preset);
  EXPECT_NE(shape, nullptr) << preset;
  return shape != nullptr ? synthesized(*shape, mix) : nullptr;
}

}  // namespace tern::gputest
