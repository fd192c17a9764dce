// general.architecture -> factory. Adding an architecture is one file plus one line here.
#include <string>

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
    if (config.arch == e.arch) return e.make(std::move(file), backend, config, options);
  }
  std::string known;
  for (const Entry& e : kArchitectures) known += std::string(known.empty() ? "" : ", ") + e.arch;
  return error("model: unsupported architecture '" + config.arch + "' (supported: " + known + ")");
}

}  // namespace tern
