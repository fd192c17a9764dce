#include "server/metrics.h"

#include <cstdio>

namespace tern::server {

void RequestCounters::count(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++counts_[{endpoint, status}];
}

std::map<std::pair<std::string, int>, int64_t> RequestCounters::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_;
}

namespace {

void metric(std::string& out, const char* name, const char* type, const char* help, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", value);
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + buf + "\n";
}

}  // namespace

std::string render_metrics(const EngineMetrics& m, const RequestCounters& requests, const ServerGauges& gauges,
                           const HistoryCounters& history) {
  std::string out;
  out += "# HELP tern_http_requests_total HTTP requests answered, by endpoint and status.\n";
  out += "# TYPE tern_http_requests_total counter\n";
  for (const auto& [key, n] : requests.snapshot())
    out += "tern_http_requests_total{endpoint=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " +
           std::to_string(n) + "\n";
  out += "# HELP tern_engine_requests_total Engine requests by outcome.\n# TYPE tern_engine_requests_total counter\n";
  out += "tern_engine_requests_total{outcome=\"finished\"} " + std::to_string(m.requests_finished.load()) + "\n";
  out += "tern_engine_requests_total{outcome=\"failed\"} " + std::to_string(m.requests_failed.load()) + "\n";
  out += "tern_engine_requests_total{outcome=\"rejected\"} " + std::to_string(m.requests_rejected.load()) + "\n";
  out += "tern_engine_requests_total{outcome=\"cancelled\"} " + std::to_string(m.requests_cancelled.load()) + "\n";

  const double prompt = static_cast<double>(m.prompt_tokens.load());
  const double cached = static_cast<double>(m.cached_tokens.load());
  const double generated = static_cast<double>(m.generated_tokens.load());
  const double prefill_s = m.prefill_seconds.load(), decode_s = m.decode_seconds.load();
  metric(out, "tern_prompt_tokens_total", "counter", "Prompt tokens of finished requests.", prompt);
  metric(out, "tern_cached_tokens_total", "counter", "Prompt tokens whose KV came from the prefix cache.", cached);
  metric(out, "tern_restored_tokens_total", "counter",
         "Prompt tokens (part of tern_cached_tokens_total) restored from the host-RAM or SSD KV tier.",
         static_cast<double>(m.restored_tokens.load()));
  metric(out, "tern_generated_tokens_total", "counter", "Generated tokens.", generated);
  metric(out, "tern_engine_preemptions_total", "counter", "Requests preempted because the KV pool ran out.",
         static_cast<double>(m.requests_preempted.load()));
  metric(out, "tern_engine_steps_total", "counter", "Forward passes (one per engine step, every running request in it).",
         static_cast<double>(m.steps.load()));
  metric(out, "tern_engine_step_tokens_total", "counter", "Tokens over all forward passes (mean batch = / steps).",
         static_cast<double>(m.step_tokens.load()));
  const double prefilled = static_cast<double>(m.prefill_step_tokens.load());
  const double decoded = static_cast<double>(m.decode_step_tokens.load());
  metric(out, "tern_prefill_seconds_total", "counter",
         "Engine wall seconds of steps that computed prompt tokens (decode rows beside them included).", prefill_s);
  metric(out, "tern_decode_seconds_total", "counter", "Engine wall seconds of decode-only steps.", decode_s);
  metric(out, "tern_prefill_step_tokens_total", "counter", "Prompt tokens computed by the engine (preemptions recompute).",
         prefilled);
  metric(out, "tern_decode_step_tokens_total", "counter", "Tokens generated in decode-only steps.", decoded);
  metric(out, "tern_prefill_tokens_per_second", "gauge", "Prompt tokens computed per prefill-step second, lifetime.",
         prefill_s > 0 ? prefilled / prefill_s : 0.0);
  metric(out, "tern_decode_tokens_per_second", "gauge",
         "Tokens generated per decode-only-step second, lifetime (all running requests together).",
         decode_s > 0 ? decoded / decode_s : 0.0);
  metric(out, "tern_spec_draft_tokens_proposed_total", "counter", "Speculative draft tokens proposed.",
         static_cast<double>(m.drafts_proposed.load()));
  metric(out, "tern_spec_draft_tokens_accepted_total", "counter", "Speculative draft tokens accepted.",
         static_cast<double>(m.drafts_accepted.load()));
  metric(out, "tern_queue_depth", "gauge", "Requests waiting for the engine.", m.queue_depth.load());
  metric(out, "tern_requests_running", "gauge", "Requests the engine is running.", m.running.load());
  metric(out, "tern_kv_blocks_used", "gauge", "KV blocks held by running requests.", m.kv_blocks_used.load());
  metric(out, "tern_kv_blocks_free", "gauge", "KV blocks free or holding evictable cached prefixes.", m.kv_blocks_free.load());
  metric(out, "tern_kv_evictions_total", "counter", "Cached KV blocks evicted to make room.",
         static_cast<double>(m.kv_evictions.load()));
  metric(out, "tern_http_connections_open", "gauge", "Open HTTP connections.", gauges.open_connections);
  metric(out, "tern_http_generations_active", "gauge", "Generations in flight from HTTP requests.", gauges.active_requests);
  metric(out, "tern_history_turns", "gauge", "Generated assistant turns remembered for splicing into later prompts.",
         static_cast<double>(gauges.history_turns));
  metric(out, "tern_history_tokens", "gauge", "Output tokens of the remembered turns.", static_cast<double>(gauges.history_tokens));
  metric(out, "tern_history_remembered_total", "counter", "Assistant messages in requests that were found among remembered turns.",
         static_cast<double>(history.remembered.load()));
  metric(out, "tern_history_spliced_total", "counter", "Remembered turns spliced into prompts as the model's own tokens.",
         static_cast<double>(history.spliced.load()));
  metric(out, "tern_history_verified_total", "counter", "Spliced turns that followed exactly the prompt they were generated after.",
         static_cast<double>(history.verified.load()));
  metric(out, "tern_history_spliced_tokens_total", "counter", "Tokens spliced in from remembered turns.",
         static_cast<double>(history.spliced_tokens.load()));
  return out;
}

}  // namespace tern::server
