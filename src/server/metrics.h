// Prometheus text exposition for GET /metrics: the engine's counters and gauges plus the HTTP
// layer's request counts by endpoint and status.
#pragma once

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

struct ServerGauges {
  int open_connections = 0;
  int active_requests = 0;  // generations in flight (queued or running)
};

std::string render_metrics(const EngineMetrics& engine, const RequestCounters& requests, const ServerGauges& gauges);

}  // namespace tern::server
