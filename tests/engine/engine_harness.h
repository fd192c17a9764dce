// Test helpers for the Engine: requests whose events are collected (per request and in one
// global order across requests), and solo Session references.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"

namespace tern::testing {

// Every event of every request, in the order the engine thread emitted them.
struct EventLog {
  std::mutex mutex;
  std::vector<std::pair<int, EngineEvent::Kind>> order;  // (request id, kind)
};

struct Collected {
  int id = 0;
  std::vector<EngineEvent> events;
  std::promise<void> done;
  // Optional: called on the engine thread after each event is recorded.
  std::function<void(Collected&, const EngineEvent&)> hook;

  const EngineEvent& last() const { return events.back(); }
  std::string text() const {
    std::string t;
    for (const auto& e : events)
      if (e.kind == EngineEvent::Kind::kText) t += e.text;
    return t;
  }
  int count(EngineEvent::Kind kind) const {
    int n = 0;
    for (const auto& e : events) n += e.kind == kind;
    return n;
  }
};

inline EngineRequest collect_request(std::vector<int32_t> prompt, int max_tokens, std::shared_ptr<Collected> sink,
                                     std::shared_ptr<EventLog> log = nullptr, bool speculate = true) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  r.params.max_tokens = max_tokens;
  r.params.speculate = speculate;
  r.on_event = [sink, log](EngineEvent&& e) {
    const bool last = e.kind == EngineEvent::Kind::kFinished || e.kind == EngineEvent::Kind::kError;
    if (log) {
      std::lock_guard<std::mutex> lock(log->mutex);
      log->order.emplace_back(sink->id, e.kind);
    }
    sink->events.push_back(std::move(e));
    if (sink->hook) sink->hook(*sink, sink->events.back());
    if (last) sink->done.set_value();
  };
  return r;
}

}  // namespace tern::testing
