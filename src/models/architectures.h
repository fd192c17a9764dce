// Factories of the supported architectures, one per file (llama.cpp, qwen2.cpp, qwen3.cpp).
// registry.cpp maps general.architecture to these.
#pragma once

#include <memory>

#include "models/model.h"

namespace tern {

using ModelFactory = Result<std::unique_ptr<Model>> (*)(std::shared_ptr<const gguf::File> file, Backend& backend,
                                                        const ModelConfig& config, const ModelOptions& options);

Result<std::unique_ptr<Model>> make_llama(std::shared_ptr<const gguf::File> file, Backend& backend,
                                          const ModelConfig& config, const ModelOptions& options);
Result<std::unique_ptr<Model>> make_qwen2(std::shared_ptr<const gguf::File> file, Backend& backend,
                                          const ModelConfig& config, const ModelOptions& options);
Result<std::unique_ptr<Model>> make_qwen3(std::shared_ptr<const gguf::File> file, Backend& backend,
                                          const ModelConfig& config, const ModelOptions& options);

}  // namespace tern
