// Per-tensor quantization types of llama.cpp's file types.
//
// The rules restate, in our own words, what llama.cpp's quantizer does when it converts a model
// without an importance matrix (src/llama-quant.cpp, llama_tensor_get_type, dense models only):
//  - 1-D tensors (norms, biases) stay F32. F32 / F16 / BF16 file types give every 2-D weight
//    that type, with no further rules.
//  - The output head, or token_embd when the head is tied to it, is Q8_0 when its rows are not a
//    multiple of the base type's block, else Q6_K, except that a Q8_0 file keeps Q8_0.
//  - An untied token_embd keeps the base type.
//  - attn_v: Q2_K file -> Q4_K when h / hk >= 4, else Q3_K; Q3_K_M -> Q5_K in the first two
//    layers, Q4_K after; Q3_K_L -> Q5_K; Q4_K_M and Q5_K_M -> Q6_K on the "more bits" layers;
//    Q4_K_S -> Q5_K in the first four layers.
//  - ffn_down: Q2_K -> Q3_K; Q3_K_M -> Q5_K in the first L/16 layers, Q4_K after; Q3_K_L -> Q5_K;
//    Q4_K_M and Q5_K_M -> Q6_K on the "more bits" layers; Q4_K_S -> Q5_K in the first L/8 layers.
//  - attn_output: Q2_K -> Q3_K; Q3_K_M -> Q4_K; Q3_K_L -> Q5_K.
//  - "More bits" layers: the first eighth, the last eighth, and every third layer in between
//    (i < L/8, i >= 7L/8, or (i - L/8) % 3 == 2, integer division).
//  - Finally a type whose block does not tile the row width falls back: Q4_K -> Q5_0,
//    Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K / Q3_K -> IQ4_NL; if that still does not tile, F16.
// Deliberate differences: tern has no IQ4_NL, so that fallback uses Q4_0 (the same 4.5 bits per
// weight); a legacy type that cannot tile a row becomes F16 where llama.cpp would refuse; the
// special cases for 70B (attn_v), Falcon and mixture-of-experts models are not modelled.
#include <array>

#include "formats/synth.h"

namespace tern::synth {
namespace {

struct MixName {
  std::string_view name;
  FileType file_type;
  DType base;
};

constexpr std::array kMixes = {
    MixName{"f32", FileType::kAllF32, DType::F32},    MixName{"f16", FileType::kF16, DType::F16},
    MixName{"bf16", FileType::kBF16, DType::BF16},    MixName{"q8_0", FileType::kQ8_0, DType::Q8_0},
    MixName{"q4_0", FileType::kQ4_0, DType::Q4_0},    MixName{"q4_1", FileType::kQ4_1, DType::Q4_1},
    MixName{"q5_0", FileType::kQ5_0, DType::Q5_0},    MixName{"q5_1", FileType::kQ5_1, DType::Q5_1},
    MixName{"q2_k", FileType::kQ2_K, DType::Q2_K},    MixName{"q3_k_s", FileType::kQ3_K_S, DType::Q3_K},
    MixName{"q3_k_m", FileType::kQ3_K_M, DType::Q3_K}, MixName{"q3_k_l", FileType::kQ3_K_L, DType::Q3_K},
    MixName{"q4_k_s", FileType::kQ4_K_S, DType::Q4_K}, MixName{"q4_k_m", FileType::kQ4_K_M, DType::Q4_K},
    MixName{"q5_k_s", FileType::kQ5_K_S, DType::Q5_K}, MixName{"q5_k_m", FileType::kQ5_K_M, DType::Q5_K},
    MixName{"q6_k", FileType::kQ6_K, DType::Q6_K},
    // llama-quantize's aliases.
    MixName{"q3_k", FileType::kQ3_K_M, DType::Q3_K},  MixName{"q4_k", FileType::kQ4_K_M, DType::Q4_K},
    MixName{"q5_k", FileType::kQ5_K_M, DType::Q5_K},
};

constexpr std::array<std::string_view, kMixes.size()> mix_names() {
  std::array<std::string_view, kMixes.size()> names{};
  for (size_t i = 0; i < kMixes.size(); ++i) names[i] = kMixes[i].name;
  return names;
}
constexpr auto kMixNames = mix_names();

bool use_more_bits(int layer, int n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

DType attn_v_type(FileType ft, DType base, const ModelShape& s, int layer) {
  switch (ft) {
    case FileType::kQ2_K: return s.n_heads / s.n_kv_heads >= 4 ? DType::Q4_K : DType::Q3_K;
    case FileType::kQ3_K_M: return layer < 2 ? DType::Q5_K : DType::Q4_K;
    case FileType::kQ3_K_L: return DType::Q5_K;
    case FileType::kQ4_K_M:
    case FileType::kQ5_K_M: return use_more_bits(layer, s.n_layers) ? DType::Q6_K : base;
    case FileType::kQ4_K_S: return layer < 4 ? DType::Q5_K : base;
    default: return base;
  }
}

DType ffn_down_type(FileType ft, DType base, const ModelShape& s, int layer) {
  switch (ft) {
    case FileType::kQ2_K: return DType::Q3_K;
    case FileType::kQ3_K_M: return layer < s.n_layers / 16 ? DType::Q5_K : DType::Q4_K;
    case FileType::kQ3_K_L: return DType::Q5_K;
    case FileType::kQ4_K_M:
    case FileType::kQ5_K_M: return use_more_bits(layer, s.n_layers) ? DType::Q6_K : base;
    case FileType::kQ4_K_S: return layer < s.n_layers / 8 ? DType::Q5_K : base;
    default: return base;
  }
}

DType attn_output_type(FileType ft, DType base) {
  switch (ft) {
    case FileType::kQ2_K: return DType::Q3_K;
    case FileType::kQ3_K_M: return DType::Q4_K;
    case FileType::kQ3_K_L: return DType::Q5_K;
    default: return base;
  }
}

// The type before the row-width fallback.
DType rule_type(const QuantMix& mix, const ModelShape& s, TensorRole role, int layer, int64_t cols) {
  const bool is_head = role == TensorRole::kOutput || (role == TensorRole::kTokenEmbd && s.tied_embeddings);
  if (is_head) {
    if (cols % block_elems(mix.base) != 0) return DType::Q8_0;
    return mix.base == DType::Q8_0 ? DType::Q8_0 : DType::Q6_K;
  }
  switch (role) {
    case TensorRole::kAttnV: return attn_v_type(mix.file_type, mix.base, s, layer);
    case TensorRole::kFfnDown: return ffn_down_type(mix.file_type, mix.base, s, layer);
    case TensorRole::kAttnOutput: return attn_output_type(mix.file_type, mix.base);
    default: return mix.base;
  }
}

DType fallback_for_width(DType t, int64_t cols) {
  if (cols % block_elems(t) == 0) return t;
  switch (t) {
    case DType::Q2_K:
    case DType::Q3_K: t = DType::Q4_0; break;
    case DType::Q4_K: t = DType::Q5_0; break;
    case DType::Q5_K: t = DType::Q5_1; break;
    case DType::Q6_K: t = DType::Q8_0; break;
    default: break;
  }
  return cols % block_elems(t) == 0 ? t : DType::F16;
}

}  // namespace

Result<QuantMix> parse_quant_mix(std::string_view name, bool pure) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  for (const MixName& m : kMixes) {
    if (m.name == lower) return QuantMix{lower, m.file_type, m.base, pure};
  }
  std::string known;
  for (std::string_view n : kMixNames) known += (known.empty() ? "" : ", ") + std::string(n);
  return error("unknown quantization type '" + std::string(name) + "', expected one of: " + known);
}

std::span<const std::string_view> quant_mix_names() { return kMixNames; }

DType weight_type(const QuantMix& mix, const ModelShape& shape, TensorRole role, int layer, int64_t cols) {
  if (role == TensorRole::kNorm || role == TensorRole::kBias) return DType::F32;
  if (is_float(mix.base)) return mix.base;
  const DType t = mix.pure ? mix.base : rule_type(mix, shape, role, layer, cols);
  return fallback_for_width(t, cols);
}

}  // namespace tern::synth
