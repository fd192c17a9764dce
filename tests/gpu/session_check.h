// The engine's invariants on one loaded model, for the GPU model tests: chunked prefill, prefix
// reuse and speculation change speed only, never the prefill logits or the greedy tokens.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/session.h"
#include "gpu_model_util.h"
#include "gpu_test_util.h"
#include "spec/ngram_drafter.h"

namespace tern::gputest {

// Whole against chunked prefill (bit for bit), then plain greedy decoding against two runs with
// n-gram speculation and prefix reuse (the same tokens; the second run finds the first one's
// blocks). The pool must hold two sequences of the prompt plus max_tokens at once, plus the
// blocks a finished run leaves in the prefix index. A prompt that repeats itself gets drafts
// accepted.
inline void expect_session_invariants(Loaded& m, const std::vector<int32_t>& prompt, int chunk_tokens, int max_tokens) {
  GenerateOptions whole, chunked;
  chunked.prefill_chunk_tokens = chunk_tokens;
  whole.reuse_prefix = chunked.reuse_prefix = false;
  whole.max_tokens = chunked.max_tokens = max_tokens;
  {
    Session a(*m.model, *m.kv), b(*m.model, *m.kv);
    auto la = a.prefill(prompt, whole);
    auto lb = b.prefill(prompt, chunked);
    ASSERT_TRUE(la.is_ok()) << la.status().message();
    ASSERT_TRUE(lb.is_ok()) << lb.status().message();
    EXPECT_TRUE(bitwise_equal(la.value(), lb.value()));
  }
  Session plain(*m.model, *m.kv);
  auto g_plain = plain.generate(prompt, whole);
  ASSERT_TRUE(g_plain.is_ok()) << g_plain.status().message();
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE("speculative run " + std::to_string(run));
    NgramDrafter drafter;
    GenerateOptions spec = whole;
    spec.drafter = &drafter;
    spec.reuse_prefix = true;
    Session speculative(*m.model, *m.kv);
    auto g_spec = speculative.generate(prompt, spec);
    ASSERT_TRUE(g_spec.is_ok()) << g_spec.status().message();
    EXPECT_EQ(g_spec.value().tokens, g_plain.value().tokens);
    if (run == 1) {
      EXPECT_GT(g_spec.value().stats.cached_tokens, 0);
    }
  }
}

}  // namespace tern::gputest
