// Tracks whether generated text is inside a <think> block and how many tokens it has spent
// there, for the thinking budget (GenerateOptions::think_budget_tokens). Text-based, so it works
// whether the markers are single special tokens or spelled out over several.
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace tern {

inline std::string_view trim_space(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

class ThinkTracker {
 public:
  ThinkTracker(std::string_view open, std::string_view close, bool inside)
      : open_(trim_space(open)), close_(trim_space(close)), inside_(inside) {}
  void on_text(std::string_view delta) {
    tail_.append(delta);
    if (tail_.size() > 256) tail_.erase(0, tail_.size() - 64);
    if (inside_ && !close_.empty() && tail_.find(close_) != std::string::npos) {
      inside_ = false;
      tail_.clear();
    } else if (!inside_ && !open_.empty() && tail_.find(open_) != std::string::npos) {
      inside_ = true;
      tokens_ = 0;
      tail_.clear();
    }
  }
  void on_token() {
    if (inside_) ++tokens_;
  }
  bool inside() const { return inside_; }
  int tokens() const { return tokens_; }

 private:
  std::string open_, close_, tail_;
  bool inside_;
  int tokens_ = 0;
};

}  // namespace tern
