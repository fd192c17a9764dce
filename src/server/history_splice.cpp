#include "server/history_splice.h"

#include <algorithm>
#include <unordered_map>

#include "chat/json.h"

namespace tern::server {
namespace {

std::string probe_text(size_t message_index) { return "TERNREASONINGPROBE" + std::to_string(message_index) + "Z"; }

// hash_text of T's prefixes of the given lengths, in one pass over T.
std::unordered_map<size_t, uint64_t> prefix_text_hashes(std::string_view text, std::vector<size_t> lengths) {
  std::sort(lengths.begin(), lengths.end());
  std::unordered_map<size_t, uint64_t> out;
  uint64_t h = hash_text({});
  size_t done = 0;
  for (size_t n : lengths) {
    if (n > text.size()) break;
    // Continues FNV-1a from `done` to `n` (hash_text(a + b) == fnv over b starting from hash_text(a)).
    for (; done < n; ++done) {
      h ^= static_cast<unsigned char>(text[done]);
      h *= 0x100000001b3ull;
    }
    out[n] = h;
  }
  return out;
}

// Which hit positions render reasoning: one render with a probe string as every such message's
// reasoning. Absent entries (or a failed render) mean "dropped".
std::vector<bool> reasoning_kept(const chat::ChatTemplate& tmpl, const chat::ChatRequest& request,
                                 std::span<const HistoryHit> hits) {
  std::vector<bool> kept(hits.size(), false);
  bool any = false;
  for (const HistoryHit& h : hits)
    for (const auto& t : h.turns) any = any || t->has_reasoning;
  if (!any) return kept;
  std::vector<chat::Value> messages = request.messages.as_array();
  for (const HistoryHit& h : hits) {
    chat::Object o = messages[h.message_index].as_object();
    o.set("reasoning_content", probe_text(h.message_index));
    messages[h.message_index] = chat::Value::object(std::move(o));
  }
  chat::ChatRequest probe = request;
  probe.messages = chat::Value::array(std::move(messages));
  Result<std::string> text = chat::apply_chat_template(tmpl, probe);
  if (!text.is_ok()) return kept;
  for (size_t i = 0; i < hits.size(); ++i) kept[i] = text.value().find(probe_text(hits[i].message_index)) != std::string::npos;
  return kept;
}

// The end of the prompt the model saw before writing message `index`, when the conversation
// still begins with it: the messages before it rendered with a generation prompt.
std::optional<size_t> rendered_prefix_end(const std::string& rendered, const chat::ChatTemplate& tmpl,
                                          const chat::ChatRequest& request, size_t index) {
  const std::vector<chat::Value>& all = request.messages.as_array();
  chat::ChatRequest prefix = request;
  prefix.messages = chat::Value::array(std::vector<chat::Value>(all.begin(), all.begin() + static_cast<ptrdiff_t>(index)));
  prefix.add_generation_prompt = true;
  Result<std::string> text = chat::apply_chat_template(tmpl, prefix);
  if (!text.is_ok() || !rendered.starts_with(text.value())) return std::nullopt;
  return text.value().size();
}

size_t first_marker(const std::string& text, size_t from, std::span<const std::string> markers) {
  size_t best = std::string::npos;
  for (const std::string& m : markers)
    if (!m.empty()) best = std::min(best, text.find(m, from));
  return best;
}

bool mentions_marker(const chat::Value& message, std::span<const std::string> markers) {
  Result<std::string> json = chat::dump_json(message);
  if (!json.is_ok()) return true;
  for (const std::string& m : markers)
    if (!m.empty() && json.value().find(m) != std::string::npos) return true;
  return false;
}

}  // namespace

SplicedPrompt splice_history(const std::string& rendered, const chat::ChatTemplate& tmpl, const chat::ChatRequest& request,
                             std::span<const HistoryHit> hits, std::span<const std::string> end_markers,
                             const tok::Tokenizer& tokenizer) {
  SplicedPrompt out;
  auto append = [&](std::span<const int32_t> ids) {
    out.tokens.insert(out.tokens.end(), ids.begin(), ids.end());
    out.tokens_hash = hash_tokens(out.tokens_hash, ids);
  };
  if (hits.empty()) {
    append(tokenizer.encode(rendered, /*add_bos_eos=*/false, /*parse_special=*/true));
    return out;
  }

  std::vector<size_t> lengths;
  for (const HistoryHit& h : hits)
    for (const auto& t : h.turns) lengths.push_back(t->prompt_text_bytes);
  const std::unordered_map<size_t, uint64_t> prefix_hashes = prefix_text_hashes(rendered, std::move(lengths));
  const std::vector<bool> keeps_reasoning = reasoning_kept(tmpl, request, hits);
  const std::vector<chat::Value>& messages = request.messages.as_array();

  size_t pos = 0;  // rendered text already tokenized (or replaced)
  for (size_t hi = 0; hi < hits.size(); ++hi) {
    const HistoryHit& hit = hits[hi];
    if (hit.turns.empty()) continue;
    ++out.stats.n_remembered;
    if (mentions_marker(messages[hit.message_index], end_markers)) continue;

    // Where the model's output began: the prompt text recorded with a candidate turn, else a render.
    std::optional<size_t> start;
    // note: the earliest match, so that a message said twice (the same "OK." in two turns) is
    // not matched to its later occurrence's prompt.
    for (const auto& t : hit.turns) {
      auto it = prefix_hashes.find(t->prompt_text_bytes);
      if (t->prompt_text_bytes >= pos && it != prefix_hashes.end() && it->second == t->prompt_text_hash &&
          (!start || t->prompt_text_bytes < *start))
        start = t->prompt_text_bytes;
    }
    if (!start) start = rendered_prefix_end(rendered, tmpl, request, hit.message_index);
    if (!start || *start < pos) continue;
    const size_t end = first_marker(rendered, *start, end_markers);
    if (end == std::string::npos) continue;

    const std::vector<int32_t> segment =
        tokenizer.encode(std::string_view(rendered).substr(pos, *start - pos), /*add_bos_eos=*/false, /*parse_special=*/true);
    const uint64_t hash_before = hash_tokens(out.tokens_hash, segment);
    // Prefer the turn generated after exactly these tokens; else one written after this text;
    // else the most recent one.
    std::shared_ptr<const RememberedTurn> turn = hit.turns.front();
    for (const auto& t : hit.turns) {
      if (t->prompt_text_bytes == *start) {
        turn = t;
        break;
      }
    }
    bool verified = false;
    for (const auto& t : hit.turns) {
      if (t->prompt_tokens_hash == hash_before) {
        turn = t;
        verified = true;
        break;
      }
    }
    if (turn->has_reasoning && !keeps_reasoning[hi]) {
      // The template drops this turn's reasoning, so the cache ends here anyway; cutting the
      // segment where the model's output began still keeps the whole prompt it was written
      // after (its last token would otherwise merge with the template's text, e.g. "\n\n").
      append(segment);
      pos = *start;
      continue;
    }

    append(segment);
    append(turn->output_tokens);
    pos = end;
    ++out.stats.n_spliced;
    out.stats.n_verified += verified ? 1 : 0;
    out.stats.n_spliced_tokens += static_cast<int>(turn->output_tokens.size());
  }
  append(tokenizer.encode(std::string_view(rendered).substr(pos), /*add_bos_eos=*/false, /*parse_special=*/true));
  return out;
}

}  // namespace tern::server
