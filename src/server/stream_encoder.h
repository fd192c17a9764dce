// The dialect seam for streamed answers: one encoder per request turns GenEvents into the bytes
// of that API's Server-Sent Events, keeping whatever state the dialect needs (open content
// blocks, tool-call indices). Non-streamed answers are built from a Completion instead.
#pragma once

#include <cstdint>
#include <string>

#include "server/api_types.h"

namespace tern::server {

// Identity of one response, shared by its chunks.
struct ResponseMeta {
  std::string id;       // "chatcmpl-...", "cmpl-...", "msg_..."
  std::string model;    // as the client named it
  int64_t created = 0;  // unix seconds
};

class StreamEncoder {
 public:
  virtual ~StreamEncoder() = default;
  // SSE text for one event ("" when the dialect sends nothing for it). After kFinished or
  // kError the stream is complete (the encoder writes its terminator then).
  virtual std::string encode(const GenEvent& e) = 0;
  // Sent while nothing else happens for a while (a long prefill); "" when the dialect has none.
  virtual std::string keepalive() { return {}; }
};

// "event: NAME\ndata: JSON\n\n" (name omitted when empty).
std::string sse_event(std::string_view name, std::string_view data);

}  // namespace tern::server
