// `tern bench replay --dump-prompts`: one JSON line per turn with the turn's prompt ids, each
// turn's prompt extending the one before within a session (teacher forcing), so a peer server
// replayed with them (tools/replay_peer.py) sees exactly the tokens tern saw.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../common/model_fixture.h"

namespace tern {
namespace {

struct DumpedTurn {
  std::string session;
  int turn = -1;
  std::string ids;  // the comma-separated ids inside "prompt": [...]
};

// Parses the dump's fixed line shape: {"session": "S", "turn": N, "prompt": [a,b,...]}.
std::vector<DumpedTurn> read_dump(const std::string& path) {
  std::vector<DumpedTurn> turns;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    DumpedTurn t;
    const size_t s0 = line.find("\"session\": \"") + 12, s1 = line.find('"', s0);
    t.session = line.substr(s0, s1 - s0);
    t.turn = std::stoi(line.substr(line.find("\"turn\": ") + 8));
    const size_t p0 = line.find("\"prompt\": [") + 11, p1 = line.find(']', p0);
    t.ids = line.substr(p0, p1 - p0);
    turns.push_back(t);
  }
  return turns;
}

TEST(ReplayDump, WritesEveryTurnAndEachPromptExtendsThePreviousOne) {
  // Per process: two builds' test runs on one machine must not share it.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tern_replay_dump_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string sessions = (dir / "sessions.jsonl").string(), dump = (dir / "prompts.jsonl").string();
  {
    std::ofstream f(sessions);
    f << R"({"id": "a", "messages": [{"role": "system", "content": "You run shell commands."},)"
      << R"({"role": "user", "content": "List the files."}, {"role": "assistant", "content": "ls -la"},)"
      << R"({"role": "user", "content": "total 0"}, {"role": "assistant", "content": "cat README"},)"
      << R"({"role": "user", "content": "No such file"}]})" << "\n";
    f << R"({"id": "b", "messages": [{"role": "system", "content": "You run shell commands."},)"
      << R"({"role": "user", "content": "Print the date."}]})" << "\n";
  }
  std::filesystem::remove(dump);
  const std::string cmd = "'" + std::string(TERN_BINARY_DIR) + "/tern' bench replay -m '" +
                          testing::default_model_path() + "' -t 1 --sessions '" + sessions + "' --dump-prompts '" +
                          dump + "' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  const std::vector<DumpedTurn> turns = read_dump(dump);
  ASSERT_EQ(turns.size(), 4u);  // session a: 3 user turns, session b: 1
  EXPECT_EQ(turns[0].session, "a");
  EXPECT_EQ(turns[2].turn, 2);
  EXPECT_EQ(turns[3].session, "b");
  EXPECT_EQ(turns[3].turn, 0);
  for (size_t i = 1; i < 3; ++i) {
    ASSERT_GT(turns[i].ids.size(), turns[i - 1].ids.size());
    EXPECT_EQ(turns[i].ids.compare(0, turns[i - 1].ids.size() + 1, turns[i - 1].ids + ","), 0)
        << "turn " << i << " does not extend turn " << i - 1;
  }
  // Both sessions share the system prompt, so their first prompts share a prefix but differ.
  EXPECT_NE(turns[3].ids, turns[0].ids);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tern
