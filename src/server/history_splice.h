// Splices remembered assistant turns (turn_memory.h) into a rendered chat prompt.
//
// The template renders the whole conversation as usual (text T). For each assistant message the
// turn memory knows, the span of T that holds the model's part of that message is located and
// replaced by the exact tokens the model produced; the text between spans is tokenized as usual.
//
// Locating a span, without trusting the template to render the message the way the model wrote
// it (it re-serializes tool calls, trims, may drop reasoning):
// - start: the end of the prompt the model saw when it wrote the turn. Found by the hash of that
//   prompt's text (recorded with the turn) when T begins with it; otherwise by rendering the
//   messages before this one with a generation prompt and checking that T begins with that. When
//   neither holds, the template changed an earlier part of the conversation (Qwen3 dropping
//   reasoning, Mistral moving the tools) and the message is left to the template.
// - end: the first end-of-turn marker (<|im_end|>, <|eot_id|>, <end_of_turn>, eos, ...) after
//   the start. Messages whose own text contains a marker are left alone.
// - reasoning: a turn whose output held reasoning is spliced only where the template renders
//   reasoning at that position (checked with one probe render), so a template that drops old
//   reasoning keeps doing so, while a client that stripped reasoning the template would keep
//   gets it back.
//
// Segments are tokenized separately; the boundaries fall at the start of an assistant turn
// (after the generation prompt) and at an end-of-turn marker (a special token), so turn k's
// prompt (whose last segment ended at the generation prompt) is a token prefix of turn k+1's.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "server/turn_memory.h"
#include "tokenizer/tokenizer.h"

namespace tern::server {

// An assistant message of the rendered request that the turn memory knows.
struct HistoryHit {
  size_t message_index = 0;  // in ChatRequest::messages
  std::vector<std::shared_ptr<const RememberedTurn>> turns;  // candidates, most recent first
};

struct SpliceStats {
  int n_remembered = 0;      // assistant messages found in the turn memory
  int n_spliced = 0;         // replaced by the model's tokens
  int n_verified = 0;        // of those: after exactly the prompt tokens they were generated after
  int n_spliced_tokens = 0;
};

struct SplicedPrompt {
  std::vector<int32_t> tokens;
  uint64_t tokens_hash = kTokenHashSeed;  // hash_tokens over `tokens`
  SpliceStats stats;
};

// `rendered` is apply_chat_template(tmpl, request). `end_markers`: the texts that end a turn.
// Hits must be in message order. Rendering failures of the probes just leave messages unspliced.
SplicedPrompt splice_history(const std::string& rendered, const chat::ChatTemplate& tmpl, const chat::ChatRequest& request,
                             std::span<const HistoryHit> hits, std::span<const std::string> end_markers,
                             const tok::Tokenizer& tokenizer);

}  // namespace tern::server
