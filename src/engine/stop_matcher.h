// Stop strings over streamed text. feed() returns the text that is safe to emit: everything
// except a tail that could still be the start of a stop string. Once a stop string appears, the
// text before it is released and stopped() turns true; the stop string itself is never emitted.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tern {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Appends decoded text; returns what may be emitted now.
  std::string feed(std::string_view delta);
  // Releases the held-back tail (generation ended without a stop string).
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& text() const { return text_; }  // all emitted text so far

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // not yet emitted
  std::string text_;
  bool stopped_ = false;
};

}  // namespace tern
