// tern: the command-line entry point. Each subcommand is registered from its own file.
#include <cstdio>
#include <cstdlib>

#include "cli/commands.h"

#ifndef TERN_SOURCE_DIR
#define TERN_SOURCE_DIR "."
#endif

namespace tern::cli {
std::string default_model_path() {
  if (const char* env = std::getenv("TERN_MODEL"); env != nullptr && *env != '\0') return env;
  return std::string(TERN_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}
}  // namespace tern::cli

int main(int argc, char** argv) {
  CLI::App app{"tern: an LLM inference engine for agentic workloads"};
  app.require_subcommand(1);
  tern::cli::CommandRunner run;
  tern::cli::register_inspect(app, &run);
  tern::cli::register_synth(app, &run);
  tern::cli::register_tokenize(app, &run);
  tern::cli::register_run(app, &run);
  tern::cli::register_chat(app, &run);
  tern::cli::register_bench(app, &run);
  tern::cli::CommandRunner replay_run;
  tern::cli::register_bench_replay(*app.get_subcommand("bench"), &replay_run);
  tern::cli::CommandRunner serve_bench_run;
  tern::cli::register_bench_serve(*app.get_subcommand("bench"), &serve_bench_run);
  tern::cli::CommandRunner kv_run;
  tern::cli::register_bench_kv(*app.get_subcommand("bench"), &kv_run);
  tern::cli::register_render(app, &run);
  tern::cli::register_serve(app, &run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (replay_run) run = replay_run;  // CLI11 runs the parent's callback after the nested one's
  if (serve_bench_run) run = serve_bench_run;
  if (kv_run) run = kv_run;
  return run ? run() : 2;
}
