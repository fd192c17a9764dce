// `tern inspect MODEL`: what a GGUF file holds. Header facts, every metadata key with its type
// and a one-line value (arrays summarized, long strings cut unless --full), then the tensor
// table and the total tensor bytes. A file the reader rejects prints the reader's message on
// stderr and exits 1.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "core/bytes.h"
#include "formats/gguf.h"

namespace tern::cli {
namespace {

struct InspectOptions {
  std::string model_path;
  bool no_tensors = false;  // skip the tensor table (totals are still printed)
  bool full = false;        // print long strings (chat templates) whole
};

constexpr size_t kArrayItemsShown = 6;
constexpr size_t kStringBytesShown = 80;

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void print_metadata(const gguf::File& file, const InspectOptions& opts) {
  size_t key_width = 0;
  for (const auto& kv : file.metadata()) key_width = std::max(key_width, kv.first.size());
  key_width = std::min<size_t>(key_width, 48);
  std::printf("metadata (%zu keys):\n", file.metadata().size());
  for (const auto& [key, value] : file.metadata()) {
    const char* type = gguf::value_type_name(value.type);  // arrays show their item type in the summary
    const std::string text = gguf::summarize(value, kArrayItemsShown, opts.full ? 0 : kStringBytesShown);
    std::printf("  %-*s %-7s %s\n", static_cast<int>(key_width), key.c_str(), type, text.c_str());
  }
}

void print_tensors(const gguf::File& file) {
  size_t name_width = 4;
  for (const auto& t : file.tensors()) name_width = std::max(name_width, t.name.size());
  name_width = std::min<size_t>(name_width, 64);
  std::printf("tensors (%zu):\n", file.tensors().size());
  if (file.tensors().empty()) return;
  std::printf("  %5s  %-*s  %-5s  %-20s  %12s  %12s\n", "#", static_cast<int>(name_width), "name", "type", "shape",
              "bytes", "offset");
  for (size_t i = 0; i < file.tensors().size(); ++i) {
    const gguf::TensorInfo& t = file.tensors()[i];
    std::printf("  %5zu  %-*s  %-5s  %-20s  %12" PRIu64 "  %12" PRIu64 "\n", i, static_cast<int>(name_width),
                t.name.c_str(), std::string(dtype_name(t.type)).c_str(), shape_string(t.shape).c_str(), t.n_bytes,
                t.offset);
  }
}

int run_inspect(const InspectOptions& opts) {
  Result<gguf::File> opened = gguf::File::open(opts.model_path);
  if (!opened.is_ok()) {
    std::fprintf(stderr, "tern inspect: %s\n", opened.status().message().c_str());
    return 1;
  }
  const gguf::File& file = *opened;
  const uint64_t n_tensor_bytes = file.tensor_bytes();

  std::printf("file:        %s (%s)\n", file.path().c_str(), human_bytes(file.file_size()).c_str());
  std::printf("version:     %u\n", file.version());
  std::printf("alignment:   %" PRIu64 "\n", file.alignment());
  std::printf("data offset: %" PRIu64 "\n", file.data_offset());
  std::printf("tensors:     %zu\n", file.tensors().size());
  print_metadata(file, opts);
  if (!opts.no_tensors) print_tensors(file);
  std::printf("total tensor bytes: %" PRIu64 " (%s)\n", n_tensor_bytes, human_bytes(n_tensor_bytes).c_str());
  return 0;
}

}  // namespace

void register_inspect(CLI::App& app, CommandRunner* run) {
  auto opts = std::make_shared<InspectOptions>();
  opts->model_path = default_model_path();
  auto* cmd = app.add_subcommand("inspect", "Print a GGUF file's header, metadata and tensor table");
  cmd->add_option("model", opts->model_path, "GGUF file")->capture_default_str();
  cmd->add_flag("--no-tensors", opts->no_tensors, "Skip the tensor table");
  cmd->add_flag("--full", opts->full, "Print long strings (e.g. the chat template) in full");
  cmd->callback([run, opts] { *run = [opts] { return run_inspect(*opts); }; });
}

}  // namespace tern::cli
