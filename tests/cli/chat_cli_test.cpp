// `tern chat` through piped stdin: answers stream to stdout, and the second turn reuses the
// first turn's KV (the stats line on stderr shows cached tokens).
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>
#include <string>

#include "../common/model_fixture.h"

namespace tern {
namespace {

std::string run_command(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

TEST(ChatCli, SecondTurnReusesTheFirstTurnsTokens) {
  const std::string cmd = std::string("printf 'What is 2+2?\\nAnd times 3?\\n/stats\\n' | TERN_MODEL='") +
                          testing::default_model_path() + "' '" + TERN_BINARY_DIR + "/tern' chat -n 16 -t 2 2>&1";
  const std::string out = run_command(cmd);
  std::smatch m;
  const std::regex turn(R"(\[(\d+) cached \+ (\d+) new tokens)");
  std::vector<std::pair<int, int>> turns;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), turn); it != std::sregex_iterator(); ++it)
    turns.emplace_back(std::stoi((*it)[1]), std::stoi((*it)[2]));
  ASSERT_EQ(turns.size(), 2u) << out;
  EXPECT_EQ(turns[0].first, 0) << out;
  // Turn 2's prompt is turn 1's prompt + answer + the new question: most of it is cached.
  EXPECT_GT(turns[1].first, turns[0].second) << out;
  EXPECT_LT(turns[1].second, 40) << out;
  EXPECT_NE(out.find("[last turn: prompt"), std::string::npos) << out;
}

TEST(ChatCli, RejectsAMissingModelClearly) {
  const std::string out =
      run_command("printf 'hi\\n' | '" + std::string(TERN_BINARY_DIR) + "/tern' chat -m /nonexistent.gguf 2>&1; echo rc=$?");
  EXPECT_NE(out.find("cannot open '/nonexistent.gguf'"), std::string::npos) << out;
  EXPECT_NE(out.find("rc=1"), std::string::npos) << out;
}

}  // namespace
}  // namespace tern
