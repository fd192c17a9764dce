// The Model seam: an architecture reads its weights from a GGUF file and runs the forward pass of
// one BatchPlan, written against ops/ and a KV pool. ModelConfig is read from the file and never
// changes; ModelOptions are runtime choices.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "core/top_candidates.h"
#include "formats/gguf.h"
#include "kv/kv_pool.h"
#include "ops/backend.h"

namespace tern {

enum class RopeScaling : uint8_t { kNone, kLinear, kYarn, kLlama3 };

struct ModelConfig {
  std::string arch;        // general.architecture: "llama", "qwen2", "qwen3"
  std::string name;        // general.name (may be empty)
  int n_layers = 0;
  int n_embd = 0;          // model width d
  int n_ff = 0;            // feed-forward width
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;        // per-head width of q/k/v
  int n_vocab = 0;
  int n_ctx_train = 0;     // native context (tokens)
  float rms_eps = 1e-5f;
  // Rotary embedding as stored in the file.
  int n_rot = 0;                  // rotated dims per head
  float rope_theta = 10000.0f;    // frequency base
  bool rope_neox = false;         // pairs (i, i + n_rot/2) instead of (2i, 2i+1)
  RopeScaling rope_scaling = RopeScaling::kNone;
  float rope_factor = 1.0f;       // context extension factor
  int rope_orig_ctx = 0;          // context the scaling extends from
  bool has_rope_freq_factors = false;  // rope_freqs.weight (llama3-style per-dim factors)
  bool tied_embeddings = false;   // output projection reuses token_embd
  uint64_t fingerprint = 0;       // hash of arch, hyperparameters and tensor table
};

struct ModelOptions {
  int n_ctx = 0;  // context the caller will use (tokens); 0 = native. Above native, YaRN applies.
};

class Model {
 public:
  virtual ~Model() = default;
  const ModelConfig& config() const { return config_; }
  // Context the model was configured for (ModelOptions::n_ctx or native).
  int n_ctx() const { return n_ctx_; }
  // Bytes of weights read by one forward pass (all tensors once).
  uint64_t weight_bytes() const { return weight_bytes_; }

  // Where a forward's results go, in host memory, one entry per plan.logit_rows row.
  struct Outputs {
    float* logits = nullptr;    // [rows, n_vocab], or null: not needed
    int32_t* argmax = nullptr;  // [rows] first_argmax of each row (core/argmax.h), or null
    // Each row's best candidates (core/top_candidates.h; rows == the plan's logit rows), or null.
    const CandidateRows* candidates = nullptr;
  };
  // Runs the plan: writes the K/V of every token into `kv`, and the logit rows' results into
  // `out`. Without logits (greedy sampling, or sampling from candidates) a device backend reduces
  // the rows on the device and copies one int per row (and the candidates) instead of the
  // vocabulary. Preconditions: every kv_slot belongs to its sequence's blocks, and positions
  // [0, p) of each sequence were written by earlier forwards.
  virtual void forward(const BatchPlan& plan, KvPool& kv, const Outputs& out) = 0;
  void forward(const BatchPlan& plan, KvPool& kv, float* logits) { forward(plan, kv, Outputs{logits, nullptr}); }
  // Copies logit row `row` of the last forward into dst [n_vocab]: the rows stay where the
  // forward computed them until the next forward (the candidates' fallback, StepOutputs).
  virtual void copy_logit_row(int row, float* dst) = 0;

 protected:
  ModelConfig config_;
  int n_ctx_ = 0;
  uint64_t weight_bytes_ = 0;
};

// Reads the architecture-independent hyperparameters of `file`.
Result<ModelConfig> read_model_config(const gguf::File& file);

// Builds the architecture named in the file (registry.cpp lists them).
Result<std::unique_ptr<Model>> load_model(std::shared_ptr<const gguf::File> file, Backend& backend,
                                          const ModelOptions& options);

}  // namespace tern
