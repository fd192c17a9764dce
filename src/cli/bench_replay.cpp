// tern bench replay: replays recorded agent sessions (shared/data/agentic/swe-sessions.jsonl)
// the way an agent drives an engine. For turn k of a session the prompt is the chat-templated
// messages[0..k] (ending with a user message); tern generates up to --max-tokens, then the
// recorded assistant message is appended (teacher forcing), so every prompt extends the last.
// Each session is cut off where its prompt no longer fits the context.
//
// Per turn: prompt_tokens, cached_tokens, reusable_tokens (the longest prefix of this prompt that
// anything computed earlier in the replay could have served: the ideal cache), TTFT, decode tok/s
// and draft acceptance. The same sessions run twice in one process: tern as configured, then a
// baseline with prefix reuse and speculation off; the ratios are reported.
//
// Drafters: none, ngram (prompt lookup), suffix (a suffix automaton over the prompt and every
// earlier generation of the replay) and model (--draft-model, same tokenizer). Each is wrapped in
// the speculation cost model (spec/cost_aware_drafter.h) unless --no-cost-model. A turn "quotes
// its context" when at least half of its generated tokens close a 4-gram that occurs earlier in
// the prompt or the output: the turns speculation is for.
#include <algorithm>
#include <cstdio>
#include <unordered_set>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/json.h"
#include "cli/agentic_sessions.h"
#include "cli/backend_choice.h"
#include "cli/commands.h"
#include "cli/kv_tier_flags.h"
#include "cli/model_setup.h"
#include "engine/draft_model_source.h"
#include "engine/session.h"
#include "spec/cost_aware_drafter.h"
#include "spec/ngram_drafter.h"
#include "spec/suffix_drafter.h"

namespace tern::cli {
namespace {

struct ReplayArgs {
  std::string model;
  std::string sessions_path;
  std::string drafter = "ngram";
  std::string draft_model;  // --drafter model
  bool cost_model = true;
  int max_tokens = 16;
  int n_sessions = 6;
  int threads = 0;
  std::string backend = "cpu";  // --backend (cli/backend_choice.h)
  int act_bits = 16;        // --act-bits (cli/backend_choice.h)
  int ctx = 8192;
  bool json = false;
  bool baseline = true;
  // Engine restarts: the device KV pool is dropped (as by a server restart or an idle gap long
  // enough for its blocks to be evicted) between sessions or before every turn. With
  // --disk-cache the SSD tier then serves what it kept.
  std::string restart = "none";  // none | session | turn
  KvTierArgs tiers;
  // Write every turn's prompt ids (JSONL) and stop: the same prompts can then be replayed
  // against another server (tools/replay_peer.py) for a like-for-like comparison.
  std::string dump_prompts;
};

struct TurnRecord {
  std::string session_id;
  int turn = 0;
  int prompt_tokens = 0;
  int cached_tokens = 0;
  int restored_tokens = 0;  // of cached_tokens, restored from host RAM or SSD
  int reusable_tokens = 0;
  double ttft_seconds = 0;
  double decode_tokens_per_second = 0;
  int drafts_proposed = 0;
  int drafts_accepted = 0;
  int generated_tokens = 0;
  double quoted_fraction = 0;  // generated tokens that close a 4-gram seen earlier in the context
  std::string text;
};

constexpr double kQuotingTurn = 0.5;  // quoted_fraction at which a turn counts as quoting

// Fraction of generated tokens (from the 4th on) whose 4-gram ending there occurs earlier in
// prompt + output: how much of the output copies its context.
double quoted_fraction(const std::vector<int32_t>& prompt, const std::vector<int32_t>& generated) {
  constexpr size_t kGram = 4;
  if (generated.size() < kGram) return 0.0;
  std::vector<int32_t> all(prompt);
  all.insert(all.end(), generated.begin(), generated.end());
  auto key = [&](size_t end) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = end - kGram; i < end; ++i) h = (h ^ static_cast<uint32_t>(all[i])) * 1099511628211ull;
    return h;
  };
  std::unordered_set<uint64_t> seen;
  for (size_t e = kGram; e <= prompt.size(); ++e) seen.insert(key(e));
  int quoted = 0, counted = 0;
  for (size_t g = kGram - 1; g < generated.size(); ++g) {
    const uint64_t k = key(prompt.size() + g + 1);
    quoted += seen.count(k) ? 1 : 0;
    ++counted;
    seen.insert(k);
  }
  return counted > 0 ? static_cast<double>(quoted) / counted : 0.0;
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  const size_t m = std::min(a.size(), b.size());
  while (n < m && a[n] == b[n]) ++n;
  return n;
}

struct PassResult {
  std::vector<TurnRecord> turns;
};

// One pass over every conversation. reuse=false, drafter=none gives the baseline. draft may be
// null unless a.drafter == "model".
Result<PassResult> run_pass(LoadedModel& lm, LoadedModel* draft, const chat::ChatTemplate& tmpl,
                            const std::vector<Conversation>& convs, const ReplayArgs& a, bool baseline) {
  PassResult result;
  const tok::Tokenizer& tok = *lm.tokenizer;
  std::vector<std::vector<int32_t>> computed;  // every token sequence resident in KV so far
  auto corpus = std::make_shared<SuffixCorpus>();  // the suffix drafter's memory of the replay
  std::optional<Session> session;
  auto attach_tiers = [&]() -> Status {
    auto described = enable_kv_tiers(a.tiers, lm, *lm.kv);
    return described.is_ok() ? Status::ok() : described.status();
  };
  // A restart: a new device pool (the old one's blocks are gone), with the tiers re-opened.
  auto restart = [&]() -> Status {
    session.reset();
    const KvPoolConfig kc = lm.kv->config();
    lm.kv.reset();  // flushes the SSD tier's write-behind queue
    TERN_ASSIGN_OR_RETURN(lm.kv, KvPool::create(*lm.backend, kc));
    return baseline ? Status::ok() : attach_tiers();
  };
  if (Status st = baseline ? Status::ok() : attach_tiers(); !st.is_ok()) return st;
  bool first_turn_of_replay = true;
  for (const Conversation& conv : convs) {
    if (!baseline && a.restart == "session" && !first_turn_of_replay) TERN_RETURN_IF_ERROR(restart());
    session.emplace(*lm.model, *lm.kv, &tok);
    // One drafter per conversation: the n-gram index is rebuilt from each prompt anyway, the
    // suffix drafter shares the corpus, and the cost model keeps its estimates across turns.
    NgramDrafter ngram;
    SuffixDrafter suffix(corpus);
    std::unique_ptr<DraftModelSource> model_source;
    DraftSource* inner = nullptr;
    if (!baseline) {
      if (a.drafter == "ngram") inner = &ngram;
      if (a.drafter == "suffix") inner = &suffix;
      if (a.drafter == "model") {
        model_source = std::make_unique<DraftModelSource>(*draft->model, *draft->kv, SamplerParams{});
        inner = model_source.get();
      }
    }
    std::unique_ptr<CostAwareDrafter> governed;
    if (inner != nullptr && a.cost_model) governed = std::make_unique<CostAwareDrafter>(*inner);
    DraftSource* drafter = governed ? governed.get() : inner;
    int turn = 0;
    for (const size_t k : user_turns(conv)) {
      TERN_ASSIGN_OR_RETURN(const std::vector<int32_t> prompt, turn_prompt(tmpl, tok, conv, k));
      if (static_cast<int>(prompt.size()) + a.max_tokens > lm.model->n_ctx()) break;  // cut off at the context

      if (!baseline && a.restart == "turn" && !first_turn_of_replay) {
        TERN_RETURN_IF_ERROR(restart());
        session.emplace(*lm.model, *lm.kv, &tok);
      }
      first_turn_of_replay = false;
      TurnRecord r;
      r.session_id = conv.id;
      r.turn = turn++;
      r.prompt_tokens = static_cast<int>(prompt.size());
      size_t reusable = 0;
      for (const auto& seq : computed) reusable = std::max(reusable, common_prefix(seq, prompt));
      r.reusable_tokens = static_cast<int>(std::min(reusable, prompt.size() - 1));

      GenerateOptions o;
      o.max_tokens = a.max_tokens;
      o.reuse_prefix = !baseline;
      o.drafter = drafter;
      TERN_ASSIGN_OR_RETURN(GenResult gen, session->generate(prompt, o));
      r.cached_tokens = gen.stats.cached_tokens;
      r.restored_tokens = gen.stats.restored_tokens;
      r.ttft_seconds = gen.stats.time_to_first_token_seconds;
      const int decoded = std::max(0, gen.stats.generated_tokens - 1);
      const double decode_s = gen.stats.decode_seconds - (gen.stats.time_to_first_token_seconds - gen.stats.prefill_seconds);
      r.decode_tokens_per_second = decoded > 0 && decode_s > 0 ? decoded / decode_s : 0.0;
      r.drafts_proposed = gen.stats.drafts_proposed;
      r.drafts_accepted = gen.stats.drafts_accepted;
      r.generated_tokens = gen.stats.generated_tokens;
      r.quoted_fraction = quoted_fraction(prompt, gen.tokens);
      r.text = gen.text;
      computed.push_back(session->tokens());
      result.turns.push_back(std::move(r));
      std::fprintf(stderr, "\r%s %s turn %d: %d prompt tokens", baseline ? "baseline" : "tern", conv.id.c_str(), turn,
                   static_cast<int>(prompt.size()));
    }
  }
  std::fprintf(stderr, "\r\033[K");
  return result;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

struct Totals {
  long prompt = 0, cached = 0, restored = 0, reusable = 0, generated = 0, proposed = 0, accepted = 0;
  double ttft = 0, decode_tps_sum = 0;
  int turns = 0;
  double mean_decode() const { return turns ? decode_tps_sum / turns : 0.0; }
};

template <typename Keep>
Totals total(const std::vector<TurnRecord>& turns, Keep keep) {
  Totals t;
  for (const auto& r : turns) {
    if (!keep(r)) continue;
    t.prompt += r.prompt_tokens;
    t.cached += r.cached_tokens;
    t.restored += r.restored_tokens;
    t.reusable += r.reusable_tokens;
    t.generated += r.generated_tokens;
    t.proposed += r.drafts_proposed;
    t.accepted += r.drafts_accepted;
    t.ttft += r.ttft_seconds;
    t.decode_tps_sum += r.decode_tokens_per_second;
    ++t.turns;
  }
  return t;
}
Totals total(const std::vector<TurnRecord>& turns) {
  return total(turns, [](const TurnRecord&) { return true; });
}

// The criteria, computed from the two passes (turn i of one is turn i of the other).
struct Verdict {
  double cached_over_reusable = 0;
  int long_turns = 0, long_turns_fast = 0;  // turns past 2k context; those with TTFT speedup >= half the ideal
  int quoting_turns = 0;
  double quoting_decode_speedup = 0;       // mean tok/s on quoting turns, tern / baseline
  double worst_session_decode_speedup = 0;  // min over sessions of mean decode tern / baseline
};

Verdict judge(const std::vector<TurnRecord>& turns, const std::vector<TurnRecord>& base,
              const std::vector<std::string>& session_ids) {
  Verdict v;
  const Totals t = total(turns);
  v.cached_over_reusable = t.reusable > 0 ? static_cast<double>(t.cached) / t.reusable : 1.0;
  double q_tern = 0, q_base = 0;
  for (size_t i = 0; i < turns.size() && i < base.size(); ++i) {
    const TurnRecord& r = turns[i];
    if (r.prompt_tokens > 2048) {
      ++v.long_turns;
      const double ideal = static_cast<double>(r.prompt_tokens) / std::max(1, r.prompt_tokens - r.reusable_tokens);
      const double got = r.ttft_seconds > 0 ? base[i].ttft_seconds / r.ttft_seconds : 0.0;
      v.long_turns_fast += got >= 0.5 * ideal ? 1 : 0;
    }
    if (r.quoted_fraction >= kQuotingTurn && r.decode_tokens_per_second > 0 && base[i].decode_tokens_per_second > 0) {
      ++v.quoting_turns;
      q_tern += r.decode_tokens_per_second;
      q_base += base[i].decode_tokens_per_second;
    }
  }
  v.quoting_decode_speedup = q_base > 0 ? q_tern / q_base : 0.0;
  bool first = true;
  for (const std::string& id : session_ids) {
    auto in = [&id](const TurnRecord& r) { return r.session_id == id; };
    const Totals ts = total(turns, in), tb = total(base, in);
    if (ts.turns == 0 || tb.mean_decode() <= 0) continue;
    const double ratio = ts.mean_decode() / tb.mean_decode();
    v.worst_session_decode_speedup = first ? ratio : std::min(v.worst_session_decode_speedup, ratio);
    first = false;
  }
  return v;
}

// backend: the backend the turns ran on (its name and activation precision go in the header, so
// that runs compared later say what produced their texts).
void print_json(const ReplayArgs& a, const std::string& model, const Backend& backend, const std::vector<TurnRecord>& turns,
                const std::vector<TurnRecord>& base, const std::vector<std::string>& ids, const Verdict& v) {
  std::printf("{\"model\": \"%s\", \"backend\": \"%s\", \"activation_bits\": %d, \"drafter\": \"%s\", "
              "\"cost_model\": %s, \"max_tokens\": %d, \"ctx\": %d, \"turns\": [\n",
              json_escape(model).c_str(), std::string(backend.name()).c_str(), backend.activation_bits(), a.drafter.c_str(),
              a.cost_model ? "true" : "false", a.max_tokens, a.ctx);
  for (size_t i = 0; i < turns.size(); ++i) {
    const auto& r = turns[i];
    const TurnRecord* b = i < base.size() ? &base[i] : nullptr;
    std::printf(
        "  {\"session\": \"%s\", \"turn\": %d, \"prompt_tokens\": %d, \"cached_tokens\": %d, \"restored_tokens\": %d, "
        "\"reusable_tokens\": %d, \"ttft_s\": %.4f, \"baseline_ttft_s\": %.4f, \"decode_tok_s\": %.2f, \"baseline_decode_tok_s\": %.2f, "
        "\"drafts_proposed\": %d, \"drafts_accepted\": %d, \"generated_tokens\": %d, \"quoted_fraction\": %.3f, "
        "\"text\": \"%s\"}%s\n",
        json_escape(r.session_id).c_str(), r.turn, r.prompt_tokens, r.cached_tokens, r.restored_tokens, r.reusable_tokens,
        r.ttft_seconds,
        b ? b->ttft_seconds : 0.0, r.decode_tokens_per_second, b ? b->decode_tokens_per_second : 0.0, r.drafts_proposed,
        r.drafts_accepted, r.generated_tokens, r.quoted_fraction, json_escape(r.text).c_str(),
        i + 1 < turns.size() ? "," : "");
  }
  std::printf("],\n \"sessions\": [\n");
  for (size_t s = 0; s < ids.size(); ++s) {
    auto in = [&](const TurnRecord& r) { return r.session_id == ids[s]; };
    const Totals t = total(turns, in), b = total(base, in);
    std::printf("  {\"session\": \"%s\", \"turns\": %d, \"prompt_tokens\": %ld, \"cached_tokens\": %ld, "
                "\"reusable_tokens\": %ld, \"ttft_s\": %.3f, \"baseline_ttft_s\": %.3f, \"mean_decode_tok_s\": %.2f, "
                "\"baseline_mean_decode_tok_s\": %.2f, \"drafts_proposed\": %ld, \"drafts_accepted\": %ld}%s\n",
                json_escape(ids[s]).c_str(), t.turns, t.prompt, t.cached, t.reusable, t.ttft, b.ttft, t.mean_decode(),
                b.mean_decode(), t.proposed, t.accepted, s + 1 < ids.size() ? "," : "");
  }
  const Totals t = total(turns), b = total(base);
  std::printf("],\n \"total\": {\"restart\": \"%s\", \"turns\": %d, \"prompt_tokens\": %ld, \"cached_tokens\": %ld, "
              "\"restored_tokens\": %ld, \"reusable_tokens\": %ld, "
              "\"ttft_s\": %.3f, \"baseline_ttft_s\": %.3f, \"mean_decode_tok_s\": %.2f, "
              "\"baseline_mean_decode_tok_s\": %.2f, \"drafts_proposed\": %ld, \"drafts_accepted\": %ld, "
              "\"cached_over_reusable\": %.4f, \"long_turns\": %d, \"long_turns_ttft_ok\": %d, \"quoting_turns\": %d, "
              "\"quoting_decode_speedup\": %.3f, \"worst_session_decode_speedup\": %.3f}}\n",
              a.restart.c_str(), t.turns, t.prompt, t.cached, t.restored, t.reusable, t.ttft, b.ttft, t.mean_decode(),
              b.mean_decode(), t.proposed,
              t.accepted, v.cached_over_reusable, v.long_turns, v.long_turns_fast, v.quoting_turns,
              v.quoting_decode_speedup, v.worst_session_decode_speedup);
}

void print_tables(const std::vector<TurnRecord>& turns, const std::vector<TurnRecord>& base,
                  const std::vector<std::string>& ids, const Verdict& v) {
  std::printf("| session | turn | prompt | cached | reusable | TTFT s | base TTFT s | decode tok/s | base decode | accepted/proposed | quoted |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < turns.size(); ++i) {
    const auto& r = turns[i];
    const TurnRecord* br = i < base.size() ? &base[i] : nullptr;
    std::printf("| %s | %d | %d | %d | %d | %.3f | %.3f | %.1f | %.1f | %d/%d | %.2f |\n", r.session_id.c_str(), r.turn,
                r.prompt_tokens, r.cached_tokens, r.reusable_tokens, r.ttft_seconds, br ? br->ttft_seconds : 0.0,
                r.decode_tokens_per_second, br ? br->decode_tokens_per_second : 0.0, r.drafts_accepted,
                r.drafts_proposed, r.quoted_fraction);
  }
  std::printf("\n| session | turns | prompt | cached | reusable | TTFT s | base TTFT s | decode tok/s | base decode | accepted/proposed |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& id : ids) {
    auto in = [&id](const TurnRecord& r) { return r.session_id == id; };
    const Totals t = total(turns, in), b = total(base, in);
    std::printf("| %s | %d | %ld | %ld | %ld | %.2f | %.2f | %.1f | %.1f | %ld/%ld |\n", id.c_str(), t.turns, t.prompt,
                t.cached, t.reusable, t.ttft, b.ttft, t.mean_decode(), b.mean_decode(), t.accepted, t.proposed);
  }
  const Totals t = total(turns), b = total(base);
  std::printf("\n%d turns, %ld prompt tokens: cached %ld (%.1f%%; %ld restored from host RAM/SSD), reusable %ld (%.1f%%), "
              "cached/reusable %.1f%%\n",
              t.turns, t.prompt, t.cached, 100.0 * t.cached / std::max(1L, t.prompt), t.restored, t.reusable,
              100.0 * t.reusable / std::max(1L, t.prompt), 100.0 * v.cached_over_reusable);
  std::printf("total TTFT %.2f s (baseline %.2f s, %.2fx faster); mean decode %.1f tok/s (baseline %.1f, %.2fx); "
              "drafts %ld/%ld accepted\n",
              t.ttft, b.ttft, t.ttft > 0 ? b.ttft / t.ttft : 0.0, t.mean_decode(), b.mean_decode(),
              b.mean_decode() > 0 ? t.mean_decode() / b.mean_decode() : 0.0, t.accepted, t.proposed);
  std::printf("turns past 2k tokens with TTFT speedup >= half the ideal: %d of %d; quoting turns: %d, decode "
              "speedup there %.2fx; worst session decode speedup %.2fx\n",
              v.long_turns_fast, v.long_turns, v.quoting_turns, v.quoting_decode_speedup,
              v.worst_session_decode_speedup);
}

// One JSON line per turn the replay would run: {"session", "turn", "prompt": [ids]}.
Status dump_prompts(const LoadedModel& lm, const chat::ChatTemplate& tmpl, const std::vector<Conversation>& convs,
                    const ReplayArgs& a) {
  std::FILE* f = std::fopen(a.dump_prompts.c_str(), "w");
  if (f == nullptr) return Status::error("--dump-prompts: cannot open " + a.dump_prompts + " for writing");
  int lines = 0;
  for (const Conversation& conv : convs) {
    int turn = 0;
    for (const size_t k : user_turns(conv)) {
      auto prompt = turn_prompt(tmpl, *lm.tokenizer, conv, k);
      if (!prompt.is_ok()) {
        std::fclose(f);
        return prompt.status();
      }
      if (static_cast<int>(prompt.value().size()) + a.max_tokens > lm.model->n_ctx()) break;  // as run_pass
      std::string ids;
      for (const int32_t id : prompt.value()) ids += (ids.empty() ? "" : ",") + std::to_string(id);
      auto session_json = chat::dump_json(chat::Value(conv.id));
      std::fprintf(f, "{\"session\": %s, \"turn\": %d, \"prompt\": [%s]}\n",
                   session_json.is_ok() ? session_json.value().c_str() : "null", turn++, ids.c_str());
      ++lines;
    }
  }
  const bool ok = std::fflush(f) == 0;
  std::fclose(f);
  if (!ok) return Status::error("--dump-prompts: writing " + a.dump_prompts + " failed");
  std::fprintf(stderr, "wrote %d turn prompts to %s\n", lines, a.dump_prompts.c_str());
  return Status::ok();
}

int run_replay(const ReplayArgs& a) {
  ModelSetupOptions so;
  so.path = a.model.empty() ? default_model_path() : a.model;
  so.n_threads = a.threads;
  so.backend = a.backend;
  so.act_bits = a.act_bits;
  so.n_ctx = a.ctx;
  auto loaded = load_for_inference(so);
  if (!loaded.is_ok()) {
    std::fprintf(stderr, "tern bench replay: %s\n", loaded.status().message().c_str());
    return 1;
  }
  LoadedModel& lm = loaded.value();
  std::optional<LoadedModel> draft;
  if (a.drafter == "model") {
    if (a.draft_model.empty()) {
      std::fprintf(stderr, "tern bench replay: --drafter model needs --draft-model PATH\n");
      return 1;
    }
    ModelSetupOptions ds = so;
    ds.path = a.draft_model;
    ds.need_tokenizer = false;
    auto d = load_for_inference(ds);
    if (!d.is_ok()) {
      std::fprintf(stderr, "tern bench replay: draft model: %s\n", d.status().message().c_str());
      return 1;
    }
    if (d.value().model->config().n_vocab != lm.model->config().n_vocab) {
      std::fprintf(stderr, "tern bench replay: the draft model's vocabulary has %d tokens, the model's %d: they must share the tokenizer\n",
                   d.value().model->config().n_vocab, lm.model->config().n_vocab);
      return 1;
    }
    draft = std::move(d.value());
  }
  auto tmpl = load_chat_template(*lm.file);
  if (!tmpl.is_ok()) {
    std::fprintf(stderr, "tern bench replay: %s\n", tmpl.status().message().c_str());
    return 1;
  }
  const std::string path = a.sessions_path.empty() ? default_sessions_path() : a.sessions_path;
  auto convs = read_sessions(path, a.n_sessions);
  if (!convs.is_ok()) {
    std::fprintf(stderr, "tern bench replay: %s\n", convs.status().message().c_str());
    return 1;
  }
  if (!a.dump_prompts.empty()) {
    const Status st = dump_prompts(lm, tmpl.value(), convs.value(), a);
    if (!st.is_ok()) std::fprintf(stderr, "tern bench replay: %s\n", st.message().c_str());
    return st.is_ok() ? 0 : 1;
  }
  auto tern_pass = run_pass(lm, draft ? &*draft : nullptr, tmpl.value(), convs.value(), a, false);
  if (!tern_pass.is_ok()) {
    std::fprintf(stderr, "tern bench replay: %s\n", tern_pass.status().message().c_str());
    return 1;
  }
  // The baseline must not find tern's blocks: a fresh pool.
  std::vector<TurnRecord> base_turns;
  if (a.baseline) {
    KvPoolConfig kc = lm.kv->config();
    lm.kv.reset();
    lm.kv = std::move(KvPool::create(*lm.backend, kc)).value();
    auto base = run_pass(lm, nullptr, tmpl.value(), convs.value(), a, true);
    if (!base.is_ok()) {
      std::fprintf(stderr, "tern bench replay: %s\n", base.status().message().c_str());
      return 1;
    }
    base_turns = std::move(base.value().turns);
  }
  const auto& turns = tern_pass.value().turns;
  std::vector<std::string> ids;
  for (const auto& c : convs.value())
    if (std::any_of(turns.begin(), turns.end(), [&c](const TurnRecord& r) { return r.session_id == c.id; }))
      ids.push_back(c.id);
  const Verdict v = judge(turns, base_turns, ids);
  if (a.json) {
    print_json(a, so.path, *lm.backend, turns, base_turns, ids, v);
  } else {
    print_tables(turns, base_turns, ids, v);
  }
  return 0;
}

}  // namespace

void register_bench_replay(CLI::App& bench, CommandRunner* runner) {
  auto args = std::make_shared<ReplayArgs>();
  auto* cmd = bench.add_subcommand("replay", "replay recorded agent sessions: prefix reuse, TTFT, decode, speculation");
  cmd->add_option("-m,--model", args->model, "GGUF model with a chat template (default: the default model)");
  cmd->add_option("--sessions", args->sessions_path, "sessions JSONL (default: ../shared/data/agentic/swe-sessions.jsonl)");
  cmd->add_option("--drafter", args->drafter, "speculation: none, ngram, suffix or model (default: ngram)")
      ->check(CLI::IsMember({"none", "ngram", "suffix", "model"}));
  cmd->add_option("--draft-model", args->draft_model, "GGUF draft model sharing the tokenizer (--drafter model)");
  cmd->add_flag("!--no-cost-model", args->cost_model, "draft at full width always (no speculation cost model)");
  cmd->add_option("--max-tokens", args->max_tokens, "tokens generated per turn")->check(CLI::Range(1, 4096));
  cmd->add_option("--n-sessions", args->n_sessions, "sessions to replay, from the first")->check(CLI::PositiveNumber);
  cmd->add_option("-t,--threads", args->threads, "threads (default: all cores)")->check(CLI::NonNegativeNumber);
  add_backend_flags(*cmd, args->backend, args->act_bits);
  cmd->add_option("-c,--ctx", args->ctx, "context in tokens; sessions are cut off there")->check(CLI::PositiveNumber);
  cmd->add_flag("--json", args->json, "print JSON (per-turn records with generated text, totals)");
  cmd->add_flag("!--no-baseline", args->baseline, "skip the no-reuse, no-speculation baseline pass");
  cmd->add_option("--restart", args->restart,
                  "drop the device KV pool between sessions or before every turn (a restart or an idle gap)")
      ->check(CLI::IsMember({"none", "session", "turn"}));
  cmd->add_option("--dump-prompts", args->dump_prompts,
                  "write each turn's prompt token ids to FILE (JSONL) and stop (for tools/replay_peer.py)");
  add_kv_tier_flags(*cmd, args->tiers);
  cmd->callback([runner, args] { *runner = [args] { return run_replay(*args); }; });
}

}  // namespace tern::cli
