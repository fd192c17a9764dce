// Synthesized models (formats/synth.h): llama.cpp's quantization mix rules, the file's metadata
// and tensor table, weight statistics, determinism, and that every architecture's tiny preset
// (and the SmolLM2-135M shape) loads and runs a forward pass to finite, non-degenerate logits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "backends/cpu/cpu_backend.h"
#include "core/quant_ref.h"
#include "engine/session.h"
#include "formats/gguf.h"
#include "formats/synth.h"
#include "models/model.h"

namespace tern::synth {
namespace {

const ModelShape& preset(const char* name) {
  const ModelShape* s = find_preset(name);
  TERN_CHECK_MSG(s != nullptr, name);
  return *s;
}

QuantMix mix(const char* name, bool pure = false) {
  Result<QuantMix> m = parse_quant_mix(name, pure);
  TERN_CHECK_MSG(m.is_ok(), name);
  return *m;
}

std::map<std::string, DType> types_by_name(const std::vector<TensorPlan>& plan) {
  std::map<std::string, DType> out;
  for (const TensorPlan& t : plan) out[t.name] = t.type;
  return out;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::path(testing::TempDir()) / ("synth_test_" + name + ".gguf")).string();
}

TEST(SynthPresets, AllValidateAndAreFoundByName) {
  ASSERT_GE(presets().size(), 7u);
  for (const ModelShape& s : presets()) {
    EXPECT_TRUE(validate(s).is_ok()) << s.name << ": " << validate(s).message();
    EXPECT_EQ(find_preset(s.name), &s);
  }
  EXPECT_EQ(find_preset("no-such-model"), nullptr);
  const ModelShape& l3 = preset("llama3-8b");
  EXPECT_EQ(l3.n_layers, 32);
  EXPECT_EQ(l3.n_ff, 14336);
  EXPECT_EQ(l3.n_vocab, 128256);
  EXPECT_FALSE(l3.tied_embeddings);
}

TEST(SynthPresets, ValidateNamesTheBadField) {
  ModelShape s = preset("tiny-llama");
  s.n_kv_heads = 3;  // 4 heads are not a multiple of 3
  const Status st = validate(s);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("n_kv_heads"), std::string::npos) << st.message();
  s = preset("tiny-qwen2");
  s.qkv_bias = false;
  EXPECT_NE(validate(s).message().find("qkv_bias"), std::string::npos);
}

TEST(SynthMix, NamesFileTypesAndAliases) {
  EXPECT_EQ(mix("q4_k_m").file_type, FileType::kQ4_K_M);
  EXPECT_EQ(static_cast<uint32_t>(mix("q4_k_m").file_type), 15u);
  EXPECT_EQ(static_cast<uint32_t>(mix("Q5_K_M").file_type), 17u);
  EXPECT_EQ(static_cast<uint32_t>(mix("bf16").file_type), 32u);
  EXPECT_EQ(static_cast<uint32_t>(mix("q8_0").file_type), 7u);
  EXPECT_EQ(mix("q4_k").file_type, FileType::kQ4_K_M);  // llama-quantize's alias
  EXPECT_EQ(mix("q4_k").base, DType::Q4_K);
  const Result<QuantMix> bad = parse_quant_mix("q4_x");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("q4_k_m"), std::string::npos) << bad.status().message();
}

TEST(SynthMix, Q4KMGivesQ6KToTheMoreBitsLayersOfLlama3) {
  const ModelShape& s = preset("llama3-8b");
  const auto types = types_by_name(plan_tensors(s, mix("q4_k_m")));
  // First and last 4 of 32 layers, and every third layer in between counted from layer 4 + 2.
  const std::set<int> more_bits = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};
  for (int l = 0; l < 32; ++l) {
    const DType expect = more_bits.count(l) ? DType::Q6_K : DType::Q4_K;
    const std::string p = "blk." + std::to_string(l) + ".";
    EXPECT_EQ(types.at(p + "attn_v.weight"), expect) << l;
    EXPECT_EQ(types.at(p + "ffn_down.weight"), expect) << l;
    EXPECT_EQ(types.at(p + "attn_q.weight"), DType::Q4_K) << l;
    EXPECT_EQ(types.at(p + "attn_k.weight"), DType::Q4_K) << l;
    EXPECT_EQ(types.at(p + "attn_output.weight"), DType::Q4_K) << l;
    EXPECT_EQ(types.at(p + "ffn_gate.weight"), DType::Q4_K) << l;
    EXPECT_EQ(types.at(p + "ffn_up.weight"), DType::Q4_K) << l;
    EXPECT_EQ(types.at(p + "attn_norm.weight"), DType::F32) << l;
  }
  EXPECT_EQ(types.at("output.weight"), DType::Q6_K);
  EXPECT_EQ(types.at("token_embd.weight"), DType::Q4_K);
  EXPECT_EQ(types.at("output_norm.weight"), DType::F32);
}

TEST(SynthMix, PlanSizeOfLlama3Q4KMMatchesPublishedFiles) {
  // llama.cpp's Llama-3.1-8B Q4_K_M files are 4,920,734,016 bytes, of which the tokenizer
  // metadata (128K tokens, 280K merges) takes roughly 7-9 MB.
  uint64_t n_bytes = 0;
  for (const TensorPlan& t : plan_tensors(preset("llama3-8b"), mix("q4_k_m")))
    n_bytes += row_bytes(t.type, t.shape[0]) * static_cast<uint64_t>(t.shape.size() > 1 ? t.shape[1] : 1);
  EXPECT_GT(n_bytes, 4910000000ull);
  EXPECT_LT(n_bytes, 4915000000ull);
}

TEST(SynthMix, RowsThatBlocksCannotTileFallBackAsLlamaCppDoes) {
  const ModelShape& s = preset("smollm2-135m");  // d = 576 is not a multiple of 256
  const auto types = types_by_name(plan_tensors(s, mix("q4_k_m")));
  EXPECT_EQ(types.at("token_embd.weight"), DType::Q8_0);    // tied head: Q6_K -> Q8_0
  EXPECT_EQ(types.at("blk.1.attn_q.weight"), DType::Q5_0);  // Q4_K -> Q5_0
  EXPECT_EQ(types.at("blk.0.attn_v.weight"), DType::Q8_0);  // more bits: Q6_K -> Q8_0
  EXPECT_EQ(types.at("blk.4.attn_v.weight"), DType::Q5_0);
  EXPECT_EQ(types.at("blk.0.ffn_down.weight"), DType::Q6_K);  // 1536 columns tile
  EXPECT_EQ(types.at("blk.4.ffn_down.weight"), DType::Q4_K);
  const auto q5 = types_by_name(plan_tensors(s, mix("q5_k_s")));
  EXPECT_EQ(q5.at("blk.1.attn_q.weight"), DType::Q5_1);  // Q5_K -> Q5_1
  const auto q2 = types_by_name(plan_tensors(s, mix("q2_k")));
  EXPECT_EQ(q2.at("blk.1.attn_q.weight"), DType::Q4_0);  // llama.cpp's IQ4_NL, which tern lacks
  EXPECT_EQ(q2.at("blk.1.ffn_down.weight"), DType::Q3_K);
}

TEST(SynthMix, OtherFileTypes) {
  const ModelShape& l3 = preset("llama3-8b");  // 32 heads over 8 kv heads: gqa 4
  auto t = types_by_name(plan_tensors(l3, mix("q2_k")));
  EXPECT_EQ(t.at("blk.5.attn_v.weight"), DType::Q4_K);
  EXPECT_EQ(t.at("blk.5.attn_output.weight"), DType::Q3_K);
  EXPECT_EQ(t.at("blk.5.ffn_down.weight"), DType::Q3_K);
  EXPECT_EQ(t.at("blk.5.ffn_up.weight"), DType::Q2_K);
  t = types_by_name(plan_tensors(preset("tiny-llama"), mix("q2_k")));  // gqa 2
  EXPECT_EQ(t.at("blk.1.attn_v.weight"), DType::Q3_K);
  t = types_by_name(plan_tensors(l3, mix("q3_k_m")));
  EXPECT_EQ(t.at("blk.1.attn_v.weight"), DType::Q5_K);
  EXPECT_EQ(t.at("blk.2.attn_v.weight"), DType::Q4_K);
  EXPECT_EQ(t.at("blk.1.ffn_down.weight"), DType::Q5_K);  // 1 < 32 / 16
  EXPECT_EQ(t.at("blk.2.ffn_down.weight"), DType::Q4_K);
  EXPECT_EQ(t.at("blk.2.attn_output.weight"), DType::Q4_K);
  EXPECT_EQ(t.at("blk.2.attn_q.weight"), DType::Q3_K);
  t = types_by_name(plan_tensors(l3, mix("q4_k_s")));
  EXPECT_EQ(t.at("blk.3.attn_v.weight"), DType::Q5_K);
  EXPECT_EQ(t.at("blk.4.attn_v.weight"), DType::Q4_K);
  EXPECT_EQ(t.at("blk.3.ffn_down.weight"), DType::Q5_K);
  EXPECT_EQ(t.at("blk.4.ffn_down.weight"), DType::Q4_K);
  t = types_by_name(plan_tensors(l3, mix("q8_0")));
  EXPECT_EQ(t.at("output.weight"), DType::Q8_0);
  EXPECT_EQ(t.at("blk.0.attn_v.weight"), DType::Q8_0);
  t = types_by_name(plan_tensors(l3, mix("q4_0")));
  EXPECT_EQ(t.at("output.weight"), DType::Q6_K);
  EXPECT_EQ(t.at("token_embd.weight"), DType::Q4_0);
  for (const char* f : {"f16", "bf16", "f32"}) {
    const QuantMix m = mix(f);
    for (const TensorPlan& p : plan_tensors(l3, m)) {
      const DType want = p.shape.size() == 1 ? DType::F32 : m.base;
      EXPECT_EQ(p.type, want) << f << " " << p.name;
    }
  }
}

TEST(SynthMix, PureGivesEveryWeightTheBaseType) {
  for (const TensorPlan& p : plan_tensors(preset("tiny-llama"), mix("q4_k", /*pure=*/true))) {
    EXPECT_EQ(p.type, p.shape.size() == 1 ? DType::F32 : DType::Q4_K) << p.name;
  }
}

// The default model was quantized by llama.cpp to Q4_1: our plan must give every tensor the
// type the real file has.
TEST(SynthMix, MatchesTheRealSmolLM2Q4_1File) {
  if (!std::filesystem::exists(TERN_DEFAULT_MODEL)) GTEST_SKIP() << "no " << TERN_DEFAULT_MODEL;
  Result<gguf::File> real = gguf::File::open(TERN_DEFAULT_MODEL);
  ASSERT_TRUE(real.is_ok()) << real.status().message();
  const auto plan = plan_tensors(preset("smollm2-135m"), mix("q4_1"));
  ASSERT_EQ(plan.size(), real->tensors().size());
  for (const TensorPlan& p : plan) {
    const gguf::TensorInfo* t = real->find_tensor(p.name);
    ASSERT_NE(t, nullptr) << p.name;
    EXPECT_EQ(p.type, t->type) << p.name;
    EXPECT_EQ(p.shape, t->shape) << p.name;
  }
}

TEST(SynthFile, MetadataAndTensorTableReadBack) {
  const ModelShape& s = preset("tiny-qwen3");
  Result<std::vector<uint8_t>> bytes = model_bytes(s, mix("q4_k_m"), {});
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().message();
  Result<gguf::File> f = gguf::File::parse(bytes->data(), bytes->size());
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->get_string("general.architecture").value(), "qwen3");
  EXPECT_EQ(f->get_string("tokenizer.ggml.model").value(), "no_vocab");
  EXPECT_EQ(f->get_uint("general.file_type").value(), 15u);
  EXPECT_EQ(f->get_uint("general.quantization_version").value(), 2u);
  EXPECT_EQ(f->get_uint("qwen3.vocab_size").value(), 320u);
  EXPECT_EQ(f->get_uint("qwen3.block_count").value(), 3u);
  EXPECT_EQ(f->get_uint("qwen3.attention.key_length").value(), 128u);
  EXPECT_EQ(f->get_uint("qwen3.attention.head_count_kv").value(), 2u);
  EXPECT_FLOAT_EQ(static_cast<float>(f->get_float("qwen3.rope.freq_base").value()), 1e6f);
  const auto plan = plan_tensors(s, mix("q4_k_m"));
  ASSERT_EQ(f->tensors().size(), plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    EXPECT_EQ(f->tensors()[i].name, plan[i].name);
    EXPECT_EQ(f->tensors()[i].type, plan[i].type) << plan[i].name;
    EXPECT_EQ(f->tensors()[i].shape, plan[i].shape) << plan[i].name;
  }
  EXPECT_NE(f->find_tensor("blk.0.attn_q_norm.weight"), nullptr);
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);  // tied
}

// Dequantized weights have the planned mean and std; pool blocks differ across rows.
TEST(SynthFile, WeightStatisticsFollowThePlan) {
  const ModelShape& s = preset("tiny-llama");
  for (const char* type : {"q4_k_m", "q8_0", "f16", "q2_k", "bf16"}) {
    const QuantMix m = mix(type);
    Result<std::vector<uint8_t>> bytes = model_bytes(s, m, {});
    ASSERT_TRUE(bytes.is_ok()) << bytes.status().message();
    Result<gguf::File> f = gguf::File::parse(bytes->data(), bytes->size());
    ASSERT_TRUE(f.is_ok());
    for (const TensorPlan& p : plan_tensors(s, m)) {
      const gguf::TensorInfo* t = f->find_tensor(p.name);
      std::vector<float> x(static_cast<size_t>(t->numel()));
      ASSERT_TRUE(dequantize_row_ref(t->type, t->data, x.data(), t->numel()));
      double sum = 0, sum2 = 0;
      for (float v : x) {
        ASSERT_TRUE(std::isfinite(v)) << p.name;
        sum += v;
        sum2 += double{v} * v;
      }
      const double mean = sum / x.size(), std = std::sqrt(sum2 / x.size() - mean * mean);
      // 2-bit quantization shrinks the spread most; allow 25% there, 10% elsewhere.
      const double tol = p.type == DType::Q2_K || p.type == DType::Q3_K ? 0.25 : 0.10;
      EXPECT_NEAR(mean, p.mean, 0.1 * p.std + 1e-3) << type << " " << p.name;
      EXPECT_NEAR(std, p.std, tol * p.std) << type << " " << p.name;
      if (p.shape.size() == 2 && p.shape[1] >= 2) {  // rows are not copies of each other
        const size_t row = row_bytes(t->type, t->shape[0]);
        EXPECT_NE(std::memcmp(t->data, t->data + row, row), 0) << p.name;
      }
    }
  }
}

TEST(SynthFile, SameSeedSameBytesWhateverTheThreadCount) {
  const ModelShape& s = preset("tiny-qwen2");
  Result<std::vector<uint8_t>> a = model_bytes(s, mix("q4_k_m"), {7, 1});
  Result<std::vector<uint8_t>> b = model_bytes(s, mix("q4_k_m"), {7, 3});
  Result<std::vector<uint8_t>> c = model_bytes(s, mix("q4_k_m"), {8, 1});
  ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
  EXPECT_TRUE(*a == *b);
  ASSERT_EQ(a->size(), c->size());
  EXPECT_FALSE(*a == *c);
  // write_model writes the same image.
  const std::string path = temp_path("seed7");
  ASSERT_TRUE(write_model(s, mix("q4_k_m"), {7, 2}, path).is_ok());
  Result<gguf::File> f = gguf::File::open(path);
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(f->file_size(), a->size());
  std::filesystem::remove(path);
}

// Loads a synthesized file with the real model loader and prefills a few tokens.
std::vector<float> forward_logits(const std::string& path, int n_vocab_expected) {
  Result<gguf::File> opened = gguf::File::open(path);
  EXPECT_TRUE(opened.is_ok()) << opened.status().message();
  if (!opened.is_ok()) return {};
  auto file = std::make_shared<const gguf::File>(std::move(opened).value());
  cpu::CpuBackend backend(cpu::CpuBackendOptions{2, false});
  Result<std::unique_ptr<Model>> model = load_model(file, backend, ModelOptions{256});
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  if (!model.is_ok()) return {};
  const ModelConfig& c = (*model)->config();
  EXPECT_EQ(c.n_vocab, n_vocab_expected);
  KvPoolConfig kc;
  kc.n_layers = c.n_layers;
  kc.n_kv_heads = c.n_kv_heads;
  kc.head_dim = c.head_dim;
  kc.n_blocks = 256 / kc.block_tokens;
  Result<std::unique_ptr<KvPool>> kv = KvPool::create(backend, kc);
  EXPECT_TRUE(kv.is_ok());
  Session session(**model, **kv);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 12; ++i) prompt.push_back((i * 37 + 5) % c.n_vocab);
  Result<std::vector<float>> logits = session.prefill(prompt, GenerateOptions{});
  EXPECT_TRUE(logits.is_ok());
  return logits.is_ok() ? *logits : std::vector<float>{};
}

void expect_healthy_logits(const std::vector<float>& logits, const std::string& what) {
  ASSERT_FALSE(logits.empty()) << what;
  double sum = 0, sum2 = 0;
  for (float v : logits) {
    ASSERT_TRUE(std::isfinite(v)) << what;
    sum += v;
    sum2 += double{v} * v;
  }
  const double mean = sum / logits.size(), std = std::sqrt(sum2 / logits.size() - mean * mean);
  // The head is drawn for logits with std ~2: not collapsed, not exploded.
  EXPECT_GT(std, 0.5) << what;
  EXPECT_LT(std, 8.0) << what;
}

TEST(SynthModel, TinyPresetsOfEveryArchitectureLoadAndRun) {
  for (const char* name : {"tiny-llama", "tiny-qwen2", "tiny-qwen3"}) {
    for (const char* type : {"f32", "q4_k_m", "q8_0", "q4_0"}) {
      const ModelShape& s = preset(name);
      const std::string path = temp_path(std::string(name) + "_" + type);
      ASSERT_TRUE(write_model(s, mix(type), {1, 0}, path).is_ok());
      expect_healthy_logits(forward_logits(path, s.n_vocab), std::string(name) + " " + type);
      std::filesystem::remove(path);
    }
  }
}

TEST(SynthModel, SmolLM2ShapeRunsAtQ4KM) {
  const ModelShape& s = preset("smollm2-135m");
  const std::string path = temp_path("smollm2_q4_k_m");
  ASSERT_TRUE(write_model(s, mix("q4_k_m"), {3, 0}, path).is_ok());
  expect_healthy_logits(forward_logits(path, s.n_vocab), "smollm2-135m q4_k_m");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tern::synth
