// Cache-stable history: the exact tokens of every assistant turn tern generated, so that when a
// client sends the turn back as history, the prompt builder splices those tokens in instead of
// re-tokenizing the template's rendering of the message. Turn k+1's prompt then extends turn k's
// prompt + output token for token, and the engine's prefix cache covers all of it.
//
// A turn is found by a canonical form of the message as the client sends it back:
// - content and reasoning with surrounding whitespace trimmed (clients and templates trim);
// - tool calls as (name, arguments), the arguments parsed as JSON and re-serialized with sorted
//   keys and no spaces, so key order and spacing do not matter; call ids do not count;
// - each turn is filed under several forms: with its reasoning, without it (clients that strip
//   reasoning), and as the raw output text (clients that send the model's text back as content).
// Keys are 128-bit hashes mixed with a scope (model fingerprint + cache salt): two tenants never
// see each other's turns.
//
// Bounded: least recently used turns go first once the turn count or the token total exceeds
// the limits. Thread-safe (HTTP threads build prompts and record turns concurrently).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "chat/value.h"

namespace tern::server {

struct MessageKey {
  uint64_t a = 0, b = 0;
  bool operator==(const MessageKey&) const = default;
};

struct MessageKeyHash {
  size_t operator()(const MessageKey& k) const { return static_cast<size_t>(k.a ^ (k.b * 0x9e3779b97f4a7c15ull)); }
};

// One tool call as seen for keying: arguments as JSON text (or a parsed object, see below).
struct CallForKey {
  std::string_view name;
  std::string_view arguments_json;
};

// The canonical key of an assistant message (text, reasoning, calls).
MessageKey message_key(std::string_view text, std::string_view reasoning, std::span<const CallForKey> calls);

// The key(s) a request's assistant message (chat form: content string, optional
// reasoning_content, tool_calls with function.arguments as an object or a JSON string) is looked
// up under: its own key (with reasoning when it carries some, without otherwise). Empty for a
// message that is not an assistant message.
std::vector<MessageKey> lookup_keys(const chat::Value& message);

// Hashes used for verification and keys (stable within a process, not across builds).
uint64_t hash_text(std::string_view text);
uint64_t hash_tokens(uint64_t seed, std::span<const int32_t> tokens);
constexpr uint64_t kTokenHashSeed = 0xcbf29ce484222325ull;

struct RememberedTurn {
  // What the model produced right after its prompt: a forced opening (tool_choice) and every
  // sampled token, without the end-of-turn token (the template writes that one).
  std::vector<int32_t> output_tokens;
  uint64_t prompt_tokens_hash = 0;  // hash_tokens of the prompt tokens the output followed
  uint64_t prompt_text_hash = 0;    // hash_text of the rendered prompt text (before any forced output)
  size_t prompt_text_bytes = 0;
  bool has_reasoning = false;       // the output holds a reasoning block (templates may drop it)
};

struct TurnMemoryOptions {
  size_t max_turns = 16384;           // remembered turns at most
  size_t max_tokens = size_t{4} << 20;  // output tokens over all turns at most (4 bytes each)
};

struct TurnMemoryStats {
  size_t n_turns = 0;
  size_t n_tokens = 0;
  uint64_t n_evicted = 0;
};

class TurnMemory {
 public:
  explicit TurnMemory(TurnMemoryOptions options = {});

  // Files `turn` under each key (within `scope`). A turn longer than max_tokens is not kept.
  void remember(uint64_t scope, std::span<const MessageKey> keys, RememberedTurn turn);
  // Turns filed under `key`, most recently remembered first; touching them keeps them alive.
  std::vector<std::shared_ptr<const RememberedTurn>> find(uint64_t scope, const MessageKey& key);
  TurnMemoryStats stats() const;

 private:
  struct Entry {
    std::shared_ptr<const RememberedTurn> turn;
    std::vector<MessageKey> keys;  // scoped keys
  };
  using Lru = std::list<Entry>;  // front = most recently used
  // How many turns one key keeps (the same short message, "OK.", said in several conversations
  // with different tokens): the prompt builder picks the one whose prompt matches.
  static constexpr size_t kTurnsPerKey = 4;

  void evict_back();

  TurnMemoryOptions options_;
  mutable std::mutex mutex_;
  Lru lru_;
  std::unordered_map<MessageKey, std::vector<Lru::iterator>, MessageKeyHash> by_key_;
  size_t n_tokens_ = 0;
  uint64_t n_evicted_ = 0;
};

}  // namespace tern::server
