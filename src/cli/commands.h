// Subcommands of the `tern` executable. Each lives in its own cmd_<name>.cpp and registers a
// CLI11 subcommand; main.cpp lists them. A command returns the process exit code.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace tern::cli {

// Sets *run to the function main() calls if this subcommand was chosen.
using CommandRunner = std::function<int()>;
void register_inspect(CLI::App& app, CommandRunner* run);
void register_synth(CLI::App& app, CommandRunner* run);
void register_tokenize(CLI::App& app, CommandRunner* run);
void register_run(CLI::App& app, CommandRunner* run);
void register_chat(CLI::App& app, CommandRunner* run);
void register_bench(CLI::App& app, CommandRunner* run);
// `tern bench replay`, nested under the bench subcommand.
void register_bench_replay(CLI::App& bench, CommandRunner* run);
// `tern bench serve`, nested under the bench subcommand: agent sessions replayed concurrently.
void register_bench_serve(CLI::App& bench, CommandRunner* run);
// `tern bench kv`, nested under the bench subcommand: KV tier restore vs re-prefill.
void register_bench_kv(CLI::App& bench, CommandRunner* run);
void register_render(CLI::App& app, CommandRunner* run);
void register_serve(CLI::App& app, CommandRunner* run);

// The model used when -m is not given: models/SmolLM2-135M-Instruct.Q4_1.gguf next to the
// source tree this binary was built from, or $TERN_MODEL when set.
std::string default_model_path();

}  // namespace tern::cli
