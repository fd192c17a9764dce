// Synthesized models: GGUF files with the exact tensor table of a real architecture (llama,
// qwen2, qwen3) filled with random weights. They exist so benchmarks and kernel tests can run
// the shapes and quantization mixes of models we do not ship (Llama-3-8B at Q4_K_M, ...) and
// so every architecture has a tiny model for end-to-end tests.
//
// The files are standard GGUF that other engines load: llama.cpp's metadata keys, its tensor
// names, tokenizer.ggml.model = "no_vocab", and the per-tensor types llama.cpp's quantizer
// would pick for the requested file type (see QuantMix below).
//
// Weights are drawn so a forward pass stays finite and well scaled at any depth: a projection
// with c input columns has std 1/sqrt(c) (unit-variance outputs for unit-RMS inputs, which is
// what RMSNorm feeds it), the output head 2/sqrt(d) (logits with std ~2, so greedy choices are
// not near-ties), norm weights 1 + N(0, 0.02^2), biases N(0, 0.1^2). The residual stream then
// grows like sqrt(layers), harmless in float32.
//
// Speed: an 8B model is ~5 GB at q4_k_m and 16 GB at f16, so weights are not quantized one by
// one. For each (type, std) a pool of 2^16 Gaussian values is quantized once with
// quantize_row_ref, and every tensor row is filled by copying pool blocks picked by a fast
// PRNG seeded from (seed, tensor, row). Rows are filled in parallel and the result does not
// depend on the thread count: the same seed gives the same bytes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace tern::synth {

// Hyperparameters of a model to synthesize. Letters: d = n_embd, f = n_ff, h / hk = query /
// key-value heads, hd = head_dim, V = n_vocab, L = n_layers.
struct ModelShape {
  std::string name;            // preset name; written as general.name
  std::string arch;            // general.architecture: "llama", "qwen2" or "qwen3"
  int n_layers = 0;            // L
  int n_embd = 0;              // d
  int n_ff = 0;                // f
  int n_heads = 0;             // h
  int n_kv_heads = 0;          // hk; h % hk == 0
  int head_dim = 0;            // hd; qwen3 decouples it from d / h
  int n_vocab = 0;             // V
  int n_ctx_train = 0;         // native context, tokens
  float rope_theta = 10000.0f; // rotary frequency base
  float rms_eps = 1e-6f;       // RMSNorm epsilon
  bool tied_embeddings = false;  // no output.weight: the head reuses token_embd
  bool qkv_bias = false;         // blk.N.attn_{q,k,v}.bias (qwen2)
  bool qk_norm = false;          // blk.N.attn_{q,k}_norm.weight, per-head RMSNorm (qwen3)
};

// Real shapes (smollm2-135m, llama3-8b, qwen2.5-7b, qwen3-0.6b, ...) and tiny test models
// (tiny-llama, tiny-qwen2, tiny-qwen3: d = 256 so the k-quants apply without fallbacks).
std::span<const ModelShape> presets();
// nullptr when no preset has this name.
const ModelShape* find_preset(std::string_view name);
// Error naming the field when a shape is not a valid model of its architecture.
Status validate(const ModelShape& shape);

// The roles of weights, which the quantization rules key on.
enum class TensorRole : uint8_t {
  kTokenEmbd, kOutput, kAttnQ, kAttnK, kAttnV, kAttnOutput, kFfnGate, kFfnUp, kFfnDown,
  kNorm,  // RMSNorm weights (always F32)
  kBias,  // projection biases (always F32)
};

// llama.cpp file types (the LLAMA_FTYPE numbers written to general.file_type).
enum class FileType : uint32_t {
  kAllF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 7, kQ5_0 = 8, kQ5_1 = 9,
  kQ2_K = 10, kQ3_K_S = 11, kQ3_K_M = 12, kQ3_K_L = 13, kQ4_K_S = 14, kQ4_K_M = 15,
  kQ5_K_S = 16, kQ5_K_M = 17, kQ6_K = 18, kBF16 = 32,
};

// Which type each weight gets. Named like llama-quantize's types; q3_k, q4_k and q5_k are
// llama-quantize's aliases of the _m mixes. Unless `pure`, the per-tensor rules are those of
// llama.cpp's quantizer (src/llama-quant.cpp, llama_tensor_get_type), restated in
// synth_mix.cpp. `pure` gives every 2-D weight the base type, like llama-quantize --pure.
struct QuantMix {
  std::string name;   // "q4_k_m"
  FileType file_type = FileType::kF16;
  DType base = DType::F16;  // the type of weights no rule singles out
  bool pure = false;
};
// Error listing the known names when `name` is not one.
Result<QuantMix> parse_quant_mix(std::string_view name, bool pure = false);
// Every name parse_quant_mix accepts (aliases included), for help text.
std::span<const std::string_view> quant_mix_names();

// The type of a 2-D weight of `role` in `layer` (ignored for token_embd / output) whose rows
// hold `cols` elements. Widths a block type cannot tile fall back as in llama.cpp (q4_k -> q5_0,
// q5_k -> q5_1, q6_k -> q8_0, q2_k / q3_k -> iq4_nl, for which tern substitutes q4_0, then f16).
DType weight_type(const QuantMix& mix, const ModelShape& shape, TensorRole role, int layer, int64_t cols);

struct TensorPlan {
  std::string name;            // "blk.3.attn_v.weight"
  TensorRole role;
  int layer = -1;              // -1 outside the blocks
  DType type = DType::F32;
  std::vector<int64_t> shape;  // GGUF order: shape[0] = cols (contiguous)
  float mean = 0.0f;           // distribution of the values: N(mean, std^2)
  float std = 0.0f;
};
// The tensor table in file order: token_embd, each block's tensors, output_norm, output.
// Precondition: validate(shape) passed.
std::vector<TensorPlan> plan_tensors(const ModelShape& shape, const QuantMix& mix);

struct SynthOptions {
  uint64_t seed = 0;
  int n_threads = 0;  // 0 = hardware concurrency; the output does not depend on it
};

// Writes the model to `path` (through a temp file and rename), streaming one tensor at a time.
Status write_model(const ModelShape& shape, const QuantMix& mix, const SynthOptions& options,
                   const std::string& path);
// The same file image in memory (tests; tiny models only).
Result<std::vector<uint8_t>> model_bytes(const ModelShape& shape, const QuantMix& mix, const SynthOptions& options);

}  // namespace tern::synth
