// ModelConfig from GGUF metadata ({arch}.* keys as llama.cpp's converters write them).
#include <string>

#include "models/model.h"

namespace tern {
namespace {

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}
template <typename T>
uint64_t fnv1a(uint64_t h, const T& v) {
  return fnv1a(h, &v, sizeof(v));
}

Result<int> get_int(const gguf::File& f, const std::string& key, std::optional<int> fallback = std::nullopt) {
  TERN_ASSIGN_OR_RETURN(std::optional<uint64_t> v, f.get_uint_opt(key));
  if (!v) {
    if (fallback) return *fallback;
    return error("model metadata: missing required key '" + key + "'");
  }
  if (*v > (1u << 30)) return error("model metadata: '" + key + "' = " + std::to_string(*v) + " is out of range");
  return static_cast<int>(*v);
}

}  // namespace

Result<ModelConfig> read_model_config(const gguf::File& f) {
  ModelConfig c;
  TERN_ASSIGN_OR_RETURN(c.arch, f.get_string("general.architecture"));
  if (auto name = f.get_string("general.name"); name.is_ok()) c.name = name.value();
  const std::string a = c.arch + ".";
  TERN_ASSIGN_OR_RETURN(c.n_layers, get_int(f, a + "block_count"));
  TERN_ASSIGN_OR_RETURN(c.n_embd, get_int(f, a + "embedding_length"));
  TERN_ASSIGN_OR_RETURN(c.n_ff, get_int(f, a + "feed_forward_length"));
  TERN_ASSIGN_OR_RETURN(c.n_heads, get_int(f, a + "attention.head_count"));
  TERN_ASSIGN_OR_RETURN(c.n_kv_heads, get_int(f, a + "attention.head_count_kv", c.n_heads));
  TERN_ASSIGN_OR_RETURN(c.n_ctx_train, get_int(f, a + "context_length", 2048));
  if (c.n_layers <= 0 || c.n_embd <= 0 || c.n_ff <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0)
    return error("model metadata: block_count, embedding_length, feed_forward_length and head counts must be positive");
  if (c.n_heads % c.n_kv_heads != 0)
    return error("model metadata: head_count " + std::to_string(c.n_heads) + " is not a multiple of head_count_kv " +
                 std::to_string(c.n_kv_heads));
  const int default_head_dim = c.n_embd % c.n_heads == 0 ? c.n_embd / c.n_heads : 0;
  TERN_ASSIGN_OR_RETURN(c.head_dim, get_int(f, a + "attention.key_length", default_head_dim));
  TERN_ASSIGN_OR_RETURN(int value_dim, get_int(f, a + "attention.value_length", c.head_dim));
  if (c.head_dim <= 0 || value_dim != c.head_dim)
    return error("model metadata: key_length " + std::to_string(c.head_dim) + " and value_length " +
                 std::to_string(value_dim) + " must be equal and positive");
  TERN_ASSIGN_OR_RETURN(c.n_rot, get_int(f, a + "rope.dimension_count", c.head_dim));
  if (c.n_rot <= 0 || c.n_rot > c.head_dim || c.n_rot % 2 != 0)
    return error("model metadata: rope.dimension_count " + std::to_string(c.n_rot) + " must be even and <= head dim " +
                 std::to_string(c.head_dim));
  TERN_ASSIGN_OR_RETURN(auto eps, f.get_float_opt(a + "attention.layer_norm_rms_epsilon"));
  if (eps) c.rms_eps = static_cast<float>(*eps);
  TERN_ASSIGN_OR_RETURN(auto theta, f.get_float_opt(a + "rope.freq_base"));
  if (theta) c.rope_theta = static_cast<float>(*theta);

  // Rope scaling.
  std::string scaling_type = "none";
  if (f.find(a + "rope.scaling.type") != nullptr) {
    TERN_ASSIGN_OR_RETURN(scaling_type, f.get_string(a + "rope.scaling.type"));
  }
  TERN_ASSIGN_OR_RETURN(auto factor, f.get_float_opt(a + "rope.scaling.factor"));
  TERN_ASSIGN_OR_RETURN(auto scale_linear, f.get_float_opt(a + "rope.scale_linear"));
  if (scaling_type == "linear" || (scaling_type == "none" && scale_linear && *scale_linear != 1.0)) {
    c.rope_scaling = RopeScaling::kLinear;
    c.rope_factor = static_cast<float>(factor ? *factor : *scale_linear);
  } else if (scaling_type == "yarn") {
    c.rope_scaling = RopeScaling::kYarn;
    c.rope_factor = static_cast<float>(factor.value_or(1.0));
  } else if (scaling_type != "none") {
    return error("model metadata: unsupported " + a + "rope.scaling.type '" + scaling_type +
                 "' (expected none, linear or yarn)");
  }
  TERN_ASSIGN_OR_RETURN(c.rope_orig_ctx, get_int(f, a + "rope.scaling.original_context_length", c.n_ctx_train));
  if ((c.rope_scaling == RopeScaling::kLinear || c.rope_scaling == RopeScaling::kYarn) && !(c.rope_factor > 0.0f))
    return error("model metadata: rope.scaling.factor must be positive");
  c.has_rope_freq_factors = f.find_tensor("rope_freqs.weight") != nullptr;
  if (c.has_rope_freq_factors && c.rope_scaling == RopeScaling::kNone) c.rope_scaling = RopeScaling::kLlama3;

  const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight");
  if (embd == nullptr) return error("model: tensor 'token_embd.weight' is missing");
  if (embd->shape.size() != 2 || embd->shape[0] != c.n_embd)
    return error("model: tensor 'token_embd.weight' must have shape [" + std::to_string(c.n_embd) + ", n_vocab]");
  c.n_vocab = static_cast<int>(embd->shape[1]);
  TERN_ASSIGN_OR_RETURN(int vocab_key, get_int(f, a + "vocab_size", c.n_vocab));
  if (vocab_key != c.n_vocab)
    return error("model metadata: vocab_size " + std::to_string(vocab_key) + " differs from token_embd rows " +
                 std::to_string(c.n_vocab));
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;

  uint64_t h = 0xcbf29ce484222325ull;
  h = fnv1a(h, c.arch.data(), c.arch.size());
  for (int v : {c.n_layers, c.n_embd, c.n_ff, c.n_heads, c.n_kv_heads, c.head_dim, c.n_vocab, c.n_ctx_train, c.n_rot,
                static_cast<int>(c.rope_scaling), c.rope_orig_ctx})
    h = fnv1a(h, v);
  for (float v : {c.rms_eps, c.rope_theta, c.rope_factor}) h = fnv1a(h, v);
  for (const auto& t : f.tensors()) {
    h = fnv1a(h, t.name.data(), t.name.size());
    h = fnv1a(h, t.type);
    for (int64_t d : t.shape) h = fnv1a(h, d);
  }
  c.fingerprint = h;
  return c;
}

}  // namespace tern
