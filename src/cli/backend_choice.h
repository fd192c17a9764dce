// The --backend option of the commands that run a model: which Backend to construct.
// "cpu" is always there; "cuda" when tern was built with the CUDA backend (TERN_CUDA).
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "ops/backend.h"

namespace tern::cli {

// The backend named `name` ("cpu" or "cuda"). n_threads: CPU worker threads (ignored by CUDA;
// must be > 0). Error naming the choices when `name` is unknown, or when CUDA was built in but
// has no usable device.
Result<std::unique_ptr<Backend>> make_backend(std::string_view name, int n_threads);

// Names make_backend accepts in this build, for --help and validation.
std::vector<std::string_view> backend_names();

}  // namespace tern::cli
