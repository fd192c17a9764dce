// Model-shape presets for `tern synth`. The real shapes are copied from the models' published
// configs (config.json: num_hidden_layers, hidden_size, intermediate_size, attention heads,
// vocab_size, max_position_embeddings, rope_theta, rms_norm_eps, tie_word_embeddings).
#include <string>

#include "formats/synth.h"

namespace tern::synth {
namespace {

ModelShape llama(std::string name, int n_layers, int d, int f, int h, int hk, int n_vocab, int n_ctx, float theta,
                 float eps, bool tied) {
  ModelShape s;
  s.name = std::move(name);
  s.arch = "llama";
  s.n_layers = n_layers;
  s.n_embd = d;
  s.n_ff = f;
  s.n_heads = h;
  s.n_kv_heads = hk;
  s.head_dim = d / h;
  s.n_vocab = n_vocab;
  s.n_ctx_train = n_ctx;
  s.rope_theta = theta;
  s.rms_eps = eps;
  s.tied_embeddings = tied;
  return s;
}

ModelShape qwen2(std::string name, int n_layers, int d, int f, int h, int hk, int n_vocab, int n_ctx, bool tied) {
  ModelShape s = llama(std::move(name), n_layers, d, f, h, hk, n_vocab, n_ctx, 1e6f, 1e-6f, tied);
  s.arch = "qwen2";
  s.qkv_bias = true;
  return s;
}

ModelShape qwen3(std::string name, int n_layers, int d, int f, int h, int hk, int hd, int n_vocab, int n_ctx,
                 bool tied) {
  ModelShape s = llama(std::move(name), n_layers, d, f, h, hk, n_vocab, n_ctx, 1e6f, 1e-6f, tied);
  s.arch = "qwen3";
  s.head_dim = hd;
  s.qk_norm = true;
  return s;
}

const std::vector<ModelShape>& preset_table() {
  static const std::vector<ModelShape> table = {
      // Real shapes.
      llama("smollm2-135m", 30, 576, 1536, 9, 3, 49152, 8192, 100000.0f, 1e-5f, true),
      llama("smollm2-360m", 32, 960, 2560, 15, 5, 49152, 8192, 100000.0f, 1e-5f, true),
      llama("llama3-8b", 32, 4096, 14336, 32, 8, 128256, 8192, 500000.0f, 1e-5f, false),
      qwen2("qwen2.5-0.5b", 24, 896, 4864, 14, 2, 151936, 32768, true),
      qwen2("qwen2.5-7b", 28, 3584, 18944, 28, 4, 152064, 32768, false),
      qwen3("qwen3-0.6b", 28, 1024, 3072, 16, 8, 128, 151936, 40960, true),
      qwen3("qwen3-8b", 36, 4096, 12288, 32, 8, 128, 151936, 40960, false),
      // Tiny test models. d = 256 so every k-quant tiles the rows; layer counts differ so the
      // per-layer mix rules take both branches; qwen3's h * hd != d as in the real ones.
      llama("tiny-llama", 4, 256, 512, 4, 2, 512, 2048, 10000.0f, 1e-5f, false),
      qwen2("tiny-qwen2", 2, 256, 768, 4, 2, 384, 2048, true),
      qwen3("tiny-qwen3", 3, 256, 512, 4, 2, 128, 320, 2048, true),
  };
  return table;
}

Status positive(const ModelShape& s, const char* field, int value) {
  if (value > 0) return Status::ok();
  return error("model shape '" + s.name + "': " + field + " must be positive, got " + std::to_string(value));
}

}  // namespace

std::span<const ModelShape> presets() { return preset_table(); }

const ModelShape* find_preset(std::string_view name) {
  for (const ModelShape& s : preset_table())
    if (s.name == name) return &s;
  return nullptr;
}

Status validate(const ModelShape& s) {
  if (s.arch != "llama" && s.arch != "qwen2" && s.arch != "qwen3")
    return error("model shape '" + s.name + "': arch must be llama, qwen2 or qwen3, got '" + s.arch + "'");
  TERN_RETURN_IF_ERROR(positive(s, "n_layers", s.n_layers));
  TERN_RETURN_IF_ERROR(positive(s, "n_embd", s.n_embd));
  TERN_RETURN_IF_ERROR(positive(s, "n_ff", s.n_ff));
  TERN_RETURN_IF_ERROR(positive(s, "n_heads", s.n_heads));
  TERN_RETURN_IF_ERROR(positive(s, "n_kv_heads", s.n_kv_heads));
  TERN_RETURN_IF_ERROR(positive(s, "head_dim", s.head_dim));
  TERN_RETURN_IF_ERROR(positive(s, "n_vocab", s.n_vocab));
  TERN_RETURN_IF_ERROR(positive(s, "n_ctx_train", s.n_ctx_train));
  if (s.n_heads % s.n_kv_heads != 0)
    return error("model shape '" + s.name + "': n_heads " + std::to_string(s.n_heads) +
                 " must be a multiple of n_kv_heads " + std::to_string(s.n_kv_heads));
  if (s.head_dim % 2 != 0)
    return error("model shape '" + s.name + "': head_dim must be even (rotary pairs), got " +
                 std::to_string(s.head_dim));
  // The loaders require exactly these optional tensors per architecture.
  if (s.qkv_bias != (s.arch == "qwen2"))
    return error("model shape '" + s.name + "': qkv_bias expected " + (s.arch == "qwen2" ? "true" : "false") +
                 " for arch " + s.arch);
  if (s.qk_norm != (s.arch == "qwen3"))
    return error("model shape '" + s.name + "': qk_norm expected " + (s.arch == "qwen3" ? "true" : "false") +
                 " for arch " + s.arch);
  if (!(s.rope_theta > 0.0f) || !(s.rms_eps > 0.0f))
    return error("model shape '" + s.name + "': rope_theta and rms_eps must be positive");
  return Status::ok();
}

}  // namespace tern::synth
