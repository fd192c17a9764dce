// Speculative decoding, the prefix index, stop strings and the thinking budget on the default
// model. The invariant: greedy tokens are identical with speculation on and off, with prefix reuse
// on and off and for every prefill chunk size.
#include <gtest/gtest.h>

#include "../common/chat_model_fixture.h"
#include "engine/session.h"
#include "spec/ngram_drafter.h"
#include "spec/suffix_drafter.h"
#include "tokenizer/tokenizer.h"

namespace tern {
namespace {

using EngineOnDefaultModel = testing::DefaultChatModel;

// A prompt the model answers by quoting its context: the n-gram drafter's home ground.
const char* kQuotePrompt =
    "Here is a file:\n```python\ndef area(width, height):\n    return width * height\n\n"
    "def perimeter(width, height):\n    return 2 * (width + height)\n```\n"
    "Repeat the file exactly, inside a python code block.";

TEST_F(EngineOnDefaultModel, GreedyIsIdenticalWithSpeculationReuseAndChunking) {
  const auto prompt = chat(kQuotePrompt);
  GenerateOptions base;
  base.max_tokens = 48;
  base.reuse_prefix = false;
  Session plain(*m_.model, *m_.kv, tok_.get());
  auto ref = plain.generate(prompt, base);
  ASSERT_TRUE(ref.is_ok()) << ref.status().message();
  ASSERT_EQ(ref.value().tokens.size(), 48u);

  // The suffix drafter's shared corpus holds an earlier answer to the same request.
  auto corpus = std::make_shared<SuffixCorpus>();
  {
    std::vector<int32_t> earlier = prompt;
    earlier.insert(earlier.end(), ref.value().tokens.begin(), ref.value().tokens.end());
    corpus->add(earlier);
  }
  for (int chunk : {1, 7, 64, 512}) {
    for (bool reuse : {false, true}) {
      int plain_forwards = 0;
      for (const std::string drafter_name : {"none", "ngram", "suffix"}) {
        const bool speculate = drafter_name != "none";
        NgramDrafter ngram;
        SuffixDrafter suffix(corpus);
        GenerateOptions o = base;
        o.prefill_chunk_tokens = chunk;
        o.reuse_prefix = reuse;
        o.drafter = drafter_name == "ngram" ? static_cast<DraftSource*>(&ngram)
                    : drafter_name == "suffix" ? static_cast<DraftSource*>(&suffix)
                                               : nullptr;
        Session s(*m_.model, *m_.kv, tok_.get());
        auto r = s.generate(prompt, o);
        ASSERT_TRUE(r.is_ok()) << r.status().message();
        EXPECT_EQ(r.value().tokens, ref.value().tokens) << "chunk " << chunk << " reuse " << reuse << " drafter " << drafter_name;
        EXPECT_EQ(r.value().text, ref.value().text);
        if (speculate) {
          EXPECT_GT(r.value().stats.drafts_proposed, 0);
          EXPECT_GT(r.value().stats.drafts_accepted, 0);
          EXPECT_LT(r.value().stats.forwards, plain_forwards);  // accepted drafts save forwards
        } else {
          plain_forwards = r.value().stats.forwards;
        }
        if (reuse) {
          EXPECT_GT(r.value().stats.cached_tokens, 0);  // blocks of the first session
        }
      }
    }
  }
}

TEST_F(EngineOnDefaultModel, SecondSessionReusesTheFirstSessionsBlocks) {
  const auto system = tok_->encode(
      "<|im_start|>system\nYou are a careful coding agent. Use the tools given. Answer briefly.<|im_end|>\n", true, true);
  std::vector<int32_t> p1 = system, p2 = system;
  const auto u1 = chat("List three prime numbers."), u2 = chat("Name a colour.");
  p1.insert(p1.end(), u1.begin(), u1.end());
  p2.insert(p2.end(), u2.begin(), u2.end());
  GenerateOptions o;
  o.max_tokens = 8;
  Session parent(*m_.model, *m_.kv, tok_.get());
  ASSERT_TRUE(parent.generate(p1, o).is_ok());
  Session sub(*m_.model, *m_.kv, tok_.get());
  auto r = sub.generate(p2, o);
  ASSERT_TRUE(r.is_ok());
  const int bt = m_.kv->config().block_tokens;
  EXPECT_EQ(r.value().stats.cached_tokens, static_cast<int>(system.size()) / bt * bt);
  // Same answer as a session that computed everything itself.
  GenerateOptions fresh = o;
  fresh.reuse_prefix = false;
  Session cold(*m_.model, *m_.kv, tok_.get());
  auto c = cold.generate(p2, fresh);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(r.value().tokens, c.value().tokens);
}

TEST_F(EngineOnDefaultModel, StopStringEndsGenerationAndIsNotEmitted) {
  const auto prompt = chat("Count from 1 to 20, separated by commas.");
  GenerateOptions o;
  o.max_tokens = 64;
  Session s(*m_.model, *m_.kv, tok_.get());
  auto full = s.generate(prompt, o);
  ASSERT_TRUE(full.is_ok());
  const std::string& text = full.value().text;
  ASSERT_NE(text.find("5"), std::string::npos) << text;
  o.stop_strings = {"5"};
  std::string streamed;
  o.on_text = [&](std::string_view t) { streamed += t; };
  auto cut = s.generate(prompt, o);
  ASSERT_TRUE(cut.is_ok());
  EXPECT_EQ(cut.value().stats.stop_reason, StopReason::kStopString);
  EXPECT_EQ(cut.value().text, text.substr(0, text.find("5")));
  EXPECT_EQ(streamed, cut.value().text);
}

TEST_F(EngineOnDefaultModel, ThinkingBudgetClosesTheBlock) {
  auto prompt = chat("Why is the sky blue?");
  const auto open = tok_->encode("<think>\n", false, true);
  prompt.insert(prompt.end(), open.begin(), open.end());
  GenerateOptions o;
  o.max_tokens = 40;
  o.think_budget_tokens = 10;
  Session s(*m_.model, *m_.kv, tok_.get());
  auto r = s.generate(prompt, o);
  ASSERT_TRUE(r.is_ok());
  const std::string& text = r.value().text;
  const size_t close = text.find("</think>");
  ASSERT_NE(close, std::string::npos) << text;
  // The close tag arrives right after the budget: the tokens before it number the budget.
  const auto before = tok_->encode(text.substr(0, close), false, false);
  EXPECT_LE(static_cast<int>(before.size()), 12);
}

TEST_F(EngineOnDefaultModel, CallbackStopAndZeroMaxTokens) {
  const auto prompt = chat("Say hello.");
  GenerateOptions o;
  o.max_tokens = 0;
  Session s(*m_.model, *m_.kv, tok_.get());
  auto r = s.generate(prompt, o);
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(r.value().tokens.empty());
  o.max_tokens = 50;
  o.should_stop = [](std::string_view, int n) { return n >= 3; };
  r = s.generate(prompt, o);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r.value().tokens.size(), 3u);
  EXPECT_EQ(r.value().stats.stop_reason, StopReason::kCallback);
}

}  // namespace
}  // namespace tern
