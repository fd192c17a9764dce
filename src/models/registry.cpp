// general.architecture -> factory. Adding an architecture is one file plus one line here.
#include <optional>
#include <string>

#include "core/bytes.h"
#include "models/architectures.h"

namespace tern {
namespace {

struct Entry {
  const char* arch;
  ModelFactory make;
};

constexpr Entry kArchitectures[] = {
    {"llama", make_llama},
    {"qwen2", make_qwen2},
    {"qwen3", make_qwen3},
};

}  // namespace

Result<std::unique_ptr<Model>> load_model(std::shared_ptr<const gguf::File> file, Backend& backend,
                                          const ModelOptions& options) {
  TERN_ASSIGN_OR_RETURN(ModelConfig config, read_model_config(*file));
  for (const Entry& e : kArchitectures) {
    if (config.arch != e.arch) continue;
    // A device that cannot hold the weights is told before any is uploaded (an upload that still
    // runs out, beside other users of the device, names its tensor: DecoderModel::weight).
    if (const std::optional<MemoryInfo> mem = backend.holds_weights() ? backend.memory_info() : std::nullopt) {
      const uint64_t need = file->tensor_bytes();
      if (need > mem->free_bytes) {
        return error("model: the weights need " + human_bytes(need) + " of " + std::string(backend.name()) +
                     " device memory; " + human_bytes(mem->free_bytes) + " of its " + human_bytes(mem->total_bytes) +
                     " are free");
      }
    }
    return e.make(std::move(file), backend, config, options);
  }
  std::string known;
  for (const Entry& e : kArchitectures) known += std::string(known.empty() ? "" : ", ") + e.arch;
  return error("model: unsupported architecture '" + config.arch + "' (supported: " + known + ")");
}

}  // namespace tern
