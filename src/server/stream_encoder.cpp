#include "server/stream_encoder.h"

namespace tern::server {

std::string sse_event(std::string_view name, std::string_view data) {
  std::string s;
  if (!name.empty()) s.append("event: ").append(name).append("\n");
  return s.append("data: ").append(data).append("\n\n");
}

}  // namespace tern::server
