// The reader on real llama.cpp-written files: the default model (known facts from its model
// card and gguf-py) and the vocab-only GGUFs in shared/data/tokenizer-vectors. These files are
// not in the repository, so each test skips when its file is absent; the format tests proper
// (round trip, reader) never depend on them.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>

#include "formats/gguf.h"

namespace tern::gguf {
namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// models/ in the source tree, else $TERN_MODEL; empty when neither exists.
std::string default_model() {
  if (exists(TERN_DEFAULT_MODEL)) return TERN_DEFAULT_MODEL;
  const char* env = std::getenv("TERN_MODEL");
  return env != nullptr && exists(env) ? env : "";
}

TEST(GgufRealFiles, DefaultModelFacts) {
  const std::string path = default_model();
  if (path.empty()) GTEST_SKIP() << "no default model (run scripts/fetch-model or set TERN_MODEL)";
  auto f = File::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();

  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->metadata().size(), 33u);
  EXPECT_EQ(*f->get_string("general.architecture"), "llama");
  EXPECT_EQ(*f->get_uint("llama.block_count"), 30u);
  EXPECT_EQ(*f->get_uint("llama.embedding_length"), 576u);
  EXPECT_EQ(*f->get_uint("llama.attention.head_count"), 9u);
  EXPECT_EQ(*f->get_uint("llama.attention.head_count_kv"), 3u);
  EXPECT_EQ(*f->get_float("llama.rope.freq_base"), 100000.0);
  EXPECT_FLOAT_EQ(static_cast<float>(*f->get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_EQ(*f->get_bool_opt("tokenizer.ggml.add_bos_token"), false);
  EXPECT_EQ(f->get_string("tokenizer.chat_template")->rfind("{% for message in messages %}", 0), 0u);

  auto tokens = f->get_array("tokenizer.ggml.tokens", ValueType::STRING);
  ASSERT_TRUE(tokens.is_ok()) << tokens.status().message();
  ASSERT_EQ((*tokens)->items.size(), 49152u);
  EXPECT_EQ(*(*tokens)->items[0].as_string(), "<|endoftext|>");
  EXPECT_EQ(*(*tokens)->items[1].as_string(), "<|im_start|>");
  EXPECT_EQ((*f->get_array("tokenizer.ggml.merges", ValueType::STRING))->items.size(), 48900u);
  EXPECT_EQ((*f->get_array("tokenizer.ggml.token_type", ValueType::I32))->items.size(), 49152u);

  ASSERT_EQ(f->tensors().size(), 272u);
  std::map<DType, int> n_by_type;
  uint64_t n_tensor_bytes = 0;
  for (const auto& t : f->tensors()) {
    ++n_by_type[t.type];
    n_tensor_bytes += t.n_bytes;
  }
  EXPECT_EQ(n_by_type[DType::Q4_1], 210);
  EXPECT_EQ(n_by_type[DType::F32], 61);
  EXPECT_EQ(n_by_type[DType::Q8_0], 1);
  EXPECT_EQ(f->data_offset(), 1785664u);
  EXPECT_EQ(n_tensor_bytes, 96576768u);
  EXPECT_EQ(f->data_offset() + n_tensor_bytes, f->file_size());  // densely packed, ends on the data

  const TensorInfo* embd = f->find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->type, DType::Q8_0);
  EXPECT_EQ(embd->shape, (std::vector<int64_t>{576, 49152}));
  const TensorInfo* q = f->find_tensor("blk.29.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, DType::Q4_1);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{576, 576}));
  EXPECT_EQ(q->n_bytes, 576u / 32 * 20 * 576);
  const TensorInfo* k = f->find_tensor("blk.0.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->shape, (std::vector<int64_t>{576, 192}));  // 3 kv heads of 64
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);    // tied to token_embd
}

// Re-writing the model reproduces the original file byte for byte: same metadata encoding,
// tensor order, offsets and padding as the gguf-py writer that made it.
TEST(GgufRealFiles, DefaultModelRewritesByteIdentical) {
  const std::string path = default_model();
  if (path.empty()) GTEST_SKIP() << "no default model (run scripts/fetch-model or set TERN_MODEL)";
  auto f = File::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  Writer w;
  for (const auto& [key, value] : f->metadata()) w.set(key, value);
  for (const auto& t : f->tensors()) w.add_tensor(t.name, t.type, t.shape, t.data);
  auto bytes = w.to_bytes();
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().message();
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> original((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes->size(), original.size());
  EXPECT_TRUE(*bytes == original);
}

struct VocabFile {
  const char* name;
  const char* architecture;
  const char* tokenizer_model;
  size_t n_tokens;
  size_t n_merges;  // 0: an SPM vocab with scores instead
};

TEST(GgufRealFiles, VocabOnlyFilesFromLlamaCpp) {
  const std::string dir = std::string(TERN_SHARED_DATA) + "/tokenizer-vectors";
  if (!exists(dir)) GTEST_SKIP() << dir << " not present";
  const VocabFile files[] = {
      {"ggml-vocab-gpt-2.gguf", "gpt2", "gpt2", 50257, 50000},
      {"ggml-vocab-deepseek-coder.gguf", "llama", "gpt2", 32256, 31757},
      {"ggml-vocab-llama-spm.gguf", "llama", "llama", 32000, 0},
      {"ggml-vocab-phi-3.gguf", "phi3", "llama", 32064, 0},
  };
  for (const VocabFile& v : files) {
    SCOPED_TRACE(v.name);
    auto f = File::open(dir + "/" + v.name);
    ASSERT_TRUE(f.is_ok()) << f.status().message();
    EXPECT_EQ(f->version(), 3u);
    EXPECT_TRUE(f->tensors().empty());
    EXPECT_EQ(f->data_offset(), f->file_size());  // these files end without the final padding
    EXPECT_EQ(*f->get_string("general.architecture"), v.architecture);
    EXPECT_EQ(*f->get_string("tokenizer.ggml.model"), v.tokenizer_model);
    auto tokens = f->get_array("tokenizer.ggml.tokens", ValueType::STRING);
    ASSERT_TRUE(tokens.is_ok()) << tokens.status().message();
    EXPECT_EQ((*tokens)->items.size(), v.n_tokens);
    EXPECT_EQ((*f->get_array("tokenizer.ggml.token_type", ValueType::I32))->items.size(), v.n_tokens);
    if (v.n_merges > 0) {
      EXPECT_EQ((*f->get_array("tokenizer.ggml.merges", ValueType::STRING))->items.size(), v.n_merges);
    } else {
      EXPECT_EQ((*f->get_array("tokenizer.ggml.scores", ValueType::F32))->items.size(), v.n_tokens);
      EXPECT_EQ(*(*tokens)->items[1].as_string(), "<s>");
    }
  }
}

}  // namespace
}  // namespace tern::gguf
