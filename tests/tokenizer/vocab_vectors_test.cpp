// llama.cpp's vocab-only GGUFs with their test strings (.inp) and the ids HF produced (.out):
// every line must match exactly, then decode must give the text back.
#include <gtest/gtest.h>

#include "tokenizer_test_util.h"

namespace tern::tok {
namespace {

using testing::join_ids;
using testing::read_file;

struct VectorCase {
  std::vector<std::string> texts;
  std::vector<std::string> expected;  // space-separated ids, one per text
};

VectorCase load_case(const std::string& base) {
  VectorCase c;
  const std::string inp = read_file(base + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) break;
    c.texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream out(read_file(base + ".out"));
  for (std::string line; std::getline(out, line);) {
    std::istringstream ids(line);
    std::vector<int32_t> v;
    for (int32_t id; ids >> id;) v.push_back(id);
    c.expected.push_back(join_ids(v));
  }
  return c;
}

class VocabVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabVectors, EveryLineMatchesHuggingFace) {
  const std::string base = testing::shared_vectors_dir() + "/ggml-vocab-" + GetParam() + ".gguf";
  std::string why;
  auto tok = testing::load_tokenizer(base, &why);
  if (!tok && !std::filesystem::exists(base)) GTEST_SKIP() << why;
  ASSERT_TRUE(tok) << why;
  const VectorCase c = load_case(base);
  ASSERT_EQ(c.texts.size(), c.expected.size());
  ASSERT_GE(c.texts.size(), 40u);
  for (size_t i = 0; i < c.texts.size(); ++i) {
    const std::vector<int32_t> ids = tok->encode(c.texts[i], /*add_bos_eos=*/false, /*parse_special=*/false);
    EXPECT_EQ(join_ids(ids), c.expected[i]) << "text #" << i << ": \"" << c.texts[i] << "\"";
  }
}

TEST_P(VocabVectors, DecodeRoundTrips) {
  const std::string base = testing::shared_vectors_dir() + "/ggml-vocab-" + GetParam() + ".gguf";
  std::string why;
  auto tok = testing::load_tokenizer(base, &why);
  if (!tok && !std::filesystem::exists(base)) GTEST_SKIP() << why;
  ASSERT_TRUE(tok) << why;
  const bool spm = tok->vocab().model == VocabModel::kSpm;
  for (const std::string& text : load_case(base).texts) {
    const std::vector<int32_t> ids = tok->encode(text, false, false);
    std::string expected = text;
    // SentencePiece prepends one space and strips it again; a text that starts with spaces keeps them.
    EXPECT_EQ(tok->decode(ids), expected) << (spm ? "spm" : "bpe") << " text: \"" << text << "\"";
  }
}

INSTANTIATE_TEST_SUITE_P(LlamaCppVocabs, VocabVectors,
                         ::testing::Values("gpt-2", "llama-spm", "deepseek-coder", "phi-3"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name) ch = (ch == '-') ? '_' : ch;
                           return name;
                         });

}  // namespace
}  // namespace tern::tok
