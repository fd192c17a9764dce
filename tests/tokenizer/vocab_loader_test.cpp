// load_vocab() on hand-built GGUF files: a valid tiny vocabulary loads and encodes; each kind of
// malformed vocabulary is rejected with an error that names the offending key.
#include <gtest/gtest.h>

#include "tokenizer/pretokenize.h"
#include "tokenizer_test_util.h"

namespace tern::tok {
namespace {

using gguf::Value;
using gguf::ValueType;

Value strings(const std::vector<std::string>& items) {
  std::vector<Value> v;
  for (const auto& s : items) v.push_back(Value::string(s));
  return Value::array(ValueType::STRING, std::move(v));
}
Value ints(const std::vector<int32_t>& items) {
  std::vector<Value> v;
  for (int32_t i : items) v.push_back(Value::i32(i));
  return Value::array(ValueType::I32, std::move(v));
}

// A six-token byte-level BPE: "a", "b", "ab", "Ġ", "Ġab", "<|end|>".
gguf::Writer tiny_bpe() {
  gguf::Writer w;
  w.set("general.architecture", Value::string("llama"));
  w.set("tokenizer.ggml.model", Value::string("gpt2"));
  w.set("tokenizer.ggml.pre", Value::string("gpt-2"));
  w.set("tokenizer.ggml.tokens", strings({"a", "b", "ab", "\xC4\xA0", "\xC4\xA0" "ab", "<|end|>"}));
  w.set("tokenizer.ggml.token_type", ints({1, 1, 1, 1, 1, 3}));
  w.set("tokenizer.ggml.merges", strings({"a b", "\xC4\xA0 ab"}));
  w.set("tokenizer.ggml.eos_token_id", Value::u32(5));
  return w;
}

Result<std::unique_ptr<Tokenizer>> load(const gguf::Writer& w) {
  // One file per test: ctest runs the tests of this binary as parallel processes.
  const std::string path = std::string(TERN_BINARY_DIR) + "/tokenizer_loader_test_" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".gguf";
  TERN_RETURN_IF_ERROR(w.write(path));
  TERN_ASSIGN_OR_RETURN(gguf::File file, gguf::File::open(path));
  return Tokenizer::from_gguf(file);
}

void expect_error(const gguf::Writer& w, const std::string& needle) {
  auto tok = load(w);
  ASSERT_FALSE(tok) << "expected an error mentioning " << needle;
  EXPECT_NE(tok.status().message().find(needle), std::string::npos) << tok.status().message();
}

TEST(VocabLoader, TinyBpeLoadsAndMerges) {
  auto tok = load(tiny_bpe());
  ASSERT_TRUE(tok) << tok.status().message();
  EXPECT_EQ(testing::join_ids((*tok)->encode("ab ab<|end|>", false, true)), "2 4 5");
  EXPECT_EQ((*tok)->decode({{2, 4, 5}}), "ab ab<|end|>");
  EXPECT_TRUE((*tok)->is_eog(5));
}

TEST(VocabLoader, RejectsMissingMerges) {
  gguf::Writer bad;
  bad.set("tokenizer.ggml.model", Value::string("gpt2"));
  bad.set("tokenizer.ggml.tokens", strings({"a", "b"}));
  expect_error(bad, "tokenizer.ggml.merges");
}

TEST(VocabLoader, RejectsMismatchedArrayLengths) {
  gguf::Writer w = tiny_bpe();
  w.set("tokenizer.ggml.token_type", ints({1, 1, 1}));
  expect_error(w, "tokenizer.ggml.token_type: expected 6 entries");
  gguf::Writer s = tiny_bpe();
  s.set("tokenizer.ggml.scores", Value::array(ValueType::F32, {Value::f32(0)}));
  expect_error(s, "tokenizer.ggml.scores: expected 6 entries");
}

TEST(VocabLoader, RejectsMergesNamingUnknownTokens) {
  gguf::Writer w = tiny_bpe();
  w.set("tokenizer.ggml.merges", strings({"a b", "b a"}));  // "ba" is not a token
  expect_error(w, "tokenizer.ggml.merges[1]");
  gguf::Writer n = tiny_bpe();
  n.set("tokenizer.ggml.merges", strings({"ab"}));  // no space
  expect_error(n, "expected \"LEFT RIGHT\"");
}

TEST(VocabLoader, RejectsUnknownAndVocabLessModels) {
  gguf::Writer w = tiny_bpe();
  w.set("tokenizer.ggml.model", Value::string("bert"));
  expect_error(w, "unsupported tokenizer \"bert\"");
  gguf::Writer none = tiny_bpe();
  none.set("tokenizer.ggml.model", Value::string("no_vocab"));
  expect_error(none, "has no vocabulary");
  gguf::Writer missing;
  missing.set("general.architecture", Value::string("llama"));
  expect_error(missing, "tokenizer.ggml.model");
}

TEST(VocabLoader, RejectsOutOfRangeSpecialIdsAndBadTypes) {
  gguf::Writer w = tiny_bpe();
  w.set("tokenizer.ggml.bos_token_id", Value::u32(6));
  expect_error(w, "tokenizer.ggml.bos_token_id: expected a token id in [0, 6), got 6");
  gguf::Writer t = tiny_bpe();
  t.set("tokenizer.ggml.token_type", ints({1, 1, 1, 1, 1, 9}));
  expect_error(t, "tokenizer.ggml.token_type[5]");
  gguf::Writer s = tiny_bpe();
  s.set("tokenizer.ggml.tokens", Value::string("not an array"));
  expect_error(s, "tokenizer.ggml.tokens: expected an array");
}

TEST(VocabLoader, UnknownPreTokenizerIsAnErrorAndDefaultWarns) {
  gguf::Writer w = tiny_bpe();
  w.set("tokenizer.ggml.pre", Value::string("made-up-pre"));
  expect_error(w, "unsupported pre-tokenizer \"made-up-pre\"");
  gguf::Writer d = tiny_bpe();
  d.set("tokenizer.ggml.pre", Value::string("default"));
  auto tok = load(d);
  ASSERT_TRUE(tok) << tok.status().message();
  ASSERT_EQ((*tok)->warnings().size(), 1u);
  EXPECT_NE((*tok)->warnings()[0].find("GPT-2"), std::string::npos);
}

TEST(VocabLoader, SentencePieceNeedsScores) {
  gguf::Writer w;
  w.set("tokenizer.ggml.model", Value::string("llama"));
  w.set("tokenizer.ggml.tokens", strings({"<unk>", "a"}));
  expect_error(w, "tokenizer.ggml.scores: missing");
}

TEST(PreTokenizerNames, EveryKnownNameResolves) {
  const auto names = known_pre_tokenizer_names();
  EXPECT_GE(names.size(), 50u);
  for (const std::string& name : names) {
    std::string warning;
    auto pre = pre_tokenizer_for(name, &warning);
    EXPECT_TRUE(pre) << name << ": " << pre.status().message();
    EXPECT_TRUE(warning.empty()) << name;
  }
}

}  // namespace
}  // namespace tern::tok
