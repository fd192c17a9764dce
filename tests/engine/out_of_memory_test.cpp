// A step whose activations do not fit the backend's memory fails its requests with a message
// that says so, and nothing else breaks: the engine serves the next request, a Session returns
// the error, and the model's workspace is sized again by the next step that fits. The backend is
// the CPU backend behind a byte budget (tests/common/budget_backend.h) holding the default model,
// its KV pool and room for short steps only.
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <string>

#include "../common/budget_backend.h"
#include "../common/model_fixture.h"
#include "engine/engine.h"
#include "engine/session.h"
#include "engine_harness.h"
#include "tokenizer/tokenizer.h"

namespace tern {
namespace {

using testing::BudgetBackend;
using testing::Collected;

class OutOfMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto file = gguf::File::open(testing::default_model_path());
    ASSERT_TRUE(file.is_ok()) << file.status().message();
    file_ = std::make_shared<const gguf::File>(std::move(file).value());
    auto tok = tok::Tokenizer::from_gguf(*file_);
    ASSERT_TRUE(tok.is_ok()) << tok.status().message();
    tok_ = std::move(tok).value();
    const uint64_t weights = file_->tensor_bytes();
    // The weights, the rope table (well under 1 MiB), a 1024-token KV pool (SmolLM2: 22.5 KiB per
    // token) and 6 MiB for the workspace, which takes ~25 KiB per token and 192 KiB per logit row:
    // a short prompt's steps and verifies fit (3.5 MiB with 16 logit rows), 400 tokens do not.
    constexpr int kCtx = 1024;
    backend_ = std::make_unique<BudgetBackend>(weights + (uint64_t{1} << 20) + kCtx * uint64_t{23040} + (uint64_t{6} << 20),
                                               UINT64_MAX);
    ModelOptions mo;
    mo.n_ctx = kCtx;
    auto model = load_model(file_, *backend_, mo);
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    model_ = std::move(model).value();
    const ModelConfig& c = model_->config();
    KvPoolConfig kc;
    kc.n_layers = c.n_layers;
    kc.n_kv_heads = c.n_kv_heads;
    kc.head_dim = c.head_dim;
    kc.n_blocks = kCtx / kc.block_tokens;
    auto pool = KvPool::create(*backend_, kc);
    ASSERT_TRUE(pool.is_ok()) << pool.status().message();
    pool_ = std::move(pool).value();
  }

  std::vector<int32_t> prompt(const std::string& user) const {
    return tok_->encode("<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n", true, true);
  }
  std::vector<int32_t> long_prompt() const {
    std::string text;
    for (int i = 0; i < 40; ++i) text += "Line " + std::to_string(i) + " of a long file the agent read. ";
    return prompt(text);
  }

  std::shared_ptr<const gguf::File> file_;
  std::unique_ptr<tok::Tokenizer> tok_;
  std::unique_ptr<BudgetBackend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvPool> pool_;
};

TEST_F(OutOfMemoryTest, EngineFailsTheStepThatDoesNotFitAndServesTheNext) {
  const std::vector<int32_t> big = long_prompt(), small = prompt("Say hi.");
  ASSERT_GT(big.size(), 400u);
  ASSERT_LT(small.size(), 40u);
  // The reference for the short request, on a fresh session.
  Session ref(*model_, *pool_, tok_.get());
  GenerateOptions o;
  o.max_tokens = 8;
  o.reuse_prefix = false;
  auto want = ref.generate(small, o);
  ASSERT_TRUE(want.is_ok()) << want.status().message();
  ref.reset();

  Engine engine(*model_, *pool_, *tok_, EngineOptions{4, 8, 512});
  auto a = std::make_shared<Collected>(), b = std::make_shared<Collected>();
  ASSERT_TRUE(engine.submit(testing::collect_request(big, 8, a)).is_ok());
  a->done.get_future().wait();
  ASSERT_EQ(a->last().kind, EngineEvent::Kind::kError);
  EXPECT_NE(a->last().text.find("out of budget memory"), std::string::npos) << a->last().text;
  const size_t first_step = std::min<size_t>(big.size(), 512);  // (the prefill chunk)
  EXPECT_NE(a->last().text.find("a step of " + std::to_string(first_step) + " tokens"), std::string::npos)
      << a->last().text;
  EXPECT_GE(backend_->steps_cancelled(), 1);

  ASSERT_TRUE(engine.submit(testing::collect_request(small, 8, b)).is_ok());
  b->done.get_future().wait();
  ASSERT_EQ(b->last().kind, EngineEvent::Kind::kFinished) << b->last().text;
  EXPECT_EQ(b->last().tokens, want.value().tokens);
  EXPECT_EQ(engine.metrics().requests_failed.load(), 1);
}

TEST_F(OutOfMemoryTest, SessionReturnsTheErrorAndGoesOn) {
  Session s(*model_, *pool_, tok_.get());
  GenerateOptions o;
  o.max_tokens = 4;
  auto big = s.generate(long_prompt(), o);
  ASSERT_FALSE(big.is_ok());
  EXPECT_NE(big.status().message().find("out of budget memory"), std::string::npos) << big.status().message();
  s.reset();
  auto small = s.generate(prompt("Say hi."), o);
  ASSERT_TRUE(small.is_ok()) << small.status().message();
  EXPECT_FALSE(small.value().tokens.empty());
}

}  // namespace
}  // namespace tern
