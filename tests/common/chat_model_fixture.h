// A fixture for tests that generate with the default model: the model, its tokenizer and ChatML
// prompts (SmolLM2's chat format written out; these tests need token ids, not a template engine).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "model_fixture.h"
#include "tokenizer/tokenizer.h"

namespace tern::testing {

class DefaultChatModel : public ::testing::Test {
 protected:
  void SetUp() override {
    m_ = load_test_model(default_model_path());
    ASSERT_NE(m_.model, nullptr);
    auto tok = tok::Tokenizer::from_gguf(*m_.file);
    ASSERT_TRUE(tok.is_ok()) << tok.status().message();
    tok_ = std::move(tok).value();
  }
  std::vector<int32_t> chat(const std::string& user) const {
    return tok_->encode("<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n", true, true);
  }
  std::vector<int32_t> chat(const std::string& system, const std::string& user) const {
    return tok_->encode("<|im_start|>system\n" + system + "<|im_end|>\n<|im_start|>user\n" + user +
                            "<|im_end|>\n<|im_start|>assistant\n",
                        true, true);
  }

  LoadedTestModel m_;
  std::unique_ptr<tok::Tokenizer> tok_;
};

}  // namespace tern::testing
