#include "engine/stop_matcher.h"

#include <algorithm>

namespace tern {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopMatcher::feed(std::string_view delta) {
  if (stopped_) return {};
  pending_.append(delta);
  // Earliest complete stop string wins.
  size_t cut = std::string::npos;
  for (const auto& s : stops_) cut = std::min(cut, pending_.find(s));
  if (cut != std::string::npos) {
    std::string out = pending_.substr(0, cut);
    text_ += out;
    pending_.clear();
    stopped_ = true;
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t n = std::min(s.size() - 1, pending_.size()); n > hold; --n) {
      if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  text_ += out;
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(pending_);
  text_ += out;
  return out;
}

}  // namespace tern
