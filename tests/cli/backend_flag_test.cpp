// Every command that runs a model takes --backend (cli/backend_choice.h), so the server, chat and
// the benchmarks run on the GPU exactly as `tern run` does; an unknown backend is a usage error
// that names the choices.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace tern {
namespace {

struct Output {
  int status = -1;
  std::string text;
};

Output run_tern(const std::string& args) {
  const std::string cmd = "'" + std::string(TERN_BINARY_DIR) + "/tern' " + args + " 2>&1 < /dev/null";
  Output out;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return out;
  std::array<char, 4096> buf;
  for (size_t n; (n = fread(buf.data(), 1, buf.size(), pipe)) > 0;) out.text.append(buf.data(), n);
  const int status = pclose(pipe);
  out.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

TEST(BackendFlag, EveryModelCommandTakesIt) {
  for (const char* command : {"run", "chat", "serve", "bench replay", "bench serve", "bench kv"}) {
    SCOPED_TRACE(command);
    const Output help = run_tern(std::string(command) + " --help");
    EXPECT_EQ(help.status, 0) << help.text;
    EXPECT_NE(help.text.find("--backend"), std::string::npos) << help.text;
    const Output bad = run_tern(std::string(command) + " --backend bogus");
    EXPECT_NE(bad.status, 0);
    EXPECT_NE(bad.text.find("--backend"), std::string::npos) << bad.text;  // names the option,
    EXPECT_NE(bad.text.find("bogus"), std::string::npos) << bad.text;      // the value
    EXPECT_NE(bad.text.find("cpu"), std::string::npos) << bad.text;        // and the choices
  }
}

// And --act-bits, the precision of the activations that meet quantized weights: 8 or 16.
TEST(BackendFlag, EveryModelCommandTakesActBits) {
  for (const char* command : {"run", "chat", "serve", "bench replay", "bench serve", "bench kv"}) {
    SCOPED_TRACE(command);
    const Output help = run_tern(std::string(command) + " --help");
    EXPECT_NE(help.text.find("--act-bits"), std::string::npos) << help.text;
    const Output bad = run_tern(std::string(command) + " --act-bits 12");
    EXPECT_NE(bad.status, 0);
    EXPECT_NE(bad.text.find("--act-bits"), std::string::npos) << bad.text;
    EXPECT_NE(bad.text.find("12"), std::string::npos) << bad.text;
  }
}

// A quantized model runs at either precision (the default model is Q4_1), and the run's stats
// line names the precision the backend took.
TEST(BackendFlag, RunAtEitherPrecision) {
  const std::string model = TERN_DEFAULT_MODEL;
  if (FILE* f = std::fopen(model.c_str(), "rb")) {
    std::fclose(f);
  } else {
    GTEST_SKIP() << "default model " << model << " not here";
  }
  for (const char* bits : {"16", "8"}) {
    SCOPED_TRACE(bits);
    const Output out = run_tern("run -m '" + model + "' -p 'The capital of France is' -n 4 -t 2 --act-bits " + bits);
    EXPECT_EQ(out.status, 0) << out.text;
    EXPECT_NE(out.text.find(std::string(bits) + "-bit activations"), std::string::npos) << out.text;
  }
  // A replay's JSON names the backend and its precision, so runs compared later say what produced
  // their texts (bench/gpu/replay_compare.py prints them).
  const std::string sessions =
      (std::filesystem::temp_directory_path() / ("tern_backend_flag_test_" + std::to_string(::getpid()) + ".jsonl")).string();
  {
    std::ofstream f(sessions);
    f << R"({"id": "a", "messages": [{"role": "user", "content": "Say hi."}]})" << "\n";
  }
  const Output replay = run_tern("bench replay -m '" + model + "' -t 1 --sessions '" + sessions +
                                 "' --max-tokens 2 --no-baseline --json --act-bits 8");
  std::filesystem::remove(sessions);
  EXPECT_EQ(replay.status, 0) << replay.text;
  EXPECT_NE(replay.text.find(R"("backend": "cpu", "activation_bits": 8)"), std::string::npos) << replay.text;
}

}  // namespace
}  // namespace tern
