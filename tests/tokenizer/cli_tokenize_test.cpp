// `tern tokenize` end to end: one line of space-separated ids, --special adds BOS/EOS,
// --no-parse-special keeps special-token text as text, vocab-only files work, errors exit 1.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>

#include "tokenizer_test_util.h"

namespace tern::tok {
namespace {

std::string tern_binary() { return std::string(TERN_BINARY_DIR) + "/tern"; }

// Runs a shell command; returns stdout and sets *exit_code.
std::string run(const std::string& command, int* exit_code) {
  std::string out;
  FILE* pipe = popen((command + " 2>/dev/null").c_str(), "r");
  if (pipe == nullptr) return out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  const int status = pclose(pipe);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

class CliTokenize : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(tern_binary())) GTEST_SKIP() << tern_binary() << " not built";
  }
};

TEST_F(CliTokenize, PrintsIdsOfVocabOnlyFiles) {
  const std::string gpt2 = testing::shared_vectors_dir() + "/ggml-vocab-gpt-2.gguf";
  const std::string spm = testing::shared_vectors_dir() + "/ggml-vocab-llama-spm.gguf";
  if (!std::filesystem::exists(gpt2) || !std::filesystem::exists(spm)) GTEST_SKIP() << "vocab vectors absent";
  int rc = -1;
  EXPECT_EQ(run(tern_binary() + " tokenize -m " + gpt2 + " 'Hello world'", &rc), "15496 995\n");
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(run(tern_binary() + " tokenize -m " + spm + " 'Hello world'", &rc), "15043 3186\n");
  EXPECT_EQ(run(tern_binary() + " tokenize -m " + spm + " --special 'Hello world'", &rc), "1 15043 3186\n");
  EXPECT_EQ(run(tern_binary() + " tokenize -m " + spm + " --decode '1 15043 3186'", &rc), "<s> Hello world\n");
}

TEST_F(CliTokenize, SpecialTokenTextAndErrors) {
  const std::string model = testing::default_model_path();
  if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " absent";
  int rc = -1;
  EXPECT_EQ(run(tern_binary() + " tokenize -m " + model + " '<|im_start|>user'", &rc), "1 4093\n");
  EXPECT_NE(run(tern_binary() + " tokenize -m " + model + " --no-parse-special '<|im_start|>'", &rc), "1\n");
  run(tern_binary() + " tokenize -m /nonexistent.gguf hi", &rc);
  EXPECT_EQ(rc, 1);
}

}  // namespace
}  // namespace tern::tok
