#include "server/turn_memory.h"

#include <functional>

#include "chat/json.h"

namespace tern::server {
namespace {

std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// Arguments as sorted, compact JSON; text that is not JSON stays as it is (trimmed).
std::string canonical_arguments(const chat::Value& args) {
  chat::JsonDumpOptions o;
  o.sort_keys = true;
  o.item_separator = ",";
  o.key_separator = ":";
  Result<std::string> s = chat::dump_json(args, o);
  return s.is_ok() ? s.value() : std::string();
}

std::string canonical_arguments_text(std::string_view json_text) {
  Result<chat::Value> v = chat::parse_json(json_text);
  return v.is_ok() ? canonical_arguments(v.value()) : std::string(trim(json_text));
}

// The canonical text; NUL-separated fields so that no field can run into the next.
MessageKey key_of(std::string_view text, std::string_view reasoning, const std::vector<std::pair<std::string, std::string>>& calls) {
  std::string c;
  c.reserve(text.size() + reasoning.size() + 64);
  c += "text";
  c += '\0';
  c += trim(text);
  c += '\0';
  c += "reasoning";
  c += '\0';
  c += trim(reasoning);
  for (const auto& [name, args] : calls) {
    c += '\0';
    c += "call";
    c += '\0';
    c += name;
    c += '\0';
    c += args;
  }
  // Two unrelated 64-bit hashes: a collision would splice another turn's tokens, so 128 bits.
  return MessageKey{hash_text(c), std::hash<std::string_view>{}(c)};
}

const std::string* string_field(const chat::Value& v, std::string_view key) {
  const chat::Value* f = v.get(key);
  return f != nullptr && f->is_string() ? &f->as_string() : nullptr;
}

MessageKey scoped(uint64_t scope, const MessageKey& k) {
  return MessageKey{k.a ^ (scope * 0x9e3779b97f4a7c15ull), k.b + scope};
}

}  // namespace

uint64_t hash_text(std::string_view text) {
  // FNV-1a, 64-bit.
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t hash_tokens(uint64_t seed, std::span<const int32_t> tokens) {
  uint64_t h = seed;
  for (int32_t t : tokens) {
    h ^= static_cast<uint32_t>(t);
    h *= 0x100000001b3ull;
    h ^= h >> 29;
  }
  return h;
}

MessageKey message_key(std::string_view text, std::string_view reasoning, std::span<const CallForKey> calls) {
  std::vector<std::pair<std::string, std::string>> canon;
  for (const CallForKey& c : calls) canon.emplace_back(std::string(c.name), canonical_arguments_text(c.arguments_json));
  return key_of(text, reasoning, canon);
}

std::vector<MessageKey> lookup_keys(const chat::Value& message) {
  const std::string* role = string_field(message, "role");
  if (role == nullptr || *role != "assistant") return {};
  const std::string* content = string_field(message, "content");
  const std::string* reasoning = string_field(message, "reasoning_content");
  std::vector<std::pair<std::string, std::string>> calls;
  if (const chat::Value* tc = message.get("tool_calls"); tc != nullptr && tc->is_array()) {
    for (const chat::Value& call : tc->as_array()) {
      const chat::Value* fn = call.get("function");
      if (fn == nullptr) return {};
      const std::string* name = string_field(*fn, "name");
      const chat::Value* args = fn->get("arguments");
      std::string canon = args == nullptr      ? std::string("{}")
                          : args->is_string() ? canonical_arguments_text(args->as_string())
                                              : canonical_arguments(*args);
      calls.emplace_back(name != nullptr ? *name : std::string(), std::move(canon));
    }
  }
  const std::string_view text = content != nullptr ? std::string_view(*content) : std::string_view();
  return {key_of(text, reasoning != nullptr ? std::string_view(*reasoning) : std::string_view(), calls)};
}

TurnMemory::TurnMemory(TurnMemoryOptions options) : options_(options) {}

void TurnMemory::remember(uint64_t scope, std::span<const MessageKey> keys, RememberedTurn turn) {
  if (keys.empty() || turn.output_tokens.empty() || turn.output_tokens.size() > options_.max_tokens) return;
  auto shared = std::make_shared<const RememberedTurn>(std::move(turn));
  std::lock_guard<std::mutex> lock(mutex_);
  Entry e;
  e.turn = shared;
  for (const MessageKey& k : keys) {
    const MessageKey s = scoped(scope, k);
    bool seen = false;
    for (const MessageKey& have : e.keys) seen = seen || have == s;
    if (!seen) e.keys.push_back(s);
  }
  lru_.push_front(std::move(e));
  n_tokens_ += shared->output_tokens.size();
  for (const MessageKey& k : lru_.front().keys) {
    std::vector<Lru::iterator>& slot = by_key_[k];
    slot.insert(slot.begin(), lru_.begin());
    if (slot.size() > kTurnsPerKey) {
      // The oldest turn under this key leaves that key only (it may still be filed elsewhere).
      Lru::iterator old = slot.back();
      slot.pop_back();
      std::erase(old->keys, k);
      if (old->keys.empty()) {
        n_tokens_ -= old->turn->output_tokens.size();
        lru_.erase(old);
        ++n_evicted_;
      }
    }
  }
  while (!lru_.empty() && (lru_.size() > options_.max_turns || n_tokens_ > options_.max_tokens)) evict_back();
}

void TurnMemory::evict_back() {
  Lru::iterator victim = std::prev(lru_.end());
  for (const MessageKey& k : victim->keys) {
    auto it = by_key_.find(k);
    if (it == by_key_.end()) continue;
    std::erase(it->second, victim);
    if (it->second.empty()) by_key_.erase(it);
  }
  n_tokens_ -= victim->turn->output_tokens.size();
  lru_.erase(victim);
  ++n_evicted_;
}

std::vector<std::shared_ptr<const RememberedTurn>> TurnMemory::find(uint64_t scope, const MessageKey& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::shared_ptr<const RememberedTurn>> out;
  auto it = by_key_.find(scoped(scope, key));
  if (it == by_key_.end()) return out;
  for (Lru::iterator e : it->second) {
    out.push_back(e->turn);
    lru_.splice(lru_.begin(), lru_, e);  // iterators stay valid
  }
  return out;
}

TurnMemoryStats TurnMemory::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return TurnMemoryStats{lru_.size(), n_tokens_, n_evicted_};
}

}  // namespace tern::server
