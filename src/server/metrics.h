// Prometheus text exposition for GET /metrics: the engine's counters and gauges plus the HTTP
// layer's request counts by endpoint and status.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "engine/engine.h"

namespace tern::server {

// Answered requests by (endpoint, HTTP status). Endpoints are the fixed routes (plus "other"), so
// the label set stays bounded whatever paths clients send.
class RequestCounters {
 public:
  void count(const std::string& endpoint, int status);
  std::map<std::pair<std::string, int>, int64_t> snapshot() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> counts_;
};

// Cache-stable history (turn_memory.h): how often remembered turns were spliced into prompts.
struct HistoryCounters {
  std::atomic<int64_t> remembered{0};      // assistant messages of requests found in the turn memory
  std::atomic<int64_t> spliced{0};         // of those, spliced in as the model's own tokens
  std::atomic<int64_t> verified{0};        // of those, after exactly the prompt they were written after
  std::atomic<int64_t> spliced_tokens{0};
};

struct ServerGauges {
  int open_connections = 0;
  int active_requests = 0;  // generations in flight (queued or running)
  size_t history_turns = 0;   // turns the turn memory holds
  size_t history_tokens = 0;  // their output tokens
};

std::string render_metrics(const EngineMetrics& engine, const RequestCounters& requests, const ServerGauges& gauges,
                           const HistoryCounters& history);

}  // namespace tern::server
