#include "engine/stop_matcher.h"

#include <gtest/gtest.h>

namespace tern {
namespace {

TEST(StopMatcher, HoldsBackPossiblePrefixAndCutsAtStop) {
  StopMatcher m({"</end>", "STOP"});
  EXPECT_EQ(m.feed("hello </e"), "hello ");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.feed("nd> more"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.text(), "hello ");
}

TEST(StopMatcher, ReleasesFalseAlarmsAndFlushes) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.feed("ST"), "");
  EXPECT_EQ(m.feed("OP?"), "");
  EXPECT_TRUE(m.stopped());
  StopMatcher n({"STOP"});
  EXPECT_EQ(n.feed("STO"), "");
  EXPECT_EQ(n.feed("RE"), "STORE");
  EXPECT_EQ(n.feed("ST"), "");
  EXPECT_EQ(n.flush(), "ST");
  EXPECT_EQ(n.text(), "STOREST");
}

TEST(StopMatcher, ByteAtATimeEqualsWhole) {
  const std::string text = "abc STOPPED def";
  StopMatcher whole({"STOP"}), bytes({"STOP"});
  std::string a = whole.feed(text) + whole.flush();
  std::string b;
  for (char c : text) b += bytes.feed(std::string(1, c));
  b += bytes.flush();
  EXPECT_EQ(a, "abc ");
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace tern
