// `tern synth --preset NAME --type TYPE -o FILE`: writes a random-weight GGUF model with the
// exact shapes of a real one (formats/synth.h). `--list` prints the presets and types.
#include <chrono>
#include <cstdio>
#include <map>
#include <string>

#include "cli/commands.h"
#include "formats/synth.h"

namespace tern::cli {
namespace {

struct SynthCliOptions {
  std::string arch;    // optional cross-check against the preset's architecture
  std::string preset;
  std::string type = "f16";
  std::string out_path;
  uint64_t seed = 0;
  int n_threads = 0;   // 0 = all cores
  bool pure = false;
  bool list = false;
};

void print_presets() {
  std::printf("presets:\n");
  std::printf("  %-14s %-6s %6s %6s %6s %5s %5s %5s %7s %7s %s\n", "name", "arch", "layers", "d", "ff", "heads", "kv",
              "hd", "vocab", "ctx", "notes");
  for (const synth::ModelShape& s : synth::presets()) {
    std::string notes = s.tied_embeddings ? "tied" : "untied";
    if (s.qkv_bias) notes += ", qkv bias";
    if (s.qk_norm) notes += ", qk norm";
    std::printf("  %-14s %-6s %6d %6d %6d %5d %5d %5d %7d %7d %s\n", s.name.c_str(), s.arch.c_str(), s.n_layers,
                s.n_embd, s.n_ff, s.n_heads, s.n_kv_heads, s.head_dim, s.n_vocab, s.n_ctx_train, notes.c_str());
  }
  std::printf("types:");
  for (std::string_view n : synth::quant_mix_names()) std::printf(" %.*s", static_cast<int>(n.size()), n.data());
  std::printf("\n");
}

int run_synth(const SynthCliOptions& o) {
  if (o.list) {
    print_presets();
    return 0;
  }
  const synth::ModelShape* shape = synth::find_preset(o.preset);
  if (shape == nullptr) {
    std::fprintf(stderr, "tern synth: unknown preset '%s' (tern synth --list shows them)\n", o.preset.c_str());
    return 1;
  }
  if (!o.arch.empty() && o.arch != shape->arch) {
    std::fprintf(stderr, "tern synth: --arch %s does not match preset '%s', which is %s\n", o.arch.c_str(),
                 o.preset.c_str(), shape->arch.c_str());
    return 1;
  }
  Result<synth::QuantMix> mix = synth::parse_quant_mix(o.type, o.pure);
  if (!mix.is_ok()) {
    std::fprintf(stderr, "tern synth: %s\n", mix.status().message().c_str());
    return 1;
  }
  if (o.out_path.empty()) {
    std::fprintf(stderr, "tern synth: -o FILE is required\n");
    return 1;
  }

  // Summary of what the file will hold, per type.
  std::map<std::string, std::pair<int, uint64_t>> per_type;  // type -> (tensors, bytes)
  uint64_t total_bytes = 0;
  for (const synth::TensorPlan& t : synth::plan_tensors(*shape, *mix)) {
    int64_t rows = 1;
    for (size_t i = 1; i < t.shape.size(); ++i) rows *= t.shape[i];
    const uint64_t n_bytes = row_bytes(t.type, t.shape[0]) * static_cast<uint64_t>(rows);
    auto& slot = per_type[std::string(dtype_name(t.type))];
    slot.first += 1;
    slot.second += n_bytes;
    total_bytes += n_bytes;
  }

  const auto t0 = std::chrono::steady_clock::now();
  synth::SynthOptions so;
  so.seed = o.seed;
  so.n_threads = o.n_threads;
  if (Status st = synth::write_model(*shape, *mix, so, o.out_path); !st.is_ok()) {
    std::fprintf(stderr, "tern synth: %s\n", st.message().c_str());
    return 1;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s: %s %s (file type %u%s), seed %llu, %.1f MB of tensors in %.1f s\n", o.out_path.c_str(),
              shape->name.c_str(), mix->name.c_str(), static_cast<unsigned>(mix->file_type), mix->pure ? ", pure" : "",
              static_cast<unsigned long long>(o.seed), static_cast<double>(total_bytes) / 1e6, seconds);
  for (const auto& [type, slot] : per_type)
    std::printf("  %-5s %4d tensors %10.1f MB\n", type.c_str(), slot.first, static_cast<double>(slot.second) / 1e6);
  return 0;
}

}  // namespace

void register_synth(CLI::App& app, CommandRunner* run) {
  auto opts = std::make_shared<SynthCliOptions>();
  auto* cmd = app.add_subcommand("synth", "write a random-weight GGUF model with a real model's shapes");
  cmd->add_option("--preset", opts->preset, "model shape (tern synth --list)");
  cmd->add_option("--arch", opts->arch, "architecture; must match the preset's (a cross-check)");
  cmd->add_option("--type", opts->type, "file type as llama-quantize names it: f16, q8_0, q4_k_m, ...")
      ->capture_default_str();
  cmd->add_flag("--pure", opts->pure, "every 2-D weight gets the base type (no llama.cpp mix rules)");
  cmd->add_option("-o,--output", opts->out_path, "output GGUF path");
  cmd->add_option("--seed", opts->seed, "random seed; the same seed gives the same bytes")->capture_default_str();
  cmd->add_option("-t,--threads", opts->n_threads, "threads (0 = all cores)")->capture_default_str();
  cmd->add_flag("--list", opts->list, "list presets and types");
  cmd->callback([run, opts] { *run = [opts] { return run_synth(*opts); }; });
}

}  // namespace tern::cli
